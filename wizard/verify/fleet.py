"""InfiniBand facts of every instance, over IB: one read-only probe per host
(programs/ib_facts.sh, over SSH, or with bash for this instance), each host failed with its
reason (no ACTIVE port of the job's link layer, a port down or slower than the others, no
uverbs, memlock limited), then the hosts compared: UCX and NCCL versions, the ports' count and
rates. Versions that differ between instances are a known cause of hangs, so the odd one out
is named ("node3: UCX 1.15.0, the others 1.16.0")."""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple, TypeVar

from ..diagnose import explain
from ..i18n import _
from ..plan import job_ports as planned_ports
from .context import Ctx
from .here import _job_ports
from .parse import IbFacts, IbPort, parse_ib_facts
from .probes import ReadIbFacts
from .readings import keep, read_facts
from .results import FAIL, PASS, Check
from .shipped import program

IB_FACTS = "ib_facts.sh"
V = TypeVar("V")


def script() -> str:
    """ib_facts.sh as one line (its comments left out, its lines, whole commands each, joined
    by '; '): it travels as one `bash -c` argument, and each check's command carries it, which
    a user can paste and the report shows on one line."""
    return "; ".join(line.strip() for line in program(IB_FACTS).splitlines()
                     if line.strip() and not line.lstrip().startswith("#"))


def job_layer(ctx: Ctx) -> str:
    """The link layer of the job's ports here (the plan uses one: InfiniBand beside RoCE)."""
    ports = planned_ports(ctx.facts)[0]
    return ports[0].link_layer if ports else "InfiniBand"


def job_ports(facts: IbFacts, layer: str, wanted: Sequence[str] = ()) -> List[IbPort]:
    """Hardware ports of the job's link layer; when the plan names its ports (UCX_NET_DEVICES,
    NCCL_IB_HCA: the same on every instance) those only."""
    ports = [p for p in facts.ports if not p.software and p.link_layer == layer]
    if wanted:
        ports = [p for p in ports if p.name in wanted or p.hca in wanted]
    return ports


@dataclass(frozen=True)
class Problem:
    seen: str  # what was seen, for the detail
    plain: str  # what it means, for the explain line
    diagnosis: str = ""  # the signature table's entry, when it has one


def _gbps(rate: float) -> str:
    return f"{rate:g} Gb/s" if rate else "? Gb/s"


def host_problems(facts: IbFacts, host: str, layer: str,
                  wanted: Sequence[str] = ()) -> List[Problem]:
    """Why this host's InfiniBand would fail or slow the job ([] when nothing does)."""
    out: List[Problem] = []
    ports = job_ports(facts, layer, wanted)
    active = [p for p in ports if p.active]
    down = [p for p in ports if not p.active]
    if not active:
        seen = _("no ACTIVE {layer} port").format(layer=layer)
        if down:
            seen += ": " + ", ".join(f"{p.name} {p.state}" for p in down)
        out.append(Problem(seen, _("{host} has no ACTIVE {layer} port the job can use: the "
                                   "cable, the switch or the subnet manager, or the device is "
                                   "not passed into its container.").format(host=host,
                                                                             layer=layer),
                           "nccl-socket-fallback"))
    elif down:
        names = ", ".join(f"{p.name} {p.state}" for p in down)
        out.append(Problem(names, _("Port(s) {ports} of {host} are not ACTIVE: the cable, the "
                                    "switch or the subnet manager; ask the platform.").format(
            ports=", ".join(p.name for p in down), host=host)))
    top = max((p.rate_gbps for p in active), default=0.0)
    slow = [p for p in active if p.rate_gbps < top]
    if slow:
        out.append(Problem(
            _("{ports} at {rate}, the others {top}").format(
                ports=", ".join(p.name for p in slow),
                rate=", ".join(_gbps(p.rate_gbps) for p in slow), top=_gbps(top)),
            _("{ports} of {host} run slower than its other ports: a degraded link (a cable or "
              "a switch port) slows every transfer that crosses it; ask the platform.").format(
                ports=", ".join(p.name for p in slow), host=host)))
    if not facts.uverbs:
        out.append(Problem(_("no /dev/infiniband/uverbs*"),
                           _("The RDMA devices are not passed into {host}'s container "
                             "(/dev/infiniband).").format(host=host), "verbs-no-driver"))
    if facts.memlock != "unlimited":
        out.append(Problem(f"ulimit -l: {facts.memlock or '?'}",
                           _("RDMA pins its buffers in memory and {host}'s limit is too low: "
                             "start its container with --ulimit memlock=-1:-1.").format(
                               host=host), "memlock"))
    return out


def _summary(facts: IbFacts, ports: Sequence[IbPort], layer: str) -> str:
    """'mlx5_0:1 200 Gb/s, mlx5_1:1 200 Gb/s (InfiniBand); 2 uverbs; memlock unlimited; UCX
    1.16.0; NCCL 2.20.5; libibverbs 1.14.50.0'"""
    parts = [", ".join(f"{p.name} {_gbps(p.rate_gbps)}" for p in ports if p.active)
             + f" ({layer})", f"{len(facts.uverbs)} uverbs", f"memlock {facts.memlock or '?'}"]
    for label, value in (("UCX", facts.ucx), ("NCCL", facts.nccl),
                         ("libibverbs", facts.libibverbs)):
        if value:
            parts.append(f"{label} {value}")
    return "; ".join(parts)


