"""Issue 6, interruption: `hpcwizard apply --framework mpi --network tcp --manual` (root)
stopped by SIGINT, SIGTERM or SIGKILL at every step of its plan, at the step's boundary and in
the middle of the step. After each case:

- every file under /etc/ssh and ~/.ssh is as before or complete (a marker file of hpcwizard's,
  a key ssh-keygen accepts, the content the step's check expects); a temporary file
  (NAME.hpcwizard.XXXXXX) is left only by SIGKILL, and the next run or undo removes it;
- the record on disk parses and says truly what was done: the steps before are done or
  skipped, the stopped one "interrupted" (SIGINT, SIGTERM: exit 130) or "running" with its
  start time (SIGKILL), the ones after it pending;
- `apply` again completes (exit 0), and `undo` of both records (newest first) restores
  /etc/ssh, ~/.ssh and /var/lib/hpcwizard byte for byte, stops sshd, and leaves the packages
  as they were.

How the signals are sent: SIGINT to hpcwizard's process group (Ctrl-C in its terminal),
SIGTERM to hpcwizard alone (`kill PID`), SIGKILL to hpcwizard and every process below it
(the container dies). Where: "boundary" holds the step's bash before its first command;
"mid" holds it before the command in the middle of the step, numbered by a DEBUG trap in a
test-only BASH_ENV script (_hardening.Hold: the shell text that runs is exactly what plan
shows). A step of a single command (ssh-keygen -A) is stopped in the middle of that
command instead, at its first output line.

The packages step: its three "mid" cases stop apt while dpkg configures packages (at the first
"Setting up" line), each once, and its three "boundary" cases check the record and undo only
(their "apply again" is the mid cases' own). Apt costs time (install about 25 s, purge about
10 s), so the other steps' cases run with the packages already installed by the module
(apt-get, purged after it): the packages step is then skipped by its check, and each case
costs about four short hpcwizard runs.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Dict, List

import pytest

from hpcwizard import ops
from _hardening import (RecordedRuns, finish, kill_tree, package_list, packages_installed,
                        start)
from test_apply_mpi_tcp import (PORT, diff, listening, load, show, snapshot, step_table,
                                wizard_exe)

pytestmark = pytest.mark.system

ROOT_SSH = Path("/root/.ssh")
ROOTS = (Path("/etc/ssh"), ROOT_SSH, Path("/var/lib/hpcwizard"))
CHOICES = ["--framework", "mpi", "--network", "tcp", "--manual"]
SIGNALS = ("SIGINT", "SIGTERM", "SIGKILL")
OTHER_STEPS = ("ssh/host-keys", "ssh/sshd-config", "ssh/sshd-start", "ssh/user-key",
               "ssh/authorized-keys", "ssh/client-config", "ssh/known-hosts")
# The file each file-writing step owns, whose completeness its check tells.
STEP_FILES = {"ssh/sshd-config": "/etc/ssh/sshd_config.d/00-hpcwizard.conf",
              "ssh/authorized-keys": "/root/.ssh/authorized_keys",
              "ssh/client-config": "/root/.ssh/config",
              "ssh/known-hosts": "/root/.ssh/known_hosts"}
# Temporary files: hpcwizard's (mktemp NAME.hpcwizard.XXXXXX) and ssh-keygen -A's.
TEMP = re.compile(r"(\.hpcwizard\.[A-Za-z0-9]{6}|^ssh_host_\w+_key\.[A-Za-z0-9]{10})$")
COUNTS: Dict[str, int] = {"cases": 0}


class Runs(RecordedRuns):
    """Runs whose records are numbered r001, r002, ..."""

    def __init__(self, tmp: Path):
        super().__init__(tmp)
        self.n = 0

    def record(self) -> Path:
        self.n += 1
        path = self.state / f"r{self.n:03d}.toml"
        self.records.append(path)
        return path

    def apply(self) -> "tuple[subprocess.CompletedProcess, Path]":
        rec = self.record()
        return self.run("apply", *CHOICES, "--yes", "--record", str(rec)), rec

    def start_apply(self) -> "tuple[subprocess.Popen, Path]":
        rec = self.record()
        return start(["apply", *CHOICES, "--yes", "--record", str(rec)], self.env), rec


@pytest.fixture
def runs(tmp_path: Path) -> Runs:
    r = Runs(tmp_path)
    yield r
    problems = r.undo_all()
    assert not problems, "teardown: undo failed" + "".join(problems)


def plan_steps(r: Runs) -> Dict[str, dict]:
    proc = r.run("plan", *CHOICES, "--json")
    assert proc.returncode == 0, show(proc)
    import json

    return {s["id"]: s for s in json.loads(proc.stdout)["steps"]}


def send(proc: subprocess.Popen, sig: str) -> None:
    if sig == "SIGINT":
        os.killpg(proc.pid, signal.SIGINT)
    elif sig == "SIGTERM":
        os.kill(proc.pid, signal.SIGTERM)
    else:
        kill_tree(proc.pid)


def wait_log(rec: Path, pattern: str, proc: subprocess.Popen, timeout: float = 300) -> bool:
    """Until the record's log has a line matching pattern."""
    deadline = time.monotonic() + timeout
    rx = re.compile(pattern, re.M)
    log = rec.with_suffix(".log")
    while time.monotonic() < deadline:
        try:
            if rx.search(log.read_text(errors="replace")):
                return True
        except OSError:
            pass
        if proc.poll() is not None:
            return False
        time.sleep(0.02)
    return False


