"""PyTorch and NCCL versions read from the target python3's files, without starting it:
fake interpreter trees (a venv, Debian's dist-packages, a conda-like prefix, pyenv shims),
and the cases where only starting the interpreter can tell."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Optional

import pytest

from hpcwizard.detect import detect, software
from hpcwizard.detect.base import Context, Found
from hpcwizard.detect.target_python import find_target_python, pyenv_version_names

UPSTREAM_SITE = '''"""Append module search paths for third-party packages to sys.path.

This will append site-specific paths like /usr/local/lib/python3.11/site-packages.
"""
PREFIXES = [sys.prefix, sys.exec_prefix]
def getsitepackages(prefixes=None):
    libdirs = [sys.platlibdir]
    path = os.path.join(prefix, libdir, "python%d.%d" % sys.version_info[:2], "site-packages")
def venv(known_paths):
    pass
'''
DEBIAN_SITE = UPSTREAM_SITE.replace(
    '"site-packages")',
    '"site-packages")\n    sitepackages.append(os.path.join(prefix, "local/lib", "python3.11", '
    '"dist-packages"))\n    sitepackages.append(os.path.join(prefix, "lib", "python3", "dist-packages"))')
# Fedora's site.py puts /usr/local first in code: a layout read here would miss it.
FEDORA_SITE = UPSTREAM_SITE.replace("PREFIXES = [sys.prefix, sys.exec_prefix]",
                                    'PREFIXES = ["/usr/local", sys.prefix, sys.exec_prefix]')

VERSION_PY = """from typing import Optional

__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'rocm', 'xpu']
__version__ = '{version}'
debug = False
cuda: Optional[str] = {cuda}
git_version = 'cf30153c4c131c8164ee7798e5022d810682e2cb'
"""


def fake_python(prefix: Path, version: str = "3.11", site_py: str = UPSTREAM_SITE) -> Path:
    """An installation's files as getpath and site.py see them: bin/pythonX.Y (an ELF header
    and nothing else: it cannot run, so a test that started it would fail), bin/python3, the
    standard library's landmark and site.py."""
    bindir = prefix / "bin"
    bindir.mkdir(parents=True)
    exe = bindir / f"python{version}"
    exe.write_bytes(b"\x7fELF\x02\x01\x01" + b"\0" * 57)
    exe.chmod(0o755)
    (bindir / "python3").symlink_to(exe.name)
    lib = prefix / "lib" / f"python{version}"
    (lib / "lib-dynload").mkdir(parents=True)
    (lib / "os.py").write_text("")
    (lib / "site.py").write_text(site_py)
    return bindir / "python3"


def fake_venv(venv: Path, base: Path, system_site: bool = False, version: str = "3.11") -> Path:
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python3").symlink_to(base / "bin" / f"python{version}")
    (venv / "lib" / f"python{version}" / "site-packages").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(
        f"home = {base / 'bin'}\n"
        f"include-system-site-packages = {'true' if system_site else 'false'}\n"
        f"version = {version}.7\n")
    return venv / "bin" / "python3"


def site(prefix: Path, version: str = "3.11") -> Path:
    d = prefix / "lib" / f"python{version}" / "site-packages"
    d.mkdir(parents=True, exist_ok=True)
    return d


def add_torch(site_dir: Path, version: str = "2.4.0+cu124", cuda: Optional[str] = "12.4") -> None:
    pkg = site_dir / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('nothing may import this torch')\n")
    (pkg / "version.py").write_text(VERSION_PY.format(version=version,
                                                      cuda=repr(cuda) if cuda else "None"))
    info = site_dir / f"torch-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.4\nName: torch\nVersion: {version}\n\n")


def add_nccl(site_dir: Path, cu: str, version: str) -> None:
    info = site_dir / f"nvidia_nccl_{cu}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: nvidia-nccl-{cu}\nVersion: {version}\n"
        "Summary: NVIDIA Collective Communication Library (NCCL) Runtime\n")


def env_for(bindir: Path, tmp_path: Path, **extra: str) -> Dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {"PATH": str(bindir), "HOME": str(home), **extra}


def read(env: Dict[str, str], cwd: Optional[Path] = None) -> Optional[Dict[str, str]]:
    return software.torch_from_files(find_target_python("python3", env, str(cwd) if cwd else None))


