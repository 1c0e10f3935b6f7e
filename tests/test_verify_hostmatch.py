"""Which of the job's hosts answered (hpcwizard.verify.parse.HostMatcher): the one rule that
cluster/mpirun, cluster/user-env and the key login judge by. Hosts are names or IP addresses
(SkyPilot, dstack); instances answer with their host names; an address is known by the name
its instance gave on the key login. Run-together lines (mpirun forwards a rank's text and its
newline in two pieces under load) count as each name, also when the hosts are addresses."""
from __future__ import annotations

import pytest

from _verify_fixtures import logins_by_name
from hpcwizard.verify import FAIL, PASS
from hpcwizard.verify import probes as P
from hpcwizard.verify.parse import HostMatcher
from test_verify import run

A1, A2, A3 = "10.78.0.1", "10.78.0.2", "10.78.0.3"
NAMED = {A1: "node1", A2: "node2", A3: "node3"}  # what each address's key login answered

# (case, hosts, the key logins' names, mpirun's output, missing, answered twice, strangers)
CASES = [
    ("names", ("node1", "node2"), {}, "node2\nnode1\n", [], [], []),
    ("FQDNs listed, short names answered", ("node1.dc.example", "node2.dc.example"), {},
     "node1\nnode2\n", [], [], []),
    ("short names listed, FQDNs answered", ("node1", "node2"), {},
     "node1.dc.example\nNODE2.dc.example\n", [], [], []),
    ("mpirun's own warning between the answers", ("node1", "node2"), {},
     "node1\n[node1:17232] plm:rsh: warning: setpgid(1,1) failed\nnode2\n", [], [], []),
    ("addresses, known by their logins' names", (A1, A2, A3), NAMED,
     "node3\nnode1\nnode2\n", [], [], []),
    ("addresses whose instances answer with the address", (A1, A2), {A1: A1, A2: A2},
     f"{A1}\n{A2}\n", [], [], []),
    ("IPv6 addresses, known by their logins' names", ("fd00::1", "fd00:0::2"),
     {"fd00::1": "gpu1", "fd00:0::2": "gpu2"}, "gpu2\ngpu1\n", [], [], []),
    ("names run together", ("node1", "node8", "node10"), {},
     "node1node8\r\n\r\nnode10\n", [], [], []),
    ("addresses run together", (A1, A2, A3), NAMED,
     "node1node2\r\n\r\nnode3\n", [], [], []),
    ("addresses run together, FQDN logins", (A1, A2), {A1: "node1.dc", A2: "node2.dc"},
     "node2node1\r\n\r\n", [], [], []),
    ("a missing name", ("node1", "node2", "node3"), {}, "node1\nnode3\n", ["node2"], [], []),
    ("a missing address", (A1, A2, A3), NAMED, "node1\nnode3\n", [A2], [], []),
    ("one name twice", ("node1", "node2", "node3"), {}, "node1\nnode1\nnode2\n",
     ["node3"], ["node1"], []),
    ("two addresses of one instance", (A1, A2), {A1: "node1", A2: "node1"},
     "node1\nnode1\n", [A2], [A1], []),
    ("a stranger among names", ("node1", "node2"), {}, "node1\nnode9\n",
     ["node2"], [], ["node9"]),
    ("a stranger among named addresses", (A1, A2, A3), NAMED, "node1\nnode9\nnode3\n",
     [A2], [], ["node9"]),
    ("a stranger run together with a name", ("node1", "node2"), {}, "node1node9\n",
     ["node1", "node2"], [], ["node1node9"]),
    ("addresses not known by a name yet: each name once", (A1, A2), {}, "nodeA\nnodeB\n",
     [], [], []),
    ("addresses not known by a name yet: one name twice", (A1, A2), {}, "nodeA\nnodeA\n",
     [A2], [A1], []),
    ("addresses not known by a name yet: more names than addresses", (A1, A2), {},
     "nodeA\nnodeB\nnodeC\n", [], [], ["nodeC"]),
    ("an address answering itself keeps it, a name takes the other", (A1, A2), {},
     f"nodeB\n{A1}\n", [], [], []),
]


@pytest.mark.parametrize("case,hosts,said,out,missing,twice,strangers", CASES,
                         ids=[c[0] for c in CASES])
def test_which_listed_host_each_answer_stands_for(case, hosts, said, out, missing, twice,
                                                  strangers):
    matcher = HostMatcher(hosts, said)
    found = matcher.match(matcher.lines(out))
    assert (found.missing, found.twice, found.strangers) == (missing, twice, strangers)
    assert found.ok == (not missing and not twice and not strangers)


@pytest.mark.parametrize("host,answer,same", [
    ("node2", "node2", True), ("node2", "NODE2.dc.example", True),
    ("node2.dc.example", "node2", True), ("node2", "someone-else", False),
    ("node2", "node22", False),
    # the login is what teaches an address its name: any one name stands for it
    (A2, "node2", True), (A2, A2, True), ("fd00::2", "FD00:0::2", True)])
def test_the_key_login_asks_the_same_rule_for_one_host(host, answer, same):
    assert HostMatcher((host,)).match([answer]).ok is same


def test_a_listed_address_is_shown_with_its_instances_name():
    found = HostMatcher((A1, A2, "node3"), {A1: "node1", A2: A2, "node3": "node3"}).match(
        ["node1"])
    assert [found.label(h) for h in (A1, A2, "node3")] == [f"{A1} (node1)", A2, "node3"]
    dealt = HostMatcher((A1,)).match(["nodeA"])  # which address it came from is a guess
    assert dealt.label(A1) == "nodeA"


# --- through verify: the key logins teach the names, cluster/mpirun judges by them ----------

IPS = {A1: "ok", A2: "ok", A3: "ok"}


def _mpirun(out):
    return {(lambda p: isinstance(p, P.Mpirun) and p.program == ("hostname",)):
            (0, out)}


def test_addresses_whose_answers_ran_together_pass_mpirun():
    """mpirun under load forwards a rank's text and its newline in two pieces: with the
    hosts given as addresses, 'node1node2' is still two instances' answers."""
    report, c, _ = run(IPS, answers={**_mpirun("node1node2\r\n\r\nnode3\n"),
                                     **logins_by_name(IPS)})
    assert c["cluster/mpirun"].status == PASS, c["cluster/mpirun"].detail
    assert "3 ranks on node1, node2, node3" in c["cluster/mpirun"].detail


def test_mpirun_names_the_address_that_did_not_answer_and_the_stranger():
    _, c, _ = run(IPS, answers={**_mpirun("node1\nnode9\nnode3\n"), **logins_by_name(IPS)})
    bad = c["cluster/mpirun"]
    assert bad.status == FAIL
    assert bad.detail == (f"ran on node1, node3, node9; {A2} (node2): no rank answered; "
                          "node9: not one of the job's hosts")


def test_two_addresses_of_one_instance_fail_mpirun():
    """Both addresses' key logins reach node1: the job would put two ranks on it."""
    ips = {A1: "ok", A2: "ok"}
    one = {(lambda p: isinstance(p, P.SshCommand) and p.remote == "hostname"):
           (0, "node1\n")}
    _, c, _ = run(ips, answers={**_mpirun("node1\nnode1\n"), **one})
    assert c["cluster/mpirun"].status == FAIL
    assert f"{A1} (node1): answered more than once; {A2} (node1): no rank answered" in \
        c["cluster/mpirun"].detail
