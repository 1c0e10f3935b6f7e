"""What the Kubernetes jobs share: the container (image, command, the plan's environment),
and for InfiniBand the RDMA device plugin's resource, IPC_LOCK (RDMA pins memory) and a
memory-backed /dev/shm (NCCL and UCX move data between a node's processes through it; a
container's default is 64 MiB). No key material: the operators make the job's SSH keys."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from .. import __version__
from ..i18n import _
from ..job import Job
from .engine import JOB_NAME, image
from .shell import checked_env
from .yamltext import Note

# The resource the NVIDIA Network Operator's RDMA shared device plugin advertises by default;
# a cluster's own plugin may name it differently (kubectl describe node).
RDMA_RESOURCE = "rdma/rdma_shared_device_a"
SHM_VOLUME = "dshm"


def header(job: Job, what: str, kind: str) -> str:
    """The comment lines at the top of a manifest: what it is, how to apply it, what to edit."""
    lines = [
        _("Written by hpcwizard {version}: the plan as {what}, {framework} over "
          "{network}.").format(version=__version__, what=what, framework=job.framework,
                                network=job.network),
        _("Apply it with: kubectl apply -f FILE; follow it with: kubectl get {kind} "
          "{name}").format(kind=kind, name=JOB_NAME),
        _("Edit the lines marked 'Edit:': the image, the replicas (instances), the resources "
          "and\nthe program."),
        _("It carries no key material: the operator makes the job's SSH keys.") if job.mpi
        else _("It carries no key material."),
        f"framework={job.framework} network={job.network}"
        + (f" ssh_port={job.ssh_port}" if job.mpi else ""),  # PyTorch has no SSH
    ]
    return "\n".join(lines)


def image_note(job: Job) -> str:
    if job.uses_preset:
        return _("Edit: the image (here the preset image the plan recommends).")
    return _("Edit: the image. Build it with\n  hpcwizard export --format dockerfile -o "
             "DIR/Dockerfile && docker build -t {image} DIR\npush it to a registry the "
             "cluster pulls from, and name it here.").format(image=image(job))


def env_list(job: Job) -> List[Dict[str, str]]:
    return [{"name": k, "value": v} for k, v in checked_env(job)]


def resources(job: Job) -> Note:
    if job.ib:
        return Note({"limits": {RDMA_RESOURCE: 1}},
                    _("Edit: the resources. {resource} is the RDMA device plugin's "
                      "resource\n(its name on your cluster: kubectl describe node); add "
                      "nvidia.com/gpu, cpu and\nmemory as the job needs.").format(
                        resource=RDMA_RESOURCE))
    return Note({}, _("Edit: the resources (limits: nvidia.com/gpu, cpu, memory) as the job "
                      "needs."))


def wants_shm(job: Job) -> bool:
    return job.ib or not job.mpi


def security(job: Job, runs_ranks: bool) -> Optional[Dict[str, Any]]:
    ctx: Dict[str, Any] = {}
    if not job.is_root:
        ctx["runAsUser"] = job.uid
    if job.ib and runs_ranks:
        ctx["capabilities"] = Note({"add": ["IPC_LOCK"]},
                                   _("RDMA registers (pins) the job's memory: IPC_LOCK lifts "
                                     "the locked-memory limit."))
    return ctx or None


def container(job: Job, name: str, command: Sequence[str], *, runs_ranks: bool,
              env: bool = True, ports: Sequence[Dict[str, Any]] = (),
              command_note: str = "") -> Dict[str, Any]:
    c: Dict[str, Any] = {"name": name, "image": Note(image(job), image_note(job))}
    c["command"] = Note(list(command), command_note) if command_note else list(command)
    if env and job.env:
        c["env"] = Note(env_list(job), _("The plan's environment (NCCL_*, UCX_*)."))
    if ports:
        c["ports"] = list(ports)
    if runs_ranks:
        c["resources"] = resources(job)
    ctx = security(job, runs_ranks)
    if ctx:
        c["securityContext"] = ctx
    if runs_ranks and wants_shm(job):
        c["volumeMounts"] = [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}]
    return c


def pod_spec(job: Job, containers: List[Dict[str, Any]], *, runs_ranks: bool,
             restart: str = "") -> Dict[str, Any]:
    spec: Dict[str, Any] = {"containers": containers}
    if restart:
        spec["restartPolicy"] = restart
    if runs_ranks and wants_shm(job):
        spec["volumes"] = [Note({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}},
                                _("/dev/shm in memory: NCCL and UCX pass data between a "
                                  "node's processes through it."))]
    return spec


def ssh_port(job: Job) -> Dict[str, Any]:
    return {"name": "ssh", "containerPort": job.ssh_port}


def script(lines: Sequence[str]) -> str:
    return "\n".join(["set -euo pipefail", *lines]) + "\n"