def host_keys() -> List[Path]:
    return sorted(Path("/etc/ssh").glob("ssh_host_*"))


def without_host_keys(snap: Dict[str, str]) -> Dict[str, str]:
    """The host-keys step has no undo (a host's identity is kept, by design): its keys are
    left out of the byte-for-byte comparison, and removed before each case so that the step
    runs."""
    return {k: v for k, v in snap.items() if not Path(k).name.startswith("ssh_host_")}


def check_record(rec: Path, sig: str, held: str, exact: bool) -> str:
    """The record is whole and true; returns the id of the step the signal stopped."""
    data = load(rec)  # parses: written atomically
    statuses = [(s["id"], s["status"]) for s in data["steps"]]
    table = step_table(data)
    stopped = [i for i, (_, st) in enumerate(statuses) if st not in ("done", "skipped")]
    assert stopped, f"every step is done after a {sig}:\n{table}"
    first = stopped[0]
    step = data["steps"][first]
    want = "running" if sig == "SIGKILL" else "interrupted"
    assert step["status"] in (want, "pending"), f"stopped step says {step['status']}\n{table}"
    if step["status"] == want:
        assert step["started"], f"a {want} step has no start time\n{table}"
    assert all(st == "pending" for _, st in statuses[first + 1:]), table
    assert data["status"] == ("running" if sig == "SIGKILL" else "interrupted"), table
    if exact:
        assert step["id"] == held and step["status"] == want, \
            f"expected {held} {want}:\n{table}"
    return step["id"]


def check_files(before: Dict[str, str], complete: Dict[str, str], sig: str) -> None:
    after = snapshot(*ROOTS)
    bad = []
    for path in sorted(set(before) | set(after)):
        now = after.get(path, "absent")
        if now == before.get(path, "absent") or now == complete.get(path, "absent"):
            continue
        name = Path(path).name
        if TEMP.search(name):
            if sig != "SIGKILL":
                bad.append(f"{path}: a temporary file left after {sig}")
            continue
        if path.startswith("/var/lib/hpcwizard/") or now.startswith("dir"):
            continue  # what the operations keep for their undo
        if now == "absent":
            bad.append(f"{path}: was there before and is gone")
            continue
        if re.search(r"(ssh_host_.*_key|id_ed25519)(\.pub)?$", name):
            if subprocess.run(["ssh-keygen", "-l", "-f", path], capture_output=True).returncode:
                bad.append(f"{path}: not a whole key")
            continue
        step = next((s for s, f in STEP_FILES.items() if f == path), None)
        if step and COMPLETE_CHECKS.get(step) and subprocess.run(
                ["bash", "-c", ops.runnable(COMPLETE_CHECKS[step])],
                capture_output=True).returncode == 0:
            continue
        bad.append(f"{path}: neither as before nor complete ({now})")
    assert not bad, "after the signal:\n" + "\n".join(bad)


