"""The seam between verify's checks and this machine: a System answers probes by running
them (through hpcwizard.proc: LC_ALL=C, a session of its own, killed as a group at its
time-out), says which of the job's hosts this instance is, and keeps verify's temporary
files. Tests pass a fake one that answers probes from their fields."""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Mapping, Optional, Sequence

from .. import proc
from ..i18n import _
from ..runtime import rank_of
from ..scratch import Owner, create_file, private_dir, remove_dir
from .probes import Probe, Ran


class System:
    """Runs commands for verify. A fake replaces `ask` (and `uid`, `user`, `rank`).

    stop() (from any thread) kills the process group of every command still running and
    makes later ones return at once with 130: the wizard calls it when the user quits during
    a verification, which would otherwise wait for ssh and mpirun time-outs.

    write_temp() puts the hostfiles in one private directory per verification (made by
    this process, 0700, handed to the job's user when root runs the checks as that user);
    remove_temp() (verify() calls it when it ends, however it ends; stop() too) removes it."""

    def __init__(self) -> None:
        self._running = proc.Running()
        self._lock = threading.Lock()
        self._scratch: Optional[Path] = None

    def stop(self) -> None:
        self._running.stop()
        self.remove_temp()

    def running(self) -> list:
        """The commands in flight (subprocess.Popen), for tests and stop()."""
        return self._running.procs()

    def uid(self) -> int:
        return os.getuid()

    def user(self) -> str:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name

    def rank(self, names: Sequence[str], rank_var: str = "") -> Optional[int]:
        """Which of names is this instance (its index), as the launch script decides it:
        NODE_RANK, else the platform's rank variable (rank_var), else the host name, else
        an address; None when none is."""
        return rank_of(list(names), rank_var=rank_var)

    def ask(self, probe: Probe) -> Ran:
        return self.run(probe.argv(), probe.timeout, probe.env(), probe.stdin(),
                        other_user=bool(getattr(probe, "user", "")))

    def run(self, argv: Sequence[str], timeout: float = 10.0,
            env: Optional[Mapping[str, str]] = None, stdin: Optional[bytes] = None,
            other_user: bool = False) -> Ran:
        """argv in a session of its own, without our terminal (hpcwizard.proc); other_user:
        it runs as the job's user (runuser), who gets none of our start-up variables."""
        argv = tuple(argv)
        done = proc.capture(argv, timeout, env=proc.child_env(proc.PARSED, extra=env,
                                                              other_user=other_user),
                            stdin=stdin, merge=True, running=self._running)
        if done.not_started == proc.STOPPED:
            return Ran(argv, 130, _("(stopped before it ran)"))
        if done.not_started:
            what = "command not found" if done.rc == proc.NOT_FOUND else done.not_started
            return Ran(argv, done.rc, f"{argv[0]}: {what}")
        if done.timed_out:
            return Ran(argv, 124, done.stdout + f"\n(did not finish within {timeout:g} s)")
        return Ran(argv, done.rc, done.stdout)

    def write_temp(self, name: str, text: str, mode: int = 0o600,
                   owner: Optional[Owner] = None) -> str:
        """A new file `name` (a hostfile) in this verification's private directory, which
        is made at the first call: mkdtemp, 0700, owned by `owner` (uid, gid: the job's
        user, who runs mpirun) when given. Nothing at a predictable path is written to."""
        with self._lock:
            if self._scratch is None:
                self._scratch = private_dir("hpcwizard-verify-", owner=owner)
            directory = self._scratch
        return str(create_file(directory, name, text.encode("utf-8"), mode, owner))

    def remove_temp(self) -> None:
        """Remove the private directory of write_temp, with its files (if it was made)."""
        with self._lock:
            directory, self._scratch = self._scratch, None
        remove_dir(directory)
