"""The questions verify's checks ask, as data: `TcpConnect("node2", 2222)`,
`SshCommand("node2", 2222, "hostname")`, `Mpirun(...)`. A System answers each with a Ran: the
real one runs the probe's argv (also what a check shows as the command it ran); a test fake
answers from the probe's fields, without reading argv back.

`user` is the job's user when verify runs as root for that user (runuser), "" for ourselves.
"""
from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

CONNECT_TIMEOUT = 3  # seconds, a TCP connect to a peer's SSH port
SSH_TIMEOUT = 20.0
JOB_TIMEOUT = 120.0
SSH_OPTS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=5")
# With host keys off nothing pins a host's key: verify checks it no more than the job does.
UNCHECKED = ("-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null")
Env = Tuple[Tuple[str, str], ...]


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


def as_user(user: str) -> Tuple[str, ...]:
    return ("runuser", "-u", user, "--") if user else ()


def ssh_argv(user: str, port: int, host: str, remote: str,
             unchecked: bool = False) -> Tuple[str, ...]:
    return (*as_user(user), "ssh", *(UNCHECKED if unchecked else ()), *SSH_OPTS,
            "-p", str(port), host, remote)


class Probe:
    """What every probe has: its argv, its time-out, what goes to its stdin, the
    environment it adds."""

    timeout: float = 10.0

    def argv(self) -> Tuple[str, ...]:
        raise NotImplementedError

    def stdin(self) -> Optional[bytes]:
        return None

    def env(self) -> Optional[Dict[str, str]]:
        return None

    @property
    def command(self) -> str:
        return shlex.join(self.argv())


# --- names and ports ---------------------------------------------------------------------


@dataclass(frozen=True)
class TcpConnect(Probe):
    """Does host:port accept a TCP connection (within CONNECT_TIMEOUT)?"""
    host: str
    port: int
    timeout = CONNECT_TIMEOUT + 2

    def argv(self) -> Tuple[str, ...]:
        return ("timeout", str(CONNECT_TIMEOUT), "bash", "-c",
                f": </dev/tcp/{self.host}/{self.port}")


@dataclass(frozen=True)
class Resolve(Probe):
    """host's address, as the job sees names (/etc/hosts and DNS). An address (the IP lists
    of SkyPilot, dstack, the ML platforms) is asked of ahosts: `getent hosts ADDRESS` looks
    it up in reverse and fails where nothing names it, as runtime.sh's _hw_rt_lookup says."""
    host: str

    def argv(self) -> Tuple[str, ...]:
        parts = self.host.split(".")
        if len(parts) == 4 and all(p.isascii() and p.isdigit() and len(p) <= 3 for p in parts):
            return ("getent", "ahosts", self.host)
        return ("getent", "hosts", self.host)


@dataclass(frozen=True)
class RouteTo(Probe):
    """The route to an address: which interface it leaves through."""
    address: str
    timeout = 5.0

    def argv(self) -> Tuple[str, ...]:
        return ("ip", "-o", "route", "get", self.address)


# --- ssh -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SshCommand(Probe):
    """remote (shell text) run on host over SSH in BatchMode: a key login or nothing."""
    host: str
    port: int
    remote: str
    user: str = ""
    unchecked: bool = False  # host keys off: the key of host is not checked
    timeout = SSH_TIMEOUT

    def argv(self) -> Tuple[str, ...]:
        return ssh_argv(self.user, self.port, self.host, self.remote, self.unchecked)


@dataclass(frozen=True)
class CopyTo(Probe):
    """data to path on host over SSH, unless a file is there already (a shared home is
    never truncated)."""
    host: str
    port: int
    path: str
    data: bytes
    user: str = ""
    timeout = SSH_TIMEOUT

    def argv(self) -> Tuple[str, ...]:
        q = shlex.quote(self.path)
        remote = (f"test -s {q} && exit 0; mkdir -p {shlex.quote(os.path.dirname(self.path))} "
                  f"&& cat > {q}.$$ && chmod 755 {q}.$$ && mv -f {q}.$$ {q}")
        return ssh_argv(self.user, self.port, self.host, remote)

    def stdin(self) -> Optional[bytes]:
        return self.data


@dataclass(frozen=True)
class SshdInEffect(Probe):
    """The settings sshd really uses (sshd -T), of its own config file when given."""
    config: str = ""
    user: str = ""

    def argv(self) -> Tuple[str, ...]:
        return (*as_user(self.user), "/usr/sbin/sshd", "-T",
                *(("-f", self.config) if self.config else ()))


@dataclass(frozen=True)
class SshInEffect(Probe):
    """The settings ssh really uses for host (ssh -G)."""
    host: str
    user: str = ""

    def argv(self) -> Tuple[str, ...]:
        return (*as_user(self.user), "ssh", "-G", "--", self.host)


