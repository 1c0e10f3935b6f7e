"""Issue 6, faults: what the world does to `hpcwizard apply --framework mpi --network tcp
--manual` (root), each with one clear line and nothing else changed.

- the dpkg lock held by another process: apt waits HPCWIZARD_APT_LOCK_TIMEOUT seconds (read
  when the plan is made, written into its commands; 3 here, 120 by default), then the
  packages step fails with the apt-lock diagnosis;
- the package mirrors unreachable (apt pointed at http://127.0.0.1:9/ through APT_CONFIG,
  so /etc/apt is not touched): the packages step fails (apt-get update exits 0 then; the
  step tells by its output) with the mirror diagnosis and its preset-image advice;
- a full disk under the record directory (a 64 KiB tmpfs, filled while a step runs): one
  line naming the file, exit 1, no traceback, the record on disk whole (written atomically)
  and no temporary file beside it, no further step run;
- a second hpcwizard at the same time: exit 2 with one line, having written nothing (the
  machine-wide lock is taken before the record is made);
- `sshd -t` failing on the new configuration (a pre-existing bad drop-in): the sshd step
  fails, its drop-in is taken back, /etc/ssh is as before.

Then each record is undone and /etc/ssh, ~/.ssh, /var/lib/hpcwizard and the packages are as
before. The first four run with the packages missing (their step is the one that runs or
fails); the sshd case installs them for itself (apt-get, purged after).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict

import pytest

from _hardening import RecordedRuns, finish, package_list, packages_installed, start
from test_apply_mpi_tcp import diff, load, show, snapshot, step_table, wizard_exe

pytestmark = pytest.mark.system

ROOTS = (Path("/etc/ssh"), Path("/root/.ssh"), Path("/var/lib/hpcwizard"))
CHOICES = ["--framework", "mpi", "--network", "tcp", "--manual", "--yes"]
FIGURES: Dict[str, int] = {}


class Runs(RecordedRuns):
    """Runs named by the test (the record is NAME.toml)."""

    def record(self, name: str) -> Path:
        path = self.state / f"{name}.toml"
        self.records.append(path)
        return path

    def apply(self, name: str, **env: str) -> "tuple[subprocess.CompletedProcess, Path]":
        rec = self.record(name)
        proc = subprocess.run([wizard_exe(), "apply", *CHOICES, "--record", str(rec)],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              env=dict(self.env, **env), cwd="/", timeout=600)
        return proc, rec


@pytest.fixture
def runs(tmp_path: Path) -> Runs:
    before, packages = snapshot(*ROOTS), package_list()
    r = Runs(tmp_path)
    yield r
    problems = r.undo_all()
    assert not problems, "teardown: undo failed" + "".join(problems)
    after = snapshot(*ROOTS)
    assert after == before, f"teardown: the files differ from before:\n{diff(before, after)}"
    assert package_list() == packages, "teardown: the packages differ from before"


@pytest.fixture
def packages_missing() -> None:
    r = subprocess.run(["dpkg-query", "-W", "-f", "${db:Status-Abbrev}", "openssh-server"],
                       capture_output=True, text=True)
    if r.stdout.startswith("ii"):
        pytest.skip("openssh-server is installed here: the packages step would be skipped")


def plan_step(r: Runs, step_id: str, **env: str) -> dict:
    import json

    proc = subprocess.run([wizard_exe(), "plan", *CHOICES[:-1], "--json"], capture_output=True,
                          text=True, env=dict(r.env, **env))
    assert proc.returncode == 0, show(proc)
    return next(s for s in json.loads(proc.stdout)["steps"] if s["id"] == step_id)


def one_line_failure(proc: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in proc.stdout + proc.stderr, show(proc)


# --- the dpkg lock held by another process ---------------------------------------------------

HOLDER = """
import fcntl, os, sys, time
fd = os.open("/var/lib/dpkg/lock-frontend", os.O_RDWR | os.O_CREAT, 0o640)
fcntl.lockf(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(600)
"""


def test_apt_lock_held_waits_bounded_then_one_clear_line(runs: Runs,
                                                          packages_missing: None) -> None:
    before, packages = snapshot(*ROOTS), package_list()
    step = plan_step(runs, "packages/install", HPCWIZARD_APT_LOCK_TIMEOUT="3")
    assert "--lock-timeout 3 " in step["run"], "the timeout is not in the plan's text"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        t0 = time.monotonic()
        proc, rec = runs.apply("lock", HPCWIZARD_APT_LOCK_TIMEOUT="3")
        seconds = time.monotonic() - t0
    finally:
        holder.kill()
        holder.wait()
    one_line_failure(proc)
    assert proc.returncode == 1, show(proc)
    data = load(rec)
    step = data["steps"][0]
    assert step["id"] == "packages/install" and step["status"] == "failed", step_table(data)
    assert "package lock" in step["diagnosis"], step_table(data)
    assert "Another package manager" in proc.stdout, show(proc)  # the diagnosis, said once
    assert all(s["status"] == "pending" for s in data["steps"][1:]), step_table(data)
    assert seconds < 90, f"the wait was not bounded: {seconds:.0f}s"
    assert package_list() == packages
    after = snapshot(*ROOTS)
    assert without_state(after) == without_state(before), diff(before, after)
    FIGURES["apt-lock"] = 1


def without_state(snap: Dict[str, str]) -> Dict[str, str]:
    """/var/lib/hpcwizard holds what a failed packages step must remember for its undo."""
    return {k: v for k, v in snap.items() if not k.startswith("/var/lib/hpcwizard")}


# --- the package mirrors unreachable ---------------------------------------------------------

def test_mirrors_unreachable_fail_at_the_packages_step(runs: Runs, tmp_path: Path,
                                                       packages_missing: None) -> None:
    apt = tmp_path / "apt"
    (apt / "sources.list.d").mkdir(parents=True)
    (apt / "lists" / "partial").mkdir(parents=True)
    (apt / "sources.list").write_text("deb http://127.0.0.1:9/debian bookworm main\n")
    conf = apt / "apt.conf"
    conf.write_text(f'Dir::Etc::sourcelist "{apt}/sources.list";\n'
                    f'Dir::Etc::sourceparts "{apt}/sources.list.d";\n'
                    f'Dir::State::Lists "{apt}/lists";\n'
                    'Acquire::Retries "0";\n')
    before, packages = snapshot(*ROOTS), package_list()
    apt_before = snapshot(Path("/etc/apt"))
    proc, rec = runs.apply("mirror", APT_CONFIG=str(conf))
    one_line_failure(proc)
    assert proc.returncode == 1, show(proc)
    data = load(rec)
    assert [s["status"] for s in data["steps"]][:2] == ["failed", "pending"], step_table(data)
    assert "could not reach any package mirror" in proc.stdout, show(proc)
    assert "package mirrors cannot be reached" in data["steps"][0]["diagnosis"], step_table(data)
    assert "preset image" in data["steps"][0]["diagnosis"], step_table(data)
    assert "preset image" in proc.stdout, show(proc)
    # nothing else changed: not even /var/lib/hpcwizard (the update fails before it is made)
    assert snapshot(*ROOTS) == before, diff(before, snapshot(*ROOTS))
    assert snapshot(Path("/etc/apt")) == apt_before
    assert package_list() == packages
    FIGURES["mirror"] = 1


# --- a full disk under the record directory ---------------------------------------------------

@pytest.fixture
def small_disk(tmp_path: Path) -> Path:
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", str(mnt)],
                   check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_full_disk_under_the_record_directory(tmp_path: Path, small_disk: Path,
                                              packages_missing: None) -> None:
    r = Runs(tmp_path)
    r.env["HPCWIZARD_STATE_DIR"] = str(small_disk)
    before, packages = snapshot(*ROOTS), package_list()
    step = plan_step(r, "packages/install")
    rec = small_disk / "full.toml"
    r.hold.arm(step["run"], 1)  # the packages step's bash, before its first command
    proc = start(["apply", *CHOICES, "--record", str(rec)], r.env)
    try:
        assert r.hold.wait_ready(proc), show(finish(proc))
        filler = small_disk / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:  # fill the disk to its last byte
            for size in (4096, 512, 1):
                try:
                    while True:
                        os.write(fd, b"\0" * size)
                except OSError:
                    pass
        finally:
            os.close(fd)
        # The step fails now (its bash killed), and its record cannot be written.
        held = int((r.hold.dir / "ready").read_text())
        os.kill(held, signal.SIGKILL)
        out = finish(proc)
    finally:
        r.hold.disarm()
        if proc.poll() is None:
            proc.kill()
    one_line_failure(out)
    assert out.returncode == 1, show(out)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hpcwizard: cannot write "), show(out)
    assert "No space left on device" in lines[0] and str(rec) in lines[0], show(out)
    data = load(rec)  # the last record written whole
    assert data["steps"][0]["status"] == "running", step_table(data)
    assert all(s["status"] == "pending" for s in data["steps"][1:]), step_table(data)
    left = [p.name for p in small_disk.iterdir() if p.name.startswith(".")]
    assert not left, f"temporary files left beside the record: {left}"
    assert snapshot(*ROOTS) == before and package_list() == packages
    # Space again: undo takes back the step the record says may have run.
    (small_disk / "filler").unlink()
    undo = subprocess.run([wizard_exe(), "undo", str(rec), "--yes"], capture_output=True,
                          text=True, env=r.env, stdin=subprocess.DEVNULL)
    assert undo.returncode == 0, show(undo)
    assert snapshot(*ROOTS) == before and package_list() == packages
    FIGURES["full-disk"] = 1


# --- a second hpcwizard at the same time -------------------------------------------------------

def test_second_hpcwizard_is_refused_and_changes_nothing(runs: Runs,
                                                         packages_missing: None) -> None:
    before = snapshot(*ROOTS)
    step = plan_step(runs, "packages/install")
    runs.hold.arm(step["run"], 1)
    first_rec = runs.record("first")
    first = start(["apply", *CHOICES, "--record", str(first_rec)], runs.env)
    try:
        assert runs.hold.wait_ready(first), show(finish(first))
        second_state = runs.tmp / "second-state"
        second_rec = second_state / "second.toml"
        proc = subprocess.run([wizard_exe(), "apply", *CHOICES, "--record", str(second_rec)],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, cwd="/",
                              env=dict(runs.env, HPCWIZARD_STATE_DIR=str(second_state)),
                              timeout=120)
        one_line_failure(proc)
        assert proc.returncode == 2, show(proc)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "another hpcwizard" in lines[0] \
            and str(first.pid) in lines[0], show(proc)
        assert not second_rec.exists() and not second_state.exists(), \
            "the refused run wrote a record"
        assert snapshot(*ROOTS) == before
    finally:
        os.killpg(first.pid, signal.SIGINT)
        out = finish(first)
        runs.hold.disarm()
    assert out.returncode == 130, show(out)
    FIGURES["second-run"] = 1


# --- sshd -t failing on the new configuration ---------------------------------------------------

@pytest.fixture
def installed() -> None:
    yield from packages_installed()


def test_sshd_t_failing_keeps_the_old_configuration(installed: None, runs: Runs) -> None:
    bad = Path("/etc/ssh/sshd_config.d/40-test-bad.conf")
    before_bad = snapshot(*ROOTS)
    bad.write_text("ThisIsNotAnSshdOption yes\n")
    try:
        before = snapshot(*ROOTS)
        proc, rec = runs.apply("sshd-t")
        one_line_failure(proc)
        assert proc.returncode == 1, show(proc)
        data = load(rec)
        by_id = {s["id"]: s["status"] for s in data["steps"]}
        assert by_id["ssh/sshd-config"] == "failed", step_table(data)
        assert "previous one was put back" in proc.stdout, show(proc)
        assert "sshd rejected its configuration" in proc.stdout, show(proc)
        after = snapshot(*ROOTS)
        assert after == before, f"/etc/ssh changed:\n{diff(before, after)}"
        assert not Path("/etc/ssh/sshd_config.d/00-hpcwizard.conf").exists()
    finally:
        bad.unlink()
    problems = runs.undo_all()
    assert not problems, "".join(problems)
    assert snapshot(*ROOTS) == before_bad
    FIGURES["sshd-t"] = 1
