"""verify with a fake System: which check fails, with which diagnosis; the bound on
concurrency; IB and PyTorch checks; the transport parsers; no printing."""
import dataclasses
import threading
import time
from pathlib import Path

from _core_fixtures import ROOT, facts
from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.facts import Hca, Port, Rdma
from hpcwizard.hosts import Hosts
from hpcwizard.plan import build_plan
from hpcwizard.verify import (FAIL, PASS, SKIP, Ran, System, transport_from_nccl_log,
                              transport_from_ucx_log, verify)

OUT = Path(__file__).parent / "fixtures" / "outputs"


class FakeSystem(System):
    """Peers: name -> state ('ok', 'down', 'noname', 'nokey', 'wrong'); commands answered
    from those states. Records every argv and the highest number of calls in flight."""

    def __init__(self, peers, answers=None):
        self.peers = peers
        self.answers = answers or {}
        self.calls = []
        self.inflight = 0
        self.max_inflight = 0
        self.lock = threading.Lock()

    def uid(self):
        return 0

    def user(self):
        return "root"

    def write_temp(self, name, text, mode=0o644):
        return f"/tmp/fake/{name}"

    def run(self, argv, timeout=10.0, env=None, stdin=None):
        argv = tuple(argv)
        with self.lock:
            self.calls.append(argv)
            self.inflight += 1
            self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            time.sleep(0.01)
            return self._answer(argv)
        finally:
            with self.lock:
                self.inflight -= 1

    def _answer(self, argv):
        for key, ran in self.answers.items():
            if key in " ".join(argv):
                return Ran(argv, *ran)
        if argv[0] == "getent":
            host = argv[2]
            if self.peers.get(host) == "noname":
                return Ran(argv, 2, "")
            return Ran(argv, 0, f"10.0.0.{list(self.peers).index(host) + 1} {host}\n")
        if argv[0] == "timeout":
            target = argv[-1].split("/dev/tcp/")[1].split("/")[0]
            if self.peers.get(target) == "down":
                return Ran(argv, 1, f"bash: line 1: /dev/tcp/{target}/2222: Connection refused")
            return Ran(argv, 0, "")
        if argv[0] == "ssh":
            host = argv[argv.index("-p") + 2]
            if self.peers.get(host) == "nokey":
                return Ran(argv, 255, f"root@{host}: Permission denied (publickey).")
            if self.peers.get(host) == "wrong":
                return Ran(argv, 0, "someone-else\n")
            return Ran(argv, 0, f"{host}\n" if argv[-1] == "hostname" else "")
        if argv[0] == "mpirun":
            return Ran(argv, 0, "".join(f"{h}\n" for h in self.peers))
        return Ran(argv, 127, f"{argv[0]}: command not found")


def plan(framework="mpi", network="tcp", f=None):
    return build_plan(f or facts(user=ROOT), make_choices(framework=framework, network=network,
                                                          mode="manual"), load_catalog())


def run(peers, framework="mpi", network="tcp", f=None, answers=None):
    sys_ = FakeSystem(peers, answers)
    hosts = Hosts(tuple(peers), "--hosts")
    report = verify(plan(framework, network, f), f or facts(user=ROOT), hosts, system=sys_)
    return report, {c.id: c for c in report.checks}, sys_


def test_all_pass():
    report, c, _ = run({"node1": "ok", "node2": "ok", "node3": "ok"})
    assert report.ok, [x for x in report.checks if x.status != PASS]
    assert c["cluster/mpirun"].status == PASS
    assert c["peer/node2/login"].command.startswith("ssh -o BatchMode=yes")
    assert "--allow-run-as-root" in c["cluster/mpirun"].command
    assert report.to_dict()["counts"][FAIL] == 0


def test_sshd_stopped_on_node2():
    report, c, _ = run({"node1": "ok", "node2": "down", "node3": "ok"})
    assert not report.ok
    bad = c["peer/node2/port"]
    assert bad.status == FAIL and [d.id for d in bad.diagnoses] == ["ssh-refused"]
    assert "does not answer on port 2222" in bad.explain
    assert c["peer/node2/login"].status == SKIP
    assert c["cluster/mpirun"].status == SKIP
    assert c["peer/node3/login"].status == PASS


def test_name_removed():
    _, c, _ = run({"node1": "ok", "node2": "ok", "node3": "noname"})
    bad = c["peer/node3/resolve"]
    assert bad.status == FAIL and bad.diagnoses[0].id == "name-unresolved"
    assert bad.command == "getent hosts node3"
    assert c["peer/node3/port"].status == SKIP


def test_key_missing():
    _, c, _ = run({"node1": "ok", "node2": "nokey", "node3": "ok"})
    bad = c["peer/node2/login"]
    assert bad.status == FAIL and [d.id for d in bad.diagnoses] == ["ssh-publickey"]


def test_wrong_host_answers():
    _, c, _ = run({"node1": "ok", "node2": "wrong"})
    assert c["peer/node2/login"].status == FAIL and "someone-else" in c["peer/node2/login"].explain


def test_bounded_concurrency():
    peers = {f"n{i}": "ok" for i in range(40)}
    report, _, sys_ = run(peers)
    assert report.ok
    assert 1 < sys_.max_inflight <= 16


