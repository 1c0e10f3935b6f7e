"""Run every probe and merge what they found into one Facts.

Each probe gets the same Context and its own Found. A probe that raises, or whose command
times out, leaves its part of Facts at its default and adds a plain note; nothing
escapes detect().

The programs the probes run are all started first (detect.commands), then the probes read
and parse in turn, in one thread, while the programs run on the other cores: the wall time
is about that of the Python work or of the slowest program, not their sum. One thread rather
than one per probe: sixteen threads handed the interpreter lock to one another on every
file read, and that cost more than the waits they overlapped (15 ms of 60, on two cores).
Only where a probe waits a quarter of a second or more (on ompi_info, on a program that
hangs) do more threads take on the probes after it.
"""
from __future__ import annotations

import importlib
import os
import shlex
import threading
import time
from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Dict, List, Optional, Sequence

from ..facts import Facts, Note
from ..i18n import N_
from ..vocab import DEFAULT_SSH_PORT
from . import commands
from .base import Context, Found
from .notes import note
from .run import CommandTimeout


# The first words of the note detect() adds when it runs no command; summary looks for it.
NO_COMMANDS_NOTE = "Commands were not run"


@dataclass(frozen=True)
class Probe:
    """One question detect answers, and the function that answers it."""
    name: str
    label: str  # what it finds out, as it reads in a note: "the GPUs" (a msgid: N_)
    func: Callable[[Context, Found], None]


def lazy(module: str, name: str = "probe") -> Callable[[Context, Found], None]:
    """The probe function `name` of hpcwizard.detect.<module>, imported when it first runs.
    Importing hpcwizard.detect (for detect.user, say) then loads no probe, and in detect()
    the probes' modules load while the programs started first run."""
    def probe(ctx: Context, found: Found) -> None:
        getattr(importlib.import_module(f"{__package__}.{module}"), name)(ctx, found)

    probe.__qualname__ = f"{module}.{name}"
    return probe


PROBES: Sequence[Probe] = (
    Probe("os", N_("the distribution"), lazy("os_release")),
    Probe("user", N_("the user and their sudo rights"), lazy("user")),
    Probe("runtime", N_("the container and PID 1"), lazy("runtime")),
    Probe("hostname", N_("the host name"), lazy("runtime", "probe_hostname")),
    Probe("hardware", N_("CPUs and memory"), lazy("hardware")),
    Probe("net", N_("the network interfaces"), lazy("net")),
    Probe("rdma", N_("the RDMA devices"), lazy("rdma")),
    Probe("gpu", N_("the GPUs"), lazy("gpu")),
    Probe("ssh", N_("SSH"), lazy("software", "probe_ssh")),
    Probe("sshd", N_("the SSH server"), lazy("software", "probe_sshd")),
    Probe("ssh_dir", N_("the SSH directory"), lazy("ssh_dir")),
    Probe("mpi", N_("MPI"), lazy("software", "probe_mpi")),
    Probe("ucx", N_("UCX"), lazy("software", "probe_ucx")),
    Probe("torch", N_("PyTorch"), lazy("software", "probe_torch")),
    Probe("packages", N_("the installed packages"), lazy("software", "probe_packages")),
    Probe("mirrors", N_("the package mirrors"), lazy("mirrors")),
)


def run_probe(probe: Probe, ctx: Context) -> Found:
    """Run one probe; turn any failure into a note."""
    found = Found()
    try:
        probe.func(ctx, found)
    except CommandTimeout as exc:
        # What the probe learned before the command hung is still true; keep it.
        found.note("probe.timeout-plural" if probe.label.endswith("s") else "probe.timeout",
                   command=shlex.join(exc.argv), seconds=f"{exc.timeout:g}", label=probe.label)
    except Exception as exc:  # noqa: BLE001 - a probe bug must not stop detection
        found = Found(notes=found.notes)
        found.note("probe.crashed", label=probe.label, error=f"{type(exc).__name__}: {exc}")
    return found


def merge(founds: Sequence[Found], notes: Sequence[Note] = ()) -> Facts:
    top: Dict[str, Any] = {}
    nested: Dict[str, Dict[str, Any]] = {}
    all_notes: List[Note] = list(notes)
    warnings: List[Note] = []
    defaults = Facts()
    names = {f.name for f in fields(Facts)} - {"notes", "warnings"}
    for f in founds:
        for key, value in f.values.items():
            outer, _, inner = key.partition(".")
            ok = outer in names and (
                not inner or inner in {f.name for f in fields(getattr(defaults, outer))}
            )
            if not ok:  # a probe bug; say so rather than fail
                all_notes.append(note("internal.unknown-fact", key=key))
            elif inner:
                nested.setdefault(outer, {})[inner] = value
            else:
                top[key] = value
        all_notes.extend(n for n in f.notes if n not in all_notes)
        warnings.extend(w for w in f.warnings if w not in warnings)
    for outer, values in nested.items():
        top[outer] = replace(top.get(outer, getattr(defaults, outer)), **values)
    return Facts(**top, notes=tuple(all_notes), warnings=tuple(warnings))


