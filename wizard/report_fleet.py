"""verify --fleet's verdict as text: the pair matrices (rich Tables: rows send, columns
receive; Gb/s, then round trips in µs; a slow figure marked), then one line per slow node,
slow link and failed link, and the fleet's medians; before them each node's health: one line
per node named, or per set of nodes with the same findings (with what they mean and what to
do under it), or one line for the instances alike. `--json` gives
FleetVerdict.to_dict() instead."""
from __future__ import annotations

import io
import shutil
import textwrap
from typing import Callable, Dict, List

from rich.console import Console
from rich.table import Table

from .i18n import _
from .safe_text import visible
from .verify.fleetcheck import FleetVerdict
from .verify.healthjudge import HealthVerdict, summary
from .verify.pairjudge import (LATENCY_FACTOR, LATENCY_FLOOR_US, SLOW_FRACTION, Link,
                                Verdict)


def _table(title: str, v: Verdict, cell: Callable[[str, str], str]) -> Table:
    """A matrix of the fleet's hosts: rows send, columns receive, `cell` each figure."""
    t = Table(title=title)
    t.add_column("", style="bold", no_wrap=True)
    for h in v.hosts:
        t.add_column(h, justify="right", no_wrap=True)
    for s in v.hosts:
        t.add_row(s, *("—" if s == r else cell(s, r) for r in v.hosts))
    return t


def matrix(v: Verdict) -> Table:
    """Gb/s; '!' a slow one, '✗' a direction with no figure, '·' a pair not measured (a
    large fleet's sample)."""
    slow = set(v.slow)

    def cell(s: str, r: str) -> str:
        m = v.figure(s, r)
        if m is None:
            return "·"
        if m.gbps is None:
            return "[bold red]✗[/]"
        return f"[bold red]{m.gbps:.2f}![/]" if (s, r) in slow else f"{m.gbps:.2f}"
    return _table(_("TCP Gb/s, row → column"), v, cell)


def latency_matrix(v: Verdict) -> Table:
    """The round trips as the bandwidth: µs, whole numbers (a cell no wider than a Gb/s one
    up to 10 ms); '!' a slow one, '✗' a direction with no figure."""
    slow = set(v.latency_slow)

    def cell(s: str, r: str) -> str:
        us = v.round_trip(s, r)
        if us is None:
            return "·" if v.figure(s, r) is None else "[bold red]✗[/]"
        return f"[bold red]{us:.0f}![/]" if (s, r) in slow else f"{us:.0f}"
    return _table(_("TCP round trip µs, row → column"), v, cell)


def _link(x: Link) -> str:
    return f"{x.a} ↔ {x.b}"


def verdict_lines(v: Verdict) -> List[str]:
    out: List[str] = []
    pairs = len({frozenset((m.sender, m.receiver)) for m in v.measured})
    median = f"{v.median_gbps:.2f}" if v.median_gbps is not None else "?"
    out.append(_("{n} instances, {pairs} pairs in {seconds:.0f} s; the fleet's median "
                 "{median} Gb/s").format(n=len(v.hosts), pairs=pairs, seconds=v.seconds,
                                         median=median))
    if v.median_latency_us is not None:
        out.append(_("Round trips: the fleet's median {us:.0f} µs; slow above {factor:g} × "
                     "it and {floor:.0f} µs more").format(
            us=v.median_latency_us, factor=LATENCY_FACTOR, floor=LATENCY_FLOOR_US))
    for n in v.slow_nodes:
        out.append(_("SLOW NODE {host}: {bad} of its {links} links slow or failed "
                     "({gbps} Gb/s): its NIC, cable or switch port; ask the platform to "
                     "replace it").format(host=n.host, bad=n.bad, links=n.links,
                                          gbps=f"{n.gbps:.2f}" if n.gbps is not None else "—"))
    for x in v.slow_links:
        out.append(_("SLOW LINK {pair}: {gbps:.2f} Gb/s, {percent} % of the median: the "
                     "path between these two (a switch port, a cable, a route)").format(
            pair=_link(x), gbps=x.gbps, percent=x.percent))
    for x in v.failed_links:
        out.append(_("FAILED {pair}: {error}").format(pair=_link(x), error=visible(x.error)))
    for n in v.latency_slow_nodes:
        out.append(_("HIGH LATENCY NODE {host}: {bad} of its {links} links slow "
                     "({us:.0f} µs): a busy or throttled CPU, its NIC's interrupt settings, "
                     "or a longer path (another rack or zone)").format(
            host=n.host, bad=n.bad, links=n.links, us=n.latency_us))
    for x in v.latency_slow_links:
        out.append(_("HIGH LATENCY {pair}: {us:.0f} µs round trip, {times:g} × the median: "
                     "the path between these two is longer or queued (another switch, a "
                     "congested port)").format(pair=f"{x.a} ↔ {x.b}", us=x.latency_us,
                                               times=x.times))
    if v.below_line:
        out.append(_("The fleet's median is below half the line rate ({line:g} Gb/s): every "
                     "link is slow, or the CPU bounds one TCP stream").format(
            line=v.line_gbps))
    if v.ok:
        out.append(_("No slow node or link (each direction at least {percent} % of the "
                     "median)").format(percent=round(100 * SLOW_FRACTION)))
    return out


