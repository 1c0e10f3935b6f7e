"""The System screen's first frame, drawn before Textual is imported.

Importing Textual takes 0.3 s of the 0.42 s a bare Textual app needs to paint on the 2-core
cloud instances the wizard runs on, and hpcwizard's own screens add more: a terminal that shows
nothing for most of a second after Enter reads as a hang. So the wizard draws at once the frame
Textual is about to draw (the header with the step's title, the line saying detection is under
way, in Textual's colours) on the alternate screen, and Textual paints over it.

Entering the alternate screen twice (here, then Textual) leaves the shell's screen and cursor
as they were once Textual leaves it: xterm, xterm.js (JupyterLab's terminal) and VTE keep the
cursor saved by `CSI ?1049h` per screen, so the second save lands on the alternate screen's
slot; tmux ignores a switch to the screen it is on. tests/test_tui_tmux.py checks it in tmux,
tests/system/test_system_jupyterlab.py in xterm.js. HPCWIZARD_EARLY_FRAME=0 turns it off.

Nothing here imports Textual (this module runs before it); the texts are the System screen's.
"""
from __future__ import annotations

import os
import sys
from types import TracebackType
from typing import Mapping, Optional, Type

from hpcwizard.i18n import N_, _, clip, width

TITLE = "hpcwizard"  # the App's title, as its Header shows it
STEP = N_("1/6 System")  # the System screen's title
DETECTING = N_("Detecting this machine (a few seconds)…")  # its first line, until the facts

# Textual's default dark theme as it paints the System screen (its Header and Screen colours
# in 256-colour terminals): one frame that Textual's first repaint covers without a jump.
HEADER = "\x1b[48;5;17m\x1b[38;5;253m"
HEADER_DIM = "\x1b[38;5;247m"
BODY = "\x1b[48;5;233m"
BOLD_TEXT = "\x1b[1m\x1b[38;5;253m"
RESET = "\x1b[0m"

ENTER = "\x1b[?1049h\x1b[?25l"  # the alternate screen, cursor hidden (as Textual does)
LEAVE = RESET + "\x1b[?25h\x1b[?1049l"  # the shell's screen and cursor back


def render(columns: int, lines: int) -> str:
    """The frame for a terminal of that size, from entering the alternate screen on."""
    title, step = TITLE, " — " + _(STEP)
    room = max(0, columns - width(title + step))
    # centred as Textual's Header centres it: between its icon (8 columns) and the 10 it
    # keeps on the right, where those fit
    left = 8 + (room - 18) // 2 if room >= 18 else room // 2
    title = clip(title, columns)
    step = clip(step, columns - left - width(title))
    header = " " * left + title + HEADER_DIM + step + HEADER + " " * (room - left)
    status = clip(" " + _(DETECTING), columns)
    return (ENTER + BODY + "\x1b[2J"  # cleared to the body's colour
            + "\x1b[1;1H" + HEADER + header + RESET
            + (f"\x1b[2;1H{BODY}{BOLD_TEXT}{status}{RESET}" if lines > 1 else "")
            + f"\x1b[{max(1, lines)};1H")


def wanted(environ: Mapping[str, str], fd: int) -> bool:
    """Whether to draw it: a terminal that is one (not 'dumb'), and not turned off."""
    if environ.get("HPCWIZARD_EARLY_FRAME", "1") == "0":
        return False
    if environ.get("TERM", "dumb") in ("", "dumb"):
        return False
    try:
        return os.isatty(fd)
    except OSError:
        return False


class EarlyFrame:
    """`with EarlyFrame() as frame: ...; frame.hand_over(); app.run()`.

    Until hand_over() (called just before Textual's App.run takes the terminal), an exception
    on the way out of the block (Ctrl+C while Textual loads, an import that fails) leaves the
    alternate screen here, so the message that follows lands on the shell's screen. After it,
    leaving is Textual's: a second leave would move the cursor back to where it was saved."""

    def __init__(self, environ: Mapping[str, str] = os.environ, stream=None) -> None:
        self._stream = stream if stream is not None else sys.__stderr__  # where Textual writes
        self._environ = environ
        self.drawn = False
        self.handed_over = False

    def __enter__(self) -> "EarlyFrame":
        try:
            fd = self._stream.fileno()
        except (AttributeError, OSError, ValueError):
            return self
        if not wanted(self._environ, fd):
            return self
        try:
            size = os.get_terminal_size(fd)  # the terminal's own, never COLUMNS/LINES
            self._write(render(size.columns, size.lines))
            self.drawn = True
        except OSError:
            pass
        return self

    def hand_over(self) -> None:
        self.handed_over = True

    def __exit__(self, kind: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        if self.drawn and not self.handed_over:
            try:
                self._write(LEAVE)
            except OSError:
                pass

    def _write(self, text: str) -> None:
        data = text.encode("utf-8", "replace")
        fd = self._stream.fileno()
        while data:  # one frame, whatever a short write leaves
            data = data[os.write(fd, data):]
