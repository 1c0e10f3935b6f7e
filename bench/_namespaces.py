"""What the system benchmarks share (launch_scale.py, fleet_scale.py): the MPI/TCP
configuration applied for root around the run (tests/system/_verify_cluster.applied, undone
afterwards), and a command line that runs only as root with HPCWIZARD_BENCH_SYSTEM=1."""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Callable, Dict, List

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests" / "system"), str(ROOT / "tests")]

from _verify_cluster import applied  # noqa: E402


class _Tmp:
    """What applied() asks of pytest's tmp_path_factory."""

    def mktemp(self, name: str) -> Path:
        return Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))


Bench = Callable[[Dict[str, object], List[int], int], None]  # (setup, sizes, repeats)


def main(doc: str, bench: Bench, sizes: List[int], repeats: int) -> int:
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=sizes)
    ap.add_argument("--repeats", type=int, default=repeats)
    a = ap.parse_args()
    if os.geteuid() != 0 or os.environ.get("HPCWIZARD_BENCH_SYSTEM") != "1":
        print("skipped: needs root and HPCWIZARD_BENCH_SYSTEM=1 (it applies the MPI "
              "configuration and makes network namespaces)")
        return 0
    gen = applied(_Tmp())
    setup = next(gen)
    try:
        bench(setup, a.sizes, a.repeats)
    finally:
        for _ in gen:
            pass
    return 0
