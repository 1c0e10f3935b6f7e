"""Does it work? `verify(plan, facts, hosts)` runs checks here and across the job's instances
and returns them as data (Check, Report): the CLI formats them, the TUI shows them; nothing
here prints.

Every check records the exact command it ran, so a user can run it again by hand. A failed
check carries the diagnoses the signature table (recipes/diagnoses.toml, scope "job") finds
in the command's output — or, when a command fails silently (a name that does not resolve,
a port that does not answer), the table's entry for that failure — and one plain line.

Here: for MPI, sshd listening on the port and key login in BatchMode, both at 127.0.0.1 (not
'localhost', a name that does not resolve everywhere sshd works); over InfiniBand: OpenMPI
has pml ucx, UCX lists an IB transport, the ports are ACTIVE (and their rate), uverbs devices
open, locked memory is unlimited; for PyTorch: torch and NCCL import, and the SSH checks are
skipped with the reason (torchrun's rendezvous is TCP; the job needs no SSH).

Across instances, one chain per host, at most MAX_WORKERS at once: the name resolves
(getent hosts: /etc/hosts and DNS, as the job sees them), the SSH port answers, `ssh HOST
hostname` in BatchMode returns that host's name (for PyTorch only verify's own test needs
SSH: a failure there is a skip). Then, for MPI, `mpirun hostname` on every host (and over
IB an MPI all-reduce whose UCX log shows IB or TCP), in the names of the Open MPI installed
here (`mpirun --version`: 5.x takes PRRTE's) and kept to the interface that the route to
the first other host goes through; for PyTorch a two-instance torch.distributed all-reduce
started through the launch script, so through torchrun's rendezvous on its port (gloo on
CPU, nccl on GPU; over IB its NCCL log shows IB or sockets).

Commands run through a `System` (the seam): tests pass a fake one.
"""
from __future__ import annotations

import hashlib
import os
import re
import shlex
import signal
import stat
import subprocess
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from .diagnose import Diagnosis, diagnose, explain
from .facts import Facts, Software
from .hosts import Hosts
from .i18n import _
from .plan import Plan
from .scratch import Owner, create_file, private_dir, remove_dir

PASS, FAIL, SKIP = "pass", "fail", "skip"
MAX_WORKERS = 16
CONNECT_TIMEOUT = 3  # seconds, a TCP connect to a peer's SSH port
SSH_TIMEOUT = 20.0
JOB_TIMEOUT = 120.0
RENDEZVOUS_PORT = "29500"  # torchrun's MASTER_PORT in the launch script, when none is set

SSH_OPTS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=5")

# --- data -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    id: str  # stable: "here/sshd", "peer/node2/login", "cluster/mpirun"
    title: str
    status: str  # pass | fail | skip
    command: str = ""  # what ran, as shell text a user can paste
    detail: str = ""  # what was seen (an address, a rate, a host name, a reason to skip)
    explain: str = ""  # for a failure: what it means, in one plain line
    host: str = ""  # the peer this check is about ("" for here and the whole cluster)
    diagnoses: Tuple[Diagnosis, ...] = ()
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return self.status == FAIL

    def to_dict(self) -> Dict[str, object]:
        return {"id": self.id, "title": self.title, "status": self.status,
                "command": self.command, "detail": self.detail, "explain": self.explain,
                "host": self.host, "seconds": round(self.seconds, 3),
                "diagnoses": [{"id": d.id, "cause": d.cause, "fix": d.fix, "line": d.line,
                               "cause_zh": d.i18n.get("zh", {}).get("cause", ""),
                               "fix_zh": d.i18n.get("zh", {}).get("fix", "")}
                              for d in self.diagnoses]}


@dataclass(frozen=True)
class Report:
    checks: Tuple[Check, ...]
    hosts: Optional[Hosts]
    seconds: float

    @property
    def ok(self) -> bool:
        return not any(c.failed for c in self.checks)

    @property
    def counts(self) -> Dict[str, int]:
        out = {PASS: 0, FAIL: 0, SKIP: 0}
        for c in self.checks:
            out[c.status] += 1
        return out

    def summary(self) -> Dict[str, object]:
        """What a record keeps of a verification: the outcome, not every command's text."""
        return {"ok": self.ok, "counts": self.counts,
                "hosts": list(self.hosts.names) if self.hosts else [],
                "failed": [c.id for c in self.checks if c.failed]}

    def to_dict(self) -> Dict[str, object]:
        return {"ok": self.ok, "seconds": round(self.seconds, 3), "counts": self.counts,
                "hosts": self.hosts.to_dict() if self.hosts else None,
                "checks": [c.to_dict() for c in self.checks]}


@dataclass(frozen=True)
class Ran:
    argv: Tuple[str, ...]
    rc: int  # 127: not installed; 124: timed out
    out: str  # stdout and stderr, interleaved as the program wrote them

    @property
    def ok(self) -> bool:
        return self.rc == 0

    @property
    def command(self) -> str:
        return shlex.join(self.argv)

    def lines(self) -> List[str]:
        return self.out.splitlines()

    def last_line(self) -> str:
        for line in reversed(self.out.splitlines()):
            if line.strip():
                return line.strip()
        return f"exit code {self.rc}"


