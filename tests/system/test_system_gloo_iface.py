"""Issue 17, for real: GLOO_SOCKET_IFNAME as the plan writes it. On two namespace instances,
the plan made inside the first one names its interface (eth0, the same as NCCL_SOCKET_IFNAME
without NCCL's '='); a gloo all_reduce run by torchrun with the plan's environment on both
gives the right sum, and the same run with an interface the instances do not have fails
naming it (gloo's "Unable to find address for: NAME"): gloo does read the variable, so the
plan's value is the one that worked.
Root only, HPCWIZARD_SYSTEM_TESTS=1 (conftest.py skips otherwise); skipped, with the reason,
when torch does not import."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from _verify_cluster import VCluster, show, wizard_exe
from hpcwizard.verify import ALLREDUCE_PY

pytestmark = pytest.mark.system


def torchrun(c: VCluster, prog: str, env: dict, port: int) -> dict:
    """The all_reduce on node1 and node2 at once: node -> (exit status, stdout, stderr)."""
    procs = {}
    for rank, node in enumerate(c.names):
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
                "--nproc-per-node", "1", "--node-rank", str(rank),
                "--master-addr", c.ip("node1"), "--master-port", str(port), prog]
        procs[node] = subprocess.Popen(c.argv(node, argv), stdin=subprocess.DEVNULL,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True, env=env, cwd="/", start_new_session=True)
    out = {}
    for node, p in procs.items():
        try:
            so, se = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            # the whole group: a rank torchrun left behind holds the pipes open otherwise
            os.killpg(p.pid, signal.SIGKILL)
            so, se = p.communicate()
        out[node] = (p.returncode, so, se)
    return out


def test_gloo_uses_the_interface_the_plan_names(tmp_path):
    probe = subprocess.run([sys.executable, "-c", "import torch.distributed"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("torch does not import here (pip install torch==2.13.0 takes the CPU "
                    f"build): {probe.stderr.strip().splitlines()[-1:]}")
    prog = tmp_path / "allreduce.py"
    prog.write_text(ALLREDUCE_PY)
    prog.chmod(0o644)
    with VCluster(2) as c:
        planned = c.run("node1", [wizard_exe(), "plan", "--framework", "pytorch", "--network",
                                  "tcp", "--json"], timeout=180)
        assert planned.returncode == 0, show(planned)
        env = json.loads(planned.stdout)["launch_env"]
        assert env["GLOO_SOCKET_IFNAME"] == "eth0" and env["NCCL_SOCKET_IFNAME"] == "=eth0"

        good = torchrun(c, str(prog), dict(os.environ, **env), 29531)
        report = "".join(f"\n--- {n}: exit {rc}\n{so}\n{se[-2000:]}" for n, (rc, so, se)
                         in good.items())
        assert all(rc == 0 for rc, _, _ in good.values()), report
        for node, rank in (("node1", 0), ("node2", 1)):
            assert f"HPCWIZARD-ALLREDUCE rank={rank} size=2 backend=gloo sum=3 expected=3" \
                in good[node][1], report

        wrong = dict(os.environ, **dict(env, GLOO_SOCKET_IFNAME="hpcwz9"))
        bad = torchrun(c, str(prog), wrong, 29532)
        assert all(rc != 0 for rc, _, _ in bad.values())
        assert any("Unable to find address for: hpcwz9" in se for _, _, se in bad.values()), \
            "".join(se[-1500:] for _, _, se in bad.values())
