"""apply_record / undo_record with a fake Runner, the record re-read from disk after each
run; and ShellRunner's command lines."""
from __future__ import annotations

import os
import pwd
from dataclasses import replace
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

import pytest

from hpcwizard import apply as apply_mod
from hpcwizard import proc
from hpcwizard.apply import (RunFinished, ShellRunner, StepFinished, StepOutput, StepStarted,
                             apply_record, skip_stopped_step, undo_record)
from hpcwizard.choices import make_choices
from hpcwizard.plan import Plan, Recommendation, Step, Target
from hpcwizard.record import Record

from _core_fixtures import ROOT, facts

APT_LOCK = "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 1234 (apt)"


class FakeRunner:
    """Step N's check passes once step N ran (or when it starts done); run texts can fail,
    print lines, or raise KeyboardInterrupt."""

    def __init__(self, done: Sequence[int] = (), fail: Optional[Dict[int, Tuple[int, List[str]]]] = None,
                 interrupt: Sequence[int] = (), check_stays_false: Sequence[int] = (),
                 undo_fail: Sequence[int] = ()):
        self.done: Set[int] = set(done)
        self.fail = fail or {}
        self.interrupt = set(interrupt)
        self.check_stays_false = set(check_stays_false)
        self.undo_fail = set(undo_fail)
        self.calls: List[Tuple[str, str, str]] = []

    @staticmethod
    def _n(text: str) -> int:
        return int(text.rsplit("-", 1)[1])

    def check(self, as_: str, text: str) -> bool:
        self.calls.append(("check", as_, text))
        n = self._n(text)
        return n in self.done and n not in self.check_stays_false

    def run(self, as_: str, text: str, on_line: Callable[[str], None]) -> int:
        self.calls.append(("run", as_, text))
        n = self._n(text)
        if text.startswith("undo-"):
            on_line(f"undoing {n}")
            if n in self.undo_fail:
                return 3
            self.done.discard(n)
            return 0
        if n in self.interrupt:
            on_line("working...")
            raise KeyboardInterrupt
        if n in self.fail:
            code, lines = self.fail[n]
            for line in lines:
                on_line(line)
            return code
        on_line(f"ran {n}")
        self.done.add(n)
        return 0

    def texts(self, kind: str) -> List[str]:
        return [t for k, _, t in self.calls if k == kind]


def plan_of(n: int) -> Plan:
    steps = tuple(
        Step(id=f"demo/s{i}", recipe="demo", title=f"Step {i}", as_="root" if i % 2 else "user",
             kind="shell", check=f"check-{i}", run=f"run-{i}", undo=f"undo-{i}")
        for i in range(1, n + 1))
    return Plan(make_choices(), Target("root", 0, 0, "root", "/root"),
                Recommendation("configure", ("test",)), steps)


@pytest.fixture
def record(tmp_path):
    rec = Record.new(plan_of(5), facts("debian12", ROOT), path=tmp_path / "run.toml")
    rec.save()
    return rec


def on_disk(rec: Record) -> Record:
    return Record.load(rec.path)


def statuses(rec: Record) -> List[str]:
    return [s.outcome.status for s in rec.steps]


def test_checks_that_pass_skip_every_step(record):
    runner = FakeRunner(done=[1, 2, 3, 4, 5])
    events: list = []
    assert apply_record(record, runner, events.append) == "done"
    assert runner.texts("run") == []
    back = on_disk(record)
    assert back.data["status"] == "done"
    assert statuses(back) == ["skipped"] * 5
    assert [e.status for e in events if isinstance(e, StepFinished)] == ["skipped"] * 5
    assert isinstance(events[-1], RunFinished) and events[-1].status == "done"


class AheadRunner(FakeRunner):
    """A runner whose checks may run side by side before anything runs, and whose runs
    change what later checks see: running step 1 also does step 2; running step 3 takes
    step 4 back."""
    checks_ahead = 2

    def run(self, as_: str, text: str, on_line: Callable[[str], None]) -> int:
        code = super().run(as_, text, on_line)
        n = self._n(text)
        if n == 1:
            self.done.add(2)
        if n == 3:
            self.done.discard(4)
        return code


