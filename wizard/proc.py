"""Run a program: the one way apply, verify and detect start one.

    env = child_env(PARSED)                      # LC_ALL=C: messages we parse are English
    done = capture(["ssh", "-V"], 5.0, env=env)  # a Finished: rc, stdout, stderr, timed_out
    later = start(["ssh", "-V"], 5.0, env=env)   # a Started (.result() waits) or a Finished
    code = stream(argv, on_line, env=child_env(STEPS), keep_terminal=True)

Every child gets stdin from /dev/null (or the bytes given), so nothing can wait for a
keyboard, and a process group of its own, so that a time-out, a stop or an interrupt reaches
all of it (a shell's `sleep`, apt-get's dpkg), not only the program we started:

- by default a new session (no controlling terminal): ssh cannot open /dev/tty to ask for a
  password, and the terminal's Ctrl+C does not reach it (the caller decides what it does);
- keep_terminal=True (apply's steps and checks): a process group in our session, because
  sudo's cached credentials (`sudo -v` once, then `sudo -n` per step) belong to the terminal.

Output is captured through pipes, never polled for: a pipe's end of file wakes the wait (with
a time-out and no pipes, subprocess sleeps up to 50 ms between polls, a third of a quick
check). A time-out kills the whole group; so does a stop() of the Running it is in.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple


# The locales children get. Where we parse output or match it against the diagnoses' table,
# messages must be English whatever the user's language: LC_ALL wins over every LC_* and
# LANG, and LANGUAGE (which GNU gettext reads before LC_ALL unless the locale is plain C) goes.
PARSED = "C"
# apply's steps: English as above, and UTF-8, so that tools print file names and contents
# that are not ASCII as they are.
STEPS = "C.UTF-8"

NOT_FOUND = 127  # the shell's codes for a program that could not be started
CANNOT_RUN = 126
STOPPED = "stopped"  # Finished.not_started when the Running was stopped first


def child_env(locale: str, base: Optional[Mapping[str, str]] = None,
              extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """base (default: our environment) with extra over it and the locale fixed."""
    env = dict(os.environ if base is None else base)
    env.update(extra or {})
    env["LC_ALL"] = locale
    env["LANG"] = locale
    env.pop("LANGUAGE", None)
    return env


@dataclass(frozen=True)
class Finished:
    """A program that ran to its end (or its time-out), with its output."""
    argv: Tuple[str, ...]
    rc: int  # its exit status; -N: killed by signal N; 127/126: it did not start
    stdout: str  # stdout and stderr interleaved, when merged
    stderr: str  # "" when merged
    timed_out: bool = False  # killed, with its group, at the time-out
    not_started: str = ""  # why it did not start: STOPPED, or the system's error

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out and not self.not_started


class Running:
    """The children of one owner (a verification, a run of steps), for stop(): it kills each
    one's group and refuses to start any more. Safe to use from several threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: Dict[int, subprocess.Popen] = {}
        self.stopped = False

    def procs(self) -> List[subprocess.Popen]:
        with self._lock:
            return list(self._procs.values())

    def stop(self) -> None:
        with self._lock:
            self.stopped = True
            procs = list(self._procs.values())
        for proc in procs:
            signal_group(proc, signal.SIGKILL, if_running=False)

    def _add(self, proc: subprocess.Popen) -> bool:
        """False when stop() came first: the caller kills what it started."""
        with self._lock:
            self._procs[proc.pid] = proc
            return not self.stopped

    def _remove(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._procs.pop(proc.pid, None)


def _group(keep_terminal: bool) -> dict:
    if not keep_terminal:
        return {"start_new_session": True}
    if sys.version_info >= (3, 11):
        return {"process_group": 0}
    return {"preexec_fn": os.setpgrp}  # pragma: no cover (Python < 3.11)


def signal_group(proc: subprocess.Popen, signum: int, if_running: bool = True) -> None:
    """signum to proc's whole process group; to proc alone when the group is not ours to
    signal (sudo's). if_running: not when proc itself has ended already (an interrupt of a
    finished step); a kill at a time-out also reaches what it left running in the group."""
    if if_running and proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signum)
    except OSError:
        try:
            proc.send_signal(signum)
        except OSError:
            pass


def _reap(proc: subprocess.Popen, timeout: float = 1.0) -> Tuple[bytes, bytes]:
    """What is left in the pipes of a killed proc, and its exit status collected. A
    grandchild that left the group may hold the pipes open: they are closed, not waited for."""
    try:
        out, err = proc.communicate(timeout=timeout)
        return out or b"", err or b""
    except (subprocess.TimeoutExpired, ValueError):
        for stream in (proc.stdout, proc.stderr, proc.stdin):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        proc.wait()
        return b"", b""


def _text(data: Optional[bytes]) -> str:
    return (data or b"").decode("utf-8", "replace")


def _start(argv: Tuple[str, ...], env: Optional[Mapping[str, str]], cwd: Optional[str],
           keep_terminal: bool, stdin: Optional[bytes], merge: bool,
           running: Optional[Running]) -> "subprocess.Popen | Finished":
    if running is not None and running.stopped:
        return Finished(argv, 130, "", "", not_started=STOPPED)
    try:
        proc = subprocess.Popen(
            argv, cwd=cwd, env=None if env is None else dict(env),
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merge else subprocess.PIPE,
            **_group(keep_terminal))
    except OSError as exc:
        code = NOT_FOUND if isinstance(exc, FileNotFoundError) else CANNOT_RUN
        return Finished(argv, code, "", "", not_started=exc.strerror or str(exc))
    if running is not None and not running._add(proc):
        signal_group(proc, signal.SIGKILL, if_running=False)
        _reap(proc)
        running._remove(proc)
        return Finished(argv, 130, "", "", not_started=STOPPED)
    return proc