COMPLETE_CHECKS: Dict[str, str] = {}


def undo_and_compare(r: Runs, before: Dict[str, str], packages: List[str], what: str) -> None:
    problems = r.undo_all()
    assert not problems, f"{what}: undo failed" + "".join(problems)
    after, before = without_host_keys(snapshot(*ROOTS)), without_host_keys(before)
    assert after == before, f"{what}: after undo the files differ:\n{diff(before, after)}"
    assert not listening(PORT), f"{what}: port {PORT} still answers after undo"
    assert package_list() == packages, f"{what}: undo did not restore the packages"


def finish_held(r: Runs, proc: subprocess.Popen) -> subprocess.CompletedProcess:
    """The run's end after the signal, the step still held: hpcwizard's own SIGINT to the
    step ends it at once, as a rule. Where the held bash stays in the hold's wait loop (a
    device of this test, inside a DEBUG trap: seen twice in 40-odd cases), it is released
    once hpcwizard's first grace is over, so the run ends as hpcwizard's SIGTERM and SIGKILL
    end it, instead of the test waiting on its own hold."""
    try:
        return finish(proc, timeout=15)
    except subprocess.TimeoutExpired:
        r.hold.disarm()
        return finish(proc)


def interrupt_case(r: Runs, steps: Dict[str, dict], step_id: str, where: str, sig: str,
                   before: Dict[str, str], complete: Dict[str, str], packages: List[str],
                   at: int, again: bool = True) -> None:
    what = f"{step_id} {where} {sig}"
    if step_id != "packages/install":
        for key in host_keys():
            key.unlink()
    text = steps[step_id]["run"]
    r.hold.arm(text, at or 1)
    proc, rec = r.start_apply()
    if not r.hold.wait_ready(proc, timeout=300):
        out = finish(proc)
        pytest.fail(f"{what}: the run did not reach the point{show(out)}\n{r.log(rec)}")
    if not at:  # the middle of a step of one command: 50 ms into that command
        r.hold.disarm()
        time.sleep(0.05)
    send(proc, sig)
    out = finish_held(r, proc)
    r.hold.disarm()
    want = -signal.SIGKILL if sig == "SIGKILL" else 130
    assert out.returncode == want, f"{what}: exit {out.returncode}{show(out)}\n{r.log(rec)}"
    assert "Traceback" not in out.stderr, f"{what}{show(out)}"
    check_record(rec, sig, step_id, exact=bool(at))
    if step_id != "packages/install":
        check_files(before, complete, sig)
    if again:
        proc2, rec2 = r.apply()
        assert proc2.returncode == 0 and load(rec2)["status"] == "done", \
            f"{what}: apply again failed{show(proc2)}\n{r.log(rec2)}"
    undo_and_compare(r, before, packages, what)
    COUNTS["cases"] += 1


# --- the packages step: apt stopped while dpkg works -----------------------------------------

@pytest.fixture
def packages_missing() -> None:
    r = subprocess.run(["dpkg-query", "-W", "-f", "${db:Status-Abbrev}", "openssh-server"],
                       capture_output=True, text=True)
    if r.stdout.startswith("ii"):
        pytest.skip("openssh-server is installed here: the packages step would be skipped")


@pytest.mark.parametrize("sig", SIGNALS)
def test_packages_step_boundary(sig: str, runs: Runs, packages_missing: None) -> None:
    steps = plan_steps(runs)
    before, packages = snapshot(*ROOTS), package_list()
    interrupt_case(runs, steps, "packages/install", "boundary", sig, before, {}, packages,
                   at=1, again=False)