# --- the seam -------------------------------------------------------------------------------


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class System:
    """Runs commands for verify. A fake replaces `run` (and `uid`) in the tests.

    stop() (from any thread) kills the process group of every command still running and
    makes later ones return at once with 130: the wizard calls it when the user quits during
    a verification, which would otherwise wait for ssh and mpirun time-outs.

    write_temp() puts the hostfiles in one private directory per verification (made by
    this process, 0700, handed to the job's user when root runs the checks as that user);
    remove_temp() (verify() calls it when it ends, however it ends; stop() too) removes it."""

    def __init__(self) -> None:
        self._running: Dict[int, subprocess.Popen] = {}
        self._lock = threading.Lock()
        self._stopped = False
        self._scratch: Optional[Path] = None

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            procs = list(self._running.values())
        for proc in procs:
            _kill_group(proc)
        self.remove_temp()

    def uid(self) -> int:
        return os.getuid()

    def user(self) -> str:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name

    def run(self, argv: Sequence[str], timeout: float = 10.0,
            env: Optional[Mapping[str, str]] = None, stdin: Optional[bytes] = None) -> Ran:
        argv = tuple(argv)
        child_env = dict(os.environ)
        child_env.update(env or {})
        child_env.setdefault("LC_ALL", "C")
        with self._lock:
            if self._stopped:
                return Ran(argv, 130, _("(stopped before it ran)"))
            try:
                proc = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin is not None
                                        else subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, env=child_env,
                                        start_new_session=True)
            except FileNotFoundError:
                return Ran(argv, 127, f"{argv[0]}: command not found")
            self._running[proc.pid] = proc
        try:
            return self._wait(proc, argv, stdin, timeout)
        except KeyboardInterrupt:
            # its own session: the terminal's Ctrl+C did not reach it; it must not outlive us
            _kill_group(proc)
            raise
        finally:
            with self._lock:
                self._running.pop(proc.pid, None)

    @staticmethod
    def _wait(proc: subprocess.Popen, argv: Tuple[str, ...], stdin: Optional[bytes],
              timeout: float) -> Ran:
        try:
            out, _err = proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                proc.kill()
            try:
                out, _err = proc.communicate(timeout=2)
            except subprocess.TimeoutExpired:
                out = b""
            text = (out or b"").decode("utf-8", "replace")
            return Ran(argv, 124, text + f"\n(did not finish within {timeout:g} s)")
        return Ran(argv, proc.returncode, (out or b"").decode("utf-8", "replace"))

    def write_temp(self, name: str, text: str, mode: int = 0o600,
                   owner: Optional[Owner] = None) -> str:
        """A new file `name` (a hostfile) in this verification's private directory, which
        is made at the first call: mkdtemp, 0700, owned by `owner` (uid, gid: the job's
        user, who runs mpirun) when given. Nothing at a predictable path is written to."""
        with self._lock:
            if self._scratch is None:
                self._scratch = private_dir("hpcwizard-verify-", owner=owner)
            directory = self._scratch
        return str(create_file(directory, name, text.encode("utf-8"), mode, owner))

    def remove_temp(self) -> None:
        """Remove the private directory of write_temp, with its files (if it was made)."""
        with self._lock:
            directory, self._scratch = self._scratch, None
        remove_dir(directory)


# --- helpers ----------------------------------------------------------------------------------


class _Ctx:
    def __init__(self, plan: Plan, facts: Facts, system: System) -> None:
        self.plan = plan
        self.facts = facts
        self.sys = system
        self.port = plan.choices.ssh_port
        self.framework = plan.choices.framework
        self.network = plan.choices.network
        self.target = plan.target.user
        self.as_target: Tuple[str, ...] = ()
        self.owner: Optional[Owner] = None  # who gets verify's temporary files (None: we)
        self.python = "python3"  # the interpreter that imports torch, once check_torch found it
        self.cannot_act_as = ""
        # for the mpirun commands, found once (mpi_setup): Open MPI's version, the interface
        self.mpi: Optional[Tuple[Optional[int], str, str, str]] = None
        if system.user() != self.target:
            if system.uid() == 0:
                self.as_target = ("runuser", "-u", self.target, "--")
                self.owner = (plan.target.uid, plan.target.gid)
            else:
                self.cannot_act_as = _(
                    "verify runs as {me}, the job as {target}: run verify as {target} (or root) "
                    "for this check").format(me=system.user(), target=self.target)

    def ssh(self, host: str, *remote: str) -> Tuple[str, ...]:
        return (*self.as_target, "ssh", *SSH_OPTS, "-p", str(self.port), host, *remote)

    def write_temp(self, name: str, text: str) -> str:
        """A hostfile the job's user can read (mpirun runs as that user)."""
        return self.sys.write_temp(name, text, owner=self.owner)


def _check(id: str, title: str, ran: Optional[Ran], ok: bool, detail: str = "",
           plain: str = "", host: str = "", fallback: str = "", t0: float = 0.0,
           status: Optional[str] = None, command: str = "") -> Check:
    """A check from a command's result: on failure, the table's diagnoses of its output, or
    the table's entry `fallback` when the output names nothing known."""
    st = status or (PASS if ok else FAIL)
    diags: Tuple[Diagnosis, ...] = ()
    if st != PASS and ran is not None:
        diags = tuple(diagnose(ran.lines(), scope="job"))
    if st != PASS and not diags and fallback:
        diags = (explain(fallback, ran.last_line() if ran else ""),)
    return Check(id, title, st, command or (ran.command if ran else ""), detail,
                 plain if st != PASS else "", host, diags,
                 time.monotonic() - t0 if t0 else 0.0)


def _skip(id: str, title: str, why: str, host: str = "", command: str = "") -> Check:
    return Check(id, title, SKIP, command, why, "", host)