def host_title(ctx: Ctx, host: str) -> str:
    return _("{host}: InfiniBand ports, uverbs and memlock").format(host=host)


def check_host(ctx: Ctx, host: str) -> Check:
    """One probe on host (this instance: bash here, no SSH), its facts kept for cluster/ib-same."""
    here = host == ctx.here_name()
    probe = ReadIbFacts(script(), ctx.python if ctx.framework == "pytorch" else "",
                        host="" if here else host, port=ctx.port, user=ctx.user)
    t0 = time.monotonic()
    r = ctx.ask(probe)
    facts = parse_ib_facts(r.out)
    title, cid = host_title(ctx, host), f"peer/{host}/ib"
    if not (r.ok and facts.complete):
        return Check(cid, title, FAIL, r.command, r.last_line(),
                     _("Could not read the InfiniBand facts of {host}: the probe did not "
                       "finish.").format(host=host), host, seconds=time.monotonic() - t0)
    keep(ctx, host, facts)
    layer = job_layer(ctx)
    problems = host_problems(facts, host, layer, _job_ports(ctx))
    if not problems:
        return Check(cid, title, PASS, r.command,
                     _summary(facts, job_ports(facts, layer, _job_ports(ctx)), layer),
                     host=host, seconds=time.monotonic() - t0)
    diagnoses = tuple(explain(k) for k in dict.fromkeys(p.diagnosis for p in problems) if k)
    return Check(cid, title, FAIL, r.command, "; ".join(p.seen for p in problems),
                 " ".join(p.plain for p in problems), host, diagnoses,
                 time.monotonic() - t0)


# --- across the hosts ------------------------------------------------------------------------


def _ports_value(ports: Sequence[IbPort]) -> str:
    """'2 × 200 Gb/s'; '200, 100 Gb/s' when they differ; 'none'."""
    rates = sorted((p.rate_gbps for p in ports if p.active), reverse=True)
    if not rates:
        return _("none")
    if len(set(rates)) == 1:
        return f"{len(rates)} × {_gbps(rates[0])}"
    return ", ".join(f"{r:g}" for r in rates) + " Gb/s"


def odd_hosts(values: Dict[str, V]) -> Tuple[Optional[V], Dict[str, V]]:
    """(the value most hosts have, the hosts whose value differs from it, in order): (that
    value, {}) when every host has it; (None, every host's) when no value is the most
    common (two hosts that differ: which one is odd cannot be told)."""
    counts = Counter(values.values())
    if len(counts) < 2:
        return next(iter(counts), None), {}
    (usual, n), (_second, m) = counts.most_common(2)
    if n == m:
        return None, dict(values)
    return usual, {h: v for h, v in values.items() if v != usual}


def odd_one_out(what: str, values: Dict[str, str]) -> str:
    """'' when every host has the same value; else the hosts that differ from the most common
    value named ("node3: UCX 1.15.0, the others 1.16.0"), or, with no most common one, each
    host's ("UCX differs: node1 1.16.0, node2 1.15.0")."""
    usual, odd = odd_hosts(values)
    if not odd:
        return ""
    if usual is None:
        return _("{what} differs: {values}").format(
            what=what, values=", ".join(f"{h} {v}" for h, v in values.items()))
    return "; ".join(
        _("{hosts}: {what} {value}, the others {usual}").format(
            hosts=", ".join(h for h, x in odd.items() if x == v), what=what, value=v,
            usual=usual)
        for v in dict.fromkeys(odd.values()))


def compared(ctx: Ctx) -> List[Tuple[str, Callable[[IbFacts], str]]]:
    """What must be equal across the hosts: the library the job's framework uses, the ports."""
    layer, wanted = job_layer(ctx), _job_ports(ctx)
    lib = [("UCX", lambda f: f.ucx or _("none"))] if ctx.framework == "mpi" else \
        [("NCCL", lambda f: f.nccl or _("none"))]
    return [*lib, (_("ports"), lambda f: _ports_value(job_ports(f, layer, wanted)))]


def same_title(ctx: Ctx, host: str = "") -> str:
    return _("InfiniBand ports and library versions alike on every instance")


def check_same(ctx: Ctx, host: str = "") -> Check:
    """From what the per-host checks read: nothing more runs."""
    read = read_facts(ctx)
    fields = compared(ctx)
    odd = [msg for what, value in fields
           if (msg := odd_one_out(what, {h: value(f) for h, f in read.items()}))]
    missing = [h for h in ctx.names if h not in read]
    first = next(iter(read.values()))
    alike = ", ".join(f"{what} {value(first)}" for what, value in fields)
    note = (_("; not read: {hosts}").format(hosts=", ".join(missing)) if missing else "")
    if not odd:
        return Check("cluster/ib-same", same_title(ctx), PASS, "",
                     _("{n} hosts alike: {values}").format(n=len(read), values=alike) + note)
    return Check("cluster/ib-same", same_title(ctx), FAIL, "", "; ".join(odd) + note,
                 _("Instances whose InfiniBand libraries or ports differ are a known cause of "
                   "hangs and slow jobs: start every instance from the same image, and ask the "
                   "platform about a port that is slower or missing."))
