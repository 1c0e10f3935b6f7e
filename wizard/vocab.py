"""The words a job is described in, defined once: each choice and the values it allows, the
defaults, the conditions a recipe's `when` may name (and how each is decided), and the
{{placeholders}} a recipe may use. argparse (cli.py), the Choose screen, the catalog's checks
of a recipe and make_choices all read them here, so that adding a framework or a network is a
line here and the recipe that uses it.

Modules read these through the module (`vocab.FRAMEWORK`), not by importing the names: what
is here at the time of the call is what counts, and a test can add a value.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Dict, Mapping, Tuple

from .i18n import N_

if TYPE_CHECKING:
    from .choices import Choices
    from .facts import Facts

# A value lands in widget ids ("framework-mpi"), records, recipes and shell text: a plain word.
_VALUE_ID = re.compile(r"^[a-z][a-z0-9]*$")


@dataclass(frozen=True)
class Value:
    """One value a choice allows (framework mpi, network ib)."""
    id: str  # as given on the command line, kept in a record, named by a recipe
    label: str = ""  # as the Choose screen shows it, through _() (a product name stays as is)
    help: str = ""  # the help of its own flag, for a choice made by one flag per value (mode)
    rdma: bool = False  # needs an active RDMA port: Choose offers it only where one is
    # a framework whose job starts without SSH (torchrun's rendezvous): the SSH settings
    # (port, host keys, peers) do not apply, and no front end offers or keeps them
    no_ssh: bool = False

    def __post_init__(self) -> None:
        if not _VALUE_ID.match(self.id):
            raise ValueError(f"choice value {self.id!r}: lower-case letters and digits only")


def uses_ssh(framework: str) -> bool:
    """Whether the framework's job starts over SSH (mpirun), so that the SSH settings apply."""
    return not any(v.no_ssh for v in FRAMEWORK.values if v.id == framework)


@dataclass(frozen=True)
class Choice:
    """A question a job answers, the values it allows and its default."""
    name: str  # the Choices field, the Choose screen's widget id, argparse's dest
    what: str  # how a refusal names it ("host-key policy 'x' is not one of ...")
    values: Tuple[Value, ...]
    default: str
    # each value is also a condition "<prefix>_<value>" that a recipe's `when` may name
    condition_prefix: str = ""

    def __post_init__(self) -> None:
        if self.default not in self.ids:
            raise ValueError(f"choice {self.name}: default {self.default!r} is not a value")

    @property
    def ids(self) -> Tuple[str, ...]:
        return tuple(v.id for v in self.values)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


FRAMEWORK = Choice("framework", "framework", (
    Value("mpi", "MPI"),
    Value("pytorch", "PyTorch", no_ssh=True),
), default="mpi")

NETWORK = Choice("network", "network", (
    Value("tcp", "TCP"),
    Value("ib", "InfiniBand", rdma=True),
), default="tcp")

# auto follows the recommendation; the others are a flag each (--preset, --manual)
MODE = Choice("mode", "mode", (
    Value("auto"),
    Value("preset", help=N_("start the job from a preset image instead of configuring here")),
    Value("manual", help=N_("configure this machine even when a preset image is recommended")),
), default="auto")

HOST_KEYS = Choice("host_keys", "host-key policy", (
    Value("pinned", N_("pinned (safe)")),
    Value("off", N_("off (as the guide)")),
), default="pinned", condition_prefix="host_keys")

# distro: the distribution's UCX packages; url: a package file (--ucx-url)
UCX_SOURCE = Choice("ucx_source", "UCX source", (
    Value("distro"),
    Value("url"),
), default="distro", condition_prefix="ucx")

DEFAULT_SSH_PORT = 2222  # mpi-operator's: a port a non-root sshd may serve

# The name each export is written as unless told otherwise: the wizard's path, the file
# beside a Dockerfile, and the name the exported files' own comments tell you to run.
EXPORT_FILE_NAMES = {"setup": "hpcwizard-setup.sh", "dockerfile": "Dockerfile",
                     "launch": "hpcwizard-launch.sh", "sbatch": "hpcwizard-job.sbatch",
                     "mpijob": "hpcwizard-mpijob.yaml", "pytorchjob": "hpcwizard-pytorchjob.yaml",
                     "trainjob": "hpcwizard-trainjob.yaml", "volcano": "hpcwizard-volcano.yaml"}
