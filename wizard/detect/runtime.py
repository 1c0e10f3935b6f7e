"""Where does this run: which container, what is PID 1, is it a Jupyter terminal, how large is
/dev/shm?"""
from __future__ import annotations

import os
import socket
from typing import Dict, Mapping, Optional, Tuple

from ..facts import Runtime
from ..inputs import ascii_int
from . import ptrace
from .base import Context, Found

# Words in /proc/1/cgroup paths -> container kind, checked in this order.
CGROUP_HINTS = (
    ("kubepods", "kubernetes"),
    ("libpod", "podman"),
    ("docker", "docker"),
    ("containerd", "containerd"),
    ("cri-o", "kubernetes"),
    ("crio", "kubernetes"),
    ("lxc", "lxc"),
)

# Below this, NCCL's shared-memory buffers may not fit (it crashes in ncclShmOpen on Docker's
# and Kubernetes' default of 64 MB; NVIDIA's own images say 64MB "may be insufficient" and
# recommend --ipc=host).
SHM_MIN_MIB = 1024


def parse_environ(data: bytes) -> Dict[str, str]:
    """/proc/<pid>/environ (NUL-separated KEY=value) -> dict."""
    env: Dict[str, str] = {}
    for item in data.split(b"\0"):
        if b"=" in item:
            key, _, value = item.partition(b"=")
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def container_from_cgroup(text: str) -> Optional[str]:
    """The container kind named in /proc/1/cgroup, or None (cgroup v2 shows just '0::/')."""
    for line in text.splitlines():
        path = line.split(":", 2)[-1].lower()
        for hint, kind in CGROUP_HINTS:
            if hint in path:
                return kind
    return None


def jupyter_from_env(env: Mapping[str, str]) -> bool:
    return any(
        k in ("JPY_PARENT_PID", "JUPYTER_SERVER_ROOT", "JUPYTER_SERVER_URL", "JPY_SESSION_NAME")
        or k.startswith("JUPYTERHUB_")
        for k in env
    )


def container_kind(ctx: Context, pid1_env: Mapping[str, str], cgroup: Optional[str]) -> str:
    if ctx.env.get("KUBERNETES_SERVICE_HOST") or pid1_env.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes"
    if ctx.exists("run/.containerenv"):
        return "podman"
    if ctx.exists(".dockerenv"):
        return "docker"
    declared = pid1_env.get("container", "").strip().lower()
    if declared:
        return {"oci": "docker", "systemd-nspawn": "nspawn"}.get(declared, declared)
    if cgroup is not None:
        return container_from_cgroup(cgroup) or "none"
    return "unknown"


def parse_df_kib(text: str) -> Optional[int]:
    """`df -kP /dev/shm` -> the file system's size in KiB (the second field of its line)."""
    lines = [line.split() for line in (text or "").splitlines() if line.strip()]
    if len(lines) < 2 or len(lines[-1]) < 6:
        return None
    return ascii_int(lines[-1][1])


def shm_mib(ctx: Context) -> Tuple[Optional[int], str]:
    """/dev/shm's size in MiB, and why it is unknown ("" when known, or not measured because
    commands do not run for this tree). For another tree with commands, df describes the
    machine running it, as `ulimit -l` does for the memlock limit."""
    if ctx.local:
        try:
            st = os.statvfs(ctx.path("dev/shm"))
        except OSError as exc:
            return None, f"/dev/shm: {exc.strerror or exc}"
        return st.f_blocks * st.f_frsize // (1024 * 1024), ""
    if not ctx.run_commands:
        return None, ""
    res = ctx.run(["df", "-kP", "/dev/shm"])
    if res is None:
        return None, ""  # no df: nothing to say beyond "unknown"
    kib = parse_df_kib(res.stdout) if res.ok else None
    if kib is None:
        return None, f"df -kP /dev/shm: {res.first_line()}"
    return kib // 1024, ""


def probe(ctx: Context, found: Found) -> None:
    raw_env = ctx.read_bytes("proc/1/environ")
    pid1_env = parse_environ(raw_env) if raw_env is not None else {}
    cgroup = ctx.read("proc/1/cgroup")
    kind = container_kind(ctx, pid1_env, cgroup)
    if kind == "unknown":
        found.note("runtime.container-unknown")
    pid1 = ctx.read_value("proc/1/comm") or ""
    if not pid1:
        found.note("runtime.pid1-unknown")
    jupyter = jupyter_from_env(ctx.env) or jupyter_from_env(pid1_env) or "jupyter" in pid1
    found.set("runtime", Runtime(container=kind, pid1=pid1, jupyter=jupyter))
    # after the rest is set: a df that hangs loses only the size
    shm, why = shm_mib(ctx)
    if why:
        found.note("runtime.shm-unknown", error=why)
    elif shm is not None and shm < SHM_MIN_MIB:
        found.warn("runtime.shm-small", mib=shm)
    found.set("runtime.shm_mib", shm)
    ptrace.probe(ctx, found)


def probe_hostname(ctx: Context, found: Found) -> None:
    if ctx.local:
        name = socket.gethostname()
    else:
        words = (ctx.read_value("etc/hostname") or "").split()
        name = words[0] if words else ""
    if not name:
        found.note("runtime.hostname-unknown")
    found.set("hostname", name)
