"""verify --bandwidth (issue 17) with a fake System: ib_write_bw against the port's rate, TCP
against the interface's speed, the all_reduce's bus bandwidth against the NICs; the verdict
arithmetic at its boundaries; the parsers on real published ib_write_bw outputs; and that
without the flag the checks are no part of the report."""
import dataclasses
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from _core_fixtures import ROOT, facts
from _ib_fixtures import make_facts
from _verify_fixtures import FakeSystem
from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.facts import Port
from hpcwizard.hosts import Hosts
from hpcwizard.plan import build_plan
from hpcwizard.verify import FAIL, PASS, SKIP, verify
from hpcwizard.verify import bandwidth as BW
from hpcwizard.verify import probes as P
from hpcwizard.verify.parse import (parse_busbw, parse_ib_write_bw, parse_link_speed,
                                    parse_tcp_bw, parse_tcp_listen)
from hpcwizard.verify.shipped import program

OUT = Path(__file__).parent / "fixtures" / "outputs"
ROUTE = (0, "10.0.0.2 dev eth0 src 10.0.0.1 uid 0 \\    cache \n")
TORCH_OK = (0, 'HPCWIZARD-TORCH {"torch": "2.13.0", "python": "/usr/bin/python3", '
               '"cuda": false, "dist": true, "nccl": false, "nccl_version": ""}\n')


def run(peers, framework="mpi", network="tcp", f=None, answers=None, bandwidth=True):
    f = f or (make_facts() if network == "ib" else facts(user=ROOT))
    plan = build_plan(f, make_choices(framework=framework, network=network, mode="manual"),
                      load_catalog())
    sys_ = FakeSystem(peers, {P.RouteTo: ROUTE, P.TorchImport: TORCH_OK, **(answers or {})})
    report = verify(plan, f, Hosts(tuple(peers), "--hosts"), system=sys_, bandwidth=bandwidth)
    return report, {c.id: c for c in report.checks}, sys_


def bandwidth_checks(checks):
    return {k: v for k, v in checks.items()
            if k.startswith(("cluster/ib-write-bw", "cluster/tcp-bandwidth",
                             "cluster/torch-busbw"))}


# --- the parsers, on real published outputs ------------------------------------------------

def test_ib_write_bw_parser_reads_the_published_outputs():
    healthy = parse_ib_write_bw((OUT / "ib_write_bw_rail-97gbps.txt").read_text())
    assert healthy == pytest.approx((97.28 * 5 + 97.29) / 6)  # --run_infinitely: rows averaged
    assert parse_ib_write_bw((OUT / "ib_write_bw_spark-111gbps.txt").read_text()) == 111.71


def test_ib_write_bw_parser_units_sizes_and_no_result():
    table = (" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
             " 65536      1000             2563.33            2563.29\t\t   0.041013\n")
    assert parse_ib_write_bw(table) == pytest.approx(2563.29 * 8 / 1000)
    sweep = (" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
             " 2          5000           0.14               0.01               0.767588\n"
             "Conflicting CPU frequency values detected: 1500.000000 != 3300.016000.\n"
             " 8388608    5000           389.45             389.20             0.005800\n")
    assert parse_ib_write_bw(sweep) == 389.20  # the largest message size
    assert parse_ib_write_bw(" Couldn't connect to 10.0.0.2:18515\n") is None
    assert parse_ib_write_bw(sweep.splitlines()[0]) is None  # a header, no row


def test_the_other_parsers():
    assert parse_tcp_listen("HPCWIZARD-TCPBW-LISTEN port=40001 token=ab\n") == {
        "port": "40001", "token": "ab"}
    assert parse_tcp_bw(FakeSystem.tcp_bw_line(9.4)) == 9.4
    assert parse_tcp_bw("Traceback ...\nConnectionRefusedError\n") is None
    assert parse_busbw(FakeSystem.busbw_line(2.5))["busbw"] == "2.500"
    assert parse_link_speed("speed=-1 virtual=1 kind=none\n") == {
        "speed": "-1", "virtual": "1", "kind": "none"}


# --- the verdict arithmetic ----------------------------------------------------------------

@pytest.mark.parametrize("gbps,ok,percent", [(180.0, True, 90), (179.99, False, 89),
                                             (200.0, True, 100), (111.71, False, 55)])
