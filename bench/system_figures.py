"""Figures that change this machine (root, HPCWIZARD_BENCH_SYSTEM=1): each leaves the
machine as it found it (undo after every apply; the guide's commands run on scratch copies
of the files they edit, and a package they add is purged afterwards)."""
from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List

from run import HPCWIZARD, Figure, timed

ROOT = Path(__file__).resolve().parent.parent
CHOICES = ["--framework", "mpi", "--network", "tcp", "--manual"]

# The guide's MPI commands (shared/seed-guide.md), fixed only where they cannot run twice:
# the port is a variable ($2222 was the bug), ssh-keygen does not stop at "Overwrite?", and
# the lists are not deleted between two installs. Files it edits are scratch copies.
GUIDE_FIXED = r"""
set -e
port=2222
S="$1"
apt-get update
apt-get install -y --no-install-recommends openssh-server openssh-client libcap2-bin
sed -i "s/[ #]\(.*StrictHostKeyChecking \).*/ \1no/g" "$S/ssh_config" \
  && echo " UserKnownHostsFile /dev/null" >> "$S/ssh_config" \
  && sed -i "s/[ #]\(.*Port \).*/ \1$port/g" "$S/ssh_config" \
  && sed -i "s/#\(StrictModes \).*/\1no/g" "$S/sshd_config" \
  && sed -i "s/#\(Port \).*/\1$port/g" "$S/sshd_config"
echo "Port $port" >> "$S/home/.sshd_config"
[ -f "$S/home/.ssh/id_rsa" ] || ssh-keygen -q -t rsa -N '' -f "$S/home/.ssh/id_rsa"
cat "$S/home/.ssh/id_rsa.pub" >> "$S/home/.ssh/authorized_keys"
apt-get install -y dnsutils
"""


def _installed(pkg: str) -> bool:
    out = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Abbrev}", pkg],
                         capture_output=True, text=True)
    return out.stdout.startswith("ii")


def _apply(record: Path) -> float:
    return timed([HPCWIZARD, "apply", *CHOICES, "--yes", "--record", str(record)])


def _undo(record: Path) -> None:
    subprocess.run([HPCWIZARD, "undo", str(record), "--yes"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def fig_reapply(repeats: int) -> Figure:
    fig = Figure("reapply", "apply again on a configured machine (every step skipped)",
                 "the guide's MPI commands again (fixed for the port)", ">= 5x faster")
    had_libcap = _installed("libcap2-bin")
    with tempfile.TemporaryDirectory() as tmp:
        tmpd = Path(tmp)
        first = tmpd / "first.toml"
        _apply(first)
        scratch = tmpd / "guide"
        (scratch / "home" / ".ssh").mkdir(parents=True)
        for name in ("ssh_config", "sshd_config"):
            shutil.copy(f"/etc/ssh/{name}", scratch / name)
        n = iter(range(1000))
        try:
            ours = lambda: _apply(tmpd / f"again-{next(n)}.toml")  # noqa: E731
            base = lambda: timed(["bash", "-c", GUIDE_FIXED, "guide", str(scratch)])  # noqa: E731
            ours()
            base()
            for _ in range(repeats):
                fig.ours.append(ours())
                fig.base.append(base())
        finally:
            _undo(first)
            if not had_libcap and _installed("libcap2-bin"):
                subprocess.run(["apt-get", "purge", "-y", "libcap2-bin"], capture_output=True)
    fig.extra["speedup"] = statistics.median(fig.base) / statistics.median(fig.ours)
    return fig


def fig_first_apply(repeats: int) -> Figure:
    fig = Figure("first-apply", "first apply of MPI/TCP on a fresh machine",
                 "the exported setup.sh on the same fresh state", "<= 1.05x")
    if _installed("openssh-server"):
        fig.skipped = "openssh-server is installed: this figure needs a machine without it"
        return fig
    with tempfile.TemporaryDirectory() as tmp:
        tmpd = Path(tmp)
        script = tmpd / "setup.sh"
        subprocess.run([HPCWIZARD, "export", *CHOICES, "--format", "setup", "-o", str(script)],
                       check=True, stdout=subprocess.DEVNULL)
        for i in range(repeats):
            record = tmpd / f"r{i}.toml"
            fig.ours.append(_apply(record))
            _undo(record)
            fig.base.append(timed(["bash", str(script)]))
            subprocess.run(["bash", str(script), "--undo"], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return fig


def fig_verify(repeats: int) -> Figure:
    """verify across 4, 16 and 32 namespace instances, concurrent (--jobs 16) against the
    same checks one host after another (--jobs 1)."""
    sys.path.insert(0, str(ROOT / "tests" / "system"))
    from netns import Cluster  # the system tests' own instances

    fig = Figure("verify", "verify --hosts at 16 instances (concurrent)",
                 "the same checks one host after another", "16 instances <= 2x the time of 4")
    with tempfile.TemporaryDirectory() as tmp:
        first = Path(tmp) / "apply.toml"
        _apply(first)
        try:
            times: Dict[int, List[float]] = {}
            for n in (4, 16, 32):
                with Cluster(n) as c:
                    for i in range(1, n + 1):
                        node = f"node{i}"
                        c.start_sshd(node, f"/run/sshd-bench-{node}.pid")
                    for i in range(1, n + 1):
                        c.wait_port(f"node{i}", 2222)
                    hosts = ",".join(f"node{i}" for i in range(1, n + 1))

                    def run(jobs: int) -> float:
                        argv = c.argv("node1", [HPCWIZARD, "verify", *CHOICES[:4], "--hosts",
                                                hosts, "--jobs", str(jobs)])
                        return timed(argv, check=False)

                    times[n] = [run(16) for _ in range(repeats)]
                    if n == 16:
                        fig.ours = times[n]
                        fig.base = [run(1) for _ in range(max(1, repeats // 2))]
            for n, values in times.items():
                fig.extra[f"{n}_instances_s"] = statistics.median(values)
            fig.extra["ratio_16_to_4"] = statistics.median(times[16]) / statistics.median(times[4])
        finally:
            _undo(first)
    return fig


SYSTEM_FIGURES: Dict[str, Callable[[int], Figure]] = {
    "reapply": fig_reapply,
    "first-apply": fig_first_apply,
    "verify": fig_verify,
}
