"""A running process's output read line by line while the test waits for a state, and the
rest later with communicate()."""
from __future__ import annotations

import os
import subprocess
from typing import IO, Iterator, List


def lines(stream: IO[str]) -> Iterator[str]:
    """The lines of a process's pipe as they come, each read from its descriptor a byte at a
    time: iterating the file object reads ahead, and communicate(), which reads the
    descriptor, would never see the lines it took."""
    fd = stream.fileno()
    line = bytearray()
    while True:
        byte = os.read(fd, 1)
        if byte:
            line += byte
        if line and (not byte or byte == b"\n"):
            yield line.decode(errors="replace")
            line.clear()
        if not byte:
            return


def until_line(proc: subprocess.Popen, text: str, seen: List[str]) -> None:
    """Read proc's stderr until a line holds text (the state, not the clock); the lines
    read go to seen, for the report."""
    for line in lines(proc.stderr):
        seen.append(line)
        if text in line:
            return
    raise AssertionError(f"no line with {text!r}:\n{''.join(seen)}")
