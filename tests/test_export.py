"""setup.sh: the same steps as apply, as one idempotent, reversible bash script."""
from __future__ import annotations

import os
import pwd
import subprocess
from pathlib import Path

import pytest

from hpcwizard import ops
from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.export import setup_script
from hpcwizard.plan import Plan, Recommendation, Step, Target, build_plan

from _core_fixtures import ALICE, ROOT, facts, fake_passwd, patch_users, shellcheck

CATALOG = load_catalog()


def plans(monkeypatch):
    patch_users(monkeypatch, fake_passwd("bob", 1001, "/home/bob"))
    cases = [
        ("debian12", ROOT, {}, False),
        ("ubuntu2204", ROOT, {"host_keys": "off", "ssh_port": 2345}, True),
        ("rocky9", ROOT, {"user": "bob"}, False),
        ("centos7", ALICE["nopasswd"], {"peers": "node-?"}, True),
        ("openeuler", ALICE["password"], {"host_keys": "off"}, False),
        ("debian12", ALICE["none"], {"peers": "job-*"}, False),
        ("rocky9", ROOT, {"network": "ib"}, True),
    ]
    return [build_plan(facts(o, u, systemd=sd), make_choices(**c), CATALOG) for o, u, c, sd in cases]


def test_setup_script_passes_bash_n_and_shellcheck(tmp_path, monkeypatch):
    for i, plan in enumerate(plans(monkeypatch)):
        script = setup_script(plan)
        assert script.startswith("#!/usr/bin/env bash\n")
        path = tmp_path / f"setup{i}.sh"
        path.write_text(script)
        r = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        sc = shellcheck(script, tmp_path, f"sc{i}.sh")
        assert sc.returncode == 0, sc.stdout


def test_setup_script_holds_every_step_text_verbatim(monkeypatch):
    for plan in plans(monkeypatch):
        script = setup_script(plan)
        for n, step in enumerate(plan.steps, 1):
            assert step.run in script
            assert step.check in script
            if step.undo:
                assert step.undo in script
            assert f"# [{n}] {step.id}: {step.title}" in script
        assert f"TARGET_USER={plan.target.user}" in script
        assert ("WARNING: host keys are not checked" in script) == (plan.choices.host_keys == "off")


