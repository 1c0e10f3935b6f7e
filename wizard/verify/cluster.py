"""Checks across the whole cluster, once every peer answered: for MPI, `mpirun hostname` on
every host (and over IB an MPI all-reduce whose UCX log shows IB or TCP), in the names of the
Open MPI installed here (`mpirun --version`: 5.x takes PRRTE's) and kept to the interface
that the route to the first other host goes through; for PyTorch a two-instance
torch.distributed all-reduce started through the launch script, so through torchrun's
rendezvous on its port, with as many processes on each instance as the launch starts (gloo
on CPU, nccl on GPU; over IB its NCCL log shows IB or sockets).

The hosts are the ones the launch script would use, in its order, and "which one is this" is
its answer (hpcwizard.runtime): what passes here is what the launch does."""
from __future__ import annotations

import os
import stat
import time
from typing import Dict, List, Optional, Sequence, Tuple

from ..diagnose import diagnose, explain
from ..detect.software import parse_mpirun_version
from ..facts import Software
from ..i18n import _
from ..inputs import ascii_int
from ..peer_memory import NEWEST, looks_for, paths, release
from ..render.mpirun import iface_args, mpirun_args
from ..runtime import hostfile_text
from . import bandwidth as BW
from . import fleet
from . import needs as N
from .context import Ctx, _check, _skip
from .jobenv import job_env
from .nccl_log import nccl_transport
from .pair import (RENDEZVOUS_PORT, STATIC_RENDEZVOUS, cache_path, launch_pair,  # noqa: F401
                   spread, torch_nproc)
from .parse import (HostMatch, address_of, parse_allreduce, route_dev, short,
                    transport_from_ucx_log)
from .probes import (BuildMpiProgram, IsExecutable, Mpirun, MpirunVersion, Ran, Resolve,
                     RouteTo)
from .results import FAIL, PASS, Check
from .shipped import MPI_ALLREDUCE, TORCH_ALLREDUCE, program
from .spec import Spec


def _hostfile(ctx: Ctx, names: Sequence[str]) -> str:
    """The hostfile of these of the job's hosts, with the slots the launch gives them (a
    hostfile's own counts, else 1): verify's checks place one rank a host (--map-by node)."""
    hosts = ctx.hosts
    per = dict(zip(hosts.names, hosts.slots)) if hosts is not None else {}
    return hostfile_text(list(names), [per.get(n, 1) for n in names])


def mpi_setup(ctx: Ctx) -> Tuple[Optional[int], str, str, str]:
    """(Open MPI's major version, its version, the TCP interface, which route chose it) for
    verify's mpirun commands, found once per verification. The version is the one
    `mpirun --version` names (apply may have installed Open MPI after the facts were
    detected), else the facts'; the interface is the one the route to the first other host
    goes through (`ip -o route get ADDRESS`), as the launch script chooses it."""
    if ctx.mpi is not None:
        return ctx.mpi
    r = ctx.ask(MpirunVersion(user=ctx.user))
    flavour, version = parse_mpirun_version(r.out) if r.ok else ("", "")
    sw = Software(mpi_flavour=flavour, mpi_version=version) if flavour else ctx.facts.software
    major = sw.ompi_major
    here = ctx.rank()
    others = [h for i, h in enumerate(ctx.names) if i != here]
    iface = why = ""
    if others:
        g = ctx.ask(Resolve(others[0]))
        addr = address_of(g.out) if g.ok else ""
        route = ctx.ask(RouteTo(addr)) if addr else None
        iface = route_dev(route.out) if route is not None and route.ok else ""
        why = _("the route to {host} at {address}").format(host=others[0], address=addr)
    ctx.mpi = (major, sw.mpi_version if major is not None else "", iface, why)
    return ctx.mpi


