"""Issue 28, item 1: nothing hpcwizard runs as another user has our terminal. Every program
it starts gets a session of its own (no controlling terminal) and a stdin that is not the
terminal, except sudo, which keeps our session for its credentials and runs what it runs as
the job's user through proc.DETACHED (a session of its own); a program run as the job's user
gets none of our shell start-up variables.

- a table over every route a program takes to another user (apply's and undo's steps,
  checks and diffs through runuser or sudo, verify's probes, sudo's own questions): how each
  is started;
- a real pty as the controlling terminal of the process that runs them (as root's terminal
  is hpcwizard's): a program that tries TIOCSTI on /dev/tty and on its fds 0, 1, 2 gets
  ENXIO / ENOTTY, and nothing it typed reaches the terminal. Run through the runners
  themselves, with `runuser` and `sudo` replaced by ones that keep the user (the test needs
  no second user).
The same attack for real, with a second user and `hpcwizard apply`:
tests/system/test_system_tty.py.
"""
from __future__ import annotations

import json
import os
import pty
import select
import shlex
import subprocess
import sys
import termios
from pathlib import Path
from typing import Callable, List, Tuple

import pytest

from _tiocsti import ATTEMPT

from hpcwizard import ops, proc, session
from hpcwizard.render import setup as setup_render
from hpcwizard.apply import ShellRunner
from hpcwizard.verify.probes import SshInEffect, TorchImport
from hpcwizard.verify.system import System

# --- the table: how each route starts its program ------------------------------------------


class Spy:
    """subprocess.Popen for hpcwizard.proc: notes how each program would start; starts none."""

    def __init__(self) -> None:
        self.calls: List[Tuple[Tuple[str, ...], dict]] = []

    def __call__(self, argv, **kw):
        self.calls.append((tuple(argv), kw))
        raise FileNotFoundError(2, "not started in this test", argv[0])


def _steps(uid: int, as_: str, library: str = "") -> Callable[[], None]:
    def go() -> None:
        runner = ShellRunner("bob", uid=uid, library=library)
        runner.check(as_, "true")
        runner.capture(as_, "cat ~/.ssh/config")
        runner.run(as_, "ssh -G node1", lambda line: None)
    return go


ROUTES = {
    # (how, runs as): what starts the program
    "apply, root for the job user (runuser)": (_steps(0, "user"), "other"),
    "apply, a sudoer for the job user (sudo -u)": (_steps(1000, "user"), "other"),
    "apply, a sudoer's root steps (sudo -n)": (_steps(1000, "root"), "root"),
    "undo and replay, the record's library": (_steps(0, "user", ops.library()), "other"),
    "verify, ssh -G as the job user": (
        lambda: System().ask(SshInEffect("node1", user="bob")), "other"),
    "verify, a program as the job user": (
        lambda: System().ask(TorchImport("import torch", user="bob")), "other"),
    "sudo's password, asked by hpcwizard": (lambda: session.open_sudo("secret"), "root"),
    "sudo's rules for bash": (session.sudo_allows_bash, "root"),
}


@pytest.mark.parametrize("route", list(ROUTES))
def test_every_route_to_another_user_starts_without_our_terminal(route, monkeypatch):
    monkeypatch.setenv("BASH_ENV", "/home/bob/.bashrc")
    monkeypatch.setenv("ENV", "/home/bob/.profile")
    spy = Spy()
    monkeypatch.setattr(proc.subprocess, "Popen", spy)
    go, runs_as = ROUTES[route]
    go()
    # a root step's check and diff are tried as ourselves first (bash): not another user
    calls = [(argv, kw) for argv, kw in spy.calls if argv[0] != "bash"]
    assert calls, f"no route to another user was taken: {spy.calls}"
    for argv, kw in calls:
        assert kw.get("stdin") in (subprocess.DEVNULL, subprocess.PIPE), (argv, kw)
        if argv[0] == "runuser":
            assert kw.get("start_new_session") is True, (argv, kw)  # no controlling terminal
        else:
            # sudo keeps our session (its credentials are the terminal's) in a process group
            # of its own (process_group from 3.11, setpgrp before) ...
            assert argv[0] == "sudo" and not kw.get("start_new_session"), (argv, kw)
            assert kw.get("process_group") == 0 or kw.get("preexec_fn") is os.setpgrp, (argv, kw)
            if runs_as == "other":  # ... and what it runs as another user detaches itself
                command = list(argv[argv.index("--") + 1:])
                assert command[:3] == ["bash", "-c", proc.DETACHED], argv
        if runs_as == "other":
            assert not {"BASH_ENV", "ENV"} & set(kw["env"]), (argv, sorted(kw["env"]))


