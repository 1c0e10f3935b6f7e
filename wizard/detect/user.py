"""Who runs hpcwizard, and may they change the system?"""
from __future__ import annotations

import os
import pwd
from typing import Optional

from ..facts import UserInfo
from .base import Context, Found
from .run import Result


def classify_sudo(result: Optional[Result]) -> str:
    """What `sudo -n true` says: nopasswd, password or none (never raises)."""
    if result is None:  # sudo is not installed
        return "none"
    if result.ok:
        return "nopasswd"
    text = result.output.lower()
    if "password is required" in text:
        return "password"
    # "user is not in the sudoers file", "may not run sudo", sudo broken: no way up either way.
    return "none"


def probe(ctx: Context, found: Found) -> None:
    uid, gid = os.getuid(), os.getgid()
    try:
        pw = pwd.getpwuid(uid)
        name, home = pw.pw_name, pw.pw_dir
    except KeyError:  # a uid with no passwd entry: common with `docker run --user 1234`
        name = os.environ.get("USER") or os.environ.get("LOGNAME") or "unknown"
        home = os.environ.get("HOME", "")
        found.note(f"User id {uid} has no entry in /etc/passwd; ssh and mpirun may refuse it.")
    if uid == 0:
        sudo = "root"
    elif not ctx.run_commands:
        sudo = "unknown"
    else:
        sudo = classify_sudo(ctx.run(["sudo", "-n", "true"]))
        if sudo == "password":
            found.note("sudo asks for a password: system steps will need it typed in.")
    found.set("user", UserInfo(name=name, uid=uid, gid=gid, home=home, sudo=sudo))
