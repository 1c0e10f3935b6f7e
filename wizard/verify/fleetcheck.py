"""verify --fleet as a whole: every instance's health read at once (programs/health.sh,
bounded by max_workers, over SSH as the job's user and port, this instance without SSH) and
judged across the instances (healthjudge.py), then the pair rounds (pairwise.py). The
verdict is both: it passes when no node is named and no pair is."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from ..facts import Facts
from ..hosts import Hosts
from ..plan import Plan
from .context import Ctx, gather
from .healthjudge import HealthVerdict, judge
from .nodehealth import NodeHealth, parse_health, script
from .pairjudge import Verdict
from .pairwise import measure
from .probes import ReadHealth
from .system import System


@dataclass(frozen=True)
class FleetVerdict:
    health: HealthVerdict
    pairs: Verdict

    @property
    def ok(self) -> bool:
        return self.health.ok and self.pairs.ok

    def to_dict(self) -> dict:
        """The pairs' verdict as before (its keys at the top), its own ok as pairs_ok, the
        health beside it, and ok for both."""
        out = self.pairs.to_dict()
        out["pairs_ok"] = out["ok"]
        out["health"] = self.health.to_dict()
        out["ok"] = self.ok
        return out


def check_fleet(plan: Plan, facts: Facts, hosts: Hosts, system: Optional[System] = None,
                max_workers: int = 16, seed: Optional[int] = None) -> FleetVerdict:
    ctx = Ctx(plan, facts, system or System(), hosts)
    health = read_health(ctx, max_workers)
    return FleetVerdict(health, measure(ctx, max_workers, seed))


def read_health(ctx: Ctx, max_workers: int = 16) -> HealthVerdict:
    t0 = time.monotonic()
    here = ctx.here_name()
    text = script()
    with ThreadPoolExecutor(max_workers=max(1, max_workers)) as pool:
        got = gather(ctx, [pool.submit(_read, ctx, text, "" if h == here else h)
                           for h in ctx.names])
    read: Dict[str, NodeHealth] = {}
    not_read: Dict[str, str] = {}
    for host, (node, why) in zip(ctx.names, got):
        if node is not None:
            read[host] = node
        else:
            not_read[host] = why
    return judge(ctx.names, read, not_read, time.monotonic() - t0)


def _read(ctx: Ctx, text: str, host: str) -> Tuple[Optional[NodeHealth], str]:
    """(the host's health, '') or (None, why it was not read: the command's last line)."""
    r = ctx.ask(ReadHealth(text, host, ctx.port, ctx.user))
    node = parse_health(r.out)
    if r.ok and node.complete:
        return node, ""
    return None, r.last_line()

