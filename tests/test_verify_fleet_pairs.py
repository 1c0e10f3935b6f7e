"""verify --fleet's two pieces of logic as tables: the rounds (disjoint pairs; every pair up
to ALL_PAIRS_UPTO instances, a ring and a bounded sample beyond) and the verdict (a matrix of
figures in, the slow node, slow links and failed links out)."""
from __future__ import annotations

import itertools
import json

import pytest

from hpcwizard.report_fleet import format_fleet
from hpcwizard.verify.pairjudge import SLOW_FRACTION, Link, Measured, judge
from hpcwizard.verify.rounds import ALL_PAIRS_UPTO, SAMPLE_ROUNDS, rounds


def names(n):
    return [f"n{i}" for i in range(1, n + 1)]


def covered(rs):
    return [frozenset(p) for r in rs for p in r]


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 9, 15, 16])
def test_small_fleets_measure_every_pair_once_in_disjoint_rounds(n):
    rs = rounds(names(n))
    for r in rs:
        hosts = [h for p in r for h in p]
        assert len(hosts) == len(set(hosts)), r  # no instance twice in a round
    pairs = covered(rs)
    assert sorted(map(sorted, pairs)) == sorted(
        map(sorted, map(frozenset, itertools.combinations(names(n), 2))))
    assert len(rs) == (n - 1 if n % 2 == 0 else n)


@pytest.mark.parametrize("n", [17, 64, 65, 256])
def test_large_fleets_take_a_ring_and_a_bounded_sample(n):
    hs = names(n)
    rs = rounds(hs, seed=1)
    for r in rs:
        flat = [h for p in r for h in p]
        assert len(flat) == len(set(flat)), r
    pairs = covered(rs)
    assert len(pairs) == len(set(pairs))  # no pair measured twice
    ring = {frozenset((hs[i], hs[(i + 1) % n])) for i in range(n)}
    assert ring <= set(pairs)
    assert len(rs) <= (2 if n % 2 == 0 else 3) + SAMPLE_ROUNDS
    assert len(pairs) <= n + SAMPLE_ROUNDS * n // 2
    assert len(pairs) > n  # the sample adds pairs beyond the ring
    assert rounds(hs) == rounds(hs)  # the same job measures the same pairs


def test_the_threshold_between_the_two_ways_is_where_it_says():
    assert len(rounds(names(ALL_PAIRS_UPTO))) == ALL_PAIRS_UPTO - 1
    assert len(rounds(names(ALL_PAIRS_UPTO + 1))) < ALL_PAIRS_UPTO


def matrix(n, figure):
    """Every direction of every pair of n hosts, figure(sender, receiver) Gb/s."""
    hs = names(n)
    return hs, [Measured(a, b, figure(a, b)) for a, b in itertools.permutations(hs, 2)]


def even(a, b):
    return 10.0


# (case, hosts, figure(a, b) or None for failed, slow nodes, slow links, failed links)
CASES = [
    ("healthy", 8, even, [], [], []),
    ("noise within the threshold", 8,
     lambda a, b: 10.0 - 0.5 * (int(a[1:]) % 3), [], [], []),
    ("one pair slow one way", 8,
     lambda a, b: 1.0 if (a, b) == ("n3", "n5") else 10.0, [], [("n3", "n5")], []),
    ("one pair slow both ways", 8,
     lambda a, b: 2.0 if {a, b} == {"n2", "n7"} else 10.0, [], [("n2", "n7")], []),
    ("one node slow to everyone, sending", 8,
     lambda a, b: 1.0 if a == "n4" else 10.0, ["n4"], [], []),
    ("one node slow to everyone, receiving", 8,
     lambda a, b: 1.0 if b == "n6" else 10.0, ["n6"], [], []),
    ("a node and a pair", 8,
     lambda a, b: 1.0 if "n8" in (a, b) or {a, b} == {"n2", "n3"} else 10.0,
     ["n8"], [("n2", "n3")], []),
    ("a node that gives no figure", 8,
     lambda a, b: None if "n2" in (a, b) else 10.0, ["n2"], [], []),
    ("one pair fails", 8,
     lambda a, b: None if (a, b) == ("n1", "n6") else 10.0, [], [], [("n1", "n6")]),
    ("just above the threshold", 8,
     lambda a, b: 10.0 * SLOW_FRACTION + 0.01 if {a, b} == {"n1", "n2"} else 10.0,
     [], [], []),
    ("two slow links of one node are links, not the node", 8,
     lambda a, b: 1.0 if {a, b} in ({"n1", "n2"}, {"n1", "n3"}) else 10.0,
     [], [("n1", "n2"), ("n1", "n3")], []),
]


