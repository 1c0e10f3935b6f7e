"""Which instance and rank a line of a job's log came from, where the line says so.

The launchers and libraries each prefix their lines their own way:

    [default3]:...                          torchrun --tee / --log-line-prefix: local rank 3
    [1,3]<stderr>:...                       mpirun --tag-output: rank 3
    [rank3]:[E626 ...]  / [PG 1 Rank 3]     PyTorch (c10d): rank 3
    node1:1234:5678 [0] NCCL INFO ...       NCCL: host node1, pid 1234, CUDA device 0
    [node2:12345] ...                       Open MPI (opal_output): host node2, pid 12345
    [node2:12345:0:12345] cma_ep.c:88 ...   UCX: host node2, pid 12345
    [node2][[52336,1],50][btl_tcp...]       Open MPI's TCP BTL: host node2, rank 50

Prefixes nest (torchrun's or mpirun's outside, the library's inside), so each is read in
turn from the start of the line.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Dict, Optional

from .i18n import _

# how far into a line a prefix is looked for: prefixes come first, after a timestamp at most
HEAD = 300

_HOST = r"[A-Za-z0-9][A-Za-z0-9_.-]*"
# A timestamp some log collectors put first ("2019-12-01T22:04:48.11Z ", "[2026-04-22 21:34:20] ").
_STAMP = re.compile(r"\[?\d{4}-\d\d-\d\d[T ][\d:.]+Z?\]?\s+")
_TORCHRUN = re.compile(r"\[default(\d+)\]:")
_TAG_OUTPUT = re.compile(r"\[\d+,(\d+)\]<std(?:out|err)>:")
_TORCH_RANK = re.compile(r"\[rank(\d+)\]:")
_NCCL = re.compile(rf"({_HOST}):(\d+):\d+ \[(\d+)\] ")
_OPAL = re.compile(rf"\[({_HOST}):(\d+)(?::\d+:\d+)?\] ")
_BTL = re.compile(rf"\[({_HOST})\]\[\[\d+,\d+\],(\d+)\]")
# anywhere in the line: c10d's own "[Rank 5]" / "[PG 1 Rank 0]" / "[PG ID 0 PG GUID 0(...) Rank 1]"
_C10D_RANK = re.compile(r"\[(?:PG [^\]]{0,120} )?Rank (\d+)\]")


@dataclass(frozen=True)
class Origin:
    host: str = ""
    rank: Optional[int] = None        # the global rank
    local_rank: Optional[int] = None  # the rank among the instance's workers (torchrun)
    pid: Optional[int] = None
    gpu: Optional[int] = None         # NCCL's CUDA device index in that process

    def __bool__(self) -> bool:
        return bool(self.host) or any(v is not None for v in
                                      (self.rank, self.local_rank, self.pid, self.gpu))


def origin(line: str) -> Origin:
    """The host, rank, local rank, pid and GPU a log line names in its prefixes; an empty
    Origin when it names none."""
    rest = line[:HEAD].lstrip()
    found = Origin()
    while True:
        stamp = _STAMP.match(rest)
        if stamp:
            rest = rest[stamp.end():]
        m = _TORCHRUN.match(rest)
        if m:
            found = replace(found, local_rank=int(m.group(1)))
        elif (m := _TAG_OUTPUT.match(rest)) or (m := _TORCH_RANK.match(rest)):
            found = replace(found, rank=int(m.group(1)))
        elif m := _NCCL.match(rest):
            found = replace(found, host=m.group(1), pid=int(m.group(2)), gpu=int(m.group(3)))
        elif m := _BTL.match(rest):
            found = replace(found, host=m.group(1), rank=int(m.group(2)))
        elif m := _OPAL.match(rest):
            found = replace(found, host=m.group(1), pid=int(m.group(2)))
        else:
            break
        rest = rest[m.end():].lstrip()
    if found.rank is None:
        m = _C10D_RANK.search(rest)
        if m:
            found = replace(found, rank=int(m.group(1)))
    return found


def as_data(o: Origin) -> Dict[str, Any]:
    """The fields an origin names, for --json: {"host": "node1", "rank": 3}."""
    return {k: v for k, v in (("host", o.host), ("rank", o.rank), ("local_rank", o.local_rank),
                              ("pid", o.pid), ("gpu", o.gpu)) if v not in ("", None)}


def describe(o: Origin) -> str:
    """In words: "host node1, rank 3, GPU 0, pid 1234"."""
    parts = []
    if o.host:
        parts.append(_("host {host}").format(host=o.host))
    if o.rank is not None:
        parts.append(_("rank {rank}").format(rank=o.rank))
    if o.local_rank is not None:
        parts.append(_("local rank {rank}").format(rank=o.local_rank))
    if o.gpu is not None:
        parts.append(_("GPU {gpu}").format(gpu=o.gpu))
    if o.pid is not None:
        parts.append(_("pid {pid}").format(pid=o.pid))
    return _(", ").join(parts)
