"""The job's hosts as Python holds them: the value recipes/runtime.sh's answer is parsed into
(wizard/runtime.py). Which hosts a list, a pattern, a hostfile or a platform's variables
name is decided there only; this module holds no grammar."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Tuple


@dataclass(frozen=True)
class Hosts:
    names: Tuple[str, ...]
    source: str  # where they came from, in words: "--hosts", "SLURM_JOB_NODELIST", ...
    slots: Tuple[int, ...] = ()  # per host, when the source said (hostfiles); else empty
    # the platform's variable that says which of them this instance is (SKYPILOT_NODE_RANK,
    # ...), read only for the hosts that platform named; "" for the others
    rank_var: str = ""

    def to_dict(self) -> Dict[str, object]:
        return {"names": list(self.names), "source": self.source, "slots": list(self.slots)}
