"""verify (issue 15) with the fake System: checks here log in to 127.0.0.1, never to
'localhost'; a PyTorch plan's SSH checks are skipped with the reason, not failed; verify's
mpirun takes the names of the Open MPI that `mpirun --version` names (5.x: PRRTE's) and the
interface the route to the first other host goes through (`ip -o route get`)."""
import dataclasses
import json
from pathlib import Path

from _core_fixtures import ROOT, facts
from test_verify import run
from hpcwizard.facts import Software
from hpcwizard.report_verify import format_report
from hpcwizard.verify import FAIL, PASS, SKIP, no_ssh_reason, route_dev
from hpcwizard.verify import probes as P

OUT = Path(__file__).parent / "fixtures" / "outputs"
V4 = (0, (OUT / "mpirun_openmpi-4.1.4.txt").read_text())
V5 = (0, (OUT / "mpirun_openmpi-5.0.7.txt").read_text())
ROUTE = (0, (OUT / "ip-o-route-get_direct.txt").read_text())
REASON = "PyTorch jobs start through torchrun's rendezvous, not SSH"
TORCH = (0, 'HPCWIZARD-TORCH {"torch": "2.3.0", "python": "/usr/bin/python3", "cuda": false, '
            '"dist": true, "nccl": false, "nccl_version": ""}\n')


# --- here: 127.0.0.1 ---------------------------------------------------------------------------

def test_here_logs_in_to_127_0_0_1_where_localhost_does_not_resolve():
    """An /etc/hosts without 'localhost' while sshd works: any probe of that name fails (the
    fake's answer for every probe whose host it is), and the checks here still pass."""
    gone = (255, "ssh: Could not resolve hostname localhost: Name or service not known")
    report, c, sys_ = run({"node1": "ok"},
                          answers={lambda p: getattr(p, "host", "") == "localhost": gone})
    login = c["here/login"]
    assert login.status == PASS, login.detail
    assert login.detail == "root@127.0.0.1:2222"
    assert login.command.startswith("ssh -o BatchMode=yes -o ConnectTimeout=5 -p 2222 127.0.0.1 ")
    assert c["here/sshd"].status == PASS and "127.0.0.1:2222" in c["here/sshd"].detail
    assert not [argv for argv in sys_.calls if "localhost" in " ".join(argv)]
    assert [p.host for p in sys_.asked(P.SshCommand)] == ["127.0.0.1", "node1"]
    assert report.ok


# --- PyTorch: no SSH ---------------------------------------------------------------------------

def test_pytorch_tcp_skips_the_ssh_checks_here_with_the_reason():
    report, c, sys_ = run({"node1": "ok"}, framework="pytorch", answers={P.TorchImport: TORCH})
    for cid in ("here/sshd", "here/login"):
        assert c[cid].status == SKIP and c[cid].detail == REASON == no_ssh_reason()
        assert c[cid].command == ""  # nothing ran for them
    assert not [argv for argv in sys_.calls if "127.0.0.1" in " ".join(argv)]
    assert c["here/torch"].status == PASS
    assert report.ok and report.counts[FAIL] == 0
    # the terminal and --json say it the same way
    assert f"skip  sshd listens on port 2222 here — {REASON}" in format_report(report)
    data = json.loads(json.dumps(report.to_dict()))
    here = {x["id"]: x for x in data["checks"]}["here/login"]
    assert (here["status"], here["detail"]) == ("skip", REASON)


def test_pytorch_peer_without_ssh_is_a_skip_that_says_why():
    """node2 has no sshd (nothing a PyTorch job needs): its SSH checks are skips naming the
    reason; a name that does not resolve is still a failure (MASTER_ADDR must resolve)."""
    report, c, _ = run({"node1": "ok", "node2": "down", "node3": "nokey", "node4": "noname"},
                       framework="pytorch", answers={P.TorchImport: TORCH})
    port = c["peer/node2/port"]
    assert port.status == SKIP
    assert port.detail == ("bash: line 1: /dev/tcp/node2/2222: Connection refused; " + REASON
                           + ": verify uses SSH only to start its own test on node2")
    login = c["peer/node3/login"]
    assert login.status == SKIP and REASON in login.detail and "node3" in login.detail
    assert c["peer/node4/resolve"].status == FAIL
    assert [x.id for x in report.checks if x.status == FAIL] == ["peer/node4/resolve"]