def _first_word(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def _short(name: str) -> str:
    return name.split(".", 1)[0].lower()


# --- checks here ------------------------------------------------------------------------------


def check_sshd(ctx: _Ctx) -> Check:
    t0 = time.monotonic()
    r = ctx.sys.run(["timeout", str(CONNECT_TIMEOUT), "bash", "-c",
                     f": </dev/tcp/127.0.0.1/{ctx.port}"], timeout=CONNECT_TIMEOUT + 2)
    return _check("here/sshd", _sshd_title(ctx), r, r.ok,
                  detail=(_("{address} answers").format(address=f"127.0.0.1:{ctx.port}")
                          if r.ok else r.last_line()),
                  plain=_("Nothing listens on port {port} on this instance: sshd is not "
                          "running (containers do not start it by themselves).").format(
                      port=ctx.port),
                  fallback="ssh-refused", t0=t0)


# What sshd must have in effect: keys only, root by key at most. sshd -T names
# prohibit-password "without-password" before OpenSSH 7.0 and after, depending on the build.
_SSHD_PROMISE = (("passwordauthentication", ("no",)), ("kbdinteractiveauthentication", ("no",)),
                 ("pubkeyauthentication", ("yes",)),
                 ("permitrootlogin", ("prohibit-password", "without-password", "no")))


def effective(text: str) -> Dict[str, List[str]]:
    """'key value' lines (sshd -T, ssh -G) -> key: every value, in order."""
    out: Dict[str, List[str]] = {}
    for line in text.splitlines():
        key, _sep, value = line.strip().partition(" ")
        if key:
            out.setdefault(key.lower(), []).append(value.strip().lower())
    return out


def check_sshd_settings(ctx: _Ctx) -> Check:
    """What sshd really uses (sshd -T), not what a file says: an earlier drop-in's value wins
    in sshd, so a file can say 'PasswordAuthentication no' while passwords are on."""
    title = _("sshd in effect: port {port}, keys only").format(port=ctx.port)
    if ctx.plan.target.is_root:
        if ctx.sys.uid() != 0:
            return _skip("here/sshd-settings", title, _("sshd -T needs root"))
        argv: Tuple[str, ...] = ("/usr/sbin/sshd", "-T")
    else:
        if ctx.cannot_act_as:
            return _skip("here/sshd-settings", title, ctx.cannot_act_as)
        argv = (*ctx.as_target, "/usr/sbin/sshd", "-T", "-f", f"{ctx.plan.target.home}/.sshd_config")
    t0 = time.monotonic()
    r = ctx.sys.run(argv, timeout=10)
    got = effective(r.out) if r.ok else {}
    wrong = [f"{k} {' '.join(got.get(k, ['?']))}" for k, allowed in _SSHD_PROMISE
             if got.get(k, [""])[0] not in allowed]
    if r.ok and str(ctx.port) not in got.get("port", []):
        wrong.insert(0, f"port {' '.join(got.get('port', ['?']))}")
    ok = r.ok and not wrong
    return _check("here/sshd-settings", title, r, ok,
                  detail=(_("port {port}, passwords and keyboard-interactive off").format(
                      port=ctx.port) if ok else ", ".join(wrong) or r.last_line()),
                  plain=_("sshd does not use the settings hpcwizard wrote ({wrong}): another "
                          "file sets them first (sshd keeps the first value it reads). Run "
                          "'hpcwizard apply' again: it names the file.").format(
                      wrong=", ".join(wrong) or r.last_line()),
                  t0=t0)


def check_client_settings(ctx: _Ctx) -> Check:
    """What ssh really uses for the job's peers (ssh -G), as the job's user."""
    from .plan import peer_sample

    host = peer_sample(ctx.plan.choices.peers)
    title = _("ssh in effect for {host}: port {port}, no prompts").format(host=host, port=ctx.port)
    if ctx.cannot_act_as:
        return _skip("here/ssh-settings", title, ctx.cannot_act_as)
    if not any(s.id == "ssh/client-config" for s in ctx.plan.steps):
        # the platform provides ~/.ssh (plan.platform_ssh_dir): its own settings stand
        return _skip("here/ssh-settings", title, _("the plan writes no SSH client settings: "
                                                   "the platform provides ~/.ssh"))
    t0 = time.monotonic()
    r = ctx.sys.run((*ctx.as_target, "ssh", "-G", host), timeout=10)
    got = effective(r.out) if r.ok else {}
    wrong = [f"{k} {' '.join(got.get(k, ['?'])[:1])}" for k, want in (
        ("port", str(ctx.port)), ("batchmode", "yes")) if got.get(k, [""])[0] != want]
    ok = r.ok and not wrong
    return _check("here/ssh-settings", title, r, ok,
                  detail=(_("port {port}, batchmode yes").format(port=ctx.port) if ok else
                          ", ".join(wrong) or r.last_line()),
                  plain=_("ssh does not use the settings hpcwizard wrote for {host} ({wrong}): "
                          "an earlier 'Host' entry in ~/.ssh/config or /etc/ssh/ssh_config sets "
                          "them first.").format(host=host, wrong=", ".join(wrong) or r.last_line()),
                  t0=t0)


def _sshd_title(ctx: _Ctx) -> str:
    return _("sshd listens on port {port} here").format(port=ctx.port)


def _login_title() -> str:
    return _("key login to this host (BatchMode)")


def no_ssh_reason() -> str:
    """Why a PyTorch plan's SSH checks are skipped."""
    return _("PyTorch jobs start through torchrun's rendezvous, not SSH")


def check_self_login(ctx: _Ctx) -> Check:
    """To 127.0.0.1, not 'localhost': that name does not resolve everywhere sshd works (an
    /etc/hosts without it), and this check is about the key and sshd, not about names."""
    title = _login_title()
    if ctx.cannot_act_as:
        return _skip("here/login", title, ctx.cannot_act_as)
    t0 = time.monotonic()
    # 127.0.0.1 is not among the peers: pinned, its key is in the plan's known_hosts line;
    # with host keys off it is checked no more than the peers are
    unchecked = (("-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null")
                 if ctx.plan.choices.host_keys == "off" else ())
    argv = ctx.ssh("127.0.0.1", "true")
    at = len(ctx.as_target) + 1  # after "ssh"
    r = ctx.sys.run((*argv[:at], *unchecked, *argv[at:]), timeout=SSH_TIMEOUT)
    return _check("here/login", title, r, r.ok,
                  detail=f"{ctx.target}@127.0.0.1:{ctx.port}" if r.ok else r.last_line(),
                  plain=_("{user} cannot log in to this instance with its key without a "
                          "prompt; mpirun would fail the same way on every instance.").format(
                      user=ctx.target),
                  t0=t0)


def check_ompi_ucx(ctx: _Ctx) -> Check:
    from .detect.software import parse_ompi_info

    t0 = time.monotonic()
    r = ctx.sys.run(["ompi_info"], timeout=30)
    pml: Tuple[str, ...] = ()
    if r.ok:
        pml = tuple(parse_ompi_info(r.out).get("pml", ()))  # type: ignore[arg-type]
    ok = r.ok and "ucx" in pml
    detail = (_("pml components: {names}").format(names=", ".join(pml) or _("none"))
              if r.ok else r.last_line())
    return _check("here/ompi-ucx", _("OpenMPI has the UCX transport (pml ucx)"), r, ok,
                  detail=detail,
                  plain=_("This OpenMPI cannot use UCX, so it cannot use InfiniBand: use an "
                          "OpenMPI built with UCX (e.g. the openmpi-ib preset image)."),
                  fallback="pml-ucx", t0=t0)


def parse_ucx_devices(text: str) -> List[Tuple[str, str]]:
    """`ucx_info -d` -> [(transport, device)] in order."""
    pairs, transport = [], ""
    for line in text.splitlines():
        m = re.match(r"^#\s*Transport:\s*(\S+)", line)
        if m:
            transport = m.group(1)
            continue
        m = re.match(r"^#\s*Device:\s*(\S+)", line)
        if m and transport:
            pairs.append((transport, m.group(1)))
    return pairs


def ib_transports(pairs: Sequence[Tuple[str, str]], hcas: Sequence[str] = ()) -> List[str]:
    """The rc/dc/ud transports on an IB device: 'rc_mlx5/mlx5_0:1', ..."""
    out = []
    for tl, dev in pairs:
        hca = dev.split(":", 1)[0]
        if re.match(r"^(rc|dc|ud)(_|$)", tl) and (re.match(r"^mlx\d+_\d+$", hca) or hca in hcas):
            out.append(f"{tl}/{dev}")
    return out


def check_ucx_ib(ctx: _Ctx) -> Check:
    t0 = time.monotonic()
    r = ctx.sys.run(["ucx_info", "-d"], timeout=30)
    hcas = [h.name for h in ctx.facts.hcas if not h.software]
    found = ib_transports(parse_ucx_devices(r.out), hcas) if r.ok else []
    detail = (", ".join(found[:6]) + (" ..." if len(found) > 6 else "")) if found else \
        (r.last_line() if not r.ok else _("no rc/dc/ud transport on an IB device"))
    return _check("here/ucx-ib", _("UCX lists an InfiniBand transport"), r, bool(found),
                  detail=detail,
                  plain=_("UCX sees no InfiniBand device here, so MPI would run over TCP: the "
                          "IB device is not passed into the container, or the verbs libraries "
                          "are missing."), fallback="ucx-no-transports", t0=t0)


def _job_ports(ctx: _Ctx) -> List[str]:
    env = dict(ctx.plan.launch_env)
    for var in ("UCX_NET_DEVICES", "NCCL_IB_HCA"):
        if env.get(var):
            return [p.strip().lstrip("=^") for p in env[var].split(",") if p.strip()]
    return []


def check_ports(ctx: _Ctx) -> Check:
    wanted = _job_ports(ctx)
    ports = [p for h in ctx.facts.hcas if not h.software for p in h.ports]
    if wanted:
        ports = [p for p in ports if p.name in wanted or p.hca in wanted]
    cmd = "cat /sys/class/infiniband/*/ports/*/state /sys/class/infiniband/*/ports/*/rate"
    title = _("InfiniBand ports are ACTIVE")
    if not ports:
        return Check("here/ib-ports", title, FAIL, cmd, _("no InfiniBand port found"),
                     _("This instance has no InfiniBand port: choose an instance type with IB, "
                       "or --network tcp."), diagnoses=(explain("nccl-socket-fallback"),))
    seen = "; ".join(f"{p.name} {p.state}" + (f" {p.rate_gbps:g} Gb/s" if p.rate_gbps else "")
                     + (f" ({p.link_layer})" if p.link_layer not in ("", "unknown") else "")
                     for p in ports)
    down = [p.name for p in ports if not p.active]
    return Check("here/ib-ports", title, FAIL if down else PASS, cmd, seen,
                 _("Port(s) {ports} are not ACTIVE: the cable, the switch or the subnet "
                   "manager; ask the platform, or leave these ports out.").format(
                     ports=", ".join(down)) if down else "")


def check_uverbs(ctx: _Ctx) -> Check:
    t0 = time.monotonic()
    script = ('set -- /dev/infiniband/uverbs*; [ -e "$1" ] || { echo "no /dev/infiniband/uverbs*"; '
              'exit 1; }; for d in "$@"; do exec 3<>"$d" || exit 1; exec 3>&-; echo "$d"; done')
    r = ctx.sys.run([*ctx.as_target, "bash", "-c", script], timeout=10)
    return _check("here/uverbs", _("RDMA devices (uverbs) open here"), r, r.ok,
                  detail=" ".join(r.lines()) if r.ok else r.last_line(),
                  plain=_("The RDMA devices are not usable in this container: they are not "
                          "passed in (/dev/infiniband), or this user may not open them."),
                  fallback="verbs-no-driver", t0=t0)


def check_memlock(ctx: _Ctx) -> Check:
    t0 = time.monotonic()
    r = ctx.sys.run([*ctx.as_target, "bash", "-c", "ulimit -l"], timeout=10)
    value = _first_word(r.out)
    return _check("here/memlock", _("locked memory is unlimited (ulimit -l)"), r,
                  r.ok and value == "unlimited", detail=f"ulimit -l: {value or '?'}",
                  plain=_("RDMA pins its buffers in memory and this limit is too low: start "
                          "the container with --ulimit memlock=-1:-1."), fallback="memlock",
                  t0=t0)


TORCH_PROBE = ("import json, sys, torch, torch.distributed as d\n"
               "print('HPCWIZARD-TORCH ' + json.dumps({'torch': torch.__version__, "
               "'python': sys.executable, "
               "'cuda': torch.cuda.is_available(), 'dist': d.is_available(), "
               "'nccl': d.is_available() and d.is_nccl_available(), "
               "'nccl_version': '.'.join(map(str, torch.cuda.nccl.version())) "
               "if torch.cuda.is_available() else ''}))\n")


def check_torch(ctx: _Ctx) -> List[Check]:
    import json

    t0 = time.monotonic()
    r = ctx.sys.run([*ctx.as_target, "python3", "-c", TORCH_PROBE], timeout=120)
    data: Dict[str, object] = {}
    for line in r.lines():
        if line.startswith("HPCWIZARD-TORCH "):
            data = json.loads(line[len("HPCWIZARD-TORCH "):])
    torch_ok = r.ok and bool(data.get("dist"))
    if data.get("python"):
        ctx.python = str(data["python"])
    out = [_check("here/torch", _("PyTorch imports, with torch.distributed"), r, torch_ok,
                  detail=f"torch {data.get('torch')}" if data else r.last_line(),
                  plain=_("python3 cannot import torch (or it lacks torch.distributed): "
                          "install PyTorch, or start from the pytorch preset image."), t0=t0)]
    title = _("NCCL is available to torch")
    if not torch_ok:
        out.append(_skip("here/nccl", title, _("torch does not import")))
    elif not data.get("cuda") and not ctx.facts.gpus:
        out.append(_skip("here/nccl", title, _("no GPU here: the job uses gloo, not NCCL"),
                         command=r.command))
    else:
        ok = bool(data.get("nccl"))
        out.append(Check("here/nccl", title, PASS if ok else FAIL, r.command,
                         f"NCCL {data.get('nccl_version') or '?'}" if ok else
                         _("{call} is False").format(
                             call="torch.distributed.is_nccl_available()"),
                         "" if ok else _("This PyTorch has no NCCL: install a CUDA build of "
                                         "PyTorch matching the driver.")))
    return out


def local_checks(ctx: _Ctx) -> List[Check]:
    out: List[Check] = []
    if ctx.framework == "mpi":
        out += [check_sshd(ctx), check_sshd_settings(ctx), check_client_settings(ctx),
                check_self_login(ctx)]
    else:
        # torchrun meets the other instances over TCP (its rendezvous on MASTER_PORT, then
        # NCCL or gloo): a PyTorch job needs neither sshd nor a key login. Said, not failed.
        out += [_skip("here/sshd", _sshd_title(ctx), no_ssh_reason()),
                _skip("here/login", _login_title(), no_ssh_reason())]
    if ctx.network == "ib":
        if ctx.framework == "mpi":
            out.append(check_ompi_ucx(ctx))
            out.append(check_ucx_ib(ctx))
        out += [check_ports(ctx), check_uverbs(ctx), check_memlock(ctx)]
    if ctx.framework == "pytorch":
        out += check_torch(ctx)
    return out


# --- checks across instances -------------------------------------------------------------------


def _soft(seen: str, host: str) -> str:
    """A PyTorch plan's SSH check that did not pass: what was seen, and why it is a skip."""
    return _("{seen}; {reason}: verify uses SSH only to start its own test on {host}").format(
        seen=seen, reason=no_ssh_reason(), host=host)


def peer_checks(ctx: _Ctx, host: str) -> List[Check]:
    """name -> port -> login, for one host; a later check is skipped when an earlier fails.
    For PyTorch, SSH is only how verify starts its test: an SSH failure is a skip."""
    out: List[Check] = []
    t0 = time.monotonic()
    r = ctx.sys.run(["getent", "hosts", host], timeout=10)
    addr = _first_word(r.out).split()[0] if r.ok and r.out.strip() else ""
    port_title = _("{host}: SSH port {port} answers").format(host=host, port=ctx.port)
    title = _("{host}: key login returns its name").format(host=host)
    out.append(_check(f"peer/{host}/resolve", _("{host}: name resolves").format(host=host), r,
                      bool(addr), detail=addr or _("no address"), host=host,
                      fallback="name-unresolved",
                      plain=_("{host} has no address here (not in DNS, not in /etc/hosts): the "
                              "instance does not exist, is not up yet, or the name is "
                              "wrong.").format(host=host),
                      t0=t0))
    soft = ctx.framework == "pytorch"
    if not addr:
        out.append(_skip(f"peer/{host}/port", port_title, _("the name does not resolve"), host))
        out.append(_skip(f"peer/{host}/login", title, _("the name does not resolve"), host))
        return out
    t0 = time.monotonic()
    r = ctx.sys.run(["timeout", str(CONNECT_TIMEOUT), "bash", "-c",
                     f": </dev/tcp/{host}/{ctx.port}"], timeout=CONNECT_TIMEOUT + 2)
    timed_out = r.rc == 124
    seen = (_("{address} answers").format(address=f"{addr}:{ctx.port}") if r.ok else
            (_("no answer within {seconds}s").format(seconds=CONNECT_TIMEOUT) if timed_out
             else r.last_line()))
    c = _check(f"peer/{host}/port", port_title, r, r.ok,
               detail=_soft(seen, host) if soft and not r.ok else seen, host=host,
               fallback="ssh-timeout" if timed_out else "ssh-refused",
               plain=(_("{host} ({address}) does not answer on port {port}: sshd is not "
                        "running there, or a firewall drops the traffic.") if timed_out else
                      _("{host} ({address}) does not answer on port {port}: sshd is not "
                        "running there.")).format(host=host, address=addr, port=ctx.port),
               t0=t0, status=(SKIP if soft and not r.ok else None))
    out.append(c)
    if not r.ok:
        out.append(_skip(f"peer/{host}/login", title,
                         _("port {port} does not answer").format(port=ctx.port), host))
        return out
    if ctx.cannot_act_as:
        out.append(_skip(f"peer/{host}/login", title, ctx.cannot_act_as, host))
        return out
    t0 = time.monotonic()
    r = ctx.sys.run(ctx.ssh(host, "hostname"), timeout=SSH_TIMEOUT)
    got = _first_word(r.out) if r.ok else ""
    same = bool(got) and (_short(got) == _short(host) or got.lower() == host.lower())
    if r.ok and not same:
        out.append(Check(f"peer/{host}/login", title, FAIL, r.command,
                         _("reached {name!r}").format(name=got),
                         _("ssh {host} reached a host that calls itself {name!r}: the name "
                           "{host} points at another instance (stale DNS or /etc/hosts "
                           "entry).").format(host=host, name=got),
                         host, seconds=time.monotonic() - t0))
        return out
    seen = got or r.last_line()
    out.append(_check(f"peer/{host}/login", title, r, r.ok,
                      detail=_soft(seen, host) if soft and not r.ok else seen,
                      host=host, t0=t0, status=(SKIP if soft and not r.ok else None),
                      plain=_("{user} cannot log in to {host} with its key without a "
                              "prompt, so mpirun cannot start ranks there.").format(
                          user=ctx.target, host=host)))
    return out


def _hostfile_text(hosts: Hosts) -> str:
    lines = []
    for i, name in enumerate(hosts.names):
        slots = hosts.slots[i] if i < len(hosts.slots) else 1
        lines.append(f"{name} slots={slots}")
    return "\n".join(lines) + "\n"


def route_dev(text: str) -> str:
    """`ip -o route get ADDRESS` -> the interface the route goes through ('eth0'); '' when it
    names none, or only lo (the address is this instance's own: no network in between)."""
    m = re.search(r"\bdev (\S+)", text)
    dev = m.group(1) if m else ""
    return "" if dev == "lo" else dev


def mpi_setup(ctx: _Ctx, hosts: Hosts) -> Tuple[Optional[int], str, str, str]:
    """(Open MPI's major version, its version, the TCP interface, which route chose it) for
    verify's mpirun commands, found once per verification. The version is the one
    `mpirun --version` names (apply may have installed Open MPI after the facts were
    detected), else the facts'; the interface is the one the route to the first other host
    goes through (`ip -o route get ADDRESS`), as the launch script chooses it."""
    if ctx.mpi is not None:
        return ctx.mpi
    from .detect.software import parse_mpirun_version

    r = ctx.sys.run([*ctx.as_target, "mpirun", "--version"], timeout=10)
    flavour, version = parse_mpirun_version(r.out) if r.ok else ("", "")
    sw = Software(mpi_flavour=flavour, mpi_version=version) if flavour else ctx.facts.software
    major = sw.ompi_major
    me = _short(ctx.facts.hostname)
    others = [h for h in hosts.names if _short(h) != me] if me else list(hosts.names[1:])
    iface = why = ""
    if others:
        g = ctx.sys.run(["getent", "hosts", others[0]], timeout=10)
        addr = g.out.split()[0] if g.ok and g.out.split() else ""
        route = ctx.sys.run(["ip", "-o", "route", "get", addr], timeout=5) if addr else None
        iface = route_dev(route.out) if route is not None and route.ok else ""
        why = _("the route to {host} at {address}").format(host=others[0], address=addr)
    ctx.mpi = (major, sw.mpi_version if major is not None else "", iface, why)
    return ctx.mpi


def _mpi_note(ctx: _Ctx) -> str:
    """What verify's mpirun used: '; Open MPI 5.0.7; TCP interface eth0 (the route to ...)'."""
    _major, version, iface, why = ctx.mpi or (None, "", "", "")
    parts = [f"Open MPI {version}"] if version else []
    if iface:
        parts.append(_("TCP interface {iface} ({why})").format(iface=iface, why=why))
    return "".join("; " + p for p in parts)


def _mpirun_base(ctx: _Ctx, hostfile: str, np: int, hosts: Hosts) -> List[str]:
    """mpirun with the plan's arguments in the names of the Open MPI installed here (5.x:
    PRRTE's), kept to the interface that reaches the other hosts."""
    from .launch import iface_args, mpirun_args_for

    major, _version, iface, _why = mpi_setup(ctx, hosts)
    argv = [*ctx.as_target, "mpirun", "--hostfile", hostfile, "-np", str(np)]
    if ctx.target == "root" or ctx.plan.target.uid == 0:
        argv.append("--allow-run-as-root")
    argv += mpirun_args_for(ctx.plan.mpirun_args, major)
    if iface:
        argv += iface_args(iface, major)
    return argv


_HOST_LINE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})")


