"""verify --bandwidth (issue 17) with a fake System: ib_write_bw against the port's rate, TCP
against the interface's speed, the all_reduce's bus bandwidth against the NICs; the verdict
arithmetic at its boundaries; the parsers on real published ib_write_bw outputs; and that
without the flag the checks are no part of the report."""
import contextlib
import dataclasses
import os
import socket
import struct
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
                                    parse_tcp_bw, parse_tcp_listen, parse_tcp_rtt)
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


def test_a_figure_that_is_not_finite_is_no_figure():
    """perftest prints 'nan' for a run that took no time; an 'inf' from a sender whose
    receiver measured no time. Neither has a share of a line rate: no figure (None)."""
    header = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
    for cell in ("nan", "-nan", "inf"):
        assert parse_ib_write_bw(header + f" 1048576    5000    0.00    {cell}    0.0\n") is None
    mixed = header + " 1048576 5000 0.0 nan 0.0\n 1048576 5000 97.0 97.0 0.01\n"
    assert parse_ib_write_bw(mixed) is None  # the average of the size is not a figure
    for gbps in ("inf", "nan", "-inf", "1e999"):
        assert parse_tcp_bw(f"HPCWIZARD-TCPBW bytes=1 seconds=0 gbps={gbps}\n") is None
    assert "busbw" not in parse_busbw("HPCWIZARD-BUSBW size=2 backend=nccl busbw=nan\n")
    assert parse_busbw("HPCWIZARD-BUSBW size=2 backend=nccl busbw=inf\n")["size"] == "2"


def test_a_nan_from_ib_write_bw_fails_the_pair_without_a_crash():
    header = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
    nan = header + " 1048576    5000    nan    nan    nan\n"
    _, checks, _ = run({"node1": "ok", "node2": "ok"}, network="ib",
                       answers={P.IbWriteBwClient: (0, nan)})
    c = checks["cluster/ib-write-bw/node2/mlx5_0:1"]
    assert c.status == FAIL and "did not complete" in c.explain


def test_an_inf_from_the_tcp_sender_fails_the_pair_without_a_crash():
    inf = {P.TcpBwSender: (0, "HPCWIZARD-TCPBW bytes=1 seconds=0.000000 gbps=inf\n")}
    _, checks, _ = run({"node1": "ok", "node2": "ok"}, answers=inf)
    assert checks["cluster/tcp-bandwidth/node2"].status == FAIL


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


@pytest.mark.parametrize("rate,gbps,ok,reference", [
    (40.0, 30.5, True, "32 Gb/s (40 Gb/s, 8b/10b)"),   # a healthy QDR port: 95 % of its data
    (40.0, 28.7, False, "32 Gb/s (40 Gb/s, 8b/10b)"),  # 89 %
    (20.0, 15.0, True, "16 Gb/s (20 Gb/s, 8b/10b)"),   # DDR
    (10.0, 7.9, True, "8 Gb/s (10 Gb/s, 8b/10b)"),     # SDR 4X (or QDR 1X)
    (56.0, 51.0, True, "56 Gb/s"),                     # FDR: 64b/66b, not scaled
    (25.0, 22.0, False, "25 Gb/s"),                    # EDR 1X: 64b/66b, not scaled
])
def test_ib_verdict_holds_8b10b_rates_to_their_data_rate(rate, gbps, ok, reference):
    v = BW.ib_verdict(gbps, rate)
    assert v.ok == ok
    assert v.line("a → b").startswith(f"a → b: {gbps:.1f} Gb/s of {reference} ({v.percent} %)")


def test_roce_speeds_are_data_rates_already():
    v = BW.ib_verdict(30.0, 40.0, "Ethernet")  # 40GbE RoCE: 75 % of 40, no 8b/10b
    assert not v.ok and "8b/10b" not in v.line("x") and v.reference == 40.0


def test_a_figure_that_is_not_finite_has_no_share_and_no_crash():
    assert BW.Verdict(float("nan"), "Gb/s", 200.0, 90).percent is None
    assert BW.Verdict(float("inf"), "Gb/s", 200.0, 90).line("x").startswith("x: inf Gb/s")


