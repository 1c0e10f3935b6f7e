"""What a check needs before it can say anything, as data: each Need says whether it is met
in a verification and, when not, the reason its check is skipped with. Checks list their
needs (here.py, peer.py, cluster.py); orchestrate.py skips a check at its first unmet one."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Tuple

from ..i18n import _
from .context import Ctx
from .readings import read_facts
from .results import PASS, SKIP


@dataclass(frozen=True)
class Need:
    name: str  # what is needed, for people reading the tables
    met: Callable[[Ctx, str], bool]  # (ctx, host: the peer, "" here and for the cluster)
    why: Callable[[Ctx, str], str]  # the skip's reason when it is not met


def no_ssh_reason() -> str:
    """Why a PyTorch plan's SSH checks are skipped."""
    return _("PyTorch jobs start through torchrun's rendezvous, not SSH")


def passed(id: str, why: Callable[[Ctx, str], str], inherit_skip: bool = False) -> Need:
    """The check id (may name {host}) passed. Not run or failed: why; skipped, with
    inherit_skip: the reason it was skipped (what stopped it stops this one too)."""
    def met(ctx: Ctx, host: str) -> bool:
        c = ctx.found(id.format(host=host))
        return c is not None and c.status == PASS

    def reason(ctx: Ctx, host: str) -> str:
        c = ctx.found(id.format(host=host))
        return c.detail if inherit_skip and c is not None and c.status == SKIP else why(ctx, host)

    return Need(f"{id} passed", met, reason)


def ran(id: str) -> Need:
    """The check id ran (passed or failed): what it found is what this one reads."""
    def met(ctx: Ctx, host: str) -> bool:
        c = ctx.found(id)
        return c is not None and c.status != SKIP

    def reason(ctx: Ctx, host: str) -> str:
        c = ctx.found(id)
        return c.detail if c is not None else ""

    return Need(f"{id} ran", met, reason)


def _sshd_readable(ctx: Ctx, host: str) -> bool:
    return ctx.sys.uid() == 0 if ctx.plan.target.is_root else not ctx.cannot_act_as


def torch_pair(ctx: Ctx) -> Optional[Tuple[str, str]]:
    """This host and the first other host whose key login passed: the all-reduce's two
    halves (None when there is no such other host)."""
    here = ctx.here_name()
    for h in ctx.names:
        login = ctx.found(f"peer/{h}/login")
        if h != here and login is not None and login.status == PASS:
            return here, h
    return None


def _both_halves(ctx: Ctx) -> bool:
    return torch_pair(ctx) is not None


SSH_JOB = Need("the job starts its ranks over SSH (MPI)",
               lambda ctx, host: ctx.framework == "mpi", lambda ctx, host: no_ssh_reason())
ACT_AS = Need("verify can act as the job's user", lambda ctx, host: not ctx.cannot_act_as,
              lambda ctx, host: ctx.cannot_act_as)
SSHD_SETTINGS = Need(
    "sshd -T can read sshd's settings (root's sshd: as root)", _sshd_readable,
    lambda ctx, host: _("sshd -T needs root") if ctx.plan.target.is_root else ctx.cannot_act_as)
CLIENT_SETTINGS = Need(
    "the plan writes SSH client settings",
    lambda ctx, host: any(s.id == "ssh/client-config" for s in ctx.plan.steps),
    # the platform provides ~/.ssh (plan.platform_ssh_dir): its own settings stand
    lambda ctx, host: _("the plan writes no SSH client settings: the platform provides ~/.ssh"))
TORCH = passed("here/torch", lambda ctx, host: _("torch does not import"))
GPU = Need("a GPU here (else the job uses gloo)",
           lambda ctx, host: bool(ctx.torch.get("cuda")) or bool(ctx.facts.gpus),
           lambda ctx, host: _("no GPU here: the job uses gloo, not NCCL"))

# A peer's own checks beside the SSH ones (its InfiniBand facts) do not make it unreachable.
_SSH_CHECKS = ("resolve", "port", "login")
RESOLVES = passed("peer/{host}/resolve", lambda ctx, host: _("the name does not resolve"))
PORT_ANSWERS = passed("peer/{host}/port",
                      lambda ctx, host: _("port {port} does not answer").format(port=ctx.port))

REACHABLE = Need("every peer's name, port and login passed",
                 lambda ctx, host: all(c.status == PASS for c in ctx.peer_checks()
                                       if c.id.rsplit("/", 1)[-1] in _SSH_CHECKS),
                 lambda ctx, host: _("an SSH check above failed"))
MPIRUN = passed("cluster/mpirun", lambda ctx, host: _("mpirun failed"), inherit_skip=True)
TWO_HOSTS = Need("two hosts or more", lambda ctx, host: len(ctx.names) >= 2,
                 lambda ctx, host: _("one host: nothing crosses the network"))
A_JOB_HOST = Need(
    "this instance is one of the job's hosts", lambda ctx, host: ctx.rank() is not None,
    lambda ctx, host: _("this host ({host}) is not one of the job's hosts: run verify on one "
                        "of them").format(host=ctx.facts.hostname))
A_PEER_LOGIN = Need(
    "another host accepts an SSH login", lambda ctx, host: _both_halves(ctx),
    lambda ctx, host: _("no other instance accepts an SSH login, which verify needs to start "
                        "its test there"))
ALLREDUCE = ran("cluster/torch-allreduce")
NCCL = Need("the all-reduce ran on NCCL",
            lambda ctx, host: ctx.allreduce is not None and ctx.allreduce[1] == "nccl",
            lambda ctx, host: _("gloo on CPU does not use InfiniBand"))


def _ib_facts_readable(ctx: Ctx, host: str) -> bool:
    if host == ctx.here_name():  # read with bash here: no SSH
        return True
    login = ctx.found(f"peer/{host}/login")
    return login is not None and login.status == PASS


def _ib_facts_of_two(ctx: Ctx) -> bool:
    return len(read_facts(ctx)) >= 2


IB_FACTS_READABLE = Need(
    "this instance, or a peer whose key login passed", _ib_facts_readable,
    lambda ctx, host: _("no key login to {host}: its InfiniBand facts are read over "
                        "SSH").format(host=host))
IB_FACTS_OF_TWO = Need(
    "the InfiniBand facts of two hosts or more were read",
    lambda ctx, host: _ib_facts_of_two(ctx),
    lambda ctx, host: _("the InfiniBand facts of fewer than two hosts were read: nothing to "
                        "compare"))

# verify --bandwidth: the measurements load the links, so they run only when asked for; not
# asked, they are no part of the report (bandwidth.opt_in), not a skip on every run.
BANDWIDTH = Need("verify --bandwidth was asked for", lambda ctx, host: ctx.bandwidth,
                 lambda ctx, host: _("not asked for (verify --bandwidth)"))
TORCH_ALLREDUCE_PASSED = passed(
    "cluster/torch-allreduce", lambda ctx, host: _("the all_reduce above did not pass"),
    inherit_skip=True)
