"""The vocabulary (hpcwizard.vocab) is defined once and read by argparse, the Choose screen,
the catalog and the plan: each offers exactly its values and defaults, a recipe naming a
condition or a placeholder it does not define fails to load, a value added to it alone
appears on the command line and on the Choose screen, and the default SSH port is written in
one place."""
from __future__ import annotations

import argparse
import ast
import dataclasses
import re
import textwrap
from pathlib import Path

import pytest

from hpcwizard import vocab
from hpcwizard.catalog import RecipeError, load_catalog
from hpcwizard.choices import Choices, make_choices
from hpcwizard.cli import build_parser
from hpcwizard.plan import _conditions, _values, resolve_target
from hpcwizard.validate import BadInput

from _core_fixtures import ALICE, OSES, ROOT, facts

ROOT_DIR = Path(__file__).resolve().parent.parent
CHOICE_COMMANDS = ("plan", "apply", "export", "verify")


def subparsers(parser: argparse.ArgumentParser):
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def option(parser: argparse.ArgumentParser, flag: str) -> argparse.Action:
    return next(a for a in parser._actions if flag in a.option_strings)


# --- argparse ---------------------------------------------------------------------------------

def test_argparse_offers_the_vocabulary_and_its_defaults():
    commands = subparsers(build_parser())
    for command in CHOICE_COMMANDS:
        p = commands[command]
        for choice in (vocab.FRAMEWORK, vocab.NETWORK, vocab.HOST_KEYS):
            assert tuple(option(p, choice.flag).choices) == choice.ids, (command, choice.name)
        assert option(p, "--host-keys").default == vocab.HOST_KEYS.default
        assert option(p, "--ssh-port").default == str(vocab.DEFAULT_SSH_PORT)
        assert option(p, "--user").default == vocab.DEFAULT_USER
        # the mode: a flag for each value but the default, which is no flag at all
        mode_flags = {a.const: a.option_strings for a in p._actions if a.dest == "mode"}
        assert mode_flags == {v: [f"--{v}"] for v in vocab.MODE.ids if v != vocab.MODE.default}


def test_argparse_defaults_make_the_choices_defaults():
    args = build_parser().parse_args(["plan", "--framework", vocab.FRAMEWORK.default,
                                      "--network", vocab.NETWORK.default])
    made = make_choices(framework=args.framework, network=args.network, user=args.user,
                        ssh_port=args.ssh_port, host_keys=args.host_keys)
    assert made == Choices()
    assert (made.ssh_port, made.host_keys) == (vocab.DEFAULT_SSH_PORT, vocab.HOST_KEYS.default)


def test_verify_record_takes_the_vocabulary_defaults_as_not_given(capsys, tmp_path):
    """verify --record refuses choices beside the record; a choice at its default is none."""
    from hpcwizard.cli import main

    missing = str(tmp_path / "no-record.toml")
    for extra in ([], ["--host-keys", vocab.HOST_KEYS.default],
                  ["--ssh-port", str(vocab.DEFAULT_SSH_PORT)]):
        assert main(["verify", "--record", missing, "--here", *extra]) == 2
        err = capsys.readouterr().err
        assert "not both" not in err and "no-record.toml" in err, (extra, err)
    other = next(v for v in vocab.HOST_KEYS.ids if v != vocab.HOST_KEYS.default)
    assert main(["verify", "--record", missing, "--here", "--host-keys", other]) == 2
    err = capsys.readouterr().err
    assert "--host-keys" in err and "not both" in err and len(err.splitlines()) == 1


# --- the Choose screen ------------------------------------------------------------------------

def choose_screen_offers(app) -> dict:
    """choice name -> [(button id, label, pressed, disabled)] on the Choose screen."""
    from textual.widgets import RadioButton, RadioSet

    return {name: [(b.id, str(b.label), b.value, b.disabled)
                   for b in app.screen.query_one(f"#{name}", RadioSet).query(RadioButton)]
            for name in ("framework", "network", "host_keys")}


def expected_offers(i18n_lang: str = "en", rdma: bool = True) -> dict:
    from hpcwizard.i18n import translations

    tr = translations(i18n_lang).gettext
    return {c.name: [(f"{c.name}-{v.id}", tr(v.label), v.id == c.default, v.rdma and not rdma)
                     for v in c.values]
            for c in (vocab.FRAMEWORK, vocab.NETWORK, vocab.HOST_KEYS)}


