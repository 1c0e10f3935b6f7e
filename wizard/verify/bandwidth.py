"""verify --bandwidth: how fast the links really are, each figure against what the link should
carry, with a verdict line ("node1 → node2: 187.3 Gb/s of 200 Gb/s (93 %) ≥ 90 %: healthy").
Off unless asked for: the measurements load the links the jobs use.

- InfiniBand: perftest's ib_write_bw from this instance to each other one (the server on the
  peer over SSH, the client here), on each of the job's ports (plan.job_ports), against the
  port's rate; PASS at >= 90 %, NVIDIA's ngc_multinode_perf criterion.
- TCP (network tcp): the same pairs through programs/tcp_bw.py, against the speed of the
  interface the route to the peer leaves by; PASS at >= 70 % (TCP_THRESHOLD says why).
- PyTorch: a torch all_reduce's bus bandwidth (programs/busbw.py, nccl-tests' definition)
  across two instances through the launch script, with the value expected of the link.

Pairs run one after another: they all share this instance's link, so at once they would
divide it between them and each measure a part."""
from __future__ import annotations

import ipaddress
import math
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

from ..facts import Port
from ..i18n import _
from ..plan import job_ports
from . import needs as N
from .context import Ctx, _check, _skip, gather
from .pair import launch_pair, torch_nproc
from .parse import (address_of, digits, parse_busbw, parse_ib_write_bw,
                    parse_link_speed, parse_tcp_bw, parse_tcp_listen, route_dev)
from .probes import (IbWriteBwClient, IbWriteBwServer, LinkSpeed, Ran, Resolve,
                     RouteTo, TcpBwReceiver, TcpBwSender)
from .results import PASS, Check
from .shipped import program
from .spec import ALL_FRAMEWORKS, ALL_NETWORKS, Spec

IB_THRESHOLD = 90  # % of the port's rate: ngc_multinode_perf's pass criterion for ib_write_bw
# % of the interface's speed. One TCP stream's goodput on a healthy 1-25 Gb/s Ethernet link is
# 90-95 % of it (headers take ~5 % at MTU 1500), but it shares the host's CPU and the link with
# whatever else runs; a link that trained at a lower speed or duplex, or a congested path,
# lands well below. 70 % passes a busy healthy link and fails those.
TCP_THRESHOLD = 70
TCP_FAST_MBPS = 25000  # faster: one Python stream is bounded by a CPU core, not by the link
# per pair, whichever comes first: 512 MiB is 4.3 s at 1 Gb/s, long enough past TCP's ramp-up
# at 10-25 Gb/s; 10 s bounds a slow link's test, which then gives its low figure and fails on
# it, well within the sender's time-out (a time-out would read as a firewall)
TCP_MIB, TCP_SECONDS = 512, 10.0
# nccl-tests' bus bandwidth per NIC is ~96 % of its rate in bytes: ~24 GB/s of an HDR 200G
# NIC, ~48 GB/s of an NDR 400G one.
NIC_EFFICIENCY = 0.96
# The InfiniBand rates sysfs reports for SDR, DDR and QDR ports (2.5, 5, 10 Gb/s a lane, at 1X,
# 4X, 8X or 12X): their 8b/10b coding carries 8 bits of data in every 10, so a healthy QDR
# port reported as 40 Gb/s moves at most 32 Gb/s. FDR10 also reports 10, 40, 80 or 120 and
# carries 64b/66b (~97 % data), and sysfs's number alone cannot tell the two apart: those
# rates are held against the 8b/10b data rate, the lenient side, so a healthy QDR port is
# never failed, at the price of passing an FDR10 port down to 72 % of its rate.
RATES_8B10B = frozenset({2.5, 5.0, 10.0, 20.0, 30.0, 40.0, 60.0, 80.0, 120.0})
DATA_8B10B = 0.8
IB_TCP_PORT = 18515  # perftest's default port for its exchange; the i-th job port: + i
TCP_BW, BUSBW = "tcp_bw.py", "busbw.py"  # programs/
_NOT_LISTENING = re.compile(r"Couldn't connect to|Unable to open file descriptor")
_TOKEN = re.compile(r"[0-9a-f]{32}")


# --- the verdict arithmetic ----------------------------------------------------------------

