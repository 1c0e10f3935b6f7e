"""What every check reads: the plan's choices, who runs the checks as whom, the System, and
what earlier checks found (their Checks by id, the torch probe's answer, ...)."""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

from ..diagnose import Diagnosis, diagnose, explain
from ..facts import Facts
from ..hosts import Hosts
from ..i18n import _
from ..plan import Plan
from ..scratch import Owner
from .parse import HostMatcher
from .probes import Probe, Ran
from .results import FAIL, PASS, SKIP, Check
from .system import System

if TYPE_CHECKING:
    from .jobenv import JobEnv


class Ctx:
    def __init__(self, plan: Plan, facts: Facts, system: System,
                 hosts: Optional[Hosts] = None, bandwidth: bool = False) -> None:
        self.plan = plan
        self.bandwidth = bandwidth  # verify --bandwidth: measure the links (they are loaded)
        self.facts = facts
        self.sys = system
        self.hosts = hosts
        self.port = plan.job.ssh_port
        self.framework = plan.choices.framework
        self.network = plan.choices.network
        self.target = plan.target.user
        self.user = ""  # the job's user, when root runs the checks as that user (runuser)
        self.owner: Optional[Owner] = None  # who gets verify's temporary files (None: we)
        self.cannot_act_as = ""
        if system.user() != self.target:
            if system.uid() == 0:
                self.user = self.target
                self.owner = (plan.target.uid, plan.target.gid)
            else:
                self.cannot_act_as = _(
                    "verify runs as {me}, the job as {target}: run verify as {target} (or root) "
                    "for this check").format(me=system.user(), target=self.target)
        # what checks found for later ones
        self.python = "python3"  # the interpreter that imports torch, once here/torch found it
        self.torch: Dict[str, object] = {}  # the torch probe's answer
        self.torch_command = ""
        self.addresses: Dict[str, str] = {}  # peer -> its address (peer/HOST/resolve)
        self.said: Dict[str, str] = {}  # host -> the name its instance gave (peer/HOST/login)
        self.allreduce: Optional[Tuple[Ran, str, str]] = None  # both halves, backend, command
        # for the mpirun commands, found once (mpi_setup): Open MPI's version, the interface
        self.mpi: Optional[Tuple[Optional[int], str, str, str]] = None
        # the job's environment as the launch script passes it (jobenv.job_env), found once
        self.job_env: Optional["JobEnv"] = None
        self._checks: Dict[str, Check] = {}
        self._lock = threading.Lock()
        self._rank: Optional[Tuple[Optional[int]]] = None

    def ask(self, probe: Probe) -> Ran:
        return self.sys.ask(probe)

    def write_temp(self, name: str, text: str) -> str:
        """A hostfile the job's user can read (mpirun runs as that user)."""
        return self.sys.write_temp(name, text, owner=self.owner)

    @property
    def names(self) -> Tuple[str, ...]:
        return self.hosts.names if self.hosts is not None else ()

    def rank(self) -> Optional[int]:
        """Which of the job's hosts this instance is (asked once per verification)."""
        if self._rank is None:
            self._rank = (self.sys.rank(self.names, self.hosts.rank_var)
                          if self.hosts is not None and self.names else None,)
        return self._rank[0]

    def matcher(self) -> HostMatcher:
        """Which of the job's hosts an answer stands for, with the names the key logins
        learned (cluster checks run after every peer's)."""
        return HostMatcher(self.names, dict(self.said))

    def here_name(self) -> str:
        i = self.rank()
        return self.names[i] if i is not None else ""

    def record(self, check: Check) -> None:
        with self._lock:
            self._checks[check.id] = check

    def found(self, id: str) -> Optional[Check]:
        with self._lock:
            return self._checks.get(id)

    def peer_checks(self) -> List[Check]:
        with self._lock:
            return [c for c in self._checks.values() if c.id.startswith("peer/")]


def _check(id: str, title: str, ran: Optional[Ran], ok: bool, detail: str = "",
           plain: str = "", host: str = "", fallback: str = "", t0: float = 0.0,
           status: Optional[str] = None, command: str = "") -> Check:
    """A check from a command's result: on failure, the table's diagnoses of its output, or
    the table's entry `fallback` when the output names nothing known."""
    st = status or (PASS if ok else FAIL)
    diags: Tuple[Diagnosis, ...] = ()
    if st != PASS and ran is not None:
        diags = tuple(diagnose(ran.lines(), scope="job"))
    if st != PASS and not diags and fallback:
        diags = (explain(fallback, ran.last_line() if ran else ""),)
    return Check(id, title, st, command or (ran.command if ran else ""), detail,
                 plain if st != PASS else "", host, diags,
                 time.monotonic() - t0 if t0 else 0.0)


def _skip(id: str, title: str, why: str, host: str = "", command: str = "") -> Check:
    return Check(id, title, SKIP, command, why, "", host)


def gather(ctx: Ctx, futures: Sequence[Future]) -> list:
    """The futures' results in order. On Ctrl+C the commands in flight are killed first:
    leaving the pool's `with` waits for its threads, that is for every ssh to time out."""
    try:
        return [f.result() for f in futures]
    except KeyboardInterrupt:
        for f in futures:
            f.cancel()
        ctx.sys.stop()
        raise
