"""Issue 18, Slurm for real: Debian's slurm-wlm (slurmctld, slurmd, munge) across three network
namespace instances on this machine, each slurmd with its own node and host name, spool
directory, pid and log file, and a batch job from `hpcwizard export --format sbatch` that runs
an MPI hello world (built with mpicc; its ranks sum their numbers with MPI_Allreduce, so that
singletons would show) and `hostname` on the three nodes: once as the script chooses (srun
--mpi=pmix where this Slurm has PMIx) and once with mpirun over the allocation.

The test installs what is missing (slurmctld slurmd slurm-client munge openmpi-bin
libopenmpi-dev) with services kept from starting (policy-rc.d), runs munged and the Slurm
daemons itself (one munged: its socket is a path, reached from every namespace), and takes
everything back: daemons stopped by their pids, the packages it installed purged, the users
they added removed. Root only, HPCWIZARD_SYSTEM_TESTS=1 (conftest.py skips otherwise)."""
from __future__ import annotations

import os
import pwd
import grp
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from netns import Cluster
from _verify_cluster import show, wait_for_other_system_tests, wizard_exe

pytestmark = pytest.mark.system

PACKAGES = ["slurmctld", "slurmd", "slurm-client", "munge", "openmpi-bin", "libopenmpi-dev"]
POLICY = Path("/usr/sbin/policy-rc.d")
MUNGE_RUN = Path("/run/munge")

HELLO_C = r"""
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank, size, len, sum = 0;
    char name[MPI_MAX_PROCESSOR_NAME];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_processor_name(name, &len);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("hello rank %d of %d on %s sum %d\n", rank, size, name, sum);
    MPI_Finalize();
    return 0;
}
"""


def _installed() -> set:
    out = subprocess.run(["dpkg-query", "-W", "-f", "${db:Status-Status} ${Package}\n"],
                         capture_output=True, text=True).stdout
    return {line.split()[1] for line in out.splitlines() if line.startswith("installed ")}