def test_ib_verdict_at_90_percent(gbps, ok, percent):
    v = BW.ib_verdict(gbps, 200.0)
    assert (v.ok, v.percent) == (ok, percent)
    line = v.line("node1 → node2 (mlx5_0:1)")
    assert line.startswith(f"node1 → node2 (mlx5_0:1): {gbps:.1f} Gb/s of 200 Gb/s ({percent} %)")
    assert line.endswith("≥ 90 %: healthy" if ok else "< 90 %: below the line rate")


def test_tcp_verdict_at_70_percent_and_without_a_speed():
    link = BW.Link("eth0", 10000)
    assert BW.tcp_verdict(7.0, link).ok and not BW.tcp_verdict(6.99, link).ok
    assert BW.tcp_verdict(6.99, link).line("x").endswith("< 70 %: below the line rate")
    fast = BW.tcp_verdict(10.0, BW.Link("eth0", 100000))  # one stream cannot fill 100G
    assert fast.ok and fast.threshold is None and "(10 %)" in fast.line("x")
    veth = BW.tcp_verdict(3.2, BW.Link("eth0", None, "eth0 is a virtual interface"))
    assert veth.ok and veth.line("a → b over TCP") == (
        "a → b over TCP: 3.2 Gb/s; no line rate to compare (eth0 is a virtual interface)")


def test_expected_bus_bandwidth_per_nic():
    hdr = Port("mlx5_0", 1, "ACTIVE", rate_gbps=200.0)
    ndr = Port("mlx5_1", 1, "ACTIVE", rate_gbps=400.0)
    assert BW.expected_busbw([hdr]) == pytest.approx(24.0)
    assert BW.expected_busbw([ndr]) == pytest.approx(48.0)
    assert BW.expected_busbw([hdr, hdr]) == pytest.approx(48.0)
    assert BW.expected_busbw([dataclasses.replace(hdr, rate_gbps=None)]) is None
    assert BW.busbw_verdict(43.2, True, [hdr, hdr], None).ok  # 90 % of 48
    assert not BW.busbw_verdict(43.1, True, [hdr, hdr], None).ok


# --- the checks, with a fake System ---------------------------------------------------------

def test_not_asked_for_they_are_no_part_of_the_report():
    for network in ("tcp", "ib"):
        _, checks, sys_ = run({"node1": "ok", "node2": "ok"}, network=network, bandwidth=False)
        assert bandwidth_checks(checks) == {}
        assert not sys_.asked(P.TcpBwReceiver) and not sys_.asked(P.IbWriteBwServer)


def test_tcp_pairs_this_instance_with_each_other_one():
    report, checks, sys_ = run({"node1": "ok", "node2": "ok", "node3": "ok"})
    bw = bandwidth_checks(checks)
    assert sorted(bw) == ["cluster/tcp-bandwidth/node2", "cluster/tcp-bandwidth/node3"]
    assert report.ok, [(c.id, c.detail) for c in report.checks if c.failed]
    assert bw["cluster/tcp-bandwidth/node2"].detail == (
        "node1 → node2 over TCP (eth0): 9.4 Gb/s of 10 Gb/s (94 %) ≥ 70 %: healthy")
    assert [p.host for p in sys_.asked(P.TcpBwReceiver)] == ["node2", "node3"]
    send = sys_.asked(P.TcpBwSender)[0]
    assert (send.address, send.tcp_port, send.token) == ("10.0.0.2", 40001, FakeSystem.TOKEN)
    assert sys_.asked(P.LinkSpeed)[0].iface == "eth0"


def test_tcp_below_the_threshold_fails_naming_the_pair():
    slow = {P.TcpBwSender: (0, FakeSystem.tcp_bw_line(0.94))}
    report, checks, _ = run({"node1": "ok", "node2": "ok"}, answers=slow)
    c = checks["cluster/tcp-bandwidth/node2"]
    assert not report.ok and c.status == FAIL and c.host == "node2"
    assert c.detail == "node1 → node2 over TCP (eth0): 0.9 Gb/s of 10 Gb/s (9 %) < 70 %: below the line rate"
    assert "9 % of eth0's speed" in c.explain


