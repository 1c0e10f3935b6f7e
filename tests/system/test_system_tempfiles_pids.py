"""Issue 13, parts 1 and 4, system tests (root, HPCWIZARD_SYSTEM_TESTS=1), with a second
real user made for the module (useradd, a unique name, removed at the end):

- a pid file naming an unrelated live process (`sleep`, in a session of its own): root's
  apply fails at ssh/sshd-start with one line naming that pid, program and user, and the
  process lives on; undo says it leaves it and does, and it is still alive. The same for the
  per-user sshd, with the sleeping process the user's own (the step runs as that user and
  could signal it);
- that user plants $TMPDIR/hpcwizard-verify-0 (the directory verify used to reuse) full of
  links named like the old files (hostfile.<pid>.tmp for every pid, hostfile, hello.c...)
  aimed at a root-only 0600 file and a 0700 root directory, then the directory itself as a
  link to that directory; after a real apply, root runs `hpcwizard verify --hosts <this
  host>` (its checks may pass or fail, but mpirun must have been reached, so that a hostfile
  was written): the file's bytes and mode and the directory's mode and contents are as they
  were, the planted directory too, and verify left no directory of its own behind;
- the hostfile directory verify hands to the job's user when root runs the checks as that
  user is readable by that user (runuser cat) and by no other (nobody).

/run/sshd.pid is put back as it was; the records are undone (test_faults' `runs` fixture:
/etc/ssh, /root/.ssh and /var/lib/hpcwizard as before); the packages are installed for the
module and purged after it (_hardening.packages_installed).
"""
from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import stat
import subprocess
import tempfile
import time
import traceback
from pathlib import Path
from typing import Callable, Dict, Iterator, List

import pytest

from _hardening import packages_installed
from _verify_cluster import wait_for_other_system_tests
from test_apply_mpi_tcp import _remove_user, listening, load, show, step_table, wizard_exe
from test_faults import CHOICES, Runs, runs  # noqa: F401  (the fixture, reused)

pytestmark = pytest.mark.system

USER = f"hpcwt13u{os.getpid() % 100000}"
TMP = "/tmp"
SECRET = b"root only: not for the other user\n"
PIDFILE = Path("/run/sshd.pid")


# --- fixtures ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def installed() -> Iterator[None]:
    wait_for_other_system_tests()
    yield from packages_installed()


@pytest.fixture(scope="module")
def other_user() -> Iterator[pwd.struct_passwd]:
    _remove_user(USER)
    for argv in (["useradd", "-m", USER], ["usermod", "-p", "*", USER]):
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            _remove_user(USER)
            pytest.fail(f"cannot create the second user{show(proc)}")
    try:
        yield pwd.getpwnam(USER)
    finally:
        _remove_user(USER)


@pytest.fixture
def pidfile_restored() -> Iterator[None]:
    """/run/sshd.pid exactly as before the test (or absent, as it was)."""
    before = PIDFILE.read_bytes() if PIDFILE.exists() else None
    try:
        yield
    finally:
        if before is None:
            PIDFILE.unlink(missing_ok=True)
        else:
            PIDFILE.write_bytes(before)


@pytest.fixture
def sleepers() -> Iterator[Callable[..., subprocess.Popen]]:
    """`sleep 600` in a session of its own (as `user` when given); killed at the end."""
    started: List[subprocess.Popen] = []

    def start(user: "pwd.struct_passwd | None" = None) -> subprocess.Popen:
        kw = dict(user=user.pw_uid, group=user.pw_gid, extra_groups=[]) if user else {}
        p = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL, start_new_session=True,
                             cwd="/", **kw)
        started.append(p)
        return p

    yield start
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)


@pytest.fixture
def root_only(tmp_path: Path) -> Dict[str, Path]:
    """A root-only 0600 file and a 0700 root directory (pytest's tmp_path is root's, 0700)."""
    f = tmp_path / "root-only.txt"
    f.write_bytes(SECRET)
    f.chmod(0o600)
    d = tmp_path / "root-dir"
    d.mkdir()
    d.chmod(0o700)
    (d / "inside").write_bytes(SECRET)
    return {"file": f, "dir": d}


