"""What keeps `hpcwizard detect` quick, checked where it can regress (the figures themselves
are bench/run.py's): the command line builds the arguments of the command it runs alone; on
a clean interpreter, with hpcwizard laid out as a wheel installs it, detect loads neither
importlib.resources nor pathlib, in English or in Chinese. And the entry point exits with
main()'s status through the interpreter's normal exit, so that atexit and log handlers run
and every byte printed reaches a pipe or a file."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from hpcwizard.cli import SUBCOMMANDS, build_parser, main

ROOT = Path(__file__).resolve().parent.parent


def subcommands(parser: argparse.ArgumentParser):
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def flags(parser: argparse.ArgumentParser):
    return {f for a in parser._actions for f in a.option_strings}


def test_the_command_line_builds_the_command_it_runs():
    only = subcommands(build_parser({"detect"}))
    assert set(only) == set(SUBCOMMANDS)  # every command keeps its line in --help
    assert "--json" in flags(only["detect"])
    assert flags(only["plan"]) == {"-h", "--help", "--lang"}
    full = subcommands(build_parser())
    assert {"--framework", "--network", "--json"} <= flags(full["plan"])


def test_a_command_named_anywhere_gets_its_arguments(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--lang", "en", "plan", "--help"])
    assert exc.value.code == 0 and "--framework" in capsys.readouterr().out
    assert main(["detect", "--no-such-flag"]) == 2
    assert "--no-such-flag" in capsys.readouterr().err


@pytest.fixture(scope="module")
def wheel_layout(tmp_path_factory) -> Path:
    """hpcwizard as a wheel installs it (tools/build_pyz.py's copy_project, what the zipapp
    holds)."""
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        tomllib = pytest.importorskip("tomli")
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import build_pyz
    finally:
        sys.path.remove(str(ROOT / "tools"))
    site = tmp_path_factory.mktemp("site")
    build_pyz.copy_project(tomllib.loads((ROOT / "pyproject.toml").read_text()), site)
    return site


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_clean_interpreter_loads_no_resource_machinery(wheel_layout, lang):
    # -S: no site, so nothing is imported before hpcwizard (this machine's .pth files import
    # pathlib and importlib.resources at start, which would hide what detect adds)
    code = (f"import sys, io, json; before = set(sys.modules); sys.path.insert(0, {str(wheel_layout)!r})\n"
            "from hpcwizard import cli, i18n\n"
            "out, sys.stdout = sys.stdout, io.StringIO()\n"
            f"status = cli.main(['--lang', {lang!r}, 'detect', '--json'])\n"
            "facts = json.loads(sys.stdout.getvalue()); sys.stdout = out\n"
            "print(json.dumps([status, sorted(set(sys.modules) - before), sorted(i18n._loaded),"
            " bool(facts['os'])]))\n")
    r = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    status, loaded, catalogues, has_facts = json.loads(r.stdout)
    assert status == 0 and has_facts
    assert "hpcwizard.detect.core" in loaded and "hpcwizard.detect.software" in loaded
    assert catalogues == [lang]  # Chinese did read its catalogue, through the package
    assert not {"importlib.resources", "pathlib", "zipfile", "textual"} & set(loaded)


START = {"script": "from hpcwizard.cli import run; run()",
         "module": "import runpy; runpy.run_module('hpcwizard', run_name='__main__')"}


def entry(argv, how: str) -> subprocess.CompletedProcess:
    code = ("import atexit, sys\n"
            "atexit.register(lambda: print('atexit ran'))\n"
            f"sys.argv = ['hpcwizard', *{list(argv)!r}]\n" + START[how] + "\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("how", ["script", "module"])
def test_the_entry_point_exits_with_mains_status_through_the_normal_exit(how):
    ok = entry(["--version"], how)
    assert ok.returncode == 0 and ok.stdout.startswith("hpcwizard ")
    assert ok.stdout.rstrip().endswith("atexit ran")
    bad = entry(["no-such-command"], how)
    assert bad.returncode == 2 and "atexit ran" in bad.stdout
    assert len(bad.stderr.splitlines()) == 1 and "Traceback" not in bad.stderr


@pytest.mark.parametrize("how", ["script", "module"])
def test_detect_writes_all_its_output_and_exits_normally(how, tmp_path):
    """What detect printed is all there, in a pipe and in a file, and the exit ran the
    atexit handlers (detect is no exception to the normal exit)."""
    piped = entry(["detect", "--json"], how)
    assert piped.returncode == 0, piped.stderr
    facts_text, _, after = piped.stdout.rpartition("}\n")
    assert after == "atexit ran\n"
    facts = json.loads(facts_text + "}")
    assert facts["os"]["id"]
    into = tmp_path / "facts.json"
    with into.open("w") as out:
        done = subprocess.run([sys.executable, "-c", "import sys; sys.argv = ['hpcwizard', "
                               "'detect', '--json']\n" + START[how]], stdout=out, timeout=60)
    assert done.returncode == 0
    written = into.read_text()
    assert written.endswith("}\n") and json.loads(written).keys() == facts.keys()


def test_the_installed_script_enters_through_run():
    text = (ROOT / "pyproject.toml").read_text()
    assert 'hpcwizard = "hpcwizard.cli:run"' in text