@dataclass(frozen=True)
class Verdict:
    """A figure and what it is held against: the reference (the line rate, the expected bus
    bandwidth; None when unknown) and the share of it that passes (percent; None: the
    figure is reported, not judged, for the reason in note)."""
    figure: float
    unit: str  # "Gb/s" | "GB/s"
    reference: Optional[float] = None
    threshold: Optional[int] = None
    note: str = ""
    reference_note: str = ""  # after the reference: where it comes from ("40 Gb/s, 8b/10b")

    @property
    def percent(self) -> Optional[int]:
        """The share of the reference, rounded down: 179.9 of 200 shows 89 %, not 90 %."""
        if not self.reference or not math.isfinite(self.figure):
            return None
        return int(math.floor(self.figure * 100 / self.reference + 1e-9))

    @property
    def ok(self) -> bool:
        if self.reference is None or self.threshold is None:
            return True
        return self.figure * 100 >= self.threshold * self.reference

    def line(self, what: str) -> str:
        fig = f"{self.figure:.1f} {self.unit}"
        if self.reference is None:
            return _("{what}: {figure}; {note}").format(what=what, figure=fig, note=self.note)
        reference = f"{self.reference:.3g} {self.unit}"
        if self.reference_note:
            reference += f" ({self.reference_note})"
        of = _("{what}: {figure} of {reference} ({percent} %)").format(
            what=what, figure=fig, reference=reference, percent=self.percent)
        if self.threshold is None:
            return f"{of}; {self.note}"
        if self.ok:
            return _("{measured} ≥ {threshold} %: healthy").format(measured=of,
                                                                  threshold=self.threshold)
        return _("{measured} < {threshold} %: below the line rate").format(
            measured=of, threshold=self.threshold)


def ib_verdict(gbps: float, rate_gbps: Optional[float],
               link_layer: str = "InfiniBand") -> Verdict:
    """Against the port's data rate: its reported rate, less 8b/10b's coding at SDR/DDR/QDR
    rates (RATES_8B10B). RoCE (Ethernet) speeds are data rates already."""
    if not rate_gbps:
        return Verdict(gbps, "Gb/s", note=_("no line rate to compare (the port's rate is "
                                            "unknown)"))
    if link_layer != "Ethernet" and rate_gbps in RATES_8B10B:
        return Verdict(gbps, "Gb/s", rate_gbps * DATA_8B10B, IB_THRESHOLD,
                       reference_note=f"{rate_gbps:g} Gb/s, 8b/10b")
    return Verdict(gbps, "Gb/s", rate_gbps, IB_THRESHOLD)


@dataclass(frozen=True)
class Link:
    """The interface the route to a peer leaves by, and its speed (None: unknown, why)."""
    iface: str
    mbps: Optional[int]
    why: str = ""


def tcp_verdict(gbps: float, link: Link) -> Verdict:
    if link.mbps is None:
        return Verdict(gbps, "Gb/s", note=_("no line rate to compare ({why})").format(
            why=link.why))
    if link.mbps > TCP_FAST_MBPS:
        return Verdict(gbps, "Gb/s", link.mbps / 1000, note=_(
            "one TCP stream cannot fill a link this fast: no threshold"))
    return Verdict(gbps, "Gb/s", link.mbps / 1000, TCP_THRESHOLD)


def nics_used(ports: Sequence[Port], nproc: int) -> List[Port]:
    """The NICs an all_reduce with nproc processes per instance keeps busy: NCCL gives each
    GPU the NIC nearest it, so one process drives about one NIC whatever the node has. Which
    ones is NCCL's choice: the slowest are held to, so a healthy run passes whichever it
    took."""
    return sorted(ports, key=lambda p: p.rate_gbps or 0)[:max(1, min(len(ports), nproc))]


def expected_busbw(ports: Sequence[Port], nproc: Optional[int] = None) -> Optional[float]:
    """GB/s a torch all_reduce over these NICs should reach with nproc processes per instance
    (None: every NIC; the result None: a rate is unknown)."""
    used = nics_used(ports, len(ports) if nproc is None else nproc) if ports else []
    if not used or any(not p.rate_gbps for p in used):
        return None
    return sum(p.rate_gbps / 8 * NIC_EFFICIENCY for p in used)