def _setup_prelude(user: str = "bob") -> str:
    """The setup script's functions, as the export writes them."""
    return (setup_render._PRELUDE.replace("__TARGET__", user)
            .replace("__DETACHED__", shlex.quote(proc.DETACHED)))


def test_the_setup_script_runs_the_job_users_steps_without_its_terminal():
    prelude = _setup_prelude()
    as_user = prelude[prelude.index("as_user() {"):].split("\n}\n", 1)[0]
    for route in ("runuser", "sudo"):
        line = next(x for x in as_user.splitlines() if f" {route} -" in x)
        assert 'bash -c "$HW_DETACHED"' in line and line.endswith('"$@" 2>&1 | cat'), line
    assert f"HW_DETACHED={shlex.quote(proc.DETACHED)}" in prelude


# --- a real terminal -----------------------------------------------------------------------

def attempt(where: str, log: Path) -> List[str]:
    return [sys.executable, "-c", ATTEMPT, where, str(log)]


def _in_terminal(log: Path, fake_bin: Path) -> None:
    """In the pty's child (the pty is its controlling terminal): every route, then what
    the terminal holds for its next reader, which the attempts would have filled."""
    os.environ["PATH"] = f"{fake_bin}:{os.environ['PATH']}"
    for uid, route in ((0, "runuser"), (1000, "sudo")):
        runner = ShellRunner("bob", uid=uid, library=ops.library())
        runner.check("user", shlex.join(attempt(f"{route}-check", log)))
        runner.capture("user", shlex.join(attempt(f"{route}-diff", log)))
        runner.run("user", shlex.join(attempt(f"{route}-step", log)), lambda line: None)
    where = f"import sys\nsys.argv[1:3] = ['verify', {str(log)!r}]\n"
    System().ask(TorchImport(where + ATTEMPT, user="bob"))
    subprocess.run(["bash", "-c", _setup_prelude() + "\nas_user \"$@\"", "bash",
                    *attempt("setup-script", log)], check=False)
    # what sits in the terminal's input queue, read without waiting
    attrs = termios.tcgetattr(0)
    attrs[3] &= ~termios.ICANON
    attrs[6][termios.VMIN], attrs[6][termios.VTIME] = 0, 0
    termios.tcsetattr(0, termios.TCSANOW, attrs)
    queued = os.read(0, 4096)
    with open(log.with_suffix(".queued"), "w") as f:
        json.dump(queued.decode("utf-8", "replace"), f)


def test_nothing_run_as_the_job_user_can_type_into_our_terminal(tmp_path):
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    # runuser -u bob -- CMD..., sudo -n -u bob -- CMD...: CMD as we are (the attempt needs
    # no second user), in the session it was started in
    for name in ("runuser", "sudo"):
        (fake_bin / name).write_text('#!/bin/sh\nwhile [ "$1" != -- ]; do shift; done\n'
                                     'shift\nexec "$@"\n')
        (fake_bin / name).chmod(0o755)
    log = tmp_path / "attempts"
    pid, fd = pty.fork()
    if pid == 0:
        code = 1
        try:
            _in_terminal(log, fake_bin)
            code = 0
        finally:
            os._exit(code)
    shown = b""
    while True:
        select.select([fd], [], [])  # the child's end closes the pty: EIO or b""
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        shown += chunk
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0, shown.decode("utf-8", "replace")
    attempts = log.read_text().splitlines()
    wheres = {a.split()[0] for a in attempts}
    assert wheres == {f"{r}-{w}" for r in ("runuser", "sudo") for w in ("check", "diff", "step")
                      } | {"verify", "setup-script"}, attempts
    assert not [a for a in attempts if a.endswith(" injected")], attempts
    assert all(a.endswith((" ENXIO", " ENOTTY")) for a in attempts), attempts
    assert {f"{w} /dev/tty ENXIO" for w in wheres} <= set(attempts), attempts
    assert json.loads(log.with_suffix(".queued").read_text()) == ""  # nothing typed for us
    assert b"hpcwizard-typed" not in shown
