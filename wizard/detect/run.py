"""Run one command with a timeout, and nothing else.

`run(["ssh", "-V"])` returns a `Result` (exit code, stdout, stderr), or None when the program
is not installed; `start(["ssh", "-V"])` starts it and returns at once, and its `result()`
is what run() would have returned. A command that does not finish in time is killed, with
everything it started, and `CommandTimeout` is raised: the caller turns that into a note.

The child gets LC_ALL=C so that the messages we parse ("a password is required") are English,
stdin from /dev/null so that nothing can wait for a keyboard, and its own session so that a
timeout can kill the whole process group (a shell script's `sleep` included).
"""
from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence, Tuple

from .. import proc


class CommandTimeout(Exception):
    """The command did not finish within its timeout; it has been killed."""

    def __init__(self, argv: Sequence[str], timeout: float) -> None:
        self.argv = tuple(argv)
        self.timeout = timeout
        super().__init__(f"`{shlex.join(self.argv)}` did not finish within {timeout:g} s")


@dataclass(frozen=True)
class Result:
    """A command detect ran: its exit code and output."""
    argv: Tuple[str, ...]
    rc: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.rc == 0

    @property
    def output(self) -> str:
        """stdout then stderr: several tools print their version on stderr."""
        if self.stdout and self.stderr:
            return self.stdout.rstrip("\n") + "\n" + self.stderr
        return self.stdout or self.stderr

    def first_line(self) -> str:
        """The first non-empty line of the output, for notes."""
        for line in self.output.splitlines():
            if line.strip():
                return line.strip()
        return f"exit code {self.rc}"


def which(program: str) -> Optional[str]:
    """Where `program` is on the current PATH (read at call time, so tests can change it)."""
    return shutil.which(program, path=os.environ.get("PATH", os.defpath))


class Started:
    """A command start() began: result() is what run() would have returned."""

    def __init__(self, argv: Tuple[str, ...], timeout: float,
                 started: "proc.Started | proc.Finished") -> None:
        self.argv = argv
        self.timeout = timeout
        self._started = started

    def result(self) -> Optional[Result]:
        done = self._started
        if isinstance(done, proc.Started):
            done = done.result()
        if done.not_started:
            return None
        if done.timed_out:
            raise CommandTimeout(self.argv, self.timeout)
        return Result(argv=self.argv, rc=done.rc, stdout=done.stdout, stderr=done.stderr)

    def kill(self) -> None:
        if isinstance(self._started, proc.Started):
            self._started.kill()


def start(
    argv: Sequence[str],
    timeout: float = 5.0,
    env: Optional[Mapping[str, str]] = None,
    running: Optional[proc.Running] = None,
) -> Optional[Started]:
    """Start argv (a list, never a shell string) now and return at once; None when argv[0]
    is not installed, or running was stopped. The timeout counts from now."""
    argv = tuple(argv)
    exe = argv[0] if os.sep in argv[0] else which(argv[0])
    if exe is None or not os.access(exe, os.X_OK) or os.path.isdir(exe):
        return None
    started = proc.start((exe,) + argv[1:], timeout, env=proc.child_env(proc.PARSED, base=env),
                         running=running)
    return Started(argv, timeout, started)


def run(
    argv: Sequence[str],
    timeout: float = 5.0,
    env: Optional[Mapping[str, str]] = None,
    running: Optional[proc.Running] = None,
) -> Optional[Result]:
    """Run argv to its end: start(), then its result(). None when argv[0] is not installed
    (or running was stopped)."""
    started = start(argv, timeout, env, running)
    return None if started is None else started.result()