def check_mpirun(ctx: _Ctx, hosts: Hosts) -> Check:
    t0 = time.monotonic()
    n = len(hosts.names)
    hf = ctx.write_temp("hostfile", "\n".join(f"{h} slots=1" for h in hosts.names) + "\n")
    argv = _mpirun_base(ctx, hf, n, hosts) + ["--map-by", "node", "hostname"]
    r = ctx.sys.run(argv, timeout=JOB_TIMEOUT)
    # one host name a line; anything else is mpirun's own chatter (a setpgid warning of
    # plm:rsh under load, say), not a rank's answer
    names = [ln.strip() for ln in r.lines() if _HOST_LINE.fullmatch(ln.strip())] if r.ok else []
    got = sorted({_short(x) for x in names})
    want = sorted({_short(x) for x in hosts.names})
    ok = r.ok and len(names) == n and got == want
    detail = (_("{n} ranks on {hosts}").format(n=n, hosts=", ".join(got)) + _mpi_note(ctx)
              if ok else
              (_("ran on {hosts}").format(hosts=", ".join(got)) if r.ok else r.last_line()))
    return _check("cluster/mpirun", _("mpirun starts a process on all {n} hosts").format(n=n),
                  r, ok, detail=detail, fallback="mpi-daemons", t0=t0,
                  plain=_("mpirun could not start processes on every instance; the diagnosis "
                          "below names the reason."))


