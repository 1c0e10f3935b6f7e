"""The test programs verify runs, as shipped in the package (programs/): read through
importlib.resources, so that they load from a wheel and from the zipapp alike."""
from __future__ import annotations

from functools import lru_cache

MPI_ALLREDUCE = "allreduce.c"  # built with mpicc on this instance, copied to the other
MPI_SAMEHOST = "samehost.c"  # two ranks on one instance, 1 MiB each way (single copy or not)
TORCH_ALLREDUCE = "allreduce.py"  # run through the launch script on two instances
TORCH_PROBE = "torch_probe.py"  # `python3 -c`: does torch import, with what


@lru_cache(maxsize=None)
def program(name: str) -> str:
    from importlib import resources

    return resources.files(__package__).joinpath("programs").joinpath(name).read_text("utf-8")