# Longer than a probe takes when its programs answer (a few ms; ompi_info or nvidia-smi
# where they are installed, a few tenths): a probe with no answer for this long is waiting
# on something, and the ones after it go on in another thread.
STALL = 0.25


def run_in_turn(probes: Sequence[Probe], ctx: Context, deadline: float,
                stall: float = STALL) -> List[Optional[Found]]:
    """Start the commands (detect.commands), then run the probes one after another in a
    thread; each one's Found, None for those the deadline cut off.

    Whenever no probe has ended for `stall` seconds (one waits on a program that hangs, or
    on a read from a hung network file system), another thread takes on the next probes:
    what hangs costs only the probes waiting on it, as when each probe had a thread, while
    a detection where everything answers runs in one. Daemon threads, so that a probe still
    stuck past the deadline cannot hold up the exit.

    This thread looks four times a `stall` whether any probe ended since it last looked, and
    is woken early only by the last probe's end: woken at each probe's end, it took the
    interpreter lock from the probes sixteen times a detection."""
    results: List[Optional[Found]] = [None] * len(probes)
    if not probes:
        return results
    lock = threading.Lock()
    finished = threading.Event()
    ended = [0]  # how many probes have ended (under lock)
    left = list(range(len(probes)))
    left.reverse()  # popped from the end: in the order given

    def work(start_commands: bool) -> None:
        if start_commands:
            commands.start(ctx)
        while True:
            with lock:
                if not left:
                    return
                i = left.pop()
            results[i] = run_probe(probes[i], ctx)
            with lock:
                ended[0] += 1
                if ended[0] == len(probes):
                    finished.set()

    def spawn(start_commands: bool = False) -> None:
        threading.Thread(target=work, args=(start_commands,), daemon=True,
                         name="hpcwizard-detect").start()

    end = time.monotonic() + deadline
    spawn(start_commands=True)
    seen, since = 0, time.monotonic()
    while True:
        remaining = end - time.monotonic()
        if remaining <= 0 or finished.wait(min(stall / 4, remaining)):
            break
        now = time.monotonic()
        with lock:
            if ended[0] != seen:
                seen, since = ended[0], now
            stuck = now - since >= stall and bool(left)  # and probes are waiting
        if stuck and now < end:
            spawn()
            since = now
    return list(results)  # a copy: a stuck probe that ends late changes nothing returned


def detect(
    sysroot: str = "/",
    run_commands: Optional[bool] = None,
    timeout: float = 5.0,
    *,
    ssh_port: int = DEFAULT_SSH_PORT,
    mpi_components: bool = True,
) -> Facts:
    """What is this machine (or the tree at sysroot)? Never raises for what it finds.

    run_commands defaults to True only for sysroot "/": programs on PATH describe this
    machine, not a tree mounted elsewhere. timeout bounds each command; the whole
    detection is bounded too (4 x timeout + 1 s). mpi_components=False
    leaves Open MPI's component lists (software.ompi_pml, ompi_btl) empty: a plan that
    does not use UCX needs no ompi_info.
    """
    local = os.path.realpath(sysroot) == "/"
    if run_commands is None:
        run_commands = local
    ctx = Context(
        sysroot=sysroot,
        run_commands=run_commands,
        timeout=timeout,
        ssh_port=ssh_port,
        mpi_components=mpi_components,
        env=dict(os.environ) if local else {},
    )
    notes: List[Note] = []
    if not run_commands:
        notes.append(note("detect.no-commands") if local
                     else note("detect.no-commands-sysroot", sysroot=sysroot))
    probes = list(PROBES)
    # Longest chain inside one probe: a few commands in a row, each bounded by `timeout`;
    # the probes waiting on something do so side by side (run_in_turn).
    deadline = timeout * 4 + 1.0
    try:
        results = run_in_turn(probes, ctx, deadline)
    finally:  # an interrupt included: nothing started ahead is left behind
        # what no probe asked for (ompi_info where mpirun is MPICH's), and what still runs
        # past the deadline
        ctx.stop_started()
    founds = []
    for probe, found in zip(probes, results):
        founds.append(found if found is not None else
                      Found(notes=[note("probe.deadline", label=probe.label,
                                        seconds=f"{deadline:g}")]))
    return merge(founds, notes)