def test_tcp_on_a_veth_gives_the_figure_without_a_threshold():
    veth = {P.LinkSpeed: (0, "speed=10000 virtual=1 kind=none\n")}
    _, checks, _ = run({"node1": "ok", "node2": "ok"}, answers=veth)
    c = checks["cluster/tcp-bandwidth/node2"]
    assert c.status == PASS
    assert c.detail == ("node1 → node2 over TCP (eth0): 9.4 Gb/s; no line rate to compare "
                        "(eth0 is a virtual interface (veth or the like): its speed says "
                        "nothing of the link)")


def test_tcp_receiver_that_prints_no_valid_token_is_a_failure_not_a_send():
    bad = {P.TcpBwReceiver: (0, "HPCWIZARD-TCPBW-LISTEN port=40001 token=$(reboot)\n")}
    _, checks, sys_ = run({"node1": "ok", "node2": "ok"}, answers=bad)
    assert checks["cluster/tcp-bandwidth/node2"].status == FAIL
    assert not sys_.asked(P.TcpBwSender)


def test_a_peer_without_a_login_is_not_measured():
    report, checks, _ = run({"node1": "ok", "node2": "ok", "node3": "nokey"})
    assert "cluster/tcp-bandwidth/node2" in checks
    assert "cluster/tcp-bandwidth/node3" not in checks


def test_one_host_is_a_skip_with_the_reason_when_asked_for():
    _, checks, _ = run({"node1": "ok"})
    c = checks["cluster/tcp-bandwidth"]
    assert c.status == SKIP and c.detail == "one host: nothing crosses the network"


def test_ib_write_bw_on_each_job_port_against_its_rate():
    text = (OUT / "ib_write_bw_spark-111gbps.txt").read_text()
    report, checks, sys_ = run({"node1": "ok", "node2": "ok"}, network="ib",
                               answers={P.IbWriteBwClient: (0, text)})
    bw = bandwidth_checks(checks)
    assert sorted(bw) == ["cluster/ib-write-bw/node2/mlx5_0:1", "cluster/ib-write-bw/node2/mlx5_1:1"]
    c = bw["cluster/ib-write-bw/node2/mlx5_0:1"]
    assert c.status == FAIL and not report.ok
    assert c.detail == ("node1 → node2 (mlx5_0:1): 111.7 Gb/s of 200 Gb/s (55 %) < 90 %: "
                        "below the line rate")
    servers = sys_.asked(P.IbWriteBwServer)
    assert [(s.device, s.tcp_port) for s in servers] == [("mlx5_0", 18515), ("mlx5_1", 18516)]
    assert "timeout 60 ib_write_bw -d mlx5_0 -i 1 -p 18515" in c.command
    assert c.command.endswith("--report_gbits 10.0.0.2")


def test_ib_write_bw_healthy_passes():
    healthy = (OUT / "ib_write_bw_rail-97gbps.txt").read_text()
    rail = dataclasses.replace(make_facts(), hcas=tuple(
        dataclasses.replace(h, ports=tuple(dataclasses.replace(p, rate_gbps=100.0)
                                           for p in h.ports)) for h in make_facts().hcas))
    _, checks, _ = run({"node1": "ok", "node2": "ok"}, network="ib", f=rail,
                       answers={P.IbWriteBwClient: (0, healthy)})
    c = checks["cluster/ib-write-bw/node2/mlx5_1:1"]
    assert c.status == PASS
    assert c.detail == ("node1 → node2 (mlx5_1:1): 97.3 Gb/s of 100 Gb/s (97 %) ≥ 90 %: "
                        "healthy")


def test_ib_write_bw_client_retried_while_the_server_starts():
    tries, connected = [], threading.Event()

    def client(p):
        if not isinstance(p, P.IbWriteBwClient):
            return False
        tries.append(p)
        if len(tries) == 1:  # the first try: the server is not listening yet
            return True
        connected.set()
        return False

    def server(p):  # runs until a client connected, as ib_write_bw's server does
        return isinstance(p, P.IbWriteBwServer) and connected.wait(10)

    answers = {client: (1, " Couldn't connect to 10.0.0.2:18515\n"), server: (0, ""),
               P.IbWriteBwClient: (0, (OUT / "ib_write_bw_spark-111gbps.txt").read_text())}
    _, checks, _ = run({"node1": "ok", "node2": "ok"}, network="ib", answers=answers)
    assert checks["cluster/ib-write-bw/node2/mlx5_0:1"].detail.startswith(
        "node1 → node2 (mlx5_0:1): 111.7 Gb/s")
    assert len(tries) == 3  # two ports, the first tried twice


