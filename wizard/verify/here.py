"""Checks on this instance: for MPI, sshd listening on the port and key login in BatchMode,
both at 127.0.0.1 (not 'localhost', a name that does not resolve everywhere sshd works), and
the settings sshd and ssh really use; over InfiniBand: OpenMPI has pml ucx, UCX lists an IB
transport, the ports are ACTIVE (and their rate), uverbs devices open, locked memory is
unlimited; for PyTorch: torch and NCCL import, and the SSH checks are skipped with the reason
(torchrun's rendezvous is TCP; the job needs no SSH)."""
from __future__ import annotations

import time
from typing import List, Tuple

from ..diagnose import explain
from ..detect.software import parse_ompi_info
from ..i18n import _
from ..plan import package_manager, peer_sample
from ..proc import NOT_FOUND
from . import needs as N
from .context import Ctx, _check
from .parse import effective, first_line, ib_transports, parse_torch_probe, parse_ucx_devices
from .probes import (NO_UVERBS, MemlockLimit, OmpiInfo, OpenUverbs, Ran, SshCommand,
                     SshdInEffect, SshInEffect, TcpConnect, TorchImport, UcxDevices)
from .results import FAIL, PASS, Check
from .shipped import TORCH_PROBE, program
from .spec import Spec

# What sshd must have in effect: keys only, root by key at most. sshd -T names
# prohibit-password "without-password" before OpenSSH 7.0 and after, depending on the build.
_SSHD_PROMISE = (("passwordauthentication", ("no",)), ("kbdinteractiveauthentication", ("no",)),
                 ("pubkeyauthentication", ("yes",)),
                 ("permitrootlogin", ("prohibit-password", "without-password", "no")))


# What installs each program a check here runs (the recipes' names: ssh.toml, mpi.toml,
# ucx.toml): a program that is not there is said to be missing, with what installs it, and
# not taken for a failure of what it would have shown.
_PACKAGES = {"sshd": {"apt": "openssh-server", "dnf": "openssh-server", "yum": "openssh-server"},
             "ompi_info": {"apt": "openmpi-bin", "dnf": "openmpi", "yum": "openmpi"},
             "ucx_info": {"apt": "ucx-utils", "dnf": "ucx", "yum": "ucx"}}


def _not_installed(r: Ran, program: str) -> bool:
    """The program itself could not be started (127, and the message names it: runuser or
    bash missing is not the program missing)."""
    return r.rc == NOT_FOUND and program in r.last_line()


def _install_hint(ctx: Ctx, program: str) -> str:
    names = _PACKAGES[program]
    pm = package_manager(ctx.facts)
    package = names.get(pm) or " / ".join(sorted(set(names.values())))
    text = _("{program} is not installed here (or not on the PATH): install the {package} "
             "package ('hpcwizard apply' of this plan installs it), then verify again.").format(
        program=program, package=package)
    if program == "ompi_info" and pm in ("dnf", "yum"):
        text += " " + _("On this distribution OpenMPI's programs are in /usr/lib64/openmpi/bin, "
                        "which must be on the PATH.")
    return text


def sshd_title(ctx: Ctx, host: str = "") -> str:
    return _("sshd listens on port {port} here").format(port=ctx.port)


def check_sshd(ctx: Ctx, host: str = "") -> Check:
    t0 = time.monotonic()
    r = ctx.ask(TcpConnect("127.0.0.1", ctx.port))
    return _check("here/sshd", sshd_title(ctx), r, r.ok,
                  detail=(_("{address} answers").format(address=f"127.0.0.1:{ctx.port}")
                          if r.ok else r.last_line()),
                  plain=_("Nothing listens on port {port} on this instance: sshd is not "
                          "running (containers do not start it by themselves).").format(
                      port=ctx.port),
                  fallback="ssh-refused", t0=t0)


def sshd_settings_title(ctx: Ctx, host: str = "") -> str:
    return _("sshd in effect: port {port}, keys only").format(port=ctx.port)