def test_tcp_verdict_at_70_percent_and_without_a_speed():
    link = BW.Link("eth0", 10000)
    assert BW.tcp_verdict(7.0, link).ok and not BW.tcp_verdict(6.99, link).ok
    assert BW.tcp_verdict(6.99, link).line("x").endswith("< 70 %: below the line rate")
    fast = BW.tcp_verdict(10.0, BW.Link("eth0", 100000))  # one stream cannot fill 100G
    assert fast.ok and fast.threshold is None and "(10 %)" in fast.line("x")
    veth = BW.tcp_verdict(3.2, BW.Link("eth0", None, "eth0 is a virtual interface"))
    assert veth.ok and veth.line("a → b over TCP") == (
        "a → b over TCP: 3.2 Gb/s; no line rate to compare (eth0 is a virtual interface)")


def test_nics_used_are_the_fewer_of_nics_and_processes():
    hdr = Port("mlx5_0", 1, "ACTIVE", rate_gbps=200.0)
    eight = [dataclasses.replace(hdr, hca=f"mlx5_{i}") for i in range(8)]
    assert BW.expected_busbw(eight, 1) == pytest.approx(24.0)
    assert BW.expected_busbw(eight, 4) == pytest.approx(96.0)
    assert BW.expected_busbw(eight, 16) == pytest.approx(192.0)  # no more NICs than there are
    assert BW.expected_busbw(eight) == pytest.approx(192.0)  # no count: every NIC
    # different rates: held to the slowest NICs, whichever NCCL picked
    ndr = Port("mlx5_9", 1, "ACTIVE", rate_gbps=400.0)
    assert BW.expected_busbw([ndr, hdr], 1) == pytest.approx(24.0)
    v = BW.busbw_verdict(23.0, True, eight, None, 1)
    assert v.ok and v.line("x") == ("x: 23.0 GB/s of 24 GB/s (1 of 8 NICs: one per process, "
                                    "1 per instance) (95 %) ≥ 90 %: healthy")
    assert not BW.busbw_verdict(23.0, True, eight, None, 2).ok  # two NICs: 48 GB/s
    assert "NICs" not in BW.busbw_verdict(190.0, True, eight, None, 8).line("x")


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
    assert (send.mib, send.seconds) == (BW.TCP_MIB, BW.TCP_SECONDS)
    assert send.argv()[-2:] == ("512", "10")
    # the receiver listens on the address the sender connects to, and on it only
    assert sys_.asked(P.TcpBwReceiver)[0].address == "10.0.0.2"
    assert sys_.asked(P.TcpBwReceiver)[0].argv()[-1].endswith("- --receive 10.0.0.2")
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


def test_a_peer_without_an_address_is_a_failure_before_anything_runs_there():
    """The receiver binds the address the sender will use: a name that did not resolve
    (verify's peer checks stop before this; the pair refuses it on its own) never reaches
    the peer's shell."""
    from types import SimpleNamespace

    sys_ = FakeSystem({"node1": "ok", "node2": "ok"}, {P.RouteTo: ROUTE})
    ctx = SimpleNamespace(addresses={"node2": ""}, ask=sys_.ask, port=2222, user="",
                          python="python3")
    c = BW.tcp_pair(ctx, "node1", "node2")
    assert c.status == FAIL and c.detail == "no IP address for node2 here"
    assert c.command == "getent hosts node2"
    assert not sys_.asked(P.TcpBwReceiver) and not sys_.asked(P.TcpBwSender)


def test_a_receiver_that_cannot_listen_on_the_address_says_why():
    """What the real program prints when the peer has not got the address its name resolves
    to here (tests below: it refuses a name outright)."""
    r = subprocess.run([sys.executable, "-", "--receive", "192.0.2.1"],  # TEST-NET-1: not ours
                       input=program("tcp_bw.py"), text=True, capture_output=True, timeout=30)
    assert r.returncode == 2 and "cannot listen on 192.0.2.1" in r.stdout
    _, checks, sys_ = run({"node1": "ok", "node2": "ok"},
                          answers={P.TcpBwReceiver: (2, r.stdout)})
    c = checks["cluster/tcp-bandwidth/node2"]
    assert c.status == FAIL and "cannot listen on 192.0.2.1" in c.detail
    assert "node2 has no address 10.0.0.2" in c.explain and not sys_.asked(P.TcpBwSender)


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


