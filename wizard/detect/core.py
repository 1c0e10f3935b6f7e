"""Run every probe concurrently and merge what they found into one Facts.

Each probe gets the same Context and its own Found. A probe that raises, or whose command
times out, leaves its part of Facts at the dataclass default and adds a plain note; nothing
escapes detect(). Wall time is that of the slowest probe, not the sum.
"""
from __future__ import annotations

import dataclasses
import importlib
import os
import shlex
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

from ..facts import Facts, Note
from ..i18n import N_
from ..vocab import DEFAULT_SSH_PORT
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
    each probe's import runs in its own thread, beside the programs other probes have
    already started, instead of all of them before the first program starts."""
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
    fields = {f.name for f in dataclasses.fields(Facts)} - {"notes", "warnings"}
    for f in founds:
        for key, value in f.values.items():
            outer, _, inner = key.partition(".")
            ok = outer in fields and (
                not inner or inner in {x.name for x in dataclasses.fields(getattr(defaults, outer))}
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
        top[outer] = dataclasses.replace(top.get(outer, getattr(defaults, outer)), **values)
    return Facts(**top, notes=tuple(all_notes), warnings=tuple(warnings))


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
    machine, not a tree mounted elsewhere. timeout bounds each command (PyTorch's import
    gets three times as long); the whole detection is bounded too. mpi_components=False
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
    # Longest chain inside one probe: a few commands in a row (torch alone gets 3 x timeout).
    deadline = timeout * 4 + 1.0
    # A thread per probe rather than concurrent.futures, which imports logging and more
    # (a tenth of detect's own import time); daemon threads, so that a probe still stuck past
    # the deadline cannot hold up the exit.
    results: List[Optional[Found]] = [None] * len(probes)

    def work(i: int, probe: Probe) -> None:
        results[i] = run_probe(probe, ctx)

    threads = [threading.Thread(target=work, args=(i, p), daemon=True,
                                name=f"hpcwizard-detect-{p.name}")
               for i, p in enumerate(probes)]
    for t in threads:
        t.start()
    end = time.monotonic() + deadline
    for t in threads:
        t.join(max(0.0, end - time.monotonic()))
    founds = []
    for probe, found in zip(probes, results):
        founds.append(found if found is not None else
                      Found(notes=[note("probe.deadline", label=probe.label,
                                        seconds=f"{deadline:g}")]))
    return merge(founds, notes)
