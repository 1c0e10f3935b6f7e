"""The plan as a Kubeflow PyTorch job: `export --format pytorchjob` (kubeflow.org/v1
PyTorchJob, Kubeflow Training Operator v1: a Master and Workers, torchrun in each with
nprocPerNode processes) or `export --format trainjob` (trainer.kubeflow.org/v1alpha1 TrainJob,
Kubeflow Trainer v2, on its torch-distributed runtime): asking for a TrainJob is choosing that
format. The operator gives torchrun its rendezvous (PET_NNODES, PET_NODE_RANK,
PET_MASTER_ADDR, PET_MASTER_PORT, PET_NPROC_PER_NODE): the command is torchrun and the
script."""
from __future__ import annotations

from typing import Any, Dict

from ..i18n import _
from ..job import Job
from ..validate import BadInput
from .engine import JOB_NAME, NODES, image
from .kubernetes import (RDMA_RESOURCE, SHM_VOLUME, container, env_list, header, image_note,
                         pod_spec, security, wants_shm)
from .yamltext import Note, dump

PROGRAM = ["torchrun", "train.py"]


def _program_note() -> str:
    return _("Edit: your script and its arguments; the operator sets torchrun's rendezvous "
             "(PET_*).")


def _torch_job(job: Job) -> Job:
    if job.mpi:
        raise BadInput(_("a PyTorchJob or TrainJob runs PyTorch: use --framework pytorch, or "
                         "--format mpijob for MPI"))
    return job


def _replica(job: Job, replicas: Any) -> Dict[str, Any]:
    c = container(job, "pytorch", PROGRAM, runs_ranks=True, command_note=_program_note())
    return {"replicas": replicas, "restartPolicy": "OnFailure",
            "template": {"spec": pod_spec(job, [c], runs_ranks=True)}}


def pytorchjob_doc(job: Job) -> Dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": JOB_NAME},
        "spec": {
            "nprocPerNode": Note("1", _("Edit: processes per pod (torchrun's --nproc-per-node):"
                                        " the GPUs each pod gets, or auto.")),
            "pytorchReplicaSpecs": {
                "Master": _replica(job, 1),
                "Worker": _replica(job, Note(NODES - 1, _(
                    "Edit: the number of pods besides the master (instances - 1)."))),
            },
        },
    }


def trainjob_doc(job: Job) -> Dict[str, Any]:
    trainer: Dict[str, Any] = {
        "image": Note(image(job), image_note(job)),
        "command": Note(list(PROGRAM), _program_note()),
        "numNodes": Note(NODES, _("Edit: the number of nodes (instances).")),
        "numProcPerNode": Note(1, _("Edit: processes per node: the GPUs each node gets.")),
    }
    if job.env:
        trainer["env"] = Note(env_list(job), _("The plan's environment (NCCL_*)."))
    if job.ib:
        trainer["resourcesPerNode"] = Note({"limits": {RDMA_RESOURCE: 1}}, _(
            "Edit: the resources of each node (the RDMA device plugin's {resource}, "
            "nvidia.com/gpu).").format(resource=RDMA_RESOURCE))
    spec: Dict[str, Any] = {
        "runtimeRef": Note({"name": "torch-distributed"}, _(
            "The Trainer's PyTorch runtime (kubectl get clustertrainingruntimes).")),
        "trainer": trainer,
    }
    patch = _node_patch(job)
    if patch:
        spec["runtimePatches"] = Note([patch], _(
            "What the torch-distributed runtime's pod template lacks, added to its node "
            "container:\na memory-backed /dev/shm and, for InfiniBand, IPC_LOCK."))
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": JOB_NAME},
        "spec": spec,
    }


# The replicated job and the container the torch-distributed runtime runs torchrun in
# (kubeflow/trainer manifests/base/runtimes/torch_distributed.yaml): both named node.
RUNTIME_NODE = "node"


def _node_patch(job: Job) -> Dict[str, Any]:
    """A runtimePatches entry (Trainer v2.2 and later) giving the runtime's node container what the
    PyTorchJob's container gets: the job user's uid, IPC_LOCK (RDMA), /dev/shm in memory."""
    c: Dict[str, Any] = {"name": RUNTIME_NODE}
    ctx = security(job, runs_ranks=True)
    if ctx:
        c["securityContext"] = ctx
    pod: Dict[str, Any] = {"containers": [c]}
    if wants_shm(job):
        c["volumeMounts"] = [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}]
        pod["volumes"] = [{"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}}]
    if len(c) == 1:
        return {}
    return {"manager": "hpcwizard", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": RUNTIME_NODE, "template": {"spec": {"template": {
            "spec": pod}}}}]}}}}


def render(job: Job) -> str:
    """The PyTorchJob (Training Operator v1)."""
    _torch_job(job)
    return dump(pytorchjob_doc(job), header(job, _("a Kubeflow PyTorchJob (kubeflow.org/v1)"),
                                            "pytorchjob"))


def render_trainjob(job: Job) -> str:
    """The TrainJob (Trainer v2)."""
    _torch_job(job)
    return dump(trainjob_doc(job), header(
        job, _("a Kubeflow TrainJob (trainer.kubeflow.org/v1alpha1)"), "trainjob"))