def run_choose(tmp_path, facts_=None, then=None):
    """Start the wizard, go to Choose, return what it offers (and then(app)'s result)."""
    pytest.importorskip("textual")
    import asyncio

    from textual.widgets import Input

    from _tui_fixtures import make_app, name, to_choose, wait_for

    async def go():
        app = make_app(tmp_path, facts=facts_)
        async with app.run_test(size=(80, 24)) as pilot:
            await to_choose(pilot)
            await wait_for(pilot, lambda: name(app) == "ChooseScreen")
            offers = choose_screen_offers(app)
            port = app.screen.query_one("#ssh_port", Input).value
            extra = await then(pilot) if then else None
        return offers, port, extra

    return asyncio.run(go())


def test_choose_offers_exactly_the_vocabulary(tmp_path):
    from _tui_fixtures import bare_container, gpu_ib

    offers, port, _ = run_choose(tmp_path, gpu_ib())
    assert offers == expected_offers(rdma=True)
    assert port == str(vocab.DEFAULT_SSH_PORT)
    # no RDMA device: the values that need one are shown, and cannot be pressed
    offers, _, _ = run_choose(tmp_path, bare_container())
    assert offers == expected_offers(rdma=False)
    assert any(disabled for *_, disabled in offers["network"])  # the check can fail


# --- a value added to the vocabulary, and nothing else ----------------------------------------

@pytest.fixture
def more_values(monkeypatch):
    """A framework, an RDMA network and a host-key policy that hpcwizard does not have."""
    monkeypatch.setattr(vocab, "FRAMEWORK", dataclasses.replace(
        vocab.FRAMEWORK, values=vocab.FRAMEWORK.values + (vocab.Value("jax", "JAX"),)))
    monkeypatch.setattr(vocab, "NETWORK", dataclasses.replace(
        vocab.NETWORK, values=vocab.NETWORK.values + (vocab.Value("roce", "RoCE", rdma=True),)))
    monkeypatch.setattr(vocab, "HOST_KEYS", dataclasses.replace(
        vocab.HOST_KEYS, values=vocab.HOST_KEYS.values + (vocab.Value("tofu", "TOFU"),)))


def test_a_new_value_reaches_argparse_and_make_choices(more_values):
    args = build_parser().parse_args(["plan", "--framework", "jax", "--network", "roce",
                                      "--host-keys", "tofu"])
    assert (args.framework, args.network, args.host_keys) == ("jax", "roce", "tofu")
    assert make_choices(framework="jax", network="roce", host_keys="tofu").framework == "jax"
    with pytest.raises(BadInput, match="'flax' is not one of: mpi, pytorch, jax"):
        make_choices(framework="flax")


def test_without_the_new_value_it_is_refused():
    """The test above can fail: the same command without the added value is bad input."""
    with pytest.raises(BadInput, match="invalid choice: 'jax'"):
        build_parser().parse_args(["plan", "--framework", "jax", "--network", "tcp"])


def test_a_new_value_reaches_the_choose_screen(more_values, tmp_path):
    from _tui_fixtures import bare_container

    async def pick_jax(pilot):
        from textual.widgets import RadioButton

        from _tui_fixtures import wait_for

        await pilot.click("#framework-jax")
        button = pilot.app.screen.query_one("#framework-jax", RadioButton)
        await wait_for(pilot, lambda: button.value, what="JAX pressed")
        return pilot.app.screen.raw_values()

    offers, _, raw = run_choose(tmp_path, bare_container(), then=pick_jax)
    assert ("framework-jax", "JAX", False, False) in offers["framework"]
    assert ("network-roce", "RoCE", False, True) in offers["network"]  # no RDMA here
    assert ("host_keys-tofu", "TOFU", False, False) in offers["host_keys"]
    assert offers == expected_offers(rdma=False)
    assert raw["framework"] == "jax"


