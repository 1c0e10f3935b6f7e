"""detect() on the machine running the tests, and the cost of importing hpcwizard.detect."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from hpcwizard.detect import detect
from hpcwizard.detect.os_release import parse_os_release
from hpcwizard.detect.summary import format_summary
from hpcwizard.facts import Facts


@pytest.fixture(scope="module")
def facts() -> Facts:
    start = time.monotonic()
    f = detect()
    assert time.monotonic() - start < 30
    return f


def test_this_machine_basic_sanity(facts):
    try:
        with open("/etc/os-release") as fh:
            os_id = parse_os_release(fh.read()).get("ID", "")
    except OSError:
        os_id = ""
    if os_id != "debian":
        pytest.skip("the development and CI machines are Debian; this one is not")
    assert facts.os.id == "debian"
    assert (facts.os.family, facts.os.package_manager) == ("debian", "apt")
    assert facts.cpus is not None and facts.cpus >= 1
    assert facts.memory_mib is not None and facts.memory_mib > 0
    assert facts.user.uid == os.getuid() and facts.user.name
    assert facts.user.sudo != "unknown"
    assert facts.hostname
    lo = [i for i in facts.ifaces if i.name == "lo"]
    assert lo and "127.0.0.1/8" in lo[0].addresses
    assert facts.software.ssh_port_listening is not None
    assert facts.software.packages is not None and "dpkg" in facts.software.packages
    assert not any(n.startswith("Commands were not run") for n in facts.notes)
    assert not any(n.startswith("Could not check") for n in facts.notes), facts.notes


def test_this_machine_summary(facts):
    text = format_summary(facts)
    assert text.startswith("System\n")
    assert facts.os.pretty_name in text
    assert f"CPUs           {facts.cpus}" in text
    assert "lo" in text and "127.0.0.1/8" in text


def test_this_machine_facts_are_json(facts):
    data = json.loads(json.dumps(facts.to_dict()))
    assert Facts.from_dict(data) == facts


def test_import_is_cheap():
    code = (
        "import sys, time; t = time.monotonic();"
        "import hpcwizard.detect, hpcwizard.detect.summary;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('textual', 'requests', 'torch', 'plumbum', 'numpy'));"
        "print(bad, round(time.monotonic() - t, 3))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    bad, took = res.stdout.rsplit(" ", 1)
    assert bad == "[]"
    assert float(took) < 1.0
