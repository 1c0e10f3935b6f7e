"""Which interpreter a job's `python3` is, and where it looks for packages, from files alone.

Starting that interpreter to ask costs a tenth of a second, more through a pyenv shim (bash,
then pyenv's own scripts), and it was most of `detect`. The answer is in files: the shim and
pyenv's version files, pyvenv.cfg, the prefix's lib/pythonX.Y and its site.py, the .pth files.
`find_target_python()` reads them the way the interpreter's getpath and site.py do, and
returns None wherever it cannot be sure (a wrapper script, PYTHONHOME, a site.py patched in a
way not known here, a sitecustomize that edits sys.path): the caller then asks the
interpreter itself. sys.path[0] (the script's directory, or the current one for `-c`) is left
out: the job's is not ours.
"""
from __future__ import annotations

import os
import re
import shutil
import stat
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple


SMALL = 256 * 1024  # a shim, a version file, pyvenv.cfg, a .pth; site.py is ~25 KiB

# Variables that move the prefix or the library directories in ways read nowhere on disk.
_UNREADABLE_ENV = ("PYTHONHOME", "PYTHONPLATLIBDIR")

# The line `pyenv rehash` writes in every shim.
_PYENV_EXEC = re.compile(r'^exec "[^"\n]*/libexec/pyenv" exec "\$program" "\$@"\s*$', re.M)
_PYENV_ROOT = re.compile(r'^export PYENV_ROOT="([^"\n]+)"\s*$', re.M)
_VERSIONED = re.compile(r"python(\d+\.\d+t?)$")


@dataclass(frozen=True)
class TargetPython:
    """The python3 a job will run, and where its packages are."""
    executable: str  # the interpreter `python3` runs (after a pyenv shim), unresolved
    version: str  # "3.11"; "3.13t" for a free-threaded build
    prefix: str  # sys.prefix: the venv's directory in a venv
    base_prefix: str  # the installation's prefix
    site_path: Tuple[str, ...]  # PYTHONPATH, then site directories and .pth lines, in order


def find_target_python(program: str = "python3", env: Optional[Mapping[str, str]] = None,
                       cwd: Optional[str] = None) -> Optional[TargetPython]:
    """The `program` on env's PATH as the interpreter will see itself; None: only starting it
    would tell (or there is none)."""
    env = os.environ if env is None else env
    if any(env.get(name) for name in _UNREADABLE_ENV):
        return None
    try:
        cwd = cwd or os.getcwd()
    except OSError:  # a deleted working directory: pyenv would not find its files either
        return None
    exe = shutil.which(program, path=env.get("PATH", os.defpath))
    if exe is None:
        return None
    head = _read(exe, 4096)
    if head is not None and head.startswith(b"#!"):
        exe = resolve_pyenv_shim(exe, program, env, cwd)
        if exe is None:
            return None
        head = _read(exe, 4096)
    if head is None or not head.startswith(b"\x7fELF"):
        return None
    return interpreter_layout(exe, env, cwd)


# --- pyenv ------------------------------------------------------------------------------------

def resolve_pyenv_shim(shim: str, program: str, env: Mapping[str, str],
                       cwd: str) -> Optional[str]:
    """The interpreter a pyenv shim execs, chosen as `pyenv exec` does; None for a script that
    is not a pyenv shim, or a version pyenv could not run."""
    text = _text(shim)
    if text is None or not _PYENV_EXEC.search(text):
        return None
    m = _PYENV_ROOT.search(text)
    root = m.group(1) if m else env.get("PYENV_ROOT", "")
    if not root:
        return None
    names = pyenv_version_names(root, env, cwd)
    if not names:
        return None
    for name in names:
        if name == "system":
            shims = os.path.realpath(os.path.join(root, "shims"))
            path = [d for d in env.get("PATH", os.defpath).split(os.pathsep)
                    if d and os.path.realpath(d) != shims]
            found = shutil.which(program, path=os.pathsep.join(path))
        else:
            # pyenv refuses a version it does not have (newer ones try a prefix: "3.11"):
            # leave both to pyenv itself.
            if not os.path.isdir(os.path.join(root, "versions", name)):
                return None
            candidate = os.path.join(root, "versions", name, "bin", program)
            found = candidate if os.path.isfile(candidate) and os.access(candidate, os.X_OK) else None
        if found:
            return found
    return None


def pyenv_version_names(root: str, env: Mapping[str, str], cwd: str) -> Optional[List[str]]:
    """pyenv's chosen versions, in its order: PYENV_VERSION, the nearest .python-version
    (from PYENV_DIR, then the working directory, upwards), then $PYENV_ROOT/version, else
    "system". None when a name could leave the versions directory."""
    chosen = env.get("PYENV_VERSION", "")
    if chosen:
        names = [n for n in chosen.split(":") if n]
    else:
        names = None
        for start in dict.fromkeys((env.get("PYENV_DIR") or cwd, cwd)):
            found = _nearest(start, ".python-version")
            if found:
                names = _version_file(found)
                break
        if names is None:
            global_file = os.path.join(root, "version")
            names = _version_file(global_file) if os.path.isfile(global_file) else []
        names = names or ["system"]
    if any(_unsafe_version(n) for n in names):
        return None
    return names