def as_user(user: pwd.struct_passwd, fn: Callable[[], None]) -> None:
    """fn() in a child process that is `user` (no root groups, no root uid left)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
            fn()
            code = 0
        except BaseException:  # noqa: BLE001 - reported by the exit status
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"as {user.pw_name}: {fn.__name__} failed"


def alive(p: subprocess.Popen) -> bool:
    return p.poll() is None


def output(proc: subprocess.CompletedProcess) -> List[str]:
    return [ln.strip() for ln in (proc.stdout + proc.stderr).splitlines()]


# --- a pid file naming another process ----------------------------------------------------------

# pidfile_restored before runs: the pid file is put back after runs' teardown has undone
def test_root_sshd_pid_file_naming_another_process(installed: None, pidfile_restored: None,
                                                    runs: Runs, sleepers) -> None:  # noqa: F811
    if listening(2222):
        pytest.skip("something already listens on port 2222 here")
    sleeper = sleepers()
    PIDFILE.write_text(f"{sleeper.pid}\n")
    proc, rec = runs.apply("pidfile-root")
    data = load(rec)
    by_id = {s["id"]: s["status"] for s in data["steps"]}
    assert proc.returncode == 1 and by_id["ssh/sshd-start"] == "failed", \
        f"{show(proc)}\n{step_table(data)}"
    line = (f"hpcwizard: /run/sshd.pid names pid {sleeper.pid} (sleep, user root), which is not "
            "sshd: remove the stale pid file or stop that program")
    assert line in output(proc), show(proc)
    assert "did not start listening" not in proc.stdout + proc.stderr, show(proc)
    assert alive(sleeper), "apply signalled the process the pid file names"

    undo = runs.undo(rec)
    assert undo.returncode == 0, show(undo)
    # undo goes on: it started no sshd, so it stops none, and it says what the pid file names
    assert line in output(undo), show(undo)
    assert alive(sleeper), "undo signalled the process the pid file names"
    assert PIDFILE.read_text() == f"{sleeper.pid}\n"  # not ours to remove either


def test_user_sshd_pid_file_naming_the_users_other_process(installed: None,  # noqa: F811
                                                          runs: Runs, other_user, sleepers):
    home = Path(other_user.pw_dir)
    sleeper = sleepers(other_user)  # the user's own: the step, run as the user, could kill it

    def plant() -> None:
        (home / ".ssh").mkdir(mode=0o700, exist_ok=True)
        (home / ".ssh" / "sshd.pid").write_text(f"{sleeper.pid}\n")

    as_user(other_user, plant)
    rec = runs.record("pidfile-user")
    proc = runs.run("apply", *CHOICES, "--user", USER, "--ssh-port", "2223", "--record", str(rec))
    data = load(rec)
    by_id = {s["id"]: s["status"] for s in data["steps"]}
    assert proc.returncode == 1 and by_id["ssh/sshd-start"] == "failed", \
        f"{show(proc)}\n{step_table(data)}"
    line = (f"hpcwizard: {home}/.ssh/sshd.pid names pid {sleeper.pid} (sleep, user {USER}), "
            "which is not sshd: remove the stale pid file or stop that program")
    assert line in output(proc), show(proc)
    assert alive(sleeper), "apply signalled the process the pid file names"

    undo = runs.undo(rec)
    assert undo.returncode == 0, show(undo)
    assert line in output(undo), show(undo)
    assert alive(sleeper), "undo signalled the process the pid file names"

    # The sshd the plan configures is still recognised once the stale pid file is gone (as
    # the refusal says): apply starts it, a second apply finds it (its check passes), undo
    # stops it.
    as_user(other_user, lambda: (home / ".ssh" / "sshd.pid").unlink())
    rec2, rec3 = runs.record("sshd-user"), runs.record("sshd-user-again")
    first = runs.run("apply", *CHOICES, "--user", USER, "--ssh-port", "2223", "--record", str(rec2))
    assert first.returncode == 0, f"{show(first)}\n{runs.log(rec2)}"
    pid = int((home / ".ssh" / "sshd.pid").read_text())
    assert os.path.basename(os.readlink(f"/proc/{pid}/exe")) == "sshd"
    again = runs.run("apply", *CHOICES, "--user", USER, "--ssh-port", "2223", "--record", str(rec3))
    assert again.returncode == 0, show(again)
    assert {s["id"]: s["status"] for s in load(rec3)["steps"]}["ssh/sshd-start"] == "skipped"
    stop = runs.undo(rec2)
    assert stop.returncode == 0, show(stop)
    assert gone(pid), f"undo left {USER}'s sshd (pid {pid}) running"
    assert alive(sleeper)


def gone(pid: int, timeout: float = 10) -> bool:
    """pid has ended (a zombie not yet reaped counts as ended), waiting up to timeout."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state in ("Z", "X"):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


# --- temporary files: verify never writes through what another user planted -----------------------

def pid_range() -> range:
    """Every pid verify can get, when pid_max is small enough; else the next 30000."""
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    if pid_max <= 65536:
        return range(1, pid_max + 1)
    last = int(Path("/proc/sys/kernel/ns_last_pid").read_text())
    return range(last + 1, last + 30001)


