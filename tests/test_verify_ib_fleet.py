"""Every instance's InfiniBand facts (verify/fleet.py): one probe per host, in parallel, each
host failed with its reason, the hosts compared with the odd one named; the probe script
(programs/ib_facts.sh) run for real by bash on sysfs trees and its output parsed; the
checks on the Done screen; the script shipped in the package and the zipapp."""
from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from _ib_fixtures import SYSROOTS, make_facts
from _verify_fixtures import FakeSystem
from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.hosts import Hosts
from hpcwizard.plan import build_plan
from hpcwizard.verify import FAIL, PASS, SKIP, fleet, verify
from hpcwizard.verify import probes as P
from hpcwizard.verify.parse import parse_ib_facts

OUT = Path(__file__).parent / "fixtures" / "outputs"
REPO = Path(__file__).resolve().parent.parent
HDR, EDR = FakeSystem.HDR, "100 Gb/sec (4X EDR)"
ONE_DOWN = (("mlx5_0", "1", "4: ACTIVE", HDR, "InfiniBand"),
            ("mlx5_1", "1", "1: DOWN", "10 Gb/sec (4X SDR)", "InfiniBand"))
ONE_SLOW = (("mlx5_0", "1", "4: ACTIVE", HDR, "InfiniBand"),
            ("mlx5_1", "1", "4: ACTIVE", EDR, "InfiniBand"))


def names(n):
    return {f"node{i}": "ok" for i in range(1, n + 1)}


def on(host, **facts):
    """The fake's answer for host's IB probe: its facts with these changed."""
    return {lambda p, h=host: isinstance(p, P.ReadIbFacts) and p.host == h:
            (0, FakeSystem.ib_facts_out(**facts))}


def run(peers, framework="mpi", network="ib", answers=None, system=None):
    f = make_facts()  # two active HDR ports, this instance is node1
    sys_ = system or FakeSystem(peers, answers)
    plan = build_plan(f, make_choices(framework=framework, network=network, mode="manual"),
                      load_catalog())
    report = verify(plan, f, Hosts(tuple(peers), "--hosts"), system=sys_)
    return {c.id: c for c in report.checks}, sys_


# --- with the fake System ----------------------------------------------------------------------


@pytest.mark.parametrize("n", [3, 16])
def test_all_alike_pass_and_this_instance_is_read_without_ssh(n):
    c, sys_ = run(names(n))
    for i in range(1, n + 1):
        ib = c[f"peer/node{i}/ib"]
        assert ib.status == PASS, ib.detail
        assert ib.detail.startswith("mlx5_0:1 200 Gb/s, mlx5_1:1 200 Gb/s (InfiniBand); 2 uverbs;"
                                    " memlock unlimited; UCX 1.16.0")
    same = c["cluster/ib-same"]
    assert (same.status, same.detail) == (PASS, f"{n} hosts alike: UCX 1.16.0, ports 2 × 200 Gb/s")
    probes = sys_.asked(P.ReadIbFacts)
    assert sorted(p.host for p in probes) == sorted([""] + [f"node{i}" for i in range(2, n + 1)])
    local = next(p for p in probes if not p.host)
    assert local.argv()[:2] == ("bash", "-c")  # here: no ssh
    remote = next(p for p in probes if p.host == "node2")
    assert remote.argv()[0] == "ssh" and "node2" in remote.argv()
    assert c["cluster/mpirun"].status == PASS


def test_ucx_differing_on_one_host_names_it():
    c, _ = run(names(3), answers=on("node3", ucx="1.15.0"))
    assert c["peer/node3/ib"].status == PASS  # on its own it is fine
    same = c["cluster/ib-same"]
    assert (same.status, same.detail) == (FAIL, "node3: UCX 1.15.0, the others 1.16.0")
    assert "known cause of hangs" in same.explain


def test_two_hosts_differing_name_both():
    c, _ = run(names(2), answers=on("node2", ucx="1.15.0"))
    assert c["cluster/ib-same"].detail == "UCX differs: node1 1.16.0, node2 1.15.0"


