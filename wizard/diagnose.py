"""Why did it fail? Matches output against the known failure signatures in
recipes/diagnoses.toml and returns cause and fix in plain words."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterable, List, Mapping, Tuple

from . import recipes
from .compat import tomllib
from .safe_text import visible

# Characters of a line the signatures look at: a failure's message is short and near the
# start of its line; a hostile or broken log's line of megabytes is not searched whole, so
# a pattern with `.*` stays linear in the log's size.
MATCH_LIMIT = 4096


@dataclass(frozen=True)
class Signature:
    id: str
    pattern: "re.Pattern[str]"
    cause: str
    fix: str
    i18n: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    scope: str = ""  # "job": a job's log (ssh, mpirun, UCX, NCCL); "": apply's steps


@dataclass(frozen=True)
class Diagnosis:
    id: str
    cause: str
    fix: str
    line: str  # the line of output that matched, as a terminal may show it (safe_text)
    i18n: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


@lru_cache(maxsize=1)
def signatures() -> Tuple[Signature, ...]:
    text = recipes.read_text("diagnoses.toml")
    out = []
    for s in tomllib.loads(text)["signature"]:
        i18n = {"zh": {k[:-3]: v for k, v in s.items() if k.endswith("_zh")}}
        out.append(Signature(s["id"], re.compile(s["pattern"], re.IGNORECASE), s["cause"],
                             s["fix"], i18n, s.get("scope", "")))
    return tuple(out)


def diagnose(lines: Iterable[str], scope: "str | None" = None) -> List[Diagnosis]:
    """Every signature found in lines, once each, in the order they first appear.
    scope="job" looks only for a job's failures (verify), not apply's."""
    found: List[Diagnosis] = []
    seen = set()
    sigs = [s for s in signatures() if scope is None or s.scope == scope]
    for line in lines:
        head = line[:MATCH_LIMIT]
        for sig in sigs:
            if sig.id not in seen and sig.pattern.search(head):
                seen.add(sig.id)
                found.append(Diagnosis(sig.id, sig.cause, sig.fix, visible(line.strip()),
                                       sig.i18n))
    return found


def explain(sig_id: str, line: str = "") -> Diagnosis:
    """The table's diagnosis for a known signature id (a check that failed without output)."""
    for sig in signatures():
        if sig.id == sig_id:
            return Diagnosis(sig.id, sig.cause, sig.fix, visible(line), sig.i18n)
    raise KeyError(sig_id)
