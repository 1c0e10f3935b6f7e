"""A ~/.ssh the platform provides (Kubeflow MPIJob's and Volcano's Secret mounts), found from
/proc/self/mountinfo text and from whether the directory can be written."""
from __future__ import annotations

from hpcwizard.detect.ssh_dir import mounts_under, platform_of, ssh_dir_of

# As a pod with an MPIJob's Secret at /root/.ssh shows it (the kubelet mounts Secrets as
# tmpfs, read-only), beside the overlay root and a subPath mount of one file elsewhere.
POD_MOUNTINFO = """\
2330 2190 0:214 / / rw,relatime master:790 - overlay overlay rw,lowerdir=/var/lib/l/1,upperdir=/var/lib/u,workdir=/var/lib/w
2331 2330 0:217 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
2342 2330 0:212 / /root/.ssh ro,relatime - tmpfs tmpfs rw,size=1048576k,inode64
2343 2330 253:1 /var/lib/kubelet/pods/p/volumes/kubernetes.io~configmap/mpi-job-config/hostfile /etc/mpi/hostfile ro,relatime - ext4 /dev/vda1 rw
"""

# Volcano's ssh plugin with files mounted one by one (subPath), and a home with a space.
SUBPATH_MOUNTINFO = """\
40 30 253:1 /secret/id_rsa /home/mpi\\040user/.ssh/id_rsa ro,relatime - ext4 /dev/vda1 rw
41 30 253:1 /secret/config /home/mpi\\040user/.ssh/config ro,relatime - ext4 /dev/vda1 rw
42 30 253:1 /other /home/mpi\\040user/.sshx rw,relatime - ext4 /dev/vda1 rw
"""


def test_a_read_only_secret_at_ssh_is_the_platforms():
    assert mounts_under(POD_MOUNTINFO, "/root/.ssh") == [("/root/.ssh", "tmpfs", True)]
    d = ssh_dir_of("/root", POD_MOUNTINFO, writable=False,
                   present=("authorized_keys", "id_rsa"), env={"K_MPI_JOB_ROLE": "worker"})
    assert d.provided and d.read_only
    assert d.mounted == "/root/.ssh (tmpfs, read-only)"
    assert d.platform == "Kubeflow MPIJob"
    assert d.files == ("authorized_keys", "id_rsa")


def test_files_mounted_one_by_one_are_found_and_escapes_read():
    mounts = mounts_under(SUBPATH_MOUNTINFO, "/home/mpi user/.ssh")
    # .sshx is another directory, not inside .ssh
    assert [m[0] for m in mounts] == ["/home/mpi user/.ssh/config", "/home/mpi user/.ssh/id_rsa"]
    d = ssh_dir_of("/home/mpi user", SUBPATH_MOUNTINFO, writable=True, present=(),
                   env={"VC_WORKER_HOSTS": "w-0,w-1"})
    # the directory itself can be written, but its files are the platform's
    assert d.provided and not d.read_only and d.platform == "Volcano"


def test_an_ordinary_home_is_not_provided():
    d = ssh_dir_of("/root", POD_MOUNTINFO.replace("/root/.ssh", "/data"), writable=True,
                   present=("id_ed25519",), env={"VC_TASK_INDEX": "0"})
    assert not d.provided and d.mounted == "" and d.platform == ""


def test_a_directory_this_user_cannot_write_is_provided_without_a_mount():
    d = ssh_dir_of("/home/u", "", writable=False, present=(), env={})
    assert d.provided and d.read_only and d.mounted == ""


def test_no_directory_yet_is_not_provided():
    assert not ssh_dir_of("/home/u", None, writable=None, present=(), env={}).provided


def test_platforms_are_named_from_their_own_variables():
    assert platform_of({"K_MPI_JOB_ROLE": "launcher"}) == "Kubeflow MPIJob"
    assert platform_of({"VC_MASTER_HOSTS": "m-0"}) == "Volcano"
    assert platform_of({"VC_TASK_INDEX": "1"}) == "Volcano"
    assert platform_of({"HOSTS": "a,b"}) == ""


# --- what the plan does with it -------------------------------------------------------------

import dataclasses  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402

from hpcwizard.catalog import load_catalog  # noqa: E402
from hpcwizard.choices import make_choices  # noqa: E402
from hpcwizard.facts import SshDir, UserInfo  # noqa: E402
from hpcwizard.plan import build_plan  # noqa: E402

from _core_fixtures import ROOT, facts  # noqa: E402

MPIJOB_DIR = SshDir(path="/root/.ssh", mounted="/root/.ssh (tmpfs, read-only)", read_only=True,
                    platform="Kubeflow MPIJob", files=("authorized_keys", "id_rsa"))
WRITES_INTO_SSH = {"ssh/user-key", "ssh/authorized-keys", "ssh/client-config", "ssh/known-hosts"}


def mpi_plan(ssh_dir: SshDir, user: UserInfo = ROOT, **choices):
    f = dataclasses.replace(facts("debian12", user), ssh_dir=ssh_dir)
    return build_plan(f, make_choices(framework="mpi", network="tcp", mode="manual", **choices),
                      load_catalog(), env={})


def test_a_provided_ssh_dir_gets_nothing_written_and_sshd_serves_the_platforms_port():
    ours = {s.id for s in mpi_plan(SshDir(path="/root/.ssh")).steps}
    assert WRITES_INTO_SSH <= ours  # an ordinary ~/.ssh: the usual steps
    plan = mpi_plan(MPIJOB_DIR)
    ids = {s.id for s in plan.steps}
    assert not ids & WRITES_INTO_SSH, ids
    assert {"ssh/sshd-config", "ssh/sshd-start"} <= ids
    (config,) = [s for s in plan.steps if s.id == "ssh/sshd-config"]
    assert "Port 2222" in config.run and "\nPort 22\n" in config.run
    (warning,) = [w for w in plan.warnings if "/root/.ssh is provided" in w]
    assert "Kubeflow MPIJob" in warning and "authorized_keys, id_rsa" in warning
    assert "port 22" in warning