def allreduce_lines(node, nproc, backend):
    """What the all-reduce program prints on one instance of two, nproc ranks on each."""
    world = 2 * nproc
    total = world * (world + 1) // 2
    return "".join(f"HPCWIZARD-ALLREDUCE rank={r} size={world} backend={backend} sum={total} "
                   f"expected={total} local={r - node * nproc} node={node}\n"
                   for r in range(node * nproc, (node + 1) * nproc))


def nccl(busbw, nproc):
    def half(busbw_program, here):
        return lambda p: (isinstance(p, P.LaunchHalf) and (not p.host) == here
                          and p.program.endswith("busbw.py") == busbw_program)

    return {half(True, True): (0, FakeSystem.busbw_line(busbw, "nccl", 2 * nproc)),
            half(True, False): (0, ""),
            half(False, True): (0, allreduce_lines(0, nproc, "nccl")),
            half(False, False): (0, allreduce_lines(1, nproc, "nccl"))}


def test_busbw_over_ib_against_the_nics(monkeypatch):
    monkeypatch.setenv("NPROC_PER_NODE", "2")  # two processes: both HDR NICs busy
    _, checks, _ = run({"node1": "ok", "node2": "ok"}, framework="pytorch", network="ib",
                       answers=nccl(44.0, 2))
    c = checks["cluster/torch-busbw"]
    assert c.detail == ("node1 + node2, 4 ranks, nccl: 44.0 GB/s of 48 GB/s (91 %) ≥ 90 %: "
                        "healthy") and c.status == PASS
    _, checks, _ = run({"node1": "ok", "node2": "ok"}, framework="pytorch", network="ib",
                       answers=nccl(24.0, 2))
    assert checks["cluster/torch-busbw"].status == FAIL


def test_busbw_with_one_process_is_held_to_one_nic(monkeypatch):
    """NPROC_PER_NODE=1 on a two-NIC node: NCCL drives about one NIC, so a healthy run's
    22 GB/s passes against one HDR NIC's 24 GB/s (summing both, 48, it failed)."""
    monkeypatch.setenv("NPROC_PER_NODE", "1")
    _, checks, sys_ = run({"node1": "ok", "node2": "ok"}, framework="pytorch", network="ib",
                          answers=nccl(22.0, 1))
    c = checks["cluster/torch-busbw"]
    assert (c.status, c.detail) == (PASS, (
        "node1 + node2, 2 ranks, nccl: 22.0 GB/s of 24 GB/s (1 of 2 NICs: one per process, "
        "1 per instance) (91 %) ≥ 90 %: healthy"))
    assert {dict(p.extra_env).get("NPROC_PER_NODE") for p in sys_.asked(P.LaunchHalf)} == {"1"}


def test_busbw_skipped_when_the_all_reduce_failed():
    broken = {P.LaunchHalf: (1, "torch.distributed.DistStoreError: timed out\n")}
    _, checks, _ = run({"node1": "ok", "node2": "ok"}, framework="pytorch", answers=broken)
    assert checks["cluster/torch-allreduce"].status == FAIL
    assert checks["cluster/torch-busbw"].status == SKIP
    assert checks["cluster/torch-busbw"].detail == "the all_reduce above did not pass"


# --- the programs, for real on this machine (loopback) ------------------------------------

def receiver(address="127.0.0.1"):
    r = subprocess.run([sys.executable, "-", "--receive", address], input=program("tcp_bw.py"),
                       text=True, capture_output=True, timeout=30)
    listen = parse_tcp_listen(r.stdout)
    assert r.returncode == 0 and listen, r.stdout + r.stderr
    return int(listen["port"]), listen["token"]


def sender(port, token, mib, seconds, address="127.0.0.1"):
    return subprocess.run([sys.executable, "-", "--send", address, str(port), str(mib),
                           str(seconds)], input=program("tcp_bw.py"), text=True,
                          env={**os.environ, "HPCWIZARD_TCPBW_TOKEN": token},
                          capture_output=True, timeout=60)


def test_tcp_token_is_in_the_senders_environment_not_its_command_line():
    """`ps` shows every user a command line; /proc/PID/environ is its owner's."""
    send = P.TcpBwSender("10.0.0.2", 40001, FakeSystem.TOKEN, 4, "python3", "", 10.0)
    assert FakeSystem.TOKEN not in " ".join(send.argv()) + send.command
    assert send.env() == {"HPCWIZARD_TCPBW_TOKEN": FakeSystem.TOKEN}


