"""Issue 5, system tests: the exported launch script, run on each of three namespace
instances, completes an MPI job (an MPI all-reduce built with mpicc); and for PyTorch, a CPU
gloo all_reduce across two instances through the launch script and torchrun gives the right
sum (skipped, with the reason, when torch does not import). Issue 17: with two processes on
each instance (NPROC_PER_NODE, or Kubeflow's PET_NPROC_PER_NODE), 4 ranks, through the
launch script and through verify.
Root only, HPCWIZARD_SYSTEM_TESTS=1 (conftest.py skips otherwise)."""
from __future__ import annotations

import subprocess

import pytest

from _pipes import until_line
from _verify_cluster import VCluster, applied, show, start_nodes, wizard_exe
from hpcwizard.verify import ALLREDUCE_PY, MPI_ALLREDUCE_C

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    yield from applied(tmp_path_factory)


def export(c: VCluster, env: dict, framework: str) -> str:
    path = c.tmp / f"launch-{framework}.sh"
    proc = subprocess.run([wizard_exe(), "export", "--framework", framework, "--network", "tcp",
                           "--manual", "--format", "launch", "-o", str(path)], env=env,
                          text=True, capture_output=True, timeout=120)
    assert proc.returncode == 0, f"export failed{show(proc)}"
    path.chmod(0o755)
    return str(path)


