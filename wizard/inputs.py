"""How is a value from outside read? One reader for the numbers and the files a user, a
platform or a record hands to hpcwizard, each with a limit, so that an odd value is one
line (BadInput) and never a traceback, a hang or a quiet "none given".

- `number()`: ASCII digits only. `str.isdigit()` and `int()` accept '²²²²' and '٢٢٢٢'
  (Arabic-Indic digits, which int() reads as 2222): a value that is not plain digits is
  refused, whatever Unicode calls it.
- `read_text()`: a regular file (or standard input where the command documents '-'), read
  up to a stated size. A FIFO, a device (/dev/zero) or a directory is refused without
  blocking: the file is opened with O_NONBLOCK and checked with fstat before any read.
"""
from __future__ import annotations

import errno
import os
import re
import stat
import sys
from typing import Optional

from .i18n import N_, _
from .validate import BadInput

_ASCII_NUMBER = re.compile(r"[0-9]{1,18}")

# Limits of what is read whole. A record of a 40-step plan is about 40 kB, a hostfile of
# 4096 hosts about 100 kB, an ssh/mpirun/NCCL log worth diagnosing a few MB.
RECORD_LIMIT = 4 * 1024 * 1024
HOSTFILE_LIMIT = 1024 * 1024
LOG_LIMIT = 64 * 1024 * 1024
SMALL_FILE_LIMIT = 1024 * 1024  # os-release, sysfs and procfs values


def ascii_int(value: object) -> Optional[int]:
    """The number plain ASCII digits stand for (surrounding blanks allowed), else None."""
    text = str(value).strip()
    return int(text) if _ASCII_NUMBER.fullmatch(text) else None


def number(value: object, name: str, lo: int, hi: int, field: str = "") -> int:
    """value as an int from lo to hi; BadInput naming `name` (an option or a variable)."""
    n = ascii_int(value)
    if n is None or not lo <= n <= hi:
        raise BadInput(_("{name} {value!r} is not a number from {lo} to {hi}").format(
            name=name, value=value, lo=lo, hi=hi), field or name)
    return n


def read_bytes(path: str, what: str, limit: int, stdin: bool = False) -> bytes:
    """The bytes of the regular file at path, at most `limit` of them (more: refused).
    `what` names the file in a refusal ("hostfile", "record"). stdin: '-' reads standard
    input, to the same limit."""
    if stdin and path == "-":
        data = sys.stdin.buffer.read(limit + 1)
        if len(data) > limit:
            raise BadInput(_("{what} on standard input is larger than {limit}").format(
                what=what, limit=_size(limit)))
        return data
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise BadInput(_("{what} {path} does not exist").format(what=what, path=path)) \
                from None
        raise BadInput(_("{what} {path} cannot be read: {error}").format(
            what=what, path=path, error=exc.strerror or exc)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadInput(_("{what} {path} is not a regular file ({kind})").format(
                what=what, path=path, kind=_kind(st.st_mode)))
        if st.st_size > limit:
            raise BadInput(_("{what} {path} is larger than {limit}").format(
                what=what, path=path, limit=_size(limit)))
        chunks, size = [], 0
        while size <= limit:  # one byte more than allowed, to see the end
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:  # grew while read (procfs and sysfs report size 0)
            raise BadInput(_("{what} {path} is larger than {limit}").format(
                what=what, path=path, limit=_size(limit)))
        return b"".join(chunks)
    except OSError as exc:
        raise BadInput(_("{what} {path} cannot be read: {error}").format(
            what=what, path=path, error=exc.strerror or exc)) from None
    finally:
        os.close(fd)


def read_text(path: str, what: str, limit: int, stdin: bool = False) -> str:
    """read_bytes, decoded as UTF-8 with undecodable bytes replaced."""
    return read_bytes(path, what, limit, stdin).decode("utf-8", "replace")


_KINDS = ((stat.S_ISDIR, N_("a directory")), (stat.S_ISFIFO, N_("a FIFO")),
          (stat.S_ISCHR, N_("a character device")), (stat.S_ISBLK, N_("a block device")),
          (stat.S_ISSOCK, N_("a socket")))


def _kind(mode: int) -> str:
    return next((_(name) for test, name in _KINDS if test(mode)), _("not a regular file"))


def _size(limit: int) -> str:
    return f"{limit // (1024 * 1024)} MiB" if limit >= 1024 * 1024 else f"{limit // 1024} KiB"
