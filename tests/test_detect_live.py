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


def test_probes_are_imported_when_they_run():
    """apply needs detect.user alone: the other probes (and the thread pool's logging) load
    only in detect(), which still imports nothing heavy."""
    code = (
        "import sys; import hpcwizard.detect.user;"
        "early = sorted(m for m in ('hpcwizard.detect.software', 'hpcwizard.detect.mirrors',"
        " 'hpcwizard.detect.gpu', 'concurrent.futures') if m in sys.modules);"
        "from hpcwizard.detect import detect; detect();"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('textual', 'requests', 'torch', 'plumbum', 'numpy'));"
        "print(early, bad, 'hpcwizard.detect.software' in sys.modules)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["[]", "[]", "True"]


# --- the target python3 read from its files, against the interpreters themselves ---------------

SITE_ENTRIES = (
    "import sys, sysconfig\n"
    "std = {sysconfig.get_path('stdlib'), sysconfig.get_path('platstdlib')}\n"
    "print('\\n'.join(p for p in sys.path[1:] if p not in std and not p.endswith(('.zip', 'lib-dynload'))))\n"
)


def _interpreters():
    import glob

    found = [sys.executable, "/usr/bin/python3",
             *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/*/bin/python3")))]
    return [p for p in dict.fromkeys(found) if os.access(p, os.X_OK)]


def _own_site_path(exe: str) -> list:
    res = subprocess.run([exe, "-c", SITE_ENTRIES], capture_output=True, text=True, timeout=60,
                         cwd="/")
    assert res.returncode == 0, res.stderr
    return res.stdout.split()


@pytest.mark.parametrize("exe", _interpreters())
def test_site_path_from_files_is_the_interpreters_own(exe):
    from hpcwizard.detect.target_python import interpreter_layout

    target = interpreter_layout(exe, os.environ, "/")
    if target is None:
        pytest.skip(f"{exe}: a layout left to running the interpreter (not read from files)")
    assert list(target.site_path) == _own_site_path(exe)


def test_the_running_interpreter_is_read_from_its_files():
    from hpcwizard.detect.target_python import interpreter_layout

    assert interpreter_layout(sys.executable, os.environ, "/") is not None


@pytest.mark.parametrize("system_site", [False, True])
@pytest.mark.parametrize("base", [getattr(sys, "_base_executable", sys.executable), "/usr/bin/python3"])
def test_a_real_venv_read_from_its_files(tmp_path, system_site, base):
    from hpcwizard.detect.target_python import interpreter_layout

    if not os.access(base, os.X_OK):
        pytest.skip(f"no {base} on this machine")
    argv = [base, "-m", "venv", "--without-pip", str(tmp_path / "venv")]
    res = subprocess.run(argv + (["--system-site-packages"] if system_site else []),
                         capture_output=True, text=True, timeout=120)
    if res.returncode and "venv" in res.stderr:
        pytest.skip(f"{base} cannot make a venv here (Debian's python3-venv is not installed)")
    assert res.returncode == 0, res.stderr
    exe = str(tmp_path / "venv" / "bin" / "python3")
    target = interpreter_layout(exe, os.environ, "/")
    assert target is not None and target.prefix == str(tmp_path / "venv")
    assert list(target.site_path) == _own_site_path(exe)


def test_torch_from_files_is_what_python3_itself_says():
    from hpcwizard.detect import software
    from hpcwizard.detect.run import run
    from hpcwizard.detect.target_python import find_target_python

    target = find_target_python()
    if target is None:
        pytest.skip("python3 on this PATH is left to running it (not read from files)")
    res = run(["python3", "-c", software.TORCH_SCRIPT], timeout=60)
    assert res is not None and res.ok, res
    assert software.torch_from_files(target) == software.parse_torch_probe(res.stdout)


def test_detect_starts_no_python3_where_the_files_answer(monkeypatch):
    from hpcwizard.detect import base
    from hpcwizard.detect.target_python import find_target_python

    if find_target_python() is None:
        pytest.skip("python3 on this PATH is left to running it (not read from files)")
    started = []
    real_run, real_start = base.run, base.start

    def recording_run(argv, *args, **kwargs):
        started.append(argv[0])
        return real_run(argv, *args, **kwargs)

    def recording_start(argv, *args, **kwargs):  # what detect starts ahead of the probes
        started.append(argv[0])
        return real_start(argv, *args, **kwargs)

    monkeypatch.setattr(base, "run", recording_run)
    monkeypatch.setattr(base, "start", recording_start)
    detect()
    assert started and "python3" not in started
