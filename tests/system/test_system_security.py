"""Issue 6, security, after real applies (root: the system sshd; a user the test makes: a
per-user sshd on port 2223):

- no private key material in any artefact: the records, the logs, every export (setup,
  Dockerfile and its companion files, launch) for both targets, plan, plan --json, detect,
  and the TUI's screens (System, Choose, Recommend, Review, rendered from this machine's
  facts) — grep for "PRIVATE KEY";
- the modes sshd requires: ~/.ssh 700, keys, authorized_keys and the client files 600, the
  sshd drop-in 644 (the per-user ~/.sshd_config 600), host keys 600;
- sshd never allows passwords, and root only with a key: `sshd -T` (and `sshd -T -f
  ~/.sshd_config` as the user) says passwordauthentication no, kbdinteractiveauthentication
  no, permitrootlogin without-password (the user's sshd: no);
- records and logs readable by their owner alone (0600, their directory 0700).
Then both records are undone: /etc/ssh, /root/.ssh and the packages are as before.
"""
from __future__ import annotations

import asyncio
import html
import os
import pwd
import re
import stat
import subprocess
from pathlib import Path
from typing import Dict, List

import pytest

from _hardening import package_list
from test_apply_mpi_tcp import diff, real_user, show, snapshot, wizard_exe

pytestmark = pytest.mark.system

USER = "hpcwtest6"
ROOTS = (Path("/etc/ssh"), Path("/root/.ssh"), Path("/var/lib/hpcwizard"))
MPI_TCP = ["--framework", "mpi", "--network", "tcp"]
FIGURES: Dict[str, int] = {}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def sshd_settings(argv: List[str]) -> Dict[str, str]:
    proc = subprocess.run(argv, capture_output=True, text=True)
    assert proc.returncode == 0, show(proc)
    return dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)


def tui_text(tmp: Path) -> Dict[str, str]:
    """System, Choose, Recommend and Review of the wizard on this machine's facts, as text."""
    from hpcwizard.screens.app import WizardApp

    app = WizardApp(state_dir=tmp / "tui-state")
    seen: Dict[str, str] = {}

    def text() -> str:
        return html.unescape(re.sub(r"<[^>]+>", "", app.export_screenshot())).replace("\xa0", " ")

    async def until(pilot, name: str) -> None:
        for _ in range(500):
            if type(app.screen).__name__ == name:
                break
            await pilot.pause(0.02)
        await pilot.pause(0.2)
        seen[name] = text()

    async def go() -> None:
        async with app.run_test(size=(100, 60)) as pilot:
            await until(pilot, "SystemScreen")
            await pilot.press("enter")
            await until(pilot, "ChooseScreen")
            await pilot.press("ctrl+n")
            await until(pilot, "RecommendScreen")
            await pilot.press("c")
            await until(pilot, "ReviewScreen")

    asyncio.run(go())
    return seen


@pytest.fixture
def test_user() -> str:
    with real_user(USER) as name:
        yield name


