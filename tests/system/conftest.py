"""System tests change this machine for real (apt packages, sshd, users, /etc/hosts, network
namespaces). They run only as root with HPCWIZARD_SYSTEM_TESTS=1 (CI sets it); otherwise
they are skipped with the reason."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

HERE = Path(__file__).parent
TOOLS = ("ip", "unshare", "runuser", "useradd", "userdel", "usermod", "apt-get", "dpkg-query")


def _skip_reason() -> str:
    if os.environ.get("HPCWIZARD_SYSTEM_TESTS") != "1":
        return ("system test: it changes this machine for real (packages, sshd, users, "
                "/etc/hosts); set HPCWIZARD_SYSTEM_TESTS=1 and run as root to run it")
    if os.geteuid() != 0:
        return "system test: needs root (HPCWIZARD_SYSTEM_TESTS=1 is set, but uid is not 0)"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return f"system test: needs {', '.join(missing)} (a Debian-family machine)"
    return ""


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    reason = _skip_reason()
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.system)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