def test_a_new_value_reaches_the_catalog_and_its_conditions(more_values, tmp_path):
    """The recipe that uses the new values loads, and the new host-key policy is a condition
    exclusive with the others, as every choice's values are."""
    (tmp_path / "jax.toml").write_text(textwrap.dedent('''
        id = "jax"
        title = "JAX"
        why = "A test's framework."
        frameworks = ["jax"]
        networks = ["roce"]

        [[steps]]
        id = "trust"
        title = "Trust on first use"
        when = ["host_keys_tofu"]
        check = "true"
        run = "true"
        undo = "true"

        [[steps]]
        id = "trust"
        title = "Pinned"
        when = ["host_keys_pinned"]
        check = "true"
        run = "true"
        undo = "true"
        '''))
    cat = load_catalog(tmp_path)
    assert [r.id for r in cat.for_choices("jax", "roce")] == ["jax"]
    assert vocab.exclusive("host_keys_tofu", "host_keys_pinned")
    f = facts("debian12", ROOT)
    chosen = make_choices(framework="jax", network="roce", host_keys="tofu")
    cond = _conditions(f, chosen, resolve_target(f, ""))
    assert cond["host_keys_tofu"] and not cond["host_keys_pinned"]


# --- the catalog refuses what the vocabulary does not define ----------------------------------

HEAD = '''
id = "demo"
title = "Demo"
why = "Because tests need one."
frameworks = ["mpi"]
'''


def load_error(tmp_path, body: str) -> str:
    (tmp_path / "demo.toml").write_text(textwrap.dedent(HEAD) + textwrap.dedent(body))
    with pytest.raises(RecipeError) as exc:
        load_catalog(tmp_path)
    return str(exc.value)


def test_unknown_condition_is_refused_naming_the_known_ones(tmp_path):
    msg = load_error(tmp_path, '''
        [[steps]]
        id = "cond"
        title = "Unknown condition"
        when = ["target_root", "is_tuesday"]
        check = "true"
        run = "true"
        undo = "true"
        ''')
    assert msg.startswith("demo.toml: step cond: unknown condition 'is_tuesday' in 'when'")
    assert all(name in msg for name in vocab.conditions()) and "wizard/vocab.py" in msg
    assert "\n" not in msg


def test_unknown_condition_of_a_whole_recipe_is_refused(tmp_path):
    msg = load_error(tmp_path, 'when = ["ucx_ftp"]\n' + '''
        [[steps]]
        id = "good"
        title = "A good step"
        check = "true"
        run = "true"
        undo = "true"
        ''')
    assert msg.startswith("demo.toml: unknown condition 'ucx_ftp' in 'when'")


def test_unknown_placeholder_is_refused_naming_the_known_ones(tmp_path):
    msg = load_error(tmp_path, '''
        [[steps]]
        id = "ph"
        title = "Port {{sshport}}"
        check = "true"
        run = "true"
        undo = "true"
        ''')
    assert msg.startswith("demo.toml: step ph: unknown placeholder {{sshport}} in 'title'")
    assert all(name in msg for name in vocab.PLACEHOLDERS) and "wizard/vocab.py" in msg


def test_unknown_framework_in_a_recipe_is_refused(tmp_path):
    (tmp_path / "demo.toml").write_text(textwrap.dedent(HEAD).replace('["mpi"]', '["jax"]'))
    with pytest.raises(RecipeError, match=r"demo.toml: frameworks: 'jax' is not one of "
                                          r"mpi, pytorch"):
        load_catalog(tmp_path)


# --- the plan supplies what the vocabulary names ----------------------------------------------

PLAN_CASES = [
    (os_key, user, systemd, host_keys, ucx)
    for os_key in ("debian12", "rocky9") for user in (ROOT, ALICE["nopasswd"])
    for systemd in (False, True) for host_keys in vocab.HOST_KEYS.ids
    for ucx in ("", "https://example.org/ucx_1.17.deb")
]


@pytest.mark.parametrize("os_key,user,systemd,host_keys,ucx", PLAN_CASES)
def test_plan_supplies_every_placeholder_and_decides_every_condition(os_key, user, systemd,
                                                                     host_keys, ucx):
    f = facts(os_key, user, systemd=systemd)
    chosen = make_choices(framework="mpi", network="ib", host_keys=host_keys,
                          ucx_source="url" if ucx else "distro", ucx_url=ucx)
    target = resolve_target(f, "")
    assert set(_values(chosen, target, f)) == set(vocab.PLACEHOLDERS)
    cond = _conditions(f, chosen, target)
    assert set(cond) == set(vocab.conditions())
    groups: dict = {}
    for name, holds in cond.items():
        groups.setdefault(vocab.conditions()[name].group, []).append(holds)
    # at most one of a group holds (what lets two steps share an id): here exactly one
    assert all(sum(held) == 1 for held in groups.values()), groups
    assert cond["target_root"] == user.is_root and cond["systemd"] == systemd
    assert cond[f"family_{OSES[os_key].family}"]
    assert cond[f"host_keys_{host_keys}"] and cond["ucx_url" if ucx else "ucx_distro"]