def check_sshd_settings(ctx: Ctx, host: str = "") -> Check:
    """What sshd really uses (sshd -T), not what a file says: an earlier drop-in's value wins
    in sshd, so a file can say 'PasswordAuthentication no' while passwords are on."""
    root = ctx.plan.target.is_root
    probe = SshdInEffect() if root else SshdInEffect(
        config=f"{ctx.plan.target.home}/.sshd_config", user=ctx.user)
    t0 = time.monotonic()
    r = ctx.ask(probe)
    got = effective(r.out) if r.ok else {}
    # nothing is wrong in settings sshd did not report: its failure is the check's line
    wrong = [f"{k} {' '.join(got.get(k, ['?']))}" for k, allowed in _SSHD_PROMISE
             if r.ok and got.get(k, [""])[0] not in allowed]
    if r.ok and str(ctx.port) not in got.get("port", []):
        wrong.insert(0, f"port {' '.join(got.get('port', ['?']))}")
    ok = r.ok and not wrong
    if r.ok:
        plain = _("sshd does not use the settings hpcwizard wrote ({wrong}): another "
                  "file sets them first (sshd keeps the first value it reads). Run "
                  "'hpcwizard apply' again: it names the file.").format(wrong=", ".join(wrong))
    elif _not_installed(r, "sshd"):
        plain = _install_hint(ctx, "sshd")
    else:  # sshd -T refused its configuration (or could not read it): its output says why
        plain = _("sshd could not report the settings it would use (sshd -T failed): its "
                  "message, on the check's line, says why.")
    return _check("here/sshd-settings", sshd_settings_title(ctx), r, ok,
                  detail=(_("port {port}, passwords and keyboard-interactive off").format(
                      port=ctx.port) if ok else ", ".join(wrong) or r.last_line()),
                  plain=plain, t0=t0)


def _peer_sample(ctx: Ctx) -> str:
    return peer_sample(ctx.plan.choices.peers)


def client_settings_title(ctx: Ctx, host: str = "") -> str:
    return _("ssh in effect for {host}: port {port}, no prompts").format(
        host=_peer_sample(ctx), port=ctx.port)


def check_client_settings(ctx: Ctx, host: str = "") -> Check:
    """What ssh really uses for the job's peers (ssh -G), as the job's user."""
    sample = _peer_sample(ctx)
    t0 = time.monotonic()
    r = ctx.ask(SshInEffect(sample, user=ctx.user))
    got = effective(r.out) if r.ok else {}
    wrong = [f"{k} {' '.join(got.get(k, ['?'])[:1])}" for k, want in (
        ("port", str(ctx.port)), ("batchmode", "yes")) if got.get(k, [""])[0] != want]
    ok = r.ok and not wrong
    return _check("here/ssh-settings", client_settings_title(ctx), r, ok,
                  detail=(_("port {port}, batchmode yes").format(port=ctx.port) if ok else
                          ", ".join(wrong) or r.last_line()),
                  plain=_("ssh does not use the settings hpcwizard wrote for {host} ({wrong}): "
                          "an earlier 'Host' entry in ~/.ssh/config or /etc/ssh/ssh_config sets "
                          "them first.").format(host=sample, wrong=", ".join(wrong) or r.last_line()),
                  t0=t0)


def login_title(ctx: object = None, host: str = "") -> str:
    return _("key login to this host (BatchMode)")


def check_self_login(ctx: Ctx, host: str = "") -> Check:
    """To 127.0.0.1, not 'localhost': that name does not resolve everywhere sshd works (an
    /etc/hosts without it), and this check is about the key and sshd, not about names."""
    t0 = time.monotonic()
    # 127.0.0.1 is not among the peers: pinned, its key is in the plan's known_hosts line;
    # with host keys off it is checked no more than the peers are
    r = ctx.ask(SshCommand("127.0.0.1", ctx.port, "true", user=ctx.user,
                           unchecked=ctx.plan.choices.host_keys == "off"))
    return _check("here/login", login_title(), r, r.ok,
                  detail=f"{ctx.target}@127.0.0.1:{ctx.port}" if r.ok else r.last_line(),
                  plain=_("{user} cannot log in to this instance with its key without a "
                          "prompt; mpirun would fail the same way on every instance.").format(
                      user=ctx.target),
                  t0=t0)


def check_ompi_ucx(ctx: Ctx, host: str = "") -> Check:
    t0 = time.monotonic()
    r = ctx.ask(OmpiInfo())
    pml: Tuple[str, ...] = ()
    if r.ok:
        pml = tuple(parse_ompi_info(r.out).get("pml", ()))  # type: ignore[arg-type]
    ok = r.ok and "ucx" in pml
    detail = (_("pml components: {names}").format(names=", ".join(pml) or _("none"))
              if r.ok else r.last_line())
    if _not_installed(r, "ompi_info"):
        return _check("here/ompi-ucx", ompi_ucx_title(ctx), r, False, detail=detail,
                      plain=_install_hint(ctx, "ompi_info"), t0=t0)
    return _check("here/ompi-ucx", ompi_ucx_title(ctx), r, ok,
                  detail=detail,
                  plain=_("This OpenMPI cannot use UCX, so it cannot use InfiniBand: use an "
                          "OpenMPI built with UCX (e.g. the openmpi-ib preset image)."),
                  fallback="pml-ucx", t0=t0)


