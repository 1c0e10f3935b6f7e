"""verify's Report as text for a terminal: one line per check, what it ran, and for a
failure the plain line and each diagnosis (cause and fix)."""
from __future__ import annotations

from typing import List

from .i18n import N_, _, field, ljust, width
from .verify import FAIL, PASS, Report

_MARK = {PASS: N_("PASS"), FAIL: N_("FAIL"), "skip": N_("skip")}


def format_report(report: Report, verbose: bool = False) -> str:
    out: List[str] = []
    if report.hosts is None:
        out.append(_("hosts: none given (--hosts, --hostfile or the platform's variables): "
                     "checked this instance only"))
    else:
        out.append(_("hosts from {source}: {names}").format(
            source=report.hosts.source, names=", ".join(report.hosts.names)))
    mark_width = max(width(_(m)) for m in _MARK.values())
    for c in report.checks:
        line = f"{ljust(_(_MARK[c.status]), mark_width)}  {c.title}"
        if c.detail:
            line += f" — {c.detail}"
        out.append(line)
        if c.status == FAIL or verbose:
            if c.command:
                out.append(_("      ran: {command}").format(command=c.command))
        if c.status == FAIL:
            if c.explain:
                out.append(f"      {c.explain}")
            for d in c.diagnoses:
                out.append(_("      cause: {cause}").format(cause=field(d, "cause")))
                out.append(_("      fix:   {fix}").format(fix=field(d, "fix")))
    n = report.counts
    out.append(_("{passed} passed, {failed} failed, {skipped} skipped in {seconds} s").format(
        passed=n[PASS], failed=n[FAIL], skipped=n["skip"], seconds=f"{report.seconds:.1f}"))
    return "\n".join(out)
