"""verify --fleet's two pieces of logic as tables: the rounds (disjoint pairs; every pair up
to ALL_PAIRS_UPTO instances, a ring and a bounded sample beyond) and the verdict (a matrix of
figures in, the slow node, slow links and failed links out)."""
from __future__ import annotations

import itertools

import pytest

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