# What a program asked for after its time-out has passed still gets: one that has ended is
# read, not called hung, and one that stopped on a full pipe (nobody read it yet) can finish.
LATE_GRACE = 1.0


class Started:
    """A program start() began, to be waited for later: result() gives its Finished, with
    the time-out counted from the start, so that a program left running while the caller
    did other work gets no longer than one run at once would have (and LATE_GRACE more
    when it is asked for late)."""

    def __init__(self, proc: subprocess.Popen, argv: Tuple[str, ...], timeout: float,
                 stdin: Optional[bytes], running: Optional[Running]) -> None:
        self.argv = argv
        self._proc = proc
        self._stdin = stdin
        self._running = running
        self._timeout = timeout
        self._deadline = time.monotonic() + timeout

    def result(self) -> Finished:
        """Wait for the end or the time-out, then the output. On a time-out, or when the
        caller is interrupted (Ctrl+C: it did not reach a child in a group of its own), the
        group is killed; the interrupt goes on."""
        proc, argv = self._proc, self.argv
        try:
            try:
                out, err = proc.communicate(self._stdin, timeout=max(
                    self._deadline - time.monotonic(), min(LATE_GRACE, self._timeout)))
            except subprocess.TimeoutExpired:
                signal_group(proc, signal.SIGKILL, if_running=False)
                out, err = _reap(proc)
                return Finished(argv, proc.returncode, _text(out), _text(err), timed_out=True)
            except BaseException:
                signal_group(proc, signal.SIGKILL, if_running=False)
                _reap(proc)
                raise
            return Finished(argv, proc.returncode, _text(out), _text(err))
        finally:
            if self._running is not None:
                self._running._remove(proc)

    def kill(self) -> None:
        """A program nobody will ask for after all: its group is killed and it is reaped."""
        signal_group(self._proc, signal.SIGKILL, if_running=False)
        _reap(self._proc)
        if self._running is not None:
            self._running._remove(self._proc)


def start(argv: Sequence[str], timeout: float, *, env: Optional[Mapping[str, str]] = None,
          stdin: Optional[bytes] = None, merge: bool = False, cwd: Optional[str] = None,
          keep_terminal: bool = False, running: Optional[Running] = None
          ) -> "Started | Finished":
    """Start argv now and return at once: a Started to wait on, or the Finished of a program
    that could not start."""
    argv = tuple(argv)
    proc = _start(argv, env, cwd, keep_terminal, stdin, merge, running)
    if isinstance(proc, Finished):
        return proc
    return Started(proc, argv, timeout, stdin, running)


def capture(argv: Sequence[str], timeout: float, *, env: Optional[Mapping[str, str]] = None,
            stdin: Optional[bytes] = None, merge: bool = False, cwd: Optional[str] = None,
            keep_terminal: bool = False, running: Optional[Running] = None) -> Finished:
    """Run argv to its end or its time-out and keep its output (start(), then its result())."""
    started = start(argv, timeout, env=env, stdin=stdin, merge=merge, cwd=cwd,
                    keep_terminal=keep_terminal, running=running)
    return started if isinstance(started, Finished) else started.result()


def stream(argv: Sequence[str], on_line: Callable[[str], None], *,
           env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
           keep_terminal: bool = False, grace: float = 10.0,
           on_start: Optional[Callable[[Optional[subprocess.Popen]], None]] = None,
           running: Optional[Running] = None) -> int:
    """Run argv, each line of its output (stderr merged) to on_line as it comes; its exit
    status. Interrupted (Ctrl+C, SIGTERM, an on_line that raised), the group gets SIGINT, as
    from a terminal, and grace seconds for its own cleanup (temporary files, traps), then
    SIGTERM, then as long again before SIGKILL (stop_group). on_start sees the child when it
    starts and None when it ended (interrupt())."""
    argv = tuple(argv)
    proc = _start(argv, env, cwd, keep_terminal, None, True, running)
    if isinstance(proc, Finished):
        if proc.not_started == STOPPED:
            raise KeyboardInterrupt
        on_line(f"{argv[0]}: {proc.not_started}")
        return proc.rc
    if on_start is not None:
        on_start(proc)
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            on_line(raw.decode("utf-8", "replace").rstrip("\n"))
        return proc.wait()
    except BaseException:
        stop_group(proc, grace)
        raise
    finally:
        if on_start is not None:
            on_start(None)
        if running is not None:
            running._remove(proc)


def interrupt(proc: Optional[subprocess.Popen], grace: float = 5.0) -> None:
    """Stop proc as Ctrl+C in a terminal would: SIGINT to its group now, SIGTERM after grace
    seconds (from a thread: the caller does not wait). For front ends where Ctrl+C is a key,
    not a signal (the TUI)."""
    if proc is None:
        return
    signal_group(proc, signal.SIGINT)

    threading.Thread(target=stop_group, args=(proc, grace, False), daemon=True).start()


def stop_group(proc: subprocess.Popen, grace: float, sigint: bool = True) -> None:
    """SIGINT to proc's group (unless sent already), grace seconds for its own cleanup, then
    SIGTERM, and as long again before SIGKILL: a step that ignores or traps both (a hung
    cleanup, a trap that loops) must not hold hpcwizard's Ctrl+C for ever. Returns once proc
    has ended."""
    if sigint:
        signal_group(proc, signal.SIGINT)
    for then in (signal.SIGTERM, signal.SIGKILL):
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            signal_group(proc, then)
    proc.wait()