def busbw_verdict(busbw: float, over_ib: bool, ports: Sequence[Port],
                  link: Optional[Link], nproc: Optional[int] = None) -> Verdict:
    """Over InfiniBand (NCCL on the job's ports, as many as it has processes per instance)
    held against their expected bus bandwidth, PASS at >= 90 %. Over TCP the figure and the
    interface's speed, not judged: gloo's reduction is bounded by the CPU as much as by the
    link, and the TCP check gives the link's verdict."""
    if over_ib:
        expected = expected_busbw(ports, nproc)
        if expected is None:
            return Verdict(busbw, "GB/s", note=_("no line rate to compare (a port's rate is "
                                                 "unknown)"))
        used = len(nics_used(ports, len(ports) if nproc is None else nproc))
        return Verdict(busbw, "GB/s", expected, IB_THRESHOLD, reference_note=_(
            "{used} of {total} NICs: one per process, {nproc} per instance").format(
            used=used, total=len(ports), nproc=nproc) if used < len(ports) else "")
    if link is None or link.mbps is None:
        return Verdict(busbw, "GB/s", note=_("no line rate to compare ({why})").format(
            why=link.why if link else _("no interface found")))
    return Verdict(busbw, "GB/s", link.mbps / 8000, note=_(
        "over TCP the CPU bounds it as much as the link: the TCP check gives the verdict"))


# --- what the checks share -----------------------------------------------------------------

def opt_in(id: str, title: Callable[[Ctx, str], str], run: Callable[[Ctx, str], List[Check]],
           needs: Tuple[N.Need, ...], frameworks: Tuple[str, ...] = ALL_FRAMEWORKS,
           networks: Tuple[str, ...] = ALL_NETWORKS) -> Spec:
    """A Spec that is no part of the report unless asked for (its needs start with
    N.BANDWIDTH); asked for, skipped at its first unmet need like any other."""
    def guarded(ctx: Ctx, host: str) -> List[Check]:
        unmet = next((need for need in needs if not need.met(ctx, host)), None)
        if unmet is N.BANDWIDTH:
            return []
        if unmet is not None:
            return [_skip(id, title(ctx, host), unmet.why(ctx, host))]
        return run(ctx, host)

    return Spec(id, title, guarded, frameworks=frameworks, networks=networks)


def peers(ctx: Ctx) -> List[str]:
    """The other hosts whose key login passed, in the job's order."""
    here = ctx.here_name()
    out = []
    for h in ctx.names:
        login = ctx.found(f"peer/{h}/login")
        if h != here and login is not None and login.status == PASS:
            out.append(h)
    return out


def _address(ctx: Ctx, host: str) -> str:
    if host not in ctx.addresses:
        r = ctx.ask(Resolve(host))
        ctx.addresses[host] = address_of(r.out) if r.ok else ""
    return ctx.addresses[host] or host


def link_to(ctx: Ctx, host: str) -> Link:
    """The interface the route to host leaves by and its speed, as the kernel says it."""
    address = _address(ctx, host)
    route = ctx.ask(RouteTo(address))
    iface = route_dev(route.out) if route.ok else ""
    if not iface:
        return Link("", None, _("the route to {host} names no interface").format(host=host))
    r = ctx.ask(LinkSpeed(iface))
    seen = parse_link_speed(r.out) if r.ok else {}
    try:
        mbps = int(seen.get("speed", "-1"))
    except ValueError:
        mbps = -1
    if seen.get("virtual") == "1" and seen.get("kind") not in ("bond", "vlan"):
        return Link(iface, None, _("{iface} is a virtual interface (veth or the like): its "
                                   "speed says nothing of the link").format(iface=iface))
    if mbps <= 0:
        return Link(iface, None, _("{iface} reports no speed").format(iface=iface))
    return Link(iface, mbps)


# --- InfiniBand: ib_write_bw -----------------------------------------------------------------

def ib_title(ctx: Ctx, host: str = "") -> str:
    return _("ib_write_bw between instances, against the port's line rate")


def check_ib_write_bw(ctx: Ctx, host: str = "") -> List[Check]:
    ports = job_ports(ctx.facts)[0]
    if not ports:
        return [_skip("cluster/ib-write-bw", ib_title(ctx),
                      _("no active RDMA port here: nothing to measure"))]
    here = ctx.here_name()
    return [ib_pair(ctx, here, peer, port, IB_TCP_PORT + i)
            for peer in peers(ctx) for i, port in enumerate(ports)]


