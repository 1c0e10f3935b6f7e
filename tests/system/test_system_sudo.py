"""sudo told apart for real, and the runs that need it. Real users made with `useradd -m`
(unique names), rules in /etc/sudoers.d, each removed at the end; sudo installed with apt
when missing, and then purged again (only then).

- each kind of user (tests/fixtures/sudo/sudo_capture.py's cases): sudo answers as the stored
  fixture says (names replaced), and hpcwizard's detection, run as that user from the zipapp,
  finds the kind;
- undo as a user whose sudo wants a password: in a terminal (a pty) the password is asked
  once for all the root steps; without a terminal, one line and exit 2 before anything runs;
  a password that opens sudo but not bash: refused before anything runs;
- a uid without a passwd entry: plan says why the preset image, and apply, replay and undo
  refuse with one line, exit 2, nothing run.
"""
from __future__ import annotations

import json
import os
import pty
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "tests" / "fixtures" / "sudo"))
import sudo_capture as cap  # noqa: E402

pytestmark = pytest.mark.system

FIXTURE = json.loads((REPO / "tests" / "fixtures" / "sudo" / "answers.json").read_text())
PYTHON = "/usr/bin/python3"  # every user can run it (the tests' own Python may be root's)
TIMEOUT = 120
RUN = f"u{os.getpid() % 100000}"  # in every name this module makes


def show(proc) -> str:
    return (f"\n$ {' '.join(map(str, proc.args))}\n-> exit {proc.returncode}\n--- stdout:\n"
            f"{proc.stdout}\n--- stderr:\n{proc.stderr}")


@pytest.fixture(scope="module")
def sudo_here() -> Iterator[None]:
    """sudo, installed for this module when the machine has none (and purged after)."""
    installed = False
    # another apt on this machine holds dpkg's lock: apt waits for it (a state, not a sleep)
    wait = ["-o", "DPkg::Lock::Timeout=300"]
    if shutil.which("sudo") is None:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        get = subprocess.run(["apt-get", *wait, "install", "-y", "-q", "sudo"], env=env,
                             capture_output=True, text=True, timeout=600)
        if get.returncode != 0:  # a fresh machine: the lists first
            subprocess.run(["apt-get", *wait, "update", "-q"], env=env, capture_output=True,
                           timeout=600)
            get = subprocess.run(["apt-get", *wait, "install", "-y", "-q", "sudo"], env=env,
                                 capture_output=True, text=True, timeout=600)
        assert get.returncode == 0, f"cannot install sudo{show(get)}"
        installed = True
    try:
        yield
    finally:
        if installed:
            # sudo's prerm refuses removal while root has no password (a container's root
            # has none), unless told that root is reached some other way: here, it is
            gone = subprocess.run(["apt-get", *wait, "purge", "-y", "-q", "sudo"],
                                  capture_output=True, text=True, timeout=600,
                                  env=dict(os.environ, DEBIAN_FRONTEND="noninteractive",
                                           SUDO_FORCE_REMOVE="yes"))
            assert gone.returncode == 0, f"cannot purge the sudo this test installed{show(gone)}"


@pytest.fixture(scope="module")
def pyz(sudo_here) -> Iterator[Path]:
    """The zipapp in a directory every user can read."""
    if not os.access(PYTHON, os.X_OK):
        pytest.skip(f"needs {PYTHON}, a Python every user can run")
    d = Path(tempfile.mkdtemp(prefix=f"hpcwizard-sudo-{RUN}-", dir="/tmp"))
    os.chmod(d, 0o755)
    try:
        out = d / "hpcwizard.pyz"
        build = subprocess.run([sys.executable, str(REPO / "tools" / "build_pyz.py"), "-o",
                                str(out)], capture_output=True, text=True, timeout=600)
        assert build.returncode == 0, f"building the zipapp failed{show(build)}"
        os.chmod(out, 0o755)
        yield out
    finally:
        shutil.rmtree(d, ignore_errors=True)


