"""The job's MCA settings as mpirun arguments, in the names of the Open MPI that runs.

Open MPI 4 runs on ORTE, Open MPI 5 on PRRTE 3 (Debian 13: Open MPI 5.0.7, PRRTE 3.0.8), and
the runtime's settings are named differently. The Job keeps the 4.x names; for 5.x they
become PRRTE's, given with --prtemca (Open MPI 5.0 docs/man-openmpi/man1/mpirun.1.rst: "It is
best to use --pmixmca and --prtemca"). PRRTE maps some old names itself (PRRTE 3.0
src/mca/schizo/ompi/schizo_ompi.c, check_prte_overlap), but only as a compatibility shim
applied to a job's parameters, and with Open MPI 5.0.0 '--mca plm_rsh_args "-p N"' was not
applied: ssh went to port 22 (open-mpi/ompi#12090). The native names need no shim.
  ssh arguments: plm_rsh_args (4.1 orte/mca/plm/rsh/plm_rsh_component.c) ->
                 plm_ssh_args (PRRTE 3.0 src/mca/plm/ssh/plm_ssh_component.c)
  orte_<x>:      orte/runtime/orte_mca_params.c -> prte_<x> (src/runtime/prte_mca_params.c)
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Tuple

from ..job import Job

_PRRTE_RENAMES = (("plm_rsh_", "plm_ssh_"), ("orte_", "prte_"))
# The TCP interface: MPI's own traffic (btl_tcp_if_include, opal/mca/btl/tcp in 4.1 and 5.0)
# and the runtime's: oob_tcp_if_include (4.1 orte/mca/oob/tcp/oob_tcp_component.c), in
# PRRTE 3.0 prte_if_include (src/runtime/prte_mca_params.c; oob_tcp_if_include is only a
# deprecated synonym there).
IFACE_ARGS_4 = ("--mca", "btl_tcp_if_include", "--mca", "oob_tcp_if_include")
IFACE_ARGS_5 = ("--mca", "btl_tcp_if_include", "--prtemca", "prte_if_include")
# The Open MPI version of the mpirun on PATH ("4.1.4"), empty for another MPI: every script
# that picks Open MPI 4's or 5's argument names runs this.
OMPI_VERSION_SH = "mpirun --version 2>/dev/null | awk '/\\(Open MPI\\)/ {print $NF; exit}'"
# What mpi-operator's controller gives mpirun's ssh (OMPI_MCA_plm_rsh_args in
# pkg/controller/mpi_job_controller.go): the launcher may start before a worker's sshd.
SSH_RETRIES = "-o ConnectionAttempts=10"
# Single-copy between the ranks of one instance off, where they may not read each other's
# memory (recipes/runtime.sh hw_rt_cma): Open MPI 4's vader BTL names its mechanism
# (opal/mca/btl/vader/btl_vader_component.c: none, cma, knem, xpmem); Open MPI 5 moved it
# to the smsc framework (docs/tuning-apps/networking/shared-memory.rst), whose cma
# component is left out. Both then copy through /dev/shm (two copies).
NO_CMA_MCA_4 = {"btl_vader_single_copy_mechanism": "none"}
NO_CMA_MCA_5 = {"smsc": "^cma"}
# UCX (pml ucx): every transport but cma. UCX checks scope 2 itself, but tests the
# capability as a mask (ecap & CAP_SYS_PTRACE, src/uct/sm/scopy/cma/cma_md.c: bits 0, 1 and
# 4), which Docker's default capabilities pass. A UCX_TLS the user set is theirs, kept.
NO_CMA_ENV = {"UCX_TLS": "^cma"}


def runtime_name(name: str, major: Optional[int]) -> Tuple[str, str]:
    """(flag, name) of an MCA setting (Open MPI 4 name) for Open MPI `major`: PRRTE's
    runtime settings take --prtemca and their own names from 5 on."""
    if major is not None and major >= 5:
        for old, new in _PRRTE_RENAMES:
            if name.startswith(old):
                return "--prtemca", new + name[len(old):]
    return "--mca", name


def mca_settings(job: Job) -> Dict[str, str]:
    """The job's MCA settings (Open MPI 4 names), first the one every MPI job has: ssh to the
    job's port (plm_rsh_args), written here, where the port becomes text."""
    if not job.mpi:
        return dict(job.mca)
    return {"plm_rsh_args": f"-p {job.ssh_port}", **job.mca}


def with_ssh_retries(mca: Mapping[str, str]) -> Dict[str, str]:
    """The settings with ssh retrying the connection (the workers' sshd may be starting)."""
    return {k: f"{v} {SSH_RETRIES}" if k == "plm_rsh_args" else v for k, v in mca.items()}


def mca_args(mca: Mapping[str, str], passed: Tuple[str, ...] = (),
             major: Optional[int] = None) -> List[str]:
    """mpirun's arguments: each setting in `major`'s names, then -x for each passed name."""
    out: List[str] = []
    for name, value in mca.items():
        out += [*runtime_name(name, major), value]
    for name in passed:
        out += ["-x", name]
    return out


def no_cma_args(major: Optional[int]) -> List[str]:
    """mpirun's arguments that turn single copy off, for Open MPI `major` (None: 4's)."""
    return mca_args(NO_CMA_MCA_5 if major is not None and major >= 5 else NO_CMA_MCA_4)


def mpirun_args(job: Job, major: Optional[int] = None) -> List[str]:
    """The job's mpirun arguments for Open MPI `major` (None: 4's names)."""
    return mca_args(mca_settings(job), job.passed, major)


def iface_args(iface: str, major: Optional[int]) -> List[str]:
    """mpirun arguments that keep MPI's and its runtime's TCP traffic on `iface`."""
    names = IFACE_ARGS_5 if major is not None and major >= 5 else IFACE_ARGS_4
    return [names[0], names[1], iface, names[2], names[3], iface]


def runtime_env(job: Job) -> List[Tuple[str, str]]:
    """The runtime settings (those PRRTE renames: the ssh port) as environment variables for
    Open MPI 4 (ORTE reads OMPI_MCA_<name>) and 5 (PRRTE reads PRTE_MCA_<its name>)."""
    env: List[Tuple[str, str]] = []
    for name, value in mca_settings(job).items():
        flag, five = runtime_name(name, 5)
        if flag == "--prtemca":
            env += [(f"OMPI_MCA_{name}", value), (f"PRTE_MCA_{five}", value)]
    return env
