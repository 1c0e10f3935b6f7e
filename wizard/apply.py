"""Do it: for each step, run its check and skip it when the system already matches, else run
exactly its rendered text, streaming output as events; stop at the first failure with a
diagnosis. Undo runs the recorded undo texts of the done steps, newest first.

Events go to a sink (a callable): the CLI prints them, the TUI turns them into messages.
A Runner runs shell text as the right user; tests pass a fake one.
"""
from __future__ import annotations

import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Protocol, Sequence, Tuple

from . import ops, proc
from .detect.user import fallback_name
from .diagnose import Diagnosis, diagnose_step
from .record import Record, now
from .step import RecordStep, Step

CHECK_TIMEOUT = 60.0
# The step statuses undo takes back: every step whose text may have run, partly or whole.
# "running" is a step a killed run (SIGKILL, power loss) left: it may be partly done.
UNDO_STATUSES = ("done", "failed", "interrupted", "user-skipped", "undo-failed", "running")


# --- events ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class StepStarted:
    index: int
    total: int
    id: str
    title: str
    undo: bool = False


@dataclass(frozen=True)
class StepOutput:
    index: int
    line: str


@dataclass(frozen=True)
class StepFinished:
    index: int
    id: str
    status: str  # done | skipped | failed | interrupted | undone | undo-failed
    exit_code: int
    seconds: float
    diagnoses: Sequence[Diagnosis] = field(default_factory=tuple)


@dataclass(frozen=True)
class RunFinished:
    status: str  # done | failed | interrupted | undone | undo-failed
    record: str
    # (path, status) of earlier applies' records that did not finish (record.
    # unfinished_records): what they changed is theirs to undo, not this record's
    earlier: Tuple[Tuple[str, str], ...] = ()


Sink = Callable[[object], None]


# --- running shell text as the right user -----------------------------------------------------

class Runner(Protocol):
    def via_sudo(self, as_: str) -> bool: ...  # the session asks for sudo once, before a run

    def check(self, as_: str, text: str) -> bool: ...

    def run(self, as_: str, text: str, on_line: Callable[[str], None]) -> int: ...


class ShellRunner:
    """Runs step text with bash. Root steps run directly as root or through 'sudo -n' (never
    a password prompt mid-run); user steps run as the target user (runuser when root).
    Every one with stdin /dev/null and without our terminal (hpcwizard.proc: a session of
    its own; through sudo, proc.DETACHED): no step, and nothing the job user's files make it
    run, has our terminal."""

    # Checks only read, so before anything has run they may run side by side: a re-apply
    # on a configured machine is its checks alone. Runners without this run them in order.
    checks_ahead = min(4, os.cpu_count() or 1)

    def __init__(self, target_user: str, uid: Optional[int] = None,
                 library: Optional[str] = None):
        self.target_user = target_user
        self.uid = os.geteuid() if uid is None else uid
        self.current = _current_user()
        self.child: Optional[subprocess.Popen] = None
        # The operations every step's text may call (recipes/ops.sh), run before the text: the
        # shipped library for a new run, the one a record kept for its undo ("" for a record
        # made before there was one: its texts hold their own shell).
        self.library = ops.library() if library is None else library

    def argv(self, as_: str, text: str, strict: bool = True) -> List[str]:
        if self.library:
            text = ops.runnable(text, self.library)
        bash = ["bash", "-euo", "pipefail", "-c", text] if strict else ["bash", "-c", text]
        if as_ == "root":
            return bash if self.uid == 0 else ["sudo", "-n", "--", *bash]
        if not self.other_user(as_):
            return bash
        if self.uid == 0:
            return ["runuser", "-u", self.target_user, "--", *bash]
        return ["sudo", "-n", "-u", self.target_user, "--", *proc.detached(bash)]

    def other_user(self, as_: str) -> bool:
        """Whether a step run as as_ runs as a user other than root and us: the job's user,
        whose files (~/.ssh/config's Match exec, start-up files) decide what runs."""
        return as_ != "root" and self.target_user not in ("", self.current)

    def via_sudo(self, as_: str) -> bool:
        """Whether a step run as as_ goes through sudo (argv's choice), for the refusals made
        before a run: sudo cannot serve a uid without a passwd entry."""
        if as_ == "root":
            return self.uid != 0
        return self.other_user(as_) and self.uid != 0

    def check(self, as_: str, text: str) -> bool:
        """Checks only read. A root step's check is tried as the current user first: when
        it passes, the step needs no root here (a user without sudo can still skip it)."""
        if not text.strip():
            return False
        if as_ == "root" and self.uid != 0 and self._passes(
                ["bash", "-c", ops.runnable(text, self.library) if self.library else text],
                as_):
            return True
        return self._passes(self.argv(as_, text, strict=False), as_)

    def capture(self, as_: str, text: str) -> "tuple[int, str, str]":
        """Run read-only text (a step's diff) with pipefail; its status, output and errors.
        A root step's is tried as the current user first: reading a file seldom needs root."""
        text = f"set -o pipefail\n{text}"
        tries = [self.argv(as_, text, strict=False)]
        if as_ == "root" and self.uid != 0:
            tries.insert(0, ["bash", "-c", ops.runnable(text, self.library) if self.library else text])
        result = (1, "", "")
        for argv in tries:
            done = proc.capture(argv, CHECK_TIMEOUT, env=self.env(as_), cwd="/")
            if done.not_started or done.timed_out:
                result = (1, "", done.not_started or
                          f"{argv[0]}: did not finish within {CHECK_TIMEOUT:g} s")
                continue
            result = (done.rc, done.stdout, done.stderr)
            if done.rc == 0:
                break
        return result

    def env(self, as_: str) -> dict:
        # tools' messages in English: the diagnoses match them; apt and dpkg never ask
        return proc.child_env(proc.STEPS, extra={"DEBIAN_FRONTEND": "noninteractive"},
                              other_user=self.other_user(as_))

    def _passes(self, argv: List[str], as_: str) -> bool:
        return proc.capture(argv, CHECK_TIMEOUT, env=self.env(as_), cwd="/").ok

    def run(self, as_: str, text: str, on_line: Callable[[str], None]) -> int:
        # A group of its own, no terminal (hpcwizard.proc), so that an interrupt reaches
        # all of the step (bash and what bash started, e.g. apt-get and dpkg), whatever
        # signalled us: SIGINT, then SIGTERM.
        return proc.stream(self.argv(as_, text), on_line, env=self.env(as_), cwd="/",
                           on_start=self._started)

    def _started(self, child: Optional[subprocess.Popen]) -> None:
        self.child = child


