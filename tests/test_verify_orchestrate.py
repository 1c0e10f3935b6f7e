"""verify's orchestration (issue 16): each check declares where it belongs and what it needs;
one loop runs it or skips it at its first unmet need, with that need's reason. Through the
fake System: the PyTorch all-reduce's two halves (this host, as "which host is this" says,
and the first other host whose login passed), and the checks that read an earlier one's
result skip with that one's reason. The test programs ship as files in the package."""
from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path

from _core_fixtures import ROOT, facts
from _verify_fixtures import FakeSystem
from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.compat import tomllib
from hpcwizard.hosts import Hosts
from hpcwizard.plan import build_plan
from hpcwizard.verify import FAIL, PASS, SKIP, probes as P, verify
from hpcwizard.verify.context import Ctx
from hpcwizard.verify.needs import Need
from hpcwizard.verify.orchestrate import run_checks
from hpcwizard.verify.results import Check
from hpcwizard.verify.spec import Spec

REPO = Path(__file__).resolve().parent.parent
TORCH = (0, 'HPCWIZARD-TORCH {"torch": "2.3.0", "python": "/opt/py/bin/python3", "cuda": false, '
            '"dist": true, "nccl": false, "nccl_version": ""}\n')


def plan(framework="mpi", network="tcp"):
    return build_plan(facts(user=ROOT), make_choices(framework=framework, network=network,
                                                     mode="manual"), load_catalog())


def run(peers, framework="pytorch", network="tcp", here="node1", answers=None):
    system = FakeSystem(peers, answers if answers is not None else {P.TorchImport: TORCH},
                        here=here)
    report = verify(plan(framework, network), facts(user=ROOT), Hosts(tuple(peers), "--hosts"),
                    system=system)
    return {c.id: c for c in report.checks}, system


# --- the loop ----------------------------------------------------------------------------------

def test_a_check_runs_only_where_it_belongs_and_skips_at_its_first_unmet_need():
    ran = []

    def check(name):
        def run_it(ctx, host):
            ran.append(name)
            return Check(f"x/{host}/{name}", name, PASS)
        return run_it

    yes = Need("always", lambda ctx, host: True, lambda ctx, host: "never said")
    no_a = Need("a", lambda ctx, host: False, lambda ctx, host: f"a is missing on {host}")
    no_b = Need("b", lambda ctx, host: False, lambda ctx, host: "b is missing")
    specs = (Spec("x/{host}/first", lambda ctx, host: "first", check("first"), needs=(yes,)),
             Spec("x/{host}/ib-only", lambda ctx, host: "ib", check("ib"), networks=("ib",)),
             Spec("x/{host}/skipped", lambda ctx, host: "skipped", check("skipped"),
                  needs=(yes, no_a, no_b)),
             Spec("x/{host}/torch-only", lambda ctx, host: "t", check("t"),
                  frameworks=("pytorch",)))
    ctx = Ctx(plan(), facts(user=ROOT), FakeSystem({}))
    seen = []
    out = run_checks(ctx, specs, "node2", on_check=seen.append)
    assert ran == ["first"]  # the others: not part of MPI over TCP, or skipped
    assert [(c.id, c.status, c.detail) for c in out] == [
        ("x/node2/first", PASS, ""), ("x/node2/skipped", SKIP, "a is missing on node2")]
    assert out[1].title == "skipped" and out[1].host == "node2" and out[1].command == ""
    assert seen == out and ctx.found("x/node2/skipped") == out[1]


# --- PyTorch across instances ----------------------------------------------------------------

def test_torch_allreduce_runs_here_and_on_the_first_other_host_that_logs_in():
    c, system = run({"node1": "ok", "node2": "nokey", "node3": "ok"}, here="node1")
    ar = c["cluster/torch-allreduce"]
    assert ar.status == PASS, ar.detail
    assert ar.detail == ("gloo: sum 3 on 2 ranks on 2 instances (1 per instance), as expected "
                         "(rendezvous at node1:29500; per instance: no GPU here, 1)")
    local, remote = system.asked(P.LaunchHalf)
    assert (local.host, remote.host) == ("", "node3")  # node2 refused the key
    # the interpreter here/torch found, the rendezvous on this host, on both halves
    for half in (local, remote):
        env = dict(half.extra_env)
        assert half.python == "/opt/py/bin/python3"
        assert (env["HOSTS"], env["MASTER_ADDR"], env["MASTER_PORT"]) == (
            "node1,node3", "node1", "29500")
    assert "  &  ssh -o BatchMode=yes" in ar.command
    # the launch script and the test program went to node3, not to node2
    assert {p.host for p in system.asked(P.CopyTo)} == {"node3"}
    assert "nccl-transport" not in " ".join(c)  # over TCP there is no transport check