# --- Open MPI 4 and 5, the interface ---------------------------------------------------------

def test_mpirun_takes_open_mpi_5_names_and_the_interface_of_the_route():
    report, c, sys_ = run({"node1": "ok", "node2": "ok", "node3": "ok"},
                          answers={P.MpirunVersion: V5, P.RouteTo: ROUTE})
    m = c["cluster/mpirun"]
    assert m.status == PASS, m.detail
    assert "--prtemca plm_ssh_args '-p 2222'" in m.command and "plm_rsh_args" not in m.command
    assert ("--mca btl_tcp_if_include eth0 --prtemca prte_if_include eth0" in m.command
            and "oob_tcp_if_include" not in m.command)
    # the first other host (this one is node1, the fake's answer to "which host is this"):
    # its address's route
    assert [p.address for p in sys_.asked(P.RouteTo)] == ["10.0.0.2"]
    assert m.detail == ("3 ranks on node1, node2, node3; Open MPI 5.0.7; TCP interface eth0 "
                        "(the route to node2 at 10.0.0.2)")
    assert report.ok


def test_mpirun_takes_open_mpi_4_names():
    _, c, _ = run({"node1": "ok", "node2": "ok"},
                  answers={P.MpirunVersion: V4, P.RouteTo: ROUTE})
    m = c["cluster/mpirun"]
    assert m.status == PASS, m.detail
    assert "--mca plm_rsh_args '-p 2222'" in m.command and "prtemca" not in m.command
    assert "--mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0" in m.command


def test_version_from_the_facts_when_mpirun_does_not_say():
    """The fake's `mpirun --version` says nothing (not installed): the facts' 5.0.7 is used.
    No ip answer (the fake: not installed): no interface is imposed."""
    f = dataclasses.replace(facts(user=ROOT), software=Software(
        packages={}, mpi_flavour="openmpi", mpi_version="5.0.7"))
    _, c, _ = run({"node1": "ok", "node2": "ok"}, f=f)
    m = c["cluster/mpirun"]
    assert m.status == PASS and "--prtemca plm_ssh_args" in m.command
    assert "if_include" not in m.command
    assert m.detail == "2 ranks on node1, node2; Open MPI 5.0.7"


def test_unknown_open_mpi_keeps_the_plans_arguments():
    _, c, sys_ = run({"node1": "ok", "node2": "ok"})
    m = c["cluster/mpirun"]
    assert m.status == PASS and m.detail == "2 ranks on node1, node2"
    assert "--mca plm_rsh_args '-p 2222' --map-by node hostname" in m.command
    # asked once per verification, before the job's mpirun
    assert len(sys_.asked(P.MpirunVersion)) == 1


def test_route_dev_reads_ip_route_get():
    assert route_dev((OUT / "ip-o-route-get_direct.txt").read_text()) == "eth0"
    assert route_dev((OUT / "ip-o-route-get_via-gateway.txt").read_text()) == "eth0"
    assert route_dev((OUT / "ip-o-route-get_local.txt").read_text()) == ""  # lo: ours
    assert route_dev("RTNETLINK answers: Network is unreachable\n") == ""


def test_with_host_keys_off_the_login_here_checks_no_more_than_the_peers():
    """127.0.0.1 is not a peer: pinned, its key is in the plan's known_hosts line; with
    --host-keys off nothing pins it, so the login here does not check it either."""
    from hpcwizard.catalog import load_catalog
    from hpcwizard.choices import make_choices
    from hpcwizard.hosts import Hosts
    from hpcwizard.plan import build_plan
    from hpcwizard.verify import verify
    from _verify_fixtures import FakeSystem

    for policy, unchecked in (("off", True), ("pinned", False)):
        system = FakeSystem({"node1": "ok"})
        plan = build_plan(facts(user=ROOT), make_choices(framework="mpi", network="tcp",
                                                         host_keys=policy, peers="node*"),
                          load_catalog(), env={})
        report = verify(plan, facts(user=ROOT), Hosts(("node1",), "--hosts"), system=system)
        login = {c.id: c for c in report.checks}["here/login"]
        assert login.status == PASS, login
        assert ("StrictHostKeyChecking=no" in login.command) == unchecked, login.command
