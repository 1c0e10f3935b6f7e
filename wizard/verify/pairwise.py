"""verify --fleet: TCP throughput and round trips between every pair the rounds name
(rounds.py), each pair measured between its two instances themselves: the receiver started
on one over SSH, the sender on the other, both directions at once; the sender times small
round trips on its connection before it sends its bytes. The hosts, the user and the port are the
job's, as verify and the launch script find them. Judged by pairjudge.py."""
from __future__ import annotations

import ipaddress
import time
from concurrent.futures import ThreadPoolExecutor
from typing import List, Optional, Sequence, Tuple

from ..facts import Facts
from ..hosts import Hosts
from ..i18n import _
from ..plan import Plan
from .bandwidth import _TOKEN, TCP_BW, TCP_FAST_MBPS, _address, link_to
from .context import Ctx, gather
from .pairjudge import Measured, Verdict, judge
from .parse import digits, parse_tcp_bw, parse_tcp_listen, parse_tcp_rtt
from .probes import TcpBwAt
from .rounds import Round, matchings, rounds
from .shipped import program
from .system import System

SECONDS = 1.0  # each direction's time bound: a round takes about this plus two SSH logins
RETRY_ROUNDS = 3  # at most this many rounds measure the slow links again
MIB = 4096  # more than SECONDS carries on these links: the time ends each test


def fleet(plan: Plan, facts: Facts, hosts: Hosts, system: Optional[System] = None,
          max_workers: int = 16, seed: Optional[int] = None) -> Verdict:
    """Measure the rounds' pairs (at most max_workers directions at once) and judge them."""
    return measure(Ctx(plan, facts, system or System(), hosts), max_workers, seed)


def measure(ctx: Ctx, max_workers: int = 16, seed: Optional[int] = None) -> Verdict:
    """fleet() with the fleet check's Ctx (fleetcheck.py reads each instance's health with
    the same one first)."""
    t0 = time.monotonic()
    names = list(ctx.names)
    here = ctx.here_name()
    for h in names:  # once, before the threads share the cache
        _address(ctx, h)
    line = _line_gbps(ctx, here, names)
    first = rounds(names, seed)
    with ThreadPoolExecutor(max_workers=max(1, max_workers)) as pool:
        measured = _measure(ctx, pool, [_both_ways(r) for r in first], here, 0)
        measured += _measure(ctx, pool, again(judge(names, measured, line)), here, len(first))
    return judge(names, measured, line, time.monotonic() - t0)


Direction = Tuple[str, str]


def again(seen: Verdict) -> List[List[Direction]]:
    """The rounds that measure once more what a moment may have made slow (a load that came
    and went): the slow and failed links, both ways at once (at most RETRY_ROUNDS); then the
    links slow by their round trips alone, one way at a time (at most RETRY_ROUNDS pairs of
    rounds): timed while the other way's bytes queued on the path, a round trip is slow by
    the test's own doing. A node's links are not among the links the verdict names: they are
    the node's, not measured again."""
    slow = matchings([(x.a, x.b) for x in (*seen.slow_links, *seen.failed_links)])
    done = {frozenset(p) for r in slow for p in r}  # named by their bytes already
    late = matchings([(x.a, x.b) for x in seen.latency_slow_links
                      if frozenset((x.a, x.b)) not in done])
    return ([_both_ways(r) for r in slow[:RETRY_ROUNDS]]
            + [list(way) for r in late[:RETRY_ROUNDS] for way in (r, [p[::-1] for p in r])])


def _both_ways(pairs: Round) -> List[Direction]:
    return [d for a, b in pairs for d in ((a, b), (b, a))]


def _measure(ctx: Ctx, pool: ThreadPoolExecutor, rounds_: Sequence[Sequence[Direction]],
             here: str, first: int) -> List[Measured]:
    out: List[Measured] = []
    for i, directions in enumerate(rounds_, first):
        out += gather(ctx, [pool.submit(direction, ctx, s, r, here, i)
                            for s, r in directions])
    return out


def _line_gbps(ctx: Ctx, here: str, names: Sequence[str]) -> Optional[float]:
    """This instance's interface speed toward the others, when the kernel knows it and one
    TCP stream can fill it (the same image on the same hardware: the fleet's line rate)."""
    other = next((h for h in names if h != here), None)
    if not here or other is None:
        return None
    link = link_to(ctx, other)
    if link.mbps is None or link.mbps > TCP_FAST_MBPS:
        return None
    return link.mbps / 1000


def direction(ctx: Ctx, sender: str, receiver: str, here: str, round: int = 0) -> Measured:
    """sender → receiver: the receiver's program listens on receiver's address (as resolved
    here: the instances share their names), then the sender times its round trips to it and
    sends to it for SECONDS."""
    prog = program(TCP_BW)
    try:
        address = str(ipaddress.ip_address(ctx.addresses.get(receiver, "")))
    except ValueError:
        return Measured(sender, receiver, None,
                        _("{host} does not resolve here").format(host=receiver), round)

    def on(host: str, args: tuple, preamble: str = "") -> TcpBwAt:
        return TcpBwAt("" if host == here else host, ctx.port, ctx.python, prog, args,
                       preamble, ctx.user)

    r = ctx.ask(on(receiver, ("--receive", address)))
    listen = parse_tcp_listen(r.out) if r.ok else {}
    port, token = listen.get("port", ""), listen.get("token", "")
    if not (digits(port) and 0 < int(port) < 65536 and _TOKEN.fullmatch(token)):
        return Measured(sender, receiver, None, _("the receiver did not start on {host}: "
                                                  "{line}").format(host=receiver,
                                                                   line=r.last_line()),
                        round)
    preamble = f"import os; os.environ['HPCWIZARD_TCPBW_TOKEN'] = '{token}'\n"
    s = ctx.ask(on(sender, ("--send", address, port, str(MIB), f"{SECONDS:g}"), preamble))
    gbps = parse_tcp_bw(s.out) if s.ok else None
    if gbps is None or gbps <= 0:
        return Measured(sender, receiver, None, s.last_line(), round)
    return Measured(sender, receiver, gbps, round=round, latency_us=parse_tcp_rtt(s.out))
