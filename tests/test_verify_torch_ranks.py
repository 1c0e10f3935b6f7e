"""The PyTorch all-reduce's two halves run the launch script with HOSTS=here,other: each
half's rank must be its place in that pair, whatever NODE_RANK the platform gave this
instance for the whole job (the local half inherits verify's environment; the remote one,
over SSH, only what its command line sets)."""
from __future__ import annotations

import os

from _core_fixtures import ROOT, facts
from _verify_fixtures import FakeSystem
from hpcwizard import runtime
from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.hosts import Hosts
from hpcwizard.plan import build_plan
from hpcwizard.verify import PASS, probes as P, verify

TORCH = (0, 'HPCWIZARD-TORCH {"torch": "2.3.0", "python": "/opt/py/bin/python3", "cuda": false, '
            '"dist": true, "nccl": false, "nccl_version": ""}\n')


def test_each_half_is_its_place_in_the_pair_whatever_node_rank_says(monkeypatch):
    monkeypatch.setenv("NODE_RANK", "2")  # this instance is node3 of four
    peers = {"node1": "ok", "node2": "ok", "node3": "ok", "node4": "ok"}
    system = FakeSystem(peers, {P.TorchImport: TORCH}, here="node3")
    plan = build_plan(facts(user=ROOT), make_choices(framework="pytorch", network="tcp",
                                                     mode="manual"), load_catalog())
    report = verify(plan, facts(user=ROOT), Hosts(tuple(peers), "--hosts"), system=system)
    assert {c.id: c for c in report.checks}["cluster/torch-allreduce"].status == PASS
    local, remote = system.asked(P.LaunchHalf)
    local_env = {**os.environ, **dict(local.extra_env)}  # `env K=V bash launch.sh` here
    remote_env = {"PATH": os.environ["PATH"], **dict(remote.extra_env)}  # over SSH
    pair = local_env["HOSTS"].split(",")
    assert pair == ["node3", "node1"]
    # the launch script's own answer (recipes/runtime.sh) to "which of HOSTS am I"
    assert runtime.rank_of(pair, local_env) == 0
    assert runtime.rank_of(pair, remote_env) == 1