def ompi_ucx_title(ctx: Ctx, host: str = "") -> str:
    return _("OpenMPI has the UCX transport (pml ucx)")


def ucx_ib_title(ctx: Ctx, host: str = "") -> str:
    return _("UCX lists an InfiniBand transport")


def check_ucx_ib(ctx: Ctx, host: str = "") -> Check:
    t0 = time.monotonic()
    r = ctx.ask(UcxDevices())
    hcas = [h.name for h in ctx.facts.hcas if not h.software]
    found = ib_transports(parse_ucx_devices(r.out), hcas) if r.ok else []
    detail = (", ".join(found[:6]) + (" ..." if len(found) > 6 else "")) if found else \
        (r.last_line() if not r.ok else _("no rc/dc/ud transport on an IB device"))
    if _not_installed(r, "ucx_info"):
        return _check("here/ucx-ib", ucx_ib_title(ctx), r, False, detail=detail,
                      plain=_install_hint(ctx, "ucx_info"), t0=t0)
    return _check("here/ucx-ib", ucx_ib_title(ctx), r, bool(found),
                  detail=detail,
                  plain=_("UCX sees no InfiniBand device here, so MPI would run over TCP: the "
                          "IB device is not passed into the container, or the verbs libraries "
                          "are missing."), fallback="ucx-no-transports", t0=t0)


def _job_ports(ctx: Ctx) -> List[str]:
    env = dict(ctx.plan.launch_env)
    for var in ("UCX_NET_DEVICES", "NCCL_IB_HCA"):
        if env.get(var):
            return [p.strip().lstrip("=^") for p in env[var].split(",") if p.strip()]
    return []


def ports_title(ctx: Ctx, host: str = "") -> str:
    return _("InfiniBand ports are ACTIVE")


def check_ports(ctx: Ctx, host: str = "") -> Check:
    """From the facts (sysfs, read at detection): nothing runs."""
    wanted = _job_ports(ctx)
    ports = [p for h in ctx.facts.hcas if not h.software for p in h.ports]
    if wanted:
        ports = [p for p in ports if p.name in wanted or p.hca in wanted]
    cmd = "cat /sys/class/infiniband/*/ports/*/state /sys/class/infiniband/*/ports/*/rate"
    title = ports_title(ctx)
    if not ports:
        # NCCL's fallback to sockets is what a PyTorch job meets then; an MPI job has no NCCL
        return Check("here/ib-ports", title, FAIL, cmd, _("no InfiniBand port found"),
                     _("This instance has no InfiniBand port: choose an instance type with IB, "
                       "or --network tcp."),
                     diagnoses=((explain("nccl-socket-fallback"),)
                                if ctx.framework == "pytorch" else ()))
    seen = "; ".join(f"{p.name} {p.state}" + (f" {p.rate_gbps:g} Gb/s" if p.rate_gbps else "")
                     + (f" ({p.link_layer})" if p.link_layer not in ("", "unknown") else "")
                     for p in ports)
    down = [p.name for p in ports if not p.active]
    return Check("here/ib-ports", title, FAIL if down else PASS, cmd, seen,
                 _("Port(s) {ports} are not ACTIVE: the cable, the switch or the subnet "
                   "manager; ask the platform, or leave these ports out.").format(
                     ports=", ".join(down)) if down else "")


def uverbs_title(ctx: Ctx, host: str = "") -> str:
    return _("RDMA devices (uverbs) open here")


