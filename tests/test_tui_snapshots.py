"""Snapshot tests (pytest-textual-snapshot, Textual pinned in pyproject) of every screen at
80x24, and of System at 120x40, with fixture facts of a GPU+IB machine and a bare container,
each in English and in Chinese (wide characters must not be cut or misalign a table).
Deterministic: frozen clock for the elapsed time, a fixed record path, no blinking cursor,
a fake System under the Done screen's verification.
Update after a deliberate change with: pytest tests/test_tui_snapshots.py --snapshot-update
and look at the SVGs in tests/__snapshots__/."""
from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

pytest.importorskip("pytest_textual_snapshot")

from textual.widgets import Input  # noqa: E402

from _tui_fixtures import WAIT_TIMEOUT, FakeRunner, bare_container, gpu_ib, wait_for  # noqa: E402
from _verify_fixtures import FakeSystem  # noqa: E402
from hpcwizard import i18n  # noqa: E402
from hpcwizard.catalog import load_catalog  # noqa: E402
from hpcwizard.choices import make_choices  # noqa: E402
from hpcwizard.plan import build_plan  # noqa: E402
from hpcwizard.screens.app import WizardApp  # noqa: E402

CATALOG = load_catalog()
STATE = Path("/tmp/hpcwizard-snapshots")  # shown on Run and Done: must not vary
FACTS = {"gpu_ib": lambda: gpu_ib(sudo="none"), "gpu_ib_sudo": lambda: gpu_ib(sudo="nopasswd"),
         "bare": bare_container}


@pytest.fixture(autouse=True)
def _fixed_group(monkeypatch):
    """alice's group name comes from this machine's /etc/group: fix it."""
    import hpcwizard.plan as plan

    monkeypatch.setattr(plan, "_group_name", lambda gid: "root" if gid == 0 else "alice")


@pytest.fixture(autouse=True)
def _fresh_record_path():
    """A record is never written over one that is there (the wizard would pick
    snapshot-2.toml, and the path is on screen), and a run's end names the earlier records
    that did not finish: every test starts with no records (the directory is the tests' own)."""
    shutil.rmtree(STATE / "records", ignore_errors=True)
    yield


@pytest.fixture(autouse=True, params=["en", "zh"])
def lang(request):
    i18n.set_language(request.param)
    yield request.param
    i18n.set_language("en")


def app_for(facts_key: str, runner=None, peers=None) -> WizardApp:
    """peers: the Done screen's verification sees these (name -> state, see FakeSystem)."""
    return WizardApp(facts=FACTS[facts_key](), runner=runner or FakeRunner(), catalog=CATALOG,
                     state_dir=STATE, clock=lambda: 0.0, record_name="snapshot.toml",
                     verify_system=FakeSystem(peers or {}))


until = wait_for  # the name these tests (and test_tui_f2.py) use


async def settle(pilot, timeout: float = WAIT_TIMEOUT) -> None:
    """Until the screen stops changing: layout, scrolling and scrollbars catch up with the
    last update at the machine's own pace (a loaded CI machine is slow), so the snapshot
    waits for the state, not for a fixed time."""
    for widget in pilot.app.screen.query(Input):
        widget.cursor_blink = False
    end = time.monotonic() + timeout
    last, same = None, 0
    while same < 3:
        await pilot.wait_for_scheduled_animations()
        await pilot.pause()
        shot = pilot.app.export_screenshot()
        same = same + 1 if shot == last else 0
        last = shot
        assert time.monotonic() < end, "the screen never settled"


def screen_is(pilot, name: str):
    return lambda: type(pilot.app.screen).__name__ == name


async def go_choose(pilot, ib: bool = False) -> None:
    await until(pilot, screen_is(pilot, "SystemScreen"))
    await pilot.press("enter")
    await until(pilot, screen_is(pilot, "ChooseScreen"))
    if ib:
        await pilot.press("tab", "right", "enter")