def test_ib_checks():
    f = dataclasses.replace(
        facts(user=ROOT),
        hcas=(Hca("mlx5_0", "mlx5_core", ports=(Port("mlx5_0", 1, "ACTIVE", "LinkUp", 200.0,
                                                     "InfiniBand"),)),
              Hca("mlx5_1", "mlx5_core", ports=(Port("mlx5_1", 1, "DOWN", "Polling", None,
                                                     "InfiniBand"),))),
        rdma=Rdma(uverbs=("uverbs0",)))
    answers = {"ompi_info": (0, (OUT / "ompi_info_4.1.4_ucx.txt").read_text()),
               "ucx_info -d": (0, (OUT / "ucx_info-d.txt").read_text()),
               "ulimit -l": (0, "65536\n"),
               "uverbs": (0, "/dev/infiniband/uverbs0\n"),
               "test -x": (1, ""), "mpicc": (1, "bash: mpicc: command not found")}
    report, c, _ = run({"node1": "ok", "node2": "ok"}, network="ib", f=f, answers=answers)
    assert c["here/ompi-ucx"].status == PASS
    assert c["here/ucx-ib"].status == PASS and "rc_mlx5/mlx5_0:1" in c["here/ucx-ib"].detail
    ports = c["here/ib-ports"]
    # the job's ports (UCX_NET_DEVICES from the plan) are checked: the active one
    assert ports.status == PASS and "mlx5_0:1 ACTIVE 200 Gb/s" in ports.detail
    assert c["here/memlock"].status == FAIL and c["here/memlock"].diagnoses[0].id == "memlock"
    assert c["here/uverbs"].status == PASS
    assert c["cluster/mpi-transport"].status == SKIP  # no mpicc here


def test_ib_port_down():
    f = dataclasses.replace(facts(user=ROOT), hcas=(Hca("mlx5_0", "mlx5_core", ports=(
        Port("mlx5_0", 1, "DOWN", "Polling", None, "InfiniBand"),)),))
    _, c, _ = run({"node1": "ok"}, network="ib", f=f, answers={"ompi_info": (0, "")})
    assert c["here/ib-ports"].status == FAIL and "mlx5_0:1" in c["here/ib-ports"].explain


def test_ompi_without_ucx():
    answers = {"ompi_info": (0, (OUT / "ompi_info_4.1.2_noucx.txt").read_text()),
               "ucx_info -d": (127, "ucx_info: command not found")}
    _, c, _ = run({"node1": "ok"}, network="ib", answers=answers)
    assert c["here/ompi-ucx"].status == FAIL and c["here/ompi-ucx"].diagnoses[0].id == "pml-ucx"
    assert c["here/ucx-ib"].status == FAIL
    assert c["here/ib-ports"].status == FAIL  # no HCA at all


def test_pytorch_without_torch_skips_the_cross_test():
    answers = {"python3": (1, "ModuleNotFoundError: No module named 'torch'")}
    report, c, _ = run({"node1": "ok", "node2": "down"}, framework="pytorch", answers=answers)
    assert c["here/torch"].status == FAIL
    assert c["cluster/torch-allreduce"].status == SKIP
    assert c["peer/node2/port"].status == SKIP  # PyTorch needs no SSH


def test_transport_parsers():
    ucx_ib = ("[1718] [n1:1:0] ucp_worker.c:1855 UCX INFO ep_cfg[1]: tag(self/memory0 "
              "rc_mlx5/mlx5_0:1 ud_mlx5/mlx5_0:1)")
    ucx_tcp = "[1718] [n1:1:0] ucp_worker.c:1855 UCX INFO ep_cfg[1]: tag(self/memory tcp/eth0)"
    assert transport_from_ucx_log(ucx_ib) == "ib"
    assert transport_from_ucx_log(ucx_tcp) == "tcp"
    assert transport_from_ucx_log("nothing") == ""
    assert transport_from_nccl_log("n1:1:2 [0] NCCL INFO Using network IB") == "ib"
    fallback = (Path(__file__).parent / "fixtures/logs/nccl-socket-fallback.log").read_text()
    assert transport_from_nccl_log(fallback) == "tcp"


def test_no_printing_in_verify(capsys):
    run({"node1": "ok", "node2": "down"})
    assert capsys.readouterr().out == ""


def test_cli_formats_and_exits(monkeypatch, capsys):
    import hpcwizard.verify as v
    from hpcwizard.cli import main

    fake = FakeSystem({"node1": "ok", "node2": "down"})
    monkeypatch.setattr(v, "System", lambda: fake)
    monkeypatch.setattr("hpcwizard.cli._facts", lambda sysroot: facts(user=ROOT))
    rc = main(["verify", "--framework", "mpi", "--network", "tcp", "--manual",
               "--hosts", "node1,node2"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "hosts from --hosts: node1, node2" in out
    assert "FAIL  node2: SSH port 2222 answers" in out and "cause:" in out
    fake1 = FakeSystem({"node1": "ok"})
    monkeypatch.setattr(v, "System", lambda: fake1)
    rc = main(["verify", "--framework", "mpi", "--network", "tcp", "--manual",
               "--hosts", "node1", "--json"])
    import json
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["ok"] and data["hosts"]["source"] == "--hosts"