def test_no_key_material_modes_and_sshd_settings(tmp_path: Path, test_user: str) -> None:
    state = tmp_path / "state"
    env = dict(os.environ, HPCWIZARD_STATE_DIR=str(state))
    home = Path(pwd.getpwnam(test_user).pw_dir)

    def wiz(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([wizard_exe(), *args], capture_output=True, text=True, env=env,
                              cwd=str(tmp_path), stdin=subprocess.DEVNULL, timeout=600)

    before, packages = snapshot(*ROOTS), package_list()
    records: List[Path] = []
    try:
        # 1. real applies: root (packages, the system sshd), then the user (per-user sshd)
        root_rec, user_rec = state / "records" / "root.toml", state / "records" / "user.toml"
        records.append(root_rec)
        r1 = wiz("apply", *MPI_TCP, "--manual", "--yes", "--record", str(root_rec))
        assert r1.returncode == 0, f"root apply failed{show(r1)}"
        records.append(user_rec)
        r2 = wiz("apply", *MPI_TCP, "--manual", "--yes", "--user", test_user, "--ssh-port",
                 "2223", "--record", str(user_rec))
        assert r2.returncode == 0, f"user apply failed{show(r2)}"
        outputs = {"apply root": r1.stdout + r1.stderr, "apply user": r2.stdout + r2.stderr}

        # 2. the modes sshd requires
        modes = {Path("/root/.ssh"): 0o700, home / ".ssh": 0o700,
                 Path("/etc/ssh/sshd_config.d/00-hpcwizard.conf"): 0o644,
                 home / ".sshd_config": 0o600,
                 home / ".ssh/hpcwizard_host_ed25519_key": 0o600}
        for d in (Path("/root/.ssh"), home / ".ssh"):
            for name in ("id_ed25519", "authorized_keys", "config", "known_hosts"):
                modes[d / name] = 0o600
        for key in Path("/etc/ssh").glob("ssh_host_*_key"):
            modes[key] = 0o600
        wrong = {str(p): f"{mode(p):o} (want {m:o})" for p, m in modes.items() if mode(p) != m}
        assert not wrong, f"modes: {wrong}"
        assert all(pwd.getpwuid(p.stat().st_uid).pw_name == test_user
                   for p in (home / ".ssh", home / ".ssh/id_ed25519", home / ".sshd_config"))
        FIGURES["modes"] = len(modes)

        # 3. records and logs: the owner alone
        for rec in (root_rec, user_rec):
            assert mode(rec) == 0o600 and mode(rec.with_suffix(".log")) == 0o600, rec
        assert mode(state / "records") == 0o700

        # 4. sshd: keys only, root by key only
        subprocess.run(["install", "-d", "-m", "0755", "/run/sshd"], check=True)
        system = sshd_settings(["/usr/sbin/sshd", "-T"])
        assert system.get("passwordauthentication") == "no", system
        assert system.get("kbdinteractiveauthentication") == "no", system
        assert system.get("permitrootlogin") in ("without-password", "prohibit-password"), system
        assert system.get("port") == "2222", system
        per_user = sshd_settings(["runuser", "-u", test_user, "--", "/usr/sbin/sshd", "-T",
                                  "-f", str(home / ".sshd_config")])
        assert per_user.get("passwordauthentication") == "no", per_user
        assert per_user.get("kbdinteractiveauthentication") == "no", per_user
        assert per_user.get("permitrootlogin") == "no", per_user

        # 5. no private key material in any artefact
        artefacts: Dict[str, str] = dict(outputs)
        for rec in (root_rec, user_rec):
            artefacts[str(rec)] = rec.read_text()
            artefacts[str(rec.with_suffix(".log"))] = rec.with_suffix(".log").read_text()
        for who in ([], ["--user", test_user, "--ssh-port", "2223"]):
            for fmt in ("setup", "dockerfile", "launch"):
                out_dir = tmp_path / f"export-{fmt}-{len(who)}"
                out_dir.mkdir()
                ex = wiz("export", *MPI_TCP, *who, "--format", fmt, "-o", str(out_dir / fmt))
                assert ex.returncode == 0, show(ex)
                for f in out_dir.iterdir():
                    artefacts[str(f)] = f.read_text()
            for args in (["plan", *MPI_TCP, *who], ["plan", *MPI_TCP, *who, "--json"]):
                p = wiz(*args)
                artefacts[" ".join(args)] = p.stdout + p.stderr
        artefacts["detect --json"] = wiz("detect", "--json").stdout
        for name, text in tui_text(tmp_path).items():
            artefacts[f"TUI {name}"] = text
        assert len(artefacts) >= 20
        leaks = [name for name, text in artefacts.items() if "PRIVATE KEY" in text]
        assert not leaks, f"private key material in: {leaks}"
        assert all(k in artefacts for k in ("TUI SystemScreen", "TUI ReviewScreen"))
        FIGURES["artefacts"] = len(artefacts)
    finally:
        problems = []
        for rec in reversed(records):
            if rec.exists():
                u = wiz("undo", str(rec), "--yes")
                if u.returncode != 0:
                    problems.append(show(u))
    assert not problems, "undo failed" + "".join(problems)
    after = snapshot(*ROOTS)
    assert after == before, f"after undo:\n{diff(before, after)}"
    assert package_list() == packages, "undo did not restore the packages"
