"""Fetch one package file (the UCX .deb/.rpm of --ucx-url) the way a careful person would:
with a timeout, progress on the way, resuming a cut transfer with an HTTP Range request, and
checking the sha256 when one is given. The sha256 is always recorded, beside the file
(FILE.sha256) and in the output, so that a record says exactly what was installed.

The bytes go to FILE.part first and are renamed to FILE only when complete and checked; a
file whose sha256 is wrong is removed. FILE.part is resumed only when it is a regular file of
the user downloading (never through a link, never another user's file), and FILE.sha256 is
written beside FILE as a new file renamed into place. A failure is one line
(DownloadError), e.g. "download failed: https://host/ucx.deb: HTTP 404 Not Found".

    python3 -m hpcwizard.download URL FILE [--sha256 HEX]

is what the ucx-url recipe runs (exit status 0 done, 1 failed, 2 bad input).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import stat
import sys
import time
from typing import Callable, Optional, TextIO

from .exit_codes import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK
from .inputs import ascii_int
from .record import write_private
from .validate import BadInput, sha256 as check_sha256, url as check_url

CHUNK = 256 * 1024
CONNECT_TIMEOUT = 30.0
READ_TIMEOUT = 60.0  # no byte for this long: the transfer is cut (and resumed)
ATTEMPTS = 5  # one transfer plus this many resumptions minus one, per call


class DownloadError(Exception):
    """One line saying what failed; the partial file is kept only when it can be resumed."""


Progress = Callable[[int, Optional[int]], None]  # (bytes so far, total or None)


_NOFOLLOW = os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def _part_size(part: str) -> int:
    """Bytes in FILE.part from an earlier run (0: none). Only a regular file of ours, with
    one name, is resumed; anything else at that name is refused, not written through."""
    try:
        st = os.lstat(part)
    except FileNotFoundError:
        return 0
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink != 1:
        raise DownloadError(f"download failed: {part} is not a file of this user's earlier "
                            "download (a link, or another user's file): remove it")
    return st.st_size


def _open_part(part: str, append: bool) -> int:
    """FILE.part for writing, checked (as _part_size) before a byte is written or cut."""
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | _NOFOLLOW, 0o644)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink != 1:
            raise DownloadError(f"download failed: {part} is not a file of this user's "
                                "earlier download (a link, or another user's file): remove it")
        if append:
            os.lseek(fd, 0, os.SEEK_END)
        else:
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _write_beside(path: str, text: str) -> None:
    """path written as a new file beside it, then renamed over it: whatever was at path (a
    link) is replaced, never written through (record.write_private)."""
    from pathlib import Path

    write_private(Path(path), text.encode("ascii"), mode=0o644)


def _hash_file(path: str, h: "hashlib._Hash") -> int:
    size = 0
    with os.fdopen(os.open(path, os.O_RDONLY | _NOFOLLOW), "rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            h.update(block)
            size += len(block)
    return size


def _total_from(resp, start: int) -> Optional[int]:
    """The file's whole size from the server's headers, None when they do not say (or say it
    in other than ASCII digits: a header is outside input, and int() reads '٢' as 2)."""
    cr = resp.headers.get("Content-Range", "")  # bytes 100-999/1000
    if "/" in cr:
        total = ascii_int(cr.rsplit("/", 1)[1])
        if total is not None:
            return total
    length = ascii_int(resp.headers.get("Content-Length", ""))
    return start + length if length is not None else None


def download(url: str, dest: str, sha256: str = "", *, timeout: float = READ_TIMEOUT,
             connect_timeout: float = CONNECT_TIMEOUT, attempts: int = ATTEMPTS,
             progress: Optional[Progress] = None, session=None) -> str:
    """Download url to dest (resuming dest.part); return the file's sha256 (hex).

    Raises DownloadError with one line: HTTP errors (404...), a refused sha256 (the partial
    file is removed), or a transfer still cut after `attempts` tries (dest.part is kept, so
    calling again resumes it).
    """
    import requests

    want = sha256.lower() if sha256 else ""
    part = dest + ".part"
    http = session or requests.Session()
    total: Optional[int] = None
    last_error = ""
    for attempt in range(attempts):
        start = _part_size(part)
        headers = {"Range": f"bytes={start}-"} if start else {}
        try:
            with http.get(url, headers=headers, stream=True,
                          timeout=(connect_timeout, timeout)) as resp:
                if resp.status_code == 416 and start:
                    # Nothing after what we have: either complete, or the file changed.
                    total = _total_from(resp, 0)
                    if total == start:
                        break
                    os.remove(part)
                    last_error = "the server's file changed; starting again"
                    continue
                if resp.status_code >= 400:
                    reason = resp.reason or ""
                    raise DownloadError(f"download failed: {url}: HTTP {resp.status_code} {reason}".rstrip())
                if start and resp.status_code != 206:
                    start = 0  # the server ignored Range: take the whole file again
                total = _total_from(resp, start)
                got = start
                with os.fdopen(_open_part(part, append=bool(start)), "wb") as out:
                    for block in resp.iter_content(CHUNK):
                        out.write(block)
                        got += len(block)
                        if progress:
                            progress(got, total)
                if total is not None and got < total:
                    last_error = f"the transfer stopped at {got} of {total} bytes"
                    continue
                break
        except DownloadError:
            raise
        except (requests.ConnectionError, requests.Timeout,
                requests.exceptions.ChunkedEncodingError) as exc:  # cut: resume
            last_error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            time.sleep(min(0.2 * (attempt + 1), 2.0))
            continue
        except requests.RequestException as exc:
            raise DownloadError(f"download failed: {url}: {type(exc).__name__}: {exc}") from None
    else:
        have = _part_size(part)
        raise DownloadError(f"download failed: {url}: {last_error} after {attempts} tries; "
                            f"{have} bytes kept in {part}, run again to resume")
    h = hashlib.sha256()
    _hash_file(part, h)
    digest = h.hexdigest()
    if want and digest != want:
        os.remove(part)
        raise DownloadError(f"sha256 mismatch for {os.path.basename(dest)}: expected {want}, "
                            f"got {digest}; the file was removed")
    os.replace(part, dest)
    _write_beside(dest + ".sha256", f"{digest}  {os.path.basename(dest)}\n")
    return digest


class LineProgress:
    """Progress as whole lines (every 10%, or every 10 MiB when the size is unknown): the
    apply log and the TUI read lines, not carriage returns."""

    def __init__(self, stream: TextIO = sys.stderr):
        self.stream = stream
        self.next_mark = 0

    def __call__(self, got: int, total: Optional[int]) -> None:
        mib = got / 1048576
        if total:
            pct = got * 100 // total
            if pct >= self.next_mark:
                self.stream.write(f"downloaded {mib:.1f} of {total / 1048576:.1f} MiB ({pct}%)\n")
                self.stream.flush()
                self.next_mark = (pct // 10 + 1) * 10
        elif got >= self.next_mark * 1048576:
            self.stream.write(f"downloaded {mib:.1f} MiB\n")
            self.stream.flush()
            self.next_mark += 10


def main(argv: Optional[list] = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m hpcwizard.download",
                                description="Download a package file: resumable, sha256 checked.")
    p.add_argument("url")
    p.add_argument("dest")
    p.add_argument("--sha256", default="", help="expected sha256 (empty: record it only)")
    p.add_argument("--timeout", type=float, default=READ_TIMEOUT,
                   help="seconds without data before the transfer counts as cut")
    args = p.parse_args(argv)
    try:
        url = check_url(args.url)
        want = check_sha256(args.sha256) if args.sha256 else ""
        digest = download(url, args.dest, want, timeout=args.timeout, progress=LineProgress())
    except BadInput as exc:
        print(f"hpcwizard: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except DownloadError as exc:
        print(f"hpcwizard: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as exc:
        print(f"hpcwizard: download failed: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"sha256 {digest} {os.path.basename(args.dest)}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