@pytest.mark.parametrize("case,n,figure,nodes,slow,failed", CASES, ids=[c[0] for c in CASES])
def test_the_verdict_names_the_node_or_the_link(case, n, figure, nodes, slow, failed):
    hs, ms = matrix(n, figure)
    ms = [Measured(m.sender, m.receiver, m.gbps, "" if m.gbps is not None else "refused")
          for m in ms]
    v = judge(hs, ms)
    assert [x.host for x in v.slow_nodes] == nodes
    assert sorted((x.a, x.b) for x in v.slow_links) == slow
    assert sorted((x.a, x.b) for x in v.failed_links) == failed
    assert v.ok == (not nodes and not slow and not failed)


def test_a_slow_node_s_figures_and_counts():
    hs, ms = matrix(8, lambda a, b: 1.0 if b == "n6" else 10.0)
    node, = judge(hs, ms).slow_nodes
    assert (node.bad, node.links, node.gbps) == (7, 7, 1.0)


def test_a_slow_link_carries_its_slower_direction_and_share_of_the_median():
    hs, ms = matrix(4, lambda a, b: 2.5 if (a, b) == ("n4", "n2") else 10.0)
    v = judge(hs, ms)
    assert v.median_gbps == 10.0
    assert v.slow_links == (Link("n2", "n4", 2.5, 25),)


def test_the_line_rate_judges_the_median():
    hs, ms = matrix(4, even)
    assert judge(hs, ms, line_gbps=25.0).below_line  # 10 of 25 Gb/s
    assert not judge(hs, ms, line_gbps=10.0).below_line
    assert not judge(hs, ms).below_line  # unknown: not judged


def test_the_matrix_and_the_json_say_the_same():
    hs, ms = matrix(8, lambda a, b: 1.0 if {a, b} == {"n3", "n5"} else 10.0)
    v = judge(hs, ms, seconds=12.0)
    text = format_fleet(v)
    assert "1.00!" in text and "10.00" in text
    assert "SLOW LINK n3 ↔ n5: 1.00 Gb/s, 10 % of the median" in text
    data = json.loads(json.dumps(v.to_dict()))
    assert data["ok"] is False
    assert [(x["a"], x["b"]) for x in data["slow_links"]] == [("n3", "n5")]
    assert len(data["measured"]) == 56


def test_a_round_slowed_as_a_whole_is_not_a_slow_link():
    """A load that comes and goes (another job, a busy CPU) lowers every pair of its round:
    each is held to its own round's median."""
    hs = names(8)
    ms = [Measured(a, b, 3.0 if i == 2 else 10.0, round=i)
          for i, r in enumerate(rounds(hs)) for p in r for a, b in (p, p[::-1])]
    v = judge(hs, ms)
    assert v.ok and v.slow == ()
    # the same figures in one round each: held to the fleet's median, they are slow
    flat = [Measured(m.sender, m.receiver, m.gbps) for m in ms]
    assert not judge(hs, flat).ok


def test_a_round_of_few_pairs_is_held_to_the_fleet_s_median():
    hs = names(4)  # 2 pairs a round: fewer than ROUND_PAIRS
    ms = [Measured(a, b, 1.0 if {a, b} == {"n1", "n2"} else 10.0, round=i)
          for i, r in enumerate(rounds(hs)) for p in r for a, b in (p, p[::-1])]
    v = judge(hs, ms)
    assert [(x.a, x.b) for x in v.slow_links] == [("n1", "n2")]
    assert set(v.slow) == {("n1", "n2"), ("n2", "n1")}


# --- the runner, against a fake System -------------------------------------------------------

