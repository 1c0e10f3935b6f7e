"""Why did it fail? Matches output against the known failure signatures in
recipes/diagnoses.toml and returns cause and fix in plain words."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterable, List, Mapping, Sequence, Tuple

from . import recipes
from .compat import tomllib
from .log_origin import Origin, origin
from .safe_text import visible

# Characters of a line the signatures look at: a failure's message is short and near the
# start of its line; a hostile or broken log's line of megabytes is not searched whole, so
# a pattern with `.*` stays linear in the log's size.
MATCH_LIMIT = 4096

# The first line of hpcwizard's own apply/undo log (a record's .log beside its .toml).
_APPLY_LOG_HEADER = re.compile(r"== hpcwizard (apply|undo) ")
LOG_KINDS = ("job", "apply")


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
    origin: Origin = Origin()  # the instance and rank the line names, where it names them


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
                                       sig.i18n, origin(line)))
    return found


def diagnose_step(lines: Sequence[str]) -> List[Diagnosis]:
    """A failed apply step's output: apply's own signatures first, a job's only when none of
    them fits, so apt's "Could not resolve 'mirror'" is not read as the instances' names."""
    return diagnose(lines, scope="") or diagnose(lines, scope="job")


def is_apply_log(lines: Sequence[str]) -> bool:
    """hpcwizard's own apply/undo log: its first line that is not empty is the run's header."""
    first = next((line for line in lines if line.strip()), "")
    return bool(_APPLY_LOG_HEADER.match(first))


def diagnose_log(lines: Sequence[str], kind: "str | None" = None) -> List[Diagnosis]:
    """A log file's failures. kind "apply" reads it as apply's steps (diagnose_step); "job"
    with a job's signatures only: a job's "Operation not permitted" or "Address already in
    use" is not apply's missing root or taken SSH port. None: "apply" for hpcwizard's own
    apply log, "job" for any other."""
    if kind is None:
        kind = "apply" if is_apply_log(lines) else "job"
    return diagnose_step(lines) if kind == "apply" else diagnose(lines, scope="job")


def explain(sig_id: str, line: str = "") -> Diagnosis:
    """The table's diagnosis for a known signature id (a check that failed without output)."""
    for sig in signatures():
        if sig.id == sig_id:
            return Diagnosis(sig.id, sig.cause, sig.fix, visible(line), sig.i18n)
    raise KeyError(sig_id)
