"""Which distribution, which family, which package manager?

Family comes from os-release ID, then ID_LIKE, then which package manager is installed under
the sysroot. Some IDs need the last step: openEuler and Kylin Server have no ID_LIKE, and
UOS/Kylin ship both Debian-based and RPM-based editions under the same ID.
"""
from __future__ import annotations

import re
import shlex
from typing import Dict, Iterable, Optional, Sequence, Tuple

from ..facts import OsInfo
from .base import Context, Found

# Lower-cased os-release IDs (and ID_LIKE words) -> family.
KNOWN_IDS: Dict[str, str] = {
    # Debian family
    "debian": "debian", "ubuntu": "debian", "deepin": "debian", "linuxmint": "debian",
    "pop": "debian", "raspbian": "debian", "kali": "debian",
    # RHEL family
    "rhel": "rhel", "centos": "rhel", "rocky": "rhel", "almalinux": "rhel", "fedora": "rhel",
    "ol": "rhel", "amzn": "rhel", "openeuler": "rhel", "anolis": "rhel", "tencentos": "rhel",
    "opencloudos": "rhel", "alinux": "rhel", "euleros": "rhel", "hce": "rhel",
    "circle": "rhel", "eurolinux": "rhel", "virtuozzo": "rhel", "scientific": "rhel",
    # SUSE
    "suse": "suse", "opensuse": "suse", "opensuse-leap": "suse", "opensuse-tumbleweed": "suse",
    "sles": "suse", "sled": "suse", "sle_hpc": "suse", "sle-micro": "suse",
    # Alpine
    "alpine": "alpine",
}

# IDs used by both a Debian-based and an RPM-based edition: the installed package manager
# decides; without one, the NAME; then the default given here.
AMBIGUOUS_IDS: Dict[str, str] = {
    "kylin": "rhel",  # Kylin Linux Advanced Server (RPM); Kylin Desktop is Debian-based
    "uos": "debian",  # UnionTech OS: desktop and server "a" editions are Debian-based
    "uniontech": "debian",
}

# Package manager executables looked for under <sysroot>/usr/bin and <sysroot>/bin.
PM_PROGRAMS: Tuple[Tuple[str, str], ...] = (
    ("apt-get", "apt"), ("dnf", "dnf"), ("yum", "yum"), ("zypper", "zypper"), ("apk", "apk"),
)
PM_FAMILY = {"apt": "debian", "dnf": "rhel", "yum": "rhel", "zypper": "suse", "apk": "alpine"}


def parse_os_release(text: str) -> Dict[str, str]:
    """KEY=value lines (values optionally quoted, shell-style) -> dict. Junk lines are skipped."""
    fields: Dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, raw = line.partition("=")
        key = key.strip()
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            continue
        try:
            parts = shlex.split(raw, posix=True)
            value = " ".join(parts)
        except ValueError:  # unbalanced quote: keep the text as it is
            value = raw.strip().strip("\"'")
        fields[key] = value
    return fields


def family_of(
    os_id: str,
    id_like: Sequence[str] = (),
    package_managers: Iterable[str] = (),
    name: str = "",
) -> str:
    """The family for an os-release ID, its ID_LIKE words and the package managers present."""
    oid = os_id.lower()
    pms = list(package_managers)
    from_pm = PM_FAMILY[pms[0]] if pms else None
    if oid in KNOWN_IDS:
        return KNOWN_IDS[oid]
    if oid in AMBIGUOUS_IDS:
        for word in id_like:
            if word.lower() in KNOWN_IDS:
                return KNOWN_IDS[word.lower()]
        if from_pm:
            return from_pm
        lname = name.lower()
        if "desktop" in lname:
            return "debian"
        if "server" in lname and oid == "kylin":
            return "rhel"
        return AMBIGUOUS_IDS[oid]
    for word in id_like:
        if word.lower() in KNOWN_IDS:
            return KNOWN_IDS[word.lower()]
    return from_pm or "unknown"


def package_manager_of(
    family: str, package_managers: Iterable[str], os_id: str = "", version_id: str = ""
) -> str:
    """apt / dnf / yum / zypper / apk, or "" when none can be named."""
    pms = list(package_managers)
    if family == "debian":
        return "apt"
    if family == "suse":
        return "zypper"
    if family == "alpine":
        return "apk"
    if family == "rhel":
        if "dnf" in pms:
            return "dnf"
        if "yum" in pms:
            return "yum"
        # Nothing installed under the sysroot to look at: go by the release.
        major = _major(version_id)
        oid = os_id.lower()
        if oid in ("rhel", "centos", "ol", "scientific") and major is not None and major <= 7:
            return "yum"
        if oid == "amzn" and major is not None and major <= 2:
            return "yum"
        return "dnf"
    return pms[0] if pms else ""


def _major(version_id: str) -> Optional[int]:
    m = re.match(r"\s*[vV]?([0-9]{1,18})", version_id or "")
    return int(m.group(1)) if m else None


def os_info_from(fields: Dict[str, str], package_managers: Iterable[str]) -> OsInfo:
    pms = list(package_managers)
    os_id = fields.get("ID", "").strip() or "unknown"
    id_like = tuple(fields.get("ID_LIKE", "").split())
    version_id = fields.get("VERSION_ID", "")
    family = family_of(os_id, id_like, pms, fields.get("NAME", ""))
    return OsInfo(
        id=os_id.lower() if os_id != "unknown" else os_id,
        version_id=version_id,
        pretty_name=fields.get("PRETTY_NAME", "") or fields.get("NAME", ""),
        id_like=id_like,
        family=family,
        package_manager=package_manager_of(family, pms, os_id, version_id),
    )


def installed_package_managers(ctx: Context) -> Tuple[str, ...]:
    found = []
    for program, pm in PM_PROGRAMS:
        if any(ctx.exists(f"{d}/{program}") for d in ("usr/bin", "bin", "usr/sbin", "sbin")):
            found.append(pm)
    return tuple(found)


def probe(ctx: Context, found: Found) -> None:
    text = None
    for rel in ("etc/os-release", "usr/lib/os-release"):
        text = ctx.read(rel)
        if text is not None:
            break
    pms = installed_package_managers(ctx)
    refused = [ctx.refused[rel] for rel in ("etc/os-release", "usr/lib/os-release")
               if rel in ctx.refused]
    if text is None and refused:
        found.note("os.refused", reasons="; ".join(refused))
        fields: Dict[str, str] = {}
    elif text is None:
        found.note("os.missing")
        fields = {}
    else:
        if refused:  # etc/os-release refused, usr/lib/os-release read
            found.note("os.refused-read-lib", reason=refused[0])
        fields = parse_os_release(text)
    info = os_info_from(fields, pms)
    if info.family == "unknown":
        found.note("os.unknown-family", id=info.id)
    found.set("os", info)