def test_volcanos_config_names_the_port_sshd_must_also_serve():
    volcano = dataclasses.replace(MPIJOB_DIR, platform="Volcano", client_port=2200,
                                  files=("authorized_keys", "config", "id_rsa"))
    (config,) = [s for s in mpi_plan(volcano).steps if s.id == "ssh/sshd-config"]
    assert "\nPort 2200\n" in config.run and "\nPort 22\n" not in config.run
    # the platform's port is the plan's already: nothing more to serve
    (config,) = [s for s in mpi_plan(volcano, ssh_port=2200).steps if s.id == "ssh/sshd-config"]
    assert config.run.count("Port 2200") == 1


def test_a_users_provided_ssh_dir_gets_their_own_sshd_a_directory_beside_it():
    user = UserInfo(name="alice", uid=1000, gid=1000, home="/home/alice", sudo="nopasswd")
    # root's ~/.ssh being the platform's says nothing of alice's
    assert WRITES_INTO_SSH <= {s.id for s in mpi_plan(MPIJOB_DIR, user=user).steps}
    mine = dataclasses.replace(MPIJOB_DIR, path="/home/alice/.ssh")
    plan = mpi_plan(mine, user=user)
    assert not {s.id for s in plan.steps} & WRITES_INTO_SSH
    (warning,) = [w for w in plan.warnings if "is provided" in w]
    assert "alice's own sshd keeps its host key and pid file in /home/alice/.hpcwizard-sshd" in warning
    # and nothing of the plan writes into the provided directory
    for step in plan.steps:
        assert "/home/alice/.ssh/" not in step.run.replace("/home/alice/.ssh/authorized_keys", ""), \
            (step.id, step.run)
    (config,) = [s for s in plan.steps if s.id == "ssh/sshd-config"]
    assert "HostKey /home/alice/.hpcwizard-sshd/hpcwizard_host_ed25519_key" in config.run
    assert "PidFile /home/alice/.hpcwizard-sshd/sshd.pid" in config.run
    assert "AuthorizedKeysFile .ssh/authorized_keys" in config.run  # the platform's keys


def test_the_port_a_client_config_names():
    from hpcwizard.detect.ssh_dir import first_port

    assert first_port("StrictHostKeyChecking no\nHost w-0\n  HostName w-0.job\n  Port 2200\n") == 2200
    assert first_port("Port=2022\n") == 2022
    assert first_port("Host x\n  Port \u0662\u0662\n  Port 70000\n") == 0


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                    reason="needs root and unshare: a read-only tmpfs is mounted at /root/.ssh "
                           "in a mount namespace of its own")
def test_a_read_only_mount_at_root_ssh_is_found_and_planned_for(tmp_path):
    """As in an MPIJob's pod: /root/.ssh a read-only tmpfs holding the platform's keys,
    in a mount namespace of this test's own (a missing /root/.ssh is made as the mount point
    and removed again)."""
    script = f"""
set -e
mount -t tmpfs -o size=1m tmpfs /root/.ssh
printf 'ssh-ed25519 AAAA platform\\n' > /root/.ssh/authorized_keys
printf 'key\\n' > /root/.ssh/id_rsa
mount -o remount,ro /root/.ssh
K_MPI_JOB_ROLE=worker {sys.executable} -m hpcwizard detect --json > {tmp_path}/facts.json
K_MPI_JOB_ROLE=worker {sys.executable} -m hpcwizard plan --framework mpi --network tcp --manual --peers 'w-*' > {tmp_path}/plan.txt
"""
    made = not os.path.exists("/root/.ssh")
    if made:  # a mount point is needed; it goes again below
        os.mkdir("/root/.ssh", 0o700)
    try:
        proc = subprocess.run(["unshare", "-m", "--propagation", "private", "bash", "-c", script],
                              capture_output=True, text=True, timeout=120)
    finally:
        if made:
            os.rmdir("/root/.ssh")
    assert proc.returncode == 0, proc.stderr
    d = json.loads((tmp_path / "facts.json").read_text())["ssh_dir"]
    assert d["read_only"] and d["platform"] == "Kubeflow MPIJob"
    assert d["mounted"] == "/root/.ssh (tmpfs, read-only)"
    assert d["files"] == ["authorized_keys", "id_rsa"]
    plan = (tmp_path / "plan.txt").read_text()
    assert "/root/.ssh is provided by Kubeflow MPIJob" in plan
    assert "authorized_keys" not in plan.split("/root/.ssh is provided")[0]
    assert "hw_ssh_key" not in plan and ".ssh/config" not in plan
    # the mount stayed in its namespace, and /root/.ssh is as it was
    assert not os.path.ismount("/root/.ssh") and os.path.exists("/root/.ssh") != made


def test_verify_does_not_hold_a_provided_ssh_dir_to_settings_it_never_wrote():
    from hpcwizard.hosts import Hosts
    from hpcwizard.verify import SKIP, verify

    from _verify_fixtures import FakeSystem

    f = dataclasses.replace(facts("debian12", ROOT), ssh_dir=MPIJOB_DIR)
    plan = mpi_plan(MPIJOB_DIR)
    report = verify(plan, f, Hosts(("node1",), "--hosts"), system=FakeSystem({"node1": "ok"}))
    check = {c.id: c for c in report.checks}["here/ssh-settings"]
    assert check.status == SKIP and "the platform provides ~/.ssh" in check.detail
