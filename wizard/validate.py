"""Is this value safe and sensible? Every value a user gives is checked here, once, before
it reaches a plan; the plan then renders shell text only from checked values.

Each function returns the normalised value or raises BadInput with one line a person can
act on. The CLI turns BadInput into exit status 2; the TUI shows it at the field.
"""
from __future__ import annotations

import re
from typing import List, Optional

from .i18n import _
from .safe_text import cut


class BadInput(ValueError):
    """One line naming the problem; shown as is, never with a traceback. `field` names the
    kind of value refused ("user", "port", "peers"), so that a form can show the message at
    its field whatever the language of the message."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field


# POSIX portable user names as useradd accepts them (NAME_REGEX of adduser, plus '.').
_USER = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")
# RFC 1123 host names: labels of letters, digits and inner hyphens, dots between.
_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")
# ssh_config Host patterns: host-name characters plus the wildcards * and ?; never a leading
# '-', which the check `ssh -G PATTERN` would read as an option (-oProxyCommand=...).
_PATTERN = re.compile(r"^(?!-)[A-Za-z0-9.*?_-]{1,253}$")
_SHA256 = re.compile(r"^[0-9a-fA-F]{64}$")
# http(s) URLs of RFC 3986 characters, minus the single quote: the plan puts a URL inside
# single quotes in shell text, so nothing else in it can end the quoting or expand.
_URL = re.compile(r"^https?://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?"
                  r"(/[A-Za-z0-9._~!$&()*+,;=:@%/?#-]*)?$")
_PACKAGE_FILE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+~-]*\.(deb|rpm)$")


_ASCII_NUMBER = re.compile(r"[0-9]{1,18}")


def ascii_int(value: object) -> Optional[int]:
    """The number plain ASCII digits stand for (surrounding blanks allowed), else None."""
    text = str(value).strip()
    return int(text) if _ASCII_NUMBER.fullmatch(text) else None


def port(value: object) -> int:
    number = ascii_int(value)  # ASCII digits: '²²²²'.isdigit() is True, int('٢٢٢٢') is 2222
    if number is None:
        raise BadInput(_("port {value!r} is not a number: give a TCP port from 1 to 65535")
                       .format(value=cut(value)), "port")
    if not 1 <= number <= 65535:
        raise BadInput(_("port {port} is out of range: give a TCP port from 1 to 65535")
                       .format(port=number), "port")
    return number


def user_name(value: str) -> str:
    if not _USER.fullmatch(value or ""):
        raise BadInput(_(
            "user name {value!r} is not valid: use lower-case letters, digits, '_', '-', '.', "
            "starting with a letter or '_', at most 32 characters").format(value=cut(value)),
            "user")
    return value


def host_name(value: str) -> str:
    value = (value or "").strip()
    if len(value) > 253 or not value or not all(
            _LABEL.fullmatch(p) for p in value.split(".")):
        raise BadInput(_(
            "host name {value!r} is not valid: use letters, digits, '-' and '.', "
            "no spaces or other characters").format(value=cut(value)), "host")
    return value


def host_list(value: str) -> List[str]:
    names = [n.strip() for n in (value or "").split(",") if n.strip()]
    if not names:
        raise BadInput(_("the host list is empty: give names separated by commas, e.g. "
                         "node1,node2"), "hosts")
    checked = [host_name(n) for n in names]
    if len(set(checked)) != len(checked):
        raise BadInput(_("the host list {value!r} names a host twice").format(value=cut(value)),
                       "hosts")
    return checked


def host_pattern(value: str) -> str:
    if not _PATTERN.fullmatch(value or ""):
        raise BadInput(_(
            "host pattern {value!r} is not valid: use host-name characters and the wildcards "
            "* and ?, not starting with '-', e.g. 'job-*'").format(value=cut(value)), "peers")
    return value


def sha256(value: str) -> str:
    if not re.fullmatch(_SHA256, value or ""):
        raise BadInput(_("sha256 {value!r} is not 64 hexadecimal digits").format(value=cut(value)),
                       "sha256")
    return value.lower()


def url(value: str) -> str:
    text = (value or "").strip()
    if not _URL.fullmatch(text) or len(text) > 2000:
        raise BadInput(_("URL {value!r} is not valid: give an http:// or https:// address "
                         "without spaces or quotes").format(value=cut(value)), "url")
    return text


def package_file_name(value: str) -> str:
    """The .deb/.rpm file a package URL names (its last path segment, query dropped)."""
    path = value.split("#", 1)[0].split("?", 1)[0]
    name = path.rstrip("/").rsplit("/", 1)[-1] if "//" in path and path.count("/") > 2 else ""
    if not _PACKAGE_FILE.fullmatch(name):
        raise BadInput(_("URL {value!r} does not end in a package file name (something.deb "
                         "or something.rpm)").format(value=cut(value)), "url")
    return name


def choice(name: str, value: str, allowed: "tuple[str, ...]") -> str:
    if value not in allowed:
        raise BadInput(_("{name} {value!r} is not one of: {allowed}").format(
            name=name, value=cut(value), allowed=", ".join(allowed)), name)
    return value
