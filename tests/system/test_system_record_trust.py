"""Issue 13, system test (root, with a second real user): a record is code, so root's
hpcwizard runs only a record that is provably root's.

- The other user writes a record in their home whose step runs `as = "root"` with
  `undo = "id > F"` (F in a root-only directory) and status done: root's `undo R --yes`,
  `replay R --yes` and `verify --record R` each refuse in one line naming the owner and what
  to do, also through a symlink of root's; F never appears, the record is byte for byte as
  written.
- A root-owned record the other user can write (group- or other-writable), and one in a
  directory the other user owns: refused the same way.
- Root's `apply --record` onto the other user's notes keeps them byte for byte (apply runs
  with a fake runner: nothing of the plan could run, were it not refused).
"""
from __future__ import annotations

import grp
import os
import pwd
import shutil
import subprocess
import tempfile
import sys
from pathlib import Path
from typing import List

import pytest

from test_apply_mpi_tcp import _remove_user, show, wizard_exe

pytestmark = pytest.mark.system

USER = f"hpcwrt{os.getpid() % 100000}"  # unique per run; removed (userdel -r) at the end
TIMEOUT = 60


def record_text(f: Path, user: str, uid: int, home: str) -> str:
    return f"""schema = 1
tool = "hpcwizard 0.1.0"
status = "done"
log = "{home}/r.log"
[choices]
framework = "mpi"
network = "tcp"
mode = "preset"
[target]
user = "{user}"
uid = {uid}
home = "{home}"
[[steps]]
id = "ssh/sshd-port"
title = "looks like ours"
status = "done"
as = "root"
run = "true"
undo = "id > {f}"
"""


@pytest.fixture
def other_user():
    _remove_user(USER)
    proc = subprocess.run(["useradd", "-m", "-U", USER], capture_output=True, text=True)
    assert proc.returncode == 0, f"cannot create the test user{show(proc)}"
    try:
        yield pwd.getpwnam(USER)
    finally:
        _remove_user(USER)


@pytest.fixture
def shared():
    """A root-owned directory (0755) the other user can reach: under /tmp, not under the
    test's own (0700) directories."""
    d = Path(tempfile.mkdtemp(prefix="hpcwizard-trust-", dir="/tmp"))
    os.chmod(d, 0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def as_user(user: str, script: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(["runuser", "-u", user, "--", "sh", "-c", script], input=stdin,
                          capture_output=True, text=True, cwd="/", timeout=TIMEOUT)


def wiz(tmp: Path, argv: List[str], python: str = "") -> subprocess.CompletedProcess:
    env = dict(os.environ, HPCWIZARD_STATE_DIR=str(tmp / "state"), LANG="C.UTF-8")
    cmd = [wizard_exe(), *argv] if not python else [
        sys.executable, "-c", python + "\nfrom hpcwizard.cli import main\n"
        "sys.exit(main(sys.argv[1:]))", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd="/",
                          stdin=subprocess.DEVNULL, timeout=TIMEOUT)


def refused(proc: subprocess.CompletedProcess, *words: str) -> str:
    assert proc.returncode == 2, show(proc)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("hpcwizard: "), show(proc)
    assert "Traceback" not in proc.stdout + proc.stderr, show(proc)
    for w in words:
        assert w in lines[0], f"{w!r} not in the line{show(proc)}"
    return lines[0]


COMMANDS = (["undo", "{r}", "--yes"], ["replay", "{r}", "--yes"],
            ["verify", "--record", "{r}", "--here"])


def test_root_refuses_a_record_another_user_wrote(tmp_path: Path, other_user) -> None:
    secret = tmp_path / "root-only"
    secret.mkdir(mode=0o700)
    f = secret / "F"
    r = Path(other_user.pw_dir) / "r.toml"
    text = record_text(f, USER, other_user.pw_uid, other_user.pw_dir)
    made = as_user(USER, f"cat > {r}", text)
    assert made.returncode == 0, show(made)
    assert r.stat().st_uid == other_user.pw_uid
    written = r.read_bytes()
    link = secret / "link.toml"  # root's own symlink to it changes nothing
    os.symlink(r, link)

    for path in (r, link):
        for argv in COMMANDS:
            proc = wiz(tmp_path, [a.format(r=path) for a in argv])
            refused(proc, f"is owned by {USER} (uid {other_user.pw_uid}), not by you (root)",
                    "a record runs commands", f"as {USER}", str(r))
            assert not f.exists(), f"another user's record ran as root{show(proc)}"
    assert r.read_bytes() == written and r.stat().st_uid == other_user.pw_uid
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("how", ["group", "others"])
def test_root_refuses_its_own_record_the_other_user_can_write(how: str, tmp_path: Path,
                                                              other_user, shared: Path) -> None:
    secret = tmp_path / "root-only"
    secret.mkdir(mode=0o700)
    f = secret / "F"
    r = shared / "r.toml"
    r.write_text(record_text(f, "root", 0, "/root"))
    if how == "group":
        os.chown(r, 0, grp.getgrnam(USER).gr_gid)
        os.chmod(r, 0o660)
    else:
        os.chmod(r, 0o646)
    can = as_user(USER, f"test -w {r}")
    assert can.returncode == 0, f"the other user cannot write the record{show(can)}"
    written = r.read_bytes()
    for argv in COMMANDS:
        proc = wiz(tmp_path, [a.format(r=r) for a in argv])
        refused(proc, str(r), "its group" if how == "group" else "others", "chmod go-w")
        assert not f.exists(), show(proc)
    assert r.read_bytes() == written


def test_root_refuses_its_record_in_a_directory_the_other_user_owns(tmp_path: Path,
                                                                    other_user) -> None:
    secret = tmp_path / "root-only"
    secret.mkdir(mode=0o700)
    f = secret / "F"
    r = Path(other_user.pw_dir) / "root-record.toml"
    r.write_text(record_text(f, "root", 0, "/root"))
    os.chmod(r, 0o600)  # root's, 0600: but the home's owner can replace it
    for argv in COMMANDS:
        proc = wiz(tmp_path, [a.format(r=r) for a in argv])
        refused(proc, str(r), f"directory {other_user.pw_dir} is owned by {USER}")
        assert not f.exists(), show(proc)


FAKE_RUNNER = """import sys
import hpcwizard.apply as apply
class Fake:
    def __init__(self, *a, **k): pass
    def check(self, as_, text): return False
    def run(self, as_, text, on_line):
        open({ran!r}, "a").write(text)
        return 0
apply.ShellRunner = Fake
"""


def test_root_apply_record_onto_the_other_users_notes_keeps_them(tmp_path: Path,
                                                                 other_user) -> None:
    notes = Path(other_user.pw_dir) / "notes.txt"
    made = as_user(USER, f"printf 'my notes\\n' > {notes}")
    assert made.returncode == 0, show(made)
    before = (notes.read_bytes(), notes.stat())
    ran = tmp_path / "ran"
    proc = wiz(tmp_path, ["apply", "--framework", "mpi", "--network", "tcp", "--manual",
                          "--yes", "--record", str(notes)], python=FAKE_RUNNER.format(ran=str(ran)))
    refused(proc, f"{notes} already exists")
    after = notes.stat()
    assert notes.read_bytes() == before[0]
    assert (after.st_uid, after.st_mode, after.st_ino) == (
        before[1].st_uid, before[1].st_mode, before[1].st_ino)
    assert not ran.exists() and not (Path(other_user.pw_dir) / "notes.log").exists()