MPI_ALLREDUCE_C = r"""#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
  int rank, size, one = 1, sum = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("HPCWIZARD-MPI size=%d sum=%d\n", size, sum);
  MPI_Finalize();
  return sum == size ? 0 : 1;
}
"""


def transport_from_ucx_log(text: str) -> str:
    """'ib' when UCX's endpoint configuration uses rc/dc/ud on an IB device, 'tcp' when the
    network lanes are tcp only, '' when the log does not say."""
    lanes = re.findall(r"\b((?:rc|dc|ud|tcp)[a-z0-9_]*)/([A-Za-z0-9_.:-]+)", text)
    if not lanes:
        return ""
    if any(tl.startswith(("rc", "dc", "ud")) for tl, _ in lanes):
        return "ib"
    return "tcp"


def transport_from_nccl_log(text: str) -> str:
    """'ib' for 'Using network IB' (or IBext/ a plugin over IB), 'tcp' for 'Using network
    Socket', '' when the log does not say."""
    m = re.findall(r"Using network (\S+)", text)
    if not m:
        if re.search(r"NET/IB : Using \[", text):
            return "ib"
        return ""
    return "tcp" if all(x.lower().startswith("socket") for x in m) else "ib"


def _spread(ctx: _Ctx, hosts: Sequence[str], path: str, data: bytes) -> Optional[Ran]:
    """Put a file at the same path on each host over SSH (skipped where it already is, so a
    shared home is never truncated). Returns the failed command, if any."""
    q = shlex.quote(path)
    for host in hosts:
        remote = (f"test -s {q} && exit 0; mkdir -p {shlex.quote(os.path.dirname(path))} && "
                  f"cat > {q}.$$ && chmod 755 {q}.$$ && mv -f {q}.$$ {q}")
        r = ctx.sys.run(ctx.ssh(host, remote), timeout=SSH_TIMEOUT, stdin=data)
        if not r.ok:
            return r
    return None


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


