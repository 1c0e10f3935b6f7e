"""Issue 2, system tests: `hpcwizard apply --framework mpi --network tcp --manual` for real on
this machine, proven across three instances simulated with network namespaces (ssh and
mpirun from node1), applied again (every step skipped), then undone: /etc/ssh and the
target's ~/.ssh are byte for byte as before. Once for root, once for a user the test makes;
as that user the exported launch script then runs a job on the three instances, starting
each one's sshd itself as the user.

Each test stands alone (pytest -k root / -k user): it installs the packages if they are
missing and its undo purges them again. Teardown (fixture finalizers, in this order) stops
the nodes' sshd, deletes the namespaces and the /etc/hosts block, undoes any record an
interrupted test left, and removes the test user.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import pwd
import re
import signal
import socket
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List

import pytest

from hpcwizard.compat import tomllib
from _core_fixtures import wizard_exe
from netns import Cluster

pytestmark = pytest.mark.system

PORT = 2222
TEST_USER = "hpcwtest1"
PACKAGES = ("openssh-server", "bind9-dnsutils", "iproute2", "openmpi-bin", "libopenmpi-dev",
            "gcc", "libc6-dev")
MPIRUN = ["mpirun", "--bind-to", "none", "-np", "3",
          "--mca", "btl_tcp_if_include", "eth0", "--mca", "oob_tcp_if_include", "eth0"]
HELLO_C = """#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    printf("hello %d of %d\\n", rank, size);
    MPI_Finalize();
    return 0;
}
"""


# --- helpers ----------------------------------------------------------------------------

def show(proc: subprocess.CompletedProcess) -> str:
    args = proc.args if isinstance(proc.args, str) else " ".join(map(str, proc.args))
    return (f"\n$ {args}\n-> exit {proc.returncode}\n--- stdout:\n{proc.stdout}"
            f"\n--- stderr:\n{proc.stderr}")


def snapshot(*roots: Path) -> Dict[str, str]:
    """Every entry under roots: files by sha256, links by target, with mode and owner;
    a missing root is recorded as absent."""
    out: Dict[str, str] = {}

    def entry(p: Path) -> str:
        st = p.lstat()
        meta = f"{stat.S_IMODE(st.st_mode):04o} {st.st_uid}:{st.st_gid}"
        if stat.S_ISLNK(st.st_mode):
            return f"link {os.readlink(p)}"
        if stat.S_ISDIR(st.st_mode):
            return f"dir {meta}"
        if stat.S_ISREG(st.st_mode):
            return f"file {meta} sha256:{hashlib.sha256(p.read_bytes()).hexdigest()}"
        return f"other {meta}"

    for root in roots:
        if not root.exists() and not root.is_symlink():
            out[str(root)] = "absent"
            continue
        out[str(root)] = entry(root)
        if root.is_dir() and not root.is_symlink():
            for dirpath, dirnames, filenames in os.walk(root):
                for name in sorted(dirnames + filenames):
                    p = Path(dirpath, name)
                    out[str(p)] = entry(p)
    return out


def diff(before: Dict[str, str], after: Dict[str, str]) -> str:
    lines = []
    for k in sorted(set(before) | set(after)):
        if before.get(k) != after.get(k):
            lines.append(f"  {k}: before {before.get(k, 'absent')!r}, after {after.get(k, 'absent')!r}")
    return "\n".join(lines)


def package_states() -> Dict[str, str]:
    states = {}
    for p in PACKAGES:
        r = subprocess.run(["dpkg-query", "-W", "-f", "${db:Status-Abbrev}", p], text=True,
                           capture_output=True)
        states[p] = r.stdout.strip() if r.returncode == 0 else "not known"
    return states


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Target:
    user: str  # "" for root (the default target)
    name: str
    home: Path

    @property
    def ssh_dir(self) -> Path:
        return self.home / ".ssh"

    def apply_args(self) -> List[str]:
        return ["--user", self.user] if self.user else []


class Wizard:
    """Runs the installed hpcwizard with its own state directory; remembers the records it
    wrote so that teardown can undo what an interrupted test left."""

    def __init__(self, state: Path, target: Target):
        self.state = state
        self.target = target
        self.records: List[Path] = []
        self.env = dict(os.environ, HPCWIZARD_STATE_DIR=str(state))

    def run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run([wizard_exe(), *args], stdin=subprocess.DEVNULL, text=True,
                              capture_output=True, env=self.env, cwd="/", timeout=timeout)

    def apply(self, name: str) -> "tuple[subprocess.CompletedProcess, Path]":
        record = self.state / f"{name}.toml"
        self.records.append(record)
        proc = self.run("apply", "--framework", "mpi", "--network", "tcp", "--manual", "--yes",
                        "--record", str(record), *self.target.apply_args())
        return proc, record

    def undo(self, record: Path) -> subprocess.CompletedProcess:
        return self.run("undo", str(record), "--yes")

    def log(self, record: Path) -> str:
        try:
            return record.with_suffix(".log").read_text(errors="replace")[-6000:]
        except OSError:
            return "(no log)"


def load(record: Path) -> dict:
    return tomllib.loads(record.read_text())


def step_table(data: dict) -> str:
    return "\n".join(f"  {s['id']:<16} {s['status']:<10} exit {s.get('exit_code')} "
                     f"{s.get('diagnosis', '')}" for s in data["steps"])


def _sshd_uids(cluster: Cluster, node: str) -> List[int]:
    """The owners of the processes listening on PORT in node's namespace (ss names them)."""
    ss = subprocess.run(["ip", "netns", "exec", cluster.ns(node), "ss", "-ltnpH",
                         f"sport = :{PORT}"], capture_output=True, text=True, timeout=30)
    return sorted({os.stat(f"/proc/{pid}").st_uid
                   for pid in re.findall(r"pid=(\d+)", ss.stdout)})


