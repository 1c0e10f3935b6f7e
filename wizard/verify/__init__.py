"""Does it work? `verify(plan, facts, hosts)` runs checks here and across the job's instances
and returns them as data (Check, Report): the CLI formats them, the TUI shows them; nothing
here prints.

Every check records the exact command it ran, so a user can run it again by hand. A failed
check carries the diagnoses the signature table (recipes/diagnoses.toml, scope "job") finds
in the command's output — or, when a command fails silently (a name that does not resolve,
a port that does not answer), the table's entry for that failure — and one plain line.

The package, by the question each part answers:

    here.py         checks on this instance (sshd, ssh settings, IB devices, torch)
    peer.py         checks on each peer: name, SSH port, key login
    cluster.py      checks across the whole cluster: mpirun, the all-reduces, transports
    needs.py        what a check needs (the framework, SSH, a peer login, torch...) and the
                    reason it is skipped without it; spec.py: a check as data
    orchestrate.py  verify(): which checks run, which are skipped and why
    probes.py       the typed questions checks ask (TcpConnect, SshCommand, Mpirun...)
    system.py       System: answers probes by running them (hpcwizard.proc); tests fake it
    parse.py        reading the commands' output and logs
    programs/       the test programs (allreduce.c, allreduce.py, torch_probe.py)
"""
from __future__ import annotations

from typing import Any

from .cluster import RENDEZVOUS_PORT, _read_owned, mpi_setup
from .needs import no_ssh_reason
from .orchestrate import MAX_WORKERS, verify
from .parse import (effective, ib_transports, parse_allreduce, parse_ucx_devices, route_dev,
                    transport_from_nccl_log, transport_from_ucx_log)
from .probes import CONNECT_TIMEOUT, JOB_TIMEOUT, SSH_OPTS, SSH_TIMEOUT, Ran
from .results import FAIL, PASS, SKIP, Check, Report
from .shipped import program
from .system import System

__all__ = ["verify", "Check", "Report", "System", "Ran", "PASS", "FAIL", "SKIP",
           "MAX_WORKERS", "CONNECT_TIMEOUT", "SSH_TIMEOUT", "JOB_TIMEOUT", "SSH_OPTS",
           "RENDEZVOUS_PORT", "no_ssh_reason", "effective", "parse_ucx_devices",
           "ib_transports", "route_dev", "parse_allreduce", "transport_from_ucx_log",
           "transport_from_nccl_log", "mpi_setup", "_read_owned",
           "MPI_ALLREDUCE_C", "MPI_SAMEHOST_C", "ALLREDUCE_PY", "TORCH_PROBE"]

_PROGRAMS = {"MPI_ALLREDUCE_C": "allreduce.c", "MPI_SAMEHOST_C": "samehost.c",
             "ALLREDUCE_PY": "allreduce.py", "TORCH_PROBE": "torch_probe.py"}


def __getattr__(name: str) -> Any:
    """The test programs' texts, read from programs/ when first asked for."""
    if name in _PROGRAMS:
        return program(_PROGRAMS[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