from _core_fixtures import ROOT, facts  # noqa: E402
from _verify_fixtures import FakeSystem  # noqa: E402
from hpcwizard.catalog import load_catalog  # noqa: E402
from hpcwizard.choices import make_choices  # noqa: E402
from hpcwizard.hosts import Hosts  # noqa: E402
from hpcwizard.plan import build_plan  # noqa: E402
from hpcwizard.verify import probes as P  # noqa: E402
from hpcwizard.verify.pairwise import fleet  # noqa: E402


def run_fleet(n, slow_sender=None, here="n1", slow_once=None, rtt=lambda s, r, again: 80.0):
    """verify --fleet's pairs on n1..nN through the fake System: each sender's figure 9 Gb/s
    (0.5 from slow_sender, and from the pair slow_once the first time), its round trip
    rtt(sender, receiver, measured before) µs."""
    f = facts(user=ROOT)
    plan = build_plan(f, make_choices(framework="mpi", network="tcp", mode="manual"),
                      load_catalog())
    hs = names(n)

    def sender(p):
        return isinstance(p, P.TcpBwAt) and "--send" in p.args

    once = []

    def send_answer(p):
        pair = (p.host or here, f"n{p.args[1].rsplit('.', 1)[1]}")  # 10.0.0.N is nN
        us = rtt(*pair, pair in once)
        once.append(pair)
        if pair == slow_once and once.count(pair) == 1:
            return 0, FakeSystem.tcp_bw_line(0.5, us)
        return 0, FakeSystem.tcp_bw_line(0.5 if (p.host or here) == slow_sender else 9.0, us)

    sys_ = FakeSystem({h: "ok" for h in hs}, {
        P.RouteTo: (0, "10.0.0.2 dev eth0 src 10.0.0.1 uid 0 \\    cache \n"),
        lambda p: isinstance(p, P.TcpBwAt) and "--receive" in p.args:
            (0, f"HPCWIZARD-TCPBW-LISTEN port=40001 token={FakeSystem.TOKEN}\n")},
        here=here)
    orig = sys_.answer
    sys_.answer = lambda p: send_answer(p) if sender(p) else orig(p)
    return fleet(plan, f, Hosts(tuple(hs), "--hosts"), system=sys_), sys_


def test_each_pair_runs_between_its_own_instances():
    v, sys_ = run_fleet(6)
    runs = sys_.asked(P.TcpBwAt)
    assert len(runs) == 2 * 2 * 15  # a receiver and a sender, both ways, 15 pairs
    for p in runs:
        argv = p.argv()
        assert FakeSystem.TOKEN not in " ".join(argv)  # on stdin only
        if p.host:  # another instance: over SSH to it, as the job's user and port
            assert "ssh" in argv and p.host in argv and "2222" in argv
        else:  # this instance (n1): no SSH
            assert "ssh" not in argv
    senders = [p for p in runs if "--send" in p.args]
    assert all(FakeSystem.TOKEN in p.stdin().decode() for p in senders)
    # the receiver's address is the one its name resolves to here (10.0.0.N for nN)
    assert {p.args[1] for p in senders} == {f"10.0.0.{i}" for i in range(1, 7)}
    assert v.ok and len(v.measured) == 30


def test_a_slow_sender_is_named_as_the_node():
    v, _sys = run_fleet(6, slow_sender="n4")
    assert [n.host for n in v.slow_nodes] == ["n4"]
    assert v.slow_links == () and not v.ok


def test_a_link_measured_again_is_judged_by_its_better_figure():
    hs, ms = matrix(8, lambda a, b: 1.0 if {a, b} == {"n2", "n6"} else 10.0)
    assert [(x.a, x.b) for x in judge(hs, ms).slow_links] == [("n2", "n6")]
    cleared = ms + [Measured("n2", "n6", 9.0, round=1), Measured("n6", "n2", 9.5, round=1)]
    v = judge(hs, cleared)
    assert v.ok and v.figure("n2", "n6").gbps == 9.0
    # measured again, still slow: named, with the better figure
    still = ms + [Measured("n2", "n6", 1.5, round=1), Measured("n6", "n2", 9.5, round=1)]
    assert judge(hs, still).slow_links == (Link("n2", "n6", 1.5, 15),)
    # failed once, then a figure: not failed
    flaky = [m if (m.sender, m.receiver) != ("n3", "n4") else Measured("n3", "n4", None, "x")
             for m in matrix(8, even)[1]] + [Measured("n3", "n4", 10.0, round=1)]
    assert judge(hs, flaky).ok


