"""Issue 16, system test: the installed wizard in a real JupyterLab 4 terminal, where its users
are. JupyterLab (token, 127.0.0.1, a free port, a private root) and headless Chromium driven by
selenium: a new Terminal from the launcher, `python3 -m hpcwizard` typed into it (the terminal
runs `bash -l`, which resets PATH: this is the start that works from a login shell), and the
text read from xterm.js's buffer. The first screen fills the terminal; shrinking and growing
the browser window, the layout follows (JupyterLab's terminal exports COLUMNS/LINES, which
must not pin the size); System -> Choose -> Recommend -> the preset image -> the launch script
written; F2 switches to Chinese.

The machine's facts come from a fixture (HPCWIZARD_FACTS): a GPU+IB node, user without sudo,
as tests/test_tui_tmux.py walks it in tmux. Root only, HPCWIZARD_SYSTEM_TESTS=1 (conftest.py
skips otherwise); with it set, missing Chromium, chromedriver, JupyterLab or selenium FAIL:
CI (.ci/run) installs them."""
from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List

import pytest

from _jupyterlab import Browser, JupyterLab, Terminal, missing_tools
from _tui_fixtures import gpu_ib, write_facts

pytestmark = pytest.mark.system

# the interpreter the tests run under, by path: JupyterLab starts a login shell when its own
# output is not a terminal (as in CI), and /etc/profile's PATH may hold another python3
WIZARD = f"{shlex.quote(sys.executable)} -m hpcwizard"
# browser window sizes in CSS pixels: where each test starts, and a smaller and a larger one.
# terminado exports COLUMNS/LINES and bash (checkwinsize) keeps them right up to the
# wizard's start: a pinned size shows only once the window changes under the running wizard
WINDOW = (1000, 700)
SMALLER = (760, 560)
LARGER = (1400, 900)


@dataclass
class Lab:
    root: Path  # JupyterLab's root and the tests' working directories, removed at the end
    lab: JupyterLab
    browser: Browser
    facts: Path  # the fixture machine, for HPCWIZARD_FACTS


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    missing = missing_tools()
    if missing:
        pytest.fail("the JupyterLab system test needs " + ", ".join(missing)
                    + " (.ci/run installs them)", pytrace=False)
    root = Path(tempfile.mkdtemp(prefix="hpcwizard-jupyterlab-"))
    jupyter = browser = None
    try:
        facts = write_facts(gpu_ib(sudo="none"), root / ".facts.json")
        # English whatever CI's locale; F2 is what switches
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("LC_", "LANG")) and k != "HPCWIZARD_SYSTEM_TESTS"}
        jupyter = JupyterLab.start(root, env)
        browser = Browser.start(jupyter.url, WINDOW)
        yield Lab(root, jupyter, browser, facts)
    finally:
        if browser is not None:
            browser.stop()
        if jupyter is not None:
            jupyter.stop()
        shutil.rmtree(root, ignore_errors=True)


def start_wizard(lab: Lab, work: Path) -> Terminal:
    """A new terminal at the first window size, the wizard typed and started in `work`."""
    work.mkdir()
    lab.browser.set_size(*WINDOW)
    term = lab.browser.open_terminal()
    command = (f"cd {shlex.quote(str(work))} && env HPCWIZARD_FACTS={shlex.quote(str(lab.facts))}"
               f" HPCWIZARD_STATE_DIR={shlex.quote(str(work / 'state'))} {WIZARD};"
               " echo HPCWIZARD-EXIT=$?")
    term.wait_until("the shell's prompt", lambda: term.screen().strip())
    term.type(command)
    term.wait_for("echo HPCWIZARD-EXIT=$?", wrapped=True)  # bash has it all: Enter runs it
    term.work = work
    term.first_paint = term.enter_and_time("1/6 System")[0]
    return term


@pytest.fixture
def wizard(lab: Lab, request) -> Iterator[Terminal]:
    term = start_wizard(lab, lab.root / request.node.name.replace("[", "-").rstrip("]"))
    # in a junit report; bench/tui_start.py --jupyter is where the figure is measured
    request.node.user_properties.append(("first_paint_s", round(term.first_paint, 3)))
    yield term
    term.close()


