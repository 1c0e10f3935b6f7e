"""The fleet check's verdict on its pair measurements: each direction of each pair held to
the fleet's median (what these instances reach between themselves, whatever the link), and
the median held to the line rate where one is known.

A direction is held to the median of its round (the pairs measured at the same time: a
load that comes and goes lowers a whole round, not one pair), or to the fleet's when its
round has fewer than ROUND_PAIRS pairs; a direction measured again (the runner measures
the pairs it found slow once more, alone) is judged by its better figure. A link (both
directions of a pair) is slow when either direction carries less than SLOW_FRACTION of
its median, failed when either gave no figure. An instance whose links are mostly slow or
failed is named as the node (its NIC, its cable, its switch port), and its links are not
named one by one; the slow links left are named as links."""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Sequence, Tuple

SLOW_FRACTION = 0.6  # below this share of the fleet's median a direction is slow
ROUND_PAIRS = 3  # fewer pairs in a round: its median is too much the pairs' own
LINE_FRACTION = 0.5  # a median below this share of the line rate: the whole fleet is slow


@dataclass(frozen=True)
class Measured:
    """One direction of one pair: sender → receiver, Gb/s (None: no figure, error says why)."""
    sender: str
    receiver: str
    gbps: Optional[float]
    error: str = ""
    round: int = 0  # which round measured it


@dataclass(frozen=True)
class Link:
    """A pair whose slower direction is slow, or that gave no figure."""
    a: str
    b: str
    gbps: Optional[float]  # the slower direction's figure (None: failed)
    percent: Optional[int]  # of the median it was held to
    error: str = ""


@dataclass(frozen=True)
class Node:
    """An instance slow or failed with most of its pairs."""
    host: str
    bad: int  # its links slow or failed
    links: int  # its links measured
    gbps: Optional[float]  # the median of its slower directions (None: all failed)


@dataclass(frozen=True)
class Verdict:
    hosts: Tuple[str, ...]
    measured: Tuple[Measured, ...]
    median_gbps: Optional[float]
    line_gbps: Optional[float]
    slow_nodes: Tuple[Node, ...]
    slow_links: Tuple[Link, ...]
    failed_links: Tuple[Link, ...]
    below_line: bool  # the median itself is below LINE_FRACTION of the line rate
    slow: Tuple[Tuple[str, str], ...] = ()  # every direction below its round's threshold
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not (self.slow_nodes or self.slow_links or self.failed_links
                    or self.below_line)

    def figure(self, sender: str, receiver: str) -> Optional[Measured]:
        """The direction's best measurement (a failed one when none gave a figure)."""
        ms = [m for m in self.measured if (m.sender, m.receiver) == (sender, receiver)]
        return max(ms, key=lambda m: -1.0 if m.gbps is None else m.gbps, default=None)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["ok"] = self.ok
        out["slow_fraction"] = SLOW_FRACTION
        return out


def judge(hosts: Sequence[str], measured: Sequence[Measured],
          line_gbps: Optional[float] = None, seconds: float = 0.0) -> Verdict:
    figures = [m.gbps for m in measured if m.gbps is not None]
    median = statistics.median(figures) if figures else None
    by_round: Dict[int, List[float]] = {}
    for m in measured:
        if m.gbps is not None:
            by_round.setdefault(m.round, []).append(m.gbps)
    pairs_in = {r: len({frozenset((m.sender, m.receiver)) for m in measured if m.round == r})
                for r in by_round}
    reference = {r: statistics.median(f) if pairs_in[r] >= ROUND_PAIRS else median
                 for r, f in by_round.items()}
    pairs: Dict[frozenset, List[Measured]] = {}
    for m in measured:
        pairs.setdefault(frozenset((m.sender, m.receiver)), []).append(m)
    links: List[Tuple[Tuple[str, str], Optional[Link]]] = []  # every pair, its Link if bad
    for key, ms in pairs.items():
        a, b = sorted(key, key=list(hosts).index)
        links.append(((a, b), _bad(a, b, ms, reference)))
    nodes = []
    for host in hosts:
        mine = [bad for (a, b), bad in links if host in (a, b)]
        n_bad = sum(1 for bad in mine if bad is not None)
        if len(mine) >= 2 and n_bad * 2 > len(mine):
            slow = [bad.gbps for bad in mine if bad is not None and bad.gbps is not None]
            nodes.append(Node(host, n_bad, len(mine),
                              statistics.median(slow) if slow else None))
    named = {n.host for n in nodes}
    rest = [bad for (a, b), bad in links if bad is not None and not {a, b} & named]
    below = bool(median is not None and line_gbps and median < LINE_FRACTION * line_gbps)
    slow = tuple(d for d, (share, _gbps) in _best(measured, reference).items()
                 if share < SLOW_FRACTION)
    return Verdict(tuple(hosts), tuple(measured), median, line_gbps, tuple(nodes),
                   tuple(x for x in rest if not x.error), tuple(x for x in rest if x.error),
                   below, slow, seconds)


def _bad(a: str, b: str, ms: Sequence[Measured],
         reference: Dict[int, Optional[float]]) -> Optional[Link]:
    """The pair's Link when it is slow or failed: each direction by its best measurement
    (a pair measured again alone is judged by the better figure)."""
    best = _best(ms, reference)
    failed = [m.error or "no figure" for m in ms
              if m.gbps is None and (m.sender, m.receiver) not in best]
    if failed:
        return Link(a, b, None, None, failed[0])
    if not best:
        return None
    share, gbps = min(best.values())
    if share < SLOW_FRACTION:
        return Link(a, b, gbps, round(100 * share))
    return None


def _best(ms: Sequence[Measured],
          reference: Dict[int, Optional[float]]) -> Dict[Tuple[str, str], Tuple[float, float]]:
    """(sender, receiver) -> (the best share of its reference, that figure)."""
    best: Dict[Tuple[str, str], Tuple[float, float]] = {}
    for m in ms:
        ref = reference.get(m.round)
        if m.gbps is None or not ref:
            continue
        d = (m.sender, m.receiver)
        best[d] = max(best.get(d, (0.0, 0.0)), (m.gbps / ref, m.gbps))
    return best