def test_checks_made_ahead_stand_only_until_a_step_runs(record):
    runner = AheadRunner(done=[4, 5])
    assert apply_record(record, runner, lambda e: None) == "done"
    # every check ran before step 1 did; after it ran, 2..5 were checked again: step 2 is
    # found done (its early check said no), step 4 is run (its early check said yes)
    assert sorted(runner.texts("check")[:5]) == [f"check-{i}" for i in range(1, 6)]
    assert runner.texts("run") == ["run-1", "run-3", "run-4"]
    assert statuses(on_disk(record)) == ["done", "skipped", "done", "done", "skipped"]


def test_checks_made_ahead_skip_everything_on_a_configured_machine(record):
    runner = AheadRunner(done=[1, 2, 3, 4, 5])
    assert apply_record(record, runner, lambda e: None) == "done"
    assert sorted(runner.texts("check")) == [f"check-{i}" for i in range(1, 6)]  # once each
    assert runner.texts("run") == []
    assert statuses(on_disk(record)) == ["skipped"] * 5


def test_all_steps_run_in_order(record):
    runner = FakeRunner(done=[2])
    events: list = []
    assert apply_record(record, runner, events.append) == "done"
    assert runner.texts("run") == ["run-1", "run-3", "run-4", "run-5"]
    # every run is checked before (skip?) and after (did it work?)
    assert runner.texts("check").count("check-1") == 2
    assert runner.texts("check").count("check-2") == 1
    assert [c[1] for c in runner.calls if c[2] == "run-1"] == ["root"]
    assert [c[1] for c in runner.calls if c[2] == "run-4"] == ["user"]
    back = on_disk(record)
    assert statuses(back) == ["done", "skipped", "done", "done", "done"]
    assert all(s.outcome.exit_code == 0 and s.outcome.ended for s in back.steps)
    started = [e.index for e in events if isinstance(e, StepStarted)]
    assert started == [0, 1, 2, 3, 4]
    assert StepOutput(0, "ran 1") in events
    log = record.log_path.read_text()
    assert "ran 1" in log and "ran 5" in log and "already done" in log


def test_an_unreachable_mirror_is_diagnosed_as_apts_not_as_the_instances_names(record):
    """apt's "Could not resolve 'mirror.invalid'" also fits the job signature for instance
    names that do not resolve ("add them to /etc/hosts"): a step's own signatures come first."""
    from pathlib import Path

    log = (Path(__file__).parent / "fixtures" / "logs" / "mirror-unreachable.log").read_text()
    lines = [*log.splitlines(), "ssh: Could not resolve hostname node2: Name or service not known"]
    runner = FakeRunner(fail={1: (1, lines)})
    events: list = []
    assert apply_record(record, runner, events.append) == "failed"
    (fin,) = [e for e in events if isinstance(e, StepFinished) and e.status == "failed"]
    assert [d.id for d in fin.diagnoses] == ["mirror-unreachable"]
    assert "mirror.invalid" in fin.diagnoses[0].line


def test_a_failing_step_stops_the_run_with_a_diagnosis(record):
    runner = FakeRunner(done=[1], fail={3: (100, ["Reading package lists...", APT_LOCK])})
    events: list = []
    assert apply_record(record, runner, events.append) == "failed"
    assert "run-4" not in runner.texts("run") and "run-5" not in runner.texts("run")
    assert "check-4" not in runner.texts("check")
    back = on_disk(record)
    assert back.data["status"] == "failed"
    assert statuses(back) == ["skipped", "done", "failed", "pending", "pending"]
    failed = back.steps[2]
    assert failed.outcome.exit_code == 100
    assert "Another package manager" in failed.outcome.diagnosis
    assert "dpkg --configure -a" in failed.outcome.diagnosis
    (fin,) = [e for e in events if isinstance(e, StepFinished) and e.status == "failed"]
    assert fin.exit_code == 100 and [d.id for d in fin.diagnoses] == ["apt-lock"]
    assert fin.diagnoses[0].line == APT_LOCK
    assert events[-1] == RunFinished("failed", str(record.path))
    assert APT_LOCK in record.log_path.read_text()


def test_a_step_whose_check_still_fails_after_running_fails(record):
    runner = FakeRunner(check_stays_false=[2])
    assert apply_record(record, runner, lambda e: None) == "failed"
    back = on_disk(record)
    assert statuses(back) == ["done", "failed", "pending", "pending", "pending"]
    assert back.steps[1].outcome.exit_code == 1
    assert "its check still fails" in record.log_path.read_text()


