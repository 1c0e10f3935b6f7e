"""One Step in plan and record: a plan's step saved in a record's TOML reads back equal,
with its outcome beside it; records in the formats hpcwizard wrote before load (their
fixtures under tests/fixtures/records), and a step field of the wrong kind is one line."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import tomli_w

from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.compat import tomllib
from hpcwizard.plan import build_plan
from hpcwizard.record import Record
from hpcwizard.step import RecordStep, Step, StepOutcome
from hpcwizard.validate import BadInput

from _ib_fixtures import OS_TREES, PRIVILEGES, make_facts

CATALOG = load_catalog()
RECORDS = Path(__file__).parent / "fixtures" / "records"


def through_toml(table: dict) -> dict:
    """table written as a record writes it, then read back as TOML."""
    return tomllib.loads(tomli_w.dumps({"steps": [table]}, multiline_strings=True))["steps"][0]


def plans():
    for tree in OS_TREES:
        for who, user in PRIVILEGES.items():
            for fw, net in (("mpi", "tcp"), ("pytorch", "ib")):
                choices = make_choices(framework=fw, network=net)
                facts = make_facts(tree, user)
                plan = build_plan(facts, choices, CATALOG)
                if who == "root":  # every package there: its step is found done
                    facts = make_facts(tree, user, packages={p: "1" for p in plan.packages_wanted})
                    plan = build_plan(facts, choices, CATALOG)
                yield f"{tree}-{fw}-{net}-{who}", facts, plan


PLANS = list(plans())

MADE = {
    "shell, the fewest fields": Step(id="x/y", recipe="x", title="t", as_="user", kind="shell",
                                     check="", run="true", undo=""),
    "every field": Step(
        id="ssh/sshd-config", recipe="ssh", title="Write sshd's configuration", as_="root",
        kind="block", check="test -f /etc/ssh/x", run="cat <<'EOF'\nPort 2222\n\"quoted\" \\\nEOF",
        undo="rm -f /etc/ssh/x", note="kept: \u4fdd\u7559", why="SSH between instances",
        packages=("openssh-server", "openssh-client"), satisfied=True,
        i18n={"zh": {"title": "\u5199\u5165 sshd \u914d\u7f6e", "note": "\u4fdd\u7559"}}),
    "text with TOML's own characters": Step(
        id="a/b", recipe="a", title='"""', as_="user", kind="shell", check="[ -e x ]",
        run="printf '%s\\n' ''' \"\"\" # [steps]", undo="\t", why="= \\r\n"),
}


@pytest.mark.parametrize("name", list(MADE))
def test_a_step_reads_back_equal(name):
    step = MADE[name]
    assert Step.from_toml(through_toml(step.to_toml())) == step


@pytest.mark.parametrize("case", PLANS, ids=[c[0] for c in PLANS])
def test_every_planned_step_reads_back_equal_from_a_saved_record(tmp_path, case):
    _, facts, plan = case
    assert plan.steps
    for step in plan.steps:
        assert Step.from_toml(through_toml(step.to_toml())) == step, step.id
    rec = Record.new(plan, facts, path=tmp_path / "r.toml")
    rec.save()
    back = Record.load(rec.path)
    assert [s.step for s in back.steps] == list(plan.steps)
    assert all(s.outcome == StepOutcome() for s in back.steps)


def test_the_plans_cover_translations_and_steps_found_done():
    steps = [s for _, _, plan in PLANS for s in plan.steps]
    assert any(s.satisfied for s in steps) and any(not s.satisfied for s in steps)
    assert any(s.i18n for s in steps) and any(s.packages for s in steps)


OUTCOMES = [
    StepOutcome(),
    StepOutcome("done", "2026-12-01T10:00:00+08:00", "2026-12-01T10:00:41+08:00", 0, 41.25),
    StepOutcome("failed", "t0", "t1", 100, 2.0, "Another package manager holds the lock | \u7b49\u5f85"),
    StepOutcome("interrupted", "t0", "t1", 130, 0.001),
    StepOutcome("user-skipped", exit_code=1),
]


@pytest.mark.parametrize("outcome", OUTCOMES, ids=[o.status for o in OUTCOMES])
def test_a_record_step_reads_back_equal_with_its_outcome(outcome):
    recorded = RecordStep(MADE["every field"], outcome)
    table = through_toml(recorded.to_toml())
    assert RecordStep.from_toml(table) == recorded
    assert table["status"] == outcome.status and table["exit_code"] == outcome.exit_code