# --- layouts ----------------------------------------------------------------------------------

def test_a_venv_sees_its_own_torch_not_the_base_one(tmp_path):
    base = tmp_path / "base"
    fake_python(base)
    add_torch(site(base), "2.1.0+cpu", None)
    exe = fake_venv(tmp_path / "venv", base)
    add_torch(site(tmp_path / "venv"), "2.4.0+cu124", "12.4")
    add_nccl(site(tmp_path / "venv"), "cu12", "2.21.5")
    target = find_target_python("python3", env_for(exe.parent, tmp_path))
    assert target is not None
    assert target.prefix == str(tmp_path / "venv") and target.base_prefix == str(base)
    assert target.site_path == (str(site(tmp_path / "venv")),)  # no base, no user site
    assert software.torch_from_files(target) == {"torch": "2.4.0+cu124", "cuda": "12.4",
                                                 "nccl": "2.21.5"}


def test_a_venv_with_system_site_packages_falls_through_to_the_base(tmp_path):
    base = tmp_path / "base"
    fake_python(base)
    add_torch(site(base), "2.1.0+cpu", None)
    exe = fake_venv(tmp_path / "venv", base, system_site=True)
    env = env_for(exe.parent, tmp_path)
    user = site(Path(env["HOME"]) / ".local")
    target = find_target_python("python3", env)
    assert target is not None
    assert target.site_path == (str(site(tmp_path / "venv")), str(user), str(site(base)))
    assert read(env)["torch"] == "2.1.0+cpu"


def test_debian_dist_packages_in_site_order(tmp_path):
    usr = tmp_path / "usr"
    exe = fake_python(usr, site_py=DEBIAN_SITE)
    system = usr / "lib/python3/dist-packages"
    local = usr / "local/lib/python3.11/dist-packages"
    add_torch(system, "2.0.1", None)
    env = env_for(exe.parent, tmp_path)
    target = find_target_python("python3", env)
    assert target is not None and target.site_path == (str(system),)
    assert read(env)["torch"] == "2.0.1"
    add_torch(local, "2.5.1+cu121", "12.1")  # pip as root on Debian: /usr/local, found first
    assert read(env) == {"torch": "2.5.1+cu121", "cuda": "12.1", "nccl": ""}
    assert find_target_python("python3", env).site_path == (str(local), str(system))


def test_a_conda_like_prefix(tmp_path):
    conda = tmp_path / "miniforge3"
    exe = fake_python(conda, version="3.12")
    (conda / "conda-meta").mkdir()
    (conda / "conda-meta" / "python-3.12.8-h9e4cc4f_1_cpython.json").write_text("{}")
    add_torch(site(conda, "3.12"), "2.5.1+cu121", "12.1")
    add_nccl(site(conda, "3.12"), "cu12", "2.21.5")
    env = env_for(exe.parent, tmp_path)
    target = find_target_python("python3", env)
    assert target is not None and (target.version, target.prefix) == ("3.12", str(conda))
    assert read(env) == {"torch": "2.5.1+cu121", "cuda": "12.1", "nccl": "2.21.5"}


@pytest.mark.parametrize("wheels, nccl", [
    ((("cu12", "2.21.5"),), "2.21.5"),
    ((("cu11", "2.14.3"),), "2.14.3"),
    ((("cu12", "2.21.5"), ("cu13", "2.27.7")), "2.27.7"),  # the newest CUDA's, as the probe asks
    ((), ""),
])
def test_nccl_from_the_nvidia_wheel_or_none(tmp_path, wheels, nccl):
    exe = fake_python(tmp_path / "py")
    add_torch(site(tmp_path / "py"))
    for cu, version in wheels:
        add_nccl(site(tmp_path / "py"), cu, version)
    assert read(env_for(exe.parent, tmp_path))["nccl"] == nccl


def test_torch_absent_is_what_the_interpreter_would_say(tmp_path):
    exe = fake_python(tmp_path / "py")
    site(tmp_path / "py")
    assert read(env_for(exe.parent, tmp_path)) == {
        "torch": "", "cuda": "", "nccl": "", "error": "ModuleNotFoundError: No module named 'torch'"}


