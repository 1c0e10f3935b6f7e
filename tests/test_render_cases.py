"""Every renderer as a table, tests/fixtures/render-cases.toml: a plan's inputs (the facts of
a fixture machine, who runs hpcwizard, the choices) and a format in; what the text must and
must not hold out, the fields a manifest must have, and for some rows the whole text in a
golden file (tests/golden/engines). Regenerate the golden files after an intended change with

    HPCWIZARD_UPDATE_GOLDEN=1 python -m pytest tests/test_render_cases.py

and read the diff. Tests that run what is rendered (bash with stand-ins, shellcheck,
hadolint, the CRD schemas) stay functions in the renderers' own test files."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Dict, List

import pytest

from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.export import render_export
from hpcwizard.plan import build_plan

from hpcwizard.validate import BadInput

from _core_fixtures import facts as core_facts, fake_passwd, patch_users
from _ib_fixtures import H100, PRIVILEGES, make_facts

try:
    import tomllib
except ImportError:  # Python 3.9, 3.10
    import tomli as tomllib  # type: ignore[no-redef]

HERE = Path(__file__).parent
TABLE = tomllib.loads((HERE / "fixtures" / "render-cases.toml").read_text(encoding="utf-8"))
CASES: List[Dict[str, Any]] = TABLE["case"]
EVERY = TABLE["every"]
GOLDEN = HERE / "golden" / "engines"
UPDATE = os.environ.get("HPCWIZARD_UPDATE_GOLDEN") == "1"
CATALOG = load_catalog()
GPUS = {"none": (), "h100": H100}
USERS = {"batchcom": fake_passwd("batchcom", 1001, "/home/batchcom")}


def render(case: Dict[str, Any], monkeypatch) -> str:
    choices = dict(case.get("choices", {}))
    if choices.get("user"):
        patch_users(monkeypatch, USERS[choices["user"]])
    tree, runner = case.get("facts", "debian12"), PRIVILEGES[case.get("runner", "root")]
    if case.get("machine", "ib") == "core":
        facts = core_facts(tree, runner)
    else:
        facts = make_facts(tree, runner, ib=case.get("ib", True),
                           gpus=GPUS[case.get("gpus", "none")])
    return render_export(build_plan(facts, make_choices(**choices), CATALOG), case["format"])


def field(data: Any, path: str) -> Any:
    """The value at a dotted path: a number indexes a list, [key=value] picks the list's item
    whose key has that value."""
    for part in re.findall(r"\[[^\]]*\]|[^.\[\]]+", path):
        if part.startswith("["):
            key, _, want = part[1:-1].partition("=")
            (data,) = [item for item in data if str(item.get(key)) == want]
        elif isinstance(data, list):
            data = data[int(part)]
        else:
            data = data[part]
    return data


def _check_text(name: str, text: str, case: Dict[str, Any]) -> None:
    for line in case.get("contains", []):
        assert line in text, f"{name}: {line!r} missing"
    for line in case.get("absent", []):
        assert line not in text, f"{name}: {line!r} present"
    for pattern in case.get("matches", []):
        assert re.search(pattern, text, re.M), f"{name}: nothing matches {pattern!r}"
    for pattern in case.get("absent_matches", []):
        assert not re.search(pattern, text, re.M), f"{name}: {pattern!r} matches"
    for word, want in case.get("lines", {}).items():
        got = [line for line in text.splitlines() if line.startswith(word + " ")]
        assert got == want, f"{name}: the {word} lines"


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_render_case(case, monkeypatch):
    if "refused" in case:
        with pytest.raises(BadInput, match=case["refused"]):
            render(case, monkeypatch)
        return
    text = render(case, monkeypatch)
    _check_text(case["name"], text, case)
    _check_text(case["name"], text, EVERY)
    if "fields" in case or "field_contains" in case:
        yaml = pytest.importorskip("yaml", reason="PyYAML (a test dependency) reads manifests")
        data = yaml.safe_load(text)
        for path, want in case.get("fields", {}).items():
            assert field(data, path) == want, f"{case['name']}: {path}"
        for path, parts in case.get("field_contains", {}).items():
            value = field(data, path)
            for part in parts:
                assert part in value, f"{case['name']}: {part!r} not in {path}"
    if "golden" in case:
        path = GOLDEN / case["golden"]
        if UPDATE:
            path.write_text(text, encoding="utf-8")
        assert path.exists(), f"{path} is missing: run with HPCWIZARD_UPDATE_GOLDEN=1 once"
        assert path.read_text(encoding="utf-8") == text, (
            f"{case['name']}: the export changed; if intended, regenerate with "
            "HPCWIZARD_UPDATE_GOLDEN=1 and review the diff")


def test_every_golden_file_has_its_row():
    """A golden file no row names is checked by nothing: the table names them all."""
    named = {c["golden"] for c in CASES if "golden" in c}
    assert named == {p.name for p in GOLDEN.iterdir()}


def test_the_field_paths_can_fail():
    data = {"a": [{"name": "x", "v": 1}, {"name": "y", "v": 2}]}
    assert field(data, "a[name=y].v") == 2 and field(data, "a.0.v") == 1
    with pytest.raises(ValueError):
        field(data, "a[name=z].v")
    with pytest.raises(KeyError):
        field(data, "a.0.w")
