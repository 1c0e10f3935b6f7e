"""One TUI start: from this process's start to the System screen showing detected facts
(real detection, headless Pilot at 80x24), then exit. bench/run.py times the whole process
against `hpcwizard --version`.

    python3 bench/tui_start.py --tmux [--repeats N]

instead starts the wizard in a real terminal (tmux, 80x24) N times and prints, as JSON, the
seconds from starting it to its first paint (the System screen's title on the terminal) and
to the detected facts on screen.

    python3 bench/tui_start.py --jupyter [--repeats N]

does the same in a JupyterLab 4 terminal in headless Chromium (what the system test
tests/system/test_system_jupyterlab.py drives; needs chromium, chromedriver, jupyterlab and
selenium): in a new terminal each time, the seconds from pressing Enter on
`python3 -m hpcwizard` to the first paint and to the facts, by the page's clock, and to the
output of a bare `python3 -c print(...)` in the same terminal."""
import asyncio
import json
import os
import shlex
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence

FIRST_PAINT = "1/6 System"  # the header of the first screen (the early frame has it)
TEXTUAL_PAINT = "q Quit"  # the footer: only Textual's own frame draws one
FACTS_SHOWN = ("This machine, as detected", "Detection failed")


async def main() -> None:
    from hpcwizard.screens.app import WizardApp

    app = WizardApp()
    async with app.run_test(size=(80, 24)) as pilot:
        deadline = time.monotonic() + 30
        while app.facts is None or type(app.screen).__name__ != "SystemScreen":
            if time.monotonic() > deadline:
                raise SystemExit("the System screen did not get its facts within 30 s")
            await pilot.pause(0.01)


class Tmux:
    """A private tmux server (its own socket, no user config) with one 80x24 pane."""

    def __init__(self, size: Sequence[int] = (80, 24)) -> None:
        self.base = ["tmux", "-L", f"hpcwizard-bench-{os.getpid()}", "-f", "/dev/null"]
        self("new-session", "-d", "-s", "bench", "-x", str(size[0]), "-y", str(size[1]), "sleep 86400")
        self.socket_path = self("display-message", "-p", "#{socket_path}").strip()

    def __call__(self, *args: str) -> str:
        return subprocess.run(self.base + list(args), check=True, text=True, timeout=10,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE).stdout

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "bench")

    def respawn(self, command: str, env: Dict[str, str]) -> None:
        extra = [a for k, v in env.items() for a in ("-e", f"{k}={v}")]
        self("respawn-pane", "-k", "-t", "bench", *extra, command)

    def kill(self) -> None:
        subprocess.run(self.base + ["kill-server"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=10)
        if self.socket_path and os.path.exists(self.socket_path):
            os.unlink(self.socket_path)  # tmux leaves it behind


def one_start(tmux: Tmux, command: str, env: Dict[str, str], timeout: float = 30.0) -> Dict[str, float]:
    """Seconds from asking the terminal to start `command` to the first paint and to the facts."""
    tmux.respawn("sleep 86400", {})
    while tmux.screen().strip():  # the previous wizard's screen is gone before the clock starts
        time.sleep(0.01)
    start = time.perf_counter()
    tmux.respawn(command, env)
    pid = tmux("display-message", "-p", "-t", "bench", "#{pane_pid}").strip()
    out: Dict[str, float] = {}
    while time.perf_counter() - start < timeout:
        shown = tmux.screen()
        now = time.perf_counter() - start
        if "paint" not in out and FIRST_PAINT in shown:
            out["paint"] = now
            out["paint_cpu"] = cpu_seconds(pid)
        if "textual_paint" not in out and TEXTUAL_PAINT in shown:
            out["textual_paint"] = now
        if any(marker in shown for marker in FACTS_SHOWN):
            if "paint" not in out:
                out["paint"], out["paint_cpu"] = now, cpu_seconds(pid)
            out.setdefault("textual_paint", now)
            out["facts"] = now
            out["facts_cpu"] = cpu_seconds(pid)
            out["failed"] = float("Detection failed" in shown)
            return out
        time.sleep(0.005)
    raise SystemExit(f"the wizard showed no facts within {timeout:g} s; the screen:\n{shown}")


def cpu_seconds(pid: str) -> float:
    """User and system CPU the process has used so far, its waited-for children included
    (/proc/PID/stat: a load-independent companion to the wall times)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return float("nan")
    ticks = os.sysconf("SC_CLK_TCK")
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / ticks


def tmux_starts(repeats: int, argv: Optional[List[str]] = None) -> List[Dict[str, float]]:
    argv = argv or [sys.executable, "-m", "hpcwizard"]
    command = "exec " + " ".join(argv)
    env = {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "LANGUAGE": "en", "TERM": "xterm-256color"}
    tmux = Tmux()
    try:
        one_start(tmux, command, env)  # warm the page cache once
        return [one_start(tmux, command, env) for _ in range(repeats)]
    finally:
        tmux.kill()


def jupyter_starts(repeats: int) -> List[Dict[str, float]]:
    import shutil
    import tempfile
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "system"))
    from _jupyterlab import Browser, JupyterLab  # type: ignore

    root = Path(tempfile.mkdtemp(prefix="hpcwizard-bench-jupyter-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "LANG"))}
    env.update(LANG="C.UTF-8", LANGUAGE="en")
    lab = JupyterLab.start(root, env)
    browser = None
    try:
        browser = Browser.start(lab.url, (1000, 700))
        out = []
        for _ in range(repeats + 1):  # the first warms the page cache
            term = browser.open_terminal()
            term.wait_until("the shell's prompt", lambda: term.screen().strip())
            term.type(f"{shlex.quote(sys.executable)} -m hpcwizard; echo HPCWIZARD-EXIT=$?")
            term.wait_for("echo HPCWIZARD-EXIT=$?", wrapped=True)
            paint, facts = term.enter_and_time(FIRST_PAINT, *FACTS_SHOWN)
            failed = float("Detection failed" in term.screen())
            term.type("q")
            term.wait_for("Quit hpcwizard?")  # q asks where nothing has run yet
            term.type("y")
            term.wait_for("HPCWIZARD-EXIT=")
            # beside each start, the same login shell starting a bare interpreter: what the
            # machine's load and the interpreter's own start cost both alike
            term.type(f"{shlex.quote(sys.executable)} -c 'print(\"HPCWIZARD\" + \"-BARE\")'")
            term.wait_for("-BARE\")'", wrapped=True)
            bare, _ = term.enter_and_time("HPCWIZARD-BARE")
            out.append({"paint": paint, "facts": facts, "failed": failed, "python_c": bare})
            term.close()
        return out[1:]
    finally:
        if browser is not None:
            browser.stop()
        lab.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    if "--jupyter" in sys.argv:
        n = int(sys.argv[sys.argv.index("--repeats") + 1]) if "--repeats" in sys.argv else 5
        print(json.dumps(jupyter_starts(n)))
    elif "--tmux" in sys.argv:
        n = int(sys.argv[sys.argv.index("--repeats") + 1]) if "--repeats" in sys.argv else 5
        print(json.dumps(tmux_starts(n)))
    else:
        asyncio.run(main())
