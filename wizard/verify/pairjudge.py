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
named one by one; the slow links left are named as links.

The round trips (the lowest of the small ones timed on the same connection, before its
bytes) are judged the same way, each direction's lowest one held to its round's median: a
direction is slow when it takes more than LATENCY_FACTOR times the median and LATENCY_FLOOR_US
more (a few tens of µs between instances of one host are noise, not a link); an instance
with most of its links slow is named as the node."""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple, TypeVar

SLOW_FRACTION = 0.6  # below this share of the fleet's median a direction is slow
ROUND_PAIRS = 3  # fewer pairs in a round: its median is too much the pairs' own
LINE_FRACTION = 0.5  # a median below this share of the line rate: the whole fleet is slow
LATENCY_FACTOR = 3.0  # a round trip above this many times its median is slow ...
LATENCY_FLOOR_US = 200.0  # ... when it is above the median by at least this much


@dataclass(frozen=True)
class Measured:
    """One direction of one pair: sender → receiver, Gb/s (None: no figure, error says why)."""
    sender: str
    receiver: str
    gbps: Optional[float]
    error: str = ""
    round: int = 0  # which round measured it
    latency_us: Optional[float] = None  # its lowest round trip, µs (None: no figure)


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
class LatencyLink:
    """A pair whose slower direction's round trip is slow."""
    a: str
    b: str
    latency_us: float  # the slower direction's round trip
    times: float  # that many times the median it was held to (one decimal)


@dataclass(frozen=True)
class LatencyNode:
    """An instance with slow round trips on most of its pairs."""
    host: str
    bad: int  # its links with slow round trips
    links: int  # its links with a round trip
    latency_us: float  # the median of its slow links' round trips


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
    median_latency_us: Optional[float] = None
    latency_slow_nodes: Tuple[LatencyNode, ...] = ()
    latency_slow_links: Tuple[LatencyLink, ...] = ()
    latency_slow: Tuple[Tuple[str, str], ...] = ()  # every direction above its threshold

    @property
    def ok(self) -> bool:
        return not (self.slow_nodes or self.slow_links or self.failed_links
                    or self.below_line or self.latency_slow_nodes or self.latency_slow_links)

    def figure(self, sender: str, receiver: str) -> Optional[Measured]:
        """The direction's best measurement (a failed one when none gave a figure)."""
        ms = [m for m in self.measured if (m.sender, m.receiver) == (sender, receiver)]
        return max(ms, key=lambda m: -1.0 if m.gbps is None else m.gbps, default=None)

    def round_trip(self, sender: str, receiver: str) -> Optional[float]:
        """The direction's lowest round trip, µs (None: none measured)."""
        return min((m.latency_us for m in self.measured if m.latency_us is not None
                    and (m.sender, m.receiver) == (sender, receiver)), default=None)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["ok"] = self.ok
        out["slow_fraction"] = SLOW_FRACTION
        out["latency_factor"] = LATENCY_FACTOR
        out["latency_floor_us"] = LATENCY_FLOOR_US
        return out


def latency_slow(latency_us: float, median_us: float) -> bool:
    """A round trip far above its median: LATENCY_FACTOR times it, and LATENCY_FLOOR_US more."""
    return (latency_us > LATENCY_FACTOR * median_us
            and latency_us - median_us >= LATENCY_FLOOR_US)


def judge(hosts: Sequence[str], measured: Sequence[Measured],
          line_gbps: Optional[float] = None, seconds: float = 0.0) -> Verdict:
    median, reference = _references(measured, lambda m: m.gbps)
    pairs: Dict[frozenset, List[Measured]] = {}
    for m in measured:
        pairs.setdefault(frozenset((m.sender, m.receiver)), []).append(m)
    links: List[Tuple[Tuple[str, str], Optional[Link]]] = []  # every pair, its Link if bad
    for key, ms in pairs.items():
        a, b = sorted(key, key=list(hosts).index)
        links.append(((a, b), _bad(a, b, ms, reference)))
    nodes = []
    for host, bad, n in _mostly_bad(hosts, links):
        slow = [x.gbps for x in bad if x.gbps is not None]
        nodes.append(Node(host, len(bad), n, statistics.median(slow) if slow else None))
    named = {n.host for n in nodes}
    rest = [bad for (a, b), bad in links if bad is not None and not {a, b} & named]
    below = bool(median is not None and line_gbps and median < LINE_FRACTION * line_gbps)
    slow = tuple(d for d, (share, _gbps) in _best(measured, reference).items()
                 if share < SLOW_FRACTION)
    lat_median, lat_nodes, lat_links, lat_slow = _latency(hosts, measured, pairs, named)
    return Verdict(tuple(hosts), tuple(measured), median, line_gbps, tuple(nodes),
                   tuple(x for x in rest if not x.error), tuple(x for x in rest if x.error),
                   below, slow, seconds, lat_median, lat_nodes, lat_links, lat_slow)


