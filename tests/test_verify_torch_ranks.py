"""The PyTorch all-reduce's two halves run the launch script with HOSTS=here,other: each
half's rank must be its place in that pair, whatever NODE_RANK the platform gave this
instance for the whole job (the local half inherits verify's environment; the remote one,
over SSH, only what its command line sets). So must the processes each half starts: the
count the launch uses (NPROC_PER_NODE, Kubeflow's PET_NPROC_PER_NODE, the GPUs), said to
both, and every one of the 2 x N ranks must answer with the world's sum."""
from __future__ import annotations

import dataclasses
import os

import pytest

from _core_fixtures import ROOT, facts
from _verify_fixtures import FakeSystem
from hpcwizard import runtime
from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.facts import Gpu
from hpcwizard.hosts import Hosts
from hpcwizard.plan import build_plan
from hpcwizard.verify import FAIL, PASS, probes as P, verify
from hpcwizard.verify.cluster import allreduce_problem, torch_nproc
from hpcwizard.verify.parse import parse_allreduce

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


# --- N processes per instance (issue 17): the count the launch script uses, on both halves --

PEERS = {"node1": "ok", "node2": "ok"}
FOR_NPROC = ("NPROC_PER_NODE", "PET_NPROC_PER_NODE", "NODE_RANK", "PET_NODE_RANK")


def _verify(monkeypatch, env=(), gpus=0, lost=()):
    for k in FOR_NPROC:
        monkeypatch.delenv(k, raising=False)
    for k, v in env:
        monkeypatch.setenv(k, v)
    system = FakeSystem(PEERS, {P.TorchImport: TORCH}, here="node1")
    system.lost_ranks = lost
    f = dataclasses.replace(facts(user=ROOT), gpus=tuple(Gpu(i, "H100") for i in range(gpus)))
    plan = build_plan(f, make_choices(framework="pytorch", network="tcp", mode="manual"),
                      load_catalog())
    report = verify(plan, f, Hosts(tuple(PEERS), "--hosts"), system=system)
    return {c.id: c for c in report.checks}["cluster/torch-allreduce"], system


@pytest.mark.parametrize("nproc", [1, 2, 4])
def test_nproc_per_node_processes_on_each_half(monkeypatch, nproc):
    ar, system = _verify(monkeypatch, [("NPROC_PER_NODE", str(nproc))])
    assert ar.status == PASS, ar.detail
    world = 2 * nproc
    assert ar.detail.startswith(
        f"gloo: sum {world * (world + 1) // 2} on {world} ranks on 2 instances "
        f"({nproc} per instance), as expected")
    assert ar.detail.endswith("per instance: NPROC_PER_NODE)")
    for half in system.asked(P.LaunchHalf):  # said outright to both, the remote one too
        assert dict(half.extra_env)["NPROC_PER_NODE"] == str(nproc)


def test_the_count_is_the_gpus_here_when_none_is_told(monkeypatch):
    ar, system = _verify(monkeypatch, gpus=4)
    assert ar.status == PASS and "on 8 ranks on 2 instances (4 per instance)" in ar.detail
    assert ar.detail.endswith("per instance: the GPUs here)")
    ar, _ = _verify(monkeypatch, gpus=0)
    assert "on 2 ranks on 2 instances (1 per instance)" in ar.detail


def test_kubeflows_pet_nproc_per_node_when_a_number(monkeypatch):
    ar, _ = _verify(monkeypatch, [("PET_NPROC_PER_NODE", "2")], gpus=8)
    assert "on 4 ranks" in ar.detail and ar.detail.endswith("PET_NPROC_PER_NODE)")
    ar, _ = _verify(monkeypatch, [("PET_NPROC_PER_NODE", "auto")], gpus=2)  # torchrun's word
    assert "on 4 ranks" in ar.detail and ar.detail.endswith("the GPUs here)")
    ar, _ = _verify(monkeypatch, [("PET_NPROC_PER_NODE", "4"), ("NPROC_PER_NODE", "1")])
    assert "on 2 ranks" in ar.detail  # NPROC_PER_NODE first, as in the launch script


