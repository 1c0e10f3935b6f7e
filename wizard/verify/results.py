"""What a verification found, as data: each Check, and the Report of them all. The CLI
formats them (report_verify.py), the TUI shows them, a record keeps the summary."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from ..diagnose import Diagnosis
from ..log_origin import as_data
from ..hosts import Hosts

PASS, FAIL, SKIP = "pass", "fail", "skip"


@dataclass(frozen=True)
class Check:
    id: str  # stable: "here/sshd", "peer/node2/login", "cluster/mpirun"
    title: str
    status: str  # pass | fail | skip
    command: str = ""  # what ran, as shell text a user can paste
    detail: str = ""  # what was seen (an address, a rate, a host name, a reason to skip)
    explain: str = ""  # for a failure: what it means, in one plain line
    host: str = ""  # the peer this check is about ("" for here and the whole cluster)
    diagnoses: Tuple[Diagnosis, ...] = ()
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return self.status == FAIL

    def to_dict(self) -> Dict[str, object]:
        return {"id": self.id, "title": self.title, "status": self.status,
                "command": self.command, "detail": self.detail, "explain": self.explain,
                "host": self.host, "seconds": round(self.seconds, 3),
                "diagnoses": [{"id": d.id, "cause": d.cause, "fix": d.fix, "line": d.line,
                               "cause_zh": d.i18n.get("zh", {}).get("cause", ""),
                               "fix_zh": d.i18n.get("zh", {}).get("fix", ""),
                               "origin": as_data(d.origin)}
                              for d in self.diagnoses]}


@dataclass(frozen=True)
class Report:
    checks: Tuple[Check, ...]
    hosts: Optional[Hosts]
    seconds: float

    @property
    def ok(self) -> bool:
        return not any(c.failed for c in self.checks)

    @property
    def counts(self) -> Dict[str, int]:
        out = {PASS: 0, FAIL: 0, SKIP: 0}
        for c in self.checks:
            out[c.status] += 1
        return out

    def summary(self) -> Dict[str, object]:
        """What a record keeps of a verification: the outcome, not every command's text."""
        return {"ok": self.ok, "counts": self.counts,
                "hosts": list(self.hosts.names) if self.hosts else [],
                "failed": [c.id for c in self.checks if c.failed]}

    def to_dict(self) -> Dict[str, object]:
        return {"ok": self.ok, "seconds": round(self.seconds, 3), "counts": self.counts,
                "hosts": self.hosts.to_dict() if self.hosts else None,
                "checks": [c.to_dict() for c in self.checks]}
