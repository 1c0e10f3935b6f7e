"""The installed `hpcwizard` in a real terminal (tmux, 80x24): the headline flow with keys
alone, MPI + InfiniBand -> the preset image -> the launch script on disk.

This machine has no active InfiniBand port, so the facts come from a fixture through
HPCWIZARD_FACTS (a testing/demo aid of run_tui): a GPU+IB machine, user without sudo."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List

import pytest

from _tui_fixtures import gpu_ib, write_facts

pytestmark = pytest.mark.skipif(not shutil.which("tmux") or not shutil.which("hpcwizard"),
                                reason="needs tmux and the installed hpcwizard")


class Tmux:
    def __init__(self, tmp: Path) -> None:
        self.socket = f"hpcwizard-test-{os.getpid()}"
        self.session = "wizard"

    def __call__(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], check=True, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=10).stdout

    def screen(self, styles: bool = False) -> str:
        return self("capture-pane", "-p", *(["-e"] if styles else []), "-t", self.session)

    def wait_for(self, text: str, timeout: float = 90.0) -> str:
        return self.wait_until(lambda shown: text in shown, repr(text), timeout)

    def wait_until(self, cond, what: str, timeout: float = 90.0, styles: bool = False) -> str:
        """Until the pane shows what cond() accepts. The time-out only bounds a failure;
        the poll is tmux's (there is no event to wait on from outside the terminal)."""
        end = time.monotonic() + timeout
        shown = ""
        while time.monotonic() < end:
            shown = self.screen(styles)
            if cond(shown):
                return shown
            time.sleep(0.05)
        raise AssertionError(f"{what} did not appear within {timeout:g} s; the screen:\n{shown}")

    def keys(self, *keys: str) -> None:
        """One at a time, each once the screen shows it was handled (its colours count: a
        focus move changes only those), so that no key lands on a screen still being set
        up. Each key used here changes what is shown."""
        for key in keys:
            before = self.screen(styles=True)
            self("send-keys", "-t", self.session, key)
            self.wait_until(lambda shown: shown != before, f"the answer to {key}",
                            styles=True)

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=10)


SGR = re.compile(r"\x1b\[([0-9;]*)m")


@dataclass
class RadioRow:
    dots: Dict[str, str] = field(default_factory=dict)  # label -> its ●'s colour
    focused: str = ""  # the label drawn bold: the highlighted value of the focused set


def styled_chars(line: str):
    """(character, foreground colour, bold) for each character of a `capture-pane -e` line."""
    colour, bold, pos = "", False, 0
    for m in [*SGR.finditer(line), None]:
        for ch in line[pos:m.start() if m else len(line)]:
            yield ch, colour, bold
        if m is None:
            return
        pos = m.end()
        codes = iter(m.group(1).split(";"))
        for code in codes:
            if code in ("", "0"):
                colour, bold = "", False
            elif code == "1":
                bold = True
            elif code == "22":
                bold = False
            elif code == "39":
                colour = ""
            elif code in ("38", "48") and next(codes, "") == "5":
                value = next(codes, "")
                colour = value if code == "38" else colour


def radio_row(styled: str, name: str) -> RadioRow:
    """The RadioSet on the line that starts with name: a picked value's ● has another colour
    than the others', and only the focused set draws its highlighted value in bold."""
    row = RadioRow()
    line = next((ln for ln in styled.split("\n") if SGR.sub("", ln).strip().startswith(name)),
                "")
    buttons = []  # [dot colour, label, bold]
    for ch, colour, bold in styled_chars(line):
        if ch == "●":
            buttons.append([colour, "", False])
        elif buttons and ch.isalnum():
            buttons[-1][1] += ch
            buttons[-1][2] |= bold
    for dot, label, bold in buttons:
        row.dots[label] = dot
        if bold:
            row.focused = label
    return row


@pytest.fixture
def tmux(tmp_path):
    t = Tmux(tmp_path)
    yield t
    t.kill()