DEFAULT_USER = ""  # the user running hpcwizard
DEFAULT_PEERS = ""  # derived from the job's hosts (hpcwizard.peers); a plan keeps what it used

# The export formats, in the order the command line and the wizard list them: files for this
# kind of instance, then the engines jobs grow into (hpcwizard.engines). The renderers are
# hpcwizard.export.export_formats(); tests/test_engines.py holds its names to these.
INSTANCE_EXPORTS = ("setup", "dockerfile", "launch")
ENGINE_EXPORTS = ("sbatch", "mpijob", "pytorchjob", "trainjob", "volcano")
EXPORT_FORMATS = INSTANCE_EXPORTS + ENGINE_EXPORTS


def choices() -> Tuple[Choice, ...]:
    """Every choice, in the order make_choices checks them."""
    return (FRAMEWORK, NETWORK, MODE, HOST_KEYS, UCX_SOURCE)


# --- conditions -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Situation:
    """What a condition is decided on."""
    choices: "Choices"
    facts: "Facts"
    target_is_root: bool  # the job's user
    ssh_dir_provided: bool  # the platform provides the job user's ~/.ssh (plan.platform_ssh_dir)


@dataclass(frozen=True)
class Condition:
    """A name a recipe's `when` may use, and how it is decided."""
    name: str
    holds: Callable[[Situation], bool]
    # At most one condition of a group holds, so two steps may share an id when they ask
    # for different conditions of one group (target_root / target_user).
    group: str


_DECIDED = (
    Condition("target_root", lambda s: s.target_is_root, "target"),
    Condition("target_user", lambda s: not s.target_is_root, "target"),
    Condition("systemd", lambda s: s.facts.runtime.systemd, "systemd"),
    Condition("no_systemd", lambda s: not s.facts.runtime.systemd, "systemd"),
    Condition("family_debian", lambda s: s.facts.os.family == "debian", "family"),
    Condition("family_rhel", lambda s: s.facts.os.family == "rhel", "family"),
    # the job user's ~/.ssh is not one the platform mounted (or made read-only)
    Condition("ssh_dir_ours", lambda s: not s.ssh_dir_provided, "ssh_dir"),
)


def _chosen(choice: Choice, value: str) -> Condition:
    return Condition(f"{choice.condition_prefix}_{value}",
                     lambda s: getattr(s.choices, choice.name) == value, choice.name)


def conditions() -> Dict[str, Condition]:
    """name -> Condition: every name a recipe's `when` may use (any other is a load error)."""
    table = {c.name: c for c in _DECIDED}
    for choice in choices():
        if choice.condition_prefix:
            table.update((c.name, c) for c in (_chosen(choice, v) for v in choice.ids))
    return table


def exclusive(a: str, b: str) -> bool:
    """Conditions a and b never hold together."""
    table = conditions()
    return a != b and table[a].group == table[b].group


# --- placeholders -----------------------------------------------------------------------------

# name -> what plan.py puts there (every value validated, or from facts filtered to safe names)
PLACEHOLDERS: Mapping[str, str] = {
    "ssh_port": "the SSH port between instances (--ssh-port)",
    "user": "the job's user",
    "home": "the job user's home directory",
    "peers": "the job's hosts as ssh Host patterns",
    "host_key": "the private host key sshd serves",
    "ucx_url": "the UCX package's address (--ucx-url)",
    "ucx_file": "the file name of that package",
    "ucx_sha256": "its expected sha256 (--ucx-sha256)",
    "nccl_conf": "the lines of /etc/nccl.conf",
    "peer_sample": "a host name the peers patterns match, for 'ssh -G'",
    "apt_lock_timeout": "seconds apt waits for the dpkg lock",
    "sshd_kept_ports": "'Port N' lines for the ports the system sshd serves now",
    "known_hosts_patterns": "known_hosts' host field for the peers on the SSH port",
    "user_sshd_dir": "where a user's own sshd keeps its host key and pid file",
}