class Case:
    """One case's user (or bare uid), made for a test and removed after it."""

    def __init__(self, case: str) -> None:
        self.case = case
        self.user = f"hwz{list(cap.CASES).index(case)}{RUN}"
        self.uid: Optional[int] = cap.free_uid() if cap.CASES[case].get("uid_only") else None
        self.dirs: List[Path] = []

    def argv(self, cmd: List[str]) -> List[str]:
        return cap._argv(self.case, self.user, cmd, self.uid)

    @property
    def numeric(self) -> int:
        import pwd

        return self.uid if self.uid is not None else pwd.getpwnam(self.user).pw_uid

    def private_dir(self) -> Path:
        """A directory only this user can change (records are run only from such)."""
        d = Path(tempfile.mkdtemp(prefix=f"hwz-{RUN}-", dir="/tmp"))
        os.chown(d, self.numeric, self.numeric)
        os.chmod(d, 0o700)
        self.dirs.append(d)
        return d

    def set_password(self) -> str:
        password = secrets.token_urlsafe(12)
        subprocess.run(["chpasswd"], input=f"{self.user}:{password}\n", text=True, check=True,
                       capture_output=True)
        return password


@pytest.fixture
def make_case(sudo_here) -> Iterator:
    made: List[Case] = []

    def make(case: str) -> Case:
        c = Case(case)
        cap.remove(case, c.user)  # a killed run's
        cap.make(case, c.user)
        made.append(c)
        return c

    try:
        yield make
    finally:
        for c in made:
            for d in c.dirs:
                shutil.rmtree(d, ignore_errors=True)
            cap.remove(c.case, c.user)


def wizard(c: Case, pyz: Path, args: List[str], state: Path,
           new_session: bool = True) -> subprocess.CompletedProcess:
    """hpcwizard as the case's user, no terminal (a new session), stdin /dev/null."""
    argv = c.argv(["env", f"HOME={state}", f"HPCWIZARD_STATE_DIR={state}/state",
                   "LANG=C.UTF-8", PYTHON, "-I", "-S", str(pyz), *args])
    return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          cwd="/", timeout=TIMEOUT, start_new_session=new_session)


def in_pty(argv: List[str], password: str, timeout: float = TIMEOUT) -> Tuple[int, str, int]:
    """Run argv with a pty as its controlling terminal; answer each sudo prompt with the
    password. Its exit status, what it wrote, and how many prompts there were."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the pty is its terminal
        try:
            os.execvp(argv[0], argv)
        finally:
            os._exit(127)
    out, prompts = b"", 0
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(left, 0))
            if not ready:
                raise AssertionError(f"no end within {timeout} s; so far:\n{out.decode()}")
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the child is gone and the pty closed
                break
            if not chunk:
                break
            out += chunk
            if out.count(b"password for") > prompts:  # sudo's prompt, waiting for us
                prompts += 1
                os.write(fd, password.encode() + b"\n")
    finally:
        if time.monotonic() >= deadline:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    return os.waitstatus_to_exitcode(status), out.decode("utf-8", "replace"), prompts


def record(c: Case, d: Path, marks: List[Path], mode: str = "manual") -> Path:
    """A record of two done root steps whose undo writes who ran it into marks."""
    steps = "".join(f"""
[[steps]]
id = "test/root-{i}"
title = "a root step"
status = "done"
as = "root"
run = "true"
undo = "id -u > {m}"
""" for i, m in enumerate(marks))
    r = d / "r.toml"
    r.write_text(f"""schema = 1