def ib_pair(ctx: Ctx, here: str, peer: str, port: Port, tcp_port: int) -> Check:
    """ib_write_bw from here to peer on port (the same device name there: the same image on
    the same hardware). The client is retried while the server is still starting."""
    what = f"{here} → {peer} ({port.name})"
    title = _("ib_write_bw {pair}").format(pair=what)
    server = IbWriteBwServer(peer, ctx.port, port.hca, port.number, tcp_port, user=ctx.user)
    client = IbWriteBwClient(_address(ctx, peer), port.hca, port.number, tcp_port,
                             user=ctx.user)
    command = f"{server.command}  &  {client.command}"
    t0 = time.monotonic()
    pool = ThreadPoolExecutor(max_workers=1)
    served = pool.submit(ctx.ask, server)
    deadline = t0 + 20
    try:
        while True:
            r = ctx.ask(client)
            if r.ok or not _NOT_LISTENING.search(r.out) or time.monotonic() > deadline:
                break
            try:  # the server ended (it failed): retrying cannot help
                served.result(timeout=0.5)
                break
            except FutureTimeout:
                continue
        if r.ok:
            gather(ctx, [served])
    finally:
        pool.shutdown(wait=False)  # a server left waiting ends by its own time-out
    gbps = parse_ib_write_bw(r.out) if r.ok else None
    cid = f"cluster/ib-write-bw/{peer}/{port.name}"
    if gbps is None:
        missing = r.rc == 127
        return _check(cid, title, r, False, t0=t0, command=command, host=peer,
                      detail=r.last_line(),
                      plain=(_("perftest (ib_write_bw) is not installed here: the IB plan "
                               "installs it (apply it again), or install the perftest "
                               "package.") if missing else
                             _("ib_write_bw did not complete between {a} and {b}; its output "
                               "names the reason.").format(a=here, b=peer)))
    v = ib_verdict(gbps, port.rate_gbps, port.link_layer)
    return _check(cid, title, r, v.ok, t0=t0, command=command, host=peer,
                  detail=v.line(what),
                  plain=_("{a} → {b} carries {percent} % of the port's line rate: a degraded "
                          "link (a cable or port trained at a lower width or speed, a "
                          "congested or misrouted fabric), or the NIC in a PCIe slot slower "
                          "than the port.").format(a=here, b=peer, percent=v.percent))


# --- TCP: programs/tcp_bw.py ---------------------------------------------------------------

def tcp_title(ctx: Ctx, host: str = "") -> str:
    return _("TCP throughput between instances, against the interface's speed")


def check_tcp_bw(ctx: Ctx, host: str = "") -> List[Check]:
    here = ctx.here_name()
    return [tcp_pair(ctx, here, peer) for peer in peers(ctx)]


def tcp_pair(ctx: Ctx, here: str, peer: str) -> Check:
    cid = f"cluster/tcp-bandwidth/{peer}"
    prog = program(TCP_BW)
    t0 = time.monotonic()
    link = link_to(ctx, peer)
    what = (_("{a} → {b} over TCP ({iface})").format(a=here, b=peer, iface=link.iface)
            if link.iface else _("{a} → {b} over TCP").format(a=here, b=peer))
    title = _("TCP throughput {pair}").format(pair=f"{here} → {peer}")
    address = _address(ctx, peer)
    try:  # the receiver binds it: it goes to the peer's shell, and only an address will do
        address = str(ipaddress.ip_address(address))
    except ValueError:
        return _check(cid, title, None, False, t0=t0, command=Resolve(peer).command,
                      host=peer, detail=_("no IP address for {host} here").format(host=peer),
                      plain=_("The TCP test needs {host}'s IP address, and {host} does not "
                              "resolve here (getent hosts {host}).").format(host=peer))
    receiver = TcpBwReceiver(peer, ctx.port, ctx.python, prog, address, user=ctx.user)
    r = ctx.ask(receiver)
    listen = parse_tcp_listen(r.out) if r.ok else {}
    port, token = listen.get("port", ""), listen.get("token", "")
    if not (digits(port) and 0 < int(port) < 65536 and _TOKEN.fullmatch(token)):
        return _check(cid, title, r, False, t0=t0, host=peer, detail=r.last_line(),
                      plain=_("{host} has no address {address}, which its name resolves to "
                              "here (NAT between the instances, or /etc/hosts that differ): "
                              "the TCP test listens on the address the sender uses.").format(
                          host=peer, address=address) if "cannot listen on" in r.out else
                      _("The TCP test's receiver did not start on {host} ({python} "
                        "there?).").format(host=peer, python=ctx.python))
    sender = TcpBwSender(address, int(port), token, TCP_MIB, ctx.python, prog, TCP_SECONDS)
    s = ctx.ask(sender)
    command = f"{receiver.command}  ;  {sender.command}"
    gbps = parse_tcp_bw(s.out) if s.ok else None
    if gbps is None or gbps <= 0:
        return _check(cid, title, s, False, t0=t0, host=peer, command=command,
                      detail=s.last_line(),
                      plain=_("The TCP test could not send to {host}: a firewall between the "
                              "instances drops the port it chose.").format(host=peer))
    v = tcp_verdict(gbps, link)
    return _check(cid, title, s, v.ok, t0=t0, host=peer, command=command,
                  detail=v.line(what),
                  plain=_("TCP from {a} to {b} carries {percent} % of {iface}'s speed: the "
                          "link trained at a lower speed, or the path is congested.").format(
                      a=here, b=peer, percent=v.percent, iface=link.iface))