# --- this instance's software and devices -------------------------------------------------


@dataclass(frozen=True)
class OmpiInfo(Probe):
    timeout = 30.0

    def argv(self) -> Tuple[str, ...]:
        return ("ompi_info",)


@dataclass(frozen=True)
class UcxDevices(Probe):
    timeout = 30.0

    def argv(self) -> Tuple[str, ...]:
        return ("ucx_info", "-d")


NO_UVERBS = "no /dev/infiniband/uverbs*"  # what _OPEN_UVERBS says when there is none
_OPEN_UVERBS = ('set -- /dev/infiniband/uverbs*; [ -e "$1" ] || { echo "' + NO_UVERBS + '"; '
                'exit 1; }; for d in "$@"; do exec 3<>"$d" || exit 1; exec 3>&-; echo "$d"; done')


@dataclass(frozen=True)
class OpenUverbs(Probe):
    """Can user open every /dev/infiniband/uverbs* (the names of those opened)?"""
    user: str = ""

    def argv(self) -> Tuple[str, ...]:
        return (*as_user(self.user), "bash", "-c", _OPEN_UVERBS)


@dataclass(frozen=True)
class MemlockLimit(Probe):
    user: str = ""

    def argv(self) -> Tuple[str, ...]:
        return (*as_user(self.user), "bash", "-c", "ulimit -l")


@dataclass(frozen=True)
class TorchImport(Probe):
    """Does python3 import torch, with torch.distributed (the probe program's line)?"""
    program: str
    user: str = ""
    timeout = 120.0

    def argv(self) -> Tuple[str, ...]:
        return (*as_user(self.user), "python3", "-c", self.program)


@dataclass(frozen=True)
class MpirunVersion(Probe):
    user: str = ""

    def argv(self) -> Tuple[str, ...]:
        return (*as_user(self.user), "mpirun", "--version")


@dataclass(frozen=True)
class ReadIbFacts(Probe):
    """The IB facts script (programs/ib_facts.sh, as shell text) run with bash here (host "")
    or on host over SSH: `bash -c SCRIPT ib_facts ROOT PYTHON`, read-only."""
    script: str
    python: str = ""  # whose torch names the NCCL it links ("": not asked)
    host: str = ""
    port: int = 0
    user: str = ""
    root: str = "/"
    timeout = 90.0  # the script bounds torch's import at 60 s

    def argv(self) -> Tuple[str, ...]:
        args = ("bash", "-c", self.script, "ib_facts", self.root, self.python)
        if not self.host:
            return (*as_user(self.user), *args)
        return ssh_argv(self.user, self.port, self.host, shlex.join(args))


@dataclass(frozen=True)
class ReadHealth(Probe):
    """The fleet check's health program (programs/health.sh, as shell text) run with bash
    here (host "") or on host over SSH: `bash -c SCRIPT health ROOT`, read-only."""
    script: str
    host: str = ""
    port: int = 0
    user: str = ""
    root: str = "/"
    timeout = 100.0  # the program bounds each of its three nvidia-smi runs at 30 s

    def argv(self) -> Tuple[str, ...]:
        args = ("bash", "-c", self.script, "health", self.root)
        if not self.host:
            return (*as_user(self.user), *args)
        return ssh_argv(self.user, self.port, self.host, shlex.join(args))


# --- files of verify's own ----------------------------------------------------------------


@dataclass(frozen=True)
class IsExecutable(Probe):
    path: str
    user: str = ""
    timeout = 5.0

    def argv(self) -> Tuple[str, ...]:
        return (*as_user(self.user), "test", "-x", self.path)


@dataclass(frozen=True)
class WriteOnce(Probe):
    """text to path here (as user), unless a file is there already."""
    path: str
    text: str
    user: str = ""

    def argv(self) -> Tuple[str, ...]:
        q = shlex.quote(self.path)
        return (*as_user(self.user), "bash", "-c",
                f"mkdir -p {shlex.quote(os.path.dirname(self.path))} && test -s {q} || cat > {q}")

    def stdin(self) -> Optional[bytes]:
        return self.text.encode()


@dataclass(frozen=True)
class BuildMpiProgram(Probe):
    """source (C text) saved at path + '.c' and built with mpicc into path."""
    path: str
    source: str
    user: str = ""
    timeout = 60.0

    def argv(self) -> Tuple[str, ...]:
        src, exe = shlex.quote(self.path + ".c"), shlex.quote(self.path)
        return (*as_user(self.user), "bash", "-c",
                f"mkdir -p {shlex.quote(os.path.dirname(self.path))} && cat > {src}"
                f" && mpicc -O1 -o {exe} {src}")

    def stdin(self) -> Optional[bytes]:
        return self.source.encode()


