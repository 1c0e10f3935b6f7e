"""What a JupyterLab terminal (xterm.js in a browser) needs from the wizard, with the
Pilot: the size followed with COLUMNS/LINES exported, keys a browser delivers (no super+…;
a Back key that is not escape, which JupyterLab takes from a second quick press), the
export's highlight on the chosen format. The real terminal: tests/test_tui_tmux.py and
tests/system/test_system_jupyterlab.py."""
from __future__ import annotations

import os
import shutil

import pytest

pytest.importorskip("textual")

from textual.widgets import Footer, Input, RadioSet  # noqa: E402

from _tui_fixtures import (gpu_ib, make_app, name, sync, to_choose, to_review,  # noqa: E402
                           wait_for)


# --- the size ------------------------------------------------------------------------------

def test_run_tui_asks_the_terminal_not_columns_and_lines(monkeypatch):
    """JupyterLab exports COLUMNS=80 LINES=24 (the size at start); shutil, which Textual
    asks at every resize, reads them before the terminal. While the App runs, the size is
    the terminal's (here a fake one of 132x43)."""
    from hpcwizard.screens import app as app_module

    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("LINES", "24")
    monkeypatch.delenv("HPCWIZARD_FACTS", raising=False)
    monkeypatch.setattr(os, "get_terminal_size", lambda fd=0: os.terminal_size((132, 43)))
    seen = {}

    def fake_run(self):
        seen["size"] = tuple(shutil.get_terminal_size())
        seen["env"] = {v: os.environ.get(v) for v in ("COLUMNS", "LINES")}
        return 0

    monkeypatch.setattr(app_module.WizardApp, "run", fake_run)
    assert app_module.run_tui() == 0
    assert seen["size"] == (132, 43)
    assert seen["env"] == {"COLUMNS": None, "LINES": None}


@sync
async def test_a_resize_lays_the_screen_out_again(tmp_path, monkeypatch):
    """Shrunk to 60x12 and grown to 100x30 with COLUMNS/LINES still saying 80x24: the footer
    on the last row each time, the body between it and the header."""
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("LINES", "24")
    app = make_app(tmp_path, facts=gpu_ib())
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: name(app) == "SystemScreen" and app.screen.ready)
        for size in ((60, 12), (100, 30), (80, 24)):
            await pilot.resize_terminal(*size)
            footer = app.screen.query_one(Footer)
            await wait_for(pilot, lambda: app.screen.size == size
                           and footer.region.y == size[1] - 1
                           and footer.region.width == size[0], what=f"the layout at {size}")
            body = app.screen.query_one("#system-body")
            assert body.region.y >= 1 and body.region.bottom <= size[1] - 1


# --- keys a browser delivers ---------------------------------------------------------------

async def _keys_on(pilot) -> dict:
    from hpcwizard.screens.widgets import keys_of

    return dict(keys_of(pilot.app.screen))


@sync
async def test_the_keys_help_lists_what_a_browser_terminal_delivers(tmp_path):
    app = make_app(tmp_path, facts=gpu_ib(sudo="nopasswd"))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: name(app) == "SystemScreen" and app.screen.ready)
        system = await _keys_on(pilot)
        # Enter is the focused button's key too; the help says it all the same
        assert any("⏎" in k.split(" / ") for k, what in system.items() if what == "Next"), system
        await to_choose(pilot)
        choose = await _keys_on(pilot)
        # Next is a key a browser delivers (it keeps ctrl+n for a new window), shown first
        assert any(k.split(" / ")[0] == "⏎" for k, what in choose.items() if what == "Next")
        await pilot.press("enter")
        await wait_for(pilot, lambda: name(app) == "RecommendScreen")
        recommend = await _keys_on(pilot)
        await pilot.press("c")
        await wait_for(pilot, lambda: name(app) == "ReviewScreen")
        review = await _keys_on(pilot)
        for keys in (system, choose, recommend, review):
            assert not [k for k in keys if "super" in k], keys
        for keys in (choose, recommend, review):
            assert keys.get("b / esc") == "Back", keys
        assert "Back" not in system.values()  # nothing before System


@sync
async def test_b_goes_back_and_the_footer_shows_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = make_app(tmp_path, facts=gpu_ib(sudo="nopasswd"))
    async with app.run_test(size=(80, 24)) as pilot:
        await to_review(pilot)
        for expected in ("RecommendScreen", "ChooseScreen", "SystemScreen"):
            active = app.screen.active_bindings.get("b")
            assert active is not None and active.binding.show and active.enabled
            await pilot.press("b")
            await wait_for(pilot, lambda: name(app) == expected)
        await to_choose(pilot)
        user = app.screen.query_one("#user", Input)
        user.focus()
        await wait_for(pilot, lambda: user.has_focus)
        await pilot.press("b")  # typed into the field, not Back
        await wait_for(pilot, lambda: user.value == "b")
        assert name(app) == "ChooseScreen"


# --- the export's highlight ----------------------------------------------------------------

@sync
async def test_the_highlight_starts_on_the_chosen_format(tmp_path):
    """The preset path's Done chooses the launch script: the highlight is there, not on the
    first button (Textual's RadioSet highlights its first button when mounted)."""
    app = make_app(tmp_path, facts=gpu_ib())
    async with app.run_test(size=(80, 24)) as pilot:
        await to_choose(pilot)
        await pilot.press("tab", "right", "enter", "enter")
        await wait_for(pilot, lambda: name(app) == "RecommendScreen")
        await pilot.press("p")
        await wait_for(pilot, lambda: name(app) == "DoneScreen")
        formats = app.screen.query_one("#export-format", RadioSet)
        assert formats.pressed_button is not None and formats.pressed_button.id == "fmt-launch"
        await wait_for(pilot, lambda: formats._selected == formats.pressed_index,
                       what="the highlight on the chosen format")
        highlighted = formats.query_one("#fmt-launch")
        assert highlighted.has_class("-selected")
        assert not formats.query_one("#fmt-setup").has_class("-selected")


# --- started from a login shell ------------------------------------------------------------

def test_python_m_hpcwizard_runs_without_the_command_on_path(tmp_path):
    """JupyterLab's `bash -l` resets PATH: README starts it as `python3 -m hpcwizard`, which
    needs no `hpcwizard` on PATH (here: a PATH with none), from any directory."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["PATH"] = "/usr/bin:/bin"
    assert shutil.which("hpcwizard", path=env["PATH"]) is None
    proc = subprocess.run([sys.executable, "-m", "hpcwizard", "--version"], cwd=tmp_path,
                          env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("hpcwizard ") and "3.9" in proc.stdout, proc.stdout