def test_a_cuda_local_version_is_kept_whole(tmp_path):
    exe = fake_python(tmp_path / "py")
    add_torch(site(tmp_path / "py"), "2.3.1+cu121", "12.1")
    assert read(env_for(exe.parent, tmp_path))["torch"] == "2.3.1+cu121"


def test_torch_without_version_py_is_the_same_note_as_before(tmp_path):
    exe = fake_python(tmp_path / "py")
    add_torch(site(tmp_path / "py"))
    (site(tmp_path / "py") / "torch" / "version.py").unlink()
    data = read(env_for(exe.parent, tmp_path))
    assert data["torch"] == "" and data["error"].startswith("OSError: [Errno 2]")


def test_pythonpath_and_the_user_site_come_first(tmp_path):
    exe = fake_python(tmp_path / "py")
    add_torch(site(tmp_path / "py"), "2.1.0", None)
    env = env_for(exe.parent, tmp_path)
    add_torch(site(Path(env["HOME"]) / ".local"), "2.2.0", None)
    assert read(env)["torch"] == "2.2.0"
    assert read({**env, "PYTHONNOUSERSITE": "1"})["torch"] == "2.1.0"
    add_torch(tmp_path / "extra", "2.3.0", None)
    assert read({**env, "PYTHONPATH": str(tmp_path / "extra")})["torch"] == "2.3.0"


def test_a_pth_path_line_is_followed(tmp_path):
    exe = fake_python(tmp_path / "py")
    add_torch(tmp_path / "src", "2.6.0a0+git1234", "12.6")
    (site(tmp_path / "py") / "torch-dev.pth").write_text(f"# a develop install\n{tmp_path / 'src'}\n")
    assert read(env_for(exe.parent, tmp_path))["torch"] == "2.6.0a0+git1234"


# --- pyenv ------------------------------------------------------------------------------------

SHIM = """#!/usr/bin/env bash
set -e
[ -n "$PYENV_DEBUG" ] && set -x

program="${{0##*/}}"

export PYENV_ROOT="{root}"
exec "{root}/libexec/pyenv" exec "$program" "$@"
"""


def fake_pyenv(tmp_path: Path, versions=("3.11.7", "3.12.1"), global_version="3.11.7") -> Path:
    root = tmp_path / "pyenv"
    (root / "shims").mkdir(parents=True)
    shim = root / "shims" / "python3"
    shim.write_text(SHIM.format(root=root))
    shim.chmod(0o755)
    for v in versions:
        short = ".".join(v.split(".")[:2])
        fake_python(root / "versions" / v, short)
        add_torch(site(root / "versions" / v, short), f"2.{len(short)}.0+{v}", None)
    if global_version:
        (root / "version").write_text(f"{global_version}\n")
    return root


def test_a_pyenv_shim_resolves_to_the_global_version(tmp_path):
    root = fake_pyenv(tmp_path)
    env = env_for(root / "shims", tmp_path)
    target = find_target_python("python3", env, str(tmp_path))
    assert target is not None
    assert target.executable == str(root / "versions/3.11.7/bin/python3")
    assert read(env, tmp_path)["torch"].endswith("+3.11.7")


def test_pyenv_version_env_and_local_file_win_over_the_global_one(tmp_path):
    root = fake_pyenv(tmp_path)
    env = env_for(root / "shims", tmp_path)
    project = tmp_path / "project" / "sub"
    project.mkdir(parents=True)
    (tmp_path / "project" / ".python-version").write_text("# pinned\n3.12.1\n")
    assert read(env, project)["torch"].endswith("+3.12.1")
    assert read({**env, "PYENV_VERSION": "3.11.7"}, project)["torch"].endswith("+3.11.7")
    assert pyenv_version_names(str(root), env, str(tmp_path)) == ["3.11.7"]


def test_pyenv_system_is_the_next_python3_on_path(tmp_path):
    root = fake_pyenv(tmp_path, global_version="")
    exe = fake_python(tmp_path / "usr", site_py=DEBIAN_SITE)
    add_torch(tmp_path / "usr/lib/python3/dist-packages", "1.13.1", None)
    env = env_for(root / "shims", tmp_path)
    env["PATH"] += os.pathsep + str(exe.parent)
    assert read(env, tmp_path)["torch"] == "1.13.1"