def _launch_as_user(cluster: Cluster, wizard: Wizard, target: Target) -> None:
    """The exported launch script as the job's user on every instance, workers first, with
    no sshd running there: each starts the user's own sshd (~/.sshd_config), the first
    runs mpirun without --allow-run-as-root, and tells the workers the end. The nodes
    share /home, so the sshd the launch starts write over the pid file of the one apply
    started, kept and put back after."""
    script = cluster.tmp / "launch.sh"
    proc = wizard.run("export", "--framework", "mpi", "--network", "tcp", "--manual",
                      "--format", "launch", "-o", str(script), *target.apply_args())
    assert proc.returncode == 0, f"export failed{show(proc)}"
    script.chmod(0o755)
    pid_file = target.ssh_dir / "sshd.pid"
    kept = pid_file.read_bytes()
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME": str(target.home),
           "USER": target.name, "LOGNAME": target.name, "LANG": "C.UTF-8",
           "HOSTS": ",".join(cluster.names), "WAIT_TRIES": "6"}
    procs = {}
    try:
        for node in reversed(cluster.names):  # node1, the first instance, last
            procs[node] = subprocess.Popen(
                cluster.argv(node, ["bash", str(script), "--", "hostname"], target.user),
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True, env=env, cwd="/")
        out = {}
        for node, p in procs.items():
            try:
                out[node] = (*p.communicate(timeout=180), p.returncode)
            except subprocess.TimeoutExpired:
                p.kill()
                out[node] = (*p.communicate(), "killed after 180s")
        report = "".join(f"\n--- {n}: exit {rc}\n{so}{se}" for n, (so, se, rc) in out.items())
        assert all(rc == 0 for _, _, rc in out.values()), report
        assert sorted(out["node1"][0].split()) == cluster.names, report
        uid = pwd.getpwnam(target.name).pw_uid
        for node in cluster.names:
            assert f"started sshd on port {PORT}" in out[node][1], report
            assert _sshd_uids(cluster, node) == [uid], f"{node}: sshd not the user's{report}"
        for node in cluster.names[1:]:
            assert out[node][1].strip().splitlines()[-1].endswith(
                "the job ended with status 0"), report
    finally:
        for node in cluster.names:
            cluster.kill_all(node)
        pid_file.write_bytes(kept)


