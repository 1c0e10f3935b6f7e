"""Is another hpcwizard changing this machine? One lock file in the state directory, held
with flock for the length of an apply or undo; a second run gets one clear line."""
from __future__ import annotations

import contextlib
import fcntl
import os
from typing import Iterator

from .record import state_dir
from .validate import BadInput


@contextlib.contextmanager
def run_lock() -> Iterator[None]:
    directory = state_dir()
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = directory / "run.lock"
    fd = os.open(str(path), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise BadInput(f"another hpcwizard (pid {other}) is changing this machine: "
                           "wait for it to finish") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)
