"""A run whose record cannot be written (a full disk) raises out of Session.run: the wizard
shows the error and, when the user quits, exits with the session's status. That status must
say the run did not end well (1), never the 0 of "nothing was run"."""
from __future__ import annotations

import contextlib

import pytest

from _tui_fixtures import FakeRunner, bare_container
from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.exit_codes import EXIT_FAILED
from hpcwizard.plan import build_plan
from hpcwizard.record import Record
from hpcwizard.session import Session


@contextlib.contextmanager
def no_lock(machine: bool = False, directory=None):
    yield


def test_a_run_that_raised_does_not_exit_0(tmp_path, monkeypatch):
    facts = bare_container()
    plan = build_plan(facts, make_choices(framework="mpi", network="tcp", mode="manual"),
                      load_catalog())
    session = Session(plan, facts, FakeRunner(), state_dir=tmp_path, lock=no_lock)
    session.begin()

    def full_disk(self, text):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Record, "log", full_disk)
    with pytest.raises(OSError):
        session.run("apply", lambda event: None)
    assert session.exit_code() == EXIT_FAILED


def _plan_and_facts():
    facts = bare_container()
    return build_plan(facts, make_choices(framework="mpi", network="tcp", mode="manual"),
                      load_catalog()), facts


def test_undo_goes_by_the_record_as_it_is_once_the_lock_is_held(tmp_path):
    """`undo --record` reads the record, asks, then takes the lock: a step another hpcwizard
    undid while the question was open is not undone again (the record is read again under
    the lock)."""
    plan, facts = _plan_and_facts()
    session = Session(plan, facts, FakeRunner(), state_dir=tmp_path, lock=no_lock)
    session.begin()
    assert session.run("apply", lambda event: None) == "done"
    path = session.record.path
    undo = Session.of_record(Record.load(path, update=True), FakeRunner(), lock=no_lock)
    # meanwhile, another hpcwizard undoes everything
    other = Record.load(path, update=True)
    for i in range(len(other.steps)):
        other.update_step(i, status="undone")
    other.set_status("undone")
    runner = undo.runner
    assert undo.run("undo", lambda event: None) == "undone"
    assert runner.ran() == []  # nothing was undone twice


def test_replacing_what_was_asked_about_refuses_what_came_since(tmp_path):
    """The wizard asks "X already exists. Replace it?" and writes with those paths only:
    a file that appeared at another of the export's names after the question is refused."""
    from hpcwizard.session import ExportExists, write_export

    plan, _facts = _plan_and_facts()
    out = tmp_path / "Dockerfile"
    out.write_text("FROM mine\n")
    with pytest.raises(ExportExists) as asked:
        write_export(plan, "dockerfile", out)
    assert asked.value.paths == (out,)
    companion = tmp_path / "hpcwizard-setup.sh"
    companion.write_text("#!/bin/sh\n# my own script\n")  # came after the question
    with pytest.raises(ExportExists) as exc:
        write_export(plan, "dockerfile", out, force=asked.value.paths)
    assert exc.value.paths == (companion,)
    assert out.read_text() == "FROM mine\n" and "my own" in companion.read_text()
    companion.unlink()
    written = write_export(plan, "dockerfile", out, force=asked.value.paths)
    assert written == [out, companion] and out.read_text().startswith("#")


def test_a_run_after_one_that_was_killed_names_that_record_and_its_undo(tmp_path):
    """A kill -9 leaves a record saying "running". The next apply finds those changes made
    and skips them, so its own undo cannot take them back: its end names the earlier record
    and the undo that can, on the console and in the wizard's log alike (one event)."""
    import io

    from hpcwizard.apply import RunFinished
    from hpcwizard.report import ConsoleSink

    plan, facts = _plan_and_facts()
    killed = Session(plan, facts, FakeRunner(), state_dir=tmp_path, lock=no_lock,
                     record_name="a-killed.toml")
    killed.begin()
    killed.record.set_status("running")  # what a kill -9 mid-step leaves
    done = Session(plan, facts, FakeRunner(), state_dir=tmp_path, lock=no_lock,
                   record_name="b-done.toml")
    done.begin()
    finished = Session(plan, facts, FakeRunner(), state_dir=tmp_path, lock=no_lock,
                       record_name="c-again.toml")
    finished.begin()
    done.run("apply", lambda event: None)  # a finished run is not named: nothing is left
    events: list = []
    out = io.StringIO()
    sink = ConsoleSink(out)

    def both(event):
        events.append(event)
        sink(event)

    assert finished.run("apply", both) == "done"
    (end,) = [e for e in events if isinstance(e, RunFinished)]
    assert end.earlier == ((str(killed.record.path), "running"),)
    text = out.getvalue()
    assert f"hpcwizard undo {killed.record.path}" in text
    assert "b-done" not in text
    assert str(killed.record.path) in finished.record.log_path.read_text()


def test_a_record_that_is_not_provably_ours_is_not_read_for_it(tmp_path):
    from hpcwizard.record import unfinished_records

    plan, facts = _plan_and_facts()
    killed = Session(plan, facts, FakeRunner(), state_dir=tmp_path, lock=no_lock,
                     record_name="a-killed.toml")
    killed.begin()
    killed.record.set_status("running")
    killed.record.path.chmod(0o666)  # anyone could have written it
    assert unfinished_records(killed.record.path.parent, tmp_path / "new.toml") == []
    killed.record.path.chmod(0o600)
    assert unfinished_records(killed.record.path.parent, tmp_path / "new.toml") == [
        (str(killed.record.path), "running")]