# --- fixtures (teardown runs in reverse: cluster, then wizard, then target) ---------------

def _kill_user_processes(uid: int) -> None:
    """Processes of the test's own user (a wizard sshd a killed run left), by their pids."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = []
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    if d.stat().st_uid == uid:
                        pids.append(int(d.name))
                except OSError:
                    pass
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if not pids:
            return
        time.sleep(0.5)


def _remove_user(name: str) -> None:
    try:
        uid = pwd.getpwnam(name).pw_uid
    except KeyError:
        return
    _kill_user_processes(uid)
    proc = subprocess.run(["userdel", "-r", name], capture_output=True, text=True)
    assert proc.returncode in (0, 12), f"userdel failed{show(proc)}"  # 12: no mail spool


@contextlib.contextmanager
def real_user(name: str, *useradd: str) -> Iterator[str]:
    """A real user with a home and no password (one a killed run left is made anew), removed
    with its home and processes after."""
    _remove_user(name)
    for argv in (["useradd", "-m", *useradd, name], ["usermod", "-p", "*", name]):
        subprocess.run(argv, check=True, capture_output=True)
    try:
        yield name
    finally:
        _remove_user(name)


@pytest.fixture
def target(request: pytest.FixtureRequest) -> Target:
    if request.param == "root":
        yield Target("", "root", Path(pwd.getpwuid(0).pw_dir))
        return
    _remove_user(TEST_USER)  # left by a killed run
    for argv in (["useradd", "-m", TEST_USER],
                 # useradd leaves the account locked ('!'); sshd with UsePAM no refuses a
                 # locked account even for a key. '*': no password, not locked.
                 ["usermod", "-p", "*", TEST_USER]):
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            _remove_user(TEST_USER)
            pytest.fail(f"cannot create the test user{show(proc)}")
    try:
        yield Target(TEST_USER, TEST_USER, Path(pwd.getpwnam(TEST_USER).pw_dir))
    finally:
        _remove_user(TEST_USER)


@pytest.fixture
def wizard(target: Target, tmp_path: Path) -> Wizard:
    w = Wizard(tmp_path / "state", target)
    yield w
    # A test that stopped before its undo leaves its changes: take them back, newest first.
    problems = []
    for record in reversed(w.records):
        if not record.exists():
            continue
        if not any(s["status"] in ("done", "failed", "interrupted", "undo-failed")
                   for s in load(record)["steps"]):
            continue
        proc = w.undo(record)
        if proc.returncode != 0:
            problems.append(show(proc))
    assert not problems, "teardown: undo failed" + "".join(problems)


@pytest.fixture
def cluster(wizard: Wizard) -> Cluster:
    hosts_before = Path("/etc/hosts").read_bytes()
    c = Cluster(3)
    c.create()
    try:
        yield c
    finally:
        c.cleanup()
        assert Path("/etc/hosts").read_bytes() == hosts_before, \
            "teardown: /etc/hosts differs from before the test"


# --- the test ---------------------------------------------------------------------------

@pytest.mark.parametrize("target", ["root", "user"], indirect=True)
def test_apply_prove_across_namespaces_then_undo(target: Target, wizard: Wizard,
                                                  cluster: Cluster) -> None:
    roots = (Path("/etc/ssh"), target.ssh_dir)
    before = snapshot(*roots)
    packages_before = package_states()
    listening_before = listening(PORT)

    # 1. apply for real
    proc, record = wizard.apply("first")
    assert proc.returncode == 0, f"apply failed{show(proc)}\n--- log:\n{wizard.log(record)}"
    data = load(record)
    assert data["status"] == "done", f"record status {data['status']}\n{step_table(data)}"
    assert data["target"]["user"] == target.name
    bad = [s["id"] for s in data["steps"] if s["status"] not in ("done", "skipped")]
    assert not bad, f"steps neither done nor skipped: {bad}\n{step_table(data)}"

    # 2. three instances: each node runs an sshd from the configuration the wizard wrote
    user = target.user or None
    for node in cluster.names:
        if user:
            cluster.start_sshd(node, f"{target.ssh_dir}/sshd-{node}.pid",
                               config=f"{target.home}/.sshd_config", user=user)
        else:
            cluster.start_sshd(node, f"/run/sshd-{node}.pid")
    for node in cluster.names:
        cluster.wait_port(node, PORT)

    def node_logs() -> str:
        return "".join(f"\n--- sshd log of {d.node}:\n{d.log_text()[-3000:]}"
                       for d in cluster.daemons)

    # ssh with nothing but the wizard's ~/.ssh/config and pinned known_hosts
    for peer in cluster.names[1:]:
        ssh = cluster.run("node1", ["ssh", peer, "hostname"], user=user, timeout=30)
        assert ssh.returncode == 0 and ssh.stdout.strip() == peer, \
            f"ssh from node1 to {peer} did not answer {peer!r}{show(ssh)}{node_logs()}"

    hostfile = cluster.tmp / "hostfile"
    hostfile.write_text("".join(f"{n} slots=1\n" for n in cluster.names))
    hostfile.chmod(0o644)
    argv = MPIRUN[:1] + (["--allow-run-as-root"] if not user else []) + MPIRUN[1:] \
        + ["--hostfile", str(hostfile), "hostname"]
    mpi = cluster.run("node1", argv, user=user, timeout=90)
    assert mpi.returncode == 0 and sorted(mpi.stdout.split()) == cluster.names, \
        f"mpirun across {cluster.names} did not print their names{show(mpi)}{node_logs()}"

    # mpicc works after apply (issue 15: it needs gcc, which libopenmpi-dev leaves out), in
    # a directory of the job's user
    work = cluster.tmp / "hello"
    work.mkdir()
    os.chown(work, pwd.getpwnam(target.name).pw_uid, -1)
    (work / "hello.c").write_text(HELLO_C)
    root_flag = "" if user else "--allow-run-as-root "
    built = cluster.run("node1", ["sh", "-c", "mpicc hello.c -o hello && mpirun " + root_flag
                                  + "--oversubscribe --bind-to none -np 2 ./hello"],
                        user=user, cwd=str(work), timeout=120)
    assert built.returncode == 0 and sorted(built.stdout.splitlines()) == \
        ["hello 0 of 2", "hello 1 of 2"], f"mpicc hello.c && mpirun -np 2 failed{show(built)}"

    # 2b. the launch script as that user, which starts each instance's sshd itself
    if user:
        cluster.stop_daemons()
        _launch_as_user(cluster, wizard, target)

    # 3. a second apply finds everything done
    proc2, record2 = wizard.apply("second")
    assert proc2.returncode == 0, f"second apply failed{show(proc2)}\n{wizard.log(record2)}"
    data2 = load(record2)
    not_skipped = [s["id"] for s in data2["steps"] if s["status"] != "skipped"]
    assert not not_skipped, (f"second apply: steps not skipped: {not_skipped}\n"
                             f"{step_table(data2)}\n--- log:\n{wizard.log(record2)}")

    # 4. undo: the nodes' sshd stop first (their pid files live in the user's ~/.ssh)
    cluster.stop_daemons()
    undo = wizard.undo(record)
    assert undo.returncode == 0, f"undo failed{show(undo)}\n--- log:\n{wizard.log(record)}"
    after = snapshot(*roots)
    assert after == before, (f"after undo, /etc/ssh or {target.ssh_dir} differ from before "
                             f"apply:\n{diff(before, after)}")
    if user:
        assert not (target.home / ".sshd_config").exists(), "undo left ~/.sshd_config"
    assert package_states() == packages_before, "undo did not restore the packages"
    assert listening(PORT) == listening_before, f"after undo, port {PORT} still answers"
