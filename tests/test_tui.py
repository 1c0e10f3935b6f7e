"""Pilot tests of the wizard (App.run_test at 80x24) with fixture facts and a fake runner:
the headline flow (MPI + InfiniBand -> preset image -> launch script), the configure-here
flow, a failing step with its diagnosis, Retry and Undo, refusals at the field, Ctrl+C,
the keys help, Back, resize, batching of output, and the no-terminal exit."""
from __future__ import annotations

import subprocess
import sys
import threading
from typing import List

import pytest

pytest.importorskip("textual")

from textual.widgets import Input, Log, OptionList, RadioSet, Static  # noqa: E402

from _tui_fixtures import (FakeRunner, bare_container, gpu_ib, make_app, name,  # noqa: E402
                           run_until, sync, text_of, to_choose, to_review, until_handled,
                           wait_for)
from hpcwizard.apply import undo_record  # noqa: E402
from hpcwizard.catalog import load_catalog  # noqa: E402
from hpcwizard.choices import make_choices  # noqa: E402
from hpcwizard.plan import build_plan  # noqa: E402
from hpcwizard.screens.app import WizardApp  # noqa: E402
from hpcwizard.screens.messages import RunEvents  # noqa: E402

CATALOG = load_catalog()


async def choose_ib(pilot) -> None:
    await pilot.press("tab")  # framework -> network
    assert pilot.app.focused.id == "network"
    await pilot.press("right", "enter")
    pressed = pilot.app.screen.query_one("#network", RadioSet).pressed_button
    assert pressed is not None and pressed.id == "network-ib"


async def set_input(pilot, selector: str, value: str) -> None:
    await pilot.click(selector)  # the mouse works too
    widget = pilot.app.screen.query_one(selector, Input)
    assert pilot.app.focused is widget
    await pilot.press("end", *["backspace"] * len(widget.value))
    await pilot.press(*value)
    assert widget.value == value


# --- the headline flow ---------------------------------------------------------------------