def test_a_port_down():
    c, _ = run(names(3), answers=on("node2", ports=ONE_DOWN))
    ib = c["peer/node2/ib"]
    assert (ib.status, ib.detail) == (FAIL, "mlx5_1:1 DOWN")
    assert ib.explain.startswith("Port(s) mlx5_1:1 of node2 are not ACTIVE")
    assert c["peer/node3/ib"].status == PASS
    assert c["cluster/ib-same"].detail == "node2: ports 1 × 200 Gb/s, the others 2 × 200 Gb/s"


def test_no_active_port_of_the_jobs_link_layer():
    """Only RoCE (Ethernet) ports where the job's are InfiniBand: none the job can use."""
    roce = (("mlx5_0", "1", "4: ACTIVE", HDR, "Ethernet"),)
    c, _ = run(names(2), answers=on("node2", ports=roce))
    ib = c["peer/node2/ib"]
    assert (ib.status, ib.detail) == (FAIL, "no ACTIVE InfiniBand port")
    assert [d.id for d in ib.diagnoses] == ["nccl-socket-fallback"]


def test_a_lower_rate():
    c, _ = run(names(3), answers=on("node3", ports=ONE_SLOW))
    ib = c["peer/node3/ib"]
    assert (ib.status, ib.detail) == (FAIL, "mlx5_1:1 at 100 Gb/s, the others 200 Gb/s")
    assert "degraded link" in ib.explain
    assert c["cluster/ib-same"].detail == "node3: ports 200, 100 Gb/s, the others 2 × 200 Gb/s"


def test_without_uverbs_and_with_memlock_limited():
    c, _ = run(names(3), answers={**on("node2", uverbs=()), **on("node3", memlock="65536")})
    two, three = c["peer/node2/ib"], c["peer/node3/ib"]
    assert (two.status, two.detail) == (FAIL, "no /dev/infiniband/uverbs*")
    assert [d.id for d in two.diagnoses] == ["verbs-no-driver"]
    assert (three.status, three.detail) == (FAIL, "ulimit -l: 65536")
    assert [d.id for d in three.diagnoses] == ["memlock"]
    assert "--ulimit memlock=-1:-1" in three.explain
    # the SSH checks passed: mpirun still runs (an IB fact does not make a host unreachable)
    assert c["cluster/mpirun"].status == PASS
    assert c["cluster/ib-same"].status == PASS


def test_every_problem_of_a_host_is_said():
    c, _ = run(names(2), answers=on("node2", ports=ONE_DOWN, uverbs=(), memlock="64"))
    assert c["peer/node2/ib"].detail == "mlx5_1:1 DOWN; no /dev/infiniband/uverbs*; ulimit -l: 64"
    assert {d.id for d in c["peer/node2/ib"].diagnoses} == {"verbs-no-driver", "memlock"}


def test_a_probe_cut_short_fails_with_what_it_said():
    cut = {lambda p: isinstance(p, P.ReadIbFacts) and p.host == "node2":
           (0, FakeSystem.ib_facts_out().replace("HPCWIZARD-IB\tend\n", ""))}
    c, _ = run(names(3), answers=cut)
    assert c["peer/node2/ib"].status == FAIL
    assert "did not finish" in c["peer/node2/ib"].explain
    assert c["cluster/ib-same"].detail.endswith("; not read: node2")


def test_a_peer_without_login_is_skipped_and_the_others_compared():
    c, sys_ = run({"node1": "ok", "node2": "ok", "node3": "nokey"})
    assert c["peer/node3/login"].status == FAIL
    assert (c["peer/node3/ib"].status, c["peer/node3/ib"].detail) == (
        SKIP, "no key login to node3: its InfiniBand facts are read over SSH")
    assert not [p for p in sys_.asked(P.ReadIbFacts) if p.host == "node3"]
    assert c["cluster/ib-same"].detail == ("2 hosts alike: UCX 1.16.0, ports 2 × 200 Gb/s; "
                                           "not read: node3")


