"""F2, the language key: it switches a screen that is up (values typed on Choose kept, and
the hosts and results on Done) and the screens shown after it. (Every screen in Chinese is
in test_tui_snapshots.py.) Update after a deliberate change with:
pytest tests/test_tui_f2.py --snapshot-update (and look at the SVGs)."""
from __future__ import annotations

import pytest

pytest.importorskip("pytest_textual_snapshot")

from textual.widgets import Input  # noqa: E402

from _tui_fixtures import text_of  # noqa: E402
from hpcwizard import i18n  # noqa: E402
from test_tui_snapshots import (app_for, go_choose, go_done, go_recommend, screen_is,  # noqa: E402
                                settle, until)


@pytest.fixture(autouse=True)
def _chinese(monkeypatch):
    import hpcwizard.plan as plan

    monkeypatch.setattr(plan, "_group_name", lambda gid: "root" if gid == 0 else "alice")
    i18n.set_language("zh")
    yield
    i18n.set_language("en")


def test_f2_switches_choose_to_chinese_keeping_values(snap_compare):
    """Started in English; F2 on Choose with a typed port: Chinese, the port still there."""
    i18n.set_language("en")

    async def run_before(pilot):
        await go_choose(pilot)
        await pilot.click("#ssh_port")
        await pilot.press("end", "backspace", "backspace", "backspace", "backspace", *"2022")
        await pilot.press("f2")
        await until(pilot, lambda: pilot.app.screen.sub_title == "2/6 选择")
        assert pilot.app.screen.query_one("#ssh_port", Input).value == "2022"
        await settle(pilot)

    assert snap_compare(app_for("bare"), run_before=run_before)


def test_f2_back_and_forth_rebuilds_the_plan_texts():
    import asyncio

    asyncio.run(_f2_back_and_forth())


async def _f2_back_and_forth() -> None:
    app = app_for("bare")
    async with app.run_test(size=(80, 24)) as pilot:
        await go_recommend(pilot)
        zh_reasons = app.plan.recommendation.reasons
        assert any("root" in r and "您" in r for r in zh_reasons)
        await pilot.press("f2")
        await until(pilot, lambda: app.screen.sub_title == "3/6 Recommend")
        assert i18n.get_language() == "en"
        assert app.screen.plan is app.plan
        assert any(r.startswith("You are root") for r in app.plan.recommendation.reasons)
        await pilot.press("escape")  # Choose, drawn in English when shown again
        await until(pilot, screen_is(pilot, "ChooseScreen"))
        assert app.screen.sub_title == "2/6 Choose"
        await pilot.press("f2")
        await until(pilot, lambda: app.screen.sub_title == "2/6 选择")


def test_f2_on_done_keeps_the_hosts_and_the_results(monkeypatch):
    """F2 on Done draws it again: the hosts typed and the verification shown stay; the checks
    keep the language they were made in (Verify again makes them anew)."""
    import asyncio

    monkeypatch.setenv("HOSTS", "node1,node2")
    asyncio.run(_f2_on_done())


async def _f2_on_done() -> None:
    app = app_for("bare", peers={"node1": "ok", "node2": "down"})
    async with app.run_test(size=(80, 24)) as pilot:
        await go_done(pilot)
        done = app.screen
        assert done.sub_title == "6/6 完成"
        hosts = done.query_one("#verify-hosts", Input)
        hosts.value = "node1"  # typed, not verified yet
        before = [(c.id, c.status) for c in done.checks]
        assert ("peer/node2/port", "fail") in before
        await pilot.press("f2")
        await until(pilot, lambda: done.sub_title == "6/6 Done")
        assert app.screen is done
        assert done.query_one("#verify-hosts", Input).value == "node1"
        assert [(c.id, c.status) for c in done.checks] == before
        shown = text_of(done.query_one("#verify-results"))
        assert "1 failed" in shown and "node2" in shown
        assert done.verify_state == "ended" and app.verifying is None  # not started again



def test_f2_on_done_keeps_a_refused_host_list_refused(monkeypatch):
    """A host list refused at the field stays refused after F2: red, with the reason under it,
    and F2 pressed while the check is still pending does not lose it either."""
    import asyncio

    monkeypatch.delenv("HOSTS", raising=False)
    asyncio.run(_f2_keeps_refusal())