def test_apply_again_resumes_at_the_failed_step(record):
    runner = FakeRunner(fail={2: (1, ["boom"])})
    assert apply_record(record, runner, lambda e: None) == "failed"
    runner.fail.clear()
    again = on_disk(record)
    before = len(runner.calls)
    assert apply_record(again, runner, lambda e: None) == "done"
    later = [t for _, _, t in runner.calls[before:]]
    assert "check-1" not in later and "run-1" not in later
    assert "run-2" in later
    assert statuses(on_disk(record)) == ["done"] * 5


def test_keyboard_interrupt_is_recorded(record):
    runner = FakeRunner(interrupt=[3])
    events: list = []
    assert apply_record(record, runner, events.append) == "interrupted"
    back = on_disk(record)
    assert back.data["status"] == "interrupted"
    assert statuses(back) == ["done", "done", "interrupted", "pending", "pending"]
    assert back.steps[2].outcome.exit_code == 130
    assert events[-1] == RunFinished("interrupted", str(record.path))


def test_keyboard_interrupt_in_a_check_is_recorded(record):
    class CheckInterrupted(FakeRunner):
        def check(self, as_, text):
            if text == "check-2":
                raise KeyboardInterrupt
            return super().check(as_, text)

    assert apply_record(record, CheckInterrupted(), lambda e: None) == "interrupted"
    back = on_disk(record)
    assert back.data["status"] == "interrupted"
    # Stopped in its check, step 2 ran nothing: it stays pending, and undo leaves it alone.
    assert statuses(back)[:3] == ["done", "pending", "pending"]


def test_undo_runs_only_done_steps_newest_first(record):
    runner = FakeRunner(done=[2, 4])
    assert apply_record(record, runner, lambda e: None) == "done"
    assert statuses(on_disk(record)) == ["done", "skipped", "done", "skipped", "done"]
    events: list = []
    back = on_disk(record)
    assert undo_record(back, runner, events.append) == "undone"
    assert runner.texts("run")[-3:] == ["undo-5", "undo-3", "undo-1"]
    assert "undo-2" not in runner.texts("run") and "undo-4" not in runner.texts("run")
    again = on_disk(record)
    assert again.data["status"] == "undone"
    assert statuses(again) == ["undone", "skipped", "undone", "skipped", "undone"]
    assert [e.index for e in events if isinstance(e, StepStarted)] == [4, 2, 0]
    assert all(e.undo for e in events if isinstance(e, StepStarted))
    assert [c[1] for c in runner.calls if c[2] == "undo-1"] == ["root"]


def test_undo_after_a_failure_leaves_pending_steps_alone(record):
    """Pending steps never ran: nothing to take back. The failed step may have changed
    something before it failed, so its undo runs too (after the done ones newer than it)."""
    runner = FakeRunner(fail={3: (1, ["boom"])})
    apply_record(record, runner, lambda e: None)
    back = on_disk(record)
    assert undo_record(back, runner, lambda e: None) == "undone"
    undos = [t for t in runner.texts("run") if t.startswith("undo-")]
    assert undos == ["undo-3", "undo-2", "undo-1"]
    assert statuses(on_disk(record)) == ["undone", "undone", "undone", "pending", "pending"]


def test_skipping_a_failed_step_goes_on_and_undo_still_covers_it(record):
    """The wizard's Skip: the failed step is "user-skipped" (not "skipped", which says its
    check passed); the run goes on after it; undo takes it back with the rest."""
    runner = FakeRunner(fail={3: (1, ["boom"])})
    assert apply_record(record, runner, lambda e: None) == "failed"
    assert skip_stopped_step(record) == 2
    assert skip_stopped_step(record) is None  # nothing else stopped
    assert apply_record(record, runner, lambda e: None) == "done"
    assert runner.texts("run").count("run-3") == 1
    assert statuses(on_disk(record)) == ["done", "done", "user-skipped", "done", "done"]
    assert "skipped by the user: demo/s3" in record.log_path.read_text()
    assert undo_record(on_disk(record), runner, lambda e: None) == "undone"
    assert [t for t in runner.texts("run") if t.startswith("undo-")] == [
        "undo-5", "undo-4", "undo-3", "undo-2", "undo-1"]


