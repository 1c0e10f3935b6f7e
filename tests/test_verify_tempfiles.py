"""verify's temporary files (issue 13, part 1): the hostfiles mpirun reads go into one
directory per verification that this process made (mkdtemp, 0700), owned by the job's user
when root runs the checks as that user; files are created new (O_EXCL|O_NOFOLLOW), so a
directory or symlinks planted at the old predictable name ($TMPDIR/hpcwizard-verify-<uid>,
hostfile.<pid>.tmp) are never written through or chmod-ed; the directory is gone when the
verification ends, also when it is stopped or interrupted.

Commands are answered by the fake System of the verify tests; write_temp is the real one."""
from __future__ import annotations

import dataclasses
import os
import stat
import tempfile
from pathlib import Path

import pytest

from _core_fixtures import ROOT, facts
from _verify_fixtures import FakeSystem
from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.hosts import Hosts
from hpcwizard.plan import Target, build_plan
from hpcwizard.verify import PASS, System, _read_owned, verify
from hpcwizard.verify import probes as P

ALICE = Target("alice", 4242, 4243, "alice", "/home/alice")
SECRET = b"root only\n"


class TempSystem(FakeSystem):
    """The fake's answers, the real write_temp. At each mpirun, what its hostfile is: path,
    text, the directory's mode and owner (seen then: the directory is gone afterwards)."""

    write_temp = System.write_temp

    def __init__(self, peers, answers=None, at_mpirun=None):
        super().__init__(peers, answers)
        self.hostfiles = []
        self.at_mpirun = at_mpirun

    def ask(self, probe):
        if isinstance(probe, P.Mpirun):
            path = Path(probe.hostfile)
            d = path.parent.lstat()
            f = path.lstat()
            self.hostfiles.append({
                "path": path, "text": path.read_text(), "dir_mode": stat.S_IMODE(d.st_mode),
                "dir_owner": owner_of(path.parent), "file_owner": owner_of(path),
                "file_is_link": stat.S_ISLNK(f.st_mode)})
            if self.at_mpirun:
                self.at_mpirun(self)
        return super().ask(probe)


CHOWNS: dict = {}


def owner_of(path: Path):
    """(uid, gid) of path: what a patched chown set (tests not run as root), else its own."""
    st = path.lstat()
    return CHOWNS.get((st.st_dev, st.st_ino), (st.st_uid, st.st_gid))


@pytest.fixture
def tmpdir_(tmp_path, monkeypatch):
    """$TMPDIR for the test (tempfile's own setting), with a root-only file and a 0700
    directory beside it that a planted link could aim at."""
    base = tmp_path / "tmp"
    base.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(base))
    victim = tmp_path / "root-only"
    victim.write_bytes(SECRET)
    victim.chmod(0o600)
    vdir = tmp_path / "root-dir"
    vdir.mkdir()
    vdir.chmod(0o700)
    return base, victim, vdir


@pytest.fixture
def fake_root_chown(monkeypatch):
    """Not root: chown and fchown are recorded (by inode) instead of refused, and the
    scratch module believes it is root."""
    CHOWNS.clear()
    if os.geteuid() == 0:
        yield
        return
    import hpcwizard.scratch as scratch

    def chown(path, uid, gid):
        st = os.lstat(path)
        CHOWNS[(st.st_dev, st.st_ino)] = (uid, gid)

    def fchown(fd, uid, gid):
        st = os.fstat(fd)
        CHOWNS[(st.st_dev, st.st_ino)] = (uid, gid)

    monkeypatch.setattr(scratch.os, "geteuid", lambda: 0)
    monkeypatch.setattr(scratch.os, "chown", chown)
    monkeypatch.setattr(scratch.os, "fchown", fchown)
    yield
    CHOWNS.clear()


def plant(base: Path, victim: Path, vdir: Path, how: str) -> Path:
    """What another user could leave at the old predictable names."""
    old = base / f"hpcwizard-verify-{os.getuid()}"
    if how == "dir-link":  # the directory itself a link to a 0700 directory
        old.symlink_to(vdir)
        return old
    old.mkdir()
    old.chmod(0o700)  # the old code made it 0755
    pid = os.getpid()
    for name in ("hostfile", "hostfile-2", "hello.c", "allreduce.c"):
        (old / name).symlink_to(victim)
        for p in range(max(1, pid - 50), pid + 50):
            (old / f"{name}.{p}.tmp").symlink_to(victim)
    (old / "hostfile-dir").symlink_to(vdir)
    return old


def state(base: Path, victim: Path, vdir: Path):
    return (sorted(p.name for p in base.iterdir()), victim.read_bytes(),
            stat.S_IMODE(victim.stat().st_mode), stat.S_IMODE(vdir.stat().st_mode),
            sorted(p.name for p in vdir.iterdir()))


def mpi_plan(network="tcp", target=None):
    plan = build_plan(facts(user=ROOT), make_choices(framework="mpi", network=network,
                                                     mode="manual"), load_catalog())
    return dataclasses.replace(plan, target=target) if target else plan