@sync
async def test_headline_flow_preset_and_launch_script(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = make_app(tmp_path, facts=gpu_ib(sudo="none"))
    seen: List[str] = []
    async with app.run_test(size=(80, 24)) as pilot:
        seen.append(name(app))
        await to_choose(pilot)
        seen.append(name(app))
        assert not app.screen.query_one("#network-ib").disabled  # mlx5_0:1 is ACTIVE
        await choose_ib(pilot)
        await pilot.press("ctrl+n")
        await wait_for(pilot, lambda: name(app) == "RecommendScreen")
        seen.append(name(app))
        rec = app.plan.recommendation
        assert rec.path == "preset" and rec.preset.id == "openmpi-ib"
        head = text_of(app.screen.query_one("#recommend-head", Static))
        assert rec.preset.image in head and "Recommended: start the job from the preset" in head
        reasons = text_of(app.screen.query_one("#recommend-reasons", Static))
        assert "cannot use sudo" in reasons
        assert app.focused.id == "preset"  # the recommendation is one key away
        await pilot.press("enter")
        await wait_for(pilot, lambda: name(app) == "DoneScreen")
        seen.append(name(app))
        assert app.plan.choices.mode == "preset" and app.plan.choices.network == "ib"
        fmt = app.screen.query_one("#export-format", RadioSet).pressed_button
        assert fmt is not None and fmt.id == "fmt-launch"
        assert app.focused.id == "export-write"
        await pilot.press("enter")
        result = text_of(app.screen.query_one("#export-result", Static))
    script = tmp_path / "hpcwizard-launch.sh"
    assert seen == ["SystemScreen", "ChooseScreen", "RecommendScreen", "DoneScreen"]
    assert script.is_file() and str(script) in result.replace("\n", "")
    text = script.read_text()
    assert text.startswith("#!") and rec.preset.image in text
    assert script.stat().st_mode & 0o777 == 0o755  # session.SCRIPT_MODE, as the CLI writes it
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0


# --- configure here ------------------------------------------------------------------------

@sync
async def test_configure_here_flow(tmp_path):
    facts = bare_container()
    expected = _plan(facts, framework="mpi", network="tcp", ssh_port=2022)
    host_keys = next(s for s in expected.steps if s.id == "ssh/host-keys")
    runner = FakeRunner(done=(host_keys.check,), lines=3)
    app = make_app(tmp_path, facts=facts, runner=runner)
    seen: List[str] = []
    async with app.run_test(size=(80, 24)) as pilot:
        seen.append(name(app))
        await to_choose(pilot)
        seen.append(name(app))
        ib = app.screen.query_one("#network-ib")
        assert ib.disabled
        assert "InfiniBand unavailable: no RDMA device" in text_of(
            app.screen.query_one("#network-hint", Static))
        await set_input(pilot, "#ssh_port", "2022")
        await pilot.press("ctrl+n")
        await wait_for(pilot, lambda: name(app) == "RecommendScreen")
        seen.append(name(app))
        assert app.plan.recommendation.path == "configure"
        assert app.plan.choices.ssh_port == 2022
        await pilot.press("c")
        await wait_for(pilot, lambda: name(app) == "ReviewScreen")
        seen.append(name(app))
        review = app.screen
        await wait_for(pilot, lambda: all(review.checked))
        ids = [s.id for s in app.plan.steps]
        # the typed port is in the exact commands shown
        sshd = ids.index("ssh/sshd-config")
        steps = review.query_one("#review-steps", OptionList)
        steps.focus()
        steps.highlighted = sshd
        await pilot.pause()
        detail = review.query_one("#review-detail", Static).content
        codes = [r.code for r in detail.renderables if hasattr(r, "code")]
        assert any("2022" in c for c in codes), codes
        assert "Port 2222" not in "\n".join(codes)
        # the host-keys check passes (fake): marked as already done
        keys = ids.index("ssh/host-keys")
        assert "already done" in str(steps.get_option_at_index(keys).prompt)
        assert "already done" not in str(steps.get_option_at_index(sshd).prompt)
        await pilot.press("r")
        await wait_for(pilot, lambda: name(app) == "RunScreen")
        seen.append(name(app))
        await wait_for(pilot, lambda: app.run_status == "done")
        await pilot.pause()
        log = app.screen.query_one("#run-log", Log)
        first = app.plan.steps[sshd].run.strip().splitlines()[0][:50]
        assert f"  {first} ... 3" in log.lines
        assert any("already done" in t for t in [text_of(app.screen.query_one("#run-steps"))])
        await pilot.press("n")
        await wait_for(pilot, lambda: name(app) == "DoneScreen")
        seen.append(name(app))
        summary = text_of(app.screen.query_one("#done-summary", Static))
        record = app.record
    assert seen == ["SystemScreen", "ChooseScreen", "RecommendScreen", "ReviewScreen",
                    "RunScreen", "DoneScreen"]
    n = len(ids)
    assert f"{n - 1} done, 1 skipped" in summary and str(record.path) in summary.replace("\n", "")
    assert record.path.is_file() and record.data["choices"]["ssh_port"] == 2022
    assert record.data["status"] == "done"
    # the keys step was skipped (its check passed), every other step ran once
    assert app.plan.steps[keys].run not in runner.ran()
    assert app.plan.steps[sshd].run in runner.ran()


def _plan(facts, **choices):
    return build_plan(facts, make_choices(**choices), CATALOG)


async def _run_to_failure(tmp_path, runner, pilot, app) -> None:
    await run_until(pilot, "failed")
    assert name(app) == "RunScreen"


@sync
async def test_failing_step_shows_diagnosis_and_undo_runs_undo_texts(tmp_path):
    plan = _plan(bare_container(), framework="mpi", network="tcp")
    failing = [s.id for s in plan.steps].index("ssh/sshd-config")
    runner = FakeRunner(fail=(plan.steps[failing].run,))
    app = make_app(tmp_path, runner=runner)
    async with app.run_test(size=(80, 24)) as pilot:
        await _run_to_failure(tmp_path, runner, pilot, app)
        screen = app.screen
        diagnosis = text_of(screen.query_one("#run-diagnosis", Static))
        assert "A package is not known to this system's repositories." in diagnosis
        assert screen.query_one("#run-failure").display
        for b in ("retry", "skip", "undo", "quit"):
            assert screen.query_one(f"#{b}").display
        assert screen.status[failing] == "failed"
        assert "E: Unable to locate package openmpi-bin" in " ".join(
            screen.query_one("#run-log", Log).lines)
        before = len(runner.ran())
        await pilot.press("u")
        await wait_for(pilot, lambda: app.run_status in ("undone", "undo-failed"))
        await pilot.pause()
        undone = runner.ran()[before:]
        assert screen.status[failing] == "undone"
        steps_text = text_of(screen.query_one("#run-steps", Static))
        await pilot.press("n")
        await wait_for(pilot, lambda: name(app) == "DoneScreen")
    # newest first: the failed step's undo, then the packages' purge
    expected = [plan.steps[i].undo for i in range(failing, -1, -1) if plan.steps[i].undo]
    assert undone == expected
    assert "undone" in steps_text
    assert app.record.data["status"] == "undone"


@sync
async def test_retry_after_failure_finishes_the_run(tmp_path):
    plan = _plan(bare_container(), framework="mpi", network="tcp")
    runner = FakeRunner(fail=(plan.steps[0].run,), failures=1)
    app = make_app(tmp_path, runner=runner)
    async with app.run_test(size=(80, 24)) as pilot:
        await _run_to_failure(tmp_path, runner, pilot, app)
        assert app.screen.status[0] == "failed"
        await pilot.press("r")
        await wait_for(pilot, lambda: app.run_status == "done")
        assert runner.ran().count(plan.steps[0].run) == 2
        assert app.record.data["status"] == "done"


@sync
async def test_skip_after_failure_goes_on_and_undo_still_covers_the_step(tmp_path):
    plan = _plan(bare_container(), framework="mpi", network="tcp")
    k = next(i for i, step in enumerate(plan.steps) if step.id == "ssh/sshd-config")
    runner = FakeRunner(fail=(plan.steps[k].run,), failures=5)
    app = make_app(tmp_path, runner=runner)
    async with app.run_test(size=(80, 24)) as pilot:
        await _run_to_failure(tmp_path, runner, pilot, app)
        await pilot.press("s")
        await wait_for(pilot, lambda: app.run_status == "done")
        await pilot.pause()
        steps_shown = text_of(app.screen.query_one("#run-steps", Static))
        await pilot.press("n")
        await wait_for(pilot, lambda: name(app) == "DoneScreen")
        summary = text_of(app.screen.query_one("#done-summary", Static))
        # not "skipped" (its check passed): it failed, it may be partly done, undo covers it
        assert app.record.steps[k].outcome.status == "user-skipped"
        assert runner.ran().count(plan.steps[k].run) == 1
        before = len(runner.ran())
        undone = undo_record(app.record, runner, lambda event: None)
    shown = steps_shown.splitlines()[k]
    assert shown.startswith(f"» {k + 1}/") and shown.endswith("skipped by you")
    assert "Finished without the steps you skipped" in summary
    assert "1 skipped by you" in summary
    assert undone == "undone"
    assert plan.steps[k].undo in runner.ran()[before:]


# --- refusals at the field -------------------------------------------------------------------

@pytest.mark.parametrize("port, message", [
    ("70000", "port 70000 is out of range: give a TCP port from 1 to 65535"),
    ("22x", "is not a number"),
])
@sync
async def test_invalid_port_is_refused_at_the_field(tmp_path, port, message):
    app = make_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await to_choose(pilot)
        await set_input(pilot, "#ssh_port", port)
        hint = text_of(app.screen.query_one("#ssh_port-hint", Static))
        assert message in hint
        await pilot.press("ctrl+n")
        await pilot.pause()
        assert name(app) == "ChooseScreen" and app.plan is None
        assert app.focused.id == "ssh_port"
        await set_input(pilot, "#ssh_port", "2200")
        assert "sshd between the instances" in text_of(app.screen.query_one("#ssh_port-hint"))


@sync
async def test_unknown_user_is_refused_at_the_user_field(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await to_choose(pilot)
        await set_input(pilot, "#user", "Bad User")
        assert "user name 'Bad User' is not valid" in text_of(app.screen.query_one("#user-hint"))
        await set_input(pilot, "#user", "nosuchuser-hpcw")
        await pilot.press("ctrl+n")
        await pilot.pause()
        assert name(app) == "ChooseScreen"
        assert "does not exist on this machine" in text_of(app.screen.query_one("#user-hint"))


# --- sudo once, Ctrl+C, keys, back, resize ----------------------------------------------------

@sync
async def test_sudo_password_is_asked_once_before_the_run(tmp_path):
    asked: List[int] = []

    def sudo() -> bool:
        asked.append(1)
        return len(asked) > 1  # refused the first time, accepted the second

    app = make_app(tmp_path, facts=gpu_ib(sudo="password"), sudo=sudo, sudo_bash=lambda: True)
    async with app.run_test(size=(80, 24)) as pilot:
        await to_review(pilot)
        assert app.plan.needs_root
        await pilot.press("r")
        await wait_for(pilot, lambda: asked == [1])
        assert name(app) == "ReviewScreen" and app.record is None
        await pilot.press("r")
        await wait_for(pilot, lambda: app.run_status == "done")
    assert asked == [1, 1]


@sync
async def test_sudo_that_does_not_run_bash_is_refused_before_the_run(tmp_path):
    """As on the command line (session.sudo_once): the password opens sudo, but its rules
    must let bash run as root, else nothing runs and the wizard says why."""
    runner = FakeRunner()
    app = make_app(tmp_path, facts=gpu_ib(sudo="password"), sudo=lambda: True,
                   sudo_bash=lambda: False, runner=runner)
    async with app.run_test(size=(80, 24)) as pilot:
        await to_review(pilot)
        await pilot.press("r")
        await wait_for(pilot, lambda: any("does not let you run bash" in str(n.message)
                                          for n in app._notifications))
        assert name(app) == "ReviewScreen" and app.record is None
    assert runner.ran() == [] and not list(tmp_path.rglob("*.toml"))


class HangingRunner(FakeRunner):
    """The first run is a real `sleep` in a process group of its own (as ShellRunner runs a
    step) and lasts until that group gets a signal, as Ctrl+C delivers."""

    def __init__(self) -> None:
        super().__init__()
        self.child = None
        self.started = threading.Event()

    def run(self, as_, text, on_line):
        self.calls.append(("run", as_, text))
        self.child = subprocess.Popen(["sleep", "30"], start_new_session=True)
        on_line("working...")
        self.started.set()
        code = self.child.wait(timeout=20)
        return 130 if code < 0 else code


@sync
async def test_ctrl_c_asks_before_stopping_a_running_step(tmp_path):
    import signal

    runner = HangingRunner()
    app = make_app(tmp_path, runner=runner)
    async with app.run_test(size=(80, 24)) as pilot:
        await to_review(pilot)
        await pilot.press("r")
        await wait_for(pilot, runner.started.is_set)
        await pilot.press("ctrl+c")
        await wait_for(pilot, lambda: name(app) == "ConfirmScreen")
        await pilot.press("n")  # keep running
        await wait_for(pilot, lambda: name(app) == "RunScreen", what="the question closed")
        assert app.running and runner.child.poll() is None
        await pilot.press("ctrl+c")
        await wait_for(pilot, lambda: name(app) == "ConfirmScreen")
        await pilot.press("y")
        await wait_for(pilot, lambda: app.run_status == "interrupted")
        await pilot.pause()
        assert runner.child.returncode == -signal.SIGINT  # the step's group got SIGINT
        assert app.screen.status[0] == "interrupted"
        assert app.record.data["status"] == "interrupted"
        assert "Stopped" in text_of(app.screen.query_one("#run-diagnosis"))


@sync
async def test_question_mark_shows_the_keys_of_the_screen(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await to_choose(pilot)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: name(app) == "KeysScreen")
        keys = dict(app.screen.keys)
        assert keys.get("⏎ / n / ^n") == "Next" and keys.get("b / esc") == "Back"
        await pilot.press("escape")
        await wait_for(pilot, lambda: name(app) == "ChooseScreen")


@sync
async def test_back_works_on_every_screen_before_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = make_app(tmp_path, facts=gpu_ib(sudo="nopasswd"))
    async with app.run_test(size=(80, 24)) as pilot:
        await to_review(pilot)
        await pilot.press("e")
        await wait_for(pilot, lambda: name(app) == "ExportScreen")
        await pilot.press("escape")
        await wait_for(pilot, lambda: name(app) == "ReviewScreen")
        for expected in ("RecommendScreen", "ChooseScreen", "SystemScreen"):
            await pilot.press("escape")
            await wait_for(pilot, lambda: name(app) == expected)
        await pilot.press("escape")
        await pilot.pause()
        assert name(app) == "SystemScreen"  # nothing before System
        # taking the preset, then back from Done
        await to_choose(pilot)
        await pilot.press("ctrl+n")
        await wait_for(pilot, lambda: name(app) == "RecommendScreen")
        await pilot.press("p")
        await wait_for(pilot, lambda: name(app) == "DoneScreen")
        await pilot.press("escape")
        await wait_for(pilot, lambda: name(app) == "RecommendScreen")
    assert app.record is None  # nothing ran


@sync
async def test_export_from_review_writes_the_setup_script_without_running(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = FakeRunner()
    app = make_app(tmp_path, runner=runner)
    async with app.run_test(size=(80, 24)) as pilot:
        await to_review(pilot)
        await pilot.press("e")
        await wait_for(pilot, lambda: name(app) == "ExportScreen")
        await pilot.click("#export-write")
        await pilot.pause()
        assert "Wrote setup script" in text_of(app.screen.query_one("#export-result"))
    out = tmp_path / "hpcwizard-setup.sh"
    assert out.is_file() and "run_step" in out.read_text()
    assert runner.ran() == [] and app.record is None


@sync
async def test_survives_resize(tmp_path):
    app = make_app(tmp_path, facts=gpu_ib())
    async with app.run_test(size=(80, 24)) as pilot:
        for size in ((120, 40), (60, 18), (80, 24)):
            await pilot.resize_terminal(*size)
            await pilot.pause()
            assert app.size == size
        await to_choose(pilot)
        await pilot.resize_terminal(50, 15)
        await pilot.pause()
        await pilot.resize_terminal(80, 24)
        await choose_ib(pilot)
        await pilot.press("ctrl+n")
        await wait_for(pilot, lambda: name(app) == "RecommendScreen")


# --- workers and messages ----------------------------------------------------------------------

@sync
async def test_detection_runs_in_a_worker_while_system_is_up(tmp_path):
    release = threading.Event()

    def slow_detect():
        release.wait(10)
        return gpu_ib()

    app = WizardApp(detect=slow_detect, runner=FakeRunner(), catalog=CATALOG,
                    state_dir=tmp_path, clock=lambda: 0.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: name(app) == "SystemScreen")
        screen = app.screen
        assert "Detecting" in text_of(screen.query_one("#system-status"))
        assert screen.query_one("#next").disabled
        await pilot.press("enter")
        assert name(app) == "SystemScreen"  # nothing to choose from yet
        release.set()
        await wait_for(pilot, lambda: app.facts is not None)
        await pilot.pause()
        assert "mlx5_0:1" in text_of(screen.query_one("#system-facts"))
        assert not screen.query_one("#next").disabled


@sync
async def test_output_lines_arrive_batched(tmp_path):
    lines_per_step = 400
    runner = FakeRunner(lines=lines_per_step)
    batches: List[int] = []

    def hook(message) -> None:
        if isinstance(message, RunEvents):
            batches.append(len(message.events))

    app = make_app(tmp_path, runner=runner)
    async with app.run_test(size=(80, 24), message_hook=hook) as pilot:
        await to_review(pilot)
        await pilot.press("r")
        await wait_for(pilot, lambda: app.run_status == "done")
        await pilot.pause()
        log_lines = app.screen.query_one("#run-log", Log).lines
    steps = len(app.plan.steps)
    total_events = sum(batches)
    assert total_events >= steps * lines_per_step
    assert len(batches) < total_events / 20  # many lines per message, never one per line
    assert sum(1 for line in log_lines if line.endswith(f"... {lines_per_step}")) == steps


def test_without_a_terminal_prints_one_line_and_exits_2():
    proc = subprocess.run([sys.executable, "-m", "hpcwizard"], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
    assert proc.returncode == 2
    out = (proc.stdout + proc.stderr).strip().splitlines()
    assert len(out) == 1 and "hpcwizard" in out[0] and "--help" in out[0]


# --- red-team (JupyterLab terminal): PyTorch's SSH fields, the Next key, Instances' hint -------

@sync
async def test_pytorch_greys_out_the_ssh_fields_and_hands_the_core_none(tmp_path):
    """PyTorch gets no SSH settings (the command line refuses --host-keys off, --peers for it):
    Choose greys them out, and what was set there before reaches neither the plan nor a file."""
    from hpcwizard.export import render_export

    app = make_app(tmp_path, facts=bare_container())
    async with app.run_test(size=(80, 24)) as pilot:
        await to_choose(pilot)
        screen = app.screen
        await pilot.press("tab", "tab")  # framework -> network -> job user
        await pilot.press("tab", "tab")  # ssh port -> host keys
        assert app.focused.id == "host_keys"
        await pilot.press("right", "enter")  # off
        assert screen.query_one("#host_keys", RadioSet).pressed_button.id == "host_keys-off"
        await set_input(pilot, "#peers", "gpu-*")
        screen.query_one("#framework", RadioSet).focus()
        await pilot.press("right", "enter")  # PyTorch
        await wait_for(pilot, lambda: screen.query_one("#ssh_port").disabled)
        assert all(screen.query_one(f"#{n}").disabled for n in ("host_keys", "peers"))
        assert "MPI only" in text_of(screen.query_one("#ssh_port-hint", Static))
        await pilot.press("enter")  # PyTorch is picked: Enter goes on
        await wait_for(pilot, lambda: name(app) == "RecommendScreen")
        c = app.plan.choices
        assert (c.framework, c.host_keys, c.peers, c.ssh_port) == ("pytorch", "pinned", "", 2222)
        assert "SSH port" not in text_of(app.screen.query_one("#recommend-head", Static))
        for fmt in ("setup", "launch"):
            text = render_export(app.plan, fmt)
            assert "host keys are not checked" not in text and "gpu-*" not in text
        await pilot.press("b")
        await wait_for(pilot, lambda: name(app) == "ChooseScreen")
        app.screen.query_one("#framework", RadioSet).focus()
        await pilot.press("left", "enter")  # MPI again: the fields are back, as they were
        await wait_for(pilot, lambda: not app.screen.query_one("#peers").disabled)
        assert app.screen.query_one("#peers", Input).value == "gpu-*"


@sync
async def test_next_is_enter_or_n_a_browser_delivers_and_ctrl_n_still_works(tmp_path):
    """A desktop browser keeps Ctrl+N (a new window): Choose goes Next on Enter (on a choice
    once it is picked, in a field) and n; the footer, the button and `?` say so."""
    from textual.widgets import Button

    for keys in (("enter",), ("n",), ("ctrl+n",), ("tab", "tab", "enter")):
        app = make_app(tmp_path, facts=bare_container())
        async with app.run_test(size=(80, 24)) as pilot:
            await to_choose(pilot)
            assert "⏎" in str(app.screen.query_one("#next", Button).label)
            assert "ctrl+n" not in str(app.screen.query_one("#next", Button).label)
            await pilot.press(*keys)
            await wait_for(pilot, lambda: name(app) == "RecommendScreen", what=str(keys))
    app = make_app(tmp_path, facts=bare_container())
    async with app.run_test(size=(80, 24)) as pilot:
        await to_choose(pilot)
        await pilot.press("tab", "right", "space")  # Space picks; Enter would too
        await wait_for(pilot, lambda: app.screen.query_one("#network", RadioSet)
                       .pressed_button is not None)
        await set_input(pilot, "#user", "nob")  # n in a field is the letter, not Next
        assert name(app) == "ChooseScreen"
        await pilot.press("f1")  # ? would be typed into the field
        await wait_for(pilot, lambda: name(app) == "KeysScreen")
        keys = text_of(app.screen.query_one("#keys-text", Static))
        line = next(ln for ln in keys.splitlines() if ln.strip().endswith(" Next")
                    and "Focus" not in ln)
        assert line.split()[:5] == ["⏎", "/", "n", "/", "^n"], keys


@sync
async def test_the_instances_hint_describes_the_value_in_the_field(tmp_path, monkeypatch):
    """The hint under Instances follows the value: the derived `*` warning goes once the user
    names the instances, and comes back for a `*` typed by hand."""
    import socket

    monkeypatch.setattr(socket, "gethostname", lambda: "localhost")
    for var in ("HPCWIZARD_PEERS", "VC_WORKER_HOSTS", "PET_NNODES"):
        monkeypatch.delenv(var, raising=False)
    facts = bare_container()
    app = make_app(tmp_path, facts=facts)
    async with app.run_test(size=(80, 24)) as pilot:
        await to_choose(pilot)
        hint = app.screen.query_one("#peers-hint", Static)
        start = text_of(hint)
        await set_input(pilot, "#peers", "job-worker-*")
        await wait_for(pilot, lambda: text_of(hint) != start)
        assert "every host" not in text_of(hint) and "from" not in text_of(hint)
        assert not hint.has_class("warn")
        await set_input(pilot, "#peers", "*")
        await wait_for(pilot, lambda: "every host" in text_of(hint))
        assert hint.has_class("warn")


@sync
async def test_dialogs_show_whole_labels_their_own_keys_and_scroll_when_short(tmp_path):
    """The Export dialog's format labels are whole from 72 columns up (three to a row cut
    them at 91); each dialog has its own footer, which offers neither ? nor F2 (they do
    nothing there); at 60x12 the Keys dialog scrolls to its Close."""
    from textual.widgets import Button, RadioButton
    from textual.widgets._footer import FooterKey

    from hpcwizard import i18n
    from hpcwizard.screens.widgets import FORMAT_LABELS

    for lang in ("en", "zh"):
        for size in ((91, 29), (80, 24), (60, 12)):
            i18n.set_language(lang)
            app = make_app(tmp_path, facts=gpu_ib(sudo="nopasswd"))
            try:
                async with app.run_test(size=size) as pilot:
                    await to_review(pilot)
                    await pilot.press("e")
                    await wait_for(pilot, lambda: name(app) == "ExportScreen")
                    await until_handled(pilot)
                    shown = [b.render_line(0).text for b in app.screen.query(RadioButton)]
                    for label in FORMAT_LABELS.values():
                        assert any(i18n._(label) in s for s in shown), (size, lang, shown)
                    keys = {k.key for k in app.screen.query(FooterKey)}
                    assert "escape" in keys and not keys & {"f2", "question_mark"}, keys
                    await pilot.press("escape")
                    await wait_for(pilot, lambda: name(app) == "ReviewScreen")
                    await pilot.press("question_mark")
                    await wait_for(pilot, lambda: name(app) == "KeysScreen")
                    close = app.screen.query_one("#keys-close", Button)
                    close.focus()
                    await until_handled(pilot)
                    assert app.screen.region.contains_region(close.region), size
                    await pilot.press("enter")
                    await wait_for(pilot, lambda: name(app) == "ReviewScreen")
            finally:
                i18n.set_language("en")


@sync
async def test_the_export_result_is_scrolled_into_view_on_a_short_terminal(tmp_path,
                                                                         monkeypatch):
    """62x16 (a JupyterLab panel), the preset screen: after w the "Wrote launch script" line
    is on screen, not below the eight formats."""
    monkeypatch.chdir(tmp_path)
    app = make_app(tmp_path, facts=gpu_ib())
    async with app.run_test(size=(62, 16)) as pilot:
        await to_choose(pilot)
        await choose_ib(pilot)
        await pilot.press("enter")
        await wait_for(pilot, lambda: name(app) == "RecommendScreen")
        await pilot.press("p")
        await wait_for(pilot, lambda: name(app) == "DoneScreen")
        result = app.screen.query_one("#export-result", Static)
        await pilot.press("w")
        await wait_for(pilot, lambda: "Wrote launch script" in text_of(result))
        body = app.screen.query_one("#done-body")
        await wait_for(pilot, lambda: body.region.contains_region(result.region)
                       and result.region.height > 0, what="the result in view")
    assert (tmp_path / "hpcwizard-launch.sh").is_file()


@sync
async def test_review_says_the_root_steps_cannot_run_without_sudo_and_run_refuses(tmp_path):
    """alice, not root, no sudo: Review says before Run that the (root) steps cannot run for
    her, and Run is one clear line, not a run that stops at step 1 (session.preflight, as
    `hpcwizard apply` refuses it)."""
    runner = FakeRunner()
    app = make_app(tmp_path, facts=gpu_ib(sudo="none"), runner=runner)
    async with app.run_test(size=(100, 30)) as pilot:
        await to_choose(pilot)
        await pilot.press("enter")
        await wait_for(pilot, lambda: name(app) == "RecommendScreen")
        await pilot.press("c")
        await wait_for(pilot, lambda: name(app) == "ReviewScreen")
        await wait_for(pilot, lambda: all(app.screen.checked))
        summary = text_of(app.screen.query_one("#review-summary", Static))
        assert "cannot run for you" in summary and "no sudo" in summary
        await pilot.press("r")
        await wait_for(pilot, lambda: any("cannot run for you" in str(n.message)
                                          for n in app._notifications))
        assert name(app) == "ReviewScreen" and app.record is None
    assert runner.ran() == []


@sync
async def test_q_asks_before_quitting_where_nothing_has_run(tmp_path):
    """q on System and on the preset screen asks, as Ctrl+C and Ctrl+Q do (it quit at once)."""
    app = make_app(tmp_path, facts=gpu_ib())
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: name(app) == "SystemScreen" and app.screen.ready)
        await pilot.press("q")
        await wait_for(pilot, lambda: name(app) == "ConfirmScreen")
        await pilot.press("n")
        await wait_for(pilot, lambda: name(app) == "SystemScreen")
        await to_choose(pilot)
        await choose_ib(pilot)
        await pilot.press("enter")
        await wait_for(pilot, lambda: name(app) == "RecommendScreen")
        await pilot.press("p")
        await wait_for(pilot, lambda: name(app) == "DoneScreen")
        await pilot.press("q")
        await wait_for(pilot, lambda: name(app) == "ConfirmScreen")
        assert app.return_code is None
        await pilot.press("y")
        await wait_for(pilot, lambda: app.return_code is not None)
    assert app.return_code == 0