def test_this_host_second_in_the_list_pairs_with_the_first():
    c, system = run({"node1": "ok", "node2": "ok"}, here="node2")
    assert c["cluster/torch-allreduce"].status == PASS
    local, remote = system.asked(P.LaunchHalf)
    assert remote.host == "node1" and dict(local.extra_env)["MASTER_ADDR"] == "node2"


def test_torch_allreduce_skips_say_why():
    c, system = run({"node1": "ok", "node2": "ok"}, here="elsewhere")
    ar = c["cluster/torch-allreduce"]
    assert ar.status == SKIP and ar.detail == (
        "this host (node1) is not one of the job's hosts: run verify on one of them")
    assert not system.asked(P.LaunchHalf)
    c, _ = run({"node1": "ok"})
    assert c["cluster/torch-allreduce"].detail == "one host: nothing crosses the network"
    c, _ = run({"node1": "ok", "node2": "nokey"})
    assert c["cluster/torch-allreduce"].detail.startswith("no other instance accepts an SSH")
    c, _ = run({"node1": "ok", "node2": "ok"},
               answers={P.TorchImport: (1, "No module named 'torch'")})
    assert c["cluster/torch-allreduce"].detail == "torch does not import"


def test_a_half_that_fails_fails_the_allreduce_with_its_output():
    gone = (1, "torch.distributed.DistNetworkError: connect() timed out\n")
    c, _ = run({"node1": "ok", "node2": "ok"},
               answers={P.TorchImport: TORCH, P.LaunchHalf: gone})
    ar = c["cluster/torch-allreduce"]
    assert ar.status == FAIL and ar.detail == "torch.distributed.DistNetworkError: connect() timed out"
    assert ar.explain.startswith("The two-instance all_reduce did not complete")
    c, _ = run({"node1": "ok", "node2": "ok"},  # one half answers: what it said is shown
               answers={P.TorchImport: TORCH,
                        lambda p: isinstance(p, P.LaunchHalf) and p.host == "node2": gone})
    ar = c["cluster/torch-allreduce"]
    assert ar.status == FAIL and ar.detail.startswith("results: [{'rank': '0'")


def test_nccl_transport_reads_the_allreduce_log_and_skips_with_its_reason():
    """Over IB: the transport check reads the all-reduce's NCCL log; gloo is a skip; when the
    all-reduce itself was skipped, the transport check says the same reason."""
    nccl = (0, FakeSystem.allreduce_line(0, "nccl") + "n1:1:2 [0] NCCL INFO Using network IB\n")
    c, _ = run({"node1": "ok", "node2": "ok"}, network="ib",
               answers={P.TorchImport: TORCH,
                        lambda p: isinstance(p, P.LaunchHalf) and not p.host: nccl,
                        lambda p: isinstance(p, P.LaunchHalf): (0, FakeSystem.allreduce_line(
                            1, "nccl"))})
    assert c["cluster/torch-allreduce"].status == PASS
    assert (c["cluster/nccl-transport"].status, c["cluster/nccl-transport"].detail) == (
        PASS, "NCCL chose IB")
    c, _ = run({"node1": "ok", "node2": "ok"}, network="ib")  # the fake's halves: gloo
    assert c["cluster/nccl-transport"].detail == "gloo on CPU does not use InfiniBand"
    c, _ = run({"node1": "ok"}, network="ib")
    assert (c["cluster/nccl-transport"].status, c["cluster/nccl-transport"].detail) == (
        SKIP, "one host: nothing crosses the network")


