"""What a job on the planned instances needs, as data: the value the plan hands every
renderer (hpcwizard.render). Settings are mappings, not command-line fragments: each
renderer writes them in its target's words (mpirun arguments for Open MPI 4 or 5, a
Dockerfile's ENV, a manifest's env list), and none reads another's text back."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping, Tuple, Union


class Settings(Mapping[str, str]):
    """name -> value in the order given, immutable and hashable: a frozen Job's environment
    and MCA settings cannot be changed through it, and a Job can be a key."""

    __slots__ = ("_items",)

    def __init__(self, items: Union[Mapping[str, str], Iterable[Tuple[str, str]]] = ()) -> None:
        self._items: Tuple[Tuple[str, str], ...] = tuple(dict(items).items())

    def __getitem__(self, name: str) -> str:
        for key, value in self._items:
            if key == name:
                return value
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return (key for key, _value in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:  # equal as mappings are equal, whatever their order
        return hash(frozenset(self._items))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict(self._items) == dict(other.items())
        return NotImplemented

    def __repr__(self) -> str:
        return f"Settings({dict(self._items)!r})"


@dataclass(frozen=True)
class Job:
    framework: str  # mpi | pytorch
    network: str  # tcp | ib
    user: str
    uid: int
    home: str
    ssh_port: int  # the job's sshd (MPI); PyTorch's torchrun needs none
    host_keys: str  # pinned | off
    hosts: str = ""  # where the job's hosts come from: ssh_config patterns ('' : derived)
    # The job's environment (NCCL_*, UCX_*, GLOO_*), in the plan's order.
    env: Mapping[str, str] = field(default_factory=Settings)
    # Open MPI MCA settings beyond ssh's port, in Open MPI 4's names (pml): the renderer
    # adds the port's and names them for the Open MPI that runs (hpcwizard.render.mpirun).
    mca: Mapping[str, str] = field(default_factory=Settings)
    # environment names mpirun passes to the ranks itself (-x), before the rest of env
    passed: Tuple[str, ...] = ()
    os_label: str = ""
    mode: str = "auto"  # the choice: auto | preset | manual
    recommended: str = ""  # the recommendation's path: preset | configure
    preset_image: str = ""  # the preset's image ('' : none for this framework and network)

    def __post_init__(self) -> None:
        # whatever mapping the plan gives becomes Settings: the Job stays frozen all through
        object.__setattr__(self, "env", Settings(self.env))
        object.__setattr__(self, "mca", Settings(self.mca))

    @property
    def mpi(self) -> bool:
        return self.framework == "mpi"

    @property
    def ib(self) -> bool:
        return self.network == "ib"

    @property
    def is_root(self) -> bool:
        return self.uid == 0

    @property
    def host_keys_off(self) -> bool:
        return self.host_keys == "off"

    @property
    def ssh_dir(self) -> str:
        return f"{self.home}/.ssh"

    @property
    def uses_preset(self) -> bool:
        """An image is built FROM the preset: asked for, or recommended in auto mode."""
        return bool(self.preset_image) and (
            self.mode == "preset" or (self.mode == "auto" and self.recommended == "preset"))


@dataclass(frozen=True)
class EnvForward:
    """Which of the launching shell's variables mpirun gives every rank (-x NAME, for each
    one set there): the user's environment (a venv, conda, the thread counts) beside the
    plan's, since non-interactive ssh reads no profile on the other instances."""
    names: Tuple[str, ...]
    prefixes: Tuple[str, ...]
    variable: str  # the launch script's variable that names more, separated by blanks or commas

    def listed(self) -> str:
        """The names and prefixes: 'PATH, ..., OMP_*, MKL_*'."""
        return ", ".join([*self.names, *(p + "*" for p in self.prefixes)])

    def rule(self) -> str:
        """The rule in one line, as the launch script's usage and the docs state it."""
        return (f"{self.listed()}, the plan's NCCL_*/UCX_*, and the names in {self.variable}, "
                "each one set where the script runs")


# The one rule of the job's environment (hpcwizard.render.launch writes it in).
FORWARD = EnvForward(
    names=("PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX"),
    prefixes=("OMP_", "MKL_"),
    variable="FORWARD_ENV",
)