def test_bash_reads_back_exactly_the_step_texts(tmp_path, monkeypatch):
    """What bash gets out of the heredocs is byte for byte the rendered text."""
    for plan in plans(monkeypatch)[:3]:
        script = setup_script(plan)
        head = script[:script.rindex('if [ "${1:-}" = "--undo" ]; then')]
        wanted = [(f"{step.id} {part}", want) for step in plan.steps
                  for part, want in (("CHECK", step.check), ("RUN", step.run), ("UNDO", step.undo))]
        # one bash a plan: every text, NUL-ended (no step text holds a NUL)
        prog = head + "".join(f'printf "%s\\0" "$S{n}_{part}"\n'
                              for n in range(1, len(plan.steps) + 1)
                              for part in ("CHECK", "RUN", "UNDO"))
        r = subprocess.run(["bash", "-c", prog], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        got = r.stdout.split("\0")
        assert got[-1] == "" and len(got) == len(wanted) + 1
        for (what, want), text in zip(wanted, got):
            assert text == want, what


def test_heredoc_delimiter_in_a_step_is_refused():
    plan = harmless_plan_for("/nonexistent", extra_run="echo hi\nHPCWIZARD_STEP\necho bye")
    with pytest.raises(ValueError):
        setup_script(plan)


# --- run a harmless script for real ----------------------------------------------------------

def me() -> Target:
    pw = pwd.getpwuid(os.getuid())
    return Target(pw.pw_name, pw.pw_uid, pw.pw_gid, str(pw.pw_gid), pw.pw_dir)


def harmless_plan_for(base: str, extra_run: str = "") -> Plan:
    f1 = f"{base}/etc/demo.conf"
    f2 = f"{base}/home/.ssh/config"
    f3 = f"{base}/stamp"
    c1 = ops.file_call(f1, "Port 2345\nX 'quoted' $HOME\n", "0644")
    c2 = ops.block_call(f2, "Host node-*\n    Port 2345\n", "0600",
                        validate=f"grep -q 'Port 2345' {f2}")
    # root steps run as root directly, or through sudo -n: only as root here, else as user
    as_root = "root" if os.geteuid() == 0 else "user"
    steps = (
        Step("demo/file", "demo", "Write demo.conf", as_root, "file", ops.checked(c1), c1,
             ops.undo_call(c1)),
        Step("demo/block", "demo", "Add a block to the 'config' file", "user", "block",
             ops.checked(c2), c2, ops.undo_call(c2)),
        Step("demo/shell", "demo", "Touch a stamp", "user", "shell", f"test -e {f3}",
             f"touch {f3}" + (("\n" + extra_run) if extra_run else ""), f"rm -f {f3}"),
        Step("demo/keep", "demo", "A step with nothing to undo", "user", "shell",
             f"test -d {base}/kept", f"mkdir -p {base}/kept", "", note="kept on purpose"),
    )
    return Plan(make_choices(), me(), Recommendation("configure", ("test",)), steps,
                os_label="test")


def run_script(path, *args):
    # the operations' state beside the script, not in /var/lib/hpcwizard
    env = dict(os.environ, HW_STATE=str(Path(path).parent / "ops-state"))
    return subprocess.run(["bash", str(path), *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60, env=env)


def test_setup_script_runs_is_idempotent_and_undoes(tmp_path):
    base = tmp_path / "root"
    base.mkdir()
    (base / "home").mkdir()
    plan = harmless_plan_for(str(base))
    script = tmp_path / "setup.sh"
    script.write_text(setup_script(plan))

    first = run_script(script)
    assert first.returncode == 0, first.stderr
    assert (base / "etc/demo.conf").read_text() == "Port 2345\nX 'quoted' $HOME\n"
    assert "# BEGIN hpcwizard\nHost node-*\n    Port 2345\n# END hpcwizard\n" == \
        (base / "home/.ssh/config").read_text()
    assert (base / "stamp").exists() and (base / "kept").is_dir()
    lines = first.stdout.splitlines()
    assert lines[:4] == [f"[{n}] {s.title}" for n, s in enumerate(plan.steps, 1)]
    assert lines[-1] == "hpcwizard: done"

    snapshot = {p: p.read_bytes() for p in base.rglob("*") if p.is_file()}
    second = run_script(script)
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines() == [
        f"[{n}] {s.title}: already done" for n, s in enumerate(plan.steps, 1)
    ] + ["hpcwizard: done"]
    assert {p: p.read_bytes() for p in base.rglob("*") if p.is_file()} == snapshot

    undo = run_script(script, "--undo")
    assert undo.returncode == 0, undo.stderr
    assert undo.stdout.splitlines() == [
        "[4] A step with nothing to undo: nothing to undo",
        "[3] undo: Touch a stamp",
        "[2] undo: Add a block to the 'config' file",
        "[1] undo: Write demo.conf",
        "hpcwizard: undone",
    ]
    assert not (base / "etc/demo.conf").exists()
    assert not (base / "home/.ssh/config").exists()
    assert not (base / "stamp").exists()
    assert (base / "kept").is_dir()  # no undo: stays, as its note says
    assert not [p for p in base.rglob("*") if p.is_file()]


def test_setup_script_stops_at_a_failing_step(tmp_path):
    base = tmp_path / "root"
    base.mkdir()
    plan = harmless_plan_for(str(base), extra_run="false")
    script = tmp_path / "setup.sh"
    script.write_text(setup_script(plan))
    r = run_script(script)
    assert r.returncode != 0
    assert "[3] Touch a stamp" in r.stdout
    assert "[4]" not in r.stdout and "hpcwizard: done" not in r.stdout
    assert not (base / "kept").exists()


@pytest.mark.parametrize("fmt", ["setup", "launch"])
def test_a_script_tells_you_to_run_the_name_the_wizard_writes_it_as(fmt, tmp_path):
    """The wizard writes ./hpcwizard-setup.sh and ./hpcwizard-launch.sh: a line copied from
    the script's own comments must run that file, and launch.sh's usage names the file it
    runs as, whatever it was saved as."""
    from hpcwizard.screens.widgets import DEFAULT_PATHS
    from hpcwizard.session import write_export

    plan = build_plan(facts("debian12", ROOT), make_choices(), CATALOG)
    path = tmp_path / Path(DEFAULT_PATHS[fmt]).name
    write_export(plan, fmt, path)
    text = path.read_text()
    assert f"bash {path.name}" in text
    assert f"bash {fmt}.sh" not in text
    if fmt == "launch":
        renamed = tmp_path / "job.sh"
        for script in (path, renamed):
            if script == renamed:
                os.replace(path, renamed)
            shown = subprocess.run(["bash", str(script), "--help"], capture_output=True, text=True)
            assert (shown.stdout + shown.stderr).startswith(f"usage: {script.name} "), shown