def test_the_runner_measures_a_slow_link_again():
    v, sys_ = run_fleet(6, slow_sender="n4")
    sends = [p for p in sys_.asked(P.TcpBwAt) if "--send" in p.args]
    assert len(sends) == 30  # a slow node's links are the node: not measured again


def test_a_link_slow_only_once_is_measured_again_and_cleared():
    v, sys_ = run_fleet(6, slow_once=("n2", "n5"))
    sends = [(p.host, p.args[1]) for p in sys_.asked(P.TcpBwAt) if "--send" in p.args]
    assert len(sends) == 32  # both ways of n2 ↔ n5 once more
    assert sends[-2:] in ([("n2", "10.0.0.5"), ("n5", "10.0.0.2")],
                          [("n5", "10.0.0.2"), ("n2", "10.0.0.5")])
    assert v.ok and v.figure("n2", "n5").gbps == 9.0


# --- the round trips: the same rules, their own thresholds ----------------------------------

from hpcwizard.verify.pairjudge import (LATENCY_FACTOR, LATENCY_FLOOR_US,  # noqa: E402
                                        LatencyLink, latency_slow)


def latencies(n, rtt):
    """Every direction of every pair of n hosts at 10 Gb/s, rtt(sender, receiver) µs (None:
    the direction failed, no figure at all)."""
    hs = names(n)
    return hs, [Measured(a, b, None, "refused") if rtt(a, b) is None
                else Measured(a, b, 10.0, latency_us=rtt(a, b))
                for a, b in itertools.permutations(hs, 2)]


# (case, n, rtt(a, b) µs, slow-latency nodes, slow-latency links)
LATENCY_CASES = [
    ("healthy", 8, lambda a, b: 80.0, [], []),
    ("noise of a loaded host", 8, lambda a, b: 60.0 + 40 * (int(a[1:]) % 3), [], []),
    ("one pair slow one way", 8,
     lambda a, b: 900.0 if (a, b) == ("n3", "n5") else 80.0, [], [("n3", "n5")]),
    ("one pair slow both ways", 8,
     lambda a, b: 1500.0 if {a, b} == {"n2", "n7"} else 80.0, [], [("n2", "n7")]),
    ("many times the median but under the floor", 8,
     lambda a, b: 50.0 + LATENCY_FLOOR_US - 1 if {a, b} == {"n1", "n2"} else 50.0, [], []),
    ("the floor but not enough times the median (a long path for all)", 8,
     lambda a, b: 2500.0 if {a, b} == {"n1", "n2"} else 1000.0, [], []),
    ("just above both", 8,
     lambda a, b: 301.0 if {a, b} == {"n1", "n2"} else 100.0, [], [("n1", "n2")]),
    ("just at the factor is not above it", 8,
     lambda a, b: 300.0 if {a, b} == {"n1", "n2"} else 100.0, [], []),
    ("one node slow to everyone", 8,
     lambda a, b: 2400.0 if "n7" in (a, b) else 80.0, ["n7"], []),
    ("a node and a pair", 8,
     lambda a, b: 2400.0 if "n8" in (a, b) or {a, b} == {"n2", "n3"} else 80.0,
     ["n8"], [("n2", "n3")]),
    ("two slow links of one node are links, not the node", 8,
     lambda a, b: 900.0 if {a, b} in ({"n1", "n2"}, {"n1", "n3"}) else 80.0,
     [], [("n1", "n2"), ("n1", "n3")]),
    ("a failed pair has no round trip to judge", 8,
     lambda a, b: None if {a, b} == {"n1", "n6"} else 80.0, [], []),
]


@pytest.mark.parametrize("case,n,rtt,nodes,slow", LATENCY_CASES,
                         ids=[c[0] for c in LATENCY_CASES])
def test_the_round_trips_name_the_node_or_the_link(case, n, rtt, nodes, slow):
    hs, ms = latencies(n, rtt)
    v = judge(hs, ms)
    assert [x.host for x in v.latency_slow_nodes] == nodes
    assert sorted((x.a, x.b) for x in v.latency_slow_links) == slow
    # the bandwidth is even: only a failed pair is named by it
    assert v.slow_nodes == () and v.slow_links == ()
    assert v.ok == (not nodes and not slow and not v.failed_links)