def run_verify(system, network="tcp", target=None, hosts=("node1", "node2")):
    return verify(mpi_plan(network, target), facts(user=ROOT), Hosts(tuple(hosts), "--hosts"),
                  system=system)


@pytest.mark.parametrize("how", ["links", "dir-link"])
def test_hostfile_in_a_fresh_private_dir_never_through_planted_links(tmpdir_, how):
    base, victim, vdir = tmpdir_
    planted = plant(base, victim, vdir, how)
    before = state(base, victim, vdir)
    system = TempSystem({"node1": "ok", "node2": "ok"})
    report = run_verify(system)
    assert {c.id: c.status for c in report.checks}["cluster/mpirun"] == PASS
    (hf,) = system.hostfiles
    # a directory of its own, not the planted one, 0700, owned by us (root acts as root)
    assert hf["path"].parent.parent == base and hf["path"].parent != planted
    assert hf["path"].parent.name.startswith("hpcwizard-verify-")
    assert hf["path"].parent.name != planted.name
    assert hf["dir_mode"] == 0o700 and hf["dir_owner"] == (os.geteuid(), os.getegid())
    assert not hf["file_is_link"] and hf["text"] == "node1 slots=1\nnode2 slots=1\n"
    # what was planted is as it was; nothing of ours is left
    assert state(base, victim, vdir) == before
    assert not hf["path"].parent.exists()


def test_the_job_users_hostfiles_are_theirs_when_root_acts_as_them(tmpdir_, fake_root_chown):
    base, victim, vdir = tmpdir_
    before = state(base, victim, vdir)
    system = TempSystem({"node1": "ok", "node2": "ok"}, answers={P.IsExecutable: (0, "")})
    report = run_verify(system, network="ib", target=ALICE)
    checks = {c.id: c for c in report.checks}
    assert checks["cluster/mpirun"].status == PASS
    assert checks["cluster/mpirun"].command.startswith("runuser -u alice -- mpirun --hostfile ")
    # mpirun, then the IB transport's two-host job: both hostfiles in one directory, alice's
    assert [h["path"].name for h in system.hostfiles] == ["hostfile", "hostfile-2"]
    (first, second) = system.hostfiles
    assert first["path"].parent == second["path"].parent
    for hf in system.hostfiles:
        assert hf["dir_mode"] == 0o700
        assert hf["dir_owner"] == (ALICE.uid, ALICE.gid)
        assert hf["file_owner"] == (ALICE.uid, ALICE.gid)
    assert not first["path"].parent.exists()
    assert state(base, victim, vdir) == before


def test_each_verification_has_its_own_directory(tmpdir_):
    base, _victim, _vdir = tmpdir_
    system = TempSystem({"node1": "ok", "node2": "ok"})
    run_verify(system)
    run_verify(system)  # the same System (the wizard's Done screen verifies again)
    a, b = (h["path"].parent for h in system.hostfiles)
    assert a != b and not a.exists() and not b.exists()
    assert list(base.iterdir()) == []


def test_the_directory_is_gone_after_ctrl_c(tmpdir_):
    base, _victim, _vdir = tmpdir_

    def interrupt(_system):
        raise KeyboardInterrupt

    system = TempSystem({"node1": "ok", "node2": "ok"}, at_mpirun=interrupt)
    with pytest.raises(KeyboardInterrupt):
        run_verify(system)
    assert len(system.hostfiles) == 1 and list(base.iterdir()) == []


def test_stop_removes_the_directory_at_once(tmpdir_):
    base, _victim, _vdir = tmpdir_
    seen = {}

    def quit_now(system):  # the wizard's quit, from another thread in real life
        system.stop()
        seen["left"] = list(base.iterdir())

    system = TempSystem({"node1": "ok", "node2": "ok"}, at_mpirun=quit_now)
    run_verify(system)
    assert seen["left"] == [] and list(base.iterdir()) == []


def test_write_temp_refuses_a_name_already_there(tmpdir_):
    base, victim, _vdir = tmpdir_
    system = System()
    try:
        path = Path(system.write_temp("hostfile", "a slots=1\n"))
        link = path.parent / "hostfile-2"
        link.symlink_to(victim)  # planted inside (the job's user owns the directory)
        with pytest.raises(OSError):
            system.write_temp("hostfile-2", "b slots=1\n")
        with pytest.raises(FileExistsError):
            system.write_temp("hostfile", "c slots=1\n")
        assert victim.read_bytes() == SECRET and path.read_text() == "a slots=1\n"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    finally:
        system.remove_temp()
    assert list(base.iterdir()) == []


def test_the_test_program_is_copied_only_when_the_job_user_owns_it(tmp_path):
    own = tmp_path / "allreduce"
    own.write_bytes(b"\x7fELF program")
    link = tmp_path / "link"
    link.symlink_to(own)
    uid = os.getuid()
    assert _read_owned(str(own), uid) == b"\x7fELF program"
    assert _read_owned(str(link), uid) == b""  # a link: not followed
    assert _read_owned(str(own), uid + 1) == b""  # someone else's file
    assert _read_owned(str(tmp_path / "missing"), uid) == b""
    assert _read_owned(str(tmp_path), uid) == b""  # not a regular file