def start(c: VCluster, node: str, argv: list, env: dict) -> subprocess.Popen:
    return subprocess.Popen(c.argv(node, argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd="/")


def finish(procs: dict, timeout: float = 180) -> dict:
    out = {}
    for node, p in procs.items():
        try:
            so, se = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            so, se = p.communicate()
        out[node] = (p.returncode, so, se)
    return out


def test_launch_script_runs_an_mpi_job_on_three_instances(setup):
    env = setup["env"]
    with VCluster(3) as c:
        start_nodes(c)
        script = export(c, env, "mpi")
        src = c.tmp / "allreduce.c"
        src.write_text(MPI_ALLREDUCE_C)
        exe = c.tmp / "allreduce"
        cc = subprocess.run(["mpicc", "-o", str(exe), str(src)], capture_output=True, text=True)
        assert cc.returncode == 0, f"mpicc failed{show(cc)}"
        run_env = dict(env, HOSTS="node1,node2,node3", WAIT_TRIES="6", WORKER_TIMEOUT="150")
        argv = ["bash", script, "--", str(exe)]
        # workers first, as when each instance's own sshd comes up with it
        procs, seen = {}, {n: [] for n in c.names}
        for n in ("node2", "node3"):
            procs[n] = start(c, n, argv, run_env)
            until_line(procs[n], "waiting for node1", seen[n])
        procs["node1"] = start(c, "node1", argv, run_env)
        res = finish(procs)
        res = {n: (rc, so, "".join(seen[n]) + se) for n, (rc, so, se) in res.items()}
        report = "".join(f"\n--- {n}: exit {rc}\n{so}\n{se}" for n, (rc, so, se) in res.items())
        assert all(rc == 0 for rc, _, _ in res.values()), report
        assert "HPCWIZARD-MPI size=3 sum=3" in res["node1"][1], report
        assert "hosts from HOSTS: node1 node2 node3 (this is node2, rank 1 of 3)" in res["node2"][2]


# TCP_IFACE reaches orted's command line on the other instance, inside double quotes: the
# forms Open MPI takes run the job; one with a command in it is refused on every instance
# before sshd starts or mpirun runs, and the command runs nowhere.
TCP_IFACES = {"name": ("eth0", True), "subnet": ("10.78.0.0/24", True),
              "command": ("eth0,$(touch {marker})", False)}


@pytest.mark.parametrize("case", list(TCP_IFACES))
def test_launch_script_tcp_iface_on_two_instances(setup, case):
    value, runs = TCP_IFACES[case]
    env = setup["env"]
    with VCluster(2) as c:
        start_nodes(c)
        script = export(c, env, "mpi")
        marker = c.tmp / "tcp-iface-ran"
        run_env = dict(env, HOSTS="node1,node2", WAIT_TRIES="6", WORKER_TIMEOUT="150",
                       TCP_IFACE=value.replace("{marker}", str(marker)))
        argv = ["bash", script, "--", "hostname"]
        procs = {n: start(c, n, argv, run_env) for n in ("node2", "node1")}
        res = finish(procs)
        report = "".join(f"\n--- {n}: exit {rc}\n{so}\n{se}" for n, (rc, so, se) in res.items())
        assert not marker.exists(), report
        if runs:
            assert all(rc == 0 for rc, _, _ in res.values()), report
            assert f"TCP interface {value}, from TCP_IFACE" in res["node1"][2], report
            return
        for rc, _so, se in res.values():
            assert rc == 2 and "TCP_IFACE=" in se.strip().splitlines()[-1], report
            assert "mpirun" not in se, report


def test_launch_script_torchrun_gloo_allreduce_on_two_instances(setup):
    probe = subprocess.run(["python3", "-c", "import torch.distributed"], capture_output=True,
                           text=True)
    if probe.returncode != 0:
        pytest.skip("torch does not import here (pip install torch==2.13.0 takes the CPU "
                    f"build): {probe.stderr.strip().splitlines()[-1:]}")
    env = setup["env"]
    with VCluster(2) as c:
        script = export(c, env, "pytorch")
        prog = c.tmp / "allreduce.py"
        prog.write_text(ALLREDUCE_PY)
        run_env = dict(env, HOSTS="node1,node2", WAIT_TRIES="6", MASTER_PORT="29511")
        argv = ["bash", script, "--", "python3", str(prog)]
        procs = {n: start(c, n, argv, run_env) for n in c.names}
        res = finish(procs, timeout=240)
        report = "".join(f"\n--- {n}: exit {rc}\n{so}\n{se[-3000:]}" for n, (rc, so, se) in res.items())
        assert all(rc == 0 for rc, _, _ in res.values()), report
        for node, rank in (("node1", 0), ("node2", 1)):
            assert f"HPCWIZARD-ALLREDUCE rank={rank} size=2 backend=gloo sum=3 expected=3" \
                in res[node][1], report


def _torch_or_skip() -> None:
    probe = subprocess.run(["python3", "-c", "import torch.distributed"], capture_output=True,
                           text=True)
    if probe.returncode != 0:
        pytest.skip("torch does not import here (pip install torch==2.13.0 takes the CPU "
                    f"build): {probe.stderr.strip().splitlines()[-1:]}")


# Issue 17: two processes per instance. As the launch script is told by hand
# (NPROC_PER_NODE), and as a Kubeflow TrainJob tells torchrun (PET_NPROC_PER_NODE, each
# pod's PET_NODE_RANK, PET_MASTER_PORT; the hosts by HOSTS: the namespaces are not named
# like a JobSet's pods).
FOUR_RANKS = {
    "NPROC_PER_NODE": ({"NPROC_PER_NODE": "2", "MASTER_PORT": "29512"}, {}),
    "PET_NPROC_PER_NODE": ({"PET_NPROC_PER_NODE": "2", "PET_MASTER_PORT": "29513"},
                           {"node1": {"PET_NODE_RANK": "0"}, "node2": {"PET_NODE_RANK": "1"}}),
}


@pytest.mark.parametrize("told", list(FOUR_RANKS))
def test_launch_script_torchrun_gloo_four_ranks_on_two_instances(setup, told):
    """NPROC_PER_NODE=2 on two instances: torchrun starts 2 processes on each, 4 ranks in all;
    node1's are ranks 0 and 1, node2's 2 and 3 (torchrun's static rendezvous: node rank x
    processes + local rank), and every one of them sums 1+2+3+4."""
    _torch_or_skip()
    common, per_node = FOUR_RANKS[told]
    with VCluster(2) as c:
        script = export(c, setup["env"], "pytorch")
        prog = c.tmp / "allreduce.py"
        prog.write_text(ALLREDUCE_PY)
        argv = ["bash", script, "--", "python3", str(prog)]
        procs = {n: start(c, n, argv, dict(setup["env"], HOSTS="node1,node2", WAIT_TRIES="6",
                                           **common, **per_node.get(n, {})))
                 for n in c.names}
        res = finish(procs, timeout=300)
        report = "".join(f"\n--- {n}: exit {rc}\n{so}\n{se[-3000:]}"
                         for n, (rc, so, se) in res.items())
        assert all(rc == 0 for rc, _, _ in res.values()), report
        for node, ranks in (("node1", (0, 1)), ("node2", (2, 3))):
            lines = sorted(ln for ln in res[node][1].splitlines()
                           if ln.startswith("HPCWIZARD-ALLREDUCE "))
            assert lines == [f"HPCWIZARD-ALLREDUCE rank={r} size=4 backend=gloo sum=10 "
                             f"expected=10 local={r % 2} node={r // 2}" for r in ranks], report
            assert f"--nproc-per-node 2 ({told})" in res[node][2], report


def test_verify_pytorch_four_ranks_across_two_instances(setup):
    """verify with NPROC_PER_NODE=2 in its environment (the launch script's variable): both
    halves start two processes, and the check passes on 4 ranks, naming the count."""
    import json

    _torch_or_skip()
    with VCluster(2) as c:
        start_nodes(c)
        proc = c.run("node1", [wizard_exe(), "verify", "--framework", "pytorch", "--network",
                               "tcp", "--manual", "--hosts", "node1,node2", "--json"],
                     timeout=400, cwd="/", env=dict(setup["env"], NPROC_PER_NODE="2"))
        data = json.loads(proc.stdout or "{}")
        ar = {x["id"]: x for x in data.get("checks", [])}.get("cluster/torch-allreduce", {})
        assert ar.get("status") == "pass", show(proc)
        assert ar["detail"].startswith("gloo: sum 10 on 4 ranks on 2 instances (2 per "
                                       "instance), as expected"), ar["detail"]
        assert ar["detail"].endswith("per instance: NPROC_PER_NODE)"), ar["detail"]


def test_verify_pytorch_runs_the_allreduce_through_the_launch_script(setup):
    """verify --framework pytorch from node1: its two-instance gloo all_reduce (started on
    node2 over the SSH the MPI apply set up) passes."""
    import json

    probe = subprocess.run(["python3", "-c", "import torch.distributed"], capture_output=True,
                           text=True)
    if probe.returncode != 0:
        pytest.skip("torch does not import here (pip install torch==2.13.0 takes the CPU build)")
    with VCluster(2) as c:
        start_nodes(c)
        proc = c.run("node1", [wizard_exe(), "verify", "--framework", "pytorch", "--network",
                               "tcp", "--manual", "--hosts", "node1,node2", "--json"],
                     timeout=400, cwd="/", env=setup["env"])
        data = json.loads(proc.stdout or "{}")
        checks = {x["id"]: x for x in data.get("checks", [])}
        ar = checks.get("cluster/torch-allreduce", {})
        assert ar.get("status") == "pass", show(proc)
        assert "gloo: sum 3" in ar["detail"]


# Issue 30: the hosts as SkyPilot and dstack give them, IP lists one address a line, on
# instances whose host names (node1, node2) are none of the addresses: the rank comes from
# the platform's variable. apply runs with SkyPilot's list, so the SSH client settings go to
# the job's addresses (10.78.0.*), as on a SkyPilot node.
IPS = ("10.78.0.1", "10.78.0.2")


@pytest.fixture(scope="module")
def ip_setup(tmp_path_factory):
    yield from applied(tmp_path_factory, {"SKYPILOT_NODE_IPS": "\n".join(IPS) + "\n"})


def _mpi_program(c: VCluster) -> str:
    src = c.tmp / "allreduce.c"
    src.write_text(MPI_ALLREDUCE_C)
    exe = c.tmp / "allreduce"
    cc = subprocess.run(["mpicc", "-o", str(exe), str(src)], capture_output=True, text=True)
    assert cc.returncode == 0, f"mpicc failed{show(cc)}"
    return str(exe)


def _run_on_both(c: VCluster, argv: list, env: dict, per_node: dict) -> tuple:
    procs = {"node2": start(c, "node2", argv, dict(env, **per_node["node2"]))}
    procs["node1"] = start(c, "node1", argv, dict(env, **per_node["node1"]))
    res = finish(procs)
    report = "".join(f"\n--- {n}: exit {rc}\n{so}\n{se}" for n, (rc, so, se) in res.items())
    return res, report


def test_launch_script_with_skypilots_ip_list(ip_setup):
    """SKYPILOT_NODE_IPS as SkyPilot writes it (newline-separated, a newline at the end),
    SKYPILOT_NODE_RANK per node: the launch script and verify name the same hosts in the
    same order, and the MPI job runs across them."""
    import json

    env = dict(ip_setup["env"], SKYPILOT_NUM_NODES="2", WAIT_TRIES="6", WORKER_TIMEOUT="150")
    with VCluster(2) as c:
        start_nodes(c)
        script = export(c, env, "mpi")
        exe = _mpi_program(c)
        res, report = _run_on_both(c, ["bash", script, "--", exe], env, {
            "node1": {"SKYPILOT_NODE_RANK": "0"}, "node2": {"SKYPILOT_NODE_RANK": "1"}})
        assert all(rc == 0 for rc, _, _ in res.values()), report
        assert "HPCWIZARD-MPI size=2 sum=2" in res["node1"][1], report
        assert ("hosts from SKYPILOT_NODE_IPS: 10.78.0.1 10.78.0.2 (this is 10.78.0.2, rank 1 "
                "of 2)") in res["node2"][2], report
        proc = c.run("node2", [wizard_exe(), "verify", "--framework", "mpi", "--network", "tcp",
                               "--manual", "--json"], timeout=400, cwd="/",
                     env=dict(env, SKYPILOT_NODE_RANK="1"))
        data = json.loads(proc.stdout or "{}")
        assert data.get("hosts", {}).get("names") == list(IPS), show(proc)
        assert data["hosts"]["source"] == "SKYPILOT_NODE_IPS"
        peer = {x["id"]: x for x in data["checks"]}.get("peer/10.78.0.1/resolve", {})
        assert peer.get("status") == "pass", show(proc)
        # each instance answers with its name, not the address it is known by: no failure
        assert data["ok"] and proc.returncode == 0, show(proc)


def test_launch_script_with_dstacks_ip_list_and_hostfile(ip_setup):
    """DSTACK_NODES_IPS, DSTACK_MASTER_NODE_IP, DSTACK_NODE_RANK and dstack's MPI hostfile
    (2 slots a node): mpirun runs 4 ranks on the two instances, in dstack's order."""
    env = {k: v for k, v in ip_setup["env"].items() if not k.startswith("SKYPILOT_")}
    with VCluster(2) as c:
        start_nodes(c)
        script = export(c, env, "mpi")
        exe = _mpi_program(c)
        hostfile = c.tmp / "dstack-mpi-hostfile"
        hostfile.write_text("".join(f"{ip} slots=2\n" for ip in IPS))
        env.update(DSTACK_NODES_IPS="\n".join(IPS), DSTACK_MASTER_NODE_IP=IPS[0],
                   DSTACK_NODES_NUM="2", DSTACK_MPI_HOSTFILE=str(hostfile), WAIT_TRIES="6",
                   WORKER_TIMEOUT="150")
        res, report = _run_on_both(c, ["bash", script, "--", exe], env, {
            "node1": {"DSTACK_NODE_RANK": "0"}, "node2": {"DSTACK_NODE_RANK": "1"}})
        assert all(rc == 0 for rc, _, _ in res.values()), report
        assert "HPCWIZARD-MPI size=4 sum=4" in res["node1"][1], report
        assert ("hosts from DSTACK_NODES_IPS (slots from DSTACK_MPI_HOSTFILE): 10.78.0.1 "
                "10.78.0.2 (this is 10.78.0.1, rank 0 of 2)") in res["node1"][2], report
