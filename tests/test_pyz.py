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


def unpacked_copies(home: Path) -> List[Path]:
    """The builds the .pyz unpacked in HOME's cache (tools/pyz_cache.py); not the temporary
    directories of unpacks."""
    root = home / ".cache" / "hpcwizard" / "pyz"
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("unpack-")
                  ) if root.is_dir() else []


def assert_wrote_nothing(pyz: Path, home: Path, copy: bool = True) -> None:
    """Nothing beside the .pyz; in HOME only the unpacked copy (copy: one, complete, private,
    nothing half-made beside it), or nothing at all."""
    assert sorted(os.listdir(pyz.parent)) == [pyz.name], "written beside the .pyz"
    copies = unpacked_copies(home)
    if copy:
        assert len(copies) == 1 and (copies[0] / ".complete").is_file(), copies
        for d in (home / ".cache", home / ".cache" / "hpcwizard", copies[0].parent, copies[0]):
            assert oct(d.stat().st_mode & 0o777) == oct(0o700), d
        lock = copies[0].parent / ".lock"  # who unpacks, replaces or removes builds
        outside = [p for p in home.rglob("*") if copies[0] not in (p, *p.parents)
                   and p not in copies[0].parents and p != lock]  # so is an unpack- left
    else:
        outside = list(home.rglob("*"))
    written = [str(p.relative_to(home)) for p in outside]
    assert written == [], f"written in HOME: {written}"


PYTHONS = ["3.9", "3.13"]


# From the unpacked copy (the default) and from the archive itself (HPCWIZARD_PYZ_CACHE=off).
FROM = {"copy": {}, "archive": {"HPCWIZARD_PYZ_CACHE": "off"}}


@pytest.mark.parametrize("source", FROM)
@pytest.mark.parametrize("version", PYTHONS)
def test_version(pyz, version, source, tmp_path):
    py = need_python(version)
    r = run_pyz(py, pyz, "--version", home=tmp_path / "home", env=FROM[source])
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"hpcwizard 0.1.0 (Python {version}.")
    assert "supports Python 3.9-3.13" in r.stdout
    assert_wrote_nothing(pyz, tmp_path / "home", copy=source == "copy")


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


@pytest.mark.parametrize("source", FROM)
@pytest.mark.parametrize("version", PYTHONS)
def test_plan_is_the_installed_ones(pyz, version, source, tmp_path):
    py = need_python(version)
    args = ("plan", "--framework", "mpi", "--network", "tcp")
    r = run_pyz(py, pyz, *args, home=tmp_path / "home", env=FROM[source])
    assert r.returncode == 0, r.stderr
    assert "openssh-server" in r.stdout and "[1/" in r.stdout
    assert r.stdout == run_installed(*args, home=tmp_path / "home2").stdout
    zh = {"LANG": "zh_CN.UTF-8"}  # the catalogues (package data in subfolders) came along
    r = run_pyz(py, pyz, *args, home=tmp_path / "home", env=dict(zh, **FROM[source]))
    assert r.returncode == 0, r.stderr
    assert "推荐" in r.stdout
    assert r.stdout == run_installed(*args, home=tmp_path / "home2", env=zh).stdout
    r = run_pyz(py, pyz, "plan", "--framework", "pytorch", "--network", "ib", "--json",
                home=tmp_path / "home", env=FROM[source])
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["steps"]
    assert_wrote_nothing(pyz, tmp_path / "home", copy=source == "copy")


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
    from hpcwizard.step import RecordStep, Step, StepOutcome

    marker = tmp_path / "marker"
    marker.write_text("x")
    facts = detect()
    plan = build_plan(facts, make_choices(framework="mpi", network="tcp"), load_catalog())
    record = Record.new(plan, facts, tmp_path / "state" / "r.toml")
    # the job user is you: no machine-wide lock, no sudo
    step = Step(id="test-marker", recipe="test", title="a marker file", as_="user",
                kind="shell", check="", run=f"touch {marker}", undo=f"rm -f {marker}")
    record.steps = [RecordStep(step, StepOutcome(status="done"))]
    record.data["status"] = "done"
    record.path.parent.mkdir(parents=True)
    record.path.write_text(tomli_w.dumps(record.to_toml()))
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


def in_pyz(py: str, pyz: Path, home: Path, then: str, env: Optional[Dict[str, str]] = None,
           *args: str) -> subprocess.CompletedProcess:
    """Run the .pyz's __main__ (`--version`) in a Python that goes on with `then` after it."""
    code = ("import runpy, sys\n"
            f"sys.path.insert(0, {str(pyz)!r}); sys.argv = [{str(pyz)!r}, '--version']\n"
            "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\n"
            "except SystemExit:\n    pass\n" + then)
    return subprocess.run([py, "-I", "-S", *args, "-c", code],
                          env=dict(BASE_ENV, HOME=str(home), **(env or {})),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)


