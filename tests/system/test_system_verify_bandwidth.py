"""Issue 17, system tests: `hpcwizard verify --bandwidth` run inside node1 across two
network-namespace instances with a real sshd (after a real MPI/TCP apply for root): the TCP
measurement node1 → node2 gives a positive figure with its verdict line ("no line rate to
compare": the namespaces' eth0 is a veth) and verify exits 0; for PyTorch, the gloo
all_reduce's bus bandwidth through the launch script too (skipped, with the reason, when
torch does not import). Root only, HPCWIZARD_SYSTEM_TESTS=1 (conftest.py skips otherwise)."""
from __future__ import annotations

import json
import re
import subprocess

import pytest

from _verify_cluster import VCluster, applied, show, start_nodes, wizard_exe

pytestmark = pytest.mark.system

VETH = re.compile(r"^node1 → node2 over TCP \(eth0\): (\d+\.\d) Gb/s; no line rate to compare "
                  r"\(eth0 is a virtual interface \(veth or the like\): its speed says nothing "
                  r"of the link\)$")
BUSBW = re.compile(r"^node1 \+ node2, 2 ranks, gloo over TCP: (\d+\.\d) GB/s; no line rate to "
                   r"compare \(eth0 is a virtual interface")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    yield from applied(tmp_path_factory)


def verify(c: VCluster, env: dict, framework: str, *extra: str):
    proc = c.run("node1", [wizard_exe(), "verify", "--framework", framework, "--network", "tcp",
                           "--manual", "--hosts", "node1,node2", "--json", *extra],
                 timeout=400, cwd="/", env=env)
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"verify did not print JSON{show(proc)}")
    return proc, {x["id"]: x for x in data["checks"]}


def test_tcp_bandwidth_between_two_instances(setup):
    with VCluster(2) as c:
        start_nodes(c)
        proc, checks = verify(c, setup["env"], "mpi", "--bandwidth")
        bw = checks.get("cluster/tcp-bandwidth/node2", {})
        assert bw.get("status") == "pass", show(proc)
        m = VETH.match(bw["detail"])
        assert m, bw["detail"]
        print(f"\nverify --bandwidth over the namespaces' veth: {bw['detail']}")
        assert float(m.group(1)) > 0
        assert proc.returncode == 0, show(proc)
        assert not [k for k in checks if k.startswith("cluster/ib-write-bw")]

        # without the flag nothing is measured
        proc, checks = verify(c, setup["env"], "mpi")
        assert proc.returncode == 0, show(proc)
        assert not [k for k in checks if k.startswith("cluster/tcp-bandwidth")]


def test_pytorch_bus_bandwidth_over_gloo(setup):
    probe = subprocess.run(["python3", "-c", "import torch.distributed"], capture_output=True,
                           text=True)
    if probe.returncode != 0:
        pytest.skip("torch does not import here (pip install torch==2.13.0 takes the CPU build)")
    with VCluster(2) as c:
        start_nodes(c)
        proc, checks = verify(c, setup["env"], "pytorch", "--bandwidth")
        assert checks.get("cluster/torch-allreduce", {}).get("status") == "pass", show(proc)
        bus = checks.get("cluster/torch-busbw", {})
        assert bus.get("status") == "pass", show(proc)
        m = BUSBW.match(bus["detail"])
        assert m, bus["detail"]
        print(f"\nthe gloo all_reduce's bus bandwidth: {bus['detail']}")
        assert float(m.group(1)) > 0
        assert VETH.match(checks["cluster/tcp-bandwidth/node2"]["detail"])
        assert proc.returncode == 0, show(proc)