def _mpi_note(ctx: Ctx) -> str:
    """What verify's mpirun used: '; Open MPI 5.0.7; TCP interface eth0 (the route to ...)'."""
    _major, version, iface, why = ctx.mpi or (None, "", "", "")
    parts = [f"Open MPI {version}"] if version else []
    if iface:
        parts.append(_("TCP interface {iface} ({why})").format(iface=iface, why=why))
    return "".join("; " + p for p in parts)


def _mpirun_args(ctx: Ctx) -> List[str]:
    """The plan's mpirun arguments in the names of the Open MPI installed here (5.x:
    PRRTE's), kept to the interface that reaches the other hosts, with the job's
    environment as the launch script passes it (jobenv: -x names, --prefix)."""
    major, version, iface, _why = mpi_setup(ctx)
    argv = ["--allow-run-as-root"] if ctx.target == "root" or ctx.plan.target.uid == 0 else []
    argv += mpirun_args(ctx.plan.job, major)
    if iface:
        argv += iface_args(iface, major)
    argv += job_env(ctx, version).mpirun_args(tuple(argv))
    return argv


def mpirun_title(ctx: Ctx, host: str = "") -> str:
    if ctx.cannot_act_as:
        return _("mpirun across hosts")
    return _("mpirun starts a process on all {n} hosts").format(n=len(ctx.names))


def unmatched(found: HostMatch) -> Dict[str, str]:
    """Who did not answer as one listed host should, in the hosts' order, strangers last:
    label -> why (cluster/mpirun and cluster/user-env say it alike)."""
    out: Dict[str, str] = {}
    for host in found.matcher.hosts:
        k = len(found.of(host))
        if k != 1:
            out[found.label(host)] = (_("no rank answered") if not k else
                                      _("answered more than once"))
    out.update((said, _("not one of the job's hosts")) for said in found.strangers)
    return out


def check_mpirun(ctx: Ctx, host: str = "") -> Check:
    t0 = time.monotonic()
    names = ctx.names
    n = len(names)
    hf = ctx.write_temp("hostfile", _hostfile(ctx, names))
    r = ctx.ask(Mpirun(hf, n, (*_mpirun_args(ctx), "--map-by", "node"), ("hostname",),
                       user=ctx.user))
    matcher = ctx.matcher()
    found = matcher.match(matcher.lines(r.out) if r.ok else [])
    got = sorted({short(a.said) for a in found.answers})
    ok = r.ok and found.ok
    detail = (_("{n} ranks on {hosts}").format(n=n, hosts=", ".join(got)) + _mpi_note(ctx)
              if ok else
              "; ".join([_("ran on {hosts}").format(hosts=", ".join(got)),
                         *(f"{h}: {why}" for h, why in unmatched(found).items())])
              if r.ok else r.last_line())
    return _check("cluster/mpirun", mpirun_title(ctx), r, ok, detail=detail,
                  fallback="mpi-daemons", t0=t0,
                  plain=_("mpirun could not start processes on every instance; the diagnosis "
                          "below names the reason."))