def test_headline_flow_in_tmux_writes_the_launch_script(tmux, tmp_path):
    facts = write_facts(gpu_ib(sudo="none"), tmp_path / "facts.json")
    state = tmp_path / "state"
    command = (f"env HPCWIZARD_FACTS={facts} HPCWIZARD_STATE_DIR={state} hpcwizard; "
               "echo HPCWIZARD-EXIT=$?; sleep 60")
    tmux("new-session", "-d", "-s", tmux.session, "-x", "80", "-y", "24", "-c", str(tmp_path),
         command)
    started = time.monotonic()
    shown = tmux.wait_for("mlx5_0:1")  # the facts (the early frame has the title alone)
    assert "1/6 System" in shown and "ACTIVE" in shown
    assert time.monotonic() - started < 10
    tmux.keys("Enter")
    tmux.wait_for("2/6 Choose")
    # Each key once the screen is in the state that key is for: the first keys of a fresh
    # screen otherwise race its focus, and a lost one is seen only two screens later.
    tmux.wait_until(lambda s: radio_row(s, "Framework").focused == "MPI", "Framework focused",
                    styles=True)
    tmux.keys("Tab")
    tmux.wait_until(lambda s: radio_row(s, "Network").focused == "TCP", "Network focused",
                    styles=True)
    tmux.keys("Right")
    tmux.wait_until(lambda s: radio_row(s, "Network").focused == "InfiniBand",
                    "InfiniBand highlighted", styles=True)
    tmux.keys("Enter")

    def infiniband_picked(shown: str) -> bool:
        pressed = radio_row(shown, "Framework").dots["MPI"]  # MPI stays picked
        dots = radio_row(shown, "Network").dots
        return dots.get("InfiniBand") == pressed != dots.get("TCP")

    tmux.wait_until(infiniband_picked, "InfiniBand picked", styles=True)
    tmux.keys("C-n")
    shown = tmux.wait_for("3/6 Recommend")
    assert "MPI over InfiniBand" in shown
    assert "Recommended: start the job from the preset image" in shown
    assert "esx-batchcom/openmpi-ib:v1" in shown
    assert "cannot use sudo" in shown  # the reason
    tmux.keys("Enter")  # take the recommended preset
    tmux.wait_for("Preset image")
    tmux.keys("Enter")  # Write (focused) with the launch script selected
    shown = tmux.wait_for("Wrote launch script")
    script = tmp_path / "hpcwizard-launch.sh"
    assert script.is_file()
    assert "hpcwizard-launch.sh" in shown.replace("\n", "")
    assert "esx-batchcom/openmpi-ib:v1" in script.read_text()
    assert os.access(script, os.X_OK)
    tmux.keys("q")
    tmux.wait_for("Quit hpcwizard?")  # q asks where nothing has run yet
    tmux.keys("y")
    tmux.wait_for("HPCWIZARD-EXIT=0")
    assert not (state / "records").exists()  # nothing ran


def test_the_screen_follows_resizes_with_columns_and_lines_set(tmux, tmp_path):
    """JupyterLab's terminal exports COLUMNS and LINES: the wizard must still follow the
    window (shrunk: the footer on the last row, not a blank screen; grown: the new size)."""
    facts = write_facts(gpu_ib(sudo="none"), tmp_path / "facts.json")
    command = (f"env COLUMNS=80 LINES=24 HPCWIZARD_FACTS={facts} "
               f"HPCWIZARD_STATE_DIR={tmp_path / 'state'} hpcwizard; sleep 60")
    tmux("new-session", "-d", "-s", tmux.session, "-x", "80", "-y", "24", "-c", str(tmp_path),
         command)
    tmux.wait_for("mlx5_0:1")  # Textual's frame, not the early one: it follows resizes

    title = "hpcwizard — 1/6 System"

    def laid_out(columns: int, rows: int):
        def cond(shown: str) -> bool:
            lines = shown.split("\n")[:rows]
            if len(lines) < rows or title not in lines[0]:
                return False
            # the header's title centred in the new width; the Next button on the row above
            # the footer, whose keys are on the last row (the old size puts both elsewhere)
            middle = lines[0].index(title) + len(title) / 2
            return (abs(middle - columns / 2) <= 2 and "Next" in lines[rows - 2]
                    and "Quit" in lines[rows - 1])
        return cond

    for columns, rows in ((60, 12), (100, 30), (80, 24)):
        tmux("resize-window", "-t", tmux.session, "-x", str(columns), "-y", str(rows))
        tmux.wait_until(laid_out(columns, rows), f"the screen at {columns}x{rows}")


def _shell(tmux: Tmux, tmp_path: Path, early_frame: str) -> None:
    """bash in an 80x24 pane, with two lines of its own on the screen before the wizard."""
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "TERM": "xterm-256color",
           "LANG": "C.UTF-8", "PS1": "$ ", "HPCWIZARD_EARLY_FRAME": early_frame}
    tmux("new-session", "-d", "-s", tmux.session, "-x", "80", "-y", "24", "-c", str(tmp_path),
         "env -i " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
         + " bash --norc --noprofile")
    tmux.wait_for("$")
    tmux("send-keys", "-t", tmux.session, "echo shell-line-one; echo shell-line-two", "Enter")
    tmux.wait_for("$ echo shell-line-one; echo shell-line-two\nshell-line-one\nshell-line-two\n$")


def _pane(tmux: Tmux, *formats: str) -> List[str]:
    return tmux("display-message", "-p", "-t", tmux.session, " ".join(formats)).split()