def _cache_path(ctx: _Ctx, name: str, text: str) -> str:
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return f"{ctx.plan.target.home}/.cache/hpcwizard/{digest}-{name}"


def check_mpi_transport(ctx: _Ctx, hosts: Hosts) -> Check:
    """Over IB: an MPI all-reduce across two instances with UCX logging: IB or TCP?"""
    title = _("MPI over UCX uses InfiniBand between instances")
    if len(hosts.names) < 2:
        return _skip("cluster/mpi-transport", title,
                     _("one host: nothing crosses the network"))
    src = _cache_path(ctx, "allreduce.c", MPI_ALLREDUCE_C)
    exe = src[:-2]
    t0 = time.monotonic()
    if not ctx.sys.run([*ctx.as_target, "test", "-x", exe], timeout=5).ok:
        r = ctx.sys.run([*ctx.as_target, "bash", "-c",
                         f"mkdir -p {shlex.quote(os.path.dirname(src))} && cat > {shlex.quote(src)}"
                         f" && mpicc -O1 -o {shlex.quote(exe)} {shlex.quote(src)}"],
                        timeout=60, stdin=MPI_ALLREDUCE_C.encode())
        if not r.ok:
            return _skip("cluster/mpi-transport", title,
                         _("cannot build the test program with mpicc: {error}").format(
                             error=r.last_line()),
                         command=r.command)
    pair = list(hosts.names[:2])
    binary = _read_owned(exe, ctx.plan.target.uid)
    if binary:
        failed = _spread(ctx, pair, exe, binary)
        if failed is not None:
            return _check("cluster/mpi-transport", title, failed, False, t0=t0,
                          detail=failed.last_line(),
                          plain=_("Could not copy the MPI test program to the other "
                                  "instance."))
    hf = ctx.write_temp("hostfile-2", "".join(f"{h} slots=1\n" for h in pair))
    argv = _mpirun_base(ctx, hf, 2, hosts) + ["--map-by", "node", "--mca", "pml", "ucx",
                                       "-x", "UCX_LOG_LEVEL=info"]
    passed = {a for i, a in enumerate(argv) if i and argv[i - 1] == "-x"}
    for k, _v in ctx.plan.launch_env:
        if k not in passed:
            argv += ["-x", k]
    argv.append(exe)
    r = ctx.sys.run(argv, timeout=JOB_TIMEOUT, env={**dict(ctx.plan.launch_env),
                                                    "UCX_LOG_LEVEL": "info"})
    used = transport_from_ucx_log(r.out)
    ok = r.ok and used == "ib"
    detail = {"ib": _("UCX chose InfiniBand"), "tcp": _("UCX fell back to TCP")}.get(
        used, _("the UCX log does not say which transport")) if r.ok else r.last_line()
    return _check("cluster/mpi-transport", title, r, ok, detail=detail, t0=t0,
                  fallback="ucx-no-transports",
                  plain=_("MPI between instances does not use InfiniBand (it runs, but over "
                          "TCP)") if r.ok else
                  _("The MPI test job failed; the diagnosis names the reason."))


