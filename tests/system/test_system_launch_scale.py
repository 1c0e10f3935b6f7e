"""Issue 31, system tests: the end of the job cannot reach one worker (new connections to its
SSH port dropped by nft in its namespace once the job runs, and the first instance's shared
connection to it, mpirun's, told to take no new session). Cut off both ways (its own
connections to any SSH port dropped too), that worker ends by itself within
FIRST_GONE_AFTER with a line saying why; still able to reach the first instance, it reads
the job's status there and ends with it. Either way the first instance names it in its
last line and exits 3, and the other worker is told. Workers started before the first
instance, and after it. A first instance killed with -9 while the job runs, its sshd up:
the worker ends by itself once its MPI daemon has been gone FIRST_GONE_AFTER seconds and
no record of the end is found. A worker whose launch begins after the first instance
ran the whole job through its sshd ends at once with the job's status. A first instance
that gives up waiting for a worker: the other worker learns it by asking, and ends; so does a
worker whose first instance runs no launch while it waits. Root only,
HPCWIZARD_SYSTEM_TESTS=1 (conftest.py skips otherwise)."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from _pipes import until_line
from _verify_cluster import PORT, VCluster, applied, start_nodes
from test_system_launch import export, finish, start

pytestmark = pytest.mark.system

GONE_AFTER = 10


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    if shutil.which("nft") is None:
        pytest.skip("nft is not installed (apt-get install nftables): the test blocks a "
                    "worker's SSH port with it")
    yield from applied(tmp_path_factory)


def _block_ssh(c: VCluster, node: str, both_ways: bool) -> None:
    """New TCP connections to node's SSH port dropped, and, both_ways, those from node to
    any SSH port (SYN only: the ssh session mpirun already holds there goes on)."""
    rules = (f"add table inet hwblock\n"
             f"add chain inet hwblock in {{ type filter hook input priority 0; }}\n"
             f"add chain inet hwblock out {{ type filter hook output priority 0; }}\n"
             f"add rule inet hwblock in tcp dport {PORT} tcp flags & (syn | ack) == syn drop\n")
    if both_ways:
        rules += f"add rule inet hwblock out tcp dport {PORT} tcp flags & (syn | ack) == syn drop\n"
    proc = subprocess.run(["ip", "netns", "exec", c.ns(node), "nft", "-f", "-"], input=rules,
                          text=True, capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stderr


def _stop_sharing(c: VCluster, node: str, peer: str) -> None:
    """node's shared SSH connection to peer (mpirun's, which the end of the job rides on)
    takes no new session from now on: a port blocked to new connections cuts the end off.
    It must be there to stop: the launch shares mpirun's connections."""
    proc = c.run(node, ["ssh", "-o", "ControlPath=~/.hpcwizard/launch/%C", "-O", "stop",
                        "-p", str(PORT), peer], timeout=30)
    assert proc.returncode == 0, f"no shared connection from {node} to {peer}: {proc.stderr}"


def _ended_at(procs: dict, limit: float = 180) -> dict:
    """When each process ended (time.monotonic), waiting for all of them; their output stays
    in their pipes (a few lines) for finish()."""
    ended: dict = {}
    deadline = time.monotonic() + limit
    while len(ended) < len(procs) and time.monotonic() < deadline:
        for n, p in procs.items():
            if n not in ended and p.poll() is not None:
                ended[n] = time.monotonic()
        time.sleep(0.1)
    return ended


