"""Bad input to the installed hpcwizard: exit status 2, one line on stderr, nothing changed
(/etc/ssh, the caller's ~/.ssh, the state directory). Needs no root; changes nothing."""
from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from pathlib import Path
from typing import Dict

import pytest

from _core_fixtures import wizard_exe

APPLY = ["apply", "--framework", "mpi", "--network", "tcp", "--manual", "--yes"]

CASES = {
    "port-0": APPLY + ["--ssh-port", "0"],
    "port-70000": APPLY + ["--ssh-port", "70000"],
    "port-abc": APPLY + ["--ssh-port", "abc"],
    "user-semicolon": APPLY + ["--user", "a;b"],
    "framework-foo": ["apply", "--framework", "foo", "--network", "tcp", "--manual", "--yes"],
    "undo-missing-record": ["undo", "{tmp}/no-such-record.toml", "--yes"],
}


def snapshot(*roots: Path) -> Dict[str, str]:
    """sha256 (and mode) of every file under roots; directories and links by name."""
    out: Dict[str, str] = {}
    for root in roots:
        if not root.exists():
            out[str(root)] = "absent"
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            out[dirpath] = "dir"
            for name in filenames:
                p = Path(dirpath, name)
                st = p.lstat()
                if stat.S_ISREG(st.st_mode):
                    try:
                        digest = hashlib.sha256(p.read_bytes()).hexdigest()
                    except PermissionError:  # not root: a private host key; its metadata
                        digest = f"unreadable {st.st_size} {st.st_mtime_ns}"
                    out[str(p)] = f"{stat.S_IMODE(st.st_mode):04o} {digest}"
                else:
                    out[str(p)] = f"{stat.S_IFMT(st.st_mode):o}"
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_exits_2_with_one_line_and_changes_nothing(case: str, tmp_path: Path) -> None:
    state = tmp_path / "state"
    roots = (Path("/etc/ssh"), Path.home() / ".ssh")
    before = snapshot(*roots)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in CASES[case]]
    proc = subprocess.run([wizard_exe(), *argv], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=60, cwd=str(tmp_path),
                          env=dict(os.environ, HPCWIZARD_STATE_DIR=str(state)))
    shown = f"\n$ hpcwizard {' '.join(argv)}\n--- stdout:\n{proc.stdout}\n--- stderr:\n{proc.stderr}"
    assert proc.returncode == 2, f"exit {proc.returncode}, expected 2{shown}"
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("hpcwizard: "), \
        f"stderr is not one 'hpcwizard: ...' line{shown}"
    assert "Traceback" not in proc.stderr + proc.stdout, shown
    assert snapshot(*roots) == before, f"bad input changed /etc/ssh or ~/.ssh{shown}"
    assert not state.exists(), f"bad input wrote to the state directory{shown}"


def test_a_node_rank_that_is_no_rank_is_refused_before_any_check(monkeypatch, capsys):
    """verify takes the launch script's answer to "which host is this" (the runtime library):
    NODE_RANK=5 among two hosts is one line and status 2 before a check runs, not a failure
    after the SSH checks."""
    from hpcwizard import cli

    ran = []
    monkeypatch.setattr("hpcwizard.commands.configure._plan", lambda *a, **k: ran.append("plan"))
    monkeypatch.setenv("NODE_RANK", "5")
    assert cli.main(["verify", "--framework", "mpi", "--network", "tcp",
                     "--hosts", "a,b"]) == 2
    err = capsys.readouterr().err
    assert err == "hpcwizard: NODE_RANK='5' is not 0..1\n" and ran == []
