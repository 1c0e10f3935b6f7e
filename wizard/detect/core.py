"""Run every probe concurrently and merge what they found into one Facts.

Each probe gets the same Context and its own Found. A probe that raises, or whose command
times out, leaves its part of Facts at the dataclass default and adds a plain note; nothing
escapes detect(). Wall time is that of the slowest probe, not the sum.
"""
from __future__ import annotations

import dataclasses
import os
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

from ..facts import Facts
from . import gpu, hardware, mirrors, net, os_release, rdma, runtime, software, ssh_dir, user
from .base import Context, Found
from .run import CommandTimeout


# The first words of the note detect() adds when it runs no command; summary looks for it.
NO_COMMANDS_NOTE = "Commands were not run"


@dataclass(frozen=True)
class Probe:
    name: str
    label: str  # what it finds out, as it reads in a note: "the GPUs"
    func: Callable[[Context, Found], None]


PROBES: Sequence[Probe] = (
    Probe("os", "the distribution", os_release.probe),
    Probe("user", "the user and their sudo rights", user.probe),
    Probe("runtime", "the container and PID 1", runtime.probe),
    Probe("hostname", "the host name", runtime.probe_hostname),
    Probe("hardware", "CPUs and memory", hardware.probe),
    Probe("net", "the network interfaces", net.probe),
    Probe("rdma", "the RDMA devices", rdma.probe),
    Probe("gpu", "the GPUs", gpu.probe),
    Probe("ssh", "SSH", software.probe_ssh),
    Probe("ssh_dir", "the SSH directory", ssh_dir.probe),
    Probe("mpi", "MPI", software.probe_mpi),
    Probe("ucx", "UCX", software.probe_ucx),
    Probe("torch", "PyTorch", software.probe_torch),
    Probe("packages", "the installed packages", software.probe_packages),
    Probe("mirrors", "the package mirrors", mirrors.probe),
)


def run_probe(probe: Probe, ctx: Context) -> Found:
    """Run one probe; turn any failure into a note."""
    found = Found()
    try:
        probe.func(ctx, found)
    except CommandTimeout as exc:
        # What the probe learned before the command hung is still true; keep it.
        found.note(f"{exc}: {probe.label} {'are' if probe.label.endswith('s') else 'is'} "
                   "partly unknown.")
    except Exception as exc:  # noqa: BLE001 - a probe bug must not stop detection
        found = Found(notes=found.notes)
        found.note(f"Could not check {probe.label}: {type(exc).__name__}: {exc}")
    return found


def merge(founds: Sequence[Found], notes: Sequence[str] = ()) -> Facts:
    top: Dict[str, Any] = {}
    nested: Dict[str, Dict[str, Any]] = {}
    all_notes: List[str] = list(notes)
    warnings: List[str] = []
    defaults = Facts()
    fields = {f.name for f in dataclasses.fields(Facts)} - {"notes", "warnings"}
    for f in founds:
        for key, value in f.values.items():
            outer, _, inner = key.partition(".")
            ok = outer in fields and (
                not inner or inner in {x.name for x in dataclasses.fields(getattr(defaults, outer))}
            )
            if not ok:  # a probe bug; say so rather than fail
                all_notes.append(f"Internal: a probe reported an unknown fact '{key}'.")
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
    ssh_port: int = 2222,
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
    notes: List[str] = []
    if not run_commands:
        where = "" if local else f" (the system at {sysroot} is not the one running)"
        notes.append(
            f"{NO_COMMANDS_NOTE}{where}: sudo rights, ssh/MPI/UCX/PyTorch versions, "
            "installed packages and nvidia-smi details are unknown."
        )
    probes = list(PROBES)
    # Longest chain inside one probe: a few commands in a row (torch alone gets 3 x timeout).
    deadline = timeout * 4 + 1.0
    pool = ThreadPoolExecutor(max_workers=len(probes), thread_name_prefix="hpcwizard-detect")
    try:
        futures = [pool.submit(run_probe, p, ctx) for p in probes]
        wait(futures, timeout=deadline)
        founds = []
        for probe, fut in zip(probes, futures):
            if fut.done():
                founds.append(fut.result())
            else:
                fut.cancel()
                founds.append(Found(notes=[
                    f"Checking {probe.label} did not finish within {deadline:g} s: "
                    "it is left unknown."
                ]))
    finally:
        pool.shutdown(wait=False)
    return merge(founds, notes)