def _wait_files(paths: list, limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while not all(p.exists() for p in paths):
        assert time.monotonic() < deadline, f"not all of {paths} appeared within {limit}s"
        time.sleep(0.1)


@pytest.mark.parametrize("both_ways", [True, False], ids=["cut off", "can reach the first"])
@pytest.mark.parametrize("order", ["workers first", "first instance first"])
def test_a_worker_the_end_cannot_reach_ends_by_itself_and_is_named(setup, order, both_ways):
    env = setup["env"]
    with VCluster(3) as c:
        start_nodes(c)
        script = export(c, env, "mpi")
        # each rank says it runs, then holds the job until the test has blocked node3
        release = c.tmp / "release"
        job = (f'touch {c.tmp}/started.$(hostname); '
               f'while [ ! -e {release} ]; do sleep 0.1; done')
        run_env = dict(env, HOSTS="node1,node2,node3", WAIT_TRIES="6",
                       FIRST_GONE_AFTER=str(GONE_AFTER), WORKER_TIMEOUT="600")
        argv = ["bash", script, "--", "bash", "-c", job]
        procs, seen = {}, {n: [] for n in c.names}
        workers = ("node2", "node3")
        if order == "workers first":
            for n in workers:
                procs[n] = start(c, n, argv, run_env)
                until_line(procs[n], "waiting for node1", seen[n])
            procs["node1"] = start(c, "node1", argv, run_env)
        else:
            procs["node1"] = start(c, "node1", argv, run_env)
        _wait_files([c.tmp / f"started.{n}" for n in c.names])
        if order != "workers first":  # the job already runs on them when they start
            for n in workers:
                procs[n] = start(c, n, argv, run_env)
                until_line(procs[n], "to run the job", seen[n])
        # node3 has seen the first instance answer (its daemon here is that answer): a
        # worker that never had would rightly say the first never came, not that it is gone
        until_line(procs["node3"], "node1 started the job here", seen["node3"])
        _block_ssh(c, "node3", both_ways)
        _stop_sharing(c, "node1", "node3")
        blocked = time.monotonic()
        release.write_text("")
        ended = _ended_at(procs)
        res = finish(procs, timeout=30)
        report = "".join(f"\n--- {n}: exit {rc}\n{so}\n{''.join(seen[n])}{se}"
                         for n, (rc, so, se) in res.items())
        first_last = res["node1"][2].strip().splitlines()[-1]
        assert res["node1"][0] == 3, report
        assert first_last.endswith("the job ended with status 0; not told after 3 tries "
                                   "(exit 3): node3"), report
        assert res["node2"][0] == 0 and "the job ended with status 0" in res["node2"][2], report
        node3_last = (res["node3"][2].strip().splitlines() or [""])[-1]
        if both_ways:
            assert res["node3"][0] == 3, report
            assert ("node1 (the first instance) has not answered on port 2222" in node3_last
                    and node3_last.endswith(f"(FIRST_GONE_AFTER={GONE_AFTER}): ending "
                                            "without the job's status")), report
        else:
            assert res["node3"][0] == 0, report
            assert node3_last.endswith("the job ended with status 0 (from node1's record: it "
                                       "could not tell this instance)"), report
        # bounded: the job's end, one period of the watch or of the asking (at most 1.5
        # FIRST_GONE_AFTER here) and one probe's or ssh's time, not for ever
        assert ended.get("node3", float("inf")) - blocked < 1.5 * GONE_AFTER + 45, report


def _descendants(pid: int) -> list:
    """pid's descendants, from /proc (ppid is the fourth field of stat, after the name)."""
    children: dict = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def test_a_worker_ends_by_itself_when_the_first_instance_dies_before_its_record(setup):
    """The first instance's launch script and mpirun are killed with -9 while the job runs:
    no record of the end is ever kept there, and its sshd still answers. The worker sees its
    MPI daemon (orted) end with the job and, FIRST_GONE_AFTER later, finds no record of
    this run on the first instance: it ends with exit 3 and a line saying why, not at
    WORKER_TIMEOUT."""
    env = setup["env"]
    with VCluster(2) as c:
        start_nodes(c)
        script = export(c, env, "mpi")
        release = c.tmp / "release"
        job = (f'touch {c.tmp}/started.$(hostname); '
               f'while [ ! -e {release} ]; do sleep 0.1; done')
        run_env = dict(env, HOSTS="node1,node2", WAIT_TRIES="6",
                       FIRST_GONE_AFTER=str(GONE_AFTER), WORKER_TIMEOUT="600")
        argv = ["bash", script, "--", "bash", "-c", job]
        seen: list = []
        worker = start(c, "node2", argv, run_env)
        until_line(worker, "waiting for node1", seen)
        first = start(c, "node1", argv, run_env)
        try:
            _wait_files([c.tmp / f"started.{n}" for n in c.names])
            # the worker has seen its daemon: its end is what the worker goes by
            until_line(worker, "node1 started the job here", seen)
            # the script first, so that it cannot keep a record once mpirun is gone
            doomed = [first.pid] + _descendants(first.pid)
            for pid in doomed:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            killed = time.monotonic()
            ended = _ended_at({"node2": worker})
        finally:
            release.write_text("")
        res = finish({"node2": worker, "node1": first}, timeout=30)
        rc, _, err = res["node2"]
        report = f"--- node2: exit {rc}\n{''.join(seen)}{err}"
        last = (err.strip().splitlines() or [""])[-1]
        assert rc == 3, report
        assert re.search(r"the job's MPI daemon here ended [0-9]+s ago and node1 \(the first "
                         r"instance\) has no record of its end "
                         rf"\(FIRST_GONE_AFTER={GONE_AFTER}\): ending without the job's "
                         r"status$", last), report
        # the daemon's end, FIRST_GONE_AFTER, the grace and half a period of asking, a login
        assert ended.get("node2", float("inf")) - killed < 2 * GONE_AFTER + 30, report


def test_a_worker_started_after_its_job_ended_ends_with_that_status(setup):
    """The workers' sshd are up before their launch begins (an earlier run's, or the
    platform's), so the first instance alone runs the job on them and tells them its end.
    A worker's launch that begins only then ends at once with the job's status and says so,
    rather than wait for a job that has already run. Before that, one whole run on both
    instances: the worker took its own end, so no end is owed to a launch there."""
    env = setup["env"]
    with VCluster(2) as c:
        start_nodes(c)
        script = export(c, env, "mpi")
        run_env = dict(env, HOSTS="node1,node2", WAIT_TRIES="6",
                       FIRST_GONE_AFTER=str(GONE_AFTER))
        seen: list = []
        worker = start(c, "node2", ["bash", script, "--", "hostname"], run_env)
        until_line(worker, "waiting for node1", seen)
        first = start(c, "node1", ["bash", script, "--", "hostname"], run_env)
        res = finish({"node1": first, "node2": worker})
        report = "".join(f"\n--- {n}: exit {rc}\n{se}" for n, (rc, _, se) in res.items())
        assert res["node1"][0] == 0 and res["node2"][0] == 0, "".join(seen) + report

        job = f"touch {c.tmp}/ran.$(hostname); exit 4"
        first = start(c, "node1", ["bash", script, "--", "bash", "-c", job], run_env)
        rc1, _, err1 = finish({"node1": first})["node1"]
        assert rc1 == 4 and (c.tmp / "ran.node2").exists(), err1

        late = start(c, "node2", ["bash", script, "--", "bash", "-c", job], run_env)
        rc2, _, err2 = finish({"node2": late}, timeout=60)["node2"]
        last = (err2.strip().splitlines() or [""])[-1]
        assert rc2 == 4, err2
        assert re.search(r"the job had ended, with status 4, when this launch began: node1 "
                         r"told this instance \d+s ago \(it ran the job through the sshd "
                         r"already up on port 2222 here\)$", last), err2
        assert "waiting for node1" not in err2


def test_workers_end_when_the_first_instance_gives_up_before_the_job(setup):
    """node3's SSH port takes no connection, so the first instance gives up waiting for it
    (exit 2) and never runs mpirun; its own sshd still answers. node2, whose launch began
    before, learns by asking that the job did not run and ends with that status and a line
    saying so, rather than wait for ever (WORKER_TIMEOUT is 0, the default)."""
    env = setup["env"]
    with VCluster(3) as c:
        start_nodes(c)
        _block_ssh(c, "node3", both_ways=False)
        script = export(c, env, "mpi")
        run_env = dict(env, HOSTS="node1,node2,node3", WAIT_TRIES="3",
                       FIRST_GONE_AFTER=str(GONE_AFTER))
        argv = ["bash", script, "--", "hostname"]
        seen: list = []
        worker = start(c, "node2", argv, run_env)
        until_line(worker, "waiting for node1", seen)
        first = start(c, "node1", argv, run_env)
        rc1, _, err1 = finish({"node1": first})["node1"]
        gave_up = time.monotonic()
        assert rc1 == 2 and "node3: port 2222 not ready after 3 tries" in err1, err1
        ended = _ended_at({"node2": worker})
        rc, _, err = finish({"node2": worker}, timeout=30)["node2"]
        report = f"--- node2: exit {rc}\n{''.join(seen)}{err}"
        assert rc == 2, report
        assert (err.strip().splitlines() or [""])[-1].endswith(
            "the job did not run: node1's launch ended with status 2 before its mpirun "
            "(from its record; its log says why)"), report
        # about one period of asking (FIRST_GONE_AFTER here) and a login, not for ever
        assert ended.get("node2", float("inf")) - gave_up < 2 * GONE_AFTER + 30, report


def test_a_worker_ends_when_the_first_instance_runs_no_launch(setup):
    """The first instance alone runs a job through node2's sshd and ends; node2's launch
    begins after, owed an end by a launch there that ended without one, so it clears the
    marker as an earlier run's and waits. Its asks find that no launch runs on node1 (the
    last began and ended before this one began): once a worker's wait for a first instance
    has passed, it ends with exit 3 and a line saying why, not at WORKER_TIMEOUT."""
    env = setup["env"]
    with VCluster(2) as c:
        start_nodes(c)
        script = export(c, env, "mpi")
        run_env = dict(env, HOSTS="node1,node2", WAIT_TRIES="3",
                       FIRST_GONE_AFTER=str(GONE_AFTER), WORKER_TIMEOUT="600")
        first = start(c, "node1", ["bash", script, "--", "hostname"], run_env)
        rc1, _, err1 = finish({"node1": first})["node1"]
        assert rc1 == 0, err1
        run_dir = Path(env.get("HOME", "/root")) / ".hpcwizard/launch"
        (run_dir / "taken.node2").write_text("owed\n")
        began = time.monotonic()
        late = start(c, "node2", ["bash", script, "--", "hostname"], run_env)
        ended = _ended_at({"node2": late})
        rc, _, err = finish({"node2": late}, timeout=30)["node2"]
        last = (err.strip().splitlines() or [""])[-1]
        assert rc == 3, err
        assert re.search(r"node1 \(the first instance\) runs no launch: its last ended \d+s ago "
                         r"with status 0, before this one began, and none has begun in "
                         rf"{GONE_AFTER}s \(WAIT_TRIES=3, FIRST_GONE_AFTER={GONE_AFTER}\): "
                         r"ending without the job's status$", last), err
        # the wait for a first instance, then one and a half periods of asking at most
        assert ended.get("node2", float("inf")) - began < 3 * GONE_AFTER + 30, err