def test_one_host_compares_nothing():
    c, _ = run(names(1))
    assert c["peer/node1/ib"].status == PASS
    assert (c["cluster/ib-same"].status, c["cluster/ib-same"].detail) == (
        SKIP, "one host: nothing crosses the network")


def test_pytorch_compares_nccl_with_the_interpreter_found_here():
    torch = (0, 'HPCWIZARD-TORCH {"torch": "2.3.1+cu121", "python": "/opt/conda/bin/python3", '
                '"cuda": true, "dist": true, "nccl": true, "nccl_version": "2.20.5"}\n')
    c, sys_ = run(names(3), framework="pytorch",
                  answers={P.TorchImport: torch, **on("node2", nccl="2.18.5", ucx="")})
    assert c["cluster/ib-same"].detail == "node2: NCCL 2.18.5, the others 2.20.5"
    # the interpreter here/torch found (a conda one), not the PATH's python3
    assert {p.python for p in sys_.asked(P.ReadIbFacts)} == {"/opt/conda/bin/python3"}


def test_mpi_does_not_ask_for_nccl():
    _, sys_ = run(names(2))
    assert {p.python for p in sys_.asked(P.ReadIbFacts)} == {""}


def test_tcp_verifications_have_none_of_these_checks():
    c, sys_ = run(names(3), network="tcp")
    assert not [i for i in c if i.endswith("/ib") or i == "cluster/ib-same"]
    assert not sys_.asked(P.ReadIbFacts)


class MeetingSystem(FakeSystem):
    """Each IB probe waits until all `parties` of them are in flight at once: with the probes
    one after another the first would wait alone (and the barrier break at its time-out)."""

    def __init__(self, peers, parties):
        super().__init__(peers)
        self.barrier = threading.Barrier(parties, timeout=60)
        self.broken = False

    def answer(self, p):
        if isinstance(p, P.ReadIbFacts):
            try:
                self.barrier.wait()
            except threading.BrokenBarrierError:
                self.broken = True
        return super().answer(p)


def test_the_per_host_probes_run_concurrently():
    peers = names(16)
    system = MeetingSystem(peers, parties=16)
    c, _ = run(peers, system=system)
    assert not system.broken
    assert system.max_inflight == 16  # all 16 at once, and never more (MAX_WORKERS)
    assert c["cluster/ib-same"].status == PASS


# --- the probe script, run for real ------------------------------------------------------------


def hdr_two_ports(tmp_path: Path) -> Path:
    """rdma-ib-hdr with a second HDR HCA (mlx5_1), its uverbs1 and a libibverbs file."""
    root = tmp_path / "hdr2"
    shutil.copytree(SYSROOTS / "rdma-ib-hdr", root, symlinks=True)
    ib = root / "sys/class/infiniband"
    shutil.copytree(ib / "mlx5_0", ib / "mlx5_1", symlinks=True)
    (root / "dev/infiniband/uverbs1").touch()
    lib = root / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    (lib / "libibverbs.so.1.14.50.0").touch()
    return root


