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
- mpirun from a launcher in that state runs an MPI all-reduce across three instances;
- a job user's own sshd, configured as the exported image's setup script writes it, under
  the Secret as mounted for a user (files 0644, root's): refused as it stands, accepted
  from the worker command;
- the image's script makes no copy where anyone but root and the user can have written the
  keys, and removes an old one.

Root only, HPCWIZARD_SYSTEM_TESTS=1 (conftest.py skips otherwise)."""
from __future__ import annotations

import pwd
import re
import shutil
import subprocess
from pathlib import Path
from typing import List

import pytest
import yaml

from _verify_cluster import PORT, VCluster, applied, show, wizard_exe
from test_apply_mpi_tcp import real_user
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


def mounted(key: Path, argv: List[str], mode: str = "0600", home: Path = HOME) -> List[str]:
    """argv under the Secret at home/.ssh: mode 0600 at /root/.ssh (the controller's
    defaultMode there), else Kubernetes' default, 0644."""
    return ["env", f"TS={TIMESTAMP}", "bash", "-c", MOUNT_SECRET_SH, "mount-secret",
            str(home / ".ssh"), mode, str(key), *argv]


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


def image_user_sshd(c: VCluster, env: dict, user: str) -> None:
    """user's own sshd as the image gets it: the configuration the exported image's setup
    script writes (its ssh/sshd-config step), and a host key where that names it."""
    out = c.tmp / "image"
    out.mkdir()
    proc = subprocess.run([wizard_exe(), "export", "--framework", "mpi", "--network", "tcp",
                           "--manual", "--user", user, "--format", "dockerfile", "-o",
                           str(out / "Dockerfile")], env=env, text=True, capture_output=True,
                          timeout=120)
    assert proc.returncode == 0, f"export failed{show(proc)}"
    setup = (out / "hpcwizard-setup.sh").read_text()
    found = re.search(r"^hw_sshd_config --config (\S+) [^\n]*<<'EOF'\n(.*?)\nEOF$", setup,
                      re.S | re.M)
    assert found, "no user sshd configuration in the image's setup script"
    path, text = Path(found.group(1)), found.group(2)
    host_key = re.search(r"^HostKey (\S+)$", text, re.M).group(1)
    pw = pwd.getpwnam(user)
    path.write_text(text + "\n")
    for argv in (["chown", f"{user}:", str(path)], ["chmod", "0600", str(path)],
                 ["install", "-d", "-m", "0700", "-o", user, "-g", str(pw.pw_gid),
                  str(Path(host_key).parent), str(Path(pw.pw_dir) / ".ssh")]):
        subprocess.run(argv, check=True)
    subprocess.run(["runuser", "-u", user, "--", "ssh-keygen", "-q", "-t", "ed25519", "-N", "",
                    "-f", host_key], check=True, capture_output=True)


def test_a_job_user_logs_in_through_the_secret(setup, secret):
    """A non-root job user (sshAuthMountPath its ~/.ssh, files 0644 and root's): its own sshd
    refuses the key as the image's configuration stands, and accepts it from the worker."""
    env = setup["env"]
    with real_user("hpcwmk") as user, VCluster(2) as c:
        home = Path(pwd.getpwnam(user).pw_dir)
        image_user_sshd(c, env, user)
        config = str(home / ".sshd_config")
        login = ["runuser", "-u", user, "--", "ssh", *CLIENT, f"{user}@node2",
                 "id -un; stat -c %a ~/.ssh"]

        plain = c.start("node2", mounted(secret, ["runuser", "-u", user, "--", "/usr/sbin/sshd",
                                                  "-D", "-e", "-f", config], "0644", home))
        c.wait_port("node2", PORT)
        refused = c.run("node1", mounted(secret, login, "0644", home))
        assert refused.returncode != 0 and "Permission denied" in refused.stderr, show(refused)
        assert (f"Authentication refused: bad ownership or modes for directory {home}/.ssh"
                in plain.log_text()), plain.log_text()
        c.stop(plain)

        worker = c.start("node2", mounted(secret, ["runuser", "-u", user, "--", "bash", "-c",
                                                   worker_script(c, env)], "0644", home))
        c.wait_port("node2", PORT)
        ok = c.run("node1", mounted(secret, login, "0644", home))
        assert ok.returncode == 0, f"{show(ok)}\n--- node2 sshd:\n{worker.log_text()}"
        assert ok.stdout.split() == [user, "1777"], ok.stdout
        assert "Authentication refused" not in worker.log_text(), worker.log_text()
        copy = home / KEYS_COPY
        st = copy.stat()
        assert (st.st_uid, oct(st.st_mode & 0o777)) == (pwd.getpwnam(user).pw_uid, "0o600")
        assert oct(copy.parent.stat().st_mode & 0o777) == "0o700"


# The image's script with a ~/.ssh that is not the operator's Secret as mounted: no copy
# (an old one removed). (what is changed after the mount, the exit status, what stderr names)
ODD = {
    "another user's file in it": ("touch ~/.ssh/planted && chown nobody ~/.ssh/planted",
                                  1, "planted, owned or writable by another user"),
    "no sticky bit": ("chmod 0777 ~/.ssh", 1, "has no sticky bit"),
    "a key file others may write": ("chmod 0666 ~/.ssh/..data/authorized_keys", 1,
                                    "writable by another user"),
    "an ordinary private ~/.ssh": ("chmod 0700 ~/.ssh", 0, ""),
}


@pytest.mark.parametrize("case", sorted(ODD))
def test_the_copy_is_made_only_when_no_one_else_can_have_written_the_keys(case, setup, secret,
                                                                           tmp_path):
    """(setup: apply made /root/.ssh, the mount point)"""
    change, status, said = ODD[case]
    helper = tmp_path / "mounted-keys"
    helper.write_text(recipes.read_text("mounted-keys.sh"))
    helper.chmod(0o755)
    copy = HOME / KEYS_COPY
    copy.parent.mkdir(mode=0o700, exist_ok=True)
    copy.write_text("a copy from before\n")  # a stale copy is never left to be read
    run = subprocess.run(["unshare", "--mount", "--propagation", "private", *mounted(secret, [
        "bash", "-c", f'{change} && exec "$0" {KEYS_COPY}', str(helper)])],
        capture_output=True, text=True, timeout=60)
    assert run.returncode == status, show(run)
    assert said in run.stderr, show(run)
    assert not copy.exists(), show(run)
