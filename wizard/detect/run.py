"""Run one command with a timeout, and nothing else.

`run(["ssh", "-V"])` returns a `Result` (exit code, stdout, stderr), or None when the program
is not installed. A command that does not finish in time is killed, with everything it
started, and `CommandTimeout` is raised: the caller turns that into a note.

The child gets LC_ALL=C so that the messages we parse ("a password is required") are English,
stdin from /dev/null so that nothing can wait for a keyboard, and its own session so that a
timeout can kill the whole process group (a shell script's `sleep` included).
"""
from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence, Tuple


class CommandTimeout(Exception):
    """The command did not finish within its timeout; it has been killed."""

    def __init__(self, argv: Sequence[str], timeout: float) -> None:
        self.argv = tuple(argv)
        self.timeout = timeout
        super().__init__(f"`{shlex.join(self.argv)}` did not finish within {timeout:g} s")


@dataclass(frozen=True)
class Result:
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


def run(
    argv: Sequence[str],
    timeout: float = 5.0,
    env: Optional[Mapping[str, str]] = None,
) -> Optional[Result]:
    """Run argv (a list, never a shell string); None when argv[0] is not installed."""
    argv = tuple(argv)
    exe = argv[0] if os.sep in argv[0] else which(argv[0])
    if exe is None or not os.access(exe, os.X_OK) or os.path.isdir(exe):
        return None
    child_env = dict(os.environ if env is None else env)
    child_env["LC_ALL"] = "C"
    child_env["LANG"] = "C"
    try:
        proc = subprocess.Popen(
            (exe,) + argv[1:],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            env=child_env,
            start_new_session=True,
        )
    except FileNotFoundError:
        return None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise CommandTimeout(argv, timeout) from None
    return Result(argv=argv, rc=proc.returncode, stdout=out or "", stderr=err or "")


def _kill_group(proc: "subprocess.Popen[str]") -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    try:
        proc.communicate(timeout=1.0)
    except subprocess.TimeoutExpired:  # a grandchild escaped the group and holds the pipes
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        proc.wait()
