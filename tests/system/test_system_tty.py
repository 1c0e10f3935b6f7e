"""Issue 28, item 1: the job's user cannot type into root's terminal. Root runs `hpcwizard
apply --user USER --yes` in a terminal (a real pty, its controlling terminal), and then, as
an interactive shell would, reads and runs the lines typed into that terminal until the test
types END. The job's user has planted, in every file of theirs that something run as them
might read, a program that pushes `touch MARKER` into the terminal with the TIOCSTI ioctl:
`Match exec` and `ProxyCommand` in ~/.ssh/config (the client-config step's `ssh -G` reads
it), ~/.bashrc, ~/.profile and ~/.bash_profile. Each attempt writes where it ran and how
the ioctl ended into a file the user owns.

What must hold: `ssh -G`'s Match exec did run (the case is real), every attempt failed (no
/dev/tty: ENXIO; stdin, stdout and stderr are not terminals: ENOTTY), nothing it pushed
reached the terminal (its echo is not in what the terminal showed), and MARKER, in a
directory only root can write, was never made. Needs dev.tty.legacy_tiocsti=1 (TIOCSTI
for a terminal's own session, as many kernels still allow); skipped otherwise.
"""
from __future__ import annotations

import os
import pty
import pwd
import select
import shlex
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterator, Tuple

import pytest

from _core_fixtures import wizard_exe
from _hardening import packages_installed
from _tiocsti import ATTEMPT
from test_apply_mpi_tcp import real_user, show

pytestmark = pytest.mark.system

USER = "hpcwtty"
TIMEOUT = 600
LEGACY_TIOCSTI = Path("/proc/sys/dev/tty/legacy_tiocsti")


def tiocsti_allowed() -> bool:
    try:
        return LEGACY_TIOCSTI.read_text().strip() != "0"
    except OSError:
        return True  # a kernel older than the switch: TIOCSTI is allowed


@pytest.fixture(scope="module")
def installed() -> Iterator[None]:
    if not tiocsti_allowed():
        pytest.skip("dev.tty.legacy_tiocsti is 0: this kernel refuses TIOCSTI to everyone "
                    "but CAP_SYS_ADMIN, so there is no attack to hold")
    yield from packages_installed()


@pytest.fixture
def job_user() -> Iterator[str]:
    with real_user(USER, "-s", "/bin/bash") as name:
        yield name


def plant(home: Path, marker: Path) -> Path:
    """The user's traps, written as the user; the log their attempts write."""
    script, log = home / "x.py", home / "attempts"

    def call(where: str) -> str:
        return shlex.join(["python3", str(script), where, str(log), str(marker)])

    files = {
        script: ATTEMPT,
        home / ".ssh" / "config": (f'Match exec "{call("match-exec")}"\n'
                                   f"Host *\n    ProxyCommand {call('proxy-command')}\n"),
        home / ".bashrc": call("bashrc") + "\n",
        home / ".profile": call("profile") + "\n",
        home / ".bash_profile": call("bash_profile") + "\n",
    }
    writer = ("import os, sys\nos.makedirs(sys.argv[1], mode=0o700, exist_ok=True)\n"
              "for path, text in zip(sys.argv[2::2], sys.argv[3::2]):\n"
              "    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)\n"
              "    os.write(fd, text.encode()); os.close(fd)\n")
    args = [str(home / ".ssh")]
    for path, text in files.items():
        args += [str(path), text]
    subprocess.run(["runuser", "-u", USER, "--", "python3", "-c", writer, *args], check=True,
                   capture_output=True)
    return log


def in_root_terminal(argv: list, env: dict, timeout: float = TIMEOUT) -> Tuple[int, str]:
    """argv with a pty as its controlling terminal, then a shell's read-and-run of what the
    terminal holds, until the test types END. Its exit status and all the terminal showed."""
    shell = ('"$@"; echo "APPLY-ENDED $?"\n'
             'while IFS= read -r line; do [ "$line" = END ] && break; eval "$line"; done\n')
    pid, fd = pty.fork()
    if pid == 0:  # the child: the pty is root's terminal
        try:
            os.execve("/bin/bash", ["bash", "-c", shell, "bash", *argv], env)
        finally:
            os._exit(127)
    out, typed_end = b"", False
    deadline = time.monotonic() + timeout
    try:
        while True:
            ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
            if not ready:
                raise AssertionError(f"no end within {timeout} s; so far:\n{out.decode()}")
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the shell is gone and the pty closed
                break
            if not chunk:
                break
            out += chunk
            if not typed_end and b"APPLY-ENDED" in out:
                # whatever was pushed into the terminal is queued before this line
                os.write(fd, b"END\n")
                typed_end = True
    finally:
        if time.monotonic() >= deadline:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    return os.waitstatus_to_exitcode(status), out.decode("utf-8", "replace")


def test_the_job_user_cannot_type_into_roots_terminal(installed, job_user, tmp_path):
    home = Path(pwd.getpwnam(job_user).pw_dir)
    private = tmp_path / "root-only"
    private.mkdir(mode=0o700)
    marker = private / "typed-by-the-job-user"
    log = plant(home, marker)
    state = tmp_path / "state"
    record = state / "records" / "tty.toml"
    env = dict(os.environ, HPCWIZARD_STATE_DIR=str(state), LANG="C.UTF-8", TERM="dumb")
    try:
        code, shown = in_root_terminal(
            [wizard_exe(), "apply", "--framework", "mpi", "--network", "tcp", "--manual",
             "--yes", "--user", job_user, "--ssh-port", "2223", "--peers", "hpcwtty-peer-*",
             "--record", str(record)], env)
        assert code == 0, shown
        assert "APPLY-ENDED 0" in shown, shown
        attempts = log.read_text().splitlines() if log.exists() else []
        assert any(a.startswith("match-exec ") for a in attempts), \
            f"ssh -G never ran the user's Match exec: the case proves nothing\n{shown}"
        assert not [a for a in attempts if a.endswith(" injected")], (attempts, shown)
        assert "match-exec /dev/tty ENXIO" in attempts, attempts  # no controlling terminal
        assert all(a.endswith((" ENXIO", " ENOTTY")) for a in attempts), attempts
        assert f"touch {marker}" not in shown, shown
        assert not marker.exists(), "root's shell ran what the job's user typed"
    finally:
        if record.exists():
            undo = subprocess.run([wizard_exe(), "undo", str(record), "--yes"], env=env,
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  cwd="/", timeout=TIMEOUT, start_new_session=True)
            assert undo.returncode == 0, show(undo)