@pytest.mark.parametrize("source", FROM)
def test_certifi_bundle_is_a_file_not_a_temporary_copy(pyz, source, tmp_path):
    """requests asks certifi for a CA file at import. From the archive itself it is one copy
    in the user's cache directory, not a temporary file per run; from the unpacked copy it
    is certifi's own file there."""
    py = need_python("3.9")
    home = tmp_path / "home"
    home.mkdir()
    r = in_pyz(py, pyz, home, "import requests.utils, certifi\n"
               "print(requests.utils.DEFAULT_CA_BUNDLE_PATH); print(certifi.where())\n",
               FROM[source])
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    bundle = Path(lines[-1])
    assert lines[-2] == lines[-1]
    if source == "archive":
        assert bundle.parent == home / ".cache" / "hpcwizard" / "pyz", bundle
        assert oct(bundle.parent.stat().st_mode & 0o777) == oct(0o700)
    else:
        assert bundle == unpacked_copies(home)[0] / "certifi" / "cacert.pem"
        assert not list((home / ".cache" / "hpcwizard").glob("certifi-*"))
    assert bundle.read_text().count("BEGIN CERTIFICATE") > 50


def test_build_is_deterministic(pyz, tmp_path):
    again = tmp_path / "again.pyz"
    subprocess.run([sys.executable, str(ROOT / "tools" / "build_pyz.py"), "-o", str(again)],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600, check=True)
    assert again.read_bytes() == pyz.read_bytes()
    assert os.access(again, os.X_OK) and again.read_bytes().startswith(b"#!/usr/bin/env python3\n")


# --- the unpacked copy (tools/pyz_cache.py) ------------------------------------------------

WHERE = "import hpcwizard.cli; print(hpcwizard.cli.__file__)\n"


def pycs(copy: Path) -> Dict[str, int]:
    return {str(p.relative_to(copy)): p.stat().st_mtime_ns
            for p in copy.rglob("__pycache__/*.pyc")}


@pytest.mark.parametrize("version", PYTHONS)
def test_later_starts_import_the_copy_and_its_bytecode(pyz, version, tmp_path):
    """The first start unpacks the archive; Python keeps bytecode beside what it imports
    there, and the next start imports that bytecode instead of compiling again."""
    py = need_python(version)
    home = tmp_path / "home"
    home.mkdir()
    r = in_pyz(py, pyz, home, WHERE)
    assert r.returncode == 0, r.stderr
    [copy] = unpacked_copies(home)
    assert r.stdout.splitlines()[-1] == str(copy / "hpcwizard" / "cli.py")
    tag = f"cpython-{version.replace('.', '')}"
    first = pycs(copy)
    assert f"hpcwizard/__pycache__/cli.{tag}.pyc" in first
    assert f"platformdirs/__pycache__/api.{tag}.pyc" not in first  # read from the zip, first
    r = in_pyz(py, pyz, home, WHERE)
    assert r.returncode == 0, r.stderr
    again = pycs(copy)
    assert {k: again[k] for k in first} == first  # read, not written again
    assert_wrote_nothing(pyz, home)


def test_no_bytecode_asked_runs_the_archive_and_writes_nothing(pyz, tmp_path):
    """-B (or PYTHONDONTWRITEBYTECODE): a copy would keep no bytecode, so none is made."""
    py = need_python("3.13")
    home = tmp_path / "home"
    home.mkdir()
    r = in_pyz(py, pyz, home, WHERE, None, "-B")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == str(pyz / "hpcwizard" / "cli.py")
    assert_wrote_nothing(pyz, home, copy=False)


def _build_id(pyz: Path) -> str:
    import zipfile
    with zipfile.ZipFile(pyz) as z:
        main = z.read("__main__.py").decode()
    return main.split('enter(os.path.dirname(__file__), "')[1].split('"')[0]


