"""Recipe loading and validation: the shipped catalog loads, and every mistake in a recipe is
a RecipeError naming the file and the step, found at load time."""
from __future__ import annotations

import textwrap

import pytest

from hpcwizard.catalog import KINDS, RecipeError, load_catalog
from hpcwizard.vocab import PLACEHOLDERS, conditions

HEAD = '''
id = "demo"
title = "Demo"
why = "Because tests need one."
frameworks = ["mpi"]
'''

GOOD_STEP = '''
[[steps]]
id = "good"
title = "A good step"
check = "true"
run = "true"
undo = "true"
'''


def write(tmp_path, body: str, name: str = "demo.toml"):
    (tmp_path / name).write_text(textwrap.dedent(HEAD) + textwrap.dedent(body))
    return tmp_path


def load_error(tmp_path, body: str, name: str = "demo.toml") -> str:
    write(tmp_path, body, name)
    with pytest.raises(RecipeError) as exc:
        load_catalog(tmp_path)
    return str(exc.value)


# --- the shipped catalog ----------------------------------------------------------------

def test_shipped_catalog_loads():
    cat = load_catalog()
    ids = {r.id for r in cat.recipes}
    assert {"ssh", "openmpi"} <= ids
    assert cat.presets, "presets.toml was not read"
    assert "diagnoses.toml" not in {r.path.rsplit("/", 1)[-1] for r in cat.recipes}
    for r in cat.recipes:
        assert r.steps, r.id
        for s in r.steps:
            assert s.kind in KINDS
            assert set(s.when) <= set(conditions())
            assert s.title


def test_shipped_catalog_matches_choices():
    cat = load_catalog()
    mpi_tcp = [r.id for r in cat.for_choices("mpi", "tcp")]
    assert mpi_tcp[0] == "ssh"  # order = 10 before openmpi's 30
    assert "openmpi" in mpi_tcp
    assert cat.preset_for("mpi", "tcp").id == "mpi-base"
    assert cat.preset_for("mpi", "ib").id == "openmpi-ib"


def test_good_recipe_loads(tmp_path):
    write(tmp_path, GOOD_STEP + '''
[packages]
apt = ["foo"]
dnf = ["foo-bin"]
''')
    cat = load_catalog(tmp_path)
    (r,) = cat.recipes
    assert r.id == "demo"
    assert r.steps[0].id == "good"
    assert r.packages == {"apt": ("foo",), "dnf": ("foo-bin",)}
    assert r.networks == ("tcp", "ib")  # the default


def test_duplicate_step_ids_with_exclusive_when_are_allowed(tmp_path):
    write(tmp_path, '''
[[steps]]
id = "twin"
title = "As root"
when = ["target_root"]
check = "true"
run = "true"
note = "nothing to undo"

[[steps]]
id = "twin"
title = "As user"
when = ["target_user", "systemd"]
check = "true"
run = "true"
note = "nothing to undo"
''')
    (r,) = load_catalog(tmp_path).recipes
    assert [s.id for s in r.steps] == ["twin", "twin"]


# --- each loader error names file and step ----------------------------------------------

def test_unknown_placeholder(tmp_path):
    msg = load_error(tmp_path, '''
[[steps]]
id = "ph"
title = "Uses a bad placeholder"
check = "test -e {{nosuch}}"
run = "true"
undo = "true"
''')
    assert "demo.toml" in msg and "step ph" in msg
    assert "{{nosuch}}" in msg and "check" in msg
    assert "nosuch" not in PLACEHOLDERS


def test_unknown_placeholder_in_content(tmp_path):
    msg = load_error(tmp_path, '''
[[steps]]
id = "content-ph"
title = "File"
kind = "file"
path = "/tmp/x"
content = "Port {{sshport}}"
''')
    assert "demo.toml" in msg and "step content-ph" in msg and "{{sshport}}" in msg


def test_missing_check(tmp_path):
    msg = load_error(tmp_path, '''
[[steps]]
id = "nocheck"
title = "No check"
run = "true"
undo = "true"
''')
    assert "demo.toml" in msg and "step nocheck" in msg and "'check'" in msg


def test_shell_step_without_undo_or_note(tmp_path):
    msg = load_error(tmp_path, '''
[[steps]]
id = "oneway"
title = "No way back"
check = "true"
run = "true"
''')
    assert "demo.toml" in msg and "step oneway" in msg
    assert "undo" in msg and "note" in msg


def test_shell_step_with_note_only_loads(tmp_path):
    write(tmp_path, '''
[[steps]]
id = "oneway"
title = "No way back, but says why"
check = "true"
run = "true"
note = "Host keys are kept."
''')
    (r,) = load_catalog(tmp_path).recipes
    assert r.steps[0].note == "Host keys are kept."


