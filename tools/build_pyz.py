#!/usr/bin/env python3
"""Build dist/hpcwizard.pyz: one file that runs as `python3 hpcwizard.pyz` on Python 3.9-3.13
with nothing installed. It holds hpcwizard (laid out as pip installs it: the packages,
package-dir and package-data of pyproject.toml) and the pure-Python wheels pinned in
tools/pyz-requirements.txt, and its __main__ (tools/pyz_main.py) refuses older Pythons.

    python3 tools/build_pyz.py [-o dist/hpcwizard.pyz]

Needs pip and the package index (or pip's configured find-links). The archive is
deterministic: files in sorted order, fixed time stamps and modes.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipapp
import zipfile
from pathlib import Path
from typing import Dict, Iterable, List, Set, Tuple

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = ROOT / "tools" / "pyz-requirements.txt"
MAIN_TEMPLATE = ROOT / "tools" / "pyz_main.py"
UNPACKER = ROOT / "tools" / "pyz_cache.py"  # at the archive's root as _hpcwizard_pyz.py
PYTHONS = ("3.9", "3.10", "3.11", "3.12", "3.13")  # every one must be able to run the archive
PURE_TAGS = {"py3-none-any", "py2.py3-none-any"}
EPOCH = (1980, 1, 1, 0, 0, 0)  # ZIP's earliest date: the same archive from the same inputs
INTERPRETER = "/usr/bin/env python3"


def _toml():  # type: ignore[no-untyped-def]
    try:
        import tomllib  # 3.11+
    except ImportError:
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ImportError:
            from pip._vendor import tomli as tomllib  # type: ignore[no-redef]
    return tomllib


def _packaging():  # type: ignore[no-untyped-def]
    try:
        from packaging import markers, requirements, utils, version  # noqa: F401
        import packaging
    except ImportError:
        from pip._vendor import packaging  # type: ignore[no-redef]
        from pip._vendor.packaging import markers, requirements, utils, version  # noqa: F401
    return packaging


def die(msg: str) -> None:
    print(f"build_pyz: {msg}", file=sys.stderr)
    raise SystemExit(1)


def pins() -> List[str]:
    out = []
    for line in REQUIREMENTS.read_text("utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(line)
    return out


def pip_install(target: Path, requirements: List[str]) -> None:
    """The pinned wheels, exactly (no resolution beyond the list), for any platform."""
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
           "--no-input", "--target", str(target), "--no-compile", "--no-deps",
           "--only-binary=:all:", "--implementation", "py", "--abi", "none",
           "--platform", "any", "--python-version", PYTHONS[0], *requirements]
    print(f"build_pyz: pip install --target {target} "
          f"({len(requirements)} pinned pure-Python wheels, any platform)")
    env = dict(os.environ, PIP_NO_WARN_SCRIPT_LOCATION="1", PIP_ROOT_USER_ACTION="ignore")
    if subprocess.run(cmd, env=env).returncode != 0:
        die("pip install failed (see above)")


def _metadata(dist_info: Path) -> Tuple[str, str, str, List[str]]:
    name = version = requires_python = ""
    requires: List[str] = []
    for line in (dist_info / "METADATA").read_text("utf-8").split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(": ")
        if key == "Name":
            name = value.strip()
        elif key == "Version":
            version = value.strip()
        elif key == "Requires-Python":
            requires_python = value.strip()
        elif key == "Requires-Dist":
            requires.append(value.strip())
    return name, version, requires_python, requires


def check_dists(target: Path, roots: Iterable[str]) -> Dict[str, str]:
    """Every bundled distribution is a pure-Python wheel that allows 3.9-3.13, and the bundle
    satisfies pyproject's dependencies and, recursively, theirs (with the extras asked for)."""
    pk = _packaging()
    canon = pk.utils.canonicalize_name
    dists: Dict[str, Tuple[str, List[str]]] = {}
    for dist_info in sorted(target.glob("*.dist-info")):
        name, version, requires_python, requires = _metadata(dist_info)
        tags = {line.split(": ", 1)[1].strip()
                for line in (dist_info / "WHEEL").read_text("utf-8").splitlines()
                if line.startswith("Tag: ")}
        if not tags or not tags <= PURE_TAGS:
            die(f"{name} {version} is not a pure-Python wheel ({', '.join(sorted(tags))})")
        spec = pk.specifiers.SpecifierSet(requires_python) if requires_python else None
        for py in PYTHONS:
            if spec is not None and not spec.contains(py + ".0", prereleases=True):
                die(f"{name} {version} requires Python {requires_python}: not {py}. "
                    f"Pin an older release in {REQUIREMENTS.relative_to(ROOT)}")
        dists[canon(name)] = (version, requires)
    envs = []
    for py in PYTHONS:
        env = pk.markers.default_environment()
        env.update(python_version=py, python_full_version=py + ".0", sys_platform="linux",
                   platform_system="Linux", os_name="posix", implementation_name="cpython",
                   platform_python_implementation="CPython")
        envs.append(env)

    # (requirement, who wants it, the extras that who was asked for: its markers may test them)
    todo: List[Tuple[str, str, Tuple[str, ...]]] = [(r, "pyproject.toml", ("",)) for r in roots]
    seen: Set[Tuple[str, str]] = set()
    while todo:
        text, wanted_by, parent_extras = todo.pop()
        req = pk.requirements.Requirement(text)
        if req.marker is not None and not any(req.marker.evaluate(dict(env, extra=extra))
                                              for env in envs for extra in parent_extras):
            continue
        name = canon(req.name)
        if name not in dists:
            die(f"{req.name} (wanted by {wanted_by}: {text}) is missing from "
                f"{REQUIREMENTS.relative_to(ROOT)}")
        version, requires = dists[name]
        if not req.specifier.contains(version, prereleases=True):
            die(f"{req.name} {version} does not satisfy {wanted_by}'s {text}")
        key = (name, ",".join(sorted(req.extras)))
        if key in seen:
            continue
        seen.add(key)
        todo.extend((sub, req.name, ("", *sorted(req.extras))) for sub in requires)
    unused = sorted(set(dists) - {n for n, _ in seen})
    if unused:
        die(f"not needed by anything, drop from {REQUIREMENTS.relative_to(ROOT)}: {unused}")
    return {n: v for n, (v, _) in dists.items()}


