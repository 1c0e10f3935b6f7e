"""Issue 6, security checks that need no root (the system ones: tests/system/test_system_security.py).

- Every value reaching a shell is validated or quoted: names like `x;touch PWNED`,
  `$(touch PWNED)`, backticks, newlines and quotes are fed through every CLI option, the
  environment variables the launch script and verify read to find the hosts (HOSTS, HOSTFILE,
  SLURM_JOB_NODELIST, VC_*_HOSTS, MASTER_ADDR), hostfiles, and the TUI's fields: the file
  PWNED never appears.
- `--host-keys off` is shown as a warning wherever it appears: plan text, plan --json
  warnings, the setup script's header, the launch script, the TUI's Recommend and Review.
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import List

import pytest

from _core_fixtures import wizard_exe

MPI_TCP = ["--framework", "mpi", "--network", "tcp"]


def payloads(pwned: Path) -> List[str]:
    p = str(pwned)
    return [f"x;touch {p}", f"$(touch {p})", f"`touch {p}`", f"x\ntouch {p}", f"x' ; touch {p}; '",
            f'x" ; touch {p}; "', f"x&&touch {p}", f"x|touch {p}", f"node[1-2];touch {p}"]


def run(argv: List[str], tmp: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([wizard_exe(), *argv], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=120, cwd=str(tmp),
                          env=dict(os.environ, HPCWIZARD_STATE_DIR=str(tmp / "state"), **env))


OPTIONS = [  # (command, option): every option that takes free text
    (["plan", *MPI_TCP], "--user"), (["plan", *MPI_TCP], "--ssh-port"),
    (["plan", *MPI_TCP], "--peers"), (["apply", *MPI_TCP, "--manual", "--yes"], "--user"),
    (["apply", *MPI_TCP, "--manual", "--yes"], "--ssh-port"),
    (["apply", *MPI_TCP, "--manual", "--yes"], "--peers"),
    (["export", *MPI_TCP, "--format", "setup"], "--peers"),
    (["export", *MPI_TCP, "--format", "launch"], "--user"),
    (["plan", "--framework", "mpi", "--network", "ib"], "--ucx-url"),
    (["plan", "--framework", "mpi", "--network", "ib", "--ucx-url",
      "https://example.org/ucx.deb"], "--ucx-sha256"),
    (["verify", *MPI_TCP], "--hosts"),
]


@pytest.mark.parametrize("command, option", OPTIONS, ids=[f"{c[0]}{o}" for c, o in OPTIONS])
def test_cli_options_never_reach_a_shell_unchecked(command, option, tmp_path: Path) -> None:
    pwned = tmp_path / "PWNED"
    for value in payloads(pwned):
        proc = run([*command, option, value], tmp_path)
        assert proc.returncode == 2, f"{option}={value!r}: exit {proc.returncode}\n{proc.stderr}"
        assert "Traceback" not in proc.stderr
        assert not pwned.exists(), f"{option}={value!r} ran a command"


def test_hostfile_names_never_reach_a_shell(tmp_path: Path) -> None:
    pwned = tmp_path / "PWNED"
    for value in payloads(pwned):
        hf = tmp_path / "hostfile"
        hf.write_text(f"node1 slots=1\n{value} slots=1\n")
        proc = run(["verify", *MPI_TCP, "--hostfile", str(hf)], tmp_path)
        # refused (2), or a newline made separate plain names that verify then checks (1)
        assert proc.returncode in (1, 2) and "Traceback" not in proc.stderr, proc.stderr
        assert not pwned.exists(), f"hostfile line {value!r} ran a command"


ENV_SOURCES = ["HOSTS", "SLURM_JOB_NODELIST", "VC_WORKER_HOSTS", "MASTER_ADDR"]


def _clean_env(home: Path) -> dict:
    keep = {k: v for k, v in os.environ.items()
            if k in ("PATH", "LANG", "LC_ALL", "TERM")}
    return dict(keep, HOME=str(home))


@pytest.mark.parametrize("var", ENV_SOURCES)
def test_launch_script_host_sources_never_reach_a_shell(var: str, tmp_path: Path) -> None:
    pwned = tmp_path / "PWNED"
    script = tmp_path / "launch.sh"
    proc = run(["export", *MPI_TCP, "--format", "launch", "-o", str(script)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    for value in payloads(pwned):
        env = _clean_env(tmp_path)
        env[var] = value
        if var == "MASTER_ADDR":
            env["WORLD_SIZE"] = "2"
        r = subprocess.run(["bash", str(script), "true"], env=env, capture_output=True,
                           text=True, timeout=60, cwd=str(tmp_path), stdin=subprocess.DEVNULL)
        assert r.returncode != 0, f"{var}={value!r}: the script went on\n{r.stderr}"
        assert not pwned.exists(), f"{var}={value!r} ran a command\n{r.stderr}"


@pytest.mark.parametrize("var", ENV_SOURCES)
def test_verify_host_sources_never_reach_a_shell(var: str, tmp_path: Path) -> None:
    pwned = tmp_path / "PWNED"
    for value in payloads(pwned)[:4]:
        extra = {var: value, **({"WORLD_SIZE": "2"} if var == "MASTER_ADDR" else {})}
        proc = run(["verify", *MPI_TCP, "--json"], tmp_path, **extra)
        assert "Traceback" not in proc.stderr, proc.stderr
        assert not pwned.exists(), f"{var}={value!r} ran a command"


# --- --host-keys off: a warning wherever it appears -------------------------------------------

def test_host_keys_off_is_a_warning_in_plan_exports_and_scripts(tmp_path: Path) -> None:
    off = [*MPI_TCP, "--host-keys", "off"]
    text = run(["plan", *off], tmp_path)
    assert text.returncode == 0 and "WARNING" in text.stdout and "not checked" in text.stdout
    data = json.loads(run(["plan", *off, "--json"], tmp_path).stdout)
    assert any("not checked" in w for w in data["warnings"]), data["warnings"]
    for fmt in ("setup", "launch"):
        out = run(["export", *off, "--format", fmt], tmp_path)
        head = "\n".join(out.stdout.splitlines()[:20])
        assert out.returncode == 0 and "WARNING: host keys are not checked" in head, head
    pinned = run(["export", *MPI_TCP, "--format", "launch"], tmp_path)
    assert "WARNING" not in pinned.stdout  # and only then


def test_host_keys_off_is_a_warning_in_the_tui(tmp_path: Path) -> None:
    pytest.importorskip("textual")
    from textual.widgets import RadioButton

    from _tui_fixtures import make_app, to_choose, wait_for

    app = make_app(tmp_path)
    seen = {}

    def screen_text() -> str:
        """The screen as plain text, from its SVG screenshot."""
        import html
        import re

        svg = app.export_screenshot()
        return html.unescape(re.sub(r"<[^>]+>", "", svg)).replace("\xa0", " ")

    async def go() -> None:
        async with app.run_test(size=(100, 60)) as pilot:
            await to_choose(pilot)
            off = app.screen.query_one("#host_keys-off", RadioButton)
            off.value = True
            await pilot.pause()
            await pilot.press("ctrl+n")
            for name in ("RecommendScreen", "ReviewScreen"):
                await wait_for(pilot, lambda: type(app.screen).__name__ == name)
                await pilot.pause(0.2)
                seen[name] = screen_text()
                if name == "RecommendScreen":
                    await pilot.press("c")  # configure here: the Review

    asyncio.run(go())
    assert app.plan is not None and app.plan.choices.host_keys == "off"
    assert "not checked" in seen.get("RecommendScreen", ""), "Recommend shows no warning"
    review = seen.get("ReviewScreen", "")
    assert "NOT" in review and "checked" in review, "Review shows no warning"


# --- names from the environment (issue 28) ------------------------------------------------------

def _no_entry(key):
    raise KeyError(f"no passwd entry: {key}")


@pytest.mark.parametrize("var", ["USER", "LOGNAME"])
def test_a_user_name_from_the_environment_is_held_to_the_user_rule(var, monkeypatch, tmp_path):
    """A uid without a passwd entry is named from USER, else LOGNAME; the name lands in the
    exported setup and launch scripts, so a name --user refuses is not taken."""
    from _core_fixtures import facts
    from hpcwizard import validate
    from hpcwizard.catalog import load_catalog
    from hpcwizard.choices import make_choices
    from hpcwizard.detect import user as user_probe
    from hpcwizard.detect.base import Context, Found
    from hpcwizard.export import launch_script, setup_script
    from hpcwizard.plan import build_plan

    monkeypatch.setattr(user_probe.os, "getuid", lambda: 12345)
    monkeypatch.setattr(user_probe.pwd, "getpwuid", _no_entry)
    monkeypatch.setattr(user_probe.pwd, "getpwnam", _no_entry)
    monkeypatch.delenv("USER" if var == "LOGNAME" else "LOGNAME", raising=False)
    pwned = tmp_path / "PWNED"
    for value in [*payloads(pwned), "-oProxyCommand=x", "Bob", "a" * 33, "x\ty"]:
        with pytest.raises(validate.BadInput):  # the table holds names --user refuses
            validate.user_name(value)
        monkeypatch.setenv(var, value)
        found = Found()
        user_probe.probe(Context(sysroot="/", run_commands=False), found)
        user = found.values["user"]
        assert user.name == "unknown", f"{var}={value!r} became the user's name"
        plan = build_plan(facts(user=user), make_choices(framework="mpi", network="tcp"),
                          load_catalog())
        for script in (setup_script(plan), launch_script(plan)):
            assert value not in script