async def _f2_keeps_refusal() -> None:
    from textual.widgets import Static

    app = app_for("bare", peers={"node1": "ok"})
    async with app.run_test(size=(80, 24)) as pilot:
        await go_done(pilot)
        done = app.screen
        # started in Chinese: F2 to English with the check done, then back with it pending
        for pending, refusal in ((False, "unmatched bracket"), (True, "方括号不匹配")):
            done.query_one("#verify-hosts", Input).value = "node[1-"
            if not pending:
                await until(pilot, lambda: done.query_one("#verify-hosts").has_class("-invalid"))
            await pilot.press("f2")

            def refused_in_new_language(refusal=refusal) -> bool:
                field = next(done.query("#verify-hosts").results(Input), None)
                hint = next(done.query("#verify-hint").results(Static), None)
                return (field is not None and hint is not None and field.has_class("-invalid")
                        and refusal in text_of(hint))

            await until(pilot, refused_in_new_language)
            assert done.query_one("#verify-hosts", Input).value == "node[1-"

        # the check's timer firing between two drawings (field there, hint not yet) waits
        # for the new drawing's own check instead of failing
        await done.query_one("#verify-hint").remove()
        done.check_hosts_field()
        assert done.check_timer is None


def _cjk(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


def _all_drawn_in(app, lang: str) -> bool:
    from hpcwizard.screens.widgets import WizardScreen

    return i18n.get_language() == lang and all(
        s.shown_language == lang for s in app.screen_stack if isinstance(s, WizardScreen))


@pytest.mark.parametrize("via", ["preset", "review"])
def test_f2_further_on_then_back_recommend_is_all_in_the_new_language(via):
    """F2 on the preset path's Done or on Review, then back: Recommend's heading AND its
    reasons in the new language (its plan is not the one the later screen holds)."""
    import asyncio

    i18n.set_language("en")
    asyncio.run(_f2_further_on_then_back(via))


async def _f2_further_on_then_back(via: str) -> None:
    app = app_for("gpu_ib" if via == "preset" else "bare")
    async with app.run_test(size=(80, 24)) as pilot:
        await go_recommend(pilot, ib=via == "preset")
        recommend = app.screen
        assert not any(_cjk(r) for r in recommend.plan.recommendation.reasons)
        await pilot.press("p" if via == "preset" else "c")
        await until(pilot, screen_is(pilot, "DoneScreen" if via == "preset" else "ReviewScreen"))
        assert app.screen.plan is not recommend.plan
        await pilot.press("f2")
        await until(pilot, lambda: _all_drawn_in(app, "zh"), what="every screen in Chinese")
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is recommend)
        assert _cjk(recommend.sub_title)
        reasons = recommend.plan.recommendation.reasons
        assert reasons and all(_cjk(r) for r in reasons), reasons
        shown = text_of(recommend.query_one("#recommend-reasons"))
        assert all(r[:12] in shown.replace("\n", "") for r in reasons) or _cjk(shown), shown
        assert not any(r in shown for r in ("You are", "The preset image"))


def test_f2_on_the_preset_path_keeps_the_format_and_the_file_name(tmp_path, monkeypatch):
    """Setup script chosen and a file name typed on the preset path's Done; F2; then `w`
    writes the setup script to that name (not the launch script to its default)."""
    import asyncio

    monkeypatch.chdir(tmp_path)
    i18n.set_language("en")
    asyncio.run(_f2_keeps_the_export(tmp_path))


async def _f2_keeps_the_export(tmp_path) -> None:
    from textual.widgets import RadioSet

    app = app_for("gpu_ib")
    async with app.run_test(size=(80, 24)) as pilot:
        await go_recommend(pilot, ib=True)
        await pilot.press("p")
        await until(pilot, screen_is(pilot, "DoneScreen"))
        done = app.screen
        await pilot.click("#fmt-setup")
        await until(pilot, lambda: done.query_one("#export-format", RadioSet).pressed_index == 0)
        path = done.query_one("#export-path", Input)
        assert path.value == "./hpcwizard-setup.sh"  # the default followed the format
        path.value = "./mine.sh"
        await pilot.press("f2")
        await until(pilot, lambda: _all_drawn_in(app, "zh"), what="Done in Chinese")
        formats = done.query_one("#export-format", RadioSet)
        assert formats.pressed_button is not None and formats.pressed_button.id == "fmt-setup"
        assert done.query_one("#export-path", Input).value == "./mine.sh"
        await until(pilot, lambda: done.focused is not None
                    and done.focused.id == "export-write", what="Write focused")
        await pilot.press("w")
        await until(pilot, (tmp_path / "mine.sh").exists, what="the file written")
        text = (tmp_path / "mine.sh").read_text()
        assert "'hpcwizard apply'" in text.splitlines()[1]  # the setup script's header
        assert not (tmp_path / "hpcwizard-launch.sh").exists()
        assert not (tmp_path / "hpcwizard-setup.sh").exists()
