"""Where do hpcwizard's own temporary files go? Into a directory this process made itself
(mkdtemp: an unpredictable name, mode 0700), as files created new (O_EXCL|O_NOFOLLOW), so
that nothing another user prepared — a directory planted at a predictable name, a symlink
named like our file — is ever written through, chmod-ed or reused.

Where a file must be read by the job's user (root runs verify's mpirun as that user), the
directory is handed to that user (chown after mkdtemp): still made by us, still 0700, and
readable by the one user who needs it.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional, Tuple

Owner = Tuple[int, int]  # uid, gid


def private_dir(prefix: str = "hpcwizard-", owner: Optional[Owner] = None,
                base: Optional[str] = None) -> Path:
    """A new directory, mode 0700, made by this process; owned by `owner` when given (and
    we are root), else by us."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    if owner is not None and os.geteuid() == 0 and owner != (os.geteuid(), os.getegid()):
        os.chown(path, *owner)
    return path


def create_file(directory: Path, name: str, data: bytes, mode: int = 0o600,
                owner: Optional[Owner] = None) -> Path:
    """A file that did not exist before, written whole. Fails (FileExistsError, or ELOOP
    for a symlink) rather than write through something already at that name."""
    if "/" in name or name in ("", ".", ".."):
        raise ValueError(f"not a file name: {name!r}")
    path = Path(directory) / name
    fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                 | getattr(os, "O_CLOEXEC", 0), mode)
    try:
        if owner is not None and os.geteuid() == 0:
            os.fchown(fd, *owner)
        os.fchmod(fd, mode)  # the umask may have taken bits the caller asked for
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    return path


def remove_dir(path: Optional[Path]) -> None:
    """Remove a directory private_dir made, with what is in it; quiet when already gone."""
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)
