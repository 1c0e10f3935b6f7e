"""Issue 17, system test: `hpcwizard verify --network ib` inside node1 of two network-namespace
instances reads each instance's InfiniBand facts for real — node1's with bash, node2's over
SSH (the quoting of the one-line probe through ssh and the peer's shell) — and, with no
InfiniBand here, fails each host with "no ACTIVE InfiniBand port", then compares the two.
Root only, HPCWIZARD_SYSTEM_TESTS=1 (conftest.py skips otherwise)."""
from __future__ import annotations

import json

import pytest

from _verify_cluster import VCluster, applied, show, start_nodes, wizard_exe

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    yield from applied(tmp_path_factory)


def test_every_instance_is_read_and_has_no_active_port(setup):
    with VCluster(2) as c:
        start_nodes(c)
        proc = c.run("node1", [wizard_exe(), "verify", "--framework", "mpi", "--network", "ib",
                               "--manual", "--json", "--hosts", "node1,node2"],
                     timeout=300, cwd="/", env=setup["env"])
        try:
            checks = {x["id"]: x for x in json.loads(proc.stdout)["checks"]}
        except ValueError:
            pytest.fail(f"verify did not print JSON{show(proc)}")
        for node in ("node1", "node2"):
            memlock = c.run(node, ["bash", "-c", "ulimit -l"]).stdout.strip()
            ib = checks[f"peer/{node}/ib"]
            want = ["no ACTIVE InfiniBand port", "no /dev/infiniband/uverbs*"]
            if memlock != "unlimited":
                want.append(f"ulimit -l: {memlock}")
            assert (ib["status"], ib["detail"]) == ("fail", "; ".join(want)), show(proc)
        assert checks["peer/node1/ib"]["command"].startswith("bash -c ")  # here: no SSH
        assert checks["peer/node2/ib"]["command"].startswith("ssh ")
        assert checks["peer/node2/login"]["status"] == "pass"
        # IB facts do not block it (a skip names the SSH check that failed: the report says which)
        assert checks["cluster/mpirun"]["status"] == "pass", show(proc)
        same = checks["cluster/ib-same"]
        assert (same["status"], same["detail"]) == (
            "pass", "2 hosts alike: UCX none, ports none"), show(proc)