def fake_tools(tmp_path: Path, nccl_version: str) -> dict:
    """ucx_info printing a recorded `ucx_info -v`, and a torch whose torch.cuda.nccl.version()
    returns nccl_version (an int before torch 1.13, a tuple after): the script's own code
    reads them, with the real bash and python3."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    tool = bin_ / "ucx_info"
    tool.write_text(f"#!/bin/sh\ncat {OUT / 'ucx_info-v_1.13.1.txt'}\n")
    tool.chmod(0o755)
    pkg = tmp_path / "site" / "torch" / "cuda"
    pkg.mkdir(parents=True)
    (pkg.parent / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "nccl.py").write_text(f"def version():\n    return {nccl_version}\n")
    import os

    return {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}",
            "PYTHONPATH": str(tmp_path / "site")}


def run_script(probe: P.ReadIbFacts, env=None) -> str:
    done = subprocess.run(probe.argv(), capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout


def memlock_here() -> str:
    return subprocess.run(["bash", "-c", "ulimit -l"], capture_output=True,
                          text=True).stdout.strip()


@pytest.mark.parametrize("nccl, expected", [("21805", "2.18.5"), ("2708", "2.7.8"),
                                            ("(2, 20, 5)", "2.20.5")])
def test_the_script_on_a_two_port_hdr_tree(tmp_path, nccl, expected):
    root = hdr_two_ports(tmp_path)
    env = fake_tools(tmp_path, nccl)
    facts = parse_ib_facts(run_script(
        P.ReadIbFacts(fleet.script(), sys.executable, root=str(root)), env))
    assert facts.complete
    assert [(p.name, p.state, p.rate_gbps, p.link_layer) for p in facts.ports] == [
        ("mlx5_0:1", "ACTIVE", 200.0, "InfiniBand"), ("mlx5_1:1", "ACTIVE", 200.0, "InfiniBand")]
    assert facts.uverbs == ("/dev/infiniband/uverbs0", "/dev/infiniband/uverbs1")
    assert (facts.ucx, facts.nccl, facts.libibverbs) == ("1.13.1", expected, "1.14.50.0")
    assert facts.memlock == memlock_here()
    problems = [p.seen for p in fleet.host_problems(facts, "node2", "InfiniBand")]
    assert problems == ([] if memlock_here() == "unlimited" else [f"ulimit -l: {memlock_here()}"])


def test_the_script_on_a_roce_tree_without_tools(tmp_path):
    """No ucx_info, no python asked: those lines are absent, the facts complete."""
    import os

    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    out = run_script(P.ReadIbFacts(fleet.script(), root=str(SYSROOTS / "rdma-roce")), env)
    facts = parse_ib_facts(out)
    assert facts.complete and (facts.nccl, facts.libibverbs) == ("", "")
    if not shutil.which("ucx_info", path=env["PATH"]):
        assert facts.ucx == ""
    assert [(p.name, p.state, p.rate_gbps, p.link_layer) for p in facts.ports] == [
        ("mlx5_0:1", "ACTIVE", 100.0, "Ethernet")]
    seen = [p.seen for p in fleet.host_problems(facts, "node2", "InfiniBand")]
    assert seen[0] == "no ACTIVE InfiniBand port"
    assert not [p for p in fleet.host_problems(facts, "node2", "Ethernet") if "port" in p.seen]


def test_the_script_on_a_down_port_and_on_no_rdma_at_all(tmp_path):
    down = parse_ib_facts(run_script(P.ReadIbFacts(fleet.script(),
                                                   root=str(SYSROOTS / "rdma-down"))))
    assert fleet.host_problems(down, "n", "InfiniBand")[0].seen == (
        "no ACTIVE InfiniBand port: mlx5_0:1 DOWN")
    (tmp_path / "sys").mkdir()
    none = parse_ib_facts(run_script(P.ReadIbFacts(fleet.script(), root=str(tmp_path))))
    assert none.complete and none.ports == () and none.uverbs == ()
    assert [p.seen for p in fleet.host_problems(none, "n", "InfiniBand")][:2] == [
        "no ACTIVE InfiniBand port", "no /dev/infiniband/uverbs*"]


def test_the_ssh_form_is_the_same_script_quoted_once_more(tmp_path):
    """What ssh gives the peer's shell (its last argument) runs the same script there."""
    root = str(SYSROOTS / "rdma-ib-hdr")
    remote = P.ReadIbFacts(fleet.script(), host="node2", port=2222, root=root).argv()[-1]
    local = P.ReadIbFacts(fleet.script(), root=root)
    done = subprocess.run(["sh", "-c", remote], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == run_script(local)
    assert "\n" not in remote  # the command a check shows is one line


def test_the_script_file_runs_as_it_is(tmp_path):
    """The file itself (bash ib_facts.sh ROOT) and verify's one-line form say the same."""
    from hpcwizard.verify.shipped import program

    path = tmp_path / "ib_facts.sh"
    path.write_text(program(fleet.IB_FACTS))
    root = str(SYSROOTS / "rdma-roce")
    done = subprocess.run(["bash", str(path), root], capture_output=True, text=True)
    assert done.stdout == run_script(P.ReadIbFacts(fleet.script(), root=root))


def test_the_parser_ignores_other_lines():
    out = "Welcome to node2\n" + FakeSystem.ib_facts_out(ucx="") + "HPCWIZARD-IB\tbogus\n"
    facts = parse_ib_facts(out)
    assert facts.complete and facts.ucx == "" and len(facts.ports) == 2
    assert not parse_ib_facts("Welcome\n").complete


def test_software_rdma_is_never_a_jobs_port():
    rxe = parse_ib_facts(FakeSystem.ib_facts_out(
        ports=(("rxe0", "1", "4: ACTIVE", "10 Gb/sec (1X QDR)", "Ethernet"),)))
    assert fleet.job_ports(rxe, "Ethernet") == []


# --- the report, the Done screen, the package --------------------------------------------------


def test_the_report_shows_them():
    from hpcwizard.report_verify import format_report

    f = make_facts()
    plan = build_plan(f, make_choices(framework="mpi", network="ib", mode="manual"),
                      load_catalog())
    peers = names(3)
    report = verify(plan, f, Hosts(tuple(peers), "--hosts"),
                    system=FakeSystem(peers, on("node3", ucx="1.15.0")))
    text = format_report(report).splitlines()
    assert any(x.startswith("PASS  node2: InfiniBand ports, uverbs and memlock — mlx5_0:1 "
                            "200 Gb/s") for x in text)
    line = next(i for i, x in enumerate(text) if "alike on every instance" in x)
    assert text[line] == ("FAIL  InfiniBand ports and library versions alike on every instance "
                          "— node3: UCX 1.15.0, the others 1.16.0")


def test_done_screen_shows_them(tmp_path, monkeypatch):
    pytest.importorskip("textual")
    from _tui_fixtures import gpu_ib, make_app, name, sync, text_of, wait_for
    from textual.widgets import Static

    monkeypatch.setenv("HOSTS", "node1,node2,node3")
    system = FakeSystem(names(3), on("node3", ucx="1.15.0"))

    @sync
    async def drive():
        app = make_app(tmp_path, facts=gpu_ib(sudo="nopasswd"), verify_system=system)
        async with app.run_test(size=(100, 40)) as pilot:
            await wait_for(pilot, lambda: name(app) == "SystemScreen")
            await pilot.press("enter")
            await wait_for(pilot, lambda: name(app) == "ChooseScreen")
            await pilot.press("tab", "right", "enter")  # network: InfiniBand
            await pilot.press("ctrl+n")
            await wait_for(pilot, lambda: name(app) == "RecommendScreen")
            await pilot.press("c")
            await wait_for(pilot, lambda: name(app) == "ReviewScreen")
            await wait_for(pilot, lambda: all(app.screen.checked))
            await pilot.press("r")
            await wait_for(pilot, lambda: app.run_status == "done")
            await pilot.press("n")
            await wait_for(pilot, lambda: name(app) == "DoneScreen")
            await wait_for(pilot, lambda: app.screen.verify_state == "ended")
            assert app.plan.choices.network == "ib"
            done = app.screen
            return ({c.id: c.status for c in done.checks},
                    text_of(done.query_one("#verify-results", Static)))

    statuses, shown = drive()
    assert statuses["peer/node2/ib"] == PASS and statuses["cluster/ib-same"] == FAIL
    assert "node3: UCX 1.15.0, the others 1.16.0" in shown
    assert "node2: InfiniBand ports, uverbs and memlock" in shown


def test_the_script_ships_in_the_package_and_the_zipapp(tmp_path):
    """Every file of programs/ is package data (pyproject.toml), which the zipapp's build
    copies as setuptools installs it."""
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        tomllib = pytest.importorskip("tomli")
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import build_pyz
    finally:
        sys.path.remove(str(REPO / "tools"))
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    build_pyz.copy_project(pyproject, tmp_path)
    programs = REPO / "wizard" / "verify" / "programs"
    shipped = {p.name for p in (tmp_path / "hpcwizard" / "verify" / "programs").iterdir()}
    assert {p.name for p in programs.iterdir() if p.is_file()} <= shipped
    assert "ib_facts.sh" in shipped
