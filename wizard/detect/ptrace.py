"""May one user's processes on this instance read each other's memory? Linux CMA
(process_vm_readv) is Open MPI's single-copy transfer between ranks of one instance and UCX's
cma transport; the kernel allows it by ptrace's rules: CAP_SYS_PTRACE and Yama's
ptrace_scope (hpcwizard.facts.cma_allowed). Docker's default capabilities and most pods'
leave CAP_SYS_PTRACE out; hardened hosts set ptrace_scope to 2 or 3."""
from __future__ import annotations

import re
from typing import Optional

from ..facts import cma_allowed
from .base import Context, Found

CAP_SYS_PTRACE = 19  # include/uapi/linux/capability.h
_CAP_EFF = re.compile(r"^CapEff:\s*([0-9a-fA-F]{1,16})\s*$", re.MULTILINE)
SCOPE_FILE = "proc/sys/kernel/yama/ptrace_scope"


def cap_sys_ptrace(status: Optional[str]) -> Optional[bool]:
    """/proc/self/status -> whether CapEff holds CAP_SYS_PTRACE (None: no CapEff line)."""
    m = _CAP_EFF.search(status or "")
    return None if m is None else bool(int(m.group(1), 16) >> CAP_SYS_PTRACE & 1)


def ptrace_scope(text: Optional[str]) -> Optional[int]:
    """kernel.yama.ptrace_scope's text -> 0..3 (None: none, or not one of Yama's values)."""
    value = (text or "").strip()
    return int(value) if value in ("0", "1", "2", "3") else None


def probe(ctx: Context, found: Found) -> None:
    status = ctx.read("proc/self/status")
    cap = cap_sys_ptrace(status)
    if cap is None and ctx.local:  # another tree may have no /proc: nothing to say
        found.note("runtime.ptrace-unknown", what="/proc/self/status (CapEff)")
    scope = None
    if ctx.exists(SCOPE_FILE):
        raw = ctx.read(SCOPE_FILE)
        scope = ptrace_scope(raw)
        if scope is None:
            found.note("runtime.ptrace-unknown", what="/" + SCOPE_FILE)
    found.set("runtime.cap_sys_ptrace", cap)
    found.set("runtime.ptrace_scope", scope)
    if cma_allowed(cap, scope) is False:
        found.warn("runtime.no-cma-scope3" if scope == 3 else "runtime.no-cma", scope=scope)