def test_a_copy_not_renamed_into_place_is_not_used(pyz, tmp_path):
    """What a kill in the middle of an unpack leaves — a temporary directory, or a build
    directory without its .complete — is never imported; the next start unpacks anew, and
    a temporary directory older than an hour is removed (a younger one may be another
    start's unpack under way)."""
    py = need_python("3.13")
    home = tmp_path / "home"
    root = home / ".cache" / "hpcwizard" / "pyz"
    build = root / _build_id(pyz)
    (build / "hpcwizard").mkdir(parents=True)
    (build / "hpcwizard" / "__init__.py").write_text("raise SystemExit('half-made copy used')\n")
    old, young = root / "unpack-old", root / "unpack-young"
    old.mkdir()
    young.mkdir()
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    for d in (home, home / ".cache", home / ".cache" / "hpcwizard", root):
        d.chmod(0o700)
    r = in_pyz(py, pyz, home, WHERE)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == str(build / "hpcwizard" / "cli.py")
    assert "half-made" not in (build / "hpcwizard" / "__init__.py").read_text()
    assert sorted(p.name for p in root.iterdir()) == sorted([".lock", build.name, "unpack-young"])


def test_a_kill_during_the_unpack_leaves_nothing_used(pyz, tmp_path):
    """kill -9 while the archive is being unpacked: caught by watching for the temporary
    directory; the next start finds no build directory and unpacks it whole."""
    py = need_python("3.13")
    home = tmp_path / "home"
    home.mkdir()
    root = home / ".cache" / "hpcwizard" / "pyz"
    caught = False
    for _ in range(10):  # the unpack takes a few tenths of a second: usually the first try
        shutil.rmtree(root, ignore_errors=True)
        proc = subprocess.Popen([py, "-I", "-S", str(pyz), "--version"],
                                env=dict(BASE_ENV, HOME=str(home)),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while proc.poll() is None:
            if root.is_dir() and any(p.name.startswith("unpack-") and any(p.iterdir())
                                     for p in root.iterdir()):
                proc.kill()
                caught = True
                break
        proc.wait()
        if caught:
            break
    if not caught:
        pytest.skip("the unpack ended before it was seen, ten times: nothing to kill")
    assert not any(p.name == _build_id(pyz) for p in root.iterdir())
    r = in_pyz(py, pyz, home, WHERE)
    assert r.returncode == 0, r.stderr
    [copy] = unpacked_copies(home)
    assert r.stdout.splitlines()[-1] == str(copy / "hpcwizard" / "cli.py")
    assert (copy / ".complete").read_text().strip() == _build_id(pyz)


def test_two_first_starts_at_once_share_one_copy(pyz, tmp_path):
    py = need_python("3.13")
    home = tmp_path / "home"
    home.mkdir()
    procs = [subprocess.Popen([py, "-I", "-S", str(pyz), "--version"],
                              env=dict(BASE_ENV, HOME=str(home)), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    assert all(out.startswith("hpcwizard 0.1.0") for out, _ in outs)
    assert_wrote_nothing(pyz, home)  # one copy, and no temporary directory left


def test_a_copy_others_could_change_is_not_used(pyz, tmp_path):
    """A copy another user could have written in (its directory opened to 0770 or 0755) is
    not imported: it is replaced by a private one. Nothing is made under a cache directory
    that is open to others (0777, without the sticky bit): that runs from the archive."""
    py = need_python("3.13")
    home = tmp_path / "home"
    home.mkdir()
    assert in_pyz(py, pyz, home, WHERE).returncode == 0
    [copy] = unpacked_copies(home)
    for mode in (0o770, 0o755):
        with open(copy / "hpcwizard" / "__init__.py", "a") as f:
            f.write("print('PLANTED')\n")
        copy.chmod(mode)
        r = in_pyz(py, pyz, home, WHERE)
        assert r.returncode == 0, r.stderr
        assert "PLANTED" not in r.stdout
        assert r.stdout.splitlines()[-1] == str(copy / "hpcwizard" / "cli.py"), mode
        assert_wrote_nothing(pyz, home)  # one copy, private again
    other = tmp_path / "other"
    (other / ".cache").mkdir(parents=True)
    (other / ".cache").chmod(0o777)
    r = in_pyz(py, pyz, other, WHERE)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == str(pyz / "hpcwizard" / "cli.py")
    assert list((other / ".cache").iterdir()) == []


def test_only_the_builds_used_last_are_kept(pyz, tmp_path):
    py = need_python("3.13")
    home = tmp_path / "home"
    root = home / ".cache" / "hpcwizard" / "pyz"
    now = time.time()
    for i, name in enumerate(["b1", "b2", "b3", "b4"]):  # b4 used last
        (root / name).mkdir(parents=True)
        (root / name / ".complete").write_text(name + "\n")
        os.utime(root / name / ".complete", (now - 1000 + i, now - 1000 + i))
    for d in (home, home / ".cache", home / ".cache" / "hpcwizard", root):
        d.chmod(0o700)
    import fcntl
    held = os.open(root / "b1" / ".complete", os.O_RDONLY)  # b1's wizard is still open
    fcntl.flock(held, fcntl.LOCK_SH)
    try:
        assert in_pyz(py, pyz, home, WHERE).returncode == 0
    finally:
        os.close(held)
    builds = sorted(p.name for p in root.iterdir() if p.is_dir())
    assert [b for b in builds if not b.startswith("unpack-")] == sorted(
        ["b1", "b3", "b4", _build_id(pyz)])
    assert not [b for b in builds if b.startswith("unpack-")]  # b2 removed whole


def test_a_bad_cache_switch_is_one_line_and_status_2(pyz, tmp_path):
    py = need_python("3.13")
    home = tmp_path / "home"
    r = run_pyz(py, pyz, "--version", home=home, env={"HPCWIZARD_PYZ_CACHE": "disable"})
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == "hpcwizard: HPCWIZARD_PYZ_CACHE=disable: give on or off\n"
    assert_wrote_nothing(pyz, home, copy=False)


def test_links_on_the_way_are_resolved_once_and_never_chmod_ed(pyz, tmp_path):
    """The copy is imported by the path that was checked, links resolved: a link on the way
    swapped afterwards (by whoever owns it) changes nothing imported. And what exists on the
    way is never chmod-ed: a ~/.cache that links to a file leaves that file as it was."""
    py = need_python("3.13")
    home = tmp_path / "home"
    home.mkdir()
    real = tmp_path / "real-cache"
    real.mkdir(mode=0o700)
    (home / ".cache").symlink_to(real)
    r = in_pyz(py, pyz, home, WHERE)
    assert r.returncode == 0, r.stderr
    [copy] = [p for p in (real / "hpcwizard" / "pyz").iterdir() if p.is_dir()]
    assert r.stdout.splitlines()[-1] == str(copy / "hpcwizard" / "cli.py")
    victim = tmp_path / "victim"
    victim.write_text("x")
    victim.chmod(0o644)
    other = tmp_path / "other"
    other.mkdir()
    (other / ".cache").symlink_to(victim)
    r = in_pyz(py, pyz, other, WHERE)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == str(pyz / "hpcwizard" / "cli.py")
    assert oct(victim.stat().st_mode & 0o777) == oct(0o644)
    # a link realpath cannot resolve (a loop, here; or one whose target is missing) stays in
    # the path it returns: refused, whatever it might point to by the time of an import
    looped = tmp_path / "looped"
    looped.mkdir()
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (looped / ".cache").symlink_to(tmp_path / "loop")
    for env in ({}, FROM["archive"]):  # the copy, and the CA file of a run from the archive
        r = in_pyz(py, pyz, looped, WHERE + "import certifi, requests\nprint(certifi.where())\n",
                   env)
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines()[-2] == str(pyz / "hpcwizard" / "cli.py")
        assert "loop" not in r.stdout.splitlines()[-1]


_SECOND_USER = pytest.mark.skipif(
    os.geteuid() != 0 or os.environ.get("HPCWIZARD_SYSTEM_TESTS") != "1",
    reason="creates a second real user: root with HPCWIZARD_SYSTEM_TESTS=1 (CI sets it)")


@pytest.fixture
def other_user():
    import pwd
    name = f"hpcpyz{os.getpid() % 100000}"
    subprocess.run(["userdel", "-r", name], capture_output=True)
    made = subprocess.run(["useradd", "-m", "-U", name], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)
        gone = subprocess.run(["userdel", "-r", name], capture_output=True, text=True)
        assert gone.returncode in (0, 12), gone.stderr  # 12: no mail spool


@_SECOND_USER
def test_root_with_another_users_home_writes_nothing_there(pyz, other_user, tmp_path):
    """Root under sudo may keep HOME=/home/alice: then nothing is made in alice's home and
    nothing there is imported — it runs from the archive. As alice, her copy is hers."""
    py = need_python("3.13")
    home = Path(other_user.pw_dir)
    before = sorted(str(p) for p in home.rglob("*"))
    r = in_pyz(py, pyz, home, WHERE)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == str(pyz / "hpcwizard" / "cli.py")
    assert sorted(str(p) for p in home.rglob("*")) == before
    # nor are CA certificates for a download read from there, or written
    (home / ".cache" / "hpcwizard" / "pyz").mkdir(parents=True, mode=0o700)
    import zipfile
    [meta] = [n for n in zipfile.ZipFile(pyz).namelist()
              if n.startswith("certifi-") and n.endswith(".dist-info/METADATA")]
    version = meta.split("-")[1].rsplit(".dist", 1)[0]
    planted = home / ".cache" / "hpcwizard" / "pyz" / f"certifi-{version}-cacert.pem"
    planted.write_text("not a CA bundle\n")  # what root would trust, were it read
    for p in (home / ".cache", home / ".cache" / "hpcwizard", planted.parent, planted):
        os.chown(p, other_user.pw_uid, other_user.pw_gid)
    before = sorted(str(p) for p in home.rglob("*"))
    r = in_pyz(py, pyz, home, "import certifi, requests.utils\nprint(certifi.where())\n",
               FROM["archive"])
    assert r.returncode == 0, r.stderr
    assert not r.stdout.splitlines()[-1].startswith(str(home)), r.stdout
    assert sorted(str(p) for p in home.rglob("*")) == before
    # nor is the start held by a .complete that is the other user's FIFO
    build = home / ".cache" / "hpcwizard" / "pyz" / _build_id(pyz)
    build.mkdir(parents=True, mode=0o700)
    os.mkfifo(build / ".complete")
    for p in (build.parent, build, build / ".complete"):
        os.chown(p, other_user.pw_uid, other_user.pw_gid)
    r = in_pyz(py, pyz, home, WHERE)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == str(pyz / "hpcwizard" / "cli.py")
    shutil.rmtree(home / ".cache")
    # alice's own start, with a copy of the archive and a Python she can run (pyenv's are
    # under root's 0700 home)
    system_py = "/usr/bin/python3"
    if not os.access(system_py, os.X_OK):
        pytest.skip("the second half needs the distribution's /usr/bin/python3")
    theirs = home / "hpcwizard.pyz"
    shutil.copyfile(pyz, theirs)
    os.chown(theirs, other_user.pw_uid, other_user.pw_gid)
    r = subprocess.run([shutil.which("runuser") or "runuser", "-u", other_user.pw_name, "--",
                        system_py, "-I", "-S", str(theirs), "--version"], env=dict(BASE_ENV, HOME=str(home)), cwd="/",
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    [copy] = unpacked_copies(home)
    for d in (copy, copy.parent, copy.parent.parent):
        st = d.stat()
        assert (st.st_uid, st.st_mode & 0o777) == (other_user.pw_uid, 0o700), d
    # and root, given alice's HOME again, does not take up alice's copy either
    r = in_pyz(py, pyz, home, WHERE)
    assert r.stdout.splitlines()[-1] == str(pyz / "hpcwizard" / "cli.py")


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
        tmux.wait_for(["Quit hpcwizard?"])  # q asks where nothing has run yet
        tmux("send-keys", "-t", "pyz", "y")
        shown = tmux.wait_for(["HPCWIZARD-EXIT="], timeout=15)
        assert "HPCWIZARD-EXIT=0" in shown
    finally:
        tmux.kill()
    assert_wrote_nothing(pyz, home)


def _unpacker(monkeypatch):
    """tools/pyz_cache.py as a module, as if Python kept bytecode (this process may not)."""
    import importlib.util
    import types
    spec = importlib.util.spec_from_file_location("pyz_cache_under_test",
                                                  ROOT / "tools" / "pyz_cache.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "sys", types.SimpleNamespace(
        flags=types.SimpleNamespace(dont_write_bytecode=False), stderr=sys.stderr, path=[]))
    return mod


def test_a_link_swapped_while_it_is_checked_is_not_followed(tmp_path, monkeypatch):
    """realpath leaves a link it cannot resolve (a loop) in the path it returns; were that
    path checked by resolving it again, whoever owns the link could point it at a good copy
    for the check and at their own files for the imports. The path is checked as written:
    a link in it is refused, whatever it points to at the time."""
    mod = _unpacker(monkeypatch)
    good = tmp_path / "good"
    copy = good / "hpcwizard" / "pyz" / "abc"
    copy.mkdir(parents=True)
    (copy / ".complete").write_text("abc\n")
    for d in (tmp_path, good, good / "hpcwizard", copy.parent, copy):
        d.chmod(0o700)
    link = tmp_path / "link"
    monkeypatch.setattr(mod, "cache_root", lambda: str(link / "hpcwizard" / "pyz"))
    # the control: a link that resolves from the start is followed once, and the copy used
    link.symlink_to(good)
    assert mod.unpacked("/nonexistent.pyz", "abc") == str(copy)
    # the attack: a loop when resolved, the good copy when checked
    link.unlink()
    link.symlink_to(link)
    checked = mod.trusted

    def swapped(path, private_from):
        if os.readlink(link) != str(good):
            link.unlink()
            link.symlink_to(good)
        return checked(path, private_from)

    monkeypatch.setattr(mod, "trusted", swapped)
    assert mod.unpacked("/nonexistent.pyz", "abc") is None
