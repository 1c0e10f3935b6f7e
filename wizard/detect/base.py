"""What every probe gets (`Context`) and gives back (`Found`).

A probe is `probe(ctx, found) -> None`: it reads files under `ctx.sysroot` through the
helpers here, runs commands through `ctx.run` (only when `ctx.run_commands`), and records
values, notes and warnings in `found`. It never touches `Facts` directly; `core` merges.
"""
from __future__ import annotations

import glob
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Union

from .. import proc
from ..facts import Note
from ..inputs import SMALL_FILE_LIMIT, read_bytes
from ..validate import BadInput
from ..vocab import DEFAULT_SSH_PORT
from .notes import note
from .run import Result, Started, run, start

# procfs tables that grow with the machine (a line per CPU, socket, route or address)
TABLE_LIMIT = 64 * 1024 * 1024


class Ahead:
    """The commands started ahead of the probes that run them, shared by the threads that
    start and run them. Each command starts once at most, whoever comes first: a probe
    that ran it is not followed by a second start (for `sudo -n -v`, a second logged
    refusal). Every program of the detection, started ahead or not, is in `running`:
    stop() kills them all at once and nothing starts after it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: Dict[Tuple[str, ...], _Entry] = {}
        self._asked: Set[Tuple[str, ...]] = set()
        self.running = proc.Running()

    def start(self, argv: Tuple[str, ...], timeout: float) -> None:
        with self._lock:
            if self.running.stopped or argv in self._entries or argv in self._asked:
                return
            entry = self._entries[argv] = _Entry()
        # Outside the lock: a program on a hung mount holds up its own probe, not the rest.
        try:
            entry.started = start(argv, timeout=timeout, running=self.running)
        finally:
            entry.ready.set()

    def take(self, argv: Tuple[str, ...]) -> Tuple[bool, Optional[Started]]:
        """(whether the probe is answered here, the Started to wait on: None when the program
        is not installed, or when the detection is over and nothing more may run)."""
        with self._lock:
            self._asked.add(argv)
            if self.running.stopped:
                return True, None
            entry = self._entries.pop(argv, None)
        if entry is None:
            return False, None
        entry.ready.wait()  # its start is under way in another thread
        return True, entry.started

    def stop(self) -> None:
        self.running.stop()  # SIGKILL to every group, without waiting for any
        with self._lock:
            left = list(self._entries.values())
            self._entries.clear()
        if left:  # reaped aside: a process the kill cannot end yet (D state) holds up nothing
            threading.Thread(target=_reap_unasked, args=(left,), daemon=True,
                             name="hpcwizard-detect-reap").start()

    def waiting(self) -> List[Tuple[str, ...]]:
        """The commands started (or found missing) that no probe has taken yet."""
        with self._lock:
            return list(self._entries)


class _Entry:
    """A command Ahead is starting or has started: ready once started is set."""

    def __init__(self) -> None:
        self.ready = threading.Event()
        self.started: Optional[Started] = None


def _reap_unasked(entries: List[_Entry]) -> None:
    for entry in entries:
        entry.ready.wait()
        if entry.started is not None:
            entry.started.kill()


@dataclass
class Context:
    """What a probe may read and run: the root it looks at, and whether commands run."""
    sysroot: str = "/"
    run_commands: bool = True
    timeout: float = 5.0
    ssh_port: int = DEFAULT_SSH_PORT
    # Whether to list Open MPI's components (ompi_info: a quarter of a second, for the
    # UCX pml that only MPI over InfiniBand needs). A plan for TCP does without them.
    mpi_components: bool = True
    # The process environment that matters for the machine (Jupyter, Kubernetes).
    # Empty for a foreign sysroot: this process's variables say nothing about that tree.
    env: Mapping[str, str] = field(default_factory=dict)
    # files that exist but were refused (a FIFO, a device, too large): path -> the
    # reason, for the probes' notes
    refused: Dict[str, str] = field(default_factory=dict, init=False)
    # the commands started ahead of the probes that will run them (detect.commands)
    ahead: Ahead = field(default_factory=Ahead, init=False)
    # what else a probe began ahead of its turn, by the probe's name (the mirrors'
    # connections): the probe takes it, or does the work itself
    begun: Dict[str, Any] = field(default_factory=dict, init=False)

    @property
    def local(self) -> bool:
        """True when sysroot is this machine's own root."""
        return os.path.realpath(self.sysroot) == "/"

    def path(self, rel: str) -> str:
        return os.path.join(self.sysroot, rel.lstrip("/"))

    def read(self, rel: str, limit: int = SMALL_FILE_LIMIT) -> Optional[str]:
        """The file's text (stripped of nothing), or None when it cannot be read."""
        data = self.read_bytes(rel, limit)
        return None if data is None else data.decode("utf-8", "replace")

    def read_value(self, rel: str) -> Optional[str]:
        """A one-value sysfs/procfs file, stripped; None when missing or unreadable."""
        text = self.read(rel)
        return None if text is None else text.strip()

    def read_bytes(self, rel: str, limit: int = SMALL_FILE_LIMIT) -> Optional[bytes]:
        """The bytes of a regular file, at most limit of them; None when it is missing or
        cannot be read. A FIFO or a device (a sysroot's etc/os-release can be anything) is
        refused without blocking (hpcwizard.inputs), and why is kept in `refused`."""
        path = self.path(rel)
        try:
            return read_bytes(path, "file", limit)
        except BadInput as exc:
            if os.path.lexists(path):
                self.refused[rel] = str(exc)
            return None

    def exists(self, rel: str) -> bool:
        return os.path.lexists(self.path(rel))

    def isdir(self, rel: str) -> bool:
        return os.path.isdir(self.path(rel))

    def listdir(self, rel: str) -> List[str]:
        try:
            return sorted(os.listdir(self.path(rel)))
        except OSError:
            return []

    def readlink_name(self, rel: str) -> str:
        """The last component of a symlink's target ('' when it is not a symlink)."""
        try:
            return os.path.basename(os.readlink(self.path(rel)).rstrip("/"))
        except OSError:
            return ""

    def glob(self, pattern: str) -> List[str]:
        """Paths matching pattern under sysroot, returned as they are on that machine."""
        root = self.path("")
        hits = sorted(glob.glob(self.path(pattern)))
        return ["/" + os.path.relpath(h, root) for h in hits]

    def run(self, argv: Sequence[str], timeout: Optional[float] = None) -> Optional[Result]:
        """Run a command (callers check run_commands first); None when it is not installed.
        A command start() began already is not started again: its result is waited for."""
        if not self.run_commands:
            raise RuntimeError("commands are disabled for this detection")
        taken, began = self.ahead.take(tuple(argv))
        if taken:
            return None if began is None else began.result()
        return run(argv, timeout=self.timeout if timeout is None else timeout,
                   running=self.ahead.running)

    def start(self, argv: Sequence[str], timeout: Optional[float] = None) -> None:
        """Start a command a probe will run() later, and return at once, so that it runs while
        the probes before it do their reading. Nothing starts where commands are off, or
        for a command a probe has asked for already."""
        if self.run_commands:
            self.ahead.start(tuple(argv), self.timeout if timeout is None else timeout)

    def stop_started(self) -> None:
        """Kill every program of this detection still running (what no probe asked for, and
        what runs past the deadline); start nothing from now on."""
        self.ahead.stop()


@dataclass
class Found:
    """What one probe learned. Keys are Facts fields ("cpus") or dotted ("software.mpi_version")."""
    values: Dict[str, Any] = field(default_factory=dict)
    notes: List[Note] = field(default_factory=list)
    warnings: List[Note] = field(default_factory=list)

    def set(self, key: str, value: Any) -> None:
        self.values[key] = value

    def note(self, code: Union[str, Note], **args: Any) -> None:
        """Why something is unknown: a code of hpcwizard.detect.notes and what fills it in."""
        self.notes.append(code if isinstance(code, Note) else note(code, **args))

    def warn(self, code: Union[str, Note], **args: Any) -> None:
        """What will break a job, the same way."""
        self.warnings.append(code if isinstance(code, Note) else note(code, **args))
