"""The job user's odd files, for real: root applies for a second user (USER) whose home holds
a directory where hpcwizard writes ~/.sshd_config, a 3 GB sparse ~/.ssh/config, or a link from
~/.ssh/config to root's file. apply refuses in one hpcwizard line and leaves no temporary file
in the user's home; undo of that record takes back the steps before it and, for the refused
one, has nothing to take back: it succeeds and the home is as it was."""
from __future__ import annotations

import os
import pwd
import subprocess
import time
from pathlib import Path
from typing import Callable, Dict

import pytest

from test_apply_mpi_tcp import real_user, show, snapshot, wizard_exe

pytestmark = pytest.mark.system

USER = "hpcwtest9"
MPI_TCP = ["--framework", "mpi", "--network", "tcp", "--manual"]


def _sshd_config_dir(home: Path) -> str:
    (home / ".sshd_config").mkdir()
    (home / ".sshd_config" / "mine").write_text("x\n")
    return "is not a regular file (directory)"


def _huge_config(home: Path) -> str:
    with open(home / ".ssh" / "config", "wb") as f:
        f.truncate(3 << 30)
    return "more than a configuration file hpcwizard reads (1048576 bytes)"


def _link_to_roots_file(home: Path) -> str:
    (home / ".ssh" / "config").symlink_to("/root/.bashrc")
    return "changes no other user's file through a link"


CASES: Dict[str, Callable[[Path], str]] = {"sshd-config-dir": _sshd_config_dir,
                                           "huge-ssh-config": _huge_config,
                                           "link-to-root": _link_to_roots_file}


@pytest.fixture
def user_home() -> Path:
    with real_user(USER):
        home = Path(pwd.getpwnam(USER).pw_dir)
        (home / ".ssh").mkdir(mode=0o700)
        os.chown(home / ".ssh", pwd.getpwnam(USER).pw_uid, pwd.getpwnam(USER).pw_gid)
        yield home


@pytest.mark.parametrize("case", list(CASES))
def test_an_odd_file_is_refused_and_its_undo_succeeds(tmp_path: Path, user_home: Path,
                                                      case: str) -> None:
    said = CASES[case](user_home)
    env = dict(os.environ, HPCWIZARD_STATE_DIR=str(tmp_path / "state"))
    record = tmp_path / "state" / "records" / "user.toml"

    def wiz(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([wizard_exe(), *args], capture_output=True, text=True, env=env,
                              cwd=str(tmp_path), stdin=subprocess.DEVNULL, timeout=900)

    home_before = snapshot(user_home)
    started = time.monotonic()
    applied = wiz("apply", *MPI_TCP, "--user", USER, "--ssh-port", "2224", "--yes",
                  "--record", str(record))
    took = time.monotonic() - started
    out = applied.stdout + applied.stderr
    try:
        assert applied.returncode == 1, f"apply did not fail{show(applied)}"
        assert "hpcwizard: " in out and said in out, show(applied)
        assert "INT_MAX" not in out and "Traceback" not in out, show(applied)
        assert not list(user_home.rglob(".hpcwizard.*")), show(applied)
    finally:
        undone = wiz("undo", str(record), "--yes")
    assert undone.returncode == 0, f"undo of a refused change failed (apply took {took:.0f} s)" \
                                   f"{show(undone)}"
    assert "undo failed" not in undone.stdout + undone.stderr
    # the steps before, taken back; ~/.local/state, XDG's, may stay (made for the state dir)
    after = {k: v for k, v in snapshot(user_home).items()
             if k not in (f"{user_home}/.local", f"{user_home}/.local/state")}
    assert after == home_before, show(undone)
