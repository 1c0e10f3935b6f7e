"""Where NCCL looks for a GPUDirect RDMA peer-memory module, by NCCL version.

NCCL counts a module as loaded when one of a few version files exists (ncclIbGdrSupport in
src/transport/net_ib.cc, net_ib/gdr.cc from 2.29), and the files changed between
releases. detect records the ones present (Rdma.peer_memory); the plan and verify ask this
table whether the NCCL in use looks at any of them. DMA-BUF (NCCL 2.13 and later) is
checked apart from this table: it needs no module.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Tuple


@dataclass(frozen=True)
class PeerMemoryFile:
    name: str    # as Rdma.gpudirect and Rdma.peer_memory name it
    path: str    # the version file NCCL tests, relative to the sysroot
    module: str  # the kernel module a user loads or sees in lsmod

    @property
    def shown(self) -> str:
        """'nvidia_peermem (/sys/module/nvidia_peermem)': the module and where it is seen."""
        return f"{self.module} (/{self.path.rsplit('/', 1)[0]})"


# Every file some NCCL release tests, in the order detect names the first one present.
FILES = (
    PeerMemoryFile("nv_mem", "sys/kernel/mm/memory_peers/nv_mem/version", "nv_peer_mem"),
    PeerMemoryFile("nvidia-peermem", "sys/kernel/mm/memory_peers/nvidia-peermem/version",
                   "nvidia-peermem"),
    PeerMemoryFile("nv_mem_nc", "sys/kernel/mm/memory_peers/nv_mem_nc/version", "nv_peer_mem"),
    PeerMemoryFile("nvidia_peermem", "sys/module/nvidia_peermem/version", "nvidia_peermem"),
)
BY_NAME = {f.name: f for f in FILES}


@dataclass(frozen=True)
class NcclLooks:
    since: Tuple[int, int, int]  # the first NCCL release that tests exactly these files
    names: Tuple[str, ...]       # FILES' names


# Read at each release tag of github.com/NVIDIA/nccl (v2.4.6-1 to v2.29.2-1).
NCCL_LOOKS = (
    NcclLooks((0, 0, 0), ("nv_mem",)),                                   # up to 2.9.6
    NcclLooks((2, 9, 8), ("nv_mem", "nvidia-peermem")),                  # 2.9.8 to 2.21.5
    NcclLooks((2, 22, 0), ("nv_mem", "nv_mem_nc")),                      # 2.22.x
    NcclLooks((2, 23, 0), ("nv_mem", "nv_mem_nc", "nvidia_peermem")),    # 2.23 and later
)
NEWEST = NCCL_LOOKS[-1]


def looks_for(nccl: Sequence[int]) -> Tuple[str, ...]:
    """The files this NCCL version (2, 22, 3) tests, by name; () when the version is unknown."""
    if not nccl:
        return ()
    return next(r.names for r in reversed(NCCL_LOOKS) if tuple(nccl) >= r.since)


def sees(nccl: Sequence[int], present: Sequence[str]) -> bool:
    """Does this NCCL find any of the peer-memory files present here?"""
    return bool(set(looks_for(nccl)) & set(present))


def seen_since(present: Sequence[str]) -> str:
    """'2.22': the NCCL from which every release finds one of these files; '' when the
    newest does not (or every release does)."""
    since = ""
    for row in reversed(NCCL_LOOKS):
        if not set(row.names) & set(present):
            break
        since = release(row)
    return since


def release(row: NcclLooks) -> str:
    """(2, 23, 0) -> '2.23'; (2, 9, 8) -> '2.9.8'; '' for the oldest row (every release)."""
    if row is NCCL_LOOKS[0]:
        return ""
    major, minor, patch = row.since
    return f"{major}.{minor}" + (f".{patch}" if patch else "")


def paths(names: Sequence[str]) -> str:
    """'/sys/kernel/mm/memory_peers/nv_mem/version, ...' for a message."""
    return ", ".join("/" + BY_NAME[n].path for n in names if n in BY_NAME)
