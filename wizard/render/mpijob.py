"""The plan as a Kubeflow MPI Operator job (`export --format mpijob`, kubeflow.org/v2beta1
MPIJob): one Launcher that runs mpirun, Workers whose sshd listens on the plan's port.

What the operator does (mpi-operator pkg/controller/mpi_job_controller.go): it makes the job's
SSH key pair as a Secret and mounts it at sshAuthMountPath, writes the hostfile
(/etc/mpi/hostfile, slotsPerWorker slots a worker) and gives the launcher
OMPI_MCA_orte_default_hostfile and OMPI_MCA_plm_rsh_args="-o ConnectionAttempts=10".
Those come after the container's own env, so an OMPI_MCA_plm_rsh_args of ours would be
replaced: the port goes on mpirun's command line instead, in Open MPI 4's names or, when the
image's mpirun is Open MPI 5, PRRTE's (--prtemca plm_ssh_args), with the operator's retries.
"""
from __future__ import annotations

from typing import Any, Dict

from ..i18n import _, comment
from ..job import Job
from ..validate import BadInput
from .engine import JOB_NAME, NODES
from .mpirun import mca_settings, with_ssh_retries
from .kubernetes import container, header, pod_spec, script, ssh_port
from .shell import mpirun_lines, sshd_lines
from .yamltext import Note, dump

HOSTFILE = "/etc/mpi/hostfile"  # the operator's (configMountPath, hostfileName)


def launcher_script(job: Job) -> str:
    return script([
        comment(_("Edit: your program and its arguments (mpirun starts it on every worker's "
                  "slots).")),
        "PROGRAM=(hostname)",
        *mpirun_lines(job, with_ssh_retries(mca_settings(job)),
                      f'--hostfile {HOSTFILE} "${{PROGRAM[@]}}"'),
    ])


def worker_script(job: Job) -> str:
    return script(sshd_lines(job))


def mpijob_doc(job: Job) -> Dict[str, Any]:
    launcher = container(job, "mpi-launcher", ["/bin/bash", "-c", launcher_script(job)],
                         runs_ranks=False)
    worker = container(job, "mpi-worker", ["/bin/bash", "-c", worker_script(job)],
                       runs_ranks=True, env=False, ports=[ssh_port(job)],
                       command_note=_("sshd in the foreground on port {port}: mpirun on the "
                                      "launcher starts the ranks through it.").format(
                           port=job.ssh_port))
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": JOB_NAME},
        "spec": {
            "slotsPerWorker": Note(1, _("Edit: ranks per worker (the hostfile's slots).")),
            "runPolicy": {"cleanPodPolicy": "Running"},
            "sshAuthMountPath": Note(job.ssh_dir, _(
                "The operator mounts the job's SSH keys (a Secret it makes) here, over the "
                "image's\n~/.ssh of {user}.").format(user=job.user)),
            "mpiImplementation": "OpenMPI",
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": pod_spec(
                    job, [launcher], runs_ranks=False)}},
                "Worker": {
                    "replicas": Note(NODES, _("Edit: the number of workers (instances).")),
                    "template": {"spec": pod_spec(job, [worker], runs_ranks=True)}},
            },
        },
    }


def render(job: Job) -> str:
    if not job.mpi:
        raise BadInput(_("an MPIJob runs MPI: use --framework mpi, or --format pytorchjob for "
                         "PyTorch"))
    return dump(mpijob_doc(job), header(job, _("a Kubeflow MPIJob (kubeflow.org/v2beta1)"),
                                        "mpijob"))
