"""The early frame (screens/early_frame.py): what it draws, when, and that it gives the
terminal back when Textual never takes over. In a real terminal: tests/test_tui_tmux.py."""
from __future__ import annotations

import os
import re

import pytest

from hpcwizard.i18n import set_language, width
from hpcwizard.screens import early_frame
from hpcwizard.screens.early_frame import ENTER, LEAVE, EarlyFrame, render, wanted

TTY_ENV = {"TERM": "xterm-256color"}


def text_rows(frame: str):
    """The frame's rows as a terminal shows them: row number -> text (styles dropped)."""
    rows = {}
    for row, text in re.findall(r"\x1b\[(\d+);1H((?:[^\x1b]|\x1b\[[0-9;]*m)*)", frame):
        rows[int(row)] = re.sub(r"\x1b\[[0-9;]*m", "", text)
    return rows


@pytest.fixture
def lang():
    yield set_language
    set_language("en")


@pytest.mark.parametrize("language,title", [("en", "hpcwizard — 1/6 System"),
                                            ("zh", "hpcwizard — 1/6 系统")])
@pytest.mark.parametrize("columns", [80, 60, 120])
def test_the_frame_is_the_system_screens_header_and_status(lang, language, title, columns):
    lang(language)
    frame = render(columns, 24)
    assert frame.startswith(ENTER)
    rows = text_rows(frame)
    header = rows[1]
    assert header.strip() == title
    assert width(header) == columns  # the header's colour spans the row, as Textual's
    middle = header.index(title) + width(title) / 2
    assert abs(middle - columns / 2) <= 2
    assert rows[2].strip() == {"en": "Detecting this machine (a few seconds)…",
                               "zh": "正在检测本机（需要几秒钟）…"}[language]


@pytest.mark.parametrize("columns", [1, 10, 21, 30])
def test_a_narrow_terminal_gets_a_frame_no_wider_than_it(lang, columns):
    for language in ("en", "zh"):
        lang(language)
        rows = text_rows(render(columns, 3))
        assert all(width(text) <= columns for text in rows.values()), rows


def test_one_row_gets_the_header_alone():
    assert sorted(text_rows(render(80, 1))) == [1]


def test_the_texts_are_the_system_screens():
    from hpcwizard.screens import system
    assert system.SystemScreen.SUB_TITLE == early_frame.STEP
    source = open(system.__file__, encoding="utf-8").read()
    assert "_(DETECTING)" in source


@pytest.fixture
def pty():
    controller, terminal = os.openpty()
    os.set_blocking(controller, False)
    stream = os.fdopen(terminal, "w")
    yield stream, controller
    stream.close()
    os.close(controller)


def written(controller: int) -> str:
    chunks = []
    while True:
        try:
            data = os.read(controller, 65536)
        except BlockingIOError:
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks).decode("utf-8")


def test_an_exception_before_the_hand_over_leaves_the_alternate_screen(pty):
    stream, controller = pty
    with pytest.raises(KeyboardInterrupt):
        with EarlyFrame(TTY_ENV, stream) as frame:
            assert frame.drawn
            assert written(controller).startswith(ENTER)
            raise KeyboardInterrupt
    assert written(controller) == LEAVE


def test_after_the_hand_over_leaving_is_textuals(pty):
    stream, controller = pty
    with EarlyFrame(TTY_ENV, stream) as frame:
        frame.hand_over()
    assert ENTER in written(controller)
    with pytest.raises(RuntimeError):
        with EarlyFrame(TTY_ENV, stream) as frame:
            frame.hand_over()
            raise RuntimeError("Textual failed")
    assert LEAVE not in written(controller)


@pytest.mark.parametrize("environ", [{"TERM": "dumb"}, {"TERM": ""}, {},
                                     {"TERM": "xterm", "HPCWIZARD_EARLY_FRAME": "0"}])
def test_nothing_is_drawn_where_it_is_not_wanted(pty, environ):
    stream, controller = pty
    assert not wanted(environ, stream.fileno())
    with EarlyFrame(environ, stream) as frame:
        pass
    assert not frame.drawn and written(controller) == ""


def test_nothing_is_drawn_on_what_is_not_a_terminal(tmp_path):
    with open(tmp_path / "out", "w") as stream:
        with EarlyFrame(TTY_ENV, stream) as frame:
            pass
    assert not frame.drawn and (tmp_path / "out").read_text() == ""
