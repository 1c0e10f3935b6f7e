"""Who runs hpcwizard, and may they change the system?

sudo is asked without ever prompting (`-n`, stdin /dev/null, LC_ALL=C) and sorted into:

  root      uid 0: no sudo needed
  nopasswd  `sudo -n true` runs: root steps run through `sudo -n`
  password  sudo lets you in after your password (asked once, before a run)
  denied    sudo is installed but lets you run nothing as root: not in sudoers, rights for
            some other commands only, or sudo cannot work here (no passwd entry for the
            uid, the "no new privileges" flag, a nosuid mount)
  none      no sudo program
  unknown   not checked (no commands run)

`sudo -n true` alone cannot tell "denied" from "password": for a user who is not in
sudoers it says "a password is required" too, since sudo authenticates before it looks
the user up. `sudo -n -v` (validate) says "Sorry, user X may not run sudo on HOST" instead,
so it is asked first; `sudo -n true` unless -v said that. -v wants a password unless every
rule of yours is NOPASSWD (sudoers' verifypw=all), so after its "a password is required"
`true` may still run: group sudo plus cloud-init's NOPASSWD drop-in is "nopasswd". (A
password user's detection mails root twice under Debian's mail_badpass; see
tests/fixtures/sudo/README.md for what each case says.)
"""
from __future__ import annotations

import os
import pwd
from typing import Optional, Tuple

from .. import validate
from ..facts import UserInfo
from .base import Context, Found
from .commands import SUDO_VALIDATE
from .run import CommandTimeout, Result


# What sudo says when it will not run anything for this user, whatever password is typed.
_DENIED = (
    "may not run sudo",  # -v / -l, user not in sudoers (1.8 and 1.9)
    "is not in the sudoers file",  # a command, after the password (or older sudo with -n)
    "is not allowed to execute",  # a command the rules do not list
    "is not allowed to run sudo",  # listed for other hosts only
    "do not exist in the passwd database",  # a uid without a passwd entry
)


def read_sudo(result: Result) -> str:
    """One sudo answer: ok, password (it wants one), denied (no rights) or other."""
    if result.ok:
        return "ok"
    text = result.output.lower()
    if "password is required" in text:
        return "password"
    if any(phrase in text for phrase in _DENIED):
        return "denied"
    return "other"


def classify_sudo(true: Optional[Result], validate: Optional[Result] = None) -> str:
    """The kind (module docstring) from what `sudo -n true` and `sudo -n -v` said; both None
    means sudo is not installed. Either may be left out (None) when the other decides."""
    if true is None and validate is None:
        return "none"
    v = read_sudo(validate) if validate is not None else ""
    if v == "denied":
        return v
    t = read_sudo(true) if true is not None else "other"
    if t == "ok":
        # before "password": -v wants one unless every rule of yours is NOPASSWD (verifypw
        # all), as with group sudo plus cloud-init's NOPASSWD drop-in, where `true` runs
        return "nopasswd"
    if v == "password":
        return v
    if v == "ok":
        # -v needs no password (every rule of yours is NOPASSWD), yet `true` is refused: the
        # rules list some other commands only, and bash is not among them.
        return "denied"
    if t == "password":
        return "password"
    return "denied"  # "not in sudoers", or sudo broken here: no way up either way


def fallback_name(uid: int) -> str:
    """The name of a uid that has no passwd entry: from the environment, else "unknown".
    Never another user's name (an image's ENV USER=root run with --user 12345): the plan
    would take that user for this one. A name is held to --user's rule (validate.user_name):
    it lands in the exported scripts, and a newline in it would start a line of its own."""
    for name in (os.environ.get("USER"), os.environ.get("LOGNAME")):
        if not name:
            continue
        try:
            validate.user_name(name)
        except validate.BadInput:
            continue
        try:
            if pwd.getpwnam(name).pw_uid != uid:
                continue
        except KeyError:
            pass
        return name
    return "unknown"


def sudo_kind(ctx: Context) -> Tuple[str, str]:
    """Ask sudo (never prompting): the kind, and for "denied" why, in sudo's words."""
    validate = ctx.run(SUDO_VALIDATE)
    if validate is None:
        return "none", ""
    v = read_sudo(validate)
    true = None if v == "denied" else ctx.run(["sudo", "-n", "true"])
    kind = classify_sudo(true, validate)
    if kind != "denied":
        return kind, ""
    if v == "denied" or true is None:
        return kind, validate.first_line()
    if v == "ok":  # true said "a password is required", which would mislead here
        return kind, "its rules let you run some other commands only, not a shell"
    return kind, true.first_line()


def probe(ctx: Context, found: Found) -> None:
    uid, gid = os.getuid(), os.getgid()
    in_passwd = True
    try:
        pw = pwd.getpwuid(uid)
        name, home = pw.pw_name, pw.pw_dir
    except KeyError:  # a uid with no passwd entry: common with `docker run --user 1234`
        in_passwd = False
        name = fallback_name(uid)
        home = os.environ.get("HOME", "")
        found.note("user.no-passwd", uid=uid)
    user = UserInfo(name=name, uid=uid, gid=gid, home=home, sudo="unknown",
                    in_passwd=in_passwd)
    # Set before sudo is asked: if sudo hangs, who the user is stays known.
    found.set("user", user)
    if uid == 0:
        sudo = "root"
    elif not ctx.run_commands:
        return
    else:
        sudo, why = sudo_kind(ctx)
        if sudo == "password":
            found.note("user.sudo-password")
        elif sudo == "denied" and in_passwd:  # without an entry, the note above says why
            found.note("user.sudo-denied", name=name, why=why)
    found.set("user", UserInfo(name=name, uid=uid, gid=gid, home=home, sudo=sudo,
                               in_passwd=in_passwd))


def current_user(timeout: float = 5.0) -> UserInfo:
    """The user running hpcwizard and their sudo kind, for commands that need no other fact
    (undo): the same probe as detection, alone."""
    found = Found()
    try:
        probe(Context(sysroot="/", run_commands=True, timeout=timeout), found)
    except CommandTimeout:  # sudo hung: who the user is was set first; sudo stays "unknown"
        pass
    return found.values["user"]