def test_the_round_trips_of_a_node_slow_by_its_throughput_are_the_node_s():
    """A node shaped to a low rate queues round trips behind its bytes (tbf): some of its
    links' round trips are slow, and they are not named one by one beside the node."""
    hs = names(8)
    ms = [Measured(a, b, 1.0 if "n7" in (a, b) else 10.0,
                   latency_us=5000.0 if {a, b} in ({"n3", "n7"}, {"n7", "n8"}) else 40.0)
          for a, b in itertools.permutations(hs, 2)]
    v = judge(hs, ms)
    assert [n.host for n in v.slow_nodes] == ["n7"]
    assert v.latency_slow_links == () and v.latency_slow_nodes == ()
    assert {frozenset(d) for d in v.latency_slow} == {frozenset(("n3", "n7")),
                                                      frozenset(("n7", "n8"))}


@pytest.mark.parametrize("us,median,slow", [
    (301.0, 100.0, True), (300.0, 100.0, False), (250.0, 50.0, True), (249.0, 50.0, False),
    (2999.0, 1000.0, False), (3001.0, 1000.0, True)])
def test_slow_is_both_times_the_median_and_the_floor_above_it(us, median, slow):
    assert (LATENCY_FACTOR, LATENCY_FLOOR_US) == (3.0, 200.0)  # the table's thresholds
    assert latency_slow(us, median) is slow


def test_a_slow_round_trip_link_carries_its_slower_direction_and_times_the_median():
    hs, ms = latencies(4, lambda a, b: 2000.0 if (a, b) == ("n4", "n2") else 100.0)
    v = judge(hs, ms)
    assert v.median_latency_us == 100.0
    assert v.latency_slow_links == (LatencyLink("n2", "n4", 2000.0, 20.0),)
    assert v.latency_slow == (("n4", "n2"),)
    assert v.round_trip("n4", "n2") == 2000.0 and v.round_trip("n2", "n4") == 100.0
    node_hs, node_ms = latencies(8, lambda a, b: 2400.0 if b == "n6" else 80.0)
    node, = judge(node_hs, node_ms).latency_slow_nodes
    assert (node.bad, node.links, node.latency_us) == (7, 7, 2400.0)


def test_a_round_trip_measured_again_is_judged_by_its_lower_figure():
    hs, ms = latencies(8, lambda a, b: 1500.0 if {a, b} == {"n2", "n6"} else 80.0)
    assert [(x.a, x.b) for x in judge(hs, ms).latency_slow_links] == [("n2", "n6")]
    again = [Measured("n2", "n6", 10.0, round=1, latency_us=90.0),
             Measured("n6", "n2", 10.0, round=1, latency_us=85.0)]
    v = judge(hs, ms + again)
    assert v.ok and v.round_trip("n2", "n6") == 90.0


def test_a_round_of_slow_round_trips_is_held_to_its_own_median():
    """A busy moment (another job's burst) slows every round trip of its round."""
    hs = names(8)
    ms = [Measured(a, b, 10.0, round=i, latency_us=2000.0 if i == 3 else 80.0)
          for i, r in enumerate(rounds(hs)) for p in r for a, b in (p, p[::-1])]
    assert judge(hs, ms).ok
    flat = [Measured(m.sender, m.receiver, m.gbps, latency_us=m.latency_us) for m in ms]
    assert not judge(hs, flat).ok  # one round of figures: the fleet's median


def test_the_json_keeps_its_keys_and_adds_the_round_trips():
    hs, ms = latencies(8, lambda a, b: 900.0 if {a, b} == {"n3", "n5"} else 80.0)
    data = json.loads(json.dumps(judge(hs, ms).to_dict()))
    # the keys --json consumers read before the round trips came, as they were
    assert {"hosts", "measured", "median_gbps", "line_gbps", "slow_nodes", "slow_links",
            "failed_links", "below_line", "slow", "seconds", "ok", "slow_fraction"} <= set(data)
    assert set(data["measured"][0]) == {"sender", "receiver", "gbps", "error", "round",
                                        "latency_us"}
    assert data["median_latency_us"] == 80.0 and data["ok"] is False
    assert data["latency_slow_links"] == [{"a": "n3", "b": "n5", "latency_us": 900.0,
                                           "times": 11.2}]
    assert data["latency_slow_nodes"] == [] and data["slow_links"] == []
    assert (data["latency_factor"], data["latency_floor_us"]) == (3.0, 200.0)