@dataclass(frozen=True)
class SingleCopy(Probe):
    """recipes/runtime.sh's hw_rt_cma as the job's user (whose capabilities the ranks have),
    the library on stdin: 'yes', 'no' or 'unknown', then why, a line each."""
    library: str
    user: str = ""

    def argv(self) -> Tuple[str, ...]:
        return (*as_user(self.user), "bash", "-s")

    def stdin(self) -> Optional[bytes]:
        return (self.library + '\nhw_rt_cma\nprintf "%s\\n%s\\n" "$HW_RT_CMA" '
                '"$HW_RT_CMA_WHY"\n').encode()


@dataclass(frozen=True)
class JobEnvironment(Probe):
    """recipes/runtime.sh's hw_rt_forward_args in verify's own environment (the shell that
    would run the launch script) as the job's user, the library on stdin: 'x NAME' for each
    name mpirun -x passes, 'prefix DIR' (Open MPI outside /usr/bin, for --prefix), then
    'python3 PATH' (as PATH finds it, links not followed: a venv's python3 links into
    /usr/bin), 'sysprefix DIR' (its sys.prefix) and 'omp VALUE' (OMP_NUM_THREADS, when set)."""
    library: str
    names: Tuple[str, ...]
    prefixes: Tuple[str, ...]
    more: Tuple[str, ...]  # FORWARD_ENV's names
    ompi_version: str
    user: str = ""  # the job's user, as verify's mpirun runs: their environment is the job's

    def argv(self) -> Tuple[str, ...]:
        return (*as_user(self.user), "bash", "-s", "--", " ".join(self.names),
                " ".join(self.prefixes), " ".join(self.more), self.ompi_version)

    def stdin(self) -> Optional[bytes]:
        return (self.library + "\n" + _JOB_ENVIRONMENT_SH).encode()


_JOB_ENVIRONMENT_SH = r'''
hw_rt_forward_args "$1" "$2" "$3" "$4"
for v in ${HW_RT_FORWARD[@]+"${HW_RT_FORWARD[@]}"}; do printf 'x %s\n' "$v"; done
printf 'prefix %s\n' "$HW_RT_PREFIX"
py=$(command -v python3 2>/dev/null) || py=''
printf 'python3 %s\n' "$py"
if [ -n "$py" ]; then
  printf 'sysprefix %s\n' "$("$py" -c 'import sys; print(sys.prefix)' 2>/dev/null)"
fi
if [ -n "${OMP_NUM_THREADS+set}" ]; then printf 'omp %s\n' "$OMP_NUM_THREADS"; fi
'''


# --- jobs across instances -----------------------------------------------------------------


@dataclass(frozen=True)
class Mpirun(Probe):
    """`mpirun --hostfile HOSTFILE -np N ARGS... PROGRAM...`, env added here (and passed on
    with -x among args)."""
    hostfile: str
    np: int
    args: Tuple[str, ...]
    program: Tuple[str, ...]
    user: str = ""
    extra_env: Env = ()
    timeout = JOB_TIMEOUT

    def argv(self) -> Tuple[str, ...]:
        return (*as_user(self.user), "mpirun", "--hostfile", self.hostfile, "-np",
                str(self.np), *self.args, *self.program)

    def env(self) -> Optional[Dict[str, str]]:
        return dict(self.extra_env) if self.extra_env else None


@dataclass(frozen=True)
class LaunchHalf(Probe):
    """`bash SCRIPT -- PYTHON PROGRAM` (the launch script) with env, here (host "") or on
    host over SSH: one half of a two-instance job."""
    script: str
    python: str
    program: str
    extra_env: Env
    host: str = ""
    port: int = 0
    user: str = ""
    timeout = JOB_TIMEOUT

    def argv(self) -> Tuple[str, ...]:
        if not self.host:
            return (*as_user(self.user), "env", *[f"{k}={v}" for k, v in self.extra_env],
                    "bash", self.script, "--", self.python, self.program)
        envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.extra_env)
        return ssh_argv(self.user, self.port, self.host,
                        f"{envs} bash {shlex.quote(self.script)} -- {shlex.quote(self.python)} "
                        f"{shlex.quote(self.program)}")


# --- bandwidth (verify --bandwidth) --------------------------------------------------------

# ib_write_bw's fixed measurement: 1 MiB messages (past the size where a healthy HDR/NDR port
# plateaus), 5000 of them on each of 2 queue pairs, CPU-frequency warnings not fatal (-F:
# containers cannot read cpufreq), the figure in Gb/s to compare with the port's rate.
IB_WRITE_BW_ARGS = ("-s", "1048576", "-n", "5000", "-q", "2", "-F", "--report_gbits")
IB_SERVER_SECONDS = 60  # the server waits this long for its client, then exits


