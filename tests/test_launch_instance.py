"""Issue 17: what the plan took from the planning instance and each instance checks against its
own when the launch script runs there — the RoCE v2 IPv4 GID index (NCCL_IB_GID_INDEX) and the
socket interface (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME). runtime.sh's hw_rt_roce_gid is held
to detection's rule (hpcwizard.detect.rdma) on the same sysfs trees; the launch script is run
for real by bash, with fake commands and a sysfs tree of its own (HW_RT_SYSFS)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from _ib_fixtures import (EMPTY_GID, gid_of, make_facts, rdma_machine, roce_gid_table,
                          sysfs_port, with_)
from hpcwizard import runtime
from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.detect import detect
from hpcwizard.export import launch_script
from hpcwizard.plan import build_plan

SYSROOTS = Path(__file__).parent / "fixtures" / "sysroots"
LL = "fe80::ba3f:d2ff:fe12:3456"

TABLES = {
    "v1 and v2 of a link-local and an IPv4 address": roce_gid_table(LL, "10.0.0.5"),
    "a global IPv6 address first": roce_gid_table(LL, "2001:db8::5", "10.0.0.5"),
    "a hole of empty slots": roce_gid_table(LL)[:2] + (("", EMPTY_GID),) * 2
    + roce_gid_table("10.0.0.5", empty=0),
    "RoCE v1 only": tuple(e for e in roce_gid_table(LL, "10.0.0.5") if e[0] != "RoCE v2"),
    "no IPv4 address": roce_gid_table(LL, "2001:db8::5"),
    "an empty table": (("", EMPTY_GID),) * 4,
    "slot 10 before slot 2 as text": tuple(
        ("RoCE v2", gid_of("10.0.0.5")) if i in (2, 10) else ("", EMPTY_GID) for i in range(12)),
    "::ffff:0.0.0.0 is no address": (("RoCE v2", "0000:0000:0000:0000:0000:ffff:0000:0000"),
                                     ("RoCE v2", gid_of("10.0.0.5"))),
    "upper-case hex and type": (("ROCE V2", gid_of("10.0.0.5").upper()),),
}


def shell_gid(sysfs: Path, hca: str, port: int) -> str:
    out = subprocess.run(
        ["bash", "-c", runtime.library() + '\nhw_rt_roce_gid "$1" "$2"; printf "%s" "$HW_RT_GID"',
         "_", hca, str(port)],
        env={"HW_RT_SYSFS": str(sysfs), "PATH": "/usr/bin:/bin"}, capture_output=True,
        text=True, timeout=30, check=True)
    return out.stdout


@pytest.mark.parametrize("table", TABLES.values(), ids=list(TABLES))
def test_the_shell_finds_the_gid_index_detection_finds(tmp_path, table):
    root = rdma_machine(tmp_path)
    sysfs_port(root, "mlx5_0", layer="Ethernet", netdev="ens1f0np0", gids=table)
    (port,) = detect(str(root)).active_ports
    want = "" if port.roce_v2_ipv4_gid is None else str(port.roce_v2_ipv4_gid)
    assert shell_gid(root / "sys", "mlx5_0", 1) == want


def test_the_shell_reads_the_dual_port_roce_tree_as_detection_does():
    tree = SYSROOTS / "rdma-roce-v2"
    ports = detect(str(tree)).active_ports
    assert [p.roce_v2_ipv4_gid for p in ports] == [3, 3]
    assert [shell_gid(tree / "sys", p.hca, p.number) for p in ports] == ["3", "3"]
    assert shell_gid(tree / "sys", "mlx5_9", 1) == ""  # a device this instance has not


# --- the launch script on an instance other than the planning one ------------------------------

def roce_plan():
    f = detect(str(SYSROOTS / "rdma-roce-v2"))
    facts = with_(make_facts("debian12"), hcas=f.hcas, rdma=f.rdma)
    plan = build_plan(facts, make_choices(framework="pytorch", network="ib"), load_catalog())
    env = dict(plan.launch_env)
    assert (env["NCCL_IB_GID_INDEX"], env["NCCL_SOCKET_IFNAME"], env["GLOO_SOCKET_IFNAME"]) == (
        "3", "=eth0", "eth0"), "the planning instance's values this test starts from"
    return plan


def instance(tmp_path: Path, nics, gids_of_ports) -> Path:
    """This instance's sysfs: its NICs, and mlx5_0:1, mlx5_1:1 with these GID tables."""
    root = tmp_path / "inst"
    for nic in nics:
        (root / "sys/class/net" / nic).mkdir(parents=True)
    for hca, table in zip(("mlx5_0", "mlx5_1"), gids_of_ports):
        sysfs_port(root, hca, layer="Ethernet", gids=table)
    return root / "sys"