async def go_recommend(pilot, ib: bool = False) -> None:
    await go_choose(pilot, ib)
    await pilot.press("ctrl+n")
    await until(pilot, screen_is(pilot, "RecommendScreen"))


async def go_review(pilot, ib: bool = False) -> None:
    await go_recommend(pilot, ib)
    await pilot.press("c")
    await until(pilot, screen_is(pilot, "ReviewScreen"))
    await until(pilot, lambda: all(pilot.app.screen.checked))


async def go_run(pilot, ib: bool = False, status: str = "done") -> None:
    await go_review(pilot, ib)
    await pilot.press("r")
    await until(pilot, lambda: pilot.app.run_status == status)


@pytest.mark.parametrize("facts", ["gpu_ib", "bare"])
@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_system(snap_compare, facts, size):
    async def run_before(pilot):
        await until(pilot, screen_is(pilot, "SystemScreen"))
        await settle(pilot)

    assert snap_compare(app_for(facts), terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("facts", ["gpu_ib", "bare"])
def test_choose(snap_compare, facts):
    async def run_before(pilot):
        await go_choose(pilot, ib=facts == "gpu_ib")
        await settle(pilot)

    assert snap_compare(app_for(facts), run_before=run_before)


def test_choose_refuses_a_bad_port(snap_compare):
    async def run_before(pilot):
        await go_choose(pilot)
        await pilot.click("#ssh_port")
        await pilot.press("end", "backspace", "backspace", "backspace", "backspace", *"99999")
        await pilot.press("ctrl+n")
        await settle(pilot)

    assert snap_compare(app_for("bare"), run_before=run_before)


@pytest.mark.parametrize("facts", ["gpu_ib", "bare"])
def test_recommend(snap_compare, facts):
    async def run_before(pilot):
        await go_recommend(pilot, ib=facts == "gpu_ib")
        await settle(pilot)

    assert snap_compare(app_for(facts), run_before=run_before)


@pytest.mark.parametrize("facts", ["gpu_ib_sudo", "bare"])
def test_review(snap_compare, facts):
    plan = build_plan(FACTS[facts](), make_choices(framework="mpi", network="tcp"), CATALOG)
    runner = FakeRunner(done=(plan.steps[1].check,))

    async def run_before(pilot):
        await go_review(pilot)
        await pilot.press("down", "down")  # a step with undo text and a note
        await settle(pilot)

    assert snap_compare(app_for(facts, runner), run_before=run_before)


def test_review_export_dialog(snap_compare):
    async def run_before(pilot):
        await go_review(pilot)
        await pilot.press("e")
        await until(pilot, screen_is(pilot, "ExportScreen"))
        await settle(pilot)

    assert snap_compare(app_for("bare"), run_before=run_before)


def test_run_finished(snap_compare):
    async def run_before(pilot):
        await go_run(pilot)
        await settle(pilot)

    assert snap_compare(app_for("bare", FakeRunner(lines=2)), run_before=run_before)


def test_run_failed_with_diagnosis(snap_compare):
    plan = build_plan(bare_container(), make_choices(framework="mpi", network="tcp"), CATALOG)
    runner = FakeRunner(fail=(plan.steps[2].run,), lines=2)

    async def run_before(pilot):
        await go_run(pilot, status="failed")
        await settle(pilot)

    assert snap_compare(app_for("bare", runner), run_before=run_before)


async def go_done(pilot) -> None:
    await go_run(pilot)
    await pilot.press("n")
    await until(pilot, screen_is(pilot, "DoneScreen"))
    await until(pilot, lambda: pilot.app.screen.verify_state == "ended")


def test_done_after_run(snap_compare):
    async def run_before(pilot):
        await go_done(pilot)
        await settle(pilot)

    assert snap_compare(app_for("bare"), run_before=run_before)


def test_done_verify_finds_a_peer_down(snap_compare, monkeypatch):
    """The platform names two hosts; sshd does not answer on the second: the failure and its
    diagnosis come first."""
    monkeypatch.setenv("HOSTS", "node1,node2")

    async def run_before(pilot):
        await go_done(pilot)
        await settle(pilot)

    assert snap_compare(app_for("bare", peers={"node1": "ok", "node2": "down"}),
                        run_before=run_before)


def test_done_preset(snap_compare):
    async def run_before(pilot):
        await go_recommend(pilot, ib=True)
        await pilot.press("p")
        await until(pilot, screen_is(pilot, "DoneScreen"))
        await settle(pilot)

    assert snap_compare(app_for("gpu_ib"), run_before=run_before)


def test_keys_help(snap_compare):
    async def run_before(pilot):
        await go_review(pilot)
        await pilot.press("question_mark")
        await until(pilot, screen_is(pilot, "KeysScreen"))
        await settle(pilot)

    assert snap_compare(app_for("bare"), run_before=run_before)


# --- the smallest terminal: 60x12 (a JupyterLab terminal in a side panel) ------------------

SMALL = (60, 12)


def _fits(pilot) -> None:
    """Usable: the footer on the last row, the screen's buttons (its bottom row; the body's
    scroll into view) inside the screen, whole."""
    from textual.widgets import Button, Footer

    screen = pilot.app.screen
    width, height = SMALL
    assert screen.query_one(Footer).region.y == height - 1
    for button in screen.query(".buttons Button").results(Button):
        if button.display:
            r = button.region
            assert r.x >= 0 and r.right <= width and r.bottom <= height - 1, (button.id, r)
            assert r.width >= len(str(button.label)) or i18n.get_language() == "zh", button.id


async def _walk_small(pilot, where: str) -> None:
    if where == "system":
        await until(pilot, screen_is(pilot, "SystemScreen"))
        await until(pilot, lambda: pilot.app.screen.ready)
    elif where == "choose":
        await go_choose(pilot)
    elif where == "recommend":
        await go_recommend(pilot)
    elif where == "preset":
        await go_recommend(pilot, ib=True)
        await pilot.press("p")
        await until(pilot, screen_is(pilot, "DoneScreen"))
    elif where == "review":
        await go_review(pilot)
    elif where == "run":
        await go_run(pilot)
    elif where == "done":
        await go_done(pilot)
    await settle(pilot)
    _fits(pilot)
    screen = pilot.app.screen
    if where == "preset":  # opens at the top: the image to start from is in view
        body = screen.query_one("#done-body")
        assert body.scroll_y == 0
        summary = screen.query_one("#done-summary")
        assert summary.region.y < SMALL[1] - 1 and summary.region.y >= 1
    if where == "run":  # the log and Continue keep rows of their own
        assert screen.query_one("#run-log").region.height >= 2
        assert screen.query_one("#continue").region.height == 1
    if where == "review":  # the detail of the step keeps rows beside the list
        assert screen.query_one("#review-detail-box").region.height >= 3


@pytest.mark.parametrize("where", ["system", "choose", "recommend", "preset", "review", "run",
                                   "done"])
def test_every_screen_at_60x12(snap_compare, where):
    async def run_before(pilot):
        await _walk_small(pilot, where)

    app = app_for("gpu_ib" if where == "preset" else "bare")
    assert snap_compare(app, terminal_size=SMALL, run_before=run_before)


def test_preset_at_62x16_shows_whole_labels(snap_compare):
    """Where JupyterLab showed "Configure here (c)" cut and the format as "Launch"."""
    async def run_before(pilot):
        await go_recommend(pilot, ib=True)
        from textual.widgets import Button

        configure = pilot.app.screen.query_one("#configure", Button)
        assert configure.region.right <= 62 and configure.region.width >= len(
            str(configure.label))
        await pilot.press("p")
        await until(pilot, screen_is(pilot, "DoneScreen"))
        await settle(pilot)
        launch = pilot.app.screen.query_one("#fmt-launch")
        assert launch.region.right <= 62 and launch.region.width >= len(str(launch.label)) + 4

    assert snap_compare(app_for("gpu_ib"), terminal_size=(62, 16), run_before=run_before)
