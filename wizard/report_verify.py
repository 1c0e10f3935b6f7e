"""verify's Report as text for a terminal: one line per check, what it ran, and for a
failure the plain line and each diagnosis (cause and fix)."""
from __future__ import annotations

from typing import List

from .verify import FAIL, PASS, Report

_MARK = {PASS: "PASS", FAIL: "FAIL", "skip": "skip"}


def format_report(report: Report, verbose: bool = False) -> str:
    out: List[str] = []
    if report.hosts is None:
        out.append("hosts: none given (--hosts, --hostfile or the platform's variables): "
                   "checked this instance only")
    else:
        out.append(f"hosts from {report.hosts.source}: {', '.join(report.hosts.names)}")
    for c in report.checks:
        line = f"{_MARK[c.status]:4}  {c.title}"
        if c.detail:
            line += f" — {c.detail}"
        out.append(line)
        if c.status == FAIL or verbose:
            if c.command:
                out.append(f"      ran: {c.command}")
        if c.status == FAIL:
            if c.explain:
                out.append(f"      {c.explain}")
            for d in c.diagnoses:
                out.append(f"      cause: {d.cause}")
                out.append(f"      fix:   {d.fix}")
    n = report.counts
    out.append(f"{n[PASS]} passed, {n[FAIL]} failed, {n['skip']} skipped "
               f"in {report.seconds:.1f} s")
    return "\n".join(out)
