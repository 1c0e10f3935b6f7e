"""How many CPUs, how much memory?"""
from __future__ import annotations

import os
import re
from typing import Optional

from .base import TABLE_LIMIT, Context, Found


def parse_cpuinfo(text: str) -> Optional[int]:
    """Count the 'processor : N' entries of /proc/cpuinfo."""
    n = len(re.findall(r"^processor\s*:", text, flags=re.MULTILINE))
    return n or None


def parse_meminfo(text: str) -> Optional[int]:
    """MemTotal of /proc/meminfo, in MiB."""
    m = re.search(r"^MemTotal:\s+([0-9]{1,18})\s*kB", text, flags=re.MULTILINE)
    return int(m.group(1)) // 1024 if m else None


def probe(ctx: Context, found: Found) -> None:
    cpus: Optional[int] = None
    if ctx.local and hasattr(os, "sched_getaffinity"):
        cpus = len(os.sched_getaffinity(0))  # what this process may use, not what the host has
    if cpus is None:
        text = ctx.read("proc/cpuinfo", TABLE_LIMIT)
        cpus = parse_cpuinfo(text) if text else None
    if cpus is None:
        found.note("hardware.cpus-unknown")
    found.set("cpus", cpus)
    text = ctx.read("proc/meminfo")
    mem = parse_meminfo(text) if text else None
    if mem is None:
        found.note("hardware.memory-unknown")
    found.set("memory_mib", mem)
