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


def run_fleet(n, slow_sender=None, here="n1", slow_once=None):
    f = facts(user=ROOT)
    plan = build_plan(f, make_choices(framework="mpi", network="tcp", mode="manual"),
                      load_catalog())
    hs = names(n)

    def sender(p):
        return isinstance(p, P.TcpBwAt) and "--send" in p.args

    once = []

    def send_answer(p):
        pair = (p.host or here, f"n{p.args[1].rsplit('.', 1)[1]}")  # 10.0.0.N is nN
        if pair == slow_once and not once:
            once.append(pair)
            return 0, FakeSystem.tcp_bw_line(0.5)
        return 0, FakeSystem.tcp_bw_line(0.5 if (p.host or here) == slow_sender else 9.0)

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