@pytest.mark.parametrize("lost", [(0,), (3,), (1, 2)])
def test_a_missing_rank_fails_naming_it(monkeypatch, lost):
    ar, _ = _verify(monkeypatch, [("NPROC_PER_NODE", "2")], lost=lost)
    assert ar.status == FAIL
    assert f"{4 - len(lost)} of 4 ranks answered" in ar.detail
    assert ar.detail.endswith("missing: " + ", ".join(map(str, lost)))


@pytest.mark.parametrize("value", ["0", "two", "a[$(id)]", "²"])
def test_a_count_the_launch_refuses_fails_before_anything_runs(monkeypatch, value):
    ar, system = _verify(monkeypatch, [("NPROC_PER_NODE", value)])
    assert ar.status == FAIL and ar.detail.startswith("NPROC_PER_NODE=")
    assert "is not a number of processes" in ar.detail and "\n" not in ar.detail
    assert not system.asked(P.LaunchHalf)


def _lines(world, ranks, sums=None):
    return parse_allreduce("".join(
        f"HPCWIZARD-ALLREDUCE rank={r} size={world} backend=gloo "
        f"sum={(sums or {}).get(r, world * (world + 1) // 2)} expected=0\n" for r in ranks))


def test_allreduce_problem_reads_every_rank():
    assert allreduce_problem(_lines(4, [0, 1]), _lines(4, [2, 3]), 2) == ""
    # the right count of lines, but one rank twice and one never
    assert allreduce_problem(_lines(4, [0, 1]), _lines(4, [2, 2]), 2).endswith(
        "missing: 3; unexpected: 2")
    # every rank there, one with a wrong sum: the program's own 'expected' is not trusted
    assert allreduce_problem(_lines(4, [0, 1]), _lines(4, [2, 3], {3: 9}), 2) == (
        "rank 3: world size 4, sum 9; expected 4 and 10")
    # a world of 2 where 4 were asked for (each half started one process)
    assert "2 of 4 ranks answered (1 here, 1 there)" in allreduce_problem(
        _lines(2, [0]), _lines(2, [1]), 2)


def test_torch_nproc_says_where_the_count_came_from():
    f = facts(user=ROOT)
    assert torch_nproc(f, {}) == (1, "no GPU here, 1")
    assert torch_nproc(f, {"NPROC_PER_NODE": " 3 "}) == (3, "NPROC_PER_NODE")
    n, why = torch_nproc(f, {"PET_NPROC_PER_NODE": "lots"})
    assert n == 0 and why.startswith("PET_NPROC_PER_NODE='lots' is not a number")


# torchrun's words, as torch.distributed.run's determine_local_world_size counts them, with
# the launch script's rule: a word in PET_NPROC_PER_NODE goes to torchrun as it is, one in
# NPROC_PER_NODE (hpcwizard's own count) is refused by the launch (tests/test_launch.py)
@pytest.mark.parametrize("word,gpus,cpus,want", [
    ("auto", 4, 8, (4, "the GPUs here")),
    ("gpu", 2, 8, (2, "the GPUs here")),
    ("auto", 0, 8, (2, "PET_NPROC_PER_NODE=auto: 2 of the 8 CPUs here (torchrun starts one "
                       "per CPU)")),
    ("cpu", 4, 8, (2, "PET_NPROC_PER_NODE=cpu: 2 of the 8 CPUs here (torchrun starts one "
                      "per CPU)")),
    ("cpu", 0, 1, (1, "PET_NPROC_PER_NODE=cpu: 1 of the 1 CPUs here (torchrun starts one "
                      "per CPU)")),
    ("xpu", 0, 8, (1, "PET_NPROC_PER_NODE=xpu: 1, verify does not count XPUs")),
])
def test_torchruns_words_count_as_torchrun_counts_them(word, gpus, cpus, want):
    f = dataclasses.replace(facts(user=ROOT), cpus=cpus,
                            gpus=tuple(Gpu(i, "H100") for i in range(gpus)))
    assert torch_nproc(f, {"PET_NPROC_PER_NODE": word}) == want


def test_gpu_without_a_gpu_fails_as_torchrun_would(monkeypatch):
    ar, system = _verify(monkeypatch, [("PET_NPROC_PER_NODE", "gpu")], gpus=0)
    assert ar.status == FAIL
    assert ar.detail == "PET_NPROC_PER_NODE=gpu, and no GPU here: torchrun refuses it without CUDA"
    assert not system.asked(P.LaunchHalf)


