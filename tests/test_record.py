"""The TOML record of a run: round trip, private mode, and a one-line BadInput for every
kind of unreadable record."""
from __future__ import annotations

import stat

import pytest
import tomli_w

from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.compat import tomllib
from hpcwizard.plan import build_plan
from hpcwizard.record import SCHEMA, Record
from hpcwizard.validate import BadInput

from _core_fixtures import ALICE, ROOT, facts, fake_passwd, patch_users

CATALOG = load_catalog()


def make(tmp_path, os_key="debian12", who=ROOT, name="r.toml", **choices):
    f = facts(os_key, who)
    plan = build_plan(f, make_choices(**choices), CATALOG)
    return plan, Record.new(plan, f, path=tmp_path / name)


def load_error(path) -> str:
    with pytest.raises(BadInput) as exc:
        Record.load(path)
    msg = str(exc.value)
    assert msg and "\n" not in msg, f"not one line: {msg!r}"
    assert str(path) in msg
    return msg


def test_round_trip(tmp_path):
    plan, rec = make(tmp_path)
    rec.save()
    back = Record.load(rec.path)
    assert back.data == rec.data
    assert back.data["schema"] == SCHEMA
    assert back.data["status"] == "pending"
    assert [s.step for s in back.steps] == list(plan.steps)
    for saved in back.steps:
        assert saved.outcome.status == "pending" and saved.outcome.exit_code == -1
    assert back.data["choices"] == plan.choices.to_dict()
    assert back.data["target"]["user"] == "root"
    assert back.data["facts"]["package_manager"] == "apt"
    assert back.log_path == rec.path.with_suffix(".log")


def test_updates_are_on_disk_at_once(tmp_path):
    _, rec = make(tmp_path)
    rec.update_step(1, status="done", exit_code=0, seconds=1.5)
    rec.set_status("running")
    back = Record.load(rec.path)
    assert back.data["status"] == "running"
    assert back.steps[1].outcome.status == "done" and back.steps[1].outcome.seconds == 1.5
    assert back.steps[0].outcome.status == "pending"
    assert "updated" in back.data


def test_record_and_log_are_private(tmp_path):
    _, rec = make(tmp_path / "deep" / "dir")
    rec.save()
    assert stat.S_IMODE(rec.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(rec.path.parent.stat().st_mode) == 0o700
    rec.log("a line")
    rec.log("another\n")
    assert stat.S_IMODE(rec.log_path.stat().st_mode) == 0o600
    assert rec.log_path.read_text() == "a line\nanother\n"
    rec.save()  # rewriting keeps the mode and leaves no temporary file behind
    assert stat.S_IMODE(rec.path.stat().st_mode) == 0o600
    assert sorted(p.name for p in rec.path.parent.iterdir()) == ["r.log", "r.toml"]


def test_default_path_is_in_the_state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HPCWIZARD_STATE_DIR", str(tmp_path / "state"))
    f = facts("debian12", ROOT)
    plan = build_plan(f, make_choices(), CATALOG)
    rec = Record.new(plan, f)
    assert rec.path.parent == tmp_path / "state" / "records"
    assert rec.path.name.endswith("-mpi-tcp.toml")


def test_missing_record(tmp_path):
    msg = load_error(tmp_path / "nope.toml")
    assert "does not exist" in msg


@pytest.mark.parametrize("content", [b"this is { not toml\n", b"\x00\xff\xfe binary",
                                     b"[steps\nid = 1\n"])
def test_not_toml(tmp_path, content):
    path = tmp_path / "bad.toml"
    path.write_bytes(content)
    assert "not a valid TOML file" in load_error(path)


def test_toml_but_not_a_record(tmp_path):
    path = tmp_path / "other.toml"
    path.write_text('title = "something else"\n')
    assert "no schema" in load_error(path)


def test_newer_schema(tmp_path):
    _, rec = make(tmp_path)
    rec.data["schema"] = 99
    rec.save()
    msg = load_error(rec.path)
    assert "schema 99" in msg and "upgrade" in msg


def _cut_points(text: str):
    """Where a crash could cut a record that was not written atomically: inside the header,
    just before the steps, inside a step's run text."""
    yield "header", text.index("\n", text.index("status")) + 1
    yield "before-steps", text.index("[[steps]]")
    run_at = text.index('run = "', text.index("[[steps]]"))
    yield "inside-run", run_at + len('run = "') + 5


@pytest.mark.parametrize("where", ["header", "before-steps", "inside-run"])
def test_truncated_record(tmp_path, where):
    _, rec = make(tmp_path)
    rec.save()
    text = rec.path.read_text()
    cut = dict(_cut_points(text))[where]
    rec.path.write_text(text[:cut])
    msg = load_error(rec.path)
    assert "incomplete" in msg or "not a valid TOML file" in msg


def test_record_with_a_step_missing_its_run(tmp_path):
    _, rec = make(tmp_path)
    rec.save()
    data = tomllib.loads(rec.path.read_text())
    del data["steps"][2]["run"]
    rec.path.write_text(tomli_w.dumps(data))
    assert "incomplete" in load_error(rec.path)


def test_no_private_key_in_any_record(tmp_path, monkeypatch):
    patch_users(monkeypatch, fake_passwd("bob", 1001, "/home/bob"))
    cases = [("debian12", ROOT, {}), ("rocky9", ROOT, {"user": "bob"}),
             ("centos7", ALICE["nopasswd"], {"host_keys": "off"}),
             ("ubuntu2204", ALICE["none"], {})]
    for i, (os_key, who, choices) in enumerate(cases):
        plan, rec = make(tmp_path, os_key, who, name=f"r{i}.toml", **choices)
        kinds = {s.kind for s in plan.steps}
        assert "block" in kinds
        rec.save()
        raw = rec.path.read_bytes()
        assert b"PRIVATE KEY" not in raw
        assert b"BEGIN OPENSSH" not in raw
        # the record is plain TOML with the exact commands in it
        data = tomllib.loads(raw.decode())
        assert any(s["run"].startswith("hw_ssh_key ") for s in data["steps"])