def format_fleet(v: Verdict, color: bool = False) -> str:
    """color: for a terminal (its colours, its width); else plain, as wide as 16 hosts need."""
    buf = io.StringIO()
    width = shutil.get_terminal_size((200, 24)).columns if color else 200
    console = Console(file=buf, width=width, force_terminal=color, no_color=not color,
                      highlight=False, emoji=False)
    console.print(matrix(v))
    if v.median_latency_us is not None:
        console.print(latency_matrix(v))
    return buf.getvalue() + "\n".join(verdict_lines(v)) + "\n"


def health_lines(h: HealthVerdict) -> List[str]:
    """'NODE node3: GPU 2 (...): 4 uncorrected ECC errors ...; mlx5_0:1: link_downed 3', each
    meaning under it; instances with the same findings on one line ('NODE 2 of 8 instances:
    ...', their names under it; 'NODE every instance (64): ...'); 'NOT READ node5: ...'; or
    '8 instances alike: 8 GPUs, ...'."""
    alike: Dict[tuple, List[str]] = {}  # the same findings -> their hosts, in the job's order
    for host, findings in h.named().items():
        alike.setdefault(tuple((f.kind, f.seen, f.meaning) for f in findings), []).append(host)
    out: List[str] = []
    for findings, hosts in alike.items():
        # a set's count first, its hosts on lines of their own: a line is cut at 300
        # characters, and 64 names must not cut off what is wrong with them
        if len(hosts) == 1:
            who = hosts[0]
        elif len(hosts) == len(h.hosts):
            who = _("every instance ({n})").format(n=len(hosts))
        else:
            who = _("{n} of {total} instances").format(n=len(hosts), total=len(h.hosts))
        unread = [seen for kind, seen, _meaning in findings if kind == "not-read"]
        if unread:
            out.append(visible(_("NOT READ {host}: {line}").format(host=who, line=unread[0])))
        else:
            out.append(visible(_("NODE {host}: {seen}").format(
                host=who, seen="; ".join(seen for _kind, seen, _meaning in findings))))
        if 1 < len(hosts) < len(h.hosts):
            out += ["  " + visible(line) for line in textwrap.wrap(
                ", ".join(hosts), 88, break_long_words=False, break_on_hyphens=False)]
        out += ["  " + visible(m) for m in dict.fromkeys(m for _k, _s, m in findings)]
    if h.ok:
        out.append(_("{n} instances alike: {what}").format(n=len(h.hosts),
                                                           what=summary(h) or "?"))
    return out


def format_fleet_check(v: FleetVerdict, color: bool = False) -> str:
    """verify --fleet's text: the nodes' health, then the pairs."""
    return "\n".join(health_lines(v.health)) + "\n\n" + format_fleet(v.pairs, color)