def _read_owned(path: str, uid: int, limit: int = 64 * 1024 * 1024) -> bytes:
    """The bytes of path when it is a regular file (not a symlink) owned by uid, else b"":
    root copies the job user's test program to the peers, never a file that user could not
    read by pointing a link at it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return b""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid or st.st_size > limit:
            return b""
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks) if size <= limit else b""
    except OSError:
        return b""
    finally:
        os.close(fd)


def mpi_transport_title(ctx: Ctx, host: str = "") -> str:
    return _("MPI over UCX uses InfiniBand between instances")


def check_mpi_transport(ctx: Ctx, host: str = "") -> Check:
    """Over IB: an MPI all-reduce across two instances with UCX logging: IB or TCP?"""
    title = mpi_transport_title(ctx)
    source = program(MPI_ALLREDUCE)
    exe = cache_path(ctx, MPI_ALLREDUCE, source)[:-2]
    t0 = time.monotonic()
    if not ctx.ask(IsExecutable(exe, user=ctx.user)).ok:
        r = ctx.ask(BuildMpiProgram(exe, source, user=ctx.user))
        if not r.ok:
            return _skip("cluster/mpi-transport", title,
                         _("cannot build the test program with mpicc: {error}").format(
                             error=r.last_line()),
                         command=r.command)
    pair = list(ctx.names[:2])
    binary = _read_owned(exe, ctx.plan.target.uid)
    if binary:
        failed = spread(ctx, pair, exe, binary)
        if failed is not None:
            return _check("cluster/mpi-transport", title, failed, False, t0=t0,
                          detail=failed.last_line(),
                          plain=_("Could not copy the MPI test program to the other "
                                  "instance."))
    hf = ctx.write_temp("hostfile-2", _hostfile(ctx, pair))
    args = [*_mpirun_args(ctx), "--map-by", "node", "--mca", "pml", "ucx",
            "-x", "UCX_LOG_LEVEL=info"]
    passed = {a for i, a in enumerate(args) if i and args[i - 1] == "-x"}
    for k, _v in ctx.plan.launch_env:
        if k not in passed:
            args += ["-x", k]
    r = ctx.ask(Mpirun(hf, 2, tuple(args), (exe,), user=ctx.user,
                       extra_env=(*ctx.plan.launch_env, ("UCX_LOG_LEVEL", "info"))))
    used = transport_from_ucx_log(r.out)
    ok = r.ok and used == "ib"
    detail = {"ib": _("UCX chose InfiniBand"), "tcp": _("UCX fell back to TCP")}.get(
        used, _("the UCX log does not say which transport")) if r.ok else r.last_line()
    return _check("cluster/mpi-transport", title, r, ok, detail=detail, t0=t0,
                  fallback="ucx-no-transports",
                  plain=_("MPI between instances does not use InfiniBand (it runs, but over "
                          "TCP)") if r.ok else
                  _("The MPI test job failed; the diagnosis names the reason."))


def torch_allreduce_title(ctx: Ctx, host: str = "") -> str:
    return _("torch.distributed all_reduce across two instances")


def allreduce_problem(local: Sequence[Dict[str, str]], remote: Sequence[Dict[str, str]],
                      nproc: int) -> str:
    """What is wrong with the two halves' result lines for nproc processes on each ("" when
    nothing): every rank of the world 0..2*nproc-1 answered once, nproc of them from each
    half, each with that world size and its sum of 1..2*nproc."""
    world = 2 * nproc
    want = world * (world + 1) // 2
    seen: Dict[int, int] = {}
    for x in (*local, *remote):
        r = ascii_int(x.get("rank", ""))
        if r is not None:
            seen[r] = seen.get(r, 0) + 1
    missing = [r for r in range(world) if r not in seen]
    extra = sorted(r for r, k in seen.items() if k > 1 or r >= world)
    if missing or extra or len(local) != nproc or len(remote) != nproc:
        return _("{got} of {want} ranks answered ({here} here, {there} there); missing: "
                 "{missing}{extra}").format(
            got=len(local) + len(remote), want=world, here=len(local), there=len(remote),
            missing=", ".join(map(str, missing)) or "-",
            extra="; " + _("unexpected: {ranks}").format(ranks=", ".join(map(str, extra)))
            if extra else "")
    for x in (*local, *remote):
        try:
            ok = int(x.get("size", "")) == world and float(x.get("sum", "")) == want
        except ValueError:
            ok = False
        if not ok:
            return _("rank {rank}: world size {size}, sum {sum}; expected {world} and "
                     "{want}").format(rank=x.get("rank"), size=x.get("size"),
                                      sum=x.get("sum"), world=world, want=want)
    return ""


def check_torch_allreduce(ctx: Ctx, host: str = "") -> Check:
    """nproc processes on this host and nproc on another, through the launch script."""
    tid, title = "cluster/torch-allreduce", torch_allreduce_title(ctx)
    pair = N.torch_pair(ctx)
    assert pair is not None  # its needs: N.A_JOB_HOST, N.A_PEER_LOGIN
    here, other = pair
    nproc, nproc_from = torch_nproc(ctx.facts, os.environ)
    if not nproc:
        return _check(tid, title, None, False, detail=nproc_from,
                      plain=_("Set NPROC_PER_NODE to the processes each instance starts."))
    t0 = time.monotonic()
    # NET beside NCCL's default subsystems: the lines that say whether GPUDirect RDMA is on
    # for each HCA, and why not (the check below reads them: hpcwizard.verify.nccl_log).
    r_local, r_remote, command, failed = launch_pair(
        ctx, other, TORCH_ALLREDUCE, nproc,
        (("NCCL_DEBUG", "INFO"), ("NCCL_DEBUG_SUBSYS", "INIT,BOOTSTRAP,ENV,NET")))
    if failed is not None:
        return _skip(tid, title, _("{reason}; run the launch script on both instances "
                                   "yourself").format(reason=failed), command=command)
    mine, theirs = parse_allreduce(r_local.out), parse_allreduce(r_remote.out)
    results = mine + theirs
    problem = allreduce_problem(mine, theirs, nproc) if r_local.ok and r_remote.ok else ""
    ok = r_local.ok and r_remote.ok and not problem
    both = Ran(r_local.argv, r_local.rc or r_remote.rc, r_local.out + "\n" + r_remote.out)
    backend = results[0].get("backend", "") if results else ""
    ctx.allreduce = (both, backend, command)
    detail = (_("{backend}: sum {sum} on {n} ranks on 2 instances ({per} per instance), as "
                "expected (rendezvous at {address}; per instance: {why})").format(
        backend=backend, sum=results[0].get("sum"), n=2 * nproc, per=nproc, why=nproc_from,
        address=f"{here}:{RENDEZVOUS_PORT}") if ok else
              problem or (_("results: {results}").format(results=results) if results
                          else both.last_line()))
    return _check(tid, title, both, ok, detail=detail, t0=t0, command=command,
                  fallback="nccl-no-socket",
                  plain=_("The two-instance all_reduce did not complete: the diagnosis names "
                          "the reason (rendezvous port, interface, NCCL/gloo)."))


def nccl_transport_title(ctx: Ctx, host: str = "") -> str:
    return _("NCCL uses InfiniBand between instances")


def check_nccl_transport(ctx: Ctx, host: str = "") -> Check:
    """What the all-reduce's NCCL log says (NCCL_DEBUG=INFO): nothing more runs. Over IB,
    its connection lines also say whether the NIC reads GPU memory itself (GPUDirect RDMA)
    or every transfer is copied through host memory. The all-reduce ran on NCCL (its needs):
    with gloo on CPU this check is skipped, so nothing about GPUDirect is claimed there."""
    assert ctx.allreduce is not None  # its needs: N.ALLREDUCE
    both, _backend, command = ctx.allreduce
    found = nccl_transport(both.out)
    title = nccl_transport_title(ctx)
    if found.net != "ib":
        return Check("cluster/nccl-transport", title, FAIL, command,
                     # one instance without /dev/infiniband: the others' IB is no pass
                     _("NCCL fell back to sockets (TCP) on {hosts}, IB on {others}").format(
                         hosts=", ".join(found.socket_hosts), others=", ".join(found.ib_hosts))
                     if found.socket_hosts and found.ib_hosts else
                     _("NCCL fell back to sockets (TCP)") if found.net == "socket"
                     else _("the NCCL log does not say"),
                     _("NCCL between instances does not use InfiniBand: the job runs, but "
                       "slowly."),
                     diagnoses=tuple(diagnose(both.lines(), scope="job")) or
                     (explain("nccl-socket-fallback"),))
    if found.gdr is None:  # no connection line: the log says IB, and nothing of GPUDirect
        return Check("cluster/nccl-transport", title, PASS, command, _("NCCL chose IB"))
    if found.gdr:
        return Check("cluster/nccl-transport", title, PASS, command,
                     _("NCCL chose IB with GPUDirect RDMA"))
    if found.too_far and not found.gdr_disabled_hcas:
        # NCCL could, and chose not to: through the CPU's root complex, GPUDirect is often
        # slower than host memory (NCCL_NET_GDR_LEVEL moves that line). Not a fault here.
        return Check("cluster/nccl-transport", title, PASS, command,
                     _("NCCL chose IB without GPUDirect RDMA: the GPU and the HCA are too far "
                       "apart on PCIe for it (NCCL_NET_GDR_LEVEL)"))
    detail = (_("NCCL chose IB without GPUDirect RDMA on {hosts}: data goes through host "
                "memory").format(hosts=", ".join(found.hosts_without_gdr))
              if found.hosts_without_gdr else
              _("NCCL chose IB without GPUDirect RDMA: data goes through host memory"))
    plain = _("The NIC cannot read GPU memory: load nvidia-peermem on the host (lsmod | grep "
              "peermem), or use DMA-BUF (Linux 5.12 or later with NVIDIA's open kernel "
              "modules).")
    looked = looks_for(found.version_tuple)
    if looked and looked != NEWEST.names:
        plain += " " + _("NCCL {version} looks for a loaded peer-memory module only at "
                         "{looked}; NCCL {newest} and later look at {paths}.").format(
            version=found.version, looked=paths(looked), newest=release(NEWEST),
            paths=paths(NEWEST.names))
    if not (found.gdr_disabled_hcas or found.gdr_enabled_hcas):
        # The HCA and distance lines are NCCL_NET's: without them the log cannot tell a
        # missing module from NCCL's own choice for a GPU far from the NIC.
        plain += " " + _("If 'nvidia-smi topo -m' shows PHB, NODE or SYS between the GPU and "
                         "the NIC, NCCL keeps GPUDirect RDMA off by choice "
                         "(NCCL_DEBUG_SUBSYS=INIT,NET logs why).")
    seen = diagnose(both.lines(), scope="job")
    gdr = [d for d in seen if d.id == "nccl-gdr-disabled"] or [explain("nccl-gdr-disabled")]
    return Check("cluster/nccl-transport", title, FAIL, command, detail, plain,
                 diagnoses=tuple(gdr + [d for d in seen if d.id != "nccl-gdr-disabled"]))


MPI, TORCH, IB = ("mpi",), ("pytorch",), ("ib",)

# In the order they are reported; only with hosts (verify --here has none of them).
CHECKS = (
    Spec("cluster/mpirun", mpirun_title, check_mpirun, frameworks=MPI,
         needs=(N.REACHABLE, N.ACT_AS)),
    Spec("cluster/mpi-transport", mpi_transport_title, check_mpi_transport, frameworks=MPI,
         networks=IB, needs=(N.MPIRUN, N.TWO_HOSTS)),
    Spec("cluster/torch-allreduce", torch_allreduce_title, check_torch_allreduce,
         frameworks=TORCH,
         needs=(N.TORCH, N.ACT_AS, N.TWO_HOSTS, N.A_JOB_HOST, N.A_PEER_LOGIN)),
    Spec("cluster/nccl-transport", nccl_transport_title, check_nccl_transport,
         frameworks=TORCH, networks=IB, needs=(N.ALLREDUCE, N.NCCL)),
    Spec("cluster/ib-same", fleet.same_title, fleet.check_same, networks=IB,
         needs=(N.TWO_HOSTS, N.IB_FACTS_OF_TWO)),
    # verify --bandwidth only (bandwidth.opt_in): not asked for, no part of the report
    BW.IB_WRITE_BW,
    BW.TCP_BANDWIDTH,
    BW.TORCH_BUSBW,
)