ALLREDUCE_PY = """import os, torch, torch.distributed as dist
backend = "nccl" if torch.cuda.is_available() else "gloo"
dist.init_process_group(backend)
rank, size = dist.get_rank(), dist.get_world_size()
dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if backend == "nccl" else torch.device("cpu")
if backend == "nccl":
    torch.cuda.set_device(dev)
t = torch.tensor([float(rank + 1)], device=dev)
dist.all_reduce(t)
print(f"HPCWIZARD-ALLREDUCE rank={rank} size={size} backend={backend} sum={t.item():g} "
      f"expected={size * (size + 1) / 2:g}", flush=True)
dist.destroy_process_group()
"""


def parse_allreduce(text: str) -> List[Dict[str, str]]:
    out = []
    for m in re.finditer(r"HPCWIZARD-ALLREDUCE (.*)", text):
        out.append(dict(kv.split("=", 1) for kv in m.group(1).split() if "=" in kv))
    return out


def check_torch_allreduce(ctx: _Ctx, hosts: Hosts, here: str) -> List[Check]:
    """Two processes, one on this host and one on another, through the launch script."""
    from .launch import launch_script

    title = _("torch.distributed all_reduce across two instances")
    tid, xid = "cluster/torch-allreduce", "cluster/nccl-transport"
    xtitle = _("NCCL uses InfiniBand between instances")
    if len(hosts.names) < 2:
        return [_skip(tid, title, _("one host: nothing crosses the network"))]
    if here not in hosts.names:
        return [_skip(tid, title, _("this host ({host}) is not one of the job's hosts: run "
                                    "verify on one of them").format(host=here))]
    other = next(h for h in hosts.names if h != here)
    script = launch_script(ctx.plan)
    spath = _cache_path(ctx, "launch.sh", script)
    ppath = _cache_path(ctx, "allreduce.py", ALLREDUCE_PY)
    t0 = time.monotonic()
    for path, text in ((spath, script), (ppath, ALLREDUCE_PY)):
        ctx.sys.run([*ctx.as_target, "bash", "-c",
                     f"mkdir -p {shlex.quote(os.path.dirname(path))} && test -s "
                     f"{shlex.quote(path)} || cat > {shlex.quote(path)}"],
                    timeout=10, stdin=text.encode())
        failed = _spread(ctx, [other], path, text.encode())
        if failed is not None:
            return [_skip(tid, title, _("cannot copy the test to {host} over SSH ({error}); "
                                        "run the launch script on both instances "
                                        "yourself").format(host=other, error=failed.last_line()),
                          command=failed.command)]
    pair = f"{here},{other}"
    # The rendezvous (torchrun's TCP store on the first host) named on both sides: a
    # MASTER_ADDR or MASTER_PORT in verify's own environment must not reach one half only.
    env = {"NCCL_DEBUG": "INFO", "HOSTS": pair, "WAIT_TRIES": "5", "MASTER_ADDR": here,
           "MASTER_PORT": RENDEZVOUS_PORT}
    envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    # The python3 that imports torch here (the same image is at the same path there): an
    # SSH command's PATH often lacks a conda or pyenv interpreter.
    py = ctx.python
    local = [*ctx.as_target, "env", *[f"{k}={v}" for k, v in env.items()], "bash", spath,
             "--", py, ppath]
    remote = ctx.ssh(other, f"{envs} bash {shlex.quote(spath)} -- {shlex.quote(py)} "
                            f"{shlex.quote(ppath)}")
    with ThreadPoolExecutor(max_workers=2) as pool:
        r_local, r_remote = _gather(ctx, [pool.submit(ctx.sys.run, local, JOB_TIMEOUT),
                                          pool.submit(ctx.sys.run, remote, JOB_TIMEOUT)])
    results = parse_allreduce(r_local.out) + parse_allreduce(r_remote.out)
    ok = (r_local.ok and r_remote.ok and len(results) == 2
          and all(x.get("sum") == x.get("expected") for x in results))
    both = Ran(r_local.argv, r_local.rc or r_remote.rc, r_local.out + "\n" + r_remote.out)
    backend = results[0].get("backend", "") if results else ""
    detail = (_("{backend}: sum {sum} on both ranks, as expected (rendezvous at "
                "{address})").format(backend=backend, sum=results[0].get("sum"),
                                     address=f"{here}:{RENDEZVOUS_PORT}") if ok else
              (_("results: {results}").format(results=results) if results
               else both.last_line()))
    command = shlex.join(local) + "  &  " + shlex.join(remote)
    out = [_check(tid, title, both, ok, detail=detail, t0=t0, command=command,
                  fallback="nccl-no-socket",
                  plain=_("The two-instance all_reduce did not complete: the diagnosis names "
                          "the reason (rendezvous port, interface, NCCL/gloo)."))]
    if ctx.network == "ib":
        if backend != "nccl":
            out.append(_skip(xid, xtitle, _("gloo on CPU does not use InfiniBand")))
        else:
            used = transport_from_nccl_log(both.out)
            out.append(Check(xid, xtitle, PASS if used == "ib" else FAIL, command,
                             {"ib": _("NCCL chose IB"), "tcp": _("NCCL fell back to sockets (TCP)")}
                             .get(used, _("the NCCL log does not say")),
                             "" if used == "ib" else _("NCCL between instances does not use "
                                                       "InfiniBand: the job runs, but slowly."),
                             diagnoses=() if used == "ib" else
                             tuple(diagnose(both.lines(), scope="job")) or
                             (explain("nccl-socket-fallback"),)))
    return out