def _apt(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    return subprocess.run(["apt-get", "-y", "-q", "-o", "DPkg::Lock::Timeout=300", *args],
                          env=env, capture_output=True, text=True, timeout=1200,
                          stdin=subprocess.DEVNULL)


def _names(db) -> set:
    return {e[0] for e in db()}


@pytest.fixture(scope="module")
def slurm_packages():
    """What of PACKAGES is missing, installed with no service started; purged afterwards
    with everything that came with it, and the users and groups it added."""
    wait_for_other_system_tests()
    before, users, groups = _installed(), _names(pwd.getpwall), _names(grp.getgrall)
    made_policy = not POLICY.exists()
    if made_policy:  # Debian's invoke-rc.d: 101 = the action is not allowed (no daemon starts)
        POLICY.write_text("#!/bin/sh\nexit 101\n")
        POLICY.chmod(0o755)
    try:
        missing = [p for p in PACKAGES if p not in before]
        if missing:
            upd = _apt("update")
            assert upd.returncode == 0, f"apt-get update failed{show(upd)}"
            inst = _apt("install", "--no-install-recommends", *missing)
            assert inst.returncode == 0, f"apt-get install failed{show(inst)}"
        yield
    finally:
        new = sorted(_installed() - before)
        if new:
            purge = _apt("purge", *new)
            assert purge.returncode == 0, f"apt-get purge failed{show(purge)}"
        for user in sorted(_names(pwd.getpwall) - users):
            subprocess.run(["userdel", user], capture_output=True)
        for group in sorted(_names(grp.getgrall) - groups):
            subprocess.run(["groupdel", group], capture_output=True)
        if made_policy:
            POLICY.unlink(missing_ok=True)


def _slurm_conf(c: Cluster, tmp: Path) -> str:
    head = c.names[0]
    lines = [
        "ClusterName=hpcwizard",
        f"SlurmctldHost={head}({c.ip(head)})",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"StateSaveLocation={tmp}/ctld",
        # each slurmd its own spool, pid and log file: the namespaces share the file system
        f"SlurmdSpoolDir={tmp}/spool-%n",
        f"SlurmdPidFile={tmp}/slurmd-%n.pid",
        f"SlurmdLogFile={tmp}/slurmd-%n.log",
        f"SlurmctldPidFile={tmp}/slurmctld.pid",
        f"SlurmctldLogFile={tmp}/slurmctld.log",
        "SlurmctldPort=6817",
        "SlurmdPort=6818",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "MpiDefault=none",
        "ReturnToService=2",
        "SlurmdParameters=config_overrides",
        "SlurmdTimeout=60",
        "InactiveLimit=0",
        "KillWait=5",
    ]
    lines += [f"NodeName={n} NodeAddr={c.ip(n)} CPUs=2 State=UNKNOWN" for n in c.names]
    lines.append(f"PartitionName=debug Nodes={','.join(c.names)} Default=YES "
                 "MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def on(c: Cluster, tmp: Path, node: str, argv: "list[str]") -> "list[str]":
    """argv on node with the node's own /run/munge (a bind mount in the mount namespace of
    that one command): a munged a node, as on real machines. One munged for all would see
    the credential of a job step decoded on two nodes as replayed, and refuse it. And the
    node's own /tmp: Slurm's PMIx plugin makes /tmp/spmix_appdir_<uid>_<step> on each node."""
    return ["sh", "-c", 'mount --bind "$0" /run/munge && mount --bind "$1" /tmp && shift && '
            'exec "$@"', str(tmp / f"munge-{node}"), str(tmp / f"tmp-{node}"), *argv]


def _munge_key() -> None:
    key = Path("/etc/munge/munge.key")
    if not key.exists():  # the package makes one; make it when it did not
        subprocess.run(["mungekey", "--create", "--keyfile", str(key)], check=True)
        shutil.chown(key, "munge", "munge")
        key.chmod(0o400)


def _start_munged(c: Cluster, tmp: Path, node: str) -> None:
    d = tmp / f"munge-{node}"
    subprocess.run(["install", "-d", "-o", "munge", "-g", "munge", "-m", "0755", str(d)],
                   check=True)
    # setpriv execs munged itself: the pid in its pid file is the one stopped
    c.start(node, on(c, tmp, node, [
        "setpriv", "--reuid", "munge", "--regid", "munge", "--init-groups", "/usr/sbin/munged",
        "--foreground", "--pid-file=/run/munge/munged.pid", "--seed-file=/run/munge/seed"]),
        str(d / "munged.pid"))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if c.run(node, on(c, tmp, node, ["munge", "-n"])).returncode == 0:
            return
        time.sleep(0.2)
    logs = "".join(d.log_text() for d in c.daemons if d.node == node)
    raise AssertionError(f"munged on {node} did not answer within 30 s: {logs}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_idle(c: Cluster, tmp: Path, env: dict, timeout: float = 90) -> str:
    deadline = time.monotonic() + timeout
    states = ""
    while time.monotonic() < deadline:
        proc = c.run(c.names[0], on(c, tmp, c.names[0], ["sinfo", "-h", "-N", "-o", "%N %T"]),
                     env=env)
        states = proc.stdout + proc.stderr
        seen = dict(line.split()[:2] for line in proc.stdout.splitlines() if len(line.split()) >= 2)
        if proc.returncode == 0 and all(seen.get(n) == "idle" for n in c.names):
            return states
        time.sleep(0.5)
    logs = "".join(f"\n--- {d.node}: {d.log_text()[-2000:]}" for d in c.daemons)
    files = "".join(f"\n--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
                    for p in sorted(Path(env["SLURM_CONF"]).parent.glob("*.log")))
    raise AssertionError(f"the slurmd's are not all idle after {timeout:.0f}s:\n{states}"
                         f"{logs}{files}")


def _job(c: Cluster, env: dict, tmp: Path, script: Path, program: Path, tag: str,
         launcher: str = "") -> str:
    job_env = dict(env)
    if launcher:
        job_env["MPI_LAUNCHER"] = launcher
    proc = c.run(c.names[0], on(c, tmp, c.names[0], [
        "sbatch", "--wait", "--nodes=3", f"--chdir={tmp}", f"--output={tmp}/{tag}-%j.out",
        str(script), str(program)]), env=job_env, timeout=300, cwd=str(tmp))
    outs = sorted(tmp.glob(f"{tag}-*.out"))
    text = outs[-1].read_text(errors="replace") if outs else ""
    logs = "".join(f"\n--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                   for p in sorted(tmp.glob("*.log")))
    assert proc.returncode == 0, f"sbatch {tag} failed{show(proc)}\n--- job output\n{text}{logs}"
    return text


def _check(text: str, names) -> None:
    hosts = sorted(line.split()[1] for line in text.splitlines() if line.startswith("host "))
    assert hosts == sorted(names), text
    hello = sorted(line for line in text.splitlines() if line.startswith("hello "))
    assert len(hello) == 3, text
    ranks = sorted(int(line.split()[2]) for line in hello)
    assert ranks == [0, 1, 2], text  # singletons would all be rank 0 of 1
    assert all(" of 3 " in line and line.endswith(" sum 3") for line in hello), text
    assert sorted(line.split()[6] for line in hello) == sorted(names), text


@pytest.fixture
def slurm_dir():
    """The job's files and the daemons' state, not under /tmp, which each node has its own
    of (on()); every daemon and job here is root's. Removed afterwards."""
    tmp = Path(tempfile.mkdtemp(prefix="hpcwizard-slurm-", dir="/var/tmp"))
    made_run = not MUNGE_RUN.exists()
    try:
        for n in ("node1", "node2", "node3"):
            (tmp / f"tmp-{n}").mkdir()
            (tmp / f"tmp-{n}").chmod(0o1777)
        MUNGE_RUN.mkdir(exist_ok=True)  # the mount point of each node's own
        yield tmp
    finally:
        if made_run:
            shutil.rmtree(MUNGE_RUN, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)


def test_the_exported_sbatch_runs_mpi_hello_and_hostname_on_three_slurm_nodes(
        slurm_packages, slurm_dir):
    for tool in ("slurmctld", "slurmd", "sbatch", "munged", "mpicc"):
        assert shutil.which(tool) or Path(f"/usr/sbin/{tool}").exists(), f"{tool} is missing"
    tmp = slurm_dir
    script = tmp / "job.sbatch"
    exp = subprocess.run([wizard_exe(), "export", "--framework", "mpi", "--network", "tcp",
                          "--manual", "--peers", "node*", "--format", "sbatch", "-o",
                          str(script)], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, HPCWIZARD_STATE_DIR=str(tmp / "state")))
    assert exp.returncode == 0, f"export failed{show(exp)}"
    assert script.stat().st_mode & 0o777 == 0o755
    cc = subprocess.run(["mpicc", "-o", str(tmp / "hello"), "-x", "c", "-"], input=HELLO_C,
                        capture_output=True, text=True)
    assert cc.returncode == 0, f"mpicc failed{show(cc)}"
    program = tmp / "hello.sh"
    program.write_text(f'#!/bin/sh\necho "host $(hostname)"\nexec {tmp}/hello\n')
    program.chmod(0o755)

    _munge_key()
    with Cluster(3, subnet="10.79.0", ns_prefix="hpcws-") as c:
        for n in c.names:
            _start_munged(c, tmp, n)
        conf = tmp / "slurm.conf"
        conf.write_text(_slurm_conf(c, tmp))
        # Slurm 22.05's slurmd loads a cgroup plugin even with proctrack/linuxproc; 'ip
        # netns exec' gives it a fresh /sys without the cgroup mounts autodetect looks for
        (tmp / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\n")
        for d in ["ctld"] + [f"spool-{n}" for n in c.names]:
            (tmp / d).mkdir()
        env = dict(os.environ, SLURM_CONF=str(conf))
        c.env = env
        head = c.names[0]
        c.start(head, on(c, tmp, head, ["slurmctld", "-D", "-c", "-f", str(conf)]),
                str(tmp / "slurmctld.pid"))
        for n in c.names:
            c.start(n, on(c, tmp, n, ["slurmd", "-D", "-N", n, "-f", str(conf)]),
                    str(tmp / f"slurmd-{n}.pid"))
        _wait_idle(c, tmp, env)
        for n in c.names:  # the slurmd's own files, one set a node
            assert (tmp / f"slurmd-{n}.pid").exists() and (tmp / f"slurmd-{n}.log").exists()

        listed = c.run(head, on(c, tmp, head, ["srun", "--mpi=list"]), env=env)
        pmix = "pmix" in listed.stdout + listed.stderr
        auto = _job(c, env, tmp, script, program, "auto")
        assert ("srun --mpi=pmix" if pmix else "mpirun over the allocation") in auto, auto
        _check(auto, c.names)
        over = _job(c, env, tmp, script, program, "mpirun", launcher="mpirun")
        assert "mpirun over the allocation" in over, over
        _check(over, c.names)
        c.stop_daemons()