def _nearest(start: str, name: str) -> Optional[str]:
    d = os.path.abspath(start)
    while True:
        candidate = os.path.join(d, name)
        if os.path.isfile(candidate):
            return candidate
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


def _version_file(path: str) -> List[str]:
    """The first word of each line that is not blank or a comment."""
    text = _text(path) or ""
    names = []
    for line in text.splitlines():
        words = line.split()
        if words and not words[0].startswith("#"):
            names.append(words[0])
    return names


def _unsafe_version(name: str) -> bool:
    return name.startswith("/") or ".." in name.split("/")


# --- the interpreter's own layout -------------------------------------------------------------

def interpreter_layout(exe: str, env: Mapping[str, str], cwd: str) -> Optional[TargetPython]:
    """sys.prefix and the site part of sys.path for the interpreter file exe, as getpath and
    site.py compute them; None for a layout not recognised here."""
    exe = os.path.abspath(exe)
    exe_dir = os.path.dirname(exe)
    cfg_path = next((c for c in (os.path.join(exe_dir, "pyvenv.cfg"),
                                 os.path.join(os.path.dirname(exe_dir), "pyvenv.cfg"))
                     if os.path.isfile(c)), None)
    cfg = parse_pyvenv_cfg(_text(cfg_path) or "") if cfg_path else {}
    base_exe = exe
    if cfg_path:
        home = cfg.get("home", "")
        if not home:
            return None
        base_exe = os.path.join(home, os.path.basename(exe))
        if not os.path.exists(base_exe):
            base_exe = exe
    real = os.path.realpath(base_exe)
    head = _read(real, 4)
    if head != b"\x7fELF":
        return None
    m = _VERSIONED.search(os.path.basename(real))
    version = m.group(1) if m else _cfg_version(cfg)
    if not version:
        return None
    base_prefix = _search_prefix(os.path.dirname(real), version)
    if base_prefix is None:
        return None
    scheme = site_scheme(_text(os.path.join(base_prefix, "lib", f"python{version}", "site.py")))
    if scheme is None:
        return None
    platlibdir = "lib"
    if (os.path.isdir(os.path.join(base_prefix, "lib64", f"python{version}", "lib-dynload"))
            and not os.path.isdir(os.path.join(base_prefix, "lib", f"python{version}", "lib-dynload"))):
        platlibdir = "lib64"
    in_venv = cfg_path is not None
    prefix = os.path.dirname(cfg_path) if cfg_path else base_prefix
    system_site = cfg.get("include-system-site-packages", "true").lower() == "true"

    path: List[str] = []
    for entry in env.get("PYTHONPATH", "").split(os.pathsep):
        if entry:
            path.append(os.path.abspath(os.path.join(cwd, entry)))
    site_dirs: List[str] = []
    if in_venv:  # the venv's own directories come before the user's (site.venv)
        site_dirs += site_packages(prefix, version, scheme, platlibdir, True)
    user_site = ""
    if (system_site or not in_venv) and not env.get("PYTHONNOUSERSITE"):
        base = env.get("PYTHONUSERBASE") or os.path.join(_home(env), ".local")
        user_site = os.path.join(base, "lib", f"python{version}", "site-packages")
        site_dirs.append(user_site)
    for p in ([prefix, base_prefix] if in_venv and system_site else [prefix]):
        site_dirs += site_packages(p, version, scheme, platlibdir, in_venv)
    stdlib = os.path.join(base_prefix, "lib", f"python{version}")
    for d in dict.fromkeys(site_dirs):
        if d in path or not os.path.isdir(d):
            continue
        path.append(d)
        extra = pth_lines(d)
        if extra is None:
            return None
        path += [e for e in extra if e not in path]
    customizers = ["sitecustomize.py"] + (["usercustomize.py"] if user_site else [])
    for d in [stdlib] + path:
        for name in customizers:
            text = _text(os.path.join(d, name))
            if text is not None and ("sys.path" in text or "addsitedir" in text):
                return None
    return TargetPython(executable=exe, version=version, prefix=prefix,
                        base_prefix=base_prefix, site_path=tuple(path))


def parse_pyvenv_cfg(text: str) -> dict:
    """key = value lines, keys lowercased, as site.venv reads them."""
    out = {}
    for line in text.splitlines():
        if "=" in line:
            key, _, value = line.partition("=")
            out[key.strip().lower()] = value.strip()
    return out


def _cfg_version(cfg: Mapping[str, str]) -> str:
    """X.Y from pyvenv.cfg's version (venv) or version_info (virtualenv, uv)."""
    m = re.match(r"(\d+)\.(\d+)", cfg.get("version", "") or cfg.get("version_info", ""))
    return f"{m.group(1)}.{m.group(2)}" if m else ""