def test_auto_on_a_cpu_instance_runs_several_processes_on_each_half(monkeypatch):
    ar, system = _verify(monkeypatch, [("PET_NPROC_PER_NODE", "auto")], gpus=0)
    assert ar.status == PASS and "on 4 ranks on 2 instances (2 per instance)" in ar.detail
    for half in system.asked(P.LaunchHalf):
        assert dict(half.extra_env)["NPROC_PER_NODE"] == "2"


@pytest.mark.parametrize("word", ["auto", "cpu", "gpu", "xpu"])
def test_a_word_in_nproc_per_node_is_refused_as_the_launch_refuses_it(word):
    n, why = torch_nproc(facts(user=ROOT), {"NPROC_PER_NODE": word})
    assert n == 0 and why.startswith(f"NPROC_PER_NODE='{word}' is not a number of processes")


# --- the rendezvous: static on both halves, whatever elastic job verify runs in (issue 17) ---

ELASTIC = {"PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": "job-worker-0:23456",
           "PET_RDZV_ID": "job", "PET_RDZV_CONF": "join_timeout=900", "PET_STANDALONE": "1",
           "PET_NNODES": "1:4"}


def test_both_halves_get_a_static_rendezvous_at_the_master(monkeypatch):
    """torchrun takes PET_<OPTION> as its defaults: verify's own PET_RDZV_* (an elastic
    PyTorchJob's) would reach the local half only, which would look for another rendezvous
    than the remote half. Both are told the static one, at MASTER_ADDR:MASTER_PORT."""
    ar, system = _verify(monkeypatch, list(ELASTIC.items()))
    assert ar.status == PASS, ar.detail
    local, remote = system.asked(P.LaunchHalf)
    for env in ({**os.environ, **dict(local.extra_env)}, dict(remote.extra_env)):
        assert env["PET_RDZV_BACKEND"] == "static" and env["PET_RDZV_ENDPOINT"] == ""
        assert env["PET_RDZV_ID"] == "none" and env["PET_RDZV_CONF"] == ""
        assert env["PET_STANDALONE"] == "0"
        assert env["MASTER_ADDR"] == "node1" and env["MASTER_PORT"] == "29500"


def test_the_static_rendezvous_is_what_torchrun_reads(monkeypatch):
    """The values said to both halves, read by torchrun's own parser with the elastic job's
    PET_* around it: static, at the master the launch script names."""
    run = pytest.importorskip("torch.distributed.run", reason="torch is not installed here")
    from hpcwizard.verify.cluster import STATIC_RENDEZVOUS
    for k, v in (*ELASTIC.items(), *STATIC_RENDEZVOUS):
        monkeypatch.setenv(k, v)
    args = run.get_args_parser().parse_args(
        ["--nnodes=2", "--node-rank=0", "--nproc-per-node=2", "--master-addr=node1",
         "--master-port=29500", "--no-python", "true"])
    assert args.rdzv_backend == "static" and not args.standalone
    assert run.get_rdzv_endpoint(args) == "node1:29500"
    assert args.rdzv_id == "none" and args.rdzv_conf == ""


def test_two_ranks_lines_that_ran_together_are_both_read():
    """What CI's remote half printed once: the two ranks of an instance share its stdout, and
    one's newline came after the other's text."""
    out = ("HPCWIZARD-ALLREDUCE rank=3 size=4 backend=gloo sum=10 expected=10 local=1 node=1"
           "HPCWIZARD-ALLREDUCE rank=2 size=4 backend=gloo sum=10 expected=10 local=0 node=1\n\n")
    got = parse_allreduce(out)
    assert [(r["rank"], r["local"], r["node"]) for r in got] == [("3", "1", "1"), ("2", "0", "1")]
    mine = parse_allreduce("HPCWIZARD-ALLREDUCE rank=0 size=4 backend=gloo sum=10 expected=10 "
                           "local=0 node=0\nHPCWIZARD-ALLREDUCE rank=1 size=4 backend=gloo "
                           "sum=10 expected=10 local=1 node=0\n")
    assert allreduce_problem(mine, got, 2) == ""
