"""dist/hpcwizard.pyz (tools/build_pyz.py): built once per session, then run on Python 3.9 and
3.13 (pyenv's) in an empty environment — `env -i`, `-I -S`: no site-packages, so nothing but
the archive supplies imports — and compared with the installed hpcwizard. Older Pythons are
refused in one line. The TUI starts from it in tmux and reaches the System screen."""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest

ROOT = Path(__file__).resolve().parent.parent
BASE_ENV = {"PATH": "/usr/bin:/bin"}


def _pyenv_root() -> str:
    try:
        out = subprocess.run(["pyenv", "root"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return os.environ.get("PYENV_ROOT") or "/root/.pyenv"


def find_python(version: str) -> Optional[str]:
    """pyenv's newest X.Y interpreter, else one on the usual paths; None if there is none."""
    def patch(path: str) -> int:
        last = path.split("/versions/")[1].split("/")[0].split(".")[-1]
        return int(last) if last.isdigit() else -1

    found = sorted(glob.glob(f"{_pyenv_root()}/versions/{version}.*/bin/python{version}"),
                   key=patch)
    if found:
        return found[-1]
    for path in (f"/usr/local/bin/python{version}", f"/usr/bin/python{version}"):
        if os.access(path, os.X_OK):
            return path
    return None


def need_python(version: str) -> str:
    py = find_python(version)
    if py is None:
        pytest.skip(f"no Python {version} on this machine (looked in {_pyenv_root()}/versions "
                    f"and /usr/bin, /usr/local/bin)")
    return py


@pytest.fixture(scope="session")
def pyz(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pyz") / "hpcwizard.pyz"
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "build_pyz.py"), "-o", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    assert run.returncode == 0, run.stdout
    return out


def run_pyz(python: str, pyz: Path, *args: str, home: Path, env: Optional[Dict[str, str]] = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
    home.mkdir(parents=True, exist_ok=True)
    return subprocess.run([python, "-I", "-S", str(pyz), *args],
                          env=dict(BASE_ENV, HOME=str(home), **(env or {})), cwd=str(home),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=timeout)


def run_installed(*args: str, home: Path,
                  env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """The installed hpcwizard (this interpreter's), in the same empty environment."""
    home.mkdir(parents=True, exist_ok=True)
    return subprocess.run([sys.executable, "-I", "-m", "hpcwizard", *args],
                          env=dict(BASE_ENV, HOME=str(home), **(env or {})), cwd=str(home),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)


def assert_wrote_nothing(pyz: Path, home: Path) -> None:
    assert sorted(os.listdir(pyz.parent)) == [pyz.name], "written beside the .pyz"
    written = [str(p.relative_to(home)) for p in home.rglob("*")]
    assert written == [], f"written in HOME: {written}"


PYTHONS = ["3.9", "3.13"]


@pytest.mark.parametrize("version", PYTHONS)
def test_version(pyz, version, tmp_path):
    py = need_python(version)
    r = run_pyz(py, pyz, "--version", home=tmp_path / "home")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"hpcwizard 0.1.0 (Python {version}.")
    assert "supports Python 3.9-3.13" in r.stdout
    assert_wrote_nothing(pyz, tmp_path / "home")


@pytest.mark.parametrize("version", PYTHONS)
def test_detect_json_is_the_installed_ones(pyz, version, tmp_path):
    py = need_python(version)
    r = run_pyz(py, pyz, "detect", "--json", home=tmp_path / "home")
    assert r.returncode == 0, r.stderr
    facts = json.loads(r.stdout)
    os_release = dict(line.split("=", 1) for line in
                      Path("/etc/os-release").read_text().splitlines() if "=" in line)
    assert facts["os"]["id"] == os_release["ID"].strip('"')  # debian, here and on CI
    assert facts["user"]["uid"] == os.getuid()
    assert facts["cpus"] == os.cpu_count()
    # The same facts as the installed hpcwizard's. Another run changing this machine (the
    # system tests install and remove packages) can differ in between: a few tries.
    for _ in range(3):
        installed = json.loads(run_installed("detect", "--json", home=tmp_path / "home2").stdout)
        if installed == facts:
            break
        facts = json.loads(run_pyz(py, pyz, "detect", "--json", home=tmp_path / "home").stdout)
    assert installed == facts
    assert_wrote_nothing(pyz, tmp_path / "home")


@pytest.mark.parametrize("version", PYTHONS)
def test_plan_is_the_installed_ones(pyz, version, tmp_path):
    py = need_python(version)
    args = ("plan", "--framework", "mpi", "--network", "tcp")
    r = run_pyz(py, pyz, *args, home=tmp_path / "home")
    assert r.returncode == 0, r.stderr
    assert "openssh-server" in r.stdout and "[1/" in r.stdout
    assert r.stdout == run_installed(*args, home=tmp_path / "home2").stdout
    zh = {"LANG": "zh_CN.UTF-8"}  # the catalogues (package data in subfolders) came along
    r = run_pyz(py, pyz, *args, home=tmp_path / "home", env=zh)
    assert r.returncode == 0, r.stderr
    assert "推荐" in r.stdout
    assert r.stdout == run_installed(*args, home=tmp_path / "home2", env=zh).stdout
    r = run_pyz(py, pyz, "plan", "--framework", "pytorch", "--network", "ib", "--json",
                home=tmp_path / "home")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["steps"]
    assert_wrote_nothing(pyz, tmp_path / "home")


@pytest.mark.parametrize("version", PYTHONS)
def test_export_setup_is_the_installed_ones(pyz, version, tmp_path):
    py = need_python(version)
    args = ("export", "--framework", "mpi", "--network", "tcp", "--format", "setup")
    r = run_pyz(py, pyz, *args, home=tmp_path / "home")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("#!") and "openssh-server" in r.stdout
    script = tmp_path / "setup.sh"
    script.write_text(r.stdout)
    check = subprocess.run(["bash", "-n", str(script)], stderr=subprocess.PIPE, text=True)
    assert check.returncode == 0, check.stderr
    assert r.stdout == run_installed(*args, home=tmp_path / "home2").stdout
    for fmt in ("dockerfile", "launch"):
        r = run_pyz(py, pyz, "export", "--framework", "pytorch", "--network", "ib",
                    "--format", fmt, home=tmp_path / "home")
        assert r.returncode == 0 and r.stdout.strip(), r.stderr
    assert_wrote_nothing(pyz, tmp_path / "home")


@pytest.mark.parametrize("version", PYTHONS)
def test_apply_dry_run_verify_diagnose(pyz, version, tmp_path):
    py = need_python(version)
    home, state = tmp_path / "home", tmp_path / "state"
    env = {"HPCWIZARD_STATE_DIR": str(state)}
    r = run_pyz(py, pyz, "apply", "--framework", "mpi", "--network", "tcp", "--dry-run",
                "--yes", home=home, env=env)
    assert r.returncode == 0, r.stderr
    assert "openssh-server" in r.stdout or "[1]" in r.stdout, r.stdout
    r = run_pyz(py, pyz, "verify", "--framework", "mpi", "--network", "tcp", "--here", "--json",
                home=home, env=env)
    assert r.returncode in (0, 1), r.stderr  # 1: this machine is not configured
    json.loads(r.stdout)
    log = tmp_path / "job.log"
    log.write_text("ssh: connect to host node2 port 2222: Connection refused\n")
    r = run_pyz(py, pyz, "diagnose", "--json", str(log), home=home, env=env)
    assert r.returncode == 0, r.stderr
    assert [d["id"] for d in json.loads(r.stdout)] == ["ssh-refused"]
    assert_wrote_nothing(pyz, home)


@pytest.mark.parametrize("version", PYTHONS)
def test_undo_a_record(pyz, version, tmp_path):
    """undo reads a record (tomli on 3.9, tomllib on 3.13), runs the undo and rewrites it
    (tomli-w): a record made here whose one done step touched a file."""
    py = need_python(version)
    import tomli_w
    from hpcwizard.catalog import load_catalog
    from hpcwizard.choices import make_choices
    from hpcwizard.compat import tomllib
    from hpcwizard.detect import detect
    from hpcwizard.plan import build_plan
    from hpcwizard.record import Record

    marker = tmp_path / "marker"
    marker.write_text("x")
    facts = detect()
    plan = build_plan(facts, make_choices(framework="mpi", network="tcp"), load_catalog())
    record = Record.new(plan, facts, tmp_path / "state" / "r.toml")
    step = dict(record.steps[0], id="test-marker", title="a marker file", kind="shell",
                run=f"touch {marker}", undo=f"rm -f {marker}", status="done", check="")
    step["as"] = "user"  # the job user is you: no machine-wide lock, no sudo
    record.data["steps"] = [step]
    record.data["status"] = "done"
    record.path.parent.mkdir(parents=True)
    record.path.write_text(tomli_w.dumps(record.data))
    r = run_pyz(py, pyz, "undo", str(record.path), "--yes", home=tmp_path / "home",
                env={"HPCWIZARD_STATE_DIR": str(tmp_path / "state")})
    assert r.returncode == 0, r.stdout + r.stderr
    assert not marker.exists()
    after = tomllib.loads(record.path.read_text())
    assert after["status"] == "undone" and after["steps"][0]["status"] == "undone"


@pytest.mark.parametrize("version", ["2.7", "3.6", "3.7", "3.8"])
def test_older_pythons_are_refused_in_one_line(pyz, version, tmp_path):
    py = need_python(version)
    r = subprocess.run([py, "-E", "-s", "-S", str(pyz), "--version"], env=BASE_ENV,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("hpcwizard: needs Python 3.9-3.13, this is "
                                                   f"Python {version}."), r.stderr


def test_certifi_bundle_goes_to_the_cache_dir(pyz, tmp_path):
    """requests asks certifi for a CA file at import: from the .pyz it is one copy in the
    user's cache directory, not a temporary file per run."""
    py = need_python("3.9")
    home = tmp_path / "home"
    home.mkdir()
    code = ("import runpy, sys\n"
            f"sys.path.insert(0, {str(pyz)!r}); sys.argv = [{str(pyz)!r}, '--version']\n"
            "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "import requests.utils, certifi\n"
            "print(requests.utils.DEFAULT_CA_BUNDLE_PATH); print(certifi.where())\n")
    r = subprocess.run([py, "-I", "-S", "-c", code], env=dict(BASE_ENV, HOME=str(home)),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    bundle = Path(lines[-1])
    assert lines[-2] == lines[-1]
    assert bundle.parent == home / ".cache" / "hpcwizard", bundle
    assert bundle.read_text().count("BEGIN CERTIFICATE") > 50


def test_build_is_deterministic(pyz, tmp_path):
    again = tmp_path / "again.pyz"
    subprocess.run([sys.executable, str(ROOT / "tools" / "build_pyz.py"), "-o", str(again)],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600, check=True)
    assert again.read_bytes() == pyz.read_bytes()
    assert os.access(again, os.X_OK) and again.read_bytes().startswith(b"#!/usr/bin/env python3\n")


# --- the TUI ----------------------------------------------------------------------------------

class Tmux:
    def __init__(self) -> None:
        self.socket = f"hpcwizard-pyz-{os.getpid()}"

    def __call__(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], check=True, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=10).stdout

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "pyz")

    def wait_for(self, texts: List[str], timeout: float = 30.0) -> str:
        end = time.monotonic() + timeout
        shown = ""
        while time.monotonic() < end:
            shown = self.screen()
            if all(t in shown for t in texts):
                return shown
            time.sleep(0.2)
        raise AssertionError(f"{texts!r} did not appear within {timeout:g} s; the screen:\n{shown}")

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=10)


@pytest.mark.skipif(not shutil.which("tmux"), reason="needs tmux")
@pytest.mark.parametrize("version", PYTHONS)
def test_tui_from_the_pyz_reaches_the_system_screen(pyz, version, tmp_path):
    py = need_python(version)
    home = tmp_path / "home"
    home.mkdir()
    pretty = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines()
                  if "=" in line)["PRETTY_NAME"].strip('"')
    # textual draws on stderr: not redirected
    command = (f"env -i PATH=/usr/bin:/bin HOME={home} TERM=xterm-256color "
               f"HPCWIZARD_STATE_DIR={tmp_path / 'state'} {py} -I -S {pyz}; "
               "echo HPCWIZARD-EXIT=$?; sleep 60")
    tmux = Tmux()
    try:
        tmux("new-session", "-d", "-s", "pyz", "-x", "80", "-y", "24", "-c", str(tmp_path), command)
        shown = tmux.wait_for(["1/6 System", pretty])  # the facts are shown: detection ran
        assert "Traceback" not in shown
        tmux("send-keys", "-t", "pyz", "q")
        shown = tmux.wait_for(["HPCWIZARD-EXIT="], timeout=15)
        assert "HPCWIZARD-EXIT=0" in shown
    finally:
        tmux.kill()
    assert_wrote_nothing(pyz, home)
