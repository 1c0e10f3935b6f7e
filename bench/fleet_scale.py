"""`hpcwizard verify --fleet` at N namespace instances, run on the first one, against what any
check of every instance costs at least: one `ssh HOST true` to each other instance, 16 at a
time (verify's default --jobs), measured in the same run.

    HPCWIZARD_BENCH_SYSTEM=1 python3 bench/fleet_scale.py [--sizes 16 64] [--repeats 1]

Root only: applies the MPI/TCP configuration for root (undone afterwards) and makes network
namespaces (tests/system/netns.py), so it runs under /work/system-tests.lock on a shared
machine. Prints one line per size; never asserts a timing.
"""
from __future__ import annotations

import json
import statistics
import sys
import time

import _namespaces  # first: it puts tests/system on the path
from _verify_cluster import PORT, VCluster, start_nodes, wizard_exe


def _logins(c: VCluster, env: dict) -> float:
    """One key login to every other instance from node1, 16 at a time."""
    names = " ".join(c.names[1:])
    script = (f"printf '%s\\n' {names} | xargs -P 16 -I{{}} ssh -o BatchMode=yes "
              f"-p {PORT} {{}} true")
    t0 = time.perf_counter()
    c.run("node1", ["bash", "-c", script], timeout=900, env=env, cwd="/").check_returncode()
    return time.perf_counter() - t0


def bench(setup: dict, sizes: list, repeats: int) -> None:
    for n in sizes:
        with VCluster(n) as c:
            start_nodes(c)
            base, took, rounds, pairs, ok = [], [], 0, 0, True
            for _ in range(repeats):
                base.append(_logins(c, setup["env"]))
                t0 = time.perf_counter()
                proc = c.run("node1", [wizard_exe(), "verify", "--framework", "mpi",
                                       "--network", "tcp", "--manual", "--hosts",
                                       f"node[1-{n}]", "--fleet", "--json"],
                             timeout=3600, cwd="/", env=setup["env"])
                took.append(time.perf_counter() - t0)
                try:
                    data = json.loads(proc.stdout)
                except ValueError:
                    raise RuntimeError(f"N={n}: verify --fleet printed no JSON, exit "
                                       f"{proc.returncode}\n{proc.stderr[-2000:]}")
                rounds = len({m["round"] for m in data["measured"]})
                pairs = len({(m["sender"], m["receiver"]) for m in data["measured"]})
                ok = ok and bool(data["ok"])
            b, t = statistics.median(base), statistics.median(took)
            print(f"N={n:<3} verify --fleet median {t:7.1f}s  {t / b:6.1f}x the logins "
                  f"({b:.1f}s)  {rounds} rounds, {pairs} directions measured, "
                  f"{'nothing named' if ok else 'something named'}  "
                  f"({', '.join(f'{v:.1f}' for v in took)})", flush=True)


if __name__ == "__main__":
    sys.exit(_namespaces.main(__doc__, bench, [16, 64], 1))
