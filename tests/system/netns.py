"""Several "instances" on one machine, simulated with network namespaces.

A bridge lives in a namespace of its own; each node namespace gets a veth named eth0 on
that bridge, an address from a private /24, lo up, and its name in a marked block of
/etc/hosts. Commands run in a node through `ip netns exec NS unshare --uts`, so each node
also has its own host name (nodeN). The namespaces share the file system (/etc, /home,
/tmp): whatever a node writes (pid files, logs) must have a per-node name.

Everything created here is removed by cleanup(), which is safe to call twice and after a
partial create(): processes are stopped by the pids this module chose or started, never by
name. Used by the system tests (tests/system); reusable for more nodes (up to 254).

With root=DIR the nodes are instances of the image in DIR (a debootstrap root, see roots.py):
every command runs chrooted there (after a fresh sysfs on DIR/sys in the command's own mount
namespace, so /sys/class/net shows the node's eth0), pid files given to start() are paths in
that root, and hosts_file should be DIR/etc/hosts (the names the image resolves).

    with Cluster(3) as c:                      # nodes node1..node3, 10.77.0.1..3
        c.start_sshd("node2", ["-o", "PidFile=/run/sshd-node2.pid"], "/run/sshd-node2.pid")
        c.wait_port("node2", 2222)
        c.run("node1", ["ssh", "node2", "hostname"])
"""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

HOSTS_FILE = Path("/etc/hosts")
MARK = "hpcwizard-test"


class ClusterError(RuntimeError):
    pass