def copy_project(pyproject: dict, dest: Path) -> int:
    """hpcwizard as setuptools installs it: each package's own *.py, plus its package-data."""
    tool = pyproject["tool"]["setuptools"]
    package_dir = tool.get("package-dir", {})
    package_data = tool.get("package-data", {})
    count = 0
    for package in tool["packages"]:
        src = ROOT / package_dir.get(package, package.replace(".", "/"))
        out = dest.joinpath(*package.split("."))
        out.mkdir(parents=True, exist_ok=True)
        # its own modules (subpackages are listed apart), then its data: setuptools globs,
        # relative to the package's folder, which may reach into subfolders
        files = {f for f in src.glob("*.py")}
        for pattern in [*package_data.get(package, []), *package_data.get("*", [])]:
            files.update(f for f in src.glob(pattern) if "__pycache__" not in f.parts)
        for f in sorted(files):
            if f.is_file():
                target = out / f.relative_to(src)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(f, target)
                count += 1
        if not (out / "__init__.py").exists():
            die(f"{package} ({src}) has no __init__.py")
    return count


def build_id(app: Path) -> str:
    """What names the build in the cache (tools/pyz_cache.py): a digest of every file the
    archive holds but __main__.py, which carries it."""
    digest = hashlib.sha256()
    for p in sorted(p for p in app.rglob("*") if p.is_file() and p.name != "__main__.py"):
        digest.update(p.relative_to(app).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(p.read_bytes()).digest())
    return digest.hexdigest()[:20]


def main_py(supported: str, build: str) -> str:
    low = re.match(r"^(\d+)\.(\d+)", supported)
    if not low:
        die(f"SUPPORTED_PYTHON {supported!r} is not like '3.9-3.13'")
    text = MAIN_TEMPLATE.read_text("utf-8")
    return (text.replace("@SUPPORTED_PYTHON@", supported)
                .replace("@MIN_PYTHON@", f"({low.group(1)}, {low.group(2)})")
                .replace("@BUILD_ID@", build))


def write_zip(src: Path, zip_path: Path) -> int:
    files = sorted(p for p in src.rglob("*") if p.is_file())
    with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for p in files:
            info = zipfile.ZipInfo(p.relative_to(src).as_posix(), date_time=EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o100644 << 16)
            info.create_system = 3  # unix, whatever made it
            z.writestr(info, p.read_bytes(), compresslevel=9)
    return len(files)


def build(output: Path) -> Path:
    tomllib = _toml()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    supported = re.search(r'^SUPPORTED_PYTHON\s*=\s*"([^"]+)"',
                          (ROOT / "wizard" / "__init__.py").read_text("utf-8"), re.M)
    if not supported:
        die("no SUPPORTED_PYTHON in wizard/__init__.py")
    with tempfile.TemporaryDirectory(prefix="hpcwizard-pyz-") as tmp:
        app = Path(tmp) / "app"
        app.mkdir()
        pip_install(app, pins())
        versions = check_dists(app, pyproject["project"]["dependencies"])
        # the console scripts (their shebang names the building Python) are not bundled:
        # nor are their lines in RECORD, which then lists exactly what the archive holds
        shutil.rmtree(app / "bin", ignore_errors=True)
        for record in app.glob("*.dist-info/RECORD"):
            lines = record.read_text("utf-8").splitlines(keepends=True)
            record.write_text("".join(line for line in lines
                                      if not line.startswith(("bin/", "../"))), "utf-8")
        for cache in list(app.rglob("__pycache__")):
            shutil.rmtree(cache)
        n = copy_project(pyproject, app)
        shutil.copyfile(UNPACKER, app / "_hpcwizard_pyz.py")
        (app / "__main__.py").write_text(main_py(supported.group(1), build_id(app)), "utf-8")
        inner = Path(tmp) / "inner.zip"
        count = write_zip(app, inner)
        output.parent.mkdir(parents=True, exist_ok=True)
        # zipapp copies the deterministic archive behind the shebang line and makes it
        # executable (a directory source would be walked in file-system order).
        zipapp.create_archive(str(inner), str(output), interpreter=INTERPRETER)
        os.chmod(output, 0o755)
    size = output.stat().st_size
    print(f"build_pyz: {output} ({size / 1e6:.1f} MB, {count} files: hpcwizard {n} files, "
          + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) + ")")
    return output


def main(argv: "List[str] | None" = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-o", "--output", default=str(ROOT / "dist" / "hpcwizard.pyz"),
                   help="the archive to write (default dist/hpcwizard.pyz)")
    args = p.parse_args(argv)
    build(Path(args.output).resolve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