HEAD = "!QdI"  # tcp_bw.py's header after the token: bytes, seconds, round trips
PINGS = 32  # the round trips its sender times


@pytest.mark.parametrize("size, seconds, pings", [
    (1 << 20, float("nan"), PINGS), (1 << 20, float("inf"), PINGS), (1 << 20, -1.0, PINGS),
    (1 << 20, 3600.0, PINGS), (0, 1.0, PINGS), ((1 << 63) - 1, 1.0, PINGS),
    (1 << 20, 1.0, 0), (1 << 20, 1.0, 1001), (1 << 20, 1.0, (1 << 32) - 1)])
def test_tcp_receiver_refuses_sizes_out_of_range_with_an_answer(size, seconds, pings):
    """A token holder's NaN, infinite or huge figures get the REFUSED answer (the receiver
    did not die on them), and the sender says so in one line."""
    port, token = receiver()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(token.encode() + struct.pack(HEAD, size, seconds, pings))
        answer = b""
        while len(answer) < 16:
            part = conn.recv(16 - len(answer))
            assert part, "the receiver closed without an answer"
            answer += part
    assert struct.unpack("!Qd", answer) == (0, -1.0)


def read_exactly(conn, n):
    buf = b""
    while len(buf) < n:
        part = conn.recv(n - len(buf))
        if not part:  # the sender ended the test (as it does on a bad answer)
            raise ConnectionError("closed early")
        buf += part
    return buf


def fake_receiver(reply, ready=struct.pack("!Qd", 0, 0.0), echo=lambda ping: ping,
                  pings=None):
    """A receiver on loopback that takes the header, answers ready, sends echo(ping) back
    for each round trip until the 0 that ends them (each ping seen appended to pings),
    takes the bytes, then answers reply."""
    srv = socket.create_server(("127.0.0.1", 0))

    def serve():
        conn, _ = srv.accept()
        with conn, contextlib.suppress(OSError):
            read_exactly(conn, 32 + struct.calcsize(HEAD))
            conn.sendall(ready)
            while (ping := read_exactly(conn, 8)) != struct.pack("!Q", 0):
                if pings is not None:
                    pings.append(ping)
                conn.sendall(echo(ping))
            while conn.recv(1 << 20):
                pass
            conn.sendall(reply)
        srv.close()

    threading.Thread(target=serve, daemon=True).start()
    return srv.getsockname()[1]


@pytest.mark.parametrize("reply", [struct.pack("!Qd", 1 << 20, float("nan")),
                                   struct.pack("!Qd", 1 << 20, float("inf")),
                                   struct.pack("!Qd", 1 << 20, -5.0),
                                   struct.pack("!Qd", (1 << 64) - 1, 1.0),
                                   struct.pack("!Qd", 0, -1.0)])
def test_tcp_sender_answers_a_reply_out_of_range_with_one_line(reply):
    s = sender(fake_receiver(reply), "a" * 32, 1, 5)
    assert s.returncode == 1 and not s.stderr, s.stderr
    assert s.stdout.startswith("HPCWIZARD-TCPBW-ERROR ") and len(s.stdout.splitlines()) == 1
    assert parse_tcp_bw(s.stdout) is None


@pytest.mark.parametrize("ready, echo, said", [
    (struct.pack("!Qd", 0, -1.0), lambda ping: ping, "the receiver refused 1 MiB in 5 s"),
    (struct.pack("!Qd", 1, 0.0), lambda ping: ping, "first answer is not READY"),
    (struct.pack("!Qd", 0, 0.0), lambda ping: ping[::-1], "echoed another number"),
    (struct.pack("!Qd", 0, 0.0), lambda ping: b"\xff" * 8, "echoed another number")])
