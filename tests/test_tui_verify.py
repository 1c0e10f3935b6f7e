"""Pilot tests of the verification on the Done screen (hpcwizard.verify through a fake
System): it starts by itself after a finished run, on this instance or on the hosts the
platform names; the failures come first with their diagnoses; the user names other hosts and
verifies again; a bad host list is refused at the field; the record keeps the outcome and
the log every check; quitting stops the commands in flight; nothing to verify after Undo
or on the preset path."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

pytest.importorskip("textual")

from textual.widgets import Input, Static  # noqa: E402

from _tui_fixtures import (FakeRunner, bare_container, gpu_ib, make_app, name,  # noqa: E402
                           run_until, sync, text_of, to_choose, wait_for)
from _verify_fixtures import FakeSystem  # noqa: E402
from hpcwizard.catalog import load_catalog  # noqa: E402
from hpcwizard.choices import make_choices  # noqa: E402
from hpcwizard.plan import build_plan  # noqa: E402
from hpcwizard.record import Record  # noqa: E402
from hpcwizard.verify import Ran  # noqa: E402


async def run_to_done(pilot) -> None:
    """System -> Choose (MPI, TCP) -> configure here -> Run -> Done, then the verification
    the Done screen starts by itself has ended."""
    await run_until(pilot, "done")
    await pilot.press("n")
    await wait_for(pilot, lambda: name(pilot.app) == "DoneScreen")
    await wait_for(pilot, lambda: pilot.app.screen.verify_state == "ended")
    await pilot.pause()


def statuses(screen) -> dict:
    return {c.id: c.status for c in screen.checks}


@sync
async def test_after_a_run_done_verifies_this_instance(tmp_path):
    system = FakeSystem({})
    app = make_app(tmp_path, verify_system=system)
    async with app.run_test(size=(80, 24)) as pilot:
        await run_to_done(pilot)
        done = app.screen
        assert statuses(done) == {"here/sshd": "pass", "here/sshd-settings": "pass",
                                  "here/ssh-settings": "pass", "here/login": "pass"}
        shown = text_of(done.query_one("#verify-results", Static))
        hint = text_of(done.query_one("#verify-hint", Static))
        assert done.query_one("#verify-hosts", Input).value == ""
    assert "Checked on: this instance only" in shown
    assert "4 passed, 0 failed, 0 skipped" in shown
    assert "sshd listens on port 2222 here" in shown
    assert "empty: this instance only" in hint
    # what ran is what `hpcwizard verify` runs: a BatchMode key login to this host
    assert any(argv[0] == "ssh" and "BatchMode=yes" in argv and "127.0.0.1" in argv
               for argv in system.calls)
    saved = Record.load(app.record.path).data["verify"]
    assert saved["ok"] is True and saved["counts"] == {"pass": 4, "fail": 0, "skip": 0}
    assert saved["hosts"] == [] and saved["failed"] == [] and saved["at"]
    log = app.record.log_path.read_text()
    assert "-- verify" in log and "PASS  key login to this host (BatchMode)" in log


@sync
async def test_platform_hosts_a_peer_down_then_verify_again(tmp_path, monkeypatch):
    monkeypatch.setenv("HOSTS", "node1,node2")
    system = FakeSystem({"node1": "ok", "node2": "down"})
    app = make_app(tmp_path, verify_system=system)
    async with app.run_test(size=(80, 24)) as pilot:
        await run_to_done(pilot)
        done = app.screen
        hosts = done.query_one("#verify-hosts", Input)
        assert hosts.value == "node1,node2"
        assert "from HOSTS" in text_of(done.query_one("#verify-hint", Static))
        first = statuses(done)
        shown = text_of(done.query_one("#verify-results", Static))
        # node1's name, port and login pass; node2's port fails, its login and mpirun skip
        assert first["peer/node1/login"] == "pass"
        assert first["peer/node2/port"] == "fail"
        assert first["peer/node2/login"] == "skip" and first["cluster/mpirun"] == "skip"
        lines = shown.splitlines()
        assert "8 passed, 1 failed, 2 skipped" in lines[1]
        assert "FAIL" in lines[2] and "node2: SSH port 2222 answers" in lines[2]  # first
        assert "ran: timeout 3 bash -c ': </dev/tcp/node2/2222'" in shown
        assert "cause: Nothing listens on the SSH port of that instance" in shown
        saved = Record.load(app.record.path).data["verify"]
        assert saved["ok"] is False and saved["failed"] == ["peer/node2/port"]
        assert saved["hosts"] == ["node1", "node2"]
        # the user drops node2 and verifies again, with the button
        system.peers = {"node1": "ok"}  # the fake's mpirun answers from every peer it knows
        hosts.value = "node1"
        await pilot.click("#verify-run")
        await wait_for(pilot, lambda: done.verify_state == "ended" and
                       "peer/node1/login" in statuses(done) and
                       "peer/node2/port" not in statuses(done))
        await pilot.pause()
        again = statuses(done)
        shown = text_of(done.query_one("#verify-results", Static))
    assert set(again.values()) == {"pass"}
    assert again["cluster/mpirun"] == "pass"
    assert "Checked on: this instance and node1" in shown
    saved = Record.load(app.record.path).data["verify"]
    assert saved["ok"] is True and saved["hosts"] == ["node1"]
    assert app.record.log_path.read_text().count("-- verify") == 2


@sync
async def test_a_bad_host_list_is_refused_at_the_field(tmp_path):
    system = FakeSystem({})
    app = make_app(tmp_path, verify_system=system)
    async with app.run_test(size=(80, 24)) as pilot:
        await run_to_done(pilot)
        done = app.screen
        calls = len(system.calls)
        before = list(done.checks)
        await pilot.click("#verify-hosts")
        await pilot.press(*"node1;reboot", "enter")
        await pilot.pause()
        hint = done.query_one("#verify-hint", Static)
        said = text_of(hint)
        assert app.focused is done.query_one("#verify-hosts", Input)
        assert done.verify_state == "ended" and done.checks == before
    assert "node1;reboot" in said and "host name" in said
    assert str(hint.content.style) == "bold red"  # an error, not the hint
    assert len(system.calls) == calls  # nothing ran


@sync
async def test_verify_key_runs_it_again_and_is_shown_in_the_keys_help(tmp_path):
    system = FakeSystem({})
    app = make_app(tmp_path, verify_system=system)
    async with app.run_test(size=(80, 24)) as pilot:
        await run_to_done(pilot)
        calls = len(system.calls)
        await pilot.press("v")  # focus is on Write: the key reaches the screen
        await wait_for(pilot, lambda: app.screen.verify_state == "ended"
                       and len(system.calls) > calls)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: name(app) == "KeysScreen")
        keys = text_of(app.screen.query_one("#keys-text", Static))
    assert len(system.calls) == 2 * calls  # the same two checks once more
    assert ["v", "Verify"] in [line.split() for line in keys.splitlines()]


class BlockingSystem(FakeSystem):
    """Its commands wait until stop(): a verification that would take long."""

    def __init__(self):
        super().__init__({})
        self.started = threading.Event()
        self.stopped = threading.Event()

    def ask(self, probe):
        self.started.set()
        self.stopped.wait(30)
        return Ran(probe.argv(), 130, "stopped")

    def stop(self):
        self.stopped.set()


@sync
async def test_quitting_during_a_verification_stops_its_commands(tmp_path):
    system = BlockingSystem()
    app = make_app(tmp_path, verify_system=system)
    async with app.run_test(size=(80, 24)) as pilot:
        await run_until(pilot, "done")
        await pilot.press("n")
        await wait_for(pilot, lambda: system.started.is_set())
        assert "Verifying… 0 checks finished" in text_of(
            app.screen.query_one("#verify-results", Static))
        await pilot.press("q")
    assert system.stopped.is_set()
    assert app.return_code == 0  # the run finished; the verification was not finished
    # killed on the way out, its checks "failed": that says nothing of the machine
    assert "verify" not in Record.load(app.record.path).data
    assert "-- verify" not in app.record.log_path.read_text()


@sync
async def test_nothing_to_verify_after_undo(tmp_path):
    plan = build_plan(bare_container(), make_choices(framework="mpi", network="tcp"),
                      load_catalog())
    runner = FakeRunner(fail=(plan.steps[2].run,))
    system = FakeSystem({})
    app = make_app(tmp_path, runner=runner, verify_system=system)
    async with app.run_test(size=(80, 24)) as pilot:
        await run_until(pilot, "failed")
        await pilot.press("u")
        await wait_for(pilot, lambda: app.run_status == "undone")
        await pilot.press("n")
        await wait_for(pilot, lambda: name(app) == "DoneScreen")
        await pilot.press("v")
        await pilot.pause()  # the key handled (it does nothing here: what is asserted)
        done = app.screen
        assert not done.query("#verify-hosts") and not done.query("#verify-results")
        assert "verify" not in [b.binding.action for b in done.active_bindings.values()
                                if b.enabled and b.node is done]
    assert system.calls == [] and "verify" not in app.record.data


@sync
async def test_the_preset_path_has_nothing_here_to_verify(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    system = FakeSystem({})
    app = make_app(tmp_path, facts=gpu_ib(sudo="none"), verify_system=system)
    async with app.run_test(size=(80, 24)) as pilot:
        await to_choose(pilot)
        await pilot.press("tab", "right", "enter", "ctrl+n")
        await wait_for(pilot, lambda: name(app) == "RecommendScreen")
        await pilot.press("p")
        await wait_for(pilot, lambda: name(app) == "DoneScreen")
        await wait_for(pilot, lambda: app.screen.query("#export-write"), what="Done composed")
        assert not app.screen.query("#verify-hosts")
    assert system.calls == []


def test_record_keeps_only_the_outcome(tmp_path):
    """Report.summary is what the record keeps: ids, counts, hosts, never command text."""
    from _core_fixtures import ROOT, facts
    from hpcwizard.hosts import Hosts
    from hpcwizard.verify import verify

    plan = build_plan(facts(user=ROOT), make_choices(framework="mpi", network="tcp"),
                      load_catalog())
    report = verify(plan, facts(user=ROOT), Hosts(("node1", "node2"), "--hosts"),
                    system=FakeSystem({"node1": "ok", "node2": "nokey"}))
    record = Record.new(plan, facts(user=ROOT), Path(tmp_path) / "r.toml")
    record.set_verification(report.summary())
    saved = Record.load(record.path).data["verify"]
    assert saved["failed"] == ["peer/node2/login"] and saved["ok"] is False
    assert set(saved) == {"ok", "counts", "hosts", "failed", "at"}
    # the command text stays out of what the record keeps of a verification
    assert "ssh" not in repr(saved)


@sync
async def test_the_exit_status_says_a_failed_verification(tmp_path, monkeypatch):
    """Quit after a run whose verification failed: 1, as `hpcwizard verify` would; once it
    passes again, 0."""
    monkeypatch.setenv("HOSTS", "node1,node2")
    system = FakeSystem({"node1": "ok", "node2": "down"})
    app = make_app(tmp_path, verify_system=system)
    async with app.run_test(size=(80, 24)) as pilot:
        await run_to_done(pilot)
        assert app.verify_ok is False
        await pilot.press("q")
    assert app.return_code == 1

    system = FakeSystem({"node1": "ok", "node2": "ok"})
    app = make_app(tmp_path / "again", verify_system=system)
    async with app.run_test(size=(80, 24)) as pilot:
        await run_to_done(pilot)
        assert app.verify_ok is True
        await pilot.press("q")
    assert app.return_code == 0


@sync
async def test_the_field_says_a_refusal_once_typing_pauses(tmp_path):
    """The hosts field asks recipes/runtime.sh when typing pauses (not at every key): the
    refusal appears under the field without enter, and nothing is verified."""
    system = FakeSystem({})
    app = make_app(tmp_path, verify_system=system)
    async with app.run_test(size=(80, 24)) as pilot:
        await run_to_done(pilot)
        done = app.screen
        calls = len(system.calls)
        hint = done.query_one("#verify-hint", Static)
        await pilot.click("#verify-hosts")
        await pilot.press(*"n{3..1}")
        await wait_for(pilot, lambda: "counts down" in text_of(hint), what="the refusal")
        assert str(hint.content.style) == "bold red"
        assert done.check_timer is None and done.verify_state == "ended"
        assert done.query_one("#verify-hosts", Input).has_class("-invalid")
        await pilot.press("backspace", "backspace", *"2},n3")  # n{3..2},n3: its range, refused
        await wait_for(pilot, lambda: "{3..2}" in text_of(hint), what="the new refusal")
        field = done.query_one("#verify-hosts", Input)
        field.value = "n{2..3}"  # readable now: the usual hint, the border no longer red
        await wait_for(pilot, lambda: "counts down" not in text_of(hint)
                       and done.check_timer is None, what="the check of the good list")
        said, red = text_of(hint), field.has_class("-invalid")
    assert len(system.calls) == calls
    assert "empty: this instance only" in said and not red


@sync
async def test_the_hint_names_the_platform_only_for_its_hosts(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node[1-2]")
    app = make_app(tmp_path, verify_system=FakeSystem({"node1": "ok", "node2": "ok"}))
    async with app.run_test(size=(80, 24)) as pilot:
        await run_to_done(pilot)
        done = app.screen
        hint = done.query_one("#verify-hint", Static)
        assert done.query_one("#verify-hosts", Input).value == "node1,node2"
        assert "from SLURM_JOB_NODELIST" in text_of(hint)
        await pilot.click("#verify-hosts")
        await pilot.press("end", "backspace")  # node1,node : typed, not the platform's
        await pilot.pause()
        typed = text_of(hint)
        await pilot.press("2")
        await pilot.pause()
        back = text_of(hint)
    assert "SLURM" not in typed and "empty: this instance only" in typed
    assert "from SLURM_JOB_NODELIST" in back
