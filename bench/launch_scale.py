"""The launch script at N namespace instances against a bare `mpirun -np N hostname` from the
first instance (the same hostfile, port and interface), both measured in the same run:

  first alone  the script on the first instance only (the workers' sshd already up): its
               waits for the workers, mpirun, and telling every worker the end of the job
  every        the script started on every instance at once, as platforms do: until the
               last instance has ended (and the first instance's own time)

    HPCWIZARD_BENCH_SYSTEM=1 python3 bench/launch_scale.py [--sizes 4 16 64] [--repeats 2]

Every SSH session runs the login user's ~/.bashrc, mpirun's and the telling's alike: one
that does real work for shells that are not interactive (this machine's root one runs
`pyenv init`) weighs on both; bench/RESULTS.md says which was measured.

Root only: applies the MPI/TCP configuration for root (undone afterwards) and makes network
namespaces (tests/system/netns.py), so it runs under /work/system-tests.lock on a shared
machine. Prints one line per figure, and where the first instance's time went (its
`times:` line: the workers' sshd, mpirun's start and run, the telling); never asserts a
timing.
"""
from __future__ import annotations

import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import _namespaces  # first: it puts tests/system on the path
from _verify_cluster import PORT, VCluster, start_nodes
from test_system_launch import export


_TIMES = re.compile(r"times: the workers' sshd ready after (\S+)s, mpirun started after "
                    r"(\S+)s and ran (\S+)s, telling \d+ workers took (\S+)s; (\S+)s in all")
PHASES = ("sshd ready", "to mpirun", "mpirun", "telling", "script")


def _phases(err: str) -> dict:
    """The first instance's times line as phase -> seconds ({} when it has none)."""
    m = _TIMES.search(err)
    if not m:
        return {}
    ready, started, ran, told, total = map(float, m.groups())
    return dict(zip(PHASES, (ready, started - ready, ran, told, total)))


def _run_all(c: VCluster, argvs: dict, env: dict, errs: Optional[dict] = None) -> dict:
    """Start each node's argv at once; node -> seconds until it ended (non-zero: raise);
    each node's standard error into errs."""
    start = time.perf_counter()
    procs = {n: subprocess.Popen(c.argv(n, a), stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                 env=env, cwd="/") for n, a in argvs.items()}
    took = {}
    for n, p in procs.items():
        _out, err = p.communicate(timeout=900)
        took[n] = time.perf_counter() - start
        if errs is not None:
            errs[n] = err
        if p.returncode != 0:
            raise RuntimeError(f"{n}: exit {p.returncode}\n{err[-2000:]}")
    return took


def bench(setup: dict, sizes: list, repeats: int) -> None:
    for n in sizes:
        with VCluster(n) as c:
            start_nodes(c)
            script = export(c, setup["env"], "mpi")
            hosts = ",".join(c.names)
            hostfile = c.tmp / "hostfile"
            hostfile.write_text("".join(f"{h} slots=1\n" for h in c.names))
            env = dict(setup["env"], HOSTS=hosts, WAIT_TRIES="10", FIRST_GONE_AFTER="120")
            bare = ["mpirun", "--allow-run-as-root", "--hostfile", str(hostfile), "-np",
                    str(n), "--mca", "plm_rsh_args", f"-p {PORT}", "--mca",
                    "btl_tcp_if_include", "eth0", "--mca", "oob_tcp_if_include", "eth0",
                    "hostname"]
            ours = ["bash", script, "--", "hostname"]
            rows = {"bare": [], "first alone": [], "every (last)": [], "every (first)": []}
            phases = {"first alone": [], "every (first)": []}
            for _ in range(repeats):
                rows["bare"].append(_run_all(c, {"node1": bare}, env)["node1"])
                errs: dict = {}
                rows["first alone"].append(_run_all(c, {"node1": ours}, env, errs)["node1"])
                phases["first alone"].append(_phases(errs["node1"]))
                for m in (Path.home() / ".hpcwizard" / "launch").glob("done.*"):
                    m.unlink()  # the markers nobody read: the workers ran no script
                took = _run_all(c, {h: ours for h in c.names}, env, errs)
                rows["every (last)"].append(max(took.values()))
                rows["every (first)"].append(took["node1"])
                phases["every (first)"].append(_phases(errs["node1"]))
            base = statistics.median(rows["bare"])
            for name, vals in rows.items():
                med = statistics.median(vals)
                print(f"N={n:<3} {name:<14} median {med:7.2f}s  {med / base:5.2f}x bare  "
                      f"({', '.join(f'{v:.2f}' for v in vals)})", flush=True)
            for name, runs in phases.items():
                runs = [r for r in runs if r]
                if runs:
                    print(f"N={n:<3} {name:<14} phases (median s): " + ", ".join(
                        f"{p} {statistics.median(r[p] for r in runs):.2f}" for p in PHASES),
                        flush=True)


if __name__ == "__main__":
    sys.exit(_namespaces.main(__doc__, bench, [4, 16], 2))