def snapshot(*paths: Path) -> Dict[str, str]:
    out = {}
    for root in paths:
        entries = [root] + (sorted(root.rglob("*")) if root.is_dir() and not root.is_symlink()
                            else [])
        for p in entries:
            st = p.lstat()
            kind = ("link " + os.readlink(p) if stat.S_ISLNK(st.st_mode) else
                    "dir" if stat.S_ISDIR(st.st_mode) else
                    "file " + p.read_bytes().hex()[:80])
            out[str(p)] = f"{kind} {stat.S_IMODE(st.st_mode):o} {st.st_uid}"
    return out


def ours_left() -> List[str]:
    return sorted(p.name for p in Path(TMP).iterdir() if p.name.startswith("hpcwizard-verify-")
                  and p.name != "hpcwizard-verify-0")


def test_verify_writes_nothing_through_a_planted_temp_directory(
        installed: None, pidfile_restored: None, runs: Runs,  # noqa: F811
        other_user, root_only: Dict[str, Path]) -> None:
    victim, vdir = root_only["file"], root_only["dir"]
    old = Path(TMP) / "hpcwizard-verify-0"
    if old.exists() or old.is_symlink():
        pytest.skip(f"{old} is there already (left by someone else)")
    proc, rec = runs.apply("verify-tmp")
    assert proc.returncode == 0, f"apply failed{show(proc)}\n{runs.log(rec)}"
    host = socket.gethostname()
    env = dict(runs.env, TMPDIR=TMP)
    names = [f"{n}.{pid}.tmp" for pid in pid_range() for n in ("hostfile", "hostfile-2")]

    def links() -> None:
        old.mkdir()
        old.chmod(0o755)
        for name in ("hostfile", "hostfile-2", "hello.c", "allreduce.c", *names):
            os.symlink(victim, old / name)
        os.symlink(vdir, old / "root-dir")

    def dir_link() -> None:
        shutil.rmtree(old)
        os.symlink(vdir, old)

    try:
        for plant in (links, dir_link):
            as_user(other_user, plant)
            assert old.lstat().st_uid == other_user.pw_uid
            before = snapshot(victim, vdir, old)
            left_before = ours_left()
            t0 = time.monotonic()
            v = subprocess.run([wizard_exe(), "verify", "--framework", "mpi", "--network",
                                "tcp", "--manual", "--json", "--hosts", host],
                               capture_output=True, text=True, env=env, cwd="/", timeout=300,
                               stdin=subprocess.DEVNULL)
            try:
                checks = {c["id"]: c for c in json.loads(v.stdout)["checks"]}
            except ValueError:
                pytest.fail(f"verify did not print JSON{show(v)}")
            mpirun = checks.get("cluster/mpirun", {})
            assert mpirun.get("status") in ("pass", "fail"), (
                f"verify did not reach mpirun (so wrote no hostfile): the test proves "
                f"nothing{show(v)}")
            assert snapshot(victim, vdir, old) == before, \
                f"{plant.__name__}: verify wrote through what was planted{show(v)}"
            assert victim.read_bytes() == SECRET and stat.S_IMODE(victim.stat().st_mode) == 0o600
            assert stat.S_IMODE(vdir.stat().st_mode) == 0o700
            assert ours_left() == left_before, "verify left its directory behind"
            print(f"\n{plant.__name__}: verify {time.monotonic() - t0:.1f} s, mpirun "
                  f"{mpirun.get('status')}: {mpirun.get('detail')}")
        # and the system sshd the apply started is the one undo stops
        pid = int(PIDFILE.read_text())
        assert os.path.basename(os.readlink(f"/proc/{pid}/exe")) == "sshd"
        undo = runs.undo(rec)
        assert undo.returncode == 0, show(undo)
        assert gone(pid), f"undo left the system sshd (pid {pid}) running"
    finally:
        if old.is_symlink():
            old.unlink()
        elif old.exists():
            shutil.rmtree(old)


def test_the_job_users_hostfile_directory_is_theirs_alone(other_user) -> None:
    from hpcwizard.verify import System

    system = System()
    path = Path(system.write_temp("hostfile", "vm slots=1\n",
                                  owner=(other_user.pw_uid, other_user.pw_gid)))
    try:
        d = path.parent
        assert d.parent == Path(tempfile.gettempdir()) and d.name.startswith("hpcwizard-verify-")
        st = d.lstat()
        assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o700, other_user.pw_uid)
        assert path.lstat().st_uid == other_user.pw_uid
        cat = subprocess.run(["runuser", "-u", USER, "--", "cat", str(path)],
                             capture_output=True, text=True)
        assert cat.returncode == 0 and cat.stdout == "vm slots=1\n", show(cat)
        nobody = subprocess.run(["runuser", "-u", "nobody", "--", "cat", str(path)],
                                capture_output=True, text=True)
        assert nobody.returncode != 0 and "Permission denied" in nobody.stderr, show(nobody)
    finally:
        system.remove_temp()
    assert not path.parent.exists()