def test_tcp_sender_checks_the_receivers_first_answer_and_echoes(ready, echo, said):
    """The round trips' times are the sender's own clock: from the other end only echoes
    come, and one that is not the number sent ends the test in one line, with no figure."""
    s = sender(fake_receiver(struct.pack("!Qd", 1 << 20, 0.1), ready, echo), "a" * 32, 1, 5)
    assert s.returncode == 1 and not s.stderr, s.stderr
    assert s.stdout.startswith("HPCWIZARD-TCPBW-ERROR ") and len(s.stdout.splitlines()) == 1
    assert said in s.stdout and parse_tcp_bw(s.stdout) is None
    assert parse_tcp_rtt(s.stdout) is None


def test_a_path_queued_for_long_gives_a_few_slow_round_trips_and_still_a_figure():
    """A queue of a quarter second on the path (a shaped link under load): the round trips
    stop after PING_TIME (0.5 s) with their median, and the bytes are measured after them,
    not a time-out that reads as a firewall."""
    import time

    seen = []

    def late(ping):
        time.sleep(0.25)  # the path's queue, played by the receiver
        return ping

    t0 = time.monotonic()
    s = sender(fake_receiver(struct.pack("!Qd", 1 << 20, 0.1), echo=late, pings=seen),
               "a" * 32, 1, 5)
    assert s.returncode == 0, s.stdout + s.stderr
    assert 2 <= len(seen) <= 3  # none started after 0.5 s
    assert parse_tcp_rtt(s.stdout) >= 250_000 and parse_tcp_bw(s.stdout) > 0
    assert time.monotonic() - t0 < 30  # bounded, with a loaded machine's slack


def test_the_receiver_echoes_no_more_round_trips_than_its_header_said():
    port, token = receiver()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(token.encode() + struct.pack(HEAD, 1 << 20, 1.0, 2))
        assert read_exactly(conn, 16) == struct.pack("!Qd", 0, 0.0)  # READY
        for i in (1, 2):
            conn.sendall(struct.pack("!Q", i))
            assert read_exactly(conn, 8) == struct.pack("!Q", i)
        conn.sendall(struct.pack("!Q", 3))
        assert conn.recv(8) == b""  # closed, no echo


def test_tcp_program_times_its_round_trips_over_loopback():
    """Two real processes: the sender's line carries the median round trip, a figure a
    loopback gives well under the bound whatever the machine's load."""
    port, token = receiver()
    s = sender(port, token, 4, 30)
    assert s.returncode == 0, s.stdout + s.stderr
    assert 0 < parse_tcp_rtt(s.stdout) < 1e6  # under a second
    assert parse_tcp_bw(s.stdout) > 0


@pytest.mark.parametrize("line, rtt", [
    ("HPCWIZARD-TCPBW bytes=1 seconds=1 gbps=1 sent=1 rtt_us=85.2\n", 85.2),
    ("HPCWIZARD-TCPBW bytes=1 seconds=1 gbps=1 sent=1\n", None),  # no round trip said
    ("HPCWIZARD-TCPBW bytes=1 seconds=1 gbps=1 sent=1 rtt_us=nan\n", None),
    ("HPCWIZARD-TCPBW bytes=1 seconds=1 gbps=1 sent=1 rtt_us=inf\n", None),
    ("HPCWIZARD-TCPBW bytes=1 seconds=1 gbps=1 sent=1 rtt_us=0\n", None),
    ("HPCWIZARD-TCPBW bytes=1 seconds=1 gbps=1 sent=1 rtt_us=-3\n", None),
    ("HPCWIZARD-TCPBW bytes=1 seconds=1 gbps=1 sent=1 rtt_us=5000000.1\n", None),  # > wait
    ("HPCWIZARD-TCPBW bytes=1 seconds=1 gbps=1 sent=1 rtt_us=5000000\n", 5e6),
    ("HPCWIZARD-TCPBW bytes=1 seconds=1 gbps=1 sent=1 rtt_us=١٢\n", None),  # other digits
    ("HPCWIZARD-TCPBW-ERROR the receiver echoed another number\n", None)])
def test_the_round_trip_parser(line, rtt):
    assert parse_tcp_rtt(line) == rtt


def test_tcp_program_measures_over_loopback():
    port, token = receiver()
    # a connection without the token is closed, and the receiver still waits for the sender
    with socket.create_connection(("127.0.0.1", port)) as intruder:
        intruder.sendall(b"x" * 48)  # as long as a header: 32 of token, 16 of sizes
        assert intruder.recv(16) == b""
    s = sender(port, token, 16, 30)
    assert s.returncode == 0, s.stdout + s.stderr
    assert parse_tcp_bw(s.stdout) > 0
    assert "bytes=16777216 " in s.stdout