tool = "hpcwizard 0.1.0"
status = "done"
log = "{d}/r.log"
[choices]
framework = "mpi"
network = "tcp"
mode = "{mode}"
[target]
user = "{c.user if c.uid is None else 'unknown'}"
uid = {c.numeric}
home = "{d}"
{steps}""")
    os.chown(r, c.numeric, c.numeric)
    os.chmod(r, 0o600)
    return r


def one_line(proc: subprocess.CompletedProcess, *words: str) -> str:
    assert proc.returncode == 2, show(proc)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("hpcwizard: "), show(proc)
    assert "Traceback" not in proc.stdout + proc.stderr, show(proc)
    for w in words:
        assert w in lines[0], f"{w!r} not in the line{show(proc)}"
    return lines[0]


# --- each kind ---------------------------------------------------------------------------------

def normalised(text: str, c: Case, host: str) -> str:
    return text.replace(c.user, "USER").replace(host, "HOST")


@pytest.mark.parametrize("case", list(cap.CASES))
def test_sudo_answers_as_stored_and_detection_finds_the_kind(case, make_case, pyz, tmp_path):
    c = make_case(case)
    live = cap.ask(case, c.user, c.uid)
    stored = FIXTURE["cases"][case]
    stored_user = stored["user"]
    for cmd in cap.ASKED:
        key = " ".join(cmd)
        got, want = live[key], stored["answers"][key]
        assert got["rc"] == want["rc"], (key, got, want)
        assert normalised(got["stderr"], c, os.uname().nodename) == \
            want["stderr"].replace(stored_user, "USER").replace(FIXTURE["host"], "HOST"), key
    # the real detection, as that user, from the zipapp
    d = c.private_dir()
    proc = wizard(c, pyz, ["detect", "--json"], d)
    assert proc.returncode == 0, show(proc)
    user = json.loads(proc.stdout)["user"]
    assert user["sudo"] == stored["kind"], (user, proc.stderr)
    assert user["in_passwd"] == (case != "no_passwd_entry")


# --- the password once, in a terminal; none without one ---------------------------------------------

def test_undo_asks_the_password_once_in_a_terminal(make_case, pyz):
    c = make_case("password")
    password = c.set_password()
    d = c.private_dir()
    marks = [d / "first", d / "second"]
    r = record(c, d, marks)
    argv = c.argv(["env", f"HOME={d}", f"HPCWIZARD_STATE_DIR={d}/state", "LANG=C.UTF-8",
                   PYTHON, "-I", "-S", str(pyz), "undo", str(r), "--yes"])
    code, out, prompts = in_pty(argv, password)
    assert code == 0, out
    assert prompts == 1, out  # two root steps, one password
    assert [m.read_text().strip() for m in marks] == ["0", "0"], out  # run as root


def test_undo_without_a_terminal_refuses_before_anything_runs(make_case, pyz):
    c = make_case("password")
    d = c.private_dir()
    marks = [d / "first"]
    r = record(c, d, marks)
    before = r.read_bytes()
    proc = wizard(c, pyz, ["undo", str(r), "--yes"], d)
    one_line(proc, "no terminal", "nothing was changed")
    assert not marks[0].exists()
    assert r.read_bytes() == before


def test_a_password_that_opens_no_shell_is_refused_before_anything_runs(make_case, pyz):
    c = make_case("limited_password")
    password = c.set_password()
    d = c.private_dir()
    marks = [d / "first"]
    r = record(c, d, marks)
    argv = c.argv(["env", f"HOME={d}", f"HPCWIZARD_STATE_DIR={d}/state", "LANG=C.UTF-8",
                   PYTHON, "-I", "-S", str(pyz), "undo", str(r), "--yes"])
    code, out, prompts = in_pty(argv, password)
    assert code == 2 and prompts == 1, out
    assert "does not let you run bash as root" in out, out
    assert not marks[0].exists()


# --- a uid without a passwd entry ---------------------------------------------------------------------

def test_a_uid_without_passwd_entry_is_told_before_anything_runs(make_case, pyz):
    c = make_case("no_passwd_entry")
    d = c.private_dir()
    plan = wizard(c, pyz, ["plan", "--framework", "mpi", "--network", "tcp"], d)
    assert plan.returncode == 0, show(plan)
    assert f"User id {c.uid} has no entry in /etc/passwd" in plan.stdout, show(plan)
    assert "Recommended: start the job from the preset image" in plan.stdout, show(plan)

    apply = wizard(c, pyz, ["apply", "--framework", "mpi", "--network", "tcp", "--manual",
                            "--yes"], d)
    one_line(apply, f"user id {c.uid} has no entry in /etc/passwd", "nothing was changed")
    assert apply.stdout == "", show(apply)  # not even the plan: nothing was going to run
    assert not (d / "state").exists() or not any((d / "state").rglob("*.toml")), show(apply)
    assert not (d / ".ssh").exists()

    marks = [d / "first"]
    r = record(c, d, marks)
    for args in (["undo", str(r), "--yes"], ["replay", str(r), "--yes"]):
        proc = wizard(c, pyz, args, d)
        one_line(proc, f"user id {c.uid} has no entry in /etc/passwd")
        assert not marks[0].exists(), show(proc)