def interrupt_step(runner: object, grace: float = 5.0) -> None:
    """Stop the step a runner is running, as Ctrl-C in a terminal would: SIGINT to the
    step's whole process group, SIGTERM after grace seconds. For front ends where Ctrl-C is
    a key, not a signal (the TUI)."""
    proc.interrupt(getattr(runner, "child", None), grace)


def _current_user() -> str:
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        # No passwd entry (docker run --user 12345): detection names this user from the
        # environment, and so the plan's target "this user" has that name. Its steps must run
        # directly: `sudo -u NAME` fails ("you do not exist in the passwd database").
        return fallback_name(os.geteuid())


# --- apply ----------------------------------------------------------------------------------

def _tail(lines: List[str], n: int = 200) -> List[str]:
    return lines[-n:]


def skip_stopped_step(record: Record) -> Optional[int]:
    """After a failure or a stop, the user goes on without that step: it becomes
    "user-skipped" (not "skipped", which says its check passed), and undo still takes back
    what it may have done. Returns its index, or None when no step had stopped."""
    for i, step in enumerate(record.steps):
        if step.outcome.status in ("failed", "interrupted"):
            record.update_step(i, status="user-skipped")
            record.log(f"-- skipped by the user: {step.step.id}")
            return i
    return None


def apply_record(record: Record, runner: Runner, sink: Sink) -> str:
    """Apply the steps in record (pending ones), updating it after each. Returns the final
    status: done | failed | interrupted."""
    steps = record.steps
    total = len(steps)
    record.set_status("running")
    record.log(f"== hpcwizard apply {now()} ({total} steps)")
    ahead = _ChecksAhead(runner, steps)
    try:
        return _apply_steps(record, runner, sink, ahead)
    finally:
        ahead.close()


class _ChecksAhead:
    """The pending steps' checks, started together before any step runs. A result stands
    only while nothing has run since: once a step ran, every later check runs again."""

    def __init__(self, runner: Runner, steps: List[RecordStep]) -> None:
        workers = getattr(runner, "checks_ahead", 0)
        self.pool: Optional[ThreadPoolExecutor] = None
        self.futures: dict = {}
        self.runner = runner
        self.valid = True
        todo = [i for i, s in enumerate(steps)
                if s.outcome.status not in ("done", "skipped", "user-skipped")]
        if workers > 1 and len(todo) > 1:
            self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="hpcwizard-check")
            self.futures = {i: self.pool.submit(runner.check, steps[i].step.as_,
                                                steps[i].step.check) for i in todo}

    def passes(self, i: int, step: Step) -> bool:
        future = self.futures.pop(i, None)
        if future is not None and self.valid:
            return future.result()
        return self.runner.check(step.as_, step.check)

    def something_ran(self) -> None:
        self.valid = False

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