def test_a_record_saves_its_steps_updates(tmp_path):
    _, facts, plan = PLANS[0]
    rec = Record.new(plan, facts, path=tmp_path / "r.toml")
    rec.update_step(0, status="failed", exit_code=2, seconds=3.5, diagnosis="why")
    back = Record.load(rec.path)
    assert back.steps[0] == RecordStep(plan.steps[0], StepOutcome(
        status="failed", exit_code=2, seconds=3.5, diagnosis="why"))
    assert back.steps[1:] == rec.steps[1:]


# --- records hpcwizard wrote in earlier formats ------------------------------------------------

# file: (status of the run, [(step id, status, exit code)] of its first three steps)
OLD_RECORDS = {
    # no [ops] library, multi-line texts on one line, no translations saved
    "first-release.toml": ("interrupted", [("packages/install", "done", 0),
                                           ("ssh/host-keys", "done", 0),
                                           ("ssh/sshd-config", "done", 0)]),
    # with its [ops] library; steps done, skipped and failed with a diagnosis
    "with-ops-library.toml": ("failed", [("packages/install", "done", 0),
                                         ("ssh/host-keys", "skipped", 0),
                                         ("ssh/sshd-config", "failed", 100)]),
}


def copy_private(name: str, tmp_path: Path) -> Path:
    """A record is loaded only when private to its user: a copy of the fixture, 0600."""
    path = tmp_path / name
    shutil.copyfile(RECORDS / name, path)
    path.chmod(0o600)
    return path


@pytest.mark.parametrize("name", list(OLD_RECORDS))
def test_an_older_record_loads_and_saves_its_steps_unchanged(tmp_path, name):
    status, first = OLD_RECORDS[name]
    path = copy_private(name, tmp_path)
    before = tomllib.loads(path.read_text())
    rec = Record.load(path, use="undo", update=True)
    assert rec.data["status"] == status
    assert [(s.step.id, s.outcome.status, s.outcome.exit_code) for s in rec.steps[:3]] == first
    assert all(s.step.as_ in ("root", "user") and s.step.run for s in rec.steps)
    if status == "failed":
        assert "package manager" in rec.steps[2].outcome.diagnosis
    rec.update_step(0, status="undone")
    after = tomllib.loads(path.read_text())
    assert after["steps"][0]["status"] == "undone"
    # every other step's table, and every other table, as it was
    assert after["steps"][1:] == before["steps"][1:]
    assert {k: v for k, v in after.items() if k not in ("steps", "updated")} == \
        {k: v for k, v in before.items() if k not in ("steps", "updated")}


def test_a_record_step_with_only_the_fields_it_runs_loads_with_defaults(tmp_path):
    rec = Record.load(copy_private("first-release.toml", tmp_path))
    data = tomllib.loads((RECORDS / "first-release.toml").read_text())
    data["steps"] = [{"id": "a/b", "status": "done", "as": "user", "run": "true", "undo": "false"}]
    path = tmp_path / "least.toml"
    path.write_text(tomli_w.dumps(data))
    path.chmod(0o600)
    (least,) = Record.load(path).steps
    assert least == RecordStep(Step(id="a/b", recipe="", title="a/b", as_="user", kind="shell",
                                    check="", run="true", undo="false"),
                               StepOutcome(status="done"))
    assert rec.steps[0].step.title == "Install 5 packages with apt"


BAD_FIELDS = [
    ("exit_code", "0", "a number"),
    ("seconds", True, "a number"),
    ("packages", ["ok", 1], "a list"),
    ("kind", 3, "text"),
    ("satisfied", "yes", "true/false"),
    ("i18n", {"zh": "\u6807\u9898"}, "a table"),
    ("diagnosis", [], "text"),
]


@pytest.mark.parametrize("key,value,want", BAD_FIELDS, ids=[b[0] for b in BAD_FIELDS])
def test_a_step_field_of_the_wrong_kind_is_one_line(tmp_path, key, value, want):
    data = tomllib.loads((RECORDS / "with-ops-library.toml").read_text())
    data["steps"][1][key] = value
    path = tmp_path / "r.toml"
    path.write_text(tomli_w.dumps(data, multiline_strings=True))
    path.chmod(0o600)
    with pytest.raises(BadInput) as exc:
        Record.load(path)
    msg = str(exc.value)
    assert "\n" not in msg and str(path) in msg
    assert f"step 2 (ssh/host-keys) {key} is" in msg and f"not {want}" in msg
