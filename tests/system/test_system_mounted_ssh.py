"""Issue 30, system tests: an operator-mounted ~/.ssh. The MPI Operator mounts its SSH
Secret over root's ~/.ssh: kubelet's tmpfs (mode 1777, as tmpfs makes its root), a
timestamped directory of mode 0755 holding id_rsa, id_rsa.pub and authorized_keys (mode
0600 at /root/.ssh: the controller's defaultMode), '..data' a symlink to it and each name a
symlink through '..data' (kubelet's atomic writer). Here each namespace instance gets that
layout in a mount namespace of its own, with an ECDSA P-521 key in PEM as the controller
makes, and a private /run (so that every instance's sshd has its own /run/sshd.pid).

- the system sshd as apply configured it refuses the key (StrictModes), as in the issue's
  report: the failure is real;
- the worker command of the exported MPIJob (the image's sshd with its private copy of the
  keys) accepts it, with passwords still off in effect (sshd -T);
- mpirun from a launcher in that state runs an MPI all-reduce across three instances.

Root only, HPCWIZARD_SYSTEM_TESTS=1 (conftest.py skips otherwise)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import List

import pytest
import yaml

from _verify_cluster import PORT, VCluster, applied, show, wizard_exe
from hpcwizard import recipes
from hpcwizard.render.shell import KEYS_COPY, MOUNTED_KEYS, SSHD_KEYS_OPTION
from hpcwizard.verify import MPI_ALLREDUCE_C

pytestmark = pytest.mark.system

HOME = Path("/root")
TIMESTAMP = "..2026_12_03_22_45_00.1234567890"  # the name kubelet's atomic writer gives

# The Secret as kubelet mounts it at DIR, in this process's own mount namespace (the one
# `ip netns exec` made, whose mounts do not reach this machine), then ARGV.
MOUNT_SECRET_SH = r'''
set -eu
dir=$1 mode=$2 key=$3; shift 3
mount -t tmpfs -o mode=0755 tmpfs /run
mount -t tmpfs tmpfs "$dir"
mkdir "$dir/$TS"
chmod 0755 "$dir/$TS"
install -m "$mode" "$key" "$dir/$TS/id_rsa"
install -m "$mode" "$key.pub" "$dir/$TS/id_rsa.pub"
install -m "$mode" "$key.pub" "$dir/$TS/authorized_keys"
ln -s "$TS" "$dir/..data"
for f in id_rsa id_rsa.pub authorized_keys; do ln -s "..data/$f" "$dir/$f"; done
exec "$@"
'''

# The client's host-key settings are the image's system-wide files (unit-tested), not what
# this test is about: the launcher trusts the workers' host keys as the operator's image does.
CLIENT = ["-p", str(PORT), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
          "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=10"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    yield from applied(tmp_path_factory)


@pytest.fixture
def secret(tmp_path_factory) -> Path:
    """The operator's key pair (ssh-privatekey, ssh-publickey), in a directory every node
    reads; root's ~/.hpcwizard-sshd (the copies, on this machine's disk) removed after."""
    made = not (HOME / ".hpcwizard-sshd").exists()
    d = tmp_path_factory.mktemp("secret")
    d.chmod(0o755)
    key = d / "ssh-privatekey"
    gen = subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-b", "521", "-m", "PEM", "-N", "",
                          "-C", "", "-f", str(key)], capture_output=True, text=True)
    assert gen.returncode == 0, show(gen)
    assert "BEGIN EC PRIVATE KEY" in key.read_text()  # the controller's format
    yield key
    if made:
        shutil.rmtree(HOME / ".hpcwizard-sshd", ignore_errors=True)


def mounted(key: Path, argv: List[str], mode: str = "0600") -> List[str]:
    return ["env", f"TS={TIMESTAMP}", "bash", "-c", MOUNT_SECRET_SH, "mount-secret",
            str(HOME / ".ssh"), mode, str(key), *argv]


def worker_script(c: VCluster, env: dict) -> str:
    """The Worker's command of the exported MPIJob, with the image's script where this
    machine has it (the image puts recipes/mounted-keys.sh at MOUNTED_KEYS)."""
    path = c.tmp / "mpijob.yaml"
    proc = subprocess.run([wizard_exe(), "export", "--framework", "mpi", "--network", "tcp",
                           "--manual", "--format", "mpijob", "-o", str(path)], env=env,
                          text=True, capture_output=True, timeout=120)
    assert proc.returncode == 0, f"export failed{show(proc)}"
    doc = yaml.safe_load(path.read_text())
    worker = doc["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    script = worker["command"][2]
    assert MOUNTED_KEYS in script and " ".join(SSHD_KEYS_OPTION[1:]) in script, script
    helper = c.tmp / "mounted-keys"
    helper.write_text(recipes.read_text("mounted-keys.sh"))
    helper.chmod(0o755)
    return script.replace(MOUNTED_KEYS, str(helper))


def ssh(c: VCluster, key: Path, src: str, dst: str) -> subprocess.CompletedProcess:
    return c.run(src, mounted(key, ["ssh", *CLIENT, dst, "id -un; stat -c %a ~/.ssh"]),
                 timeout=60)


def test_strictmodes_refuses_the_secret_and_the_exported_worker_accepts_it(setup, secret):
    env = setup["env"]
    with VCluster(2) as c:
        layout = c.run("node1", mounted(secret, [
            "sh", "-c", "stat -c '%a %U' ~/.ssh; readlink ~/.ssh/authorized_keys ~/.ssh/..data; "
                        "stat -L -c %a ~/.ssh/id_rsa"]))
        assert layout.returncode == 0, show(layout)
        assert layout.stdout.split("\n")[:4] == [
            "1777 root", "..data/authorized_keys", TIMESTAMP, "600"], layout.stdout

        # apply's sshd, StrictModes on: the operator's key is refused, as in the report
        plain = c.start("node2", mounted(secret, [
            "sh", "-c", "install -d -m 0755 /run/sshd && exec /usr/sbin/sshd -D -e"]))
        c.wait_port("node2", PORT)
        refused = ssh(c, secret, "node1", "node2")
        assert refused.returncode != 0, show(refused)
        assert "Permission denied (publickey)" in refused.stderr, show(refused)
        assert ("Authentication refused: bad ownership or modes for directory /root/.ssh"
                in plain.log_text()), plain.log_text()
        c.stop(plain)

        # the exported MPIJob's worker: its sshd reads the private copy, StrictModes on
        script = worker_script(c, env)
        worker = c.start("node2", mounted(secret, ["bash", "-c", script]))
        c.wait_port("node2", PORT)
        ok = ssh(c, secret, "node1", "node2")
        assert ok.returncode == 0, f"{show(ok)}\n--- node2 sshd:\n{worker.log_text()}"
        assert ok.stdout.split() == ["root", "1777"], ok.stdout
        assert "Authentication refused" not in worker.log_text(), worker.log_text()
        copy = HOME / KEYS_COPY
        assert copy.read_text() == secret.with_suffix(".pub").read_text()
        assert (copy.stat().st_uid, oct(copy.stat().st_mode & 0o777)) == (0, "0o600")

    effective = subprocess.run(["/usr/sbin/sshd", "-T", *SSHD_KEYS_OPTION], capture_output=True,
                               text=True)
    assert effective.returncode == 0, show(effective)
    lines = set(effective.stdout.splitlines())
    assert {"passwordauthentication no", "kbdinteractiveauthentication no", "strictmodes yes",
            f"port {PORT}",
            "authorizedkeysfile .hpcwizard-sshd/authorized_keys .ssh/authorized_keys"} <= lines


def test_mpirun_across_three_instances_under_the_secret(setup, secret):
    env = setup["env"]
    with VCluster(3) as c:
        script = worker_script(c, env)
        workers = {n: c.start(n, mounted(secret, ["bash", "-c", script]))
                   for n in ("node2", "node3")}
        for n in workers:
            c.wait_port(n, PORT)
        src = c.tmp / "allreduce.c"
        src.write_text(MPI_ALLREDUCE_C)
        exe = c.tmp / "allreduce"
        cc = subprocess.run(["mpicc", "-o", str(exe), str(src)], capture_output=True, text=True)
        assert cc.returncode == 0, f"mpicc failed{show(cc)}"
        hostfile = c.tmp / "hostfile"  # as the operator writes /etc/mpi/hostfile
        hostfile.write_text("".join(f"{n} slots=1\n" for n in c.names))
        rsh = " ".join([*CLIENT, "-o", "ConnectionAttempts=10"])
        run = c.run("node1", mounted(secret, [
            "mpirun", "--allow-run-as-root", "--mca", "plm_rsh_args", rsh,
            "--mca", "btl_tcp_if_include", "eth0", "--mca", "oob_tcp_if_include", "eth0",
            "--hostfile", str(hostfile), str(exe)]), timeout=180)
        logs = "".join(f"\n--- {n} sshd:\n{d.log_text()}" for n, d in workers.items())
        assert run.returncode == 0, f"{show(run)}{logs}"
        assert "HPCWIZARD-MPI size=3 sum=3" in run.stdout, f"{show(run)}{logs}"
        assert "Authentication refused" not in logs, logs
