"""One verification: the checks here, then on each peer (one chain per host, at most
max_workers hosts at once), then across the cluster. Which checks belong to it and whether
each runs or is skipped (with the reason) is read from their Specs: their frameworks and
networks, then their needs, the first unmet one giving the reason."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, List, Optional, Sequence

from ..facts import Facts
from ..hosts import Hosts
from ..plan import Plan
from . import cluster, here, peer, samehost, userenv
from .context import Ctx, _skip, gather
from .results import Check, Report
from .spec import Spec
from .system import System

MAX_WORKERS = 16

OnCheck = Callable[[Check], None]


def run_checks(ctx: Ctx, specs: Sequence[Spec], host: str = "",
               on_check: Optional[OnCheck] = None) -> List[Check]:
    """specs in order, for host ("" here and for the cluster): each one that belongs to
    this verification is run, or skipped at its first unmet need."""
    out: List[Check] = []
    for spec in specs:
        if not spec.belongs(ctx.framework, ctx.network):
            continue
        unmet = next((need for need in spec.needs if not need.met(ctx, host)), None)
        if unmet is not None:
            found = [_skip(spec.id.format(host=host), spec.title(ctx, host),
                           unmet.why(ctx, host), host)]
        else:
            found = spec.results(ctx, host)
        for c in found:
            ctx.record(c)
            if on_check:
                on_check(c)
        out += found
    return out


def verify(plan: Plan, facts: Facts, hosts: Optional[Hosts] = None,
           system: Optional[System] = None, on_check: Optional[OnCheck] = None,
           max_workers: int = MAX_WORKERS, bandwidth: bool = False) -> Report:
    """Every check, here then across hosts (concurrently, at most max_workers at once).
    on_check is called with each check as it finishes (from worker threads); bandwidth:
    the bandwidth checks too (verify --bandwidth), which load the links."""
    if system is None:
        system = System()
    ctx = Ctx(plan, facts, system, hosts, bandwidth=bandwidth)
    try:
        return _verify(ctx, on_check, max_workers)
    finally:
        ctx.sys.remove_temp()  # the hostfiles' directory: also after Ctrl+C or stop()


def _verify(ctx: Ctx, on_check: Optional[OnCheck], max_workers: int) -> Report:
    t_start = time.monotonic()
    checks = run_checks(ctx, (*here.CHECKS, *samehost.CHECKS), on_check=on_check)
    if ctx.hosts is not None:
        names = list(ctx.names)
        with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(names)))) as pool:
            per_host = gather(ctx, [pool.submit(run_checks, ctx, peer.CHECKS, h, on_check)
                                    for h in names])
        for cs in per_host:
            checks += cs
        checks += run_checks(ctx, (*cluster.CHECKS, *userenv.CHECKS), on_check=on_check)
    return Report(tuple(checks), ctx.hosts, time.monotonic() - t_start)
