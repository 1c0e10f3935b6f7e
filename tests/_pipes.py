"""A running process's output read line by line while the test waits for a state, and the
rest later with communicate()."""
from __future__ import annotations

import os
from typing import IO, Iterator


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
