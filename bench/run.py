"""hpcwizard benchmarks: each figure is a ratio against a baseline measured in the same run,
because these machines are shared and noisy. Tests never assert timings; this prints them.

    python3 bench/run.py [--repeats N] [--only NAME ...] [--json FILE]

Figures that need root or change the machine are skipped, with the reason, when run
without root or without HPCWIZARD_BENCH_SYSTEM=1.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
PY = sys.executable
HPCWIZARD = shutil.which("hpcwizard") or ""


@dataclass
class Figure:
    name: str
    what: str
    baseline: str
    goal: str
    ours: List[float] = field(default_factory=list)
    base: List[float] = field(default_factory=list)
    unit: str = "s"
    skipped: str = ""
    extra: Dict[str, float] = field(default_factory=dict)

    @property
    def ratio(self) -> Optional[float]:
        if not self.ours or not self.base:
            return None
        return statistics.median(self.ours) / statistics.median(self.base)


def timed(argv: List[str], env: Optional[dict] = None, check: bool = True) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          stdin=subprocess.DEVNULL, env=env)
    elapsed = time.perf_counter() - start
    if check and proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} exited {proc.returncode}")
    return elapsed


def timed_cpu(argv: List[str], env: Optional[dict] = None, check: bool = True) -> Tuple[float, float]:
    """Wall and CPU seconds (user + system, the program's waited-for children included): the
    CPU figure moves far less than the wall time when other work shares the cores."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = timed(argv, env, check)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def alternate(repeats: int, ours: Callable[[], float], base: Callable[[], float], fig: Figure) -> None:
    """Interleave the two so that load on the machine hits both alike."""
    ours()  # warm caches once for both
    base()
    for _ in range(repeats):
        fig.ours.append(ours())
        fig.base.append(base())


# --- figures --------------------------------------------------------------------------------

# Runs detect() once with its command runner wrapped: the programs it starts on this machine,
# ahead of the probes (base.start) or when a probe asks (base.run).
RECORD_PROGRAMS = r"""
import json
from hpcwizard.detect import base, detect
started = []
real_run, real_start = base.run, base.start
def recording(real):
    def record(argv, *args, **kwargs):
        res = real(argv, *args, **kwargs)
        if res is not None:  # None: not installed, nothing was started
            started.append(list(argv))
        return res
    return record
base.run, base.start = recording(real_run), recording(real_start)
detect()
print(json.dumps(started))
"""


def detect_programs() -> List[List[str]]:
    out = subprocess.run([PY, "-c", RECORD_PROGRAMS], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    return json.loads(out)


def fig_detect(repeats: int) -> Figure:
    """The issue's measure: detect against a bare interpreter start plus the slowest single
    program detect runs, timed alone, both in the same run. Ours is `python -m hpcwizard`,
    as README tells a login shell to start it; through a pyenv shim is an extra figure."""
    programs = detect_programs()
    env = dict(os.environ, LC_ALL="C", LANG="C")  # as detect runs them
    slowest: Dict[str, List[float]] = {}
    cpu: Dict[str, List[float]] = {"ours": [], "base": []}

    def ours() -> float:
        wall, used = timed_cpu([PY, "-m", "hpcwizard", "detect", "--json"])
        cpu["ours"].append(used)
        return wall

    def baseline() -> float:
        bare, bare_cpu = timed_cpu([PY, "-c", "pass"])
        alone = {" ".join(argv): timed_cpu(argv, env=env, check=False) for argv in programs}
        for name, (took, _) in alone.items():
            slowest.setdefault(name, []).append(took)
        worst = max(alone.values(), default=(0.0, 0.0))
        cpu["base"].append(bare_cpu + worst[1])
        return bare + worst[0]

    fig = Figure("detect", "python -m hpcwizard detect --json, wall time",
                 "python -c pass + the slowest program detect runs, alone", "<= 1.5x")
    alternate(repeats, ours, baseline, fig)
    fig.extra["cpu_ours_s"] = statistics.median(cpu["ours"][1:])
    fig.extra["cpu_baseline_s"] = statistics.median(cpu["base"][1:])
    fig.extra["programs_run"] = float(len(programs))
    fig.extra["python3_started"] = float(any(os.path.basename(a[0]).startswith("python")
                                             for a in programs))
    if slowest:
        name, times = max(slowest.items(), key=lambda kv: statistics.median(kv[1]))
        fig.baseline += f" ({name.split()[0]}: {statistics.median(times):.3f} s)"
    if HPCWIZARD:
        fig.extra["via_path_s"] = statistics.median(
            [timed([HPCWIZARD, "detect", "--json"]) for _ in range(max(3, repeats // 2))])
    return fig


# In a fresh interpreter: the modules of the standard library that detect loads.
STDLIB_LOADED = r"""
import io, json, sys
before = set(sys.modules)
from hpcwizard import cli
out, sys.stdout = sys.stdout, io.StringIO()
cli.main(["detect", "--json"])
sys.stdout = out
print(json.dumps(sorted(m for m in set(sys.modules) - before
                        if m.split(".")[0] != "hpcwizard")))
"""


def wheel_layout(into: Path) -> Path:
    """hpcwizard laid out as a wheel installs it (what the zipapp holds: tools/build_pyz.py's
    copy_project), byte compiled: what `python -S` imports with PYTHONPATH pointing there."""
    import tomllib

    sys.path.insert(0, str(HERE.parent / "tools"))
    try:
        import build_pyz  # type: ignore
    finally:
        sys.path.remove(str(HERE.parent / "tools"))
    build_pyz.copy_project(tomllib.loads((HERE.parent / "pyproject.toml").read_text()), into)
    subprocess.run([PY, "-m", "compileall", "-q", str(into)], stdout=subprocess.DEVNULL,
                   check=True)
    return into


def fig_detect_bare(repeats: int) -> Figure:
    """detect where nothing else starts with it: `python -S` (no site: this machine's .pth
    files import pathlib, certifi and importlib.resources before any program, 20 ms and more
    that `python -c pass` pays too), hpcwizard from a wheel layout, against `python -S -c
    pass` plus the slowest program detect runs. stdlib_floor_s: the standard library's
    modules that detect loads, imported alone the same way, and nothing run: detect does
    that and more, so floor_ratio is a ratio it cannot go below while it uses them."""
    programs = detect_programs()
    env = dict(os.environ, LC_ALL="C", LANG="C")
    with tempfile.TemporaryDirectory(prefix="hpcwizard-bench-") as tmp:
        site = wheel_layout(Path(tmp))
        bare_env = dict(os.environ, PYTHONPATH=str(site))
        loaded = json.loads(subprocess.run([PY, "-S", "-c", STDLIB_LOADED], env=bare_env,
                                           capture_output=True, text=True, check=True).stdout)
        floor_code = "import " + ", ".join(loaded)
        floor: List[float] = []

        def ours() -> float:
            return timed([PY, "-S", "-m", "hpcwizard", "detect", "--json"], env=bare_env)

        def baseline() -> float:
            bare = timed([PY, "-S", "-c", "pass"])
            floor.append(timed([PY, "-S", "-c", floor_code]))
            worst = max((timed(argv, env=env, check=False) for argv in programs), default=0.0)
            return bare + worst

        fig = Figure("detect-bare", "python -S -m hpcwizard detect --json, wall time",
                     "python -S -c pass + the slowest program detect runs, alone", "<= 1.5x")
        alternate(repeats, ours, baseline, fig)
    fig.extra["stdlib_modules"] = float(len(loaded))
    fig.extra["stdlib_floor_s"] = statistics.median(floor)
    fig.extra["floor_ratio"] = statistics.median(floor) / statistics.median(fig.base)
    return fig


def fig_import(repeats: int) -> Figure:
    fig = Figure("startup", "hpcwizard --version, wall time", "python -c pass",
                 "<= +150 ms, no textual imported", unit="s")
    alternate(repeats, lambda: timed([HPCWIZARD, "--version"]),
              lambda: timed([PY, "-c", "pass"]), fig)
    code = ("import sys, time; t=time.perf_counter(); import hpcwizard.cli, hpcwizard.detect, "
            "hpcwizard.plan; print(time.perf_counter()-t, 'textual' in sys.modules)")
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    fig.extra["core_import_s"] = float(out[0])
    fig.extra["textual_imported"] = 1.0 if out[1] == "True" else 0.0
    fig.extra["added_ms"] = (statistics.median(fig.ours) - statistics.median(fig.base)) * 1000
    return fig


def fig_tui_start(repeats: int) -> Figure:
    fig = Figure("tui-start", "TUI: start to System screen ready (Pilot, fixture facts)",
                 "hpcwizard --version", "<= 1.5 s on 2 cores")
    script = HERE / "tui_start.py"
    if not script.exists():
        fig.skipped = "the TUI benchmark script is not there yet"
        return fig
    alternate(repeats, lambda: timed([PY, str(script)]),
              lambda: timed([HPCWIZARD, "--version"]), fig)
    return fig


def fig_first_paint(repeats: int) -> Figure:
    """The wizard in a real terminal (tmux 80x24): start to the first screen on the terminal
    (the early frame, drawn before Textual loads), to Textual's own first frame (extra), and
    to the detected facts on it (real detection)."""
    fig = Figure("first-paint", "TUI in tmux: start to first paint (facts: extra)",
                 "- (python -c pass: extra)", "<= 0.4 s")
    if not shutil.which("tmux"):
        fig.skipped = "needs tmux"
        return fig
    from tui_start import tmux_starts  # type: ignore

    starts: List[Dict[str, float]] = []
    bare: List[float] = []
    tmux_starts(1)  # warm the caches
    for _ in range(repeats):  # a bare start beside each, to show what the load does to both
        starts += tmux_starts(1)
        bare.append(timed([PY, "-c", "pass"]))
    fig.ours = [s["paint"] for s in starts]
    for key in ("textual_paint", "facts", "paint_cpu", "facts_cpu"):
        fig.extra[f"{key}_s"] = statistics.median(s[key] for s in starts)
    fig.extra["python_c_pass_s"] = statistics.median(bare)
    fig.extra["detection_failed"] = sum(s["failed"] for s in starts)
    return fig


def fig_pyz_start(repeats: int) -> Figure:
    """hpcwizard.pyz in a real terminal (tmux 80x24), start to the detected facts on screen,
    against the installed hpcwizard in the same run. Ours: a later start, from the copy the
    first one unpacked (tools/pyz_cache.py). Extras: a first start (a new HOME each time:
    it unpacks the archive) and the archive itself (HPCWIZARD_PYZ_CACHE=off), as every
    start was before the copy."""
    fig = Figure("pyz-start", "python3 hpcwizard.pyz in tmux: start to facts (unpacked copy)",
                 "python -m hpcwizard (installed): start to facts", "as installed")
    if not shutil.which("tmux"):
        fig.skipped = "needs tmux"
        return fig
    from tui_start import tmux_starts  # type: ignore

    with tempfile.TemporaryDirectory(prefix="hpcwizard-bench-pyz-") as tmp:
        pyz = Path(tmp) / "hpcwizard.pyz"
        subprocess.run([PY, str(HERE.parent / "tools" / "build_pyz.py"), "-o", str(pyz)],
                       stdout=subprocess.DEVNULL, check=True, timeout=900)
        homes = Path(tmp) / "homes"
        homes.mkdir()
        # PYTHONDONTWRITEBYTECODE would keep the pyz from making its copy: not for this figure
        run = ["env", "-u", "PYTHONDONTWRITEBYTECODE"]
        home = homes / "later"
        home.mkdir()
        later = run + [f"HOME={home}", PY, str(pyz)]
        first = run + [f'HOME="$(mktemp -d -p {homes})"', PY, str(pyz)]
        archive = run + [f"HOME={home}", "HPCWIZARD_PYZ_CACHE=off", PY, str(pyz)]
        extra: Dict[str, List[float]] = {"first_start_s": [], "from_archive_s": []}
        for _ in range(repeats):
            fig.ours += [s["facts"] for s in tmux_starts(1, later)]
            fig.base += [s["facts"] for s in tmux_starts(1)]
            extra["first_start_s"] += [s["facts"] for s in tmux_starts(1, first)]
            extra["from_archive_s"] += [s["facts"] for s in tmux_starts(1, archive)]
        for key, values in extra.items():
            fig.extra[key] = statistics.median(values)
    return fig


def fig_tui_memory(repeats: int) -> Figure:
    fig = Figure("tui-memory", "TUI peak RSS through the headline flow (MiB)", "-",
                 "<= 120 MB RSS", unit="MiB")
    for _ in range(max(1, repeats // 2)):
        out = subprocess.run([PY, str(HERE / "tui_memory.py")], capture_output=True, text=True,
                             check=True).stdout.split()
        fig.ours.append(float(out[-1]))
    return fig


FIGURES: Dict[str, Callable[[int], Figure]] = {
    "detect": fig_detect,
    "detect-bare": fig_detect_bare,
    "startup": fig_import,
    "tui-start": fig_tui_start,
    "first-paint": fig_first_paint,
    "pyz-start": fig_pyz_start,
    "tui-memory": fig_tui_memory,
}


def byte_compile() -> None:
    """Compile hpcwizard as installing a wheel does. Without it, every start would compile
    the sources it imports again where PYTHONDONTWRITEBYTECODE is set, or a file was just
    edited, and the figures would time the compiler."""
    code = ("import hpcwizard, importlib.util, os; print(os.path.dirname(hpcwizard.__file__));"
            "print(importlib.util.find_spec('hpcwizard.screens').submodule_search_locations[0])")
    dirs = subprocess.run([PY, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    subprocess.run([PY, "-m", "compileall", "-q", *dirs], stdout=subprocess.DEVNULL, check=True)


def system_allowed() -> str:
    """Empty when figures that change this machine may run, else why not."""
    if os.geteuid() != 0:
        return "needs root"
    if os.environ.get("HPCWIZARD_BENCH_SYSTEM") != "1":
        return "changes this machine: set HPCWIZARD_BENCH_SYSTEM=1"
    return ""


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--json", default=str(HERE / "results" / "latest.json"))
    args = ap.parse_args(argv)
    if not HPCWIZARD:
        print("hpcwizard is not installed: python3 -m pip install -e .", file=sys.stderr)
        return 2
    try:
        from system_figures import SYSTEM_FIGURES  # type: ignore
    except ImportError:
        SYSTEM_FIGURES = {}
    wanted = {**FIGURES, **SYSTEM_FIGURES}
    byte_compile()
    figures = []
    for name, fn in wanted.items():
        if args.only and name not in args.only:
            continue
        if name in SYSTEM_FIGURES and system_allowed():
            figures.append(Figure(name, "", "", "", skipped=system_allowed()))
            continue
        try:
            figures.append(fn(args.repeats))
        except Exception as exc:  # a broken figure is reported, the others still run
            figures.append(Figure(name, "", "", "", skipped=f"failed: {exc}"))
    print_table(figures)
    write_json(figures, Path(args.json), args.repeats)
    return 0


def print_table(figures: List[Figure]) -> None:
    print(f"{'figure':<14} {'ours median (min-max)':<26} {'baseline median':<18} {'ratio':>7}  goal")
    for f in figures:
        if f.skipped:
            print(f"{f.name:<14} skipped: {f.skipped}")
            continue
        o = f"{statistics.median(f.ours):.3f} ({min(f.ours):.3f}-{max(f.ours):.3f})"
        b = f"{statistics.median(f.base):.3f}" if f.base else "-"
        r = f"{f.ratio:.2f}x" if f.ratio is not None else "-"
        print(f"{f.name:<14} {o:<26} {b:<18} {r:>7}  {f.goal}")
        for k, v in f.extra.items():
            print(f"{'':<14}   {k} = {v:.3f}")


def write_json(figures: List[Figure], path: Path, repeats: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cpus, "
                   f"Python {platform.python_version()}",
        "repeats": repeats,
        "figures": [dict(asdict(f), ratio=f.ratio) for f in figures],
    }
    fd, tmp = tempfile.mkstemp(dir=str(path.parent))
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=2)
    os.replace(tmp, path)
    print(f"\nwritten: {path}")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    raise SystemExit(main())