@pytest.mark.parametrize("version", ["3.10.4", "../../etc", "3.11"])
def test_a_pyenv_version_not_installed_is_left_to_pyenv(tmp_path, version):
    root = fake_pyenv(tmp_path)
    env = env_for(root / "shims", tmp_path, PYENV_VERSION=version)
    assert find_target_python("python3", env, str(tmp_path)) is None


# --- where only the interpreter can tell ------------------------------------------------------

def test_unknown_layouts_are_left_to_the_interpreter(tmp_path):
    exe = fake_python(tmp_path / "py")
    env = env_for(exe.parent, tmp_path)
    assert find_target_python("python3", env) is not None
    assert find_target_python("python3", {**env, "PYTHONHOME": str(tmp_path)}) is None
    (site(tmp_path / "py") / "__editable__.torch-2.6.0.pth").write_text(
        "import __editable___torch_2_6_0_finder; __editable___torch_2_6_0_finder.install()\n")
    assert find_target_python("python3", env) is None


def test_a_sitecustomize_that_edits_sys_path_is_left_to_the_interpreter(tmp_path):
    exe = fake_python(tmp_path / "py")
    env = env_for(exe.parent, tmp_path)
    custom = tmp_path / "py/lib/python3.11/sitecustomize.py"
    custom.write_text("import apport_python_hook\napport_python_hook.install()\n")
    assert find_target_python("python3", env) is not None
    custom.write_text("import sys\nsys.path.insert(0, '/opt/torch')\n")
    assert find_target_python("python3", env) is None


def test_a_site_py_not_known_here_is_left_to_the_interpreter(tmp_path):
    exe = fake_python(tmp_path / "py", site_py=FEDORA_SITE)
    assert find_target_python("python3", env_for(exe.parent, tmp_path)) is None


def test_a_wrapper_script_is_left_to_the_interpreter(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    wrapper = bindir / "python3"
    wrapper.write_text("#!/bin/sh\nexport LD_LIBRARY_PATH=/opt/cuda/lib64\nexec /opt/py/bin/python3 \"$@\"\n")
    wrapper.chmod(0o755)
    assert find_target_python("python3", env_for(bindir, tmp_path)) is None


# --- the probe --------------------------------------------------------------------------------

class NoCommands(Context):
    def run(self, argv, timeout=None):
        raise AssertionError(f"the files answer: nothing should run ({argv[0]})")


def test_the_probe_reads_the_files_and_starts_nothing(tmp_path, monkeypatch):
    exe = fake_venv(tmp_path / "venv", tmp_path / "base")  # the base is made next
    fake_python(tmp_path / "base")
    add_torch(site(tmp_path / "venv"), "2.3.1+cu121", "12.1")
    add_nccl(site(tmp_path / "venv"), "cu12", "2.20.5")
    for name, value in env_for(exe.parent, tmp_path).items():
        monkeypatch.setenv(name, value)
    found = Found()
    software.probe_torch(NoCommands(), found)
    assert found.values == {"software.torch_version": "2.3.1+cu121", "software.torch_cuda": "12.1",
                            "software.nccl_version": "2.20.5"}
    assert found.notes == []


def test_the_probe_on_a_torch_that_is_not_there_says_nothing(tmp_path, monkeypatch):
    exe = fake_python(tmp_path / "py")
    for name, value in env_for(exe.parent, tmp_path).items():
        monkeypatch.setenv(name, value)
    found = Found()
    software.probe_torch(NoCommands(), found)
    assert found.values["software.torch_version"] == "" and found.notes == []


def test_detect_reports_the_venv_torch(tmp_path, monkeypatch):
    exe = fake_python(tmp_path / "py")
    add_torch(site(tmp_path / "py"), "2.4.0+cu124", "12.4")
    add_nccl(site(tmp_path / "py"), "cu12", "2.21.5")
    for name, value in env_for(exe.parent, tmp_path).items():
        monkeypatch.setenv(name, value)
    s = detect(str(Path(__file__).parent / "fixtures/sysroots/debian12"), run_commands=True).software
    assert (s.torch_version, s.torch_cuda, s.nccl_version) == ("2.4.0+cu124", "12.4", "2.21.5")