def test_tcp_receiver_outlasts_an_idle_connection_and_listens_on_its_address_only():
    """A port scan or a load balancer's probe connects and sends nothing: the receiver drops
    it after its header's own short wait (not the whole accept deadline) and takes the
    sender after it. Bound to 127.0.0.1, it is not on 127.0.0.2 (loopback as well)."""
    port, token = receiver()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.2", port), timeout=5).close()
    with socket.create_connection(("127.0.0.1", port)) as idle:
        idle.settimeout(30)  # well under WAIT (60 s): the old receiver held it that long
        assert idle.recv(16) == b""  # closed by the receiver, not timed out here
    s = sender(port, token, 4, 30)
    assert s.returncode == 0 and "bytes=4194304 " in s.stdout, s.stdout + s.stderr


def test_tcp_sender_stops_at_its_time_bound_with_what_arrived():
    """Far more MiB than 0.3 s carry: the send stops at the time bound and the receiver
    reports the bytes that arrived in it, as a slow link's would be (a figure, not a
    time-out)."""
    port, token = receiver()
    s = sender(port, token, 1 << 20, 0.3)  # 1 TiB
    assert s.returncode == 0, s.stdout + s.stderr
    seen = dict(kv.split("=", 1) for kv in s.stdout.split()[1:])
    assert 0 < int(seen["bytes"]) <= int(seen["sent"]) < 1 << 40
    assert 0 < float(seen["seconds"]) < 0.3 + 0.5  # the bound, with a scheduler's slack
    assert parse_tcp_bw(s.stdout) > 0


@pytest.mark.parametrize("argv", [["--receive", "$(reboot)"], ["--receive", "node2"],
                                  ["--receive"], ["--send", "127.0.0.1", "1", "t", "1", "1"],
                                  ["--send", "127.0.0.1", "80", "1", "nan"],
                                  ["--send", "127.0.0.1", "80", "1", "0"],
                                  ["--send", "127.0.0.1", "80", "99999999999", "1"],
                                  ["--send", "127.0.0.1", "80", "1", "1", "short"]])
def test_tcp_program_refuses_bad_arguments_in_one_line(argv):
    token = argv.pop() if argv[-1] == "short" else "a" * 32
    r = subprocess.run([sys.executable, "-", *argv], input=program("tcp_bw.py"), text=True,
                       env={**os.environ, "HPCWIZARD_TCPBW_TOKEN": token},
                       capture_output=True, timeout=30)
    assert r.returncode == 2 and not r.stderr
    assert r.stdout.startswith("HPCWIZARD-TCPBW-ERROR ") and len(r.stdout.splitlines()) == 1
    assert "LISTEN" not in r.stdout


def test_bandwidth_with_here_is_bad_input(capsys):
    from hpcwizard.cli import main

    rc = main(["verify", "--framework", "mpi", "--network", "tcp", "--manual", "--here",
               "--bandwidth"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--bandwidth" in err[0] and "Traceback" not in err[0]


def test_hostnames_that_ran_together_each_count():
    """`mpirun hostname` under load: one rank's name, another's, then both newlines."""
    from hpcwizard.verify.parse import host_lines

    names = ["node1", "node8", "node10", "node100"]
    text = "node1node8\r\n\r\nnode10node100\nnode1\nWarning: setpgid\n"
    assert host_lines(text, names) == ["node1", "node8", "node10", "node100", "node1"]
    assert host_lines("node10node1\n", names) == ["node10", "node1"]
    assert host_lines("node1node9\n", names) == ["node1node9"]  # not all known: as printed
    assert host_lines("node1node8\n") == ["node1node8"]  # nothing expected: as printed


def test_names_that_are_runs_of_other_names_are_split_once_per_start():
    """Each start of the line is tried once: names made of other names ('a', 'aa') cannot
    make the split take exponential time on a long line."""
    from hpcwizard.verify.parse import host_lines

    assert host_lines("a" * 200 + "b\n", ["a", "aa"]) == ["a" * 200 + "b"]
    assert host_lines("aaab\n", ["a", "aa", "b"]) == ["aa", "a", "b"]
