"""hpcwizard.proc, the one runner apply, verify and detect start programs with: the child's
locale, its session of its own (no controlling terminal), a time-out or a stop killing the
whole group, streamed lines, an interrupt."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from hpcwizard import proc


def gone(pid: int, wait: float = 5.0) -> bool:
    """pid has ended (or is a zombie waiting to be reaped), within `wait` s for a kill to land."""
    end = time.monotonic() + wait
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state == "Z":
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.05)


def test_the_locale_is_fixed_where_output_is_parsed(monkeypatch):
    monkeypatch.setenv("LC_ALL", "zh_CN.UTF-8")
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    monkeypatch.setenv("LANGUAGE", "zh_CN:en")
    env = proc.child_env(proc.PARSED, extra={"X": "1"})
    assert (env["LC_ALL"], env["LANG"], env["X"]) == ("C", "C", "1") and "LANGUAGE" not in env
    assert proc.child_env(proc.STEPS, base={"PATH": "/bin"}) == {
        "PATH": "/bin", "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}
    done = proc.capture(["sh", "-c", 'echo "$LC_ALL/$LANG/${LANGUAGE-unset}"'], 10,
                        env=proc.child_env(proc.PARSED))
    assert done.ok and done.stdout == "C/C/unset\n"


def test_capture_keeps_streams_apart_or_merged_and_feeds_stdin():
    done = proc.capture(["sh", "-c", "cat; echo err >&2; exit 3"], 10, stdin=b"in\n")
    assert (done.rc, done.stdout, done.stderr, done.ok) == (3, "in\n", "err\n", False)
    merged = proc.capture(["sh", "-c", "echo a; echo b >&2"], 10, merge=True)
    assert merged.stdout == "a\nb\n" and merged.stderr == ""
    assert proc.capture(["sh", "-c", "read -r x || exit 7"], 10).rc == 7  # stdin: /dev/null


def test_a_program_that_is_not_there_does_not_start():
    done = proc.capture(["hpcwizard-no-such-program-xyz"], 10)
    assert done.rc == proc.NOT_FOUND and done.not_started and not done.ok


def test_a_time_out_kills_the_whole_group():
    t0 = time.monotonic()
    done = proc.capture(["bash", "-c", "echo started; sleep 60 & echo $! ; wait"], 1.0)
    assert done.timed_out and not done.ok and time.monotonic() - t0 < 5
    lines = done.stdout.split()
    assert lines[0] == "started"
    assert gone(int(lines[1]))  # the backgrounded sleep, not only bash


def test_a_started_program_gets_its_time_out_from_its_start(tmp_path):
    """start() returns at once; a result() asked for after the time-out has passed waits no
    longer, and finds the program killed with its group."""
    pidfile = tmp_path / "pid"
    started = proc.start(["bash", "-c", f"sleep 60 & echo $! > {pidfile}.tmp; "
                          f"mv {pidfile}.tmp {pidfile}; wait"], 3.0)
    assert isinstance(started, proc.Started)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 3.0:  # until the time-out has passed, and the sleep started
        time.sleep(0.05)
    while not pidfile.exists():
        time.sleep(0.05)
    asked = time.monotonic()
    done = started.result()
    assert done.timed_out and not done.ok
    # LATE_GRACE (1 s), not another 3 s counted from the question
    assert time.monotonic() - asked < 2.5
    assert gone(int(pidfile.read_text()))


def test_a_program_that_ended_is_read_however_late_it_is_asked_for():
    started = proc.start(["sh", "-c", "echo done"], 0.2)
    while started._proc.poll() is None:  # it has ended
        time.sleep(0.02)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 0.3:  # and its time-out has passed
        time.sleep(0.05)
    done = started.result()
    assert not done.timed_out and done.ok and done.stdout == "done\n"


def test_kill_stops_a_started_program_and_its_group(tmp_path):
    pidfile = tmp_path / "pid"
    started = proc.start(["bash", "-c", f"sleep 60 & echo $! > {pidfile}.tmp; "
                          f"mv {pidfile}.tmp {pidfile}; wait"], 60)
    while not pidfile.exists():
        time.sleep(0.05)
    started.kill()
    assert gone(int(pidfile.read_text()))
    assert started._proc.returncode is not None  # reaped, not left a zombie


def test_start_of_a_program_that_is_not_there_is_a_finished():
    done = proc.start(["hpcwizard-no-such-program-xyz"], 10)
    assert isinstance(done, proc.Finished) and done.rc == proc.NOT_FOUND and done.not_started


def test_every_child_has_a_session_of_its_own():
    """No child has a controlling terminal (ssh cannot prompt there, nothing can push
    keystrokes into ours), and its group is its own, for a time-out's or a stop's kill."""
    code = "import os; print(os.getsid(0), os.getpgid(0), os.getpid())"
    for run in (lambda: proc.capture([sys.executable, "-c", code], 30).stdout,
                lambda: proc.start([sys.executable, "-c", code], 30).result().stdout):
        sid, pgid, pid = map(int, run().split())
        assert sid == pid == pgid != os.getsid(0)
    lines: list = []
    assert proc.stream([sys.executable, "-c", code], lines.append) == 0
    sid, pgid, pid = map(int, lines[0].split())
    assert sid == pid == pgid != os.getsid(0)


def test_sudo_keeps_our_session_and_what_it_runs_detaches(tmp_path, monkeypatch):
    """sudo's credentials are the terminal's, so sudo stays in our session (a group of its
    own); what it runs as another user goes through DETACHED: a session of its own."""
    fake = tmp_path / "sudo"  # runs what follows `--`, as we are
    fake.write_text('#!/bin/sh\nwhile [ "$1" != -- ]; do shift; done\nshift\nexec "$@"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    code = "import os; print(os.getsid(0), os.getpgid(0), os.getpid())"
    sid, pgid, pid = map(int, proc.capture(["sudo", "-n", "--", sys.executable, "-c", code],
                                           30).stdout.split())
    assert sid == os.getsid(0) and pgid == pid
    out = proc.capture(["sudo", "-n", "--", *proc.detached([sys.executable, "-c", code])], 30)
    sid, pgid, pid = map(int, out.stdout.split())
    assert sid == pgid == pid != os.getsid(0)


def test_detached_passes_an_interrupt_on_and_keeps_the_exit_status():
    assert proc.capture(proc.detached(["sh", "-c", "exit 7"]), 30).rc == 7
    children, lines, result = [], [], []
    started = threading.Event()

    def on_line(line):
        lines.append(line)
        started.set()

    worker = threading.Thread(target=lambda: result.append(proc.stream(
        proc.detached(["bash", "-c", "trap 'echo got-int; exit 130' INT; echo ready; "
                                     "while :; do sleep 0.05; done"]),
        on_line, on_start=lambda c: children.append(c) if c else None)))
    worker.start()
    assert started.wait(10)
    proc.interrupt(children[0], grace=5)  # to the wrapper's group, as sudo passes it on
    worker.join(10)
    assert not worker.is_alive() and result == [130] and lines == ["ready", "got-int"]


def test_a_program_run_as_another_user_gets_none_of_our_start_up_variables(monkeypatch):
    monkeypatch.setenv("BASH_ENV", "/home/bob/.bashrc")
    monkeypatch.setenv("ENV", "/home/bob/.profile")
    assert "BASH_ENV" in proc.child_env(proc.PARSED)  # ours: root's own choice
    other = proc.child_env(proc.PARSED, other_user=True)
    assert not set(proc.START_UP_FILES) & set(other) and other["LC_ALL"] == "C"


def test_stop_kills_what_runs_and_refuses_what_comes():
    running = proc.Running()
    results = []
    worker = threading.Thread(target=lambda: results.append(proc.capture(
        ["bash", "-c", "sleep 60 & wait"], 60, running=running)))
    worker.start()
    end = time.monotonic() + 10
    while not running.procs() and time.monotonic() < end:
        time.sleep(0.01)
    (child,) = running.procs()
    running.stop()
    worker.join(10)
    assert not worker.is_alive() and results[0].rc == -9 and not results[0].timed_out
    assert gone(child.pid)
    later = proc.capture(["true"], 10, running=running)
    assert later.not_started == proc.STOPPED and later.rc == 130 and not running.procs()


def test_stream_gives_lines_as_they_come_and_the_status():
    lines = []
    seen = []
    code = proc.stream(["sh", "-c", "echo one; echo two >&2; exit 4"], lines.append,
                       on_start=seen.append)
    assert code == 4 and lines == ["one", "two"]
    assert isinstance(seen[0], subprocess.Popen) and seen[-1] is None


def test_stream_of_a_program_that_is_not_there_says_so_in_a_line():
    lines = []
    assert proc.stream(["hpcwizard-no-such-program-xyz"], lines.append) == proc.NOT_FOUND
    assert lines and lines[0].startswith("hpcwizard-no-such-program-xyz: ")


def test_interrupt_sends_sigint_to_the_group_then_the_stream_ends():
    """The TUI's Ctrl+C: SIGINT to the step's group; a trap in the step sees it."""
    started = threading.Event()
    children = []

    def on_start(child):
        if child is not None:
            children.append(child)

    lines = []

    def on_line(line):
        lines.append(line)
        started.set()

    result = []
    worker = threading.Thread(target=lambda: result.append(proc.stream(
        ["bash", "-c", "trap 'echo got-int; exit 130' INT; echo ready; "
                       "while :; do sleep 0.05; done"], on_line, on_start=on_start)))
    worker.start()
    assert started.wait(10)
    proc.interrupt(children[0], grace=5)
    worker.join(10)
    assert not worker.is_alive() and result == [130] and lines == ["ready", "got-int"]


def test_a_step_that_ignores_sigint_and_sigterm_is_killed_after_two_graces():
    """Ctrl+C never hangs: a step whose traps swallow SIGINT and SIGTERM (a cleanup that
    loops) gets SIGKILL once the second grace is over, and the interrupt goes on."""
    lines = []

    def on_line(line):
        lines.append(line)
        if line == "ready":
            raise KeyboardInterrupt  # what Ctrl+C raises in the reading thread

    with pytest.raises(KeyboardInterrupt):
        proc.stream(["bash", "-c", "trap 'echo got-int' INT; trap 'echo got-term' TERM; "
                                   "echo ready; while :; do sleep 0.05; done"],
                    on_line, grace=0.5)
    # stream returned (before, it waited for ever after SIGTERM) and the group is gone
    out = subprocess.run(["pgrep", "-f", "got-int"], capture_output=True, text=True).stdout
    assert out.strip() == ""
