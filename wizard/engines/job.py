"""What every engine's file is made from: the plan's framework, network, port, user,
environment and mpirun arguments, and the image (the preset's, or the one built from
`export --format dockerfile`). Values that the plan does not know (how many nodes, the
program) get defaults that each file names as the lines to edit."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

from ..dockerfile import uses_preset
from ..launch import ENV_NAME
from ..plan import Plan

JOB_NAME = "hpcwizard-job"
NODES = 2  # the smallest job across instances; every file says where to change it
# The image `hpcwizard export --format dockerfile` builds (its header: docker build -t my-job)
OWN_IMAGE = "my-job:latest"
# What mpi-operator's controller gives mpirun's ssh (OMPI_MCA_plm_rsh_args in
# pkg/controller/mpi_job_controller.go): the launcher may start before a worker's sshd.
SSH_RETRIES = "-o ConnectionAttempts=10"


@dataclass(frozen=True)
class EngineJob:
    framework: str  # mpi | pytorch
    network: str  # tcp | ib
    port: int  # the workers' sshd (MPI)
    image: str
    preset: bool  # image is the recommendation's preset (else the user's own build)
    user: str
    uid: int
    home: str
    env: Tuple[Tuple[str, str], ...]  # the plan's launch environment (NCCL_*, UCX_*)
    mpirun_args: Tuple[str, ...]  # Open MPI 4 names (launch.mpirun_args_for makes 5's)
    host_keys_off: bool
    name: str = JOB_NAME
    nodes: int = NODES

    @property
    def is_root(self) -> bool:
        return self.uid == 0

    @property
    def ib(self) -> bool:
        return self.network == "ib"

    @property
    def mpi(self) -> bool:
        return self.framework == "mpi"

    @property
    def ssh_dir(self) -> str:
        return f"{self.home}/.ssh"


def job_of(plan: Plan) -> EngineJob:
    c, t = plan.choices, plan.target
    for k, _v in plan.launch_env:
        if not ENV_NAME.match(k):
            raise ValueError(f"launch environment name {k!r} is not a shell variable name")
    preset = uses_preset(plan)
    image = plan.recommendation.preset.image if preset else OWN_IMAGE  # type: ignore[union-attr]
    return EngineJob(framework=c.framework, network=c.network, port=int(c.ssh_port),
                     image=image, preset=preset, user=t.user, uid=t.uid, home=t.home,
                     env=tuple(plan.launch_env), mpirun_args=tuple(plan.mpirun_args),
                     host_keys_off=c.host_keys == "off")


def with_ssh_retries(args: Tuple[str, ...]) -> Tuple[str, ...]:
    """The plan's mpirun arguments with ssh retrying the connection (workers' sshd starting)."""
    out = list(args)
    for i in range(len(out) - 1):
        if out[i] == "--mca" and out[i + 1] == "plm_rsh_args" and i + 2 < len(out):
            out[i + 2] = f"{out[i + 2]} {SSH_RETRIES}"
    return tuple(out)


def passed_env(job: EngineJob) -> Tuple[str, ...]:
    """The environment names mpirun must pass to the ranks with -x (those the plan's mpirun
    arguments do not pass already): ranks started over ssh do not get the pod's env."""
    args = list(job.mpirun_args)
    passed = {args[i + 1] for i, a in enumerate(args[:-1]) if a == "-x"}
    return tuple(k for k, _v in job.env if k not in passed)
