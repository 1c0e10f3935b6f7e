"""Issue 16: one way to run a plan. The same scenarios through the command line and through
the wizard give the same record, the same files with the same modes, the same lock taken
before the record is written, and the same exit status (hpcwizard.session is what both go
through)."""
from __future__ import annotations

import contextlib
import os
import stat
import sys
from pathlib import Path
from typing import Any, List

import pytest

pytest.importorskip("textual")

from _tui_fixtures import (FakeRunner, bare_container, gpu_ib, make_app, name,  # noqa: E402
                           run_until, sync, text_of, wait_for)
from hpcwizard import cli, lock, record as record_mod, session  # noqa: E402
from hpcwizard.commands import configure  # noqa: E402
from hpcwizard.record import Record  # noqa: E402


class LockSpy:
    """The real run_lock (its machine-wide file moved under tmp_path), and what was true
    when it was taken: was a record already on disk? Record.save notes whether the lock was
    held at each of the record's writes."""

    def __init__(self, tmp_path: Path, monkeypatch) -> None:
        self.taken: List[dict] = []
        self.held = 0
        self.saves_unlocked = 0
        self.records = tmp_path / "records"
        monkeypatch.setattr(lock, "MACHINE_LOCK", str(tmp_path / "machine.lock"))
        real_lock, real_save = lock.run_lock, Record.save
        spy = self

        @contextlib.contextmanager
        def spying_lock(machine: bool = False, directory: Any = None):
            spy.taken.append({"machine": machine,
                              "records_before": len(list(tmp_path.rglob("*.toml")))})
            with real_lock(machine=machine, directory=directory):
                spy.held += 1
                try:
                    yield
                finally:
                    spy.held -= 1

        def save(self_record: Record) -> None:
            # the Done screen's verification keeps its outcome in the record after the run:
            # a record write, not a change of this machine, so no run lock
            if not spy.held and sys._getframe(1).f_code.co_name != "set_verification":
                spy.saves_unlocked += 1
            real_save(self_record)

        monkeypatch.setattr(session, "run_lock", spying_lock)  # what a Session takes
        monkeypatch.setattr(Record, "save", save)


def steps_of(path: Path) -> List[tuple]:
    return [(s.step.id, s.step.as_, s.outcome.status, s.step.run, s.step.undo)
            for s in Record.load(path).steps]


def summary_of(path: Path) -> dict:
    data = Record.load(path).data
    return {"status": data["status"], "choices": data["choices"], "target": data["target"]}


async def _app_run(tmp_path: Path, facts, runner, *statuses: str) -> "tuple[int, Path]":
    app = make_app(tmp_path / "app", facts=facts, runner=runner)
    async with app.run_test(size=(100, 30)) as pilot:
        await run_until(pilot, *statuses)
        plan = app.plan
        if app.run_status == "done":  # on to Done, and quit from there
            await pilot.press("n")
            await wait_for(pilot, lambda: name(app) == "DoneScreen")
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_code is not None, what="the exit")
    return app.return_code, app.record.path, plan


def _cli_run(tmp_path: Path, plan, facts, runner) -> "tuple[int, Path]":
    path = tmp_path / "cli" / "record.toml"
    path.parent.mkdir(mode=0o700)
    code = configure._run_plan(plan, facts, str(path), yes=True, dry_run=False, runner=runner)
    return code, path


@pytest.mark.parametrize("scenario, fail, statuses, code", [
    ("every step runs", (), ("done",), 0),
    ("a step fails", ("openssh-server",), ("failed",), 1),
])
@sync
async def test_a_run_is_the_same_from_the_command_line_and_the_wizard(tmp_path, monkeypatch,
                                                                      scenario, fail,
                                                                      statuses, code):
    spy = LockSpy(tmp_path, monkeypatch)
    facts = bare_container()  # root: the steps run as root, so the machine-wide lock
    app_code, app_record, plan = await _app_run(tmp_path, facts, FakeRunner(fail=fail),
                                                *statuses)
    cli_code, cli_record = _cli_run(tmp_path, plan, facts, FakeRunner(fail=fail))
    assert app_code == cli_code == code, scenario
    assert steps_of(app_record) == steps_of(cli_record)
    assert summary_of(app_record) == summary_of(cli_record)
    assert summary_of(cli_record)["status"] == statuses[0]
    # the same lock, taken before any record was there, held at every save
    assert [t["machine"] for t in spy.taken] == [True, True]
    assert [t["records_before"] for t in spy.taken] == [0, 1]  # the app's record, then none new
    assert spy.saves_unlocked == 0
    for path in (app_record, cli_record):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


@sync
async def test_the_wizard_takes_the_lock_the_command_line_holds(tmp_path, monkeypatch):
    """A command-line apply holds the machine lock: the wizard's run stops at it, writing no
    record (before, the wizard took a different lock file, after writing its record)."""
    monkeypatch.setattr(lock, "MACHINE_LOCK", str(tmp_path / "machine.lock"))
    runner = FakeRunner()
    app = make_app(tmp_path, facts=bare_container(), runner=runner)
    async with app.run_test(size=(100, 30)) as pilot:
        from _tui_fixtures import to_review

        await to_review(pilot)
        await wait_for(pilot, lambda: all(app.screen.checked))
        with lock.run_lock(machine=True):
            await pilot.press("r")
            await wait_for(pilot, lambda: any("another hpcwizard" in str(n.message)
                                              for n in app._notifications))
        assert name(app) == "ReviewScreen" and app.record is None
    assert runner.ran() == [] and not list(tmp_path.rglob("*.toml"))


def _modes(directory: Path) -> dict:
    return {p.name: (stat.S_IMODE(p.stat().st_mode), p.read_bytes())
            for p in sorted(directory.iterdir())}


