"""Issue 30, system test: verify proves the job's environment reaches every rank with a
program that lives only in the user's environment. After a real `apply` (MPI over TCP,
root), `hpcwizard verify --hosts node1,node2,node3` runs inside node1 with a venv (made
from /usr/bin/python3, so only its directory is the user's) active and OMP_NUM_THREADS
exported in that shell alone:
  - every rank runs the venv's python3 (verify's mpirun passes the launch script's -x names):
    cluster/user-env passes;
  - node3's sshd runs in a mount namespace of its own with an empty tmpfs over the venv
    (the venv does not exist there): cluster/user-env fails naming node3, and only node3;
  - with the system's python3 on PATH (nothing of the environment outside /usr), the check
    is no part of the report.
Root only, HPCWIZARD_SYSTEM_TESTS=1 (conftest.py skips otherwise)."""
from __future__ import annotations

import json
import os
import shlex
import subprocess

import pytest

from _verify_cluster import PORT, VCluster, applied, show, start_nodes, wizard_exe

pytestmark = pytest.mark.system

VERIFY = ["verify", "--framework", "mpi", "--network", "tcp", "--manual", "--json"]
HOSTS = "node1,node2,node3"
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    yield from applied(tmp_path_factory)


def verify(c: VCluster, env: dict):
    proc = c.run("node1", [wizard_exe(), *VERIFY, "--hosts", HOSTS], timeout=300, cwd="/",
                 env=env)
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"verify did not print JSON{show(proc)}")
    return proc, {x["id"]: x for x in data["checks"]}


def test_a_venv_active_only_in_the_launching_shell(setup):
    if not os.path.exists("/usr/bin/python3"):
        pytest.skip("no /usr/bin/python3 to make the user's venv from")
    base = {k: v for k, v in setup["env"].items()
            if k not in ("VIRTUAL_ENV", "CONDA_PREFIX", "OMP_NUM_THREADS", "PYTHONHOME",
                         "PYTHONPATH", "FORWARD_ENV")}
    with VCluster(3) as c:
        venv = c.tmp / "user-venv"
        made = subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)],
                              capture_output=True, text=True, timeout=120)
        assert made.returncode == 0, made.stderr
        daemons = start_nodes(c)
        active = dict(base, PATH=f"{venv}/bin:{SYSTEM_PATH}", VIRTUAL_ENV=str(venv),
                      OMP_NUM_THREADS="3")

        proc, checks = verify(c, active)
        assert proc.returncode == 0, show(proc)
        env_check = checks["cluster/user-env"]
        assert env_check["status"] == "pass", env_check
        assert env_check["detail"] == (f"3 ranks run the python3 of {venv}; "
                                       "OMP_NUM_THREADS=3"), env_check
        mpirun = shlex.split(checks["cluster/mpirun"]["command"])
        forwarded = [mpirun[i + 1] for i, a in enumerate(mpirun) if a == "-x"]
        assert {"PATH", "VIRTUAL_ENV", "OMP_NUM_THREADS"} <= set(forwarded), mpirun

        # node3 without the venv: its sshd (and so the ranks it starts) sees an empty tmpfs
        c.stop(daemons["node3"])
        c.daemons.remove(daemons["node3"])
        pid_file = "/run/sshd-vnode3.pid"
        hide = (f"mount -t tmpfs -o size=1m,mode=0755 hpcwizard-hide {shlex.quote(str(venv))}"
                f" && exec /usr/sbin/sshd -D -e -o PidFile={pid_file}")
        daemons["node3"] = c.start("node3", ["sh", "-c", hide], pid_file)
        c.wait_port("node3", PORT)
        proc, checks = verify(c, active)
        assert proc.returncode == 1, show(proc)
        failed = sorted(k for k, v in checks.items() if v["status"] == "fail")
        assert failed == ["cluster/user-env"], show(proc)
        env_check = checks["cluster/user-env"]
        assert env_check["detail"].startswith("node3: "), env_check
        assert "node1" not in env_check["detail"] and "node2" not in env_check["detail"]
        assert f"Create {venv} on node3" in env_check["explain"], env_check

        # the system's python3 and Open MPI: nothing of the user's to prove, no check
        proc, checks = verify(c, dict(base, PATH=SYSTEM_PATH))
        assert "cluster/user-env" not in checks, show(proc)
        assert checks["cluster/mpirun"]["status"] == "pass", show(proc)