def test_unknown_kind(tmp_path):
    msg = load_error(tmp_path, '''
[[steps]]
id = "weird"
title = "Weird kind"
kind = "template"
path = "/tmp/x"
content = "x"
''')
    assert "demo.toml" in msg and "step weird" in msg and "'template'" in msg


@pytest.mark.parametrize("mode", ["644", "0999", "rw-r--r--", "00644"])
def test_bad_mode(tmp_path, mode):
    msg = load_error(tmp_path, f'''
[[steps]]
id = "moded"
title = "Bad mode"
kind = "file"
path = "/tmp/x"
content = "x"
mode = "{mode}"
''')
    assert "demo.toml" in msg and "step moded" in msg and repr(mode) in msg


def test_unknown_key(tmp_path):
    msg = load_error(tmp_path, '''
[[steps]]
id = "typo"
title = "Typo in a key"
check = "true"
run = "true"
undoo = "true"
undo = "true"
''')
    assert "demo.toml" in msg and "step typo" in msg and "'undoo'" in msg


def test_duplicate_step_ids_with_overlapping_when(tmp_path):
    msg = load_error(tmp_path, '''
[[steps]]
id = "twin"
title = "One"
when = ["target_root"]
check = "true"
run = "true"
undo = "true"

[[steps]]
id = "twin"
title = "Two"
when = ["systemd"]
check = "true"
run = "true"
undo = "true"
''')
    assert "demo.toml" in msg and "'twin'" in msg and "overlapping" in msg


def test_duplicate_step_ids_without_when(tmp_path):
    msg = load_error(tmp_path, GOOD_STEP + GOOD_STEP)
    assert "demo.toml" in msg and "'good'" in msg


def test_unknown_when_condition(tmp_path):
    msg = load_error(tmp_path, '''
[[steps]]
id = "cond"
title = "Unknown condition"
when = ["is_tuesday"]
check = "true"
run = "true"
undo = "true"
''')
    assert "demo.toml" in msg and "step cond" in msg and "'is_tuesday'" in msg


def test_invalid_toml(tmp_path):
    (tmp_path / "broken.toml").write_text('id = "broken"\n[[steps]\nid = \n')
    with pytest.raises(RecipeError) as exc:
        load_catalog(tmp_path)
    msg = str(exc.value)
    assert msg.startswith("broken.toml:") and "not valid TOML" in msg


def test_error_names_the_right_file_among_several(tmp_path):
    write(tmp_path, GOOD_STEP, name="a-good.toml")
    (tmp_path / "z-bad.toml").write_text(textwrap.dedent(HEAD).replace('"demo"', '"other"') + '''
[[steps]]
id = "bad-one"
title = "Bad"
check = "true"
run = "true"
''')
    with pytest.raises(RecipeError) as exc:
        load_catalog(tmp_path)
    assert "z-bad.toml" in str(exc.value) and "a-good.toml" not in str(exc.value)
    assert "step bad-one" in str(exc.value)


def test_shell_step_with_validate_is_rejected(tmp_path):
    msg = load_error(tmp_path, '''
[[steps]]
id = "val"
title = "Validate on shell"
check = "true"
run = "true"
undo = "true"
validate = "true"
''')
    assert "step val" in msg and "validate" in msg


def test_file_step_with_own_run_is_rejected(tmp_path):
    msg = load_error(tmp_path, '''
[[steps]]
id = "filerun"
title = "File with run"
kind = "file"
path = "/tmp/x"
content = "x"
run = "echo hi > /tmp/x"
''')
    assert "step filerun" in msg and "renders its own" in msg


def test_dropin_without_fallback_is_rejected(tmp_path):
    msg = load_error(tmp_path, '''
[[steps]]
id = "drop"
title = "Drop-in without fallback"
kind = "dropin"
path = "/etc/x.d/50.conf"
content = "x"
''')
    assert "step drop" in msg and "fallback" in msg


def test_recipe_ids_used_twice(tmp_path):
    write(tmp_path, GOOD_STEP, name="one.toml")
    write(tmp_path, GOOD_STEP, name="two.toml")
    with pytest.raises(RecipeError) as exc:
        load_catalog(tmp_path)
    assert "'demo'" in str(exc.value)


def test_bad_package_manager_and_name(tmp_path):
    msg = load_error(tmp_path, GOOD_STEP + '\n[packages]\npacman = ["foo"]\n')
    assert "demo.toml" in msg and "'pacman'" in msg
    msg = load_error(tmp_path, GOOD_STEP + '\n[packages]\napt = ["foo; rm -rf /"]\n')
    assert "demo.toml" in msg and "not valid" in msg
