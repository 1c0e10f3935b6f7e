"""verify's Report as text: one line per check, what it ran, and for a failure the plain line
and each diagnosis (cause and fix). `check_lines` gives each line with its role, so the
terminal (format_report) and the wizard's Done screen (which colours by role) say the same."""
from __future__ import annotations

from typing import TYPE_CHECKING, List, Mapping, Optional, Tuple

from .hosts import Hosts
from .i18n import N_, _, field, ljust, width
from .log_origin import describe
from .safe_text import visible
from .verify import FAIL, PASS, SKIP, Check, Report

if TYPE_CHECKING:
    from .record import Record

_MARK = {PASS: N_("PASS"), FAIL: N_("FAIL"), SKIP: N_("skip")}

# roles: "pass" | "fail" | "skip" (the check's own line), "ran", "explain", "cause", "fix",
# "from"
Line = Tuple[str, str]
INDENT = " " * 6  # a check's further lines, under its title
EXPLAIN_LIMIT = 2000  # an explanation is several sentences, not one line of output


def mark(status: str) -> str:
    return _(_MARK[status])


def mark_width() -> int:
    return max(width(_(m)) for m in _MARK.values())


def check_lines(c: Check, verbose: bool = False) -> List[Line]:
    """(role, text): the check's line (role = its status; the text without the mark), then
    for a failure (or verbose) what ran, then for a failure the plain line and each
    diagnosis. Who shows them puts the mark and the indent."""
    # detail and explain may carry a remote command's output: shown through safe_text
    out: List[Line] = [(c.status, f"{c.title} — {visible(c.detail)}" if c.detail else c.title)]
    if (c.status == FAIL or verbose) and c.command:
        out.append(("ran", _("ran: {command}").format(command=c.command)))
    if c.status == FAIL:
        if c.explain:
            out.append(("explain", visible(c.explain, EXPLAIN_LIMIT)))
        for d in c.diagnoses:
            out.append(("cause", _("cause: {cause}").format(cause=field(d, "cause"))))
            out.append(("fix", _("fix:   {fix}").format(fix=field(d, "fix"))))
            if d.origin:  # which instance, rank, GPU the matched line names
                out.append(("from", _("from:  {origin}").format(origin=visible(describe(d.origin)))))
    return out


def check_text(c: Check, verbose: bool = False) -> List[str]:
    """check_lines as a terminal shows them: the mark, then the further lines indented."""
    return [f"{ljust(mark(role), mark_width())}  {text}" if role == c.status else INDENT + text
            for role, text in check_lines(c, verbose)]


def hosts_line(hosts: Optional[Hosts]) -> str:
    if hosts is None:
        return _("hosts: none given (--hosts, --hostfile or the platform's variables): "
                 "checked this instance only")
    return _("hosts from {source}: {names}").format(source=hosts.source,
                                                     names=", ".join(hosts.names))


def counts_line(counts: Mapping[str, int], seconds: float) -> str:
    return _("{passed} passed, {failed} failed, {skipped} skipped in {seconds} s").format(
        passed=counts[PASS], failed=counts[FAIL], skipped=counts[SKIP], seconds=f"{seconds:.1f}")


def format_report(report: Report, verbose: bool = False) -> str:
    out = [hosts_line(report.hosts)]
    for c in report.checks:
        out += check_text(c, verbose)
    out.append(counts_line(report.counts, report.seconds))
    return "\n".join(out)


def keep_in_record(record: Record, report: Report) -> None:
    """The outcome into the record (its [verify] table, replacing an older one) and every
    check, with what it ran, into its log."""
    record.set_verification(report.summary())
    record.log("-- verify\n" + format_report(report, verbose=True))