# --- the whole ----------------------------------------------------------------------------------


def _gather(ctx: _Ctx, futures: Sequence[Future]) -> list:
    """The futures' results in order. On Ctrl+C the commands in flight are killed first:
    leaving the pool's `with` waits for its threads, that is for every ssh to time out."""
    try:
        return [f.result() for f in futures]
    except KeyboardInterrupt:
        for f in futures:
            f.cancel()
        ctx.sys.stop()
        raise


def verify(plan: Plan, facts: Facts, hosts: Optional[Hosts] = None,
           system: Optional[System] = None,
           on_check: Optional[Callable[[Check], None]] = None,
           max_workers: int = MAX_WORKERS) -> Report:
    """Every check, here then across hosts (concurrently, at most max_workers at once).
    on_check is called with each check as it finishes (from worker threads)."""
    ctx = _Ctx(plan, facts, system or System())
    try:
        return _verify(ctx, hosts, on_check, max_workers)
    finally:
        ctx.sys.remove_temp()  # the hostfiles' directory: also after Ctrl+C or stop()


def _verify(ctx: _Ctx, hosts: Optional[Hosts], on_check: Optional[Callable[[Check], None]],
            max_workers: int) -> Report:
    t_start = time.monotonic()
    checks: List[Check] = []

    def emit(cs: Sequence[Check]) -> None:
        for c in cs:
            if on_check:
                on_check(c)

    here = local_checks(ctx)
    emit(here)
    checks += here
    if hosts is not None:
        names = list(hosts.names)
        with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(names)))) as pool:
            def one(host: str) -> List[Check]:
                cs = peer_checks(ctx, host)
                emit(cs)
                return cs

            per_host = _gather(ctx, [pool.submit(one, h) for h in names])
        for cs in per_host:
            checks += cs
        reachable = all(c.status == PASS for cs in per_host for c in cs)
        cluster: List[Check] = []
        if ctx.framework == "mpi":
            if not reachable:
                cluster.append(_skip("cluster/mpirun", _(
                    "mpirun starts a process on all {n} hosts").format(n=len(names)),
                    _("an SSH check above failed")))
            elif ctx.cannot_act_as:
                cluster.append(_skip("cluster/mpirun", _("mpirun across hosts"),
                                     ctx.cannot_act_as))
            else:
                cluster.append(check_mpirun(ctx, hosts))
                if ctx.network == "ib":
                    cluster.append(check_mpi_transport(ctx, hosts) if cluster[-1].status == PASS
                                   else _skip("cluster/mpi-transport", _(
                                       "MPI over UCX uses InfiniBand between instances"),
                                       _("mpirun failed")))
        else:
            torch_ok = any(c.id == "here/torch" and c.status == PASS for c in here)
            title = _("torch.distributed all_reduce across two instances")
            if not torch_ok:
                cluster.append(_skip("cluster/torch-allreduce", title,
                                     _("torch does not import")))
            elif ctx.cannot_act_as:
                cluster.append(_skip("cluster/torch-allreduce", title, ctx.cannot_act_as))
            else:
                here_name = _here_name(ctx, names)
                logins = {c.host for cs in per_host for c in cs
                          if c.id.endswith("/login") and c.status == PASS}
                others = [h for h in names if h != here_name and h in logins]
                if here_name and not others:
                    cluster.append(_skip("cluster/torch-allreduce", title, _(
                        "no other instance accepts an SSH login, which verify needs to start "
                        "its test there")))
                else:
                    pick = Hosts(tuple([here_name] + others[:1]) if here_name else hosts.names,
                                 hosts.source)
                    cluster += check_torch_allreduce(ctx, pick, here_name)
        emit(cluster)
        checks += cluster
    return Report(tuple(checks), hosts, time.monotonic() - t_start)


def _here_name(ctx: _Ctx, names: Sequence[str]) -> str:
    """Which of the job's names is this instance: by host name, else by address."""
    r = ctx.sys.run(["hostname"], timeout=5)
    me = _first_word(r.out)
    for n in names:
        if me and _short(n) == _short(me):
            return n
    r = ctx.sys.run(["hostname", "-I"], timeout=5)
    mine = set(r.out.split())
    for n in names:
        g = ctx.sys.run(["getent", "hosts", n], timeout=5)
        if g.ok and g.out.split() and g.out.split()[0] in mine:
            return n
    return ""
