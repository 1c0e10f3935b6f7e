"""Issue 15, proof on real roots: hpcwizard on fresh Debian 11 (bullseye), 12 (bookworm) and
13 (trixie) roots made with debootstrap (roots.py; cached as tarballs, a fresh copy per run).
In each root, the zipapp (tools/build_pyz.py) runs chrooted, in a network namespace of the
root's own with NAT to the mirrors, and proves six points:

1. `apply --framework mpi --network tcp --manual --yes --record R` exits 0, R says done;
2. three namespace instances of the same root (the same image: host keys, ~/.ssh), each
   running the root's sshd with a pid file of its own, reach each other by key on port 2222;
3. the exported launch script, run on each instance, runs an MPI hello world built with
   mpicc across the three through mpirun, and every rank's host name appears (3a: the same
   with `hostname` as the program, which needs no compiler; 3b: `hostname` run by the first
   instance alone through the workers' sshd, their launch scripts begun only afterwards:
   each ends at once with the job's status);
4. apply again: every step skipped;
5. mpicc compiles a program and the binary runs;
6. undo R leaves the root's /etc/ssh, /root/.ssh and `dpkg-query -W` as before apply, and
   nothing running in the root.

A point that cannot be tried because one before it failed is skipped, naming that point.
Phase timings (root, apply, cluster, reapply, undo) are printed at the end of the module.
HPCWIZARD_CI_SUITES=bookworm,trixie picks releases; HPCWIZARD_CI_PARALLEL=0 prepares (root
and apply) one release after the other instead of all at once.
Root only, HPCWIZARD_SYSTEM_TESTS=1 (conftest.py skips otherwise).
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from hpcwizard.compat import tomllib
from netns import Cluster, ClusterError
from roots import (CACHE_DIR, CHROOT_ENV, SUITES, Root, RootError, Suite, Uplink, cache_state,
                   cleanup_stale, fresh_root, host_net_state, new_root_dir, pids_in_root,
                   upgrade_argv)
from test_apply_mpi_tcp import diff, show, snapshot, step_table

pytestmark = pytest.mark.system

REPO = Path(__file__).resolve().parents[2]
PORT = 2222
TOOLS = ("debootstrap", "chroot", "mount", "umount", "nft", "tar")
NAMES = [n.strip() for n in os.environ.get("HPCWIZARD_CI_SUITES", ",".join(SUITES)).split(",")
         if n.strip()]
PARALLEL = os.environ.get("HPCWIZARD_CI_PARALLEL", "1") != "0"
CI = "/opt/hpcwizard-ci"  # in each root: the zipapp, the launch script, the MPI programs
STATE = "/var/lib/hpcwizard-ci"  # in each root: HPCWIZARD_STATE_DIR (records and logs)
WIZARD = ["python3", f"{CI}/hpcwizard.pyz"]
APPLY = ["apply", "--framework", "mpi", "--network", "tcp", "--manual", "--yes"]
HELLO_C = r"""#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
  int rank, size, len;
  char name[MPI_MAX_PROCESSOR_NAME];
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Get_processor_name(name, &len);
  printf("HPCWIZARD-HELLO rank=%d size=%d host=%s\n", rank, size, name);
  MPI_Finalize();
  return 0;
}
"""
PKG_FORMAT = "${binary:Package} ${Version} ${db:Status-Abbrev}\n"
NET_PREFIXES = ("hpcwr", "hpcwd")  # the uplinks' (roots.Uplink) and the clusters' names
# The instance apply runs on is the job's first: its host name gives the naming pattern
# (node*) that the SSH client settings are for (wizard/peers.py), as on a platform whose
# instances are job-0, job-1, ...
APPLY_HOST = "node1"


def _tail(text: str, n: int = 6000) -> str:
    return text if len(text) <= n else "...\n" + text[-n:]


class Release:
    """One Debian release's root, its uplink namespace, its cluster and what was found."""

    def __init__(self, suite: Suite) -> None:
        self.suite = suite
        self.v = int(suite.version)
        self.root: Optional[Root] = None
        self.net = Uplink(suite.name, self.v)
        self.cluster: Optional[Cluster] = None
        self.timings: Dict[str, float] = {}
        self.cache = ""
        self.error = ""         # setup (root, mounts, namespace) failed: nothing to test
        self.apply_error = ""   # point 1 failed
        self.cluster_error = ""  # point 2 could not start its instances
        self.before: Dict[str, str] = {}
        self.packages_before = ""
        self.record = f"{STATE}/apply.toml"
        self.apply_started = False
        self.mpicc_error: Optional[str] = None
        self.points: Dict[str, str] = {}  # "1".."6" -> pass, FAIL, skip (the summary's)

    def __repr__(self) -> str:
        return self.suite.label

    # --- running things in the root ---------------------------------------------------

    def run(self, argv: List[str], timeout: float = 120,
            env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
        """argv chrooted in the root, in its uplink namespace, host name APPLY_HOST."""
        assert self.root is not None
        return subprocess.run(self.net.argv(argv, self.root.path, APPLY_HOST),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout, cwd="/",
                              env=dict(CHROOT_ENV, HPCWIZARD_STATE_DIR=STATE, **(env or {})))

    def wizard(self, *args: str, timeout: float = 1200) -> subprocess.CompletedProcess:
        return self.run([*WIZARD, *args], timeout=timeout)

    def host(self, path: str) -> Path:
        assert self.root is not None
        return self.root.host(path)

    def load(self, record: str) -> dict:
        return tomllib.loads(self.host(record).read_text())

    def log(self, record: str) -> str:
        try:
            return _tail(self.host(record[:-5] + ".log").read_text(errors="replace"))
        except OSError:
            return "(no log)"

    def notes(self, proc: subprocess.CompletedProcess) -> str:
        """hpcwizard's own lines (its notes, steps and results) from a run's output."""
        keep = [x for x in proc.stdout.splitlines()
                if x.lstrip().startswith(("hpcwizard", "==", "-- ", "result:"))]
        return "\n--- hpcwizard's lines:\n" + "\n".join(keep[-60:])

    def report(self, proc: subprocess.CompletedProcess, record: str) -> str:
        table = ""
        if self.host(record).exists():
            try:
                data = self.load(record)
                table = f"\n--- record status {data.get('status')}:\n{step_table(data)}"
            except Exception as exc:  # the record is the thing under test: say what is wrong
                table = f"\n--- record unreadable: {exc}"
        out = subprocess.CompletedProcess(proc.args, proc.returncode, _tail(proc.stdout),
                                          _tail(proc.stderr))
        return f"{show(out)}{table}\n--- log:\n{self.log(record)}{self.hints(record)}"

    def hints(self, record: str) -> str:
        """What this root lacks that a failed step is known to need."""
        try:
            failed = [s["id"] for s in self.load(record)["steps"] if s["status"] == "failed"]
        except Exception:
            return ""
        out = []
        if "ssh/sshd-start" in failed and not any(
                self.host(f"{d}/ss").exists() for d in ("/usr/bin", "/usr/sbin", "/bin", "/sbin")):
            out.append("this root has no `ss` (iproute2 is in neither a minbase root nor "
                       "Debian's container images): recipes/ops.sh's _hw_sshd_listens asks ss "
                       "whether sshd listens, so the step waits 20 s and fails although sshd "
                       "runs (HPCWIZARD_CI_INCLUDE=iproute2 looks past it)")
        return "".join(f"\n--- hint: {h}" for h in out)

    def packages(self) -> str:
        assert self.root is not None
        proc = self.root.run(["dpkg-query", "-W", "-f", PKG_FORMAT])
        if proc.returncode != 0:
            raise RootError(f"dpkg-query failed in {self.root.path}{show(proc)}")
        return proc.stdout

    def state(self) -> Dict[str, str]:
        return snapshot(self.host("/etc/ssh"), self.host("/root/.ssh"))

    # --- phases -----------------------------------------------------------------------

    def timed(self, phase: str, t0: float) -> None:
        self.timings[phase] = self.timings.get(phase, 0.0) + time.monotonic() - t0

    def prepare(self, pyz: Path) -> None:
        """A fresh root with its mounts and namespace, the zipapp in it, the state before,
        then point 1 (apply). Never raises: errors go to self.error / self.apply_error."""
        try:
            t0 = time.monotonic()
            self.root = Root(new_root_dir(self.suite))
            seconds, self.cache = fresh_root(self.suite, self.root.path)
            self.timed("root", t0)
            self.root.mount()
            self.net.create()
            if self.cache == "cached":  # the mirror may have moved on since it was cached
                t1 = time.monotonic()
                up = self.run(upgrade_argv(), timeout=900)
                if up.returncode != 0:
                    raise RootError(f"bringing the cached root up to date failed{show(up)}")
                self.timed("root", t1)
            ci = self.host(CI)
            ci.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(pyz, ci / "hpcwizard.pyz")
            self.before = self.state()
            self.packages_before = self.packages()
        except Exception as exc:
            self.error = f"setting up the root of {self}: {exc}"
            return
        t0 = time.monotonic()
        self.apply_started = True
        try:
            proc = self.wizard(*APPLY, "--record", self.record)
        except subprocess.TimeoutExpired as exc:
            self.apply_error = f"apply did not end within {exc.timeout}s\n{self.log(self.record)}"
            return
        finally:
            self.timed("apply", t0)
        if proc.returncode != 0:
            self.apply_error = f"apply failed on {self}{self.report(proc, self.record)}"
            return
        try:
            data = self.load(self.record)
        except Exception as exc:  # the record is the thing under test: say what is wrong
            self.apply_error = f"apply exited 0 on {self}, but its record is unreadable: {exc}"
            return
        bad = [s["id"] for s in data["steps"] if s["status"] not in ("done", "skipped")]
        if data.get("status") != "done" or bad:
            self.apply_error = (f"apply exited 0 on {self}, but its record says "
                                f"{data.get('status')!r} (steps neither done nor skipped: "
                                f"{bad})\n{step_table(data)}")

    def cluster_up(self) -> Cluster:
        """Three instances of the root: namespaces hpcwdN-node1..3 on a bridge, their names
        in the root's /etc/hosts, each running the root's sshd with its own pid file."""
        if self.cluster is not None:
            return self.cluster
        assert self.root is not None
        t0 = time.monotonic()
        c = Cluster(3, subnet=f"10.80.{self.v}", ns_prefix=f"hpcwd{self.v}-",
                    hosts_file=self.host("/etc/hosts"), root=self.root.path,
                    env=dict(CHROOT_ENV))
        c.create()
        self.cluster = c
        try:
            for node in c.names:
                c.start_sshd(node, f"/run/sshd-{node}.pid")
            for node in c.names:
                c.wait_port(node, PORT)
        finally:
            self.timed("cluster", t0)
        return c

    def node_logs(self) -> str:
        if self.cluster is None:
            return ""
        return "".join(f"\n--- sshd log of {d.node}:\n{d.log_text()[-3000:]}"
                       for d in self.cluster.daemons)

    def cluster_down(self) -> None:
        if self.cluster is not None:
            c, self.cluster = self.cluster, None
            c.cleanup()

    def cleanup(self) -> List[str]:
        errors = []
        for what, step in (("cluster", self.cluster_down), ("namespace", self.net.cleanup),
                           ("root", self.root.cleanup if self.root else lambda: None)):
            try:
                step()
            except Exception as exc:  # every step gets its chance
                errors.append(f"{self}: {what}: {exc}")
        return errors


# --- fixtures --------------------------------------------------------------------------------

def _missing_tools() -> List[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


@pytest.fixture(scope="module")
def releases(request: pytest.FixtureRequest, tmp_path_factory) -> Dict[str, Release]:
    missing = _missing_tools()
    if missing:
        pytest.skip(f"needs {', '.join(missing)} on this machine (.ci/run installs them)")
    unknown = [n for n in NAMES if n not in SUITES]
    if unknown:
        pytest.fail(f"HPCWIZARD_CI_SUITES names unknown suites {unknown}; known: {list(SUITES)}")
    stale = cleanup_stale(NET_PREFIXES)  # a killed run's
    if stale:
        print(f"removed what a killed run left: {stale}")
    host_before = host_net_state(NET_PREFIXES)
    t0 = time.monotonic()
    pyz = tmp_path_factory.mktemp("pyz") / "hpcwizard.pyz"
    build = subprocess.run([sys.executable, str(REPO / "tools" / "build_pyz.py"), "-o", str(pyz)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    assert build.returncode == 0, f"building the zipapp failed:\n{build.stdout}"
    pyz_seconds = time.monotonic() - t0
    rels = {n: Release(SUITES[n]) for n in NAMES}
    t0 = time.monotonic()
    try:
        if PARALLEL:
            with ThreadPoolExecutor(max_workers=len(rels)) as pool:
                list(pool.map(lambda r: r.prepare(pyz), rels.values()))
        else:
            for r in rels.values():
                r.prepare(pyz)
        prepare_seconds = time.monotonic() - t0
        cache_after = cache_state()
        yield rels
    finally:
        errors = []
        for r in rels.values():
            errors += r.cleanup()
        _report(request, rels, pyz_seconds, locals().get("prepare_seconds"))
        assert not errors, "cleanup failed:\n" + "\n".join(errors)
        left = [str(r.root.path) for r in rels.values() if r.root and r.root.path.exists()]
        assert not left, f"roots left behind: {left}"
        now = host_net_state(NET_PREFIXES)
        assert now == host_before, \
            f"this machine's network differs after cleanup: {host_before} -> {now}"
        if "cache_after" in locals():
            assert cache_state() == cache_after, f"a test changed the cache in {CACHE_DIR}"


def _report(request: pytest.FixtureRequest, rels: Dict[str, Release], pyz_seconds: float,
            prepare_seconds: Optional[float]) -> None:
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    phases = ("root", "apply", "cluster", "reapply", "undo")
    points = ("1", "2", "3a", "3", "3b", "4", "5", "6")
    lines = ["", "Debian roots, seconds per phase "
             f"(zipapp {pyz_seconds:.0f}; root and apply "
             f"{'concurrently' if PARALLEL else 'one after the other'}: "
             f"{prepare_seconds or 0:.0f} in all):",
             f"  {'release':<32}" + "".join(f"{p:>9}" for p in phases) + "  root from",
             ]
    for r in rels.values():
        lines.append(f"  {r.suite.label:<32}" + "".join(
            f"{r.timings[p]:>9.0f}" if p in r.timings else f"{'-':>9}" for p in phases)
            + f"  {r.cache or '-'}")
    lines.append("Points (1 apply, 2 ssh, 3a launch hostname, 3 launch MPI hello, 3b workers "
                 "begun after the job, 4 re-apply, 5 mpicc, 6 undo):")
    lines.append(f"  {'release':<32}" + "".join(f"{p:>6}" for p in points))
    for r in rels.values():
        lines.append(f"  {r.suite.label:<32}" + "".join(f"{r.points.get(p, '-'):>6}"
                                                         for p in points))
    text = "\n".join(lines)
    if tr is not None:
        tr.write_line(text)
    else:
        print(text, file=sys.__stderr__)


@pytest.fixture(params=NAMES)
def rel(request: pytest.FixtureRequest, releases: Dict[str, Release]) -> Release:
    r = releases[request.param]
    if r.error:
        pytest.fail(r.error)
    return r


def need_apply(r: Release) -> None:
    if r.apply_error:
        pytest.skip(f"needs point 1: apply failed on {r} (see test_1_apply)")


def need_cluster(r: Release) -> Cluster:
    need_apply(r)
    if r.cluster_error:
        pytest.skip(f"needs point 2's three instances, which did not start on {r}")
    try:
        return r.cluster_up()
    except (ClusterError, RootError, subprocess.TimeoutExpired) as exc:
        r.cluster_error = str(exc)
        pytest.fail(f"the three instances of {r} did not start: {exc}{r.node_logs()}")


def compile_hello(r: Release) -> str:
    """mpicc in the root; '' when it worked, else what went wrong (point 5)."""
    if r.mpicc_error is None:
        r.host(f"{CI}/hello.c").write_text(HELLO_C)
        cc = r.run(["mpicc", "-o", f"{CI}/hello", f"{CI}/hello.c"], timeout=120)
        r.mpicc_error = "" if cc.returncode == 0 else f"mpicc failed on {r}{show(cc)}"
    return r.mpicc_error


def point(n: str):  # type: ignore[no-untyped-def]
    """Record the test's outcome as point n of its release, for the summary."""
    def deco(fn):  # type: ignore[no-untyped-def]
        @functools.wraps(fn)
        def wrapper(rel: Release) -> None:
            rel.points[n] = "FAIL"
            try:
                fn(rel)
            except pytest.skip.Exception:
                rel.points[n] = "skip"
                raise
            rel.points[n] = "pass"
        return wrapper
    return deco


# --- the six points --------------------------------------------------------------------------

@point("1")
def test_1_apply(rel: Release) -> None:
    assert not rel.apply_error, rel.apply_error


@point("2")
def test_2_ssh_between_three_instances_by_key(rel: Release) -> None:
    c = need_cluster(rel)
    t0 = time.monotonic()
    try:
        for src, dst in (("node1", "node2"), ("node1", "node3"), ("node3", "node1")):
            ssh = c.run(src, ["ssh", dst, "hostname"], timeout=30)
            assert ssh.returncode == 0 and ssh.stdout.strip() == dst, \
                f"ssh {dst} hostname from {src} on {rel}{show(ssh)}{rel.node_logs()}"
    finally:
        rel.timed("cluster", t0)


def _launch(rel: Release, c: Cluster, program: List[str],
            first_alone: bool = False) -> Dict[str, tuple]:
    """The exported launch script on each instance, workers first (each until it says it
    waits for node1), then node1; first_alone, node1 until it ends, then the workers.
    Returns node -> (exit, stdout, stderr)."""
    script = f"{CI}/launch.sh"
    if not rel.host(script).exists():
        proc = rel.wizard("export", "--framework", "mpi", "--network", "tcp", "--manual",
                          "--format", "launch", "-o", script, timeout=120)
        assert proc.returncode == 0, f"export failed on {rel}{show(proc)}"
    env = dict(CHROOT_ENV, HOSTS="node1,node2,node3", WAIT_TRIES="6", WORKER_TIMEOUT="150")
    argv = ["bash", script, "--", *program]
    outs = {n: (c.tmp / f"launch-{n}.out", c.tmp / f"launch-{n}.err") for n in c.names}
    procs: Dict[str, subprocess.Popen] = {}

    def start(node: str) -> None:
        so, se = outs[node]
        with open(so, "w") as o, open(se, "w") as e:
            procs[node] = subprocess.Popen(c.argv(node, argv), stdin=subprocess.DEVNULL,
                                           stdout=o, stderr=e, env=env, cwd="/")

    def text(node: str, i: int) -> str:
        return outs[node][i].read_text(errors="replace")

    try:
        for node in () if first_alone else ("node2", "node3"):
            start(node)
        deadline = time.monotonic() + 120
        for node in procs:  # a worker clears an earlier run's end marker when it starts
            while "waiting for node1 to run the job" not in text(node, 1):
                if procs[node].poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"the launch script on {node} of {rel} did not get to wait "
                                f"for node1 (exit {procs[node].poll()}):\n{text(node, 1)}")
                time.sleep(0.1)
        start("node1")
        try:
            procs["node1"].wait(timeout=240)
        except subprocess.TimeoutExpired:
            procs["node1"].kill()
            procs["node1"].wait()
        for node in ("node2", "node3") if first_alone else ():
            start(node)
        # node1 tells the workers the end over ssh when it ends; after a failure it may not
        # have: then they would wait for WORKER_TIMEOUT
        for node in ("node2", "node3"):
            try:
                procs[node].wait(timeout=60 if procs["node1"].returncode == 0 else 5)
            except subprocess.TimeoutExpired:
                procs[node].kill()
                procs[node].wait()
        return {n: (procs[n].returncode, text(n, 0), text(n, 1)) for n in c.names}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()


def _launch_report(res: Dict[str, tuple]) -> str:
    return "".join(f"\n--- {n}: exit {rc}\n{_tail(so, 3000)}\n{_tail(se, 3000)}"
                   for n, (rc, so, se) in res.items())


@point("3a")
def test_3a_launch_script_runs_hostname_across_three(rel: Release) -> None:
    c = need_cluster(rel)
    t0 = time.monotonic()
    try:
        res = _launch(rel, c, ["hostname"])
    finally:
        rel.timed("cluster", t0)
    report = f"on {rel}:{_launch_report(res)}{rel.node_logs()}"
    assert all(rc == 0 for rc, _, _ in res.values()), report
    assert sorted(res["node1"][1].split()) == c.names, report


@point("3")
def test_3_launch_script_runs_mpi_hello_across_three(rel: Release) -> None:
    c = need_cluster(rel)
    err = compile_hello(rel)
    assert not err, f"cannot build the MPI hello world (point 5):{err}"
    t0 = time.monotonic()
    try:
        res = _launch(rel, c, [f"{CI}/hello"])
    finally:
        rel.timed("cluster", t0)
    report = f"on {rel}:{_launch_report(res)}{rel.node_logs()}"
    assert all(rc == 0 for rc, _, _ in res.values()), report
    lines = [x for x in res["node1"][1].splitlines() if x.startswith("HPCWIZARD-HELLO")]
    hosts = sorted(x.rsplit("host=", 1)[1] for x in lines)
    assert hosts == c.names, f"ranks' host names {hosts}, not {c.names}, {report}"
    assert all("size=3" in x for x in lines), report


@point("3b")
def test_3b_workers_begun_after_the_job_ended_end_with_it(rel: Release) -> None:
    c = need_cluster(rel)
    t0 = time.monotonic()
    try:
        res = _launch(rel, c, ["hostname"], first_alone=True)
    finally:
        rel.timed("cluster", t0)
    report = f"on {rel}:{_launch_report(res)}{rel.node_logs()}"
    assert all(rc == 0 for rc, _, _ in res.values()), report
    assert sorted(res["node1"][1].split()) == c.names, report
    for node in ("node2", "node3"):
        last = (res[node][2].strip().splitlines() or [""])[-1]
        assert ("the job had ended, with status 0, when this launch began: node1 told this "
                "instance") in last, report


@point("4")
def test_4_reapply_skips_every_step(rel: Release) -> None:
    need_apply(rel)
    record = f"{STATE}/reapply.toml"
    t0 = time.monotonic()
    try:
        proc = rel.wizard(*APPLY, "--record", record)
    finally:
        rel.timed("reapply", t0)
    assert proc.returncode == 0, f"the second apply failed on {rel}{rel.report(proc, record)}"
    data = rel.load(record)
    not_skipped = [(s["id"], s["status"]) for s in data["steps"] if s["status"] != "skipped"]
    assert not not_skipped, (f"second apply on {rel}: steps not skipped: {not_skipped}\n"
                             f"{rel.report(proc, record)}")


@point("5")
def test_5_mpicc_compiles_and_the_binary_runs(rel: Release) -> None:
    need_apply(rel)
    err = compile_hello(rel)
    assert not err, err
    # a singleton (no mpirun): the binary itself starts and ends
    run = rel.run([f"{CI}/hello"], timeout=60,
                  env={"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    assert run.returncode == 0 and f"size=1 host={APPLY_HOST}" in run.stdout, \
        f"the mpicc-built binary did not run on {rel}{show(run)}"


@point("6")
def test_6_undo_restores_ssh_and_packages(rel: Release) -> None:
    if not rel.apply_started:
        pytest.skip(f"apply never ran on {rel}")
    if not rel.host(rel.record).exists():
        pytest.skip(f"apply wrote no record on {rel}: nothing to undo ({rel.apply_error[:200]})")
    rel.cluster_down()  # the instances' sshd first: undo stops only the sshd apply started
    t0 = time.monotonic()
    try:
        undo = rel.wizard("undo", rel.record, "--yes")
    finally:
        rel.timed("undo", t0)
    assert undo.returncode == 0, f"undo failed on {rel}{rel.report(undo, rel.record)}"
    problems = []  # all of them, not the first: each may have its own cause
    after = rel.state()
    if after != rel.before:
        problems.append(f"/etc/ssh or /root/.ssh differ from before apply:\n"
                        f"{diff(rel.before, after)}{_contents(rel.before, after)}")
    packages = rel.packages()
    if packages != rel.packages_before:
        b, a = set(rel.packages_before.splitlines()), set(packages.splitlines())
        problems.append(f"dpkg-query -W differs: only before {sorted(b - a)}, "
                        f"only after {sorted(a - b)}")
    assert rel.root is not None
    left = [(p, Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ")
             .decode(errors="replace")) for p in pids_in_root(rel.root.path)]
    if left:
        problems.append(f"still running in the root: {left}")
    assert not problems, f"after undo on {rel}:\n" + "\n".join(problems) + rel.notes(undo)


def _contents(before: Dict[str, str], after: Dict[str, str]) -> str:
    """The text of the small files that are new or changed after undo."""
    out = []
    for k in sorted(after):
        if after[k] != before.get(k) and after[k].startswith("file "):
            try:
                data = Path(k).read_bytes()
            except OSError:
                continue
            if len(data) <= 4096:
                out.append(f"\n  --- {k}:\n" + data.decode(errors="replace"))
    return "".join(out)