@pytest.mark.parametrize("sig", SIGNALS)
def test_packages_step_mid_apt(sig: str, runs: Runs, packages_missing: None) -> None:
    steps = plan_steps(runs)
    before, packages = snapshot(*ROOTS), package_list()
    proc, rec = runs.start_apply()
    assert wait_log(rec, r"^Setting up ", proc, timeout=400), \
        f"apt did not get to 'Setting up'{show(finish(proc))}\n{runs.log(rec)}"
    send(proc, sig)
    out = finish(proc, timeout=300)
    want = -signal.SIGKILL if sig == "SIGKILL" else 130
    assert out.returncode == want, f"exit {out.returncode}{show(out)}\n{runs.log(rec)}"
    check_record(rec, sig, "packages/install", exact=True)
    audit = subprocess.run(["dpkg", "--audit"], capture_output=True, text=True).stdout
    if audit.strip():  # dpkg was left half done: apt says so, and hpcwizard knows the words
        sim = subprocess.run(["apt-get", "-s", "install", "openssh-server"],
                             capture_output=True, text=True)
        said = sim.stdout + sim.stderr
        if "dpkg was interrupted" in said:
            diag = subprocess.run([wizard_exe(), "diagnose", "--scope", "apply", "-"],
                                  input=said,
                                  capture_output=True, text=True)
            assert diag.returncode == 0 and "[apt-lock]" in diag.stdout, show(diag)
    proc2, rec2 = runs.apply()
    assert proc2.returncode == 0 and load(rec2)["status"] == "done", \
        f"apply again failed{show(proc2)}\n{runs.log(rec2)}"
    assert not subprocess.run(["dpkg", "--audit"], capture_output=True, text=True).stdout.strip()
    undo_and_compare(runs, before, packages, f"packages mid-apt {sig}")
    COUNTS["cases"] += 1


# --- every other step, with the packages installed ---------------------------------------------

@pytest.fixture(scope="module")
def installed() -> None:
    yield from packages_installed()


def test_every_other_step_boundary_and_mid(installed: None, runs: Runs) -> None:
    steps = plan_steps(runs)
    assert set(OTHER_STEPS) <= set(steps), sorted(steps)
    for sid, path in STEP_FILES.items():
        COMPLETE_CHECKS[sid] = steps[sid]["check"]
    saved = {k: (k.read_bytes(), k.stat().st_mode) for k in host_keys()}
    try:
        _other_steps(runs, steps)
    finally:
        for key in host_keys():
            key.unlink()
        for key, (body, mode) in saved.items():
            key.write_bytes(body)
            key.chmod(mode & 0o7777)


def _other_steps(runs: Runs, steps: Dict[str, dict]) -> None:
    for key in host_keys():
        key.unlink()
    before, packages = snapshot(*ROOTS), package_list()

    # Calibration: one whole apply counting each step's commands; its files are "complete".
    runs.hold.count_all()
    proc, rec = runs.apply()
    assert proc.returncode == 0, f"calibration apply failed{show(proc)}\n{runs.log(rec)}"
    counts = {sid: runs.hold.counted(steps[sid]["run"]) for sid in OTHER_STEPS}
    complete = snapshot(*ROOTS)
    undo_and_compare(runs, before, packages, "calibration")
    assert all(counts.values()), f"a step did not run in the calibration: {counts}"

    failures = []
    for sid in OTHER_STEPS:
        n = counts[sid]
        for where, at in (("boundary", 1), ("mid", n // 2 + 1 if n >= 2 else 0)):
            for sig in SIGNALS:
                try:
                    interrupt_case(runs, steps, sid, where, sig, before, complete, packages,
                                   at=at)
                except AssertionError as exc:
                    failures.append(f"--- {sid} {where} {sig} (at {at} of {n}):\n{exc}")
                    problems = runs.undo_all()
                    if problems or without_host_keys(snapshot(*ROOTS)) != \
                            without_host_keys(before):
                        pytest.fail("\n".join(failures) + "\n(could not recover: stopped)")
    assert not failures, f"{len(failures)} cases failed:\n" + "\n".join(failures)
    assert COUNTS["cases"] >= 42
