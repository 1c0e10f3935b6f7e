"""Does the platform provide this user's ~/.ssh?

Kubeflow's MPIJob mounts a Secret at `sshAuthMountPath` (default /root/.ssh: id_rsa,
id_rsa.pub, authorized_keys); Volcano's ssh plugin mounts one at /root/.ssh (id_rsa,
id_rsa.pub, authorized_keys, config). Kubernetes mounts Secrets read-only, and a file written
into one would be gone with the pod anyway: hpcwizard must use those keys, not write beside
them. Found from /proc/self/mountinfo (a mount at ~/.ssh or on a file in it) and from
whether the directory can be written; the platform is named from its own variables
(K_MPI_JOB_ROLE, VC_*_HOSTS / VC_TASK_INDEX).
"""
from __future__ import annotations

import os
import re
from typing import List, Mapping, Optional, Tuple

from ..facts import SshDir
from .base import Context, Found

_VC_HOSTS = re.compile(r"^VC_[A-Z0-9_]+_HOSTS$")


def _unescape(path: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes (\\040...)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def mounts_under(mountinfo: str, directory: str) -> List[Tuple[str, str, bool]]:
    """(mount point, file system type, read-only) of every mount at directory or inside it,
    from /proc/self/mountinfo's text; the later of two mounts on one point is the one seen."""
    found = {}
    prefix = directory.rstrip("/") + "/"
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, tail_fields = head.split(), tail.split()
        if not sep or len(fields) < 6 or not tail_fields:
            continue
        point = _unescape(fields[4])
        if point == directory.rstrip("/") or point.startswith(prefix):
            found[point] = (point, tail_fields[0], "ro" in fields[5].split(","))
    return sorted(found.values())


def platform_of(env: Mapping[str, str]) -> str:
    if env.get("K_MPI_JOB_ROLE"):
        return "Kubeflow MPIJob"
    if env.get("VC_TASK_INDEX") or any(_VC_HOSTS.match(k) for k in env):
        return "Volcano"
    return ""


def first_port(config: str) -> int:
    """The first Port an ssh client config names (any Host block: Volcano writes the same
    port in each), 0 when it names none."""
    for line in config.splitlines():
        words = line.replace("=", " ").split()
        if len(words) >= 2 and words[0].lower() == "port" and words[1].isascii() \
                and words[1].isdigit() and 0 < int(words[1]) < 65536:
            return int(words[1])
    return 0


def ssh_dir_of(home: str, mountinfo: Optional[str], writable: Optional[bool],
               present: Tuple[str, ...], env: Mapping[str, str], config: str = "") -> SshDir:
    """What the facts say of HOME/.ssh: mounts from mountinfo's text (None: unknown),
    whether the directory can be written (None: it does not exist), the files there, and
    the text of its config."""
    path = os.path.join(home, ".ssh") if home else ""
    mounts = mounts_under(mountinfo or "", path) if path else []
    mounted = ", ".join(f"{point} ({fstype}{', read-only' if ro else ''})"
                        for point, fstype, ro in mounts)
    read_only = writable is False or any(ro and point == path for point, _t, ro in mounts)
    provided = bool(mounted) or read_only
    return SshDir(path=path, mounted=mounted, read_only=read_only, files=present,
                  platform=platform_of(env) if provided else "",
                  client_port=first_port(config) if provided else 0)


def probe(ctx: Context, found: Found) -> None:
    home = os.environ.get("HOME", "") if ctx.local else ""
    try:
        import pwd

        home = pwd.getpwuid(os.getuid()).pw_dir if ctx.local else ""
    except KeyError:
        pass
    if not home:
        return
    path = os.path.join(home, ".ssh")
    mountinfo = ctx.read("/proc/self/mountinfo") if ctx.local else None
    writable: Optional[bool] = None
    if os.path.isdir(path) and ctx.local:
        writable = os.access(path, os.W_OK)
    present: Tuple[str, ...] = ()
    if ctx.local and os.path.isdir(path):
        try:
            present = tuple(sorted(n for n in os.listdir(path)
                                   if n in ("id_rsa", "id_ed25519", "authorized_keys", "config")))
        except OSError:
            pass
    config = ctx.read(os.path.join(path, "config")) if "config" in present else None
    found.set("ssh_dir", ssh_dir_of(home, mountinfo, writable, present, ctx.env, config or ""))