def cells(text: str) -> int:
    """Terminal columns `text` takes (xterm.js gives a wide character one string position)."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def bold(term: Terminal, row_with: str, word: str) -> bool:
    style = term.style_of(row_with, word)
    return bool(style and style[2])


def layout_problems(term: Terminal, title: str) -> List[str]:
    """How the wizard's screen does not fill the terminal as it is now ([] when it does): its
    header is centred on row 1 and its key footer is the last row."""
    cols, rows = term.size()
    lines = term.lines()
    heading = f"hpcwizard — {title}"
    problems = []
    if len(lines) != rows:
        problems.append(f"{len(lines)} rows read, the terminal has {rows}")
    elif heading not in lines[0]:
        problems.append(f"row 1 is not the header {heading!r}")
    else:
        left = lines[0].index(heading)
        off = left + cells(heading) / 2 - cols / 2
        if abs(off) > 2:  # Textual rounds, and its header has an icon on the left only
            problems.append(f"the header is not centred in {cols} columns "
                            f"(its middle is {off:+g} columns off)")
    if not lines or not all(key in lines[-1] for key in ("? ", "f2 ")):
        problems.append(f"row {rows} (the last) is not the key footer")
    return problems


def wait_for_layout(term: Terminal, title: str, timeout: float = 60.0) -> None:
    problems: List[str] = []

    def fills() -> bool:
        problems[:] = layout_problems(term, title)
        return not problems

    try:
        term.wait_until(f"the wizard filling the {term.size()} terminal", fills, timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nwhat is wrong: {'; '.join(problems)}") from None


def resize(lab: Lab, term: Terminal, window: tuple) -> tuple:
    """The browser window at `window`; returns the terminal's new (columns, rows) once
    JupyterLab has fitted xterm.js to it."""
    before = term.size()
    lab.browser.set_size(*window)
    return term.wait_until(f"the terminal refitted to the {window} window",
                           lambda: (lambda now: now if now != before else None)(term.size()))


def test_first_screen_fills_a_new_jupyterlab_terminal(wizard):
    shown = wizard.wait_for("mlx5_0:1")
    assert "ACTIVE" in shown and "NVIDIA H100 80GB HBM3" in shown
    assert "Nothing has been changed" in shown
    wait_for_layout(wizard, "1/6 System")


def test_the_screen_follows_the_window_as_it_shrinks_and_grows(lab, wizard):
    wizard.wait_for("mlx5_0:1")
    wait_for_layout(wizard, "1/6 System")
    first = wizard.size()
    smaller = resize(lab, wizard, SMALLER)
    assert smaller[0] < first[0] and smaller[1] < first[1]
    wait_for_layout(wizard, "1/6 System")
    larger = resize(lab, wizard, LARGER)
    assert larger[0] > first[0] and larger[1] > first[1]
    wait_for_layout(wizard, "1/6 System")
    # the body too, not only the frame: the warning (two rows at the first width) on one
    shown = wizard.wait_for("NCCL will not use GPUDirect RDMA.")
    assert any("nvidia_peermem" in line and "GPUDirect RDMA." in line
               for line in shown.splitlines())


def test_system_to_preset_export_then_f2_to_chinese(wizard):
    work = wizard.work
    wizard.wait_for("mlx5_0:1")
    wizard.press("ENTER")  # Next
    wizard.wait_for("2/6 Choose")
    # Tab, arrows and Enter go where the focus is, which comes a moment after the screen is
    # drawn: each waits for the highlight (bold) where the key before put it
    wizard.wait_until("the focus on Framework", lambda: bold(wizard, "Framework", "MPI"))
    wizard.press("TAB")
    wizard.wait_until("the focus on Network", lambda: bold(wizard, "Network", "TCP"))
    wizard.press("ARROW_RIGHT")
    wizard.wait_until("the highlight on InfiniBand",
                      lambda: bold(wizard, "Network", "InfiniBand"))
    pressed = wizard.style_of("Network", "●▌ TCP")  # the dot of the value chosen
    wizard.press("ENTER")
    wizard.wait_until("InfiniBand chosen",
                      lambda: wizard.style_of("Network", "●▌ InfiniBand") == pressed)
    # Enter on the value already chosen is Next: a desktop browser keeps Ctrl+N for itself
    wizard.press("ENTER")
    shown = wizard.wait_for("3/6 Recommend")
    assert "over InfiniBand" in shown
    assert "Recommended: start the job from the preset image" in shown
    assert "esx-batchcom/openmpi-ib:v1" in shown
    assert "cannot use sudo" in shown  # the reason
    # from here the screens' own keys, which work wherever the focus is (Enter would press
    # the focused button: the same, once the focus is there)
    wizard.type("p")  # Use preset
    wizard.wait_for("6/6 Preset image")
    script = work / "hpcwizard-launch.sh"
    assert not script.exists()
    wizard.type("w")  # Write export: the launch script, chosen for the preset
    shown = wizard.wait_for("Wrote launch script")
    assert "hpcwizard-launch.sh" in shown.replace("\n", "")
    assert script.is_file() and os.access(script, os.X_OK)
    assert "esx-batchcom/openmpi-ib:v1" in script.read_text()
    wizard.press("F2")
    shown = wizard.wait_for("6/6 预置镜像")
    assert "6/6 Preset image" not in shown
    wizard.type("q")
    wizard.wait_for("退出 hpcwizard？")  # q asks where nothing has run yet (F2: in Chinese)
    wizard.type("y")
    wizard.wait_for("HPCWIZARD-EXIT=0")
    assert not (work / "state" / "records").exists()  # nothing ran
    # The shell's screen is back with its cursor where the command left it: the early frame
    # entered the alternate screen before Textual did it again, and xterm.js keeps the saved
    # cursor per screen, so the exit line comes right under the (wrapped) command.
    assert wizard.buffer_type() == "normal"
    lines = [line.rstrip() for line in wizard.lines()]
    exits = [i for i, line in enumerate(lines) if line == "HPCWIZARD-EXIT=0"]
    assert len(exits) == 1 and exits[0] > 0 and lines[exits[0] - 1].endswith("$?"), lines


def test_f2_on_the_first_screen_switches_to_chinese_and_back(wizard):
    wizard.wait_for("mlx5_0:1")
    wizard.press("F2")
    shown = wizard.wait_for("1/6 系统")
    assert "1/6 System" not in shown
    wait_for_layout(wizard, "1/6 系统")
    wizard.press("F2")
    shown = wizard.wait_for("1/6 System")
    assert "1/6 系统" not in shown