def _references(measured: Sequence[Measured], value: Callable[[Measured], Optional[float]]
                ) -> Tuple[Optional[float], Dict[int, Optional[float]]]:
    """(the fleet's median of value, round -> the median a direction of it is held to: its
    round's own, or the fleet's for a round of fewer than ROUND_PAIRS pairs)."""
    by_round: Dict[int, List[float]] = {}
    for m in measured:
        v = value(m)
        if v is not None:
            by_round.setdefault(m.round, []).append(v)
    figures = [v for f in by_round.values() for v in f]
    median = statistics.median(figures) if figures else None
    pairs_in = {r: len({frozenset((m.sender, m.receiver)) for m in measured if m.round == r})
                for r in by_round}
    return median, {r: statistics.median(f) if pairs_in[r] >= ROUND_PAIRS else median
                    for r, f in by_round.items()}


Bad = TypeVar("Bad")


def _mostly_bad(hosts: Sequence[str], links: Sequence[Tuple[Tuple[str, str], Optional[Bad]]]
                ) -> List[Tuple[str, List[Bad], int]]:
    """(host, its bad links, its links judged) for each host with at least two links judged
    and more than half of them bad."""
    out = []
    for host in hosts:
        mine = [bad for (a, b), bad in links if host in (a, b)]
        bad = [x for x in mine if x is not None]
        if len(mine) >= 2 and len(bad) * 2 > len(mine):
            out.append((host, bad, len(mine)))
    return out


def _latency(hosts: Sequence[str], measured: Sequence[Measured],
             pairs: Dict[frozenset, List[Measured]], slow_nodes: Set[str]
             ) -> Tuple[Optional[float], Tuple[LatencyNode, ...], Tuple[LatencyLink, ...],
                        Tuple[Tuple[str, str], ...]]:
    """(the fleet's median round trip, the slow nodes, the slow links left, every slow
    direction): each direction by its lowest round trip, held to its round's median. The
    links of a node named (by its round trips, or slow_nodes by its throughput) are the
    node's: a node slow to carry bytes queues the round trips behind them too."""
    median, reference = _references(measured, lambda m: m.latency_us)
    best = _lowest(measured, reference)
    links: List[Tuple[Tuple[str, str], Optional[LatencyLink]]] = []
    for key in pairs:
        a, b = sorted(key, key=list(hosts).index)
        mine = [best[d] for d in ((a, b), (b, a)) if d in best]
        if not mine:
            continue  # no round trip: the pair failed, named as such
        slow = [(us, ref) for us, ref in mine if latency_slow(us, ref)]
        us, ref = max(slow or mine, key=lambda x: x[0] / x[1])
        links.append(((a, b), LatencyLink(a, b, us, round(us / ref, 1)) if slow else None))
    nodes = tuple(LatencyNode(host, len(bad), n, statistics.median(x.latency_us for x in bad))
                  for host, bad, n in _mostly_bad(hosts, links))
    named = {n.host for n in nodes} | slow_nodes
    rest = tuple(bad for (a, b), bad in links if bad is not None and not {a, b} & named)
    slow = tuple(d for d, (us, ref) in best.items() if latency_slow(us, ref))
    return median, nodes, rest, slow


def _lowest(ms: Sequence[Measured], reference: Dict[int, Optional[float]]
            ) -> Dict[Tuple[str, str], Tuple[float, float]]:
    """(sender, receiver) -> (a round trip, the median it is held to): of its measurements
    (a pair is measured again when slow), the one lowest against its own round's median."""
    best: Dict[Tuple[str, str], Tuple[float, float]] = {}
    for m in ms:
        ref = reference.get(m.round)
        if m.latency_us is None or not ref:
            continue
        d = (m.sender, m.receiver)
        if d not in best or m.latency_us / ref < best[d][0] / best[d][1]:
            best[d] = (m.latency_us, ref)
    return best


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