def _search_prefix(start: str, version: str) -> Optional[str]:
    """The nearest directory upwards with the standard library (getpath's landmark)."""
    d = start
    while True:
        lib = os.path.join(d, "lib", f"python{version}")
        if os.path.isfile(os.path.join(lib, "os.py")) or os.path.isfile(os.path.join(lib, "os.pyc")):
            return d
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


def site_scheme(site_py: Optional[str]) -> Optional[str]:
    """"debian" for Debian's site.py (dist-packages), "upstream" for CPython's own, None for
    any other: Fedora's adds /usr/local in code, others may do anything."""
    if site_py is None:
        return None
    code = _code_only(site_py)
    if "def getsitepackages" not in code or "def venv" not in code:
        return None
    if "dist-packages" in code:
        return "debian"
    if "/usr/local" in code or "RPM_BUILD_ROOT" in code or "rpm_prefix" in code:
        return None
    return "upstream"


def _code_only(text: str) -> str:
    """site.py without its docstring and comments, which talk about /usr/local."""
    text = re.sub(r'"""(?:.|\n)*?"""', "", text, count=1)
    return "\n".join(line.split("#", 1)[0] for line in text.splitlines())


def site_packages(prefix: str, version: str, scheme: str, platlibdir: str,
                  in_venv: bool) -> List[str]:
    """site.getsitepackages() for one prefix."""
    libdirs = [platlibdir] + (["lib"] if platlibdir != "lib" else [])
    if scheme == "debian":
        out = [os.path.join(prefix, "lib", f"python{version}", "site-packages")] if in_venv else []
        out.append(os.path.join(prefix, "local/lib", f"python{version}", "dist-packages"))
        out.append(os.path.join(prefix, "lib", "python3", "dist-packages"))
        out += [os.path.join(prefix, d, f"python{version}", "dist-packages") for d in libdirs]
        return out
    return [os.path.join(prefix, d, f"python{version}", "site-packages") for d in libdirs]


def pth_lines(site_dir: str) -> Optional[List[str]]:
    """The directories site dir's .pth files add (names sorted, as site.py reads them); None
    when an `import` line there could touch torch, NCCL or sys.path (an editable install's
    finder), which only running it would tell."""
    try:
        names = sorted(n for n in os.listdir(site_dir) if n.endswith(".pth") and not n.startswith("."))
    except OSError:
        return []
    out: List[str] = []
    for name in names:
        text = _text(os.path.join(site_dir, name))
        for line in (text or "").splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            if line.startswith(("import ", "import\t")):
                low = line.lower()
                if "torch" in low or "nccl" in low or "sys.path" in low:
                    return None
                continue
            d = os.path.abspath(os.path.join(site_dir, line.rstrip()))
            if os.path.exists(d) and d not in out:
                out.append(d)
    return out


def _home(env: Mapping[str, str]) -> str:
    if env.get("HOME"):
        return env["HOME"]
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_dir
    except (ImportError, KeyError):
        return "/"


def _read(path: Optional[str], limit: int) -> Optional[bytes]:
    """At most limit bytes of the regular file at path; None for anything else."""
    if not path:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def _text(path: Optional[str], limit: int = SMALL) -> Optional[str]:
    data = _read(path, limit)
    return None if data is None else data.decode("utf-8", "replace")


def listing(d: str, cache: Optional[Dict[str, List[str]]] = None) -> List[str]:
    """os.listdir(d) in its own order ([] when unreadable), remembered in cache."""
    if cache is not None and d in cache:
        return cache[d]
    try:
        names = os.listdir(d)
    except OSError:
        names = []
    if cache is not None:
        cache[d] = names
    return names


def first_dist_info(name: str, paths: Sequence[str],
                    cache: Optional[Dict[str, List[str]]] = None) -> Optional[str]:
    """The first *.dist-info or *.egg-info of distribution `name` along paths, found as
    importlib.metadata finds it (normalised names, each directory in listing order)."""
    wanted = _normalise(name)
    for d in paths:
        for child in listing(d, cache):
            low = child.lower()
            # the first letter first: normalising every entry of a big site-packages (a
            # regular expression each) was most of the torch probe
            if low[:1] == wanted[:1] and low.endswith((".dist-info", ".egg-info")):
                if _normalise(low.rpartition(".")[0].partition("-")[0]) == wanted:
                    return os.path.join(d, child)
    return None


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower().replace("-", "_")


def dist_version(info: str) -> str:
    """The Version header of a dist-info's METADATA (an egg-info's PKG-INFO, or the egg-info
    file itself); "" when there is none."""
    if os.path.isdir(info):
        meta = os.path.join(info, "METADATA" if info.lower().endswith(".dist-info") else "PKG-INFO")
    else:
        meta = info
    text = _text(meta) or ""
    for line in text.splitlines():
        if not line.strip():
            break  # the headers end at the first blank line
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() == "version":
            return value.strip()
    return ""