@sync
async def test_an_export_is_the_same_files_and_modes_from_both(tmp_path, monkeypatch):
    """The Dockerfile with its build context (hpcwizard-setup.sh beside it: COPY needs it),
    the same modes; a user's own file at the name is replaced only when they say so."""
    facts = gpu_ib()
    monkeypatch.setattr("hpcwizard.commands.configure.facts_here",
                        lambda sysroot, **_: facts)
    app_dir, cli_dir = tmp_path / "app-out", tmp_path / "cli-out"
    app_dir.mkdir()
    cli_dir.mkdir()
    mine = b"FROM my-own-image\n"
    for d in (app_dir, cli_dir):
        (d / "Dockerfile").write_bytes(mine)
        (d / "Dockerfile").chmod(0o640)

    app = make_app(tmp_path, facts=facts)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("enter")
        await wait_for(pilot, lambda: name(app) == "ChooseScreen")
        await pilot.press("ctrl+n")
        await wait_for(pilot, lambda: name(app) == "RecommendScreen")
        await pilot.press("enter")  # the preset
        await wait_for(pilot, lambda: name(app) == "DoneScreen")
        choices = app.plan.choices
        await pilot.click("#fmt-dockerfile")
        await wait_for(pilot, lambda: app.screen.query_one("#export-format").pressed_button.id
                       == "fmt-dockerfile")
        path = app.screen.query_one("#export-path")
        path.value = str(app_dir / "Dockerfile")
        path.focus()
        await pilot.press("enter")  # in the path field: write
        await wait_for(pilot, lambda: name(app) == "ConfirmScreen", what="the question")
        await pilot.press("escape")  # keep it
        await wait_for(pilot, lambda: name(app) == "DoneScreen")
        assert (app_dir / "Dockerfile").read_bytes() == mine
        assert sorted(p.name for p in app_dir.iterdir()) == ["Dockerfile"]
        app.screen.query_one("#export-path").focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: name(app) == "ConfirmScreen", what="the question")
        await pilot.click("#confirm-yes")
        await wait_for(pilot, lambda: "hpcwizard-setup.sh" in text_of(
            app.screen.query_one("#export-result")), what="the files written")

    argv = ["export", "--format", "dockerfile", "--framework", choices.framework,
            "--network", choices.network, "--preset", "-o", str(cli_dir / "Dockerfile")]
    assert cli.main(argv) == 2  # the user's Dockerfile: refused, nothing written
    assert _modes(cli_dir) == {"Dockerfile": (0o640, mine)}
    assert cli.main(argv + ["--force"]) == 0
    assert _modes(app_dir) == _modes(cli_dir)
    assert _modes(cli_dir)["Dockerfile"][0] == 0o644
    assert _modes(cli_dir)["hpcwizard-setup.sh"][0] == 0o755
    # exporting the same again is not "replacing a user's file": no question, no --force
    assert cli.main(argv) == 0


@sync
async def test_pytorch_gets_no_ssh_settings_from_either(tmp_path, monkeypatch):
    """What Choose had in its SSH fields before PyTorch was chosen reaches no plan: the
    wizard's PyTorch choices are the command line's (which refuses --host-keys off and
    --peers for PyTorch), and the core sets such values aside wherever they come from."""
    from hpcwizard.choices import make_choices
    from hpcwizard.export import render_export
    from textual.widgets import Input, RadioSet

    facts = bare_container()
    monkeypatch.setattr("hpcwizard.commands.configure.facts_here",
                        lambda sysroot, **_: facts)
    app = make_app(tmp_path, facts=facts)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("enter")
        await wait_for(pilot, lambda: name(app) == "ChooseScreen")
        screen = app.screen
        screen.query_one("#host_keys-off").value = True
        screen.query_one("#peers", Input).value = "gpu-*"
        screen.query_one("#ssh_port", Input).value = "2200"
        screen.query_one("#framework", RadioSet).focus()
        await pilot.press("right", "enter", "enter")  # PyTorch, then Next
        await wait_for(pilot, lambda: name(app) == "RecommendScreen")
        wizard = app.plan.choices
    args = cli.build_parser().parse_args(["plan", "--framework", "pytorch", "--network", "tcp"])
    assert wizard == configure._choices(args)
    refused = cli.build_parser().parse_args(["plan", "--framework", "pytorch", "--network",
                                             "tcp", "--host-keys", "off"])
    with pytest.raises(cli.BadInput, match="SSH is configured for MPI only"):
        configure._choices(refused)
    core = make_choices(framework="pytorch", network="tcp", host_keys="off", peers="gpu-*",
                        ssh_port="2200")
    assert core == wizard
    from hpcwizard.plan import build_plan

    plan = build_plan(facts, core, app.catalog)
    for fmt in ("setup", "launch"):
        assert "host keys are not checked" not in render_export(plan, fmt)


def test_without_sudo_the_command_line_refuses_the_run_as_the_wizard_does(tmp_path):
    """Not root and no sudo: `apply --manual` is refused before anything runs with the line
    Review shows (session.no_sudo_here), not a run that stops at its first root step."""
    from hpcwizard.catalog import load_catalog
    from hpcwizard.choices import make_choices
    from hpcwizard.plan import build_plan
    from hpcwizard.session import no_sudo_here

    facts = gpu_ib(sudo="none")
    plan = build_plan(facts, make_choices(framework="mpi", network="ib", mode="manual"),
                      load_catalog())
    runner = FakeRunner()
    with pytest.raises(cli.BadInput) as refused:
        _cli_run(tmp_path, plan, facts, runner)
    assert no_sudo_here(facts.user) in str(refused.value)
    assert runner.ran() == [] and not list(tmp_path.rglob("*.toml"))