def test_ib_write_bw_missing_says_install_perftest():
    _, checks, _ = run({"node1": "ok", "node2": "ok"}, network="ib")  # fake: 127
    c = checks["cluster/ib-write-bw/node2/mlx5_0:1"]
    assert c.status == FAIL and "perftest" in c.explain


def test_busbw_over_gloo_is_reported_over_tcp():
    report, checks, sys_ = run({"node1": "ok", "node2": "ok"}, framework="pytorch")
    c = checks["cluster/torch-busbw"]
    assert c.status == PASS, c.detail
    assert c.detail == ("node1 + node2, 2 ranks, gloo over TCP: 2.1 GB/s of 1.25 GB/s (168 %); "
                        "over TCP the CPU bounds it as much as the link: the TCP check gives "
                        "the verdict")
    halves = [p for p in sys_.asked(P.LaunchHalf) if p.program.endswith("busbw.py")]
    assert sorted(p.host for p in halves) == ["", "node2"]


def test_busbw_over_ib_against_the_nics():
    def nccl(busbw):
        def half(busbw_program, here):
            return lambda p: (isinstance(p, P.LaunchHalf) and (not p.host) == here
                              and p.program.endswith("busbw.py") == busbw_program)

        return {half(True, True): (0, FakeSystem.busbw_line(busbw, "nccl", 4)),
                half(True, False): (0, ""),
                half(False, True): (0, FakeSystem.allreduce_line(0, "nccl")),
                half(False, False): (0, FakeSystem.allreduce_line(1, "nccl"))}

    _, checks, _ = run({"node1": "ok", "node2": "ok"}, framework="pytorch", network="ib",
                       answers=nccl(44.0))
    c = checks["cluster/torch-busbw"]
    assert c.detail == ("node1 + node2, 4 ranks, nccl: 44.0 GB/s of 48 GB/s (91 %) ≥ 90 %: "
                        "healthy") and c.status == PASS
    _, checks, _ = run({"node1": "ok", "node2": "ok"}, framework="pytorch", network="ib",
                       answers=nccl(24.0))
    assert checks["cluster/torch-busbw"].status == FAIL


def test_busbw_skipped_when_the_all_reduce_failed():
    broken = {P.LaunchHalf: (1, "torch.distributed.DistStoreError: timed out\n")}
    _, checks, _ = run({"node1": "ok", "node2": "ok"}, framework="pytorch", answers=broken)
    assert checks["cluster/torch-allreduce"].status == FAIL
    assert checks["cluster/torch-busbw"].status == SKIP
    assert checks["cluster/torch-busbw"].detail == "the all_reduce above did not pass"


# --- the programs, for real on this machine (loopback) ------------------------------------

def test_tcp_program_measures_over_loopback():
    prog = program("tcp_bw.py")
    r = subprocess.run([sys.executable, "-", "--receive"], input=prog, text=True,
                       capture_output=True, timeout=30)
    listen = parse_tcp_listen(r.stdout)
    assert r.returncode == 0 and listen, r.stderr
    # a connection without the token is closed, and the receiver still waits for the sender
    import socket
    with socket.create_connection(("127.0.0.1", int(listen["port"]))) as intruder:
        intruder.sendall(b"x" * 40)
        assert intruder.recv(16) == b""
    s = subprocess.run([sys.executable, "-", "--send", "127.0.0.1", listen["port"],
                        listen["token"], "16"], input=prog, text=True, capture_output=True,
                       timeout=60)
    assert s.returncode == 0, s.stderr
    assert parse_tcp_bw(s.stdout) > 0
    assert "bytes=16777216 " in s.stdout


def test_bandwidth_with_here_is_bad_input(capsys):
    from hpcwizard.cli import main

    rc = main(["verify", "--framework", "mpi", "--network", "tcp", "--manual", "--here",
               "--bandwidth"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--bandwidth" in err[0] and "Traceback" not in err[0]