def _apply_steps(record: Record, runner: Runner, sink: Sink, ahead: _ChecksAhead) -> str:
    total = len(record.steps)
    for i, recorded in enumerate(record.steps):
        if recorded.outcome.status in ("done", "skipped", "user-skipped"):
            continue
        step = recorded.step
        sink(StepStarted(i, total, step.id, step.title))
        record.log(f"\n== [{i + 1}/{total}] {step.id}: {step.title}")
        started = time.monotonic()
        ran = False
        try:
            if ahead.passes(i, step):
                record.log("already done (its check passed): skipped")
                _finish(record, sink, i, step, "skipped", 0, started)
                continue
            # "running" is saved before the step's text starts: a run killed now leaves a
            # record saying the step may be partly done, and undo takes it back.
            record.update_step(i, status="running", started=now())
            ran = True
            ahead.something_ran()
            output: List[str] = []

            def on_line(line: str) -> None:
                output.append(line)
                record.log(line)
                sink(StepOutput(i, line))

            code = runner.run(step.as_, step.run, on_line)
            if code == 0 and not runner.check(step.as_, step.check):
                code = 1
                on_line("hpcwizard: the step ran, but its check still fails")
        except KeyboardInterrupt:
            # Interrupted during its check, the step did nothing: it stays pending (undo
            # must not take back what it never did, e.g. remove a key that was there).
            _finish(record, sink, i, step, "interrupted" if ran else "pending", 130, started)
            record.set_status("interrupted")
            sink(RunFinished("interrupted", str(record.path)))
            return "interrupted"
        if code != 0:
            found = diagnose_step(_tail(output))
            _finish(record, sink, i, step, "failed", code, started, found)
            record.set_status("failed")
            sink(RunFinished("failed", str(record.path)))
            return "failed"
        _finish(record, sink, i, step, "done", 0, started)
    record.set_status("done")
    sink(RunFinished("done", str(record.path)))
    return "done"


def _finish(record: Record, sink: Sink, i: int, step: Step, status: str, code: int,
            started: float, found: Sequence[Diagnosis] = ()) -> None:
    seconds = round(time.monotonic() - started, 3)
    diagnosis = " | ".join(f"{d.cause} {d.fix}" for d in found)
    # A step found done changed nothing: should a kill lose this update, the record says
    # "pending", which is as true (undo leaves it alone, a re-run checks it again).
    record.update_step(i, save=status != "skipped", status=status, exit_code=code, ended=now(),
                       seconds=seconds, diagnosis=diagnosis)
    record.log(f"-- {status} (exit {code}, {seconds:.1f}s)")
    sink(StepFinished(i, step.id, status, code, seconds, tuple(found)))


def undo_record(record: Record, runner: Runner, sink: Sink) -> str:
    """Undo the done steps, newest first. Steps without undo text stay as they are (their
    note says why). Returns undone | undo-failed."""
    total = len(record.steps)
    todo = [i for i in range(total - 1, -1, -1)
            if record.steps[i].outcome.status in UNDO_STATUSES]
    record.log(f"\n== hpcwizard undo {now()} ({len(todo)} steps)")
    result = "undone"
    for i in todo:
        step = record.steps[i].step
        sink(StepStarted(i, total, step.id, step.title, undo=True))
        started = time.monotonic()
        if not step.undo.strip():
            record.log(f"== {step.id}: nothing to undo ({step.note})")
            sink(StepOutput(i, f"nothing to undo: {step.note}"))
            sink(StepFinished(i, step.id, "done", 0, 0.0))
            continue
        record.log(f"== undo {step.id}")

        def on_line(line: str) -> None:
            record.log(line)
            sink(StepOutput(i, line))

        try:
            code = runner.run(step.as_, step.undo, on_line)
        except KeyboardInterrupt:
            record.set_status("interrupted")
            sink(RunFinished("interrupted", str(record.path)))
            return "interrupted"
        status = "undone" if code == 0 else "undo-failed"
        if code != 0:
            result = "undo-failed"
        record.update_step(i, status=status, ended=now())
        sink(StepFinished(i, step.id, status, code, round(time.monotonic() - started, 3)))
    record.set_status(result)
    sink(RunFinished(result, str(record.path)))
    return result
