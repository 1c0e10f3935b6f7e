"""How does a step become the shell a person reads? As one call of an operation of the
library recipes/ops.sh (hw_file, hw_block, hw_dropin, hw_packages, hw_sshd), its contents
as a here-document:

    hw_dropin /etc/ssh/sshd_config.d/00-hpcwizard.conf --else-block /etc/ssh/sshd_config ... <<'EOF'
    Port 2222
    PasswordAuthentication no
    EOF

That call is what plan, the wizard's Review, the record and setup.sh show. Its check, undo
and diff are the same call with HW_MODE set (`checked`, `undone`, `diffed`); apply runs the
library and then the text (`runnable`). The library lives in the data package, so it ships
once with the recipes; a record keeps the text it ran with (`library()`, `checksum()`), so
that an upgrade in between cannot change what undo does.
"""
from __future__ import annotations

import hashlib
import shlex
from functools import lru_cache
from typing import Iterable, Optional, Sequence

from . import recipes

DELIMITER = "EOF"
OPERATIONS = ("hw_file", "hw_block", "hw_dropin", "hw_packages", "hw_sshd", "hw_sshd_config",
              "hw_sshd_reload", "hw_ssh_key", "hw_ssh_host_keys")


@lru_cache(maxsize=1)
def library() -> str:
    """The text of recipes/ops.sh as shipped (a wheel, a checkout and the zipapp alike)."""
    return recipes.read_text("ops.sh")


def checksum(text: Optional[str] = None) -> str:
    return hashlib.sha256((library() if text is None else text).encode("utf-8")).hexdigest()


def runnable(text: str, lib: Optional[str] = None) -> str:
    """What bash runs for a step: the library, then the step's own text."""
    return f"{library() if lib is None else lib}\n# --- the step ---\n{text}"


def checked(call: str) -> str:
    return f"export HW_MODE=check\n{call}"


def undone(call: str) -> str:
    return f"export HW_MODE=undo\n{call}"


def diffed(call: str) -> str:
    return f"export HW_MODE=diff\n{call}"


def _q(text: str) -> str:
    return shlex.quote(text)


def _options(pairs: Iterable[tuple]) -> str:
    out = []
    for flag, value in pairs:
        if value is True:
            out.append(flag)
        elif value:
            out.append(f"{flag} {_q(str(value))}")
    return " ".join(out)


def with_contents(head: str, content: str, content_cmd: str = "") -> str:
    """head fed its contents: a here-document (quoted: nothing in it expands), or the
    output of a command (a key file) through a pipe."""
    if content_cmd:
        cmd = content_cmd.strip()
        words = cmd.split(" ")
        if len(words) == 2 and words[0] == "cat":  # a file's contents: read, not piped
            return f"{head} < {words[1]}"
        return f"{cmd} | {head}"
    body = content.strip("\n")
    if DELIMITER in body.splitlines():
        raise ValueError(f"contents contain a line {DELIMITER!r}, the here-document's end")
    return f"{head} <<'{DELIMITER}'\n{body}\n{DELIMITER}"


def file_call(path: str, content: str, mode: str, *, content_cmd: str = "", validate: str = "",
              in_effect: str = "", on_change: str = "") -> str:
    head = " ".join(filter(None, ["hw_file", _q(path), _options([
        ("--mode", mode), ("--validate", validate), ("--in-effect", in_effect),
        ("--on-change", on_change)])]))
    return with_contents(head, content, content_cmd)


def block_call(path: str, content: str, mode: str, *, top: bool = False, content_cmd: str = "",
               validate: str = "", in_effect: str = "", on_change: str = "") -> str:
    head = " ".join(filter(None, ["hw_block", _q(path), _options([
        ("--mode", mode), ("--top", top), ("--validate", validate),
        ("--in-effect", in_effect), ("--on-change", on_change)])]))
    return with_contents(head, content, content_cmd)


def dropin_call(path: str, fallback: str, include: str, content: str, mode: str, *,
                content_cmd: str = "", validate: str = "", in_effect: str = "",
                on_change: str = "") -> str:
    head = " ".join(["hw_dropin", _q(path), _options([
        ("--else-block", fallback), ("--include", include), ("--mode", mode),
        ("--validate", validate), ("--in-effect", in_effect), ("--on-change", on_change)])])
    return with_contents(head, content, content_cmd)


def packages_call(pm: str, names: Sequence[str], lock_timeout: Optional[int] = None) -> str:
    opts = f" --lock-timeout {lock_timeout}" if pm == "apt" and lock_timeout is not None else ""
    return f"hw_packages {pm}{opts} " + " ".join(_q(n) for n in names)


def _bare(call: str) -> str:
    """The call itself, without where its contents come from: no here-document, no command
    piped into it, no file read into it."""
    first = call.split("\n", 1)[0]
    if first.endswith(f" <<'{DELIMITER}'"):
        first = first[: -len(f" <<'{DELIMITER}'")]
    if " | hw_" in first:
        first = "hw_" + first.split(" | hw_", 1)[1]
    if " < " in first:
        first = first.rsplit(" < ", 1)[0]
    return first


def undo_call(call: str) -> str:
    """The call without its contents: undo takes back what was given, whatever it was (and a
    file the contents were read from may be gone by then)."""
    return undone(_bare(call))


def operation(call: str) -> str:
    """The operation a call uses ('hw_sshd', ...), '' for a step of plain shell."""
    word = _bare(call).split(" ", 1)[0]
    return word if word.startswith("hw_") else ""


def functions(*names: str) -> str:
    """The text of some of the library's functions (the launch script embeds the ones it
    needs, so that the rule they keep is written once): each from its `name() {` line to
    the `}` (or `)`) that closes it at the start of a line."""
    lines = library().splitlines()
    out = []
    for name in names:
        start = next((i for i, line in enumerate(lines)
                      if line.startswith(f"{name}() {{") or line.startswith(f"{name}() (")), None)
        if start is None:
            raise KeyError(f"recipes/ops.sh has no function {name}")
        if lines[start].endswith("}"):  # one line: name() { ...; }
            out.append(lines[start])
            continue
        close = "}" if lines[start].endswith("{") else ")"
        end = next(i for i in range(start + 1, len(lines)) if lines[i] == close)
        out.append("\n".join(lines[start:end + 1]))
    return "\n\n".join(out)
