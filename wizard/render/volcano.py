"""The plan as a Volcano job (`export --format volcano`, batch.volcano.sh/v1alpha1 Job): tasks
master and worker. The svc plugin gives every pod VC_MASTER_HOSTS and VC_WORKER_HOSTS (the
pods' names, pkg/controllers/job/plugins/svc) and the env plugin VC_TASK_INDEX; MPI's ssh
plugin makes the job's key pair and an ssh config naming the plan's port (--ssh-port) in
the job user's ~/.ssh (--ssh-key-file-path).

MPI: the master runs mpirun over the master's and the workers' hosts (a worker's sshd
listens on the plan's port). PyTorch: torchrun in every pod, the master's host the
rendezvous, node rank 0 for the master and 1 + VC_TASK_INDEX for a worker."""
from __future__ import annotations

from typing import Any, Dict, List

from ..i18n import _, comment
from ..job import Job
from .engine import JOB_NAME, NODES
from .mpirun import mca_settings, with_ssh_retries
from .kubernetes import container, header, pod_spec, script, ssh_port
from .shell import mpirun_lines, sshd_lines, torchrun_lines
from .yamltext import Note, dump

_HOSTS = r'''HOSTFILE=$(mktemp)
for h in ${VC_MASTER_HOSTS//,/ } ${VC_WORKER_HOSTS//,/ }; do
  for _try in $(seq 60); do getent hosts "$h" >/dev/null && break; sleep 2; done
  echo "$h slots=${SLOTS:-1}"
done > "$HOSTFILE"'''

_NNODES = '"$((VC_MASTER_NUM + VC_WORKER_NUM))"'
_MASTER = '"${VC_MASTER_HOSTS%%,*}"'


def master_script(job: Job) -> str:
    if job.mpi:
        return script([
            comment(_("Edit: your program and its arguments (mpirun starts it on every "
                      "host's slots).")),
            "PROGRAM=(hostname)",
            comment(_("The hosts from the svc plugin, once their names resolve.")),
            _HOSTS,
            *mpirun_lines(job, with_ssh_retries(mca_settings(job)),
                          '--hostfile "$HOSTFILE" "${PROGRAM[@]}"'),
        ])
    return script([comment(_("Edit: your script and its arguments."))] + torchrun_lines(
        _NNODES, "0", _MASTER, '"${NPROC_PER_NODE:-1}"', ["train.py"]))


def worker_script(job: Job) -> str:
    if job.mpi:
        return script(sshd_lines(job))
    return script([comment(_("Edit: your script and its arguments (the same as the "
                             "master's)."))] + torchrun_lines(
        _NNODES, '"$((VC_TASK_INDEX + 1))"', _MASTER, '"${NPROC_PER_NODE:-1}"', ["train.py"]))


def _task(job: Job, name: str, replicas: Any, text: str, master: bool) -> Dict[str, Any]:
    ports = [ssh_port(job)] if job.mpi and not master else []
    c = container(job, name, ["/bin/bash", "-c", text], runs_ranks=True, ports=ports)
    task: Dict[str, Any] = {"name": name, "replicas": replicas}
    if master:
        task["policies"] = [Note({"event": "TaskCompleted", "action": "CompleteJob"},
                                 _("The job is done when the master's program ends."))]
    task["template"] = {"spec": pod_spec(job, [c], runs_ranks=True, restart="OnFailure")}
    return task


def volcano_doc(job: Job) -> Dict[str, Any]:
    plugins: Dict[str, List[str]] = {"svc": [], "env": []}
    if job.mpi:
        plugins = {"ssh": [f"--ssh-port={job.ssh_port}", f"--ssh-key-file-path={job.ssh_dir}"],
                   "svc": []}
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": JOB_NAME},
        "spec": {
            "minAvailable": Note(NODES, _("Edit: the pods that start together: all of "
                                              "them (instances).")),
            "schedulerName": "volcano",
            "plugins": plugins,
            "tasks": [
                _task(job, "master", 1, master_script(job), True),
                _task(job, "worker", Note(NODES - 1, _(
                    "Edit: the number of workers (instances - 1).")), worker_script(job), False),
            ],
        },
    }


def render(job: Job) -> str:
    return dump(volcano_doc(job), header(job, _("a Volcano Job (batch.volcano.sh/v1alpha1)"),
                                         "vcjob"))