def test_mpi_transport_skips_with_the_reason_mpirun_did_not_run():
    system = FakeSystem({"node1": "ok", "node2": "down"})
    report = verify(plan("mpi", "ib"), facts(user=ROOT), Hosts(("node1", "node2"), "--hosts"),
                    system=system)
    c = {x.id: x for x in report.checks}
    assert c["cluster/mpirun"].detail == "an SSH check above failed"
    assert (c["cluster/mpi-transport"].status, c["cluster/mpi-transport"].detail) == (
        SKIP, "an SSH check above failed")
    assert not system.asked(P.Mpirun)


def test_the_hostfile_is_the_runtimes():
    from hpcwizard.runtime import hostfile_text

    system = FakeSystem({"node1": "ok", "node2": "ok"})
    written = {}

    def write_temp(name, text, mode=0o600, owner=None):
        written[name] = text
        return f"/tmp/fake/{name}"

    system.write_temp = write_temp
    verify(plan(), facts(user=ROOT), Hosts(("node1", "node2"), "--hosts"), system=system)
    assert written["hostfile"] == hostfile_text(["node1", "node2"], 1)
    assert written["hostfile"].splitlines() == ["node1 slots=1", "node2 slots=1"]
    # a hostfile's counts are the launch's: verify writes them as it does
    verify(plan(), facts(user=ROOT), Hosts(("node1", "node2"), "--hostfile f", (4, 2)),
           system=system)
    assert written["hostfile"].splitlines() == ["node1 slots=4", "node2 slots=2"]


# --- the probes' commands are the ones shown ---------------------------------------------------

def test_probes_render_the_commands_a_user_can_paste():
    assert P.TcpConnect("node2", 2222).command == "timeout 3 bash -c ': </dev/tcp/node2/2222'"
    assert P.SshCommand("node2", 2022, "hostname", user="alice").command == (
        "runuser -u alice -- ssh -o BatchMode=yes -o ConnectTimeout=5 -p 2022 node2 hostname")
    assert P.SshCommand("127.0.0.1", 22, "true", unchecked=True).argv()[:5] == (
        "ssh", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null")
    m = P.Mpirun("/tmp/h", 2, ("--map-by", "node"), ("hostname",), user="bob",
                 extra_env=(("A", "1"),))
    assert m.argv() == ("runuser", "-u", "bob", "--", "mpirun", "--hostfile", "/tmp/h", "-np",
                        "2", "--map-by", "node", "hostname")
    assert m.env() == {"A": "1"}
    copy = P.CopyTo("node2", 2222, "/home/a/.cache/x y", b"data")
    assert copy.stdin() == b"data" and "'/home/a/.cache/x y'.$$" in copy.argv()[-1]


# --- the programs ship -------------------------------------------------------------------------

def test_the_test_programs_are_files_in_the_package_and_in_the_pyz_tree():
    from hpcwizard import verify as v

    programs = REPO / "wizard" / "verify" / "programs"
    assert v.MPI_ALLREDUCE_C == (programs / "allreduce.c").read_text()
    assert "MPI_Allreduce" in v.MPI_ALLREDUCE_C and "dist.all_reduce" in v.ALLREDUCE_PY
    compile(v.ALLREDUCE_PY, "allreduce.py", "exec")
    compile(v.TORCH_PROBE, "torch_probe.py", "exec")
    # what tools/build_pyz.py puts into the zipapp (pyproject's packages and package-data)
    spec = importlib.util.spec_from_file_location("build_pyz", REPO / "tools" / "build_pyz.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)  # type: ignore[union-attr]
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        build.copy_project(pyproject, Path(tmp))
        shipped = Path(tmp) / "hpcwizard" / "verify"
        for f in programs.iterdir():
            if f.is_file():
                assert (shipped / "programs" / f.name).read_bytes() == f.read_bytes(), f.name
        assert (shipped / "__init__.py").exists() and (shipped / "orchestrate.py").exists()


def test_torch_allreduce_that_cannot_copy_its_test_skips_with_the_copy_error():
    c, system = run({"node1": "ok", "node2": "ok"},
                    answers={P.TorchImport: TORCH,
                             P.CopyTo: (1, "scp: /root/.cache: Read-only file system")})
    ar = c["cluster/torch-allreduce"]
    assert ar.status == SKIP and ar.detail == (
        "cannot copy the test to node2 over SSH (scp: /root/.cache: Read-only file system); "
        "run the launch script on both instances yourself")
    assert not system.asked(P.LaunchHalf)  # nothing started when the copy failed