# --- PyTorch: programs/busbw.py through the launch script --------------------------------

def busbw_title(ctx: Ctx, host: str = "") -> str:
    return _("torch all_reduce bus bandwidth across two instances")


def check_torch_busbw(ctx: Ctx, host: str = "") -> List[Check]:
    cid, title = "cluster/torch-busbw", busbw_title(ctx)
    pair = N.torch_pair(ctx)
    assert pair is not None  # its needs: N.A_PEER_LOGIN
    here, other = pair
    t0 = time.monotonic()
    # as many processes per instance as the all_reduce before it ran (it passed: the count
    # is valid)
    nproc = torch_nproc(ctx.facts, os.environ)[0]
    r_local, r_remote, command, failed = launch_pair(ctx, other, BUSBW, nproc)
    if failed is not None:
        return [_skip(cid, title, failed, command=command)]
    both = Ran(r_local.argv, r_local.rc or r_remote.rc, r_local.out + "\n" + r_remote.out)
    seen = parse_busbw(both.out)
    try:
        # parse_busbw leaves out a busbw that is not finite: a KeyError, no figure
        busbw, ranks, backend = float(seen["busbw"]), int(seen["size"]), seen["backend"]
        if not both.ok:
            raise ValueError(both.last_line())
    except (KeyError, ValueError):
        return [_check(cid, title, both, False, t0=t0, command=command,
                       detail=both.last_line(), fallback="nccl-no-socket",
                       plain=_("The bus-bandwidth all_reduce did not complete: the diagnosis "
                               "names the reason."))]
    over_ib = ctx.network == "ib" and backend == "nccl"
    what = _("{a} + {b}, {n} ranks, {backend}").format(a=here, b=other, n=ranks,
                                                      backend=backend)
    if not over_ib:
        what = _("{what} over TCP").format(what=what)
    ports = job_ports(ctx.facts)[0]
    v = busbw_verdict(busbw, over_ib, ports, None if over_ib else link_to(ctx, other), nproc)
    return [_check(cid, title, both, v.ok, t0=t0, command=command,
                   detail=v.line(what),
                   plain=_("The all_reduce's bus bandwidth is {percent} % of what the job's "
                           "NICs should give: NCCL may not use every NIC, or not GPUDirect "
                           "RDMA (see the NCCL checks above).").format(percent=v.percent))]


_PAIR_NEEDS = (N.BANDWIDTH, N.ACT_AS, N.TWO_HOSTS, N.A_JOB_HOST, N.A_PEER_LOGIN)

# cluster.CHECKS lists these, last: they read what the checks before them found.
IB_WRITE_BW = opt_in("cluster/ib-write-bw", ib_title, check_ib_write_bw, _PAIR_NEEDS,
                     networks=("ib",))
TCP_BANDWIDTH = opt_in("cluster/tcp-bandwidth", tcp_title, check_tcp_bw, _PAIR_NEEDS,
                       networks=("tcp",))
TORCH_BUSBW = opt_in("cluster/torch-busbw", busbw_title, check_torch_busbw,
                     (N.BANDWIDTH, N.TORCH, *_PAIR_NEEDS[1:], N.TORCH_ALLREDUCE_PASSED),
                     frameworks=("pytorch",))