def test_undo_skips_steps_without_undo_text(tmp_path):
    plan = plan_of(3)
    rec = Record.new(plan, facts("debian12", ROOT), path=tmp_path / "r.toml")
    kept = rec.steps[1]
    rec.steps[1] = replace(kept, step=replace(kept.step, undo="", note="kept on purpose"))
    rec.save()
    runner = FakeRunner()
    apply_record(rec, runner, lambda e: None)
    events: list = []
    assert undo_record(on_disk(rec), runner, events.append) == "undone"
    assert [t for t in runner.texts("run") if t.startswith("undo-")] == ["undo-3", "undo-1"]
    assert StepOutput(1, "nothing to undo: kept on purpose") in events


def test_undo_failure_is_recorded(record):
    runner = FakeRunner(undo_fail=[2])
    apply_record(record, runner, lambda e: None)
    assert undo_record(on_disk(record), runner, lambda e: None) == "undo-failed"
    back = on_disk(record)
    assert back.data["status"] == "undo-failed"
    assert statuses(back) == ["undone", "undo-failed", "undone", "undone", "undone"]
    # a second undo retries only what is left
    runner.undo_fail.clear()
    before = len(runner.calls)
    assert undo_record(back, runner, lambda e: None) == "undone"
    assert [t for _, _, t in runner.calls[before:]] == ["undo-2"]


# --- ShellRunner ------------------------------------------------------------------------------

BASH = ["bash", "-euo", "pipefail", "-c", "echo hi"]


@pytest.fixture
def as_alice(monkeypatch):
    monkeypatch.setattr(apply_mod, "_current_user", lambda: "alice")


def test_root_steps_use_sudo_n_when_not_root(as_alice):
    r = ShellRunner("alice", uid=1000, library="")
    assert r.argv("root", "echo hi") == ["sudo", "-n", "--", *BASH]
    assert r.argv("root", "echo hi", strict=False) == ["sudo", "-n", "--", "bash", "-c", "echo hi"]


def test_every_step_runs_after_the_operations_library(as_alice):
    """By default the shipped library comes first, then the step's own text; a record's
    undo passes the library that record kept."""
    from hpcwizard import ops

    text = ShellRunner("bob", uid=0).argv("root", "hw_sshd --port 2222")[-1]
    assert text == ops.runnable("hw_sshd --port 2222")
    assert text.startswith(ops.library()) and text.endswith("\nhw_sshd --port 2222")
    kept = ShellRunner("bob", uid=0, library="# an older library\n").argv("root", "true")[-1]
    assert kept.startswith("# an older library\n") and ops.library() not in kept


def test_root_steps_run_directly_as_root(as_alice):
    assert ShellRunner("bob", uid=0, library="").argv("root", "echo hi") == BASH


def test_user_steps_of_another_user_use_runuser_when_root(as_alice):
    assert ShellRunner("bob", uid=0, library="").argv("user", "echo hi") == ["runuser", "-u", "bob", "--", *BASH]


def test_user_steps_of_another_user_use_sudo_when_not_root(as_alice):
    # sudo keeps our terminal's session for its credentials; the step detaches from it
    assert ShellRunner("bob", uid=1000, library="").argv("user", "echo hi") == \
        ["sudo", "-n", "-u", "bob", "--", *proc.detached(BASH)]


@pytest.mark.parametrize("target", ["alice", ""])
@pytest.mark.parametrize("uid", [0, 1000])
def test_user_steps_of_oneself_run_directly(as_alice, target, uid):
    assert ShellRunner(target, uid=uid, library="").argv("user", "echo hi") == BASH


def test_shell_runner_runs_for_real_as_oneself():
    me = pwd.getpwuid(os.geteuid()).pw_name
    runner = ShellRunner(me)
    lines: List[str] = []
    assert runner.run("user", "echo one; echo two >&2; pwd", lines.append) == 0
    assert lines == ["one", "two", "/"]
    assert runner.run("user", "echo before; false; echo after", lines.append) == 1
    assert "after" not in lines  # run texts are strict: -e stops at the failure
    assert runner.check("user", "true") and not runner.check("user", "false")
    assert not runner.check("user", "   ")
    assert runner.run("user", "read -r x || exit 7", lines.append) == 7  # stdin is /dev/null