@dataclass(frozen=True)
class IbWriteBwServer(Probe):
    """perftest's ib_write_bw server on host over SSH, bounded by `timeout`: it waits for one
    client on tcp_port (the exchange of queue-pair numbers), then the RDMA writes arrive."""
    host: str
    port: int
    device: str
    ib_port: int
    tcp_port: int
    user: str = ""
    timeout = IB_SERVER_SECONDS + 15.0

    def argv(self) -> Tuple[str, ...]:
        remote = shlex.join(("timeout", str(IB_SERVER_SECONDS), "ib_write_bw", "-d", self.device,
                             "-i", str(self.ib_port), "-p", str(self.tcp_port),
                             *IB_WRITE_BW_ARGS))
        return ssh_argv(self.user, self.port, self.host, remote)


@dataclass(frozen=True)
class IbWriteBwClient(Probe):
    """ib_write_bw's client here (as the job's user: its locked-memory limit is the job's),
    writing to the server at address."""
    address: str
    device: str
    ib_port: int
    tcp_port: int
    user: str = ""
    timeout = 60.0

    def argv(self) -> Tuple[str, ...]:
        return (*as_user(self.user), "ib_write_bw", "-d", self.device, "-i", str(self.ib_port),
                "-p", str(self.tcp_port), *IB_WRITE_BW_ARGS, self.address)


@dataclass(frozen=True)
class TcpBwReceiver(Probe):
    """The TCP test program's receiver on host over SSH (`PYTHON - --receive ADDRESS`, the
    program on stdin): it listens on a free port of address (the one the sender connects to,
    an IP address: the check validates it), prints the port with a one-time token and goes to
    the background, so the ssh returns while it waits for the sender."""
    host: str
    port: int
    python: str
    program: str
    address: str
    user: str = ""
    timeout = SSH_TIMEOUT

    def argv(self) -> Tuple[str, ...]:
        return ssh_argv(self.user, self.port, self.host,
                        f"{shlex.quote(self.python)} - --receive {shlex.quote(self.address)}")

    def stdin(self) -> Optional[bytes]:
        return self.program.encode()


@dataclass(frozen=True)
class TcpBwSender(Probe):
    """The TCP test program's sender here: to the receiver at address:tcp_port until mib MiB
    are sent or seconds have passed, whichever comes first (a slow link gives a low figure
    well within the time-out)."""
    address: str
    tcp_port: int
    token: str
    mib: int
    python: str
    program: str
    seconds: float = 10.0
    timeout = JOB_TIMEOUT

    def argv(self) -> Tuple[str, ...]:
        return (self.python, "-", "--send", self.address, str(self.tcp_port),
                str(self.mib), f"{self.seconds:g}")

    def env(self) -> Optional[Dict[str, str]]:
        # not on the command line: `ps` shows that to every user
        return {"HPCWIZARD_TCPBW_TOKEN": self.token}

    def stdin(self) -> Optional[bytes]:
        return self.program.encode()


_LINK_SPEED = ('d=/sys/class/net/$1; [ -d "$d" ] || { echo "no $d"; exit 1; }; '
               's=$(cat "$d/speed" 2>/dev/null) || s=-1; v=0; [ -e "$d/device" ] || v=1; '
               'k=$(sed -n "s/^DEVTYPE=//p" "$d/uevent" 2>/dev/null); '
               'echo "speed=${s:--1} virtual=$v kind=${k:-none}"')


@dataclass(frozen=True)
class LinkSpeed(Probe):
    """An interface's speed as the kernel reports it (/sys/class/net/IFACE/speed, Mb/s), and
    whether it is virtual (no device behind it: veth, ...) and of which kind (DEVTYPE)."""
    iface: str
    timeout = 5.0

    def argv(self) -> Tuple[str, ...]:
        return ("bash", "-c", _LINK_SPEED, "link_speed", self.iface)


@dataclass(frozen=True)
class TcpBwAt(Probe):
    """The TCP test program on host over SSH ("": here, as the job's user), with args: the
    fleet check's receiver or sender, on whichever instance its pair names. preamble goes
    before the program on stdin: the sender's token, which a command line would show to
    every user of that instance."""
    host: str
    port: int
    python: str
    program: str
    args: Tuple[str, ...]
    preamble: str = ""
    user: str = ""
    timeout = SSH_TIMEOUT + 15

    def argv(self) -> Tuple[str, ...]:
        if not self.host:
            return (*as_user(self.user), self.python, "-", *self.args)
        return ssh_argv(self.user, self.port, self.host,
                        shlex.join((self.python, "-", *self.args)))

    def stdin(self) -> Optional[bytes]:
        return (self.preamble + self.program).encode()
