"""Issue 13, part 1, beyond verify: what export and the run lock write is never written
through something planted at its name, and no path this process did not create is chmod-ed.

- export -o FILE (and the Dockerfile's companion files): the mode is set on the new file
  before the rename, so a link planted at FILE is replaced, its target untouched;
- the machine-wide run lock in /run/lock (writable by every user): a file there that is not
  ours, or a hard link to another file, is only flock-ed: never chmod-ed, cut or written.
(download's .part and .sha256: tests/test_download.py.)"""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from _ib_fixtures import make_facts
from hpcwizard import cli, lock

SECRET = b"root only\n"


def mode(p: Path) -> int:
    return stat.S_IMODE(p.lstat().st_mode)


@pytest.fixture
def victim(tmp_path):
    v = tmp_path / "root-only"
    v.write_bytes(SECRET)
    v.chmod(0o600)
    return v


@pytest.mark.parametrize("fmt", ["setup", "dockerfile", "launch"])
def test_export_replaces_a_planted_link_and_sets_the_mode_before(tmp_path, monkeypatch, capsys,
                                                                  victim, fmt):
    monkeypatch.setattr("hpcwizard.commands.configure.facts_here",
                        lambda sysroot, **_: make_facts("rocky9"))
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    out = ctx / "out"
    names = [out] + ([ctx / "hpcwizard-setup.sh"] if fmt == "dockerfile" else [])
    for name in names:
        name.symlink_to(victim)
    argv = ["export", "--format", fmt, "--framework", "mpi", "--network", "tcp", "--manual",
            "-o", str(out)]
    # without --force, something at the names is refused whole: nothing written or followed
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already exists" in err and "--force" in err
    assert all(name.is_symlink() for name in names)
    assert cli.main(argv + ["--force"]) == 0
    for name in names:
        want = 0o644 if name.name == "out" and fmt == "dockerfile" else 0o755
        assert not name.is_symlink() and mode(name) == want, name
        assert b"hpcwizard" in name.read_bytes()
    assert victim.read_bytes() == SECRET and mode(victim) == 0o600
    assert sorted(p.name for p in ctx.iterdir()) == sorted(n.name for n in names)


@pytest.fixture
def machine_lock(tmp_path, monkeypatch):
    path = tmp_path / "lock" / "hpcwizard.lock"
    path.parent.mkdir()
    monkeypatch.setattr(lock, "MACHINE_LOCK", str(path))
    return path


def test_the_lock_file_of_this_process_gets_its_pid(machine_lock):
    with lock.run_lock(machine=True):
        assert machine_lock.read_text() == str(os.getpid())
        assert mode(machine_lock) == 0o644


def test_a_hard_link_at_the_lock_name_is_not_cut_written_or_chmod_ed(machine_lock, victim):
    os.link(victim, machine_lock)  # fs.protected_hardlinks=0 lets a user do this to root's file
    with lock.run_lock(machine=True):
        assert victim.read_bytes() == SECRET
    assert victim.read_bytes() == SECRET and mode(victim) == 0o600


@pytest.mark.skipif(os.geteuid() != 0, reason="making a file of another user needs root")
def test_another_users_lock_file_is_only_locked(machine_lock):
    machine_lock.write_bytes(b"theirs\n")
    machine_lock.chmod(0o600)
    os.chown(machine_lock, 4242, 4242)
    with lock.run_lock(machine=True):
        pass
    assert machine_lock.read_bytes() == b"theirs\n" and mode(machine_lock) == 0o600


def test_a_link_at_the_lock_name_is_not_followed(machine_lock, victim, tmp_path, monkeypatch):
    machine_lock.symlink_to(victim)
    monkeypatch.setenv("HPCWIZARD_STATE_DIR", str(tmp_path / "state"))
    with lock.run_lock(machine=True):  # falls back to the state directory's lock
        pass
    assert victim.read_bytes() == SECRET and mode(victim) == 0o600
    assert machine_lock.is_symlink()
