"""Is another hpcwizard changing this machine? One lock file, held with flock for the length
of an apply or undo: machine-wide (/run/lock/hpcwizard.lock) for runs with root steps, in the
state directory otherwise. A second run gets one clear line and exit status 2, having
written nothing (the lock is taken before the record is)."""
from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from pathlib import Path
from typing import Iterator

from .record import state_dir
from .i18n import _
from .validate import BadInput


MACHINE_LOCK = "/run/lock/hpcwizard.lock"


def _open_machine_lock() -> "int | None":
    """The machine-wide lock (every user's hpcwizard that changes the system takes it), or
    None when /run/lock is missing or not writable (not root, no sudo: nothing to guard)."""
    try:
        fd = os.open(MACHINE_LOCK, os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o644)
    except OSError:
        try:  # made by another user: a read-only descriptor can hold a flock too
            return os.open(MACHINE_LOCK, os.O_RDONLY | _NOFOLLOW)
        except OSError:
            return None
    if _ours(fd):
        try:
            os.fchmod(fd, 0o644)  # others must be able to open it to wait on it
        except OSError:
            pass
    return fd


_NOFOLLOW = os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def _ours(fd: int) -> bool:
    """The lock file is a regular file of ours with one name. /run/lock is writable by
    every user: a file someone else put there (or a hard link to another file) is only
    flock-ed, never chmod-ed, truncated or written."""
    st = os.fstat(fd)
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and st.st_nlink == 1


@contextlib.contextmanager
def run_lock(machine: bool = False, directory: "Path | None" = None) -> Iterator[None]:
    """machine: the run changes the system (root steps), so it takes the machine-wide lock
    (/run/lock/hpcwizard.lock) when it can; otherwise, or for the user's own files, the
    lock in the state directory (`directory`, where the records go; default state_dir())."""
    fd = _open_machine_lock() if machine else None
    if fd is None:
        directory = Path(directory) if directory is not None else state_dir()
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(str(directory / "run.lock"), os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                other = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            except OSError:  # not a regular file (someone else's FIFO)
                other = "?"
            raise BadInput(_("another hpcwizard (pid {pid}) is changing this machine: wait "
                             "for it to finish").format(pid=other)) from None
        try:
            if _ours(fd):
                os.ftruncate(fd, 0)
                os.pwrite(fd, str(os.getpid()).encode(), 0)
        except OSError:  # read-only (another user's file) or a full disk: the lock holds
            pass
        yield
    finally:
        os.close(fd)
