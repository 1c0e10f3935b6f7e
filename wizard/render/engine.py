"""What every engine's file is made from besides the Job: the image (the preset's, or the one
built from `export --format dockerfile`) and the values the plan does not know (how many
nodes, the job's name), defaults each file names as the lines to edit."""
from __future__ import annotations

from typing import Tuple

from ..job import Job

JOB_NAME = "hpcwizard-job"
NODES = 2  # the smallest job across instances; every file says where to change it
# The image `hpcwizard export --format dockerfile` builds (its header: docker build -t my-job)
OWN_IMAGE = "my-job:latest"


def image(job: Job) -> str:
    return job.preset_image if job.uses_preset else OWN_IMAGE


def passed_env(job: Job) -> Tuple[str, ...]:
    """The environment names mpirun must pass to the ranks with -x besides those it passes
    already (job.passed): ranks started over ssh do not get the pod's env."""
    return tuple(k for k in job.env if k not in job.passed)