def test_the_round_trip_matrix_and_its_lines():
    hs, ms = latencies(8, lambda a, b: 2400.0 if "n7" in (a, b) else 85.0)
    text = format_fleet(judge(hs, ms, seconds=10.0))
    assert text.index("TCP Gb/s, row → column") < text.index("TCP round trip µs, row → column")
    assert "2400!" in text and " 85 " in text
    assert "HIGH LATENCY NODE n7: 7 of its 7 links slow (2400 µs)" in text
    assert "Round trips: the fleet's median 85 µs; slow above 3 × it and 200 µs more" in text
    assert "No slow node or link" not in text
    rows = [line for line in text.splitlines() if line[:1] in "┏┃┡│└"]
    assert len(rows) == 2 * (8 + 4)  # two tables of 8 rows, each with 4 rules
    assert max(map(len, rows)) <= 80  # 8 instances' matrices fit a terminal
    # no round trip at all (a fleet of failed pairs): no second matrix
    hs, ms = latencies(3, lambda a, b: None)
    assert "round trip" not in format_fleet(judge(hs, ms))


def test_the_runner_names_a_node_with_slow_round_trips():
    v, sys_ = run_fleet(6, rtt=lambda s, r, again: 2400.0 if "n4" in (s, r) else 80.0)
    assert [n.host for n in v.latency_slow_nodes] == ["n4"] and not v.ok
    assert v.slow_nodes == () and v.latency_slow_links == ()
    assert {m.latency_us for m in v.measured} == {80.0, 2400.0}
    sends = [p for p in sys_.asked(P.TcpBwAt) if "--send" in p.args]
    assert len(sends) == 30  # the node's links are the node: not measured again


def test_a_link_with_slow_round_trips_is_measured_again():
    slow = {("n2", "n5"), ("n5", "n2")}
    once = run_fleet(6, rtt=lambda s, r, again: 1500.0 if (s, r) in slow and not again
                     else 80.0)
    always = run_fleet(6, rtt=lambda s, r, again: 1500.0 if (s, r) in slow else 80.0)
    for v, sys_ in (once, always):
        sends = [(p.host, p.args[1]) for p in sys_.asked(P.TcpBwAt) if "--send" in p.args]
        assert len(sends) == 32  # both ways of n2 ↔ n5 once more
        assert sorted(sends[-2:]) == [("n2", "10.0.0.5"), ("n5", "10.0.0.2")]
        # one way at a time: the other way's bytes are not on the path
        assert [(m.round, m.sender) for m in v.measured if m.round >= 5] in (
            [(5, "n2"), (6, "n5")], [(5, "n5"), (6, "n2")])
    assert once[0].ok and once[0].round_trip("n2", "n5") == 80.0
    assert [(x.a, x.b) for x in always[0].latency_slow_links] == [("n2", "n5")]


def test_what_is_measured_again_and_how():
    from hpcwizard.verify.pairwise import again

    hs = names(8)

    def rtt(a, b):
        if "n8" in (a, b):
            return 2400.0  # a node: its links are not measured again
        return 900.0 if {a, b} in ({"n1", "n2"}, {"n3", "n4"}, {"n2", "n3"}) else 80.0

    ms = [Measured(a, b, 1.0 if {a, b} == {"n5", "n6"} else 10.0, latency_us=rtt(a, b))
          for a, b in itertools.permutations(hs, 2)]
    rounds_ = again(judge(hs, ms))
    # the slow link both ways at once; the round trips' links one way a round, disjoint
    assert rounds_[0] == [("n5", "n6"), ("n6", "n5")]
    assert rounds_[1:] == [[("n1", "n2"), ("n3", "n4")], [("n2", "n1"), ("n4", "n3")],
                           [("n2", "n3")], [("n3", "n2")]]