def test_every_shipped_condition_and_placeholder_is_used():
    """A name nothing uses is a leftover: the vocabulary lists what the recipes need."""
    cat = load_catalog()
    used_when = {c for r in cat.recipes for c in r.when} | {
        c for r in cat.recipes for s in r.steps for c in s.when}
    text = "".join(Path(r.path).read_text(encoding="utf-8") for r in cat.recipes)
    used_ph = set(re.findall(r"\{\{\s*([A-Za-z0-9_]+)\s*\}\}", text))
    assert used_ph == set(vocab.PLACEHOLDERS)
    # every condition a recipe names is defined (load_catalog checks it); the generated ones
    # ('<choice>_<value>') may go unused for a value no recipe needs to tell apart
    decided = {c.name for c in vocab._DECIDED}
    assert decided <= used_when, decided - used_when


def test_a_value_that_cannot_be_an_id_is_refused():
    with pytest.raises(ValueError, match="lower-case letters and digits"):
        vocab.Value("Open MPI")
    with pytest.raises(ValueError, match="default 'gloo' is not a value"):
        dataclasses.replace(vocab.FRAMEWORK, default="gloo")


# --- the default port, written once -----------------------------------------------------------

PORT = str(vocab.DEFAULT_SSH_PORT)


def port_literals(path: Path, root: Path = ROOT_DIR) -> list:
    """Where the default port is written as code in a Python file: an int constant equal to
    it, or a string constant with it as a word (a docstring or a comment is prose)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    prose = {id(n.value) for n in ast.walk(tree)
             if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    found = []
    for n in ast.walk(tree):
        if not isinstance(n, ast.Constant) or id(n) in prose or isinstance(n.value, bool):
            continue
        if (n.value == vocab.DEFAULT_SSH_PORT
                or isinstance(n.value, str) and re.search(rf"\b{PORT}\b", n.value)):
            found.append(f"{path.relative_to(root).as_posix()}:{n.lineno}")
    return found


def places(files) -> list:
    return [where for path in files for where in port_literals(path)]


def test_port_literals_finds_each_kind(tmp_path):
    """The scan can fail: it finds an int, a string and an f-string's text, not prose."""
    sample = tmp_path / "sample.py"
    sample.write_text(f'"""Port {PORT} in a docstring."""\nA = {PORT}\nB = "-p {PORT}"\n'
                      f'C = f"--port {PORT} {{A}}"\n# {PORT} in a comment\nD = 22220\n')
    assert port_literals(sample, tmp_path) == ["sample.py:2", "sample.py:3", "sample.py:4"]


def test_the_default_port_is_written_once():
    files = [p for d in ("wizard", "screens") for p in (ROOT_DIR / d).rglob("*.py")
             if "__pycache__" not in p.parts and "detect" not in p.relative_to(ROOT_DIR).parts]
    files += sorted((ROOT_DIR / "recipes").glob("*.py"))
    assert places(files) == [f"wizard/vocab.py:{_vocab_line()}"]
    # recipes say {{ssh_port}}, whatever port was chosen
    for path in [*(ROOT_DIR / "recipes").glob("*.toml"), ROOT_DIR / "recipes" / "ops.sh"]:
        code = "\n".join(line for line in path.read_text(encoding="utf-8").splitlines()
                         if not line.lstrip().startswith("#"))
        assert not re.search(rf"\b{PORT}\b", code), path.name


def test_detect_takes_the_default_port_from_the_vocabulary():
    assert places(sorted((ROOT_DIR / "wizard" / "detect").rglob("*.py"))) == []


def _vocab_line() -> int:
    lines = (ROOT_DIR / "wizard" / "vocab.py").read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.startswith("DEFAULT_SSH_PORT ="))
