"""The snapshot tests of test_tui_snapshots.py in Chinese, every screen at 80x24: wide
characters must not be cut or misalign a table. Plus F2, the language key: it switches a
screen that is up (values typed on Choose kept) and the screens shown after it.
Update after a deliberate change with:
pytest tests/test_tui_snapshots_zh.py --snapshot-update (and look at the SVGs)."""
from __future__ import annotations

import pytest

pytest.importorskip("pytest_textual_snapshot")

from textual.widgets import Input  # noqa: E402

from _tui_fixtures import FakeRunner, bare_container  # noqa: E402
from hpcwizard import i18n  # noqa: E402
from hpcwizard.choices import make_choices  # noqa: E402
from hpcwizard.plan import build_plan  # noqa: E402
from test_tui_snapshots import (CATALOG, FACTS, app_for, go_choose, go_recommend,  # noqa: E402
                                go_review, go_run, screen_is, settle, until)


@pytest.fixture(autouse=True)
def _chinese(monkeypatch):
    import hpcwizard.plan as plan

    monkeypatch.setattr(plan, "_group_name", lambda gid: "root" if gid == 0 else "alice")
    i18n.set_language("zh")
    yield
    i18n.set_language("en")


@pytest.mark.parametrize("facts", ["gpu_ib", "bare"])
def test_system_zh(snap_compare, facts):
    async def run_before(pilot):
        await until(pilot, screen_is(pilot, "SystemScreen"))
        await settle(pilot)

    assert snap_compare(app_for(facts), terminal_size=(80, 24), run_before=run_before)


@pytest.mark.parametrize("facts", ["gpu_ib", "bare"])
def test_choose_zh(snap_compare, facts):
    async def run_before(pilot):
        await go_choose(pilot, ib=facts == "gpu_ib")
        await settle(pilot)

    assert snap_compare(app_for(facts), run_before=run_before)


def test_choose_refuses_a_bad_port_zh(snap_compare):
    async def run_before(pilot):
        await go_choose(pilot)
        await pilot.click("#ssh_port")
        await pilot.press("end", "backspace", "backspace", "backspace", "backspace", *"99999")
        await pilot.press("ctrl+n")
        await settle(pilot)

    assert snap_compare(app_for("bare"), run_before=run_before)


@pytest.mark.parametrize("facts", ["gpu_ib", "bare"])
def test_recommend_zh(snap_compare, facts):
    async def run_before(pilot):
        await go_recommend(pilot, ib=facts == "gpu_ib")
        await settle(pilot)

    assert snap_compare(app_for(facts), run_before=run_before)


@pytest.mark.parametrize("facts", ["gpu_ib_sudo", "bare"])
def test_review_zh(snap_compare, facts):
    plan = build_plan(FACTS[facts](), make_choices(framework="mpi", network="tcp"), CATALOG)
    runner = FakeRunner(done=(plan.steps[1].check,))

    async def run_before(pilot):
        await go_review(pilot)
        await pilot.press("down", "down")
        await settle(pilot)

    assert snap_compare(app_for(facts, runner), run_before=run_before)


def test_review_export_dialog_zh(snap_compare):
    async def run_before(pilot):
        await go_review(pilot)
        await pilot.press("e")
        await until(pilot, screen_is(pilot, "ExportScreen"))
        await settle(pilot)

    assert snap_compare(app_for("bare"), run_before=run_before)


def test_run_finished_zh(snap_compare):
    async def run_before(pilot):
        await go_run(pilot)
        await settle(pilot)

    assert snap_compare(app_for("bare", FakeRunner(lines=2)), run_before=run_before)


def test_run_failed_with_diagnosis_zh(snap_compare):
    plan = build_plan(bare_container(), make_choices(framework="mpi", network="tcp"), CATALOG)
    runner = FakeRunner(fail=(plan.steps[2].run,), lines=2)

    async def run_before(pilot):
        await go_run(pilot, status="failed")
        await settle(pilot)

    assert snap_compare(app_for("bare", runner), run_before=run_before)


def test_done_after_run_zh(snap_compare):
    async def run_before(pilot):
        await go_run(pilot)
        await pilot.press("n")
        await until(pilot, screen_is(pilot, "DoneScreen"))
        await settle(pilot)

    assert snap_compare(app_for("bare"), run_before=run_before)


def test_done_preset_zh(snap_compare):
    async def run_before(pilot):
        await go_recommend(pilot, ib=True)
        await pilot.press("p")
        await until(pilot, screen_is(pilot, "DoneScreen"))
        await settle(pilot)

    assert snap_compare(app_for("gpu_ib"), run_before=run_before)


def test_keys_help_zh(snap_compare):
    async def run_before(pilot):
        await go_review(pilot)
        await pilot.press("question_mark")
        await until(pilot, screen_is(pilot, "KeysScreen"))
        await settle(pilot)

    assert snap_compare(app_for("bare"), run_before=run_before)


def test_f2_switches_choose_to_chinese_keeping_values(snap_compare):
    """Started in English; F2 on Choose with a typed port: Chinese, the port still there."""
    i18n.set_language("en")

    async def run_before(pilot):
        await go_choose(pilot)
        await pilot.click("#ssh_port")
        await pilot.press("end", "backspace", "backspace", "backspace", "backspace", *"2022")
        await pilot.press("f2")
        await until(pilot, lambda: i18n.get_language() == "zh")
        await pilot.pause(0.2)
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
        await pilot.pause(0.2)
        assert i18n.get_language() == "en"
        assert app.screen.plan is app.plan
        assert any(r.startswith("You are root") for r in app.plan.recommendation.reasons)
        await pilot.press("escape")  # Choose, drawn in English when shown again
        await until(pilot, screen_is(pilot, "ChooseScreen"))
        await pilot.pause(0.2)
        assert app.screen.sub_title == "2/6 Choose"
        await pilot.press("f2")
        await pilot.pause(0.2)
        assert app.screen.sub_title == "2/6 选择"
