"""The settings promised are the ones in effect (issue 14), on an image that already has sshd
drop-ins of its own: Fedora's 01-permitrootlogin.conf (PermitRootLogin yes), Ubuntu cloud
images' 50-cloud-init.conf (PasswordAuthentication yes) and one that adds Port 22. sshd keeps
the first value it reads, so the old 50-hpcwizard.conf lost to the first two: sshd -T said
passwords on, root by password, while verify said PASS.

After `hpcwizard apply` (root, MPI over TCP): `sshd -T` gives the promised values, the running
sshd listens on 2222 and refuses a password, verify's own checks of what is in effect pass;
and undo restores every byte under /etc/ssh, /root/.ssh and /var/lib/hpcwizard, stops the
sshd it started and leaves the packages as they were."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from _hardening import RecordedRuns, package_list, packages_installed
from test_apply_mpi_tcp import PORT, diff, listening, load, show, snapshot, step_table

ROOTS = (Path("/etc/ssh"), Path("/root/.ssh"), Path("/var/lib/hpcwizard"))
CHOICES = ["--framework", "mpi", "--network", "tcp", "--manual"]
IMAGE_DROPINS = {"01-permitrootlogin.conf": "PermitRootLogin yes\n",
                 "50-cloud-init.conf": "PasswordAuthentication yes\n",
                 "20-port22.conf": "Port 22\n"}


@pytest.fixture(scope="module")
def installed() -> None:
    yield from packages_installed()


@pytest.fixture
def image_dropins(installed: None):
    d = Path("/etc/ssh/sshd_config.d")
    for name in IMAGE_DROPINS:
        assert not (d / name).exists(), f"{d / name} is there already"
    for name, text in IMAGE_DROPINS.items():
        (d / name).write_text(text)
    yield
    for name in IMAGE_DROPINS:
        (d / name).unlink(missing_ok=True)


def sshd_T() -> dict:
    proc = subprocess.run(["/usr/sbin/sshd", "-T"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    out: dict = {}
    for line in proc.stdout.splitlines():
        key, _sep, value = line.partition(" ")
        out.setdefault(key, []).append(value)
    return out


def test_apply_wins_over_the_images_dropins_and_undo_restores_them(image_dropins, tmp_path):
    runs = RecordedRuns(tmp_path)
    subprocess.run(["install", "-d", "-m", "0755", "/run/sshd"], check=True)
    assert sshd_T()["passwordauthentication"] == ["yes"]  # the image's, as it starts
    before, packages = snapshot(*ROOTS), package_list()
    rec = runs.state / "dropins.toml"
    runs.records.append(rec)
    try:
        proc = runs.run("apply", *CHOICES, "--yes", "--record", str(rec))
        assert proc.returncode == 0, f"{show(proc)}\n{runs.log(rec)}"
        data = load(rec)
        assert data["status"] == "done", step_table(data)
        assert Path("/etc/ssh/sshd_config.d/00-hpcwizard.conf").exists()

        effective = sshd_T()
        assert str(PORT) in effective["port"], effective["port"]
        assert effective["passwordauthentication"] == ["no"]
        assert effective["kbdinteractiveauthentication"] == ["no"]
        assert effective["permitrootlogin"][0] in ("prohibit-password", "without-password")
        assert listening(PORT)
        # what the running sshd offers: publickey only, no password
        ssh = subprocess.run(["ssh", "-p", str(PORT), "-o", "BatchMode=yes",
                              "-o", "PreferredAuthentications=password",
                              "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                              "root@127.0.0.1", "true"], capture_output=True, text=True, timeout=60)
        assert ssh.returncode == 255 and "Permission denied (publickey)" in ssh.stderr, ssh.stderr

        verify = runs.run("verify", "--record", str(rec), "--here", "--json")
        import json

        checks = {c["id"]: c["status"] for c in json.loads(verify.stdout)["checks"]}
        assert checks["here/sshd-settings"] == "pass" and checks["here/ssh-settings"] == "pass", \
            show(verify)
    finally:
        problems = runs.undo_all()
    assert not problems, "".join(problems)
    after = snapshot(*ROOTS)
    assert after == before, f"after undo:\n{diff(before, after)}"
    assert package_list() == packages
    assert not listening(PORT)
    assert sshd_T()["passwordauthentication"] == ["yes"]  # the image's own again
