"""Issue 5, system tests: after a real `apply` (MPI over TCP, root), `hpcwizard verify`
run inside node1 passes across three network-namespace instances; with sshd stopped on
node2, node3's name removed, or node2 refusing the key, it fails on the right check with
the right diagnosis. Then the same at 16 instances (the time is printed for the benchmarks).
Root only, HPCWIZARD_SYSTEM_TESTS=1 (conftest.py skips otherwise)."""
from __future__ import annotations

import json
import time

import pytest

from _verify_cluster import VCluster, applied, show, start_nodes, wizard_exe

pytestmark = pytest.mark.system

VERIFY = ["verify", "--framework", "mpi", "--network", "tcp", "--manual", "--json"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    yield from applied(tmp_path_factory)


def verify(c: VCluster, hosts: str, env: dict, timeout: float = 300):
    t0 = time.monotonic()
    proc = c.run("node1", [wizard_exe(), *VERIFY, "--hosts", hosts], timeout=timeout, cwd="/",
                 env=env)
    seconds = time.monotonic() - t0
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"verify did not print JSON{show(proc)}")
    return proc, {c["id"]: c for c in data["checks"]}, data, seconds


def failed(checks: dict) -> list:
    return sorted(k for k, v in checks.items() if v["status"] == "fail")


def diag(check: dict) -> list:
    return [d["id"] for d in check["diagnoses"]]


def test_three_instances_pass_then_fail_for_the_right_reason(setup):
    env = setup["env"]
    with VCluster(3) as c:
        daemons = start_nodes(c)
        proc, checks, data, seconds = verify(c, "node1,node2,node3", env)
        print(f"\nverify across 3 namespace instances: {seconds:.2f} s "
              f"(verify's own figure {data['seconds']:.2f} s)")
        assert proc.returncode == 0, f"verify failed: {failed(checks)}{show(proc)}"
        assert checks["cluster/mpirun"]["status"] == "pass"
        assert checks["peer/node3/login"]["detail"] == "node3"
        assert data["hosts"]["source"] == "--hosts"

        # sshd stopped on node2
        c.stop(daemons["node2"])
        c.daemons.remove(daemons["node2"])
        proc, checks, _, _ = verify(c, "node1,node2,node3", env)
        assert proc.returncode == 1
        assert failed(checks) == ["peer/node2/port"], show(proc)
        assert diag(checks["peer/node2/port"]) == ["ssh-refused"]
        assert checks["cluster/mpirun"]["status"] == "skip"

        # node2 back, but its sshd does not know the key (all nodes share /root)
        daemons["node2"] = c.start_sshd(
            "node2", "/run/sshd-vnode2.pid",
            extra=["-o", "AuthorizedKeysFile=/nonexistent/hpcwizard-test/authorized_keys"])
        c.wait_port("node2", 2222)
        proc, checks, _, _ = verify(c, "node1,node2,node3", env)
        assert proc.returncode == 1
        assert failed(checks) == ["peer/node2/login"], show(proc)
        assert diag(checks["peer/node2/login"]) == ["ssh-publickey"]
        c.stop(daemons["node2"])
        c.daemons.remove(daemons["node2"])
        daemons["node2"] = c.start_sshd("node2", "/run/sshd-vnode2.pid")
        c.wait_port("node2", 2222)

        # node3's name removed
        c.hide("node3")
        proc, checks, _, _ = verify(c, "node1,node2,node3", env)
        c.unhide("node3")
        assert proc.returncode == 1
        assert failed(checks) == ["peer/node3/resolve"], show(proc)
        assert diag(checks["peer/node3/resolve"]) == ["name-unresolved"]

        # and whole again
        proc, checks, _, _ = verify(c, "node1,node2,node3", env)
        assert proc.returncode == 0, f"{failed(checks)}{show(proc)}"


def test_sixteen_instances(setup):
    with VCluster(16) as c:
        start_nodes(c)
        proc, checks, data, seconds = verify(c, "node[1-16]", setup["env"], timeout=600)
        print(f"\nverify across 16 namespace instances: {seconds:.2f} s "
              f"(verify's own figure {data['seconds']:.2f} s, {len(checks)} checks)")
        assert proc.returncode == 0, f"verify failed: {failed(checks)}{show(proc)}"
        assert len(data["hosts"]["names"]) == 16
        assert checks["cluster/mpirun"]["status"] == "pass"
        assert sum(1 for k in checks if k.endswith("/login")) == 17  # 16 peers + here