def launch(tmp_path: Path, sysfs: Path, hostname: str = "node2", **env):
    """The launch script of roce_plan() on hostname of node1,node2, with a fake ip whose
    route to any address leaves by ens6; what torchrun's environment held, and stderr."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    log = tmp_path / "torchrun.env"
    fakes = {
        "hostname": f"echo {hostname}",
        "getent": 'case "$2" in node1) echo "10.0.0.1 node1" ;; node2) echo "10.0.0.2 node2" ;;'
                  ' *) exit 2 ;; esac',
        "ip": 'echo "$4 dev ens6 src 10.0.0.9 uid 0"',
        "timeout": "exit 0",
        "nvidia-smi": "exit 1",
        "torchrun": f'echo "GLOO=${{GLOO_SOCKET_IFNAME-unset}} NCCL=${{NCCL_SOCKET_IFNAME-unset}}'
                    f' GID=${{NCCL_IB_GID_INDEX-unset}}" > {log}',
    }
    for name, body in fakes.items():
        (bin_ / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_ / name).chmod(0o755)
    script = tmp_path / "launch.sh"
    script.write_text(launch_script(roce_plan()))
    r = subprocess.run(["bash", str(script), "--hosts", "node1,node2", "--", "python3", "t.py"],
                       env={"PATH": f"{bin_}:/usr/bin:/bin", "HOME": str(tmp_path),
                            "HW_RT_SYSFS": str(sysfs), "WAIT_TRIES": "1", **env},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return log.read_text().split(), r.stderr


def test_an_instance_like_the_planning_one_keeps_the_plans_values(tmp_path):
    sysfs = instance(tmp_path, ["eth0"], [roce_gid_table(LL, "10.0.0.5")] * 2)
    got, err = launch(tmp_path, sysfs)
    assert got == ["GLOO=eth0", "NCCL==eth0", "GID=3"]
    assert "not the plan's" not in err


def test_an_instance_with_other_nic_names_and_gid_tables_uses_its_own(tmp_path):
    """Its NIC is ens6 (the route to the master leaves by it) and an extra IPv6 address moved
    its RoCE v2 IPv4 GID from 3 to 5."""
    table = roce_gid_table(LL, "2001:db8::9", "10.0.0.9")
    sysfs = instance(tmp_path, ["ens6"], [table, table])
    got, err = launch(tmp_path, sysfs)
    assert got == ["GLOO=ens6", "NCCL==ens6", "GID=5"]
    assert "socket interface ens6 here (the route to node1 at 10.0.0.1), not the plan's eth0" in err
    assert "NCCL_IB_GID_INDEX 5 here (this instance's RoCE v2 IPv4 GID), not the plan's 3" in err


def test_the_master_routes_to_the_next_host(tmp_path):
    sysfs = instance(tmp_path, ["ens6"], [roce_gid_table(LL, "10.0.0.5")] * 2)
    got, err = launch(tmp_path, sysfs, hostname="node1")
    assert got[:2] == ["GLOO=ens6", "NCCL==ens6"]
    assert "the route to node2 at 10.0.0.2" in err


def test_ports_that_disagree_here_leave_the_gid_to_nccl(tmp_path):
    sysfs = instance(tmp_path, ["eth0"], [roce_gid_table(LL, "10.0.0.5"),
                                          roce_gid_table(LL, "2001:db8::9", "10.0.0.9")])
    got, err = launch(tmp_path, sysfs)
    assert got == ["GLOO=eth0", "NCCL==eth0", "GID=unset"]
    assert "NCCL_IB_GID_INDEX unset: this instance's ports have no one RoCE v2 IPv4 GID" in err


def test_values_the_environment_sets_are_not_corrected(tmp_path):
    """The user's own NCCL_IB_GID_INDEX and NCCL_SOCKET_IFNAME are theirs: neither this
    instance's GID table nor its NIC names replace them; the plan's GLOO_SOCKET_IFNAME is
    still checked."""
    table = roce_gid_table(LL, "2001:db8::9", "10.0.0.9")
    sysfs = instance(tmp_path, ["ens6"], [table, table])
    got, err = launch(tmp_path, sysfs, NCCL_IB_GID_INDEX="7", NCCL_SOCKET_IFNAME="=ib9")
    assert got == ["GLOO=ens6", "NCCL==ib9", "GID=7"]  # GLOO_SOCKET_IFNAME is the plan's
    assert "socket interface ens6 here" in err and "not the plan's 3" not in err
