"""The programs detect runs first, in one place, and start(), which begins them all before
any probe does its reading.

They then run on the other cores while the probes read files and parse, in one thread;
each probe takes its program's result with `ctx.run` of the same argv, so a probe reads as
if it ran the program itself. What is asked only after an answer (sshd -h when -V said
nothing, `sudo -n true`, rpm after dpkg, the python3 that reads PyTorch where its files do
not answer, df and ulimit for another tree) runs when it is asked.

This module imports nothing of the probes' before the programs have started; then the
mirrors probe's connections begin too (name resolution and a TCP handshake, tens of
milliseconds on a cloud machine), for the last probe to take.
"""
from __future__ import annotations

import os
from typing import List, Tuple

from .base import Context
from .run import which

Argv = Tuple[str, ...]

GPU_QUERY: Argv = ("nvidia-smi", "--query-gpu=index,name,memory.total,driver_version",
                   "--format=csv,noheader,nounits")
GPU_TABLE: Argv = ("nvidia-smi",)  # its header names the CUDA version the driver supports
IBV_DEVINFO: Argv = ("ibv_devinfo",)
IP_ADDR: Argv = ("ip", "-j", "addr")
SSH_VERSION: Argv = ("ssh", "-V")
MPIRUN_VERSION: Argv = ("mpirun", "--version")
OMPI_INFO: Argv = ("ompi_info",)  # a quarter of a second: the one detect waits for most
UCX_VERSION: Argv = ("ucx_info", "-v")
UCX_DEVICES: Argv = ("ucx_info", "-d")
SUDO_VALIDATE: Argv = ("sudo", "-n", "-v")

SSHD_PLACES = ("usr/sbin/sshd", "usr/local/sbin/sshd", "sbin/sshd", "usr/bin/sshd")
_PACKAGE_DBS = {"dpkg": ("var/lib/dpkg/status",), "rpm": ("var/lib/rpm", "usr/lib/sysimage/rpm")}


def find_sshd(ctx: Context) -> str:
    """The sshd of the tree (its usual places), else of PATH on this machine; "" for none."""
    for rel in SSHD_PLACES:
        if ctx.exists(rel):
            return "/" + rel
    if ctx.local and ctx.run_commands:
        return which("sshd") or ""
    return ""


def sshd_version(ctx: Context, sshd: str) -> Argv:
    """`sshd -V`; for another tree, the sshd on PATH (the tree's own cannot run here)."""
    return (sshd if ctx.local else "sshd", "-V")


def package_queries(ctx: Context) -> List[Tuple[str, Argv]]:
    """(tool, argv) for each package database in the tree: dpkg's, then rpm's. A tool
    without its database could only answer "nothing installed"."""
    dpkg: Argv = ("dpkg-query", "-W", "-f=${Package}\t${db:Status-Abbrev}\t${Version}\n")
    rpm: Argv = ("rpm", "-qa", "--qf", "%{NAME}\t%{VERSION}-%{RELEASE}\n")
    if not ctx.local:  # ask about the tree's package database, not this machine's
        dpkg = dpkg[:1] + (f"--admindir={ctx.path('var/lib/dpkg')}",) + dpkg[1:]
        rpm = rpm[:1] + ("--root", ctx.path("")) + rpm[1:]
    return [(tool, argv) for tool, argv in (("dpkg", dpkg), ("rpm", rpm))
            if any(ctx.exists(db) for db in _PACKAGE_DBS[tool])]


def start(ctx: Context) -> None:
    """Begin every program the probes will run first; nothing where commands are off."""
    if not ctx.run_commands:
        return
    queries = package_queries(ctx)
    if queries:
        ctx.start(queries[0][1])  # the second database's tool only if the first fails
    for argv in (SSH_VERSION, GPU_QUERY, GPU_TABLE, IBV_DEVINFO, MPIRUN_VERSION,
                 UCX_VERSION, UCX_DEVICES, IP_ADDR):
        ctx.start(argv)
    if ctx.mpi_components:
        ctx.start(OMPI_INFO)  # stopped unasked where mpirun turns out to be MPICH's
    sshd = find_sshd(ctx)
    if sshd:
        ctx.start(sshd_version(ctx, sshd))
    # sudo's first question only: its second is asked when the first allows it, since each
    # refusal is logged (and may be mailed to the administrator). Root asks none.
    if os.getuid() != 0:
        ctx.start(SUDO_VALIDATE)
    from . import mirrors  # after the programs: its import and its reading wait for them

    try:
        mirrors.start(ctx)
    except Exception:  # noqa: BLE001 - the probe meets it again in its turn, and says so
        pass