def check_uverbs(ctx: Ctx, host: str = "") -> Check:
    t0 = time.monotonic()
    r = ctx.ask(OpenUverbs(user=ctx.user))
    # No table fallback: the probe opens device files, which says nothing of libibverbs or its
    # drivers (verbs-no-driver's "libibverbs sees the device" would contradict "none there")
    if not r.ok and NO_UVERBS in r.out:
        plain = _("There is no RDMA device (/dev/infiniband/uverbs*) in this container: it is "
                  "not passed in. Start it with the devices (docker --device "
                  "/dev/infiniband; Kubernetes: the platform's RDMA device plugin), or choose "
                  "--network tcp.")
    else:
        plain = _("The RDMA devices are not usable in this container: this user may not open "
                  "them (their permissions), or they are not passed in (/dev/infiniband).")
    return _check("here/uverbs", uverbs_title(ctx), r, r.ok,
                  detail=" ".join(r.lines()) if r.ok else r.last_line(),
                  plain=plain, t0=t0)


def memlock_title(ctx: Ctx, host: str = "") -> str:
    return _("locked memory is unlimited (ulimit -l)")


def check_memlock(ctx: Ctx, host: str = "") -> Check:
    t0 = time.monotonic()
    r = ctx.ask(MemlockLimit(user=ctx.user))
    value = first_line(r.out)
    return _check("here/memlock", memlock_title(ctx), r,
                  r.ok and value == "unlimited", detail=f"ulimit -l: {value or '?'}",
                  plain=_("RDMA pins its buffers in memory and this limit is too low: start "
                          "the container with --ulimit memlock=-1:-1."), fallback="memlock",
                  t0=t0)


def torch_title(ctx: Ctx, host: str = "") -> str:
    return _("PyTorch imports, with torch.distributed")


def check_torch(ctx: Ctx, host: str = "") -> Check:
    """Also keeps what the probe said for here/nccl and the all-reduce: the interpreter
    that imports torch, whether CUDA is there."""
    t0 = time.monotonic()
    r = ctx.ask(TorchImport(program(TORCH_PROBE), user=ctx.user))
    data = parse_torch_probe(r.lines())
    ctx.torch, ctx.torch_command = data, r.command
    if data.get("python"):
        ctx.python = str(data["python"])
    return _check("here/torch", torch_title(ctx), r, r.ok and bool(data.get("dist")),
                  detail=f"torch {data.get('torch')}" if data else r.last_line(),
                  plain=_("python3 cannot import torch (or it lacks torch.distributed): "
                          "install PyTorch, or start from the pytorch preset image."), t0=t0)


def nccl_title(ctx: Ctx, host: str = "") -> str:
    return _("NCCL is available to torch")


def check_nccl(ctx: Ctx, host: str = "") -> Check:
    """What the torch probe of here/torch said: nothing more runs."""
    ok = bool(ctx.torch.get("nccl"))
    return Check("here/nccl", nccl_title(ctx), PASS if ok else FAIL, ctx.torch_command,
                 f"NCCL {ctx.torch.get('nccl_version') or '?'}" if ok else
                 _("{call} is False").format(call="torch.distributed.is_nccl_available()"),
                 "" if ok else _("This PyTorch has no NCCL: install a CUDA build of "
                                 "PyTorch matching the driver."))


MPI, TORCH = ("mpi",), ("pytorch",)
IB = ("ib",)

# In the order they are reported. torchrun meets the other instances over TCP (its
# rendezvous on MASTER_PORT, then NCCL or gloo): a PyTorch job needs neither sshd nor a key
# login, which are said (skipped with the reason), not failed.
CHECKS = (
    Spec("here/sshd", sshd_title, check_sshd, needs=(N.SSH_JOB,)),
    Spec("here/sshd-settings", sshd_settings_title, check_sshd_settings, frameworks=MPI,
         needs=(N.SSHD_SETTINGS,)),
    Spec("here/ssh-settings", client_settings_title, check_client_settings, frameworks=MPI,
         needs=(N.ACT_AS, N.CLIENT_SETTINGS)),
    Spec("here/login", login_title, check_self_login, needs=(N.SSH_JOB, N.ACT_AS)),
    Spec("here/ompi-ucx", ompi_ucx_title, check_ompi_ucx, frameworks=MPI, networks=IB),
    Spec("here/ucx-ib", ucx_ib_title, check_ucx_ib, frameworks=MPI, networks=IB),
    Spec("here/ib-ports", ports_title, check_ports, networks=IB),
    Spec("here/uverbs", uverbs_title, check_uverbs, networks=IB),
    Spec("here/memlock", memlock_title, check_memlock, networks=IB),
    Spec("here/torch", torch_title, check_torch, frameworks=TORCH),
    Spec("here/nccl", nccl_title, check_nccl, frameworks=TORCH, needs=(N.TORCH, N.GPU)),
)