def _sh(argv: Sequence[str], check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise ClusterError(f"{' '.join(argv)} -> exit {proc.returncode}\n{proc.stdout}{proc.stderr}")
    return proc


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return not _alive(pid)


def strip_block(text: str, mark: str = MARK) -> str:
    """text without the lines from '# BEGIN mark' to '# END mark' (inclusive)."""
    out, inside = [], False
    for line in text.splitlines(keepends=True):
        s = line.rstrip("\n")
        if s == f"# BEGIN {mark}":
            inside = True
        elif s == f"# END {mark}" and inside:
            inside = False
        elif not inside:
            out.append(line)
    return "".join(out)


def ns_argv(ns: str, hostname: str, argv: Sequence[str], user: Optional[str] = None,
            root: Optional[Path] = None) -> List[str]:
    """argv run in namespace ns with a UTS namespace of its own named hostname, as user (root
    when None). With root: chrooted into root, over a sysfs of ns's own mounted on root/sys in
    the mount namespace `ip netns exec` makes (it goes with the command's last process).
    The host name is set as root; only then does runuser switch to the user."""
    tail = ["runuser", "-u", user, "--", *argv] if user else list(argv)
    name = shlex.quote(hostname)
    if root is None:
        script = f'hostname {name} && exec "$@"'
    else:
        r = shlex.quote(str(root))
        script = (f'mount -t sysfs -o ro,nosuid,nodev,noexec sysfs {r}/sys && hostname {name} '
                  f'&& exec chroot {r} "$@"')
    return ["ip", "netns", "exec", ns, "unshare", "--uts", "sh", "-c", script, "sh", *tail]


@dataclass
class Daemon:
    node: str
    proc: subprocess.Popen
    pid_file: Optional[Path]
    log: Path

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""


@dataclass
class Cluster:
    """n nodes named {prefix}1..{prefix}n, in namespaces {ns_prefix}{name}, addresses
    {subnet}.1..n, the bridge in namespace {ns_prefix}br."""

    n: int
    prefix: str = "node"
    subnet: str = "10.77.0"
    ns_prefix: str = "hpcwt-"
    hosts_file: Path = HOSTS_FILE
    root: Optional[Path] = None  # a root file system: every command runs chrooted in it
    env: Optional[Dict[str, str]] = None  # the environment of run()/start() when they get none
    daemons: List[Daemon] = field(default_factory=list)
    _hosts_before: Optional[bytes] = None
    _created: List[str] = field(default_factory=list)
    _tmp: Optional[Path] = None

    def __post_init__(self) -> None:
        if not 1 <= self.n <= 254:
            raise ValueError("1 to 254 nodes")
        self.names = [f"{self.prefix}{i}" for i in range(1, self.n + 1)]
        self.bridge_ns = f"{self.ns_prefix}br"

    # --- names --------------------------------------------------------------------------

    def ns(self, node: str) -> str:
        return f"{self.ns_prefix}{node}"

    def ip(self, node: str) -> str:
        return f"{self.subnet}.{self.names.index(node) + 1}"

    def host_path(self, path: "str | Path") -> Path:
        """Where a node's path is on this machine (under root when there is one)."""
        if self.root is None:
            return Path(path)
        return self.root / str(path).lstrip("/")

    @property
    def tmp(self) -> Path:
        """A directory every user can read (hostfiles for a non-root mpirun, daemon logs)."""
        if self._tmp is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="hpcwt-cluster-"))
            self._tmp.chmod(0o755)
        return self._tmp

    # --- life cycle ---------------------------------------------------------------------

    def __enter__(self) -> "Cluster":
        self.create()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def create(self) -> None:
        try:
            self._create()
        except BaseException:
            self.cleanup()
            raise

    def _create(self) -> None:
        existing = set(_sh(["ip", "netns", "list"]).stdout.split())
        stale = [ns for ns in [self.bridge_ns, *map(self.ns, self.names)] if ns in existing]
        for ns in stale:  # left by a test run that was killed: ours by their prefix
            self._delete_ns(ns)
        br = self.bridge_ns
        _sh(["ip", "netns", "add", br])
        self._created.append(br)
        _sh(["ip", "-n", br, "link", "set", "lo", "up"])
        _sh(["ip", "-n", br, "link", "add", "br0", "type", "bridge"])
        _sh(["ip", "-n", br, "link", "set", "br0", "up"])
        for i, name in enumerate(self.names, 1):
            ns = self.ns(name)
            _sh(["ip", "netns", "add", ns])
            self._created.append(ns)
            _sh(["ip", "-n", br, "link", "add", f"v{i}", "type", "veth",
                 "peer", "name", "eth0", "netns", ns])
            _sh(["ip", "-n", br, "link", "set", f"v{i}", "master", "br0", "up"])
            _sh(["ip", "-n", ns, "link", "set", "lo", "up"])
            _sh(["ip", "-n", ns, "addr", "add", f"{self.ip(name)}/24", "dev", "eth0"])
            _sh(["ip", "-n", ns, "link", "set", "eth0", "up"])
        self._write_hosts()

    def _write_hosts(self) -> None:
        before = self.hosts_file.read_bytes()
        text = strip_block(before.decode())  # a block left by a killed run goes
        if text and not text.endswith("\n"):
            text += "\n"
        block = [f"# BEGIN {MARK}"] + [f"{self.ip(n)} {n}" for n in self.names] + [f"# END {MARK}"]
        self._hosts_before = strip_block(before.decode()).encode()
        # In place (not a rename): /etc/hosts may be a bind mount.
        with open(self.hosts_file, "w") as fh:
            fh.write(text + "\n".join(block) + "\n")

    def _restore_hosts(self) -> None:
        if self._hosts_before is None:
            return
        now = self.hosts_file.read_bytes()
        rest = strip_block(now.decode())
        # Our block appended a newline when the file had none at its end: take it back too.
        if rest.encode() != self._hosts_before and rest.encode().rstrip(b"\n") == \
                self._hosts_before.rstrip(b"\n"):
            rest = self._hosts_before.decode()
        with open(self.hosts_file, "w") as fh:
            fh.write(rest)
        self._hosts_before = None

    def _delete_ns(self, ns: str) -> None:
        self._kill_ns_pids(ns)
        _sh(["ip", "netns", "del", ns], check=False)

    def kill_all(self, node: str) -> None:
        """Every process in node's namespace (what a test ran there started)."""
        self._kill_ns_pids(self.ns(node))

    def _kill_ns_pids(self, ns: str) -> None:
        """Every process still inside a namespace this module made (e.g. an orted)."""
        pids = [int(p) for p in _sh(["ip", "netns", "pids", ns], check=False).stdout.split()]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            pids = [p for p in pids if not _wait_gone(p, 2.0)]
            if not pids:
                return

    def cleanup(self) -> None:
        """Stop the daemons, delete the namespaces, take the hosts block out. Idempotent."""
        errors: List[str] = []
        for step in (self.stop_daemons, self._delete_all_ns, self._restore_hosts, self._rm_tmp):
            try:
                step()
            except Exception as exc:  # keep going: every step must get its chance
                errors.append(f"{step.__name__}: {exc}")
        if errors:
            raise ClusterError("cleanup: " + "; ".join(errors))

    def _delete_all_ns(self) -> None:
        for ns in reversed(self._created):
            self._delete_ns(ns)
        self._created.clear()

    def _rm_tmp(self) -> None:
        if self._tmp is not None:
            import shutil

            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    # --- running things in a node ---------------------------------------------------------

    def argv(self, node: str, argv: Sequence[str], user: Optional[str] = None) -> List[str]:
        """argv run in node's namespace with host name node, as user (root when None).
        The host name is set as root; only then does runuser switch to the user."""
        return ns_argv(self.ns(node), node, argv, user, self.root)

    def run(self, node: str, argv: Sequence[str], user: Optional[str] = None,
            timeout: float = 60, cwd: str = "/tmp",
            env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(node, argv, user), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout, cwd=cwd,
                              env=env if env is not None else self.env)

    def start(self, node: str, argv: Sequence[str], pid_file: Optional[str] = None,
              user: Optional[str] = None) -> Daemon:
        """Start a foreground daemon in node. pid_file: where it writes its own pid (that
        pid is the one stopped), distinct per node because the nodes share /run and /home.
        With a root, pid_file is a path in it."""
        log = self.tmp / f"{node}-{len(self.daemons)}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(self.argv(node, argv, user), stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, cwd="/",
                                    start_new_session=True, env=self.env)
        d = Daemon(node, proc, self.host_path(pid_file) if pid_file else None, log)
        self.daemons.append(d)
        return d

    def start_sshd(self, node: str, pid_file: str, config: Optional[str] = None,
                   user: Optional[str] = None, extra: Sequence[str] = ()) -> Daemon:
        """sshd -D -e in node, from the system configuration or config (-f), logging to a
        file of this cluster (Daemon.log_text())."""
        argv = ["/usr/sbin/sshd", "-D", "-e"]
        if config:
            argv += ["-f", config]
        argv += ["-o", f"PidFile={pid_file}", *extra]
        return self.start(node, argv, pid_file, user)

    def wait_port(self, node: str, port: int, timeout: float = 15.0) -> None:
        """Until node answers an SSH banner (or any data) on port, seen from inside node."""
        script = (f"for i in $(seq {int(timeout * 10)}); do "
                  f"if exec 3<>/dev/tcp/{self.ip(node)}/{port}; then "
                  "IFS= read -r -t 2 line <&3 && { printf '%s\\n' \"$line\"; exit 0; }; "
                  "exec 3<&-; fi 2>/dev/null; sleep 0.1; done; exit 1")
        proc = self.run(node, ["bash", "-c", script], timeout=timeout + 15)
        if proc.returncode != 0:
            logs = "\n".join(f"--- {d.node} log:\n{d.log_text()}" for d in self.daemons
                             if d.node == node)
            raise ClusterError(f"{node} ({self.ip(node)}) did not answer on port {port} "
                               f"within {timeout:.0f}s\n{proc.stderr}{logs}")

    def stop_daemons(self) -> None:
        for d in reversed(self.daemons):
            self.stop(d)
        self.daemons.clear()

    def stop(self, d: Daemon) -> None:
        """Stop d by the pid in its pid file, then by the process group this module started."""
        pid = None
        if d.pid_file is not None:
            try:
                pid = int(d.pid_file.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                pid = None
        if pid and _alive(pid):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            _wait_gone(pid, 5.0)
        if d.proc.poll() is None:
            try:
                os.killpg(d.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                d.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(d.proc.pid, signal.SIGKILL)
                d.proc.wait(timeout=5)
        if d.pid_file is not None:
            try:
                d.pid_file.unlink()  # sshd removes it on SIGTERM; this is for anything else
            except FileNotFoundError:
                pass
