"""One check as data: its id and title, the function that runs it, where it belongs (the
frameworks and networks whose verification has it) and what it needs."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, List, Sequence, Tuple, Union

from .results import Check

if TYPE_CHECKING:
    from .context import Ctx
    from .needs import Need

ALL_FRAMEWORKS = ("mpi", "pytorch")
ALL_NETWORKS = ("tcp", "ib")


@dataclass(frozen=True)
class Spec:
    id: str  # "here/sshd"; a peer's names {host}: "peer/{host}/port"
    title: Callable[["Ctx", str], str]  # (ctx, host) -> the title, also for its skip
    run: Callable[["Ctx", str], Union[Check, Sequence[Check]]]
    frameworks: Tuple[str, ...] = ALL_FRAMEWORKS  # not listed: not part of that verification
    networks: Tuple[str, ...] = ALL_NETWORKS
    needs: Tuple["Need", ...] = ()  # in order: the first not met is the skip's reason

    def belongs(self, framework: str, network: str) -> bool:
        return framework in self.frameworks and network in self.networks

    def results(self, ctx: "Ctx", host: str) -> List[Check]:
        out = self.run(ctx, host)
        return [out] if isinstance(out, Check) else list(out)