@pytest.mark.parametrize("early_frame", ["1", "0"])
def test_quitting_gives_the_shell_its_screen_and_cursor_back(tmux, tmp_path, early_frame):
    """The early frame enters the alternate screen before Textual does it again: once the
    wizard quits, the shell's lines are on screen and its prompt is on the row after the
    command, exactly as without the early frame (HPCWIZARD_EARLY_FRAME=0)."""
    facts = write_facts(gpu_ib(sudo="none"), tmp_path / "facts.json")
    _shell(tmux, tmp_path, early_frame)
    tmux("send-keys", "-t", tmux.session,
         f"HPCWIZARD_FACTS={facts.name} HPCWIZARD_STATE_DIR=state hpcwizard; echo EXIT=$?",
         "Enter")  # on one row: the pane's directory is tmp_path
    tmux.wait_for("mlx5_0:1")
    assert _pane(tmux, "#{alternate_on}") == ["1"]
    tmux("send-keys", "-t", tmux.session, "q")
    tmux.wait_for("Quit hpcwizard?")  # q asks where nothing has run yet
    tmux("send-keys", "-t", tmux.session, "y")
    shown = tmux.wait_for("EXIT=0\n$")
    lines = shown.split("\n")
    assert lines[:3] == ["$ echo shell-line-one; echo shell-line-two", "shell-line-one",
                         "shell-line-two"]
    assert lines[3].startswith("$ HPCWIZARD_FACTS=") and lines[3].endswith("echo EXIT=$?")
    assert lines[4:6] == ["EXIT=0", "$"]
    assert _pane(tmux, "#{alternate_on}", "#{cursor_x}", "#{cursor_y}") == ["0", "2", "5"]


def test_ctrl_c_before_textual_takes_over_leaves_the_early_frame(tmux, tmp_path):
    """Ctrl+C while Textual loads: the frame's alternate screen is left, so the shell's screen
    and the interrupt's message are what the user sees. The wait stands in for Textual's
    import, which is too quick to hit with a key reliably."""
    _shell(tmux, tmp_path, "1")
    (tmp_path / "loads.py").write_text(
        "import time\nfrom hpcwizard.screens.early_frame import EarlyFrame\n"
        "with EarlyFrame() as frame:\n    print(frame.drawn, file=open('drawn', 'w'))\n"
        "    time.sleep(120)\n")
    tmux("send-keys", "-t", tmux.session,
         f"{shlex.quote(sys.executable)} loads.py", "Enter")
    shown = tmux.wait_for("Detecting this machine (a few seconds)")
    assert "hpcwizard — 1/6 System" in shown.split("\n")[0]
    assert _pane(tmux, "#{alternate_on}") == ["1"]
    tmux("send-keys", "-t", tmux.session, "C-c")
    shown = tmux.wait_until(lambda shown: "KeyboardInterrupt" in shown
                            and shown.rstrip().endswith("\n$"), "the shell's prompt again")
    assert (tmp_path / "drawn").read_text() == "True\n"
    assert shown.split("\n")[1:3] == ["shell-line-one", "shell-line-two"]
    assert "Detecting this machine" not in shown and "KeyboardInterrupt" in shown
    assert _pane(tmux, "#{alternate_on}") == ["0"]


@pytest.mark.parametrize("pasted", [["9b"], ["1b", "5b", "32", "30", "30", "7e", "61", "9b", "62",
                                             "1b", "5b", "32", "30", "31", "7e"]],
                         ids=["byte", "bracketed-paste"])
def test_a_byte_that_is_not_utf8_does_not_end_the_wizard(tmux, tmp_path, pasted):
    """0x9b alone or inside a bracketed paste: Textual's strict UTF-8 decoder raised
    UnicodeDecodeError in its input thread and the wizard ended (exit status 0)."""
    facts = write_facts(gpu_ib(sudo="none"), tmp_path / "facts.json")
    command = (f"env HPCWIZARD_FACTS={facts} HPCWIZARD_STATE_DIR={tmp_path / 'state'} "
               "hpcwizard; echo HPCWIZARD-EXIT=$?; sleep 60")
    tmux("new-session", "-d", "-s", tmux.session, "-x", "80", "-y", "24", "-c", str(tmp_path),
         command)
    tmux.wait_for("mlx5_0:1")
    tmux("send-keys", "-t", tmux.session, "-H", *pasted)
    tmux("send-keys", "-t", tmux.session, "q")  # answered only by a wizard still running
    shown = tmux.wait_for("Quit hpcwizard?", timeout=30)
    assert "UnicodeDecodeError" not in shown and "HPCWIZARD-EXIT" not in shown
    tmux.keys("y")
    tmux.wait_for("HPCWIZARD-EXIT=0")
