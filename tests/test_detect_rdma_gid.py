"""Issue 17, RoCE: the GID index of the RoCE v2 GID with an IPv4 address, read from sysfs GID
tables (ports/N/gids/I, gid_attrs/types/I), and what the plan and the launch script get from it:
NCCL_IB_GID_INDEX for NCCL, UCX_IB_GID_INDEX for UCX (passed to the ranks with -x), nothing when
the ports disagree, nothing for InfiniBand."""
from __future__ import annotations

import dataclasses
import errno
import json
import os

import pytest

from hpcwizard import inputs
from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.detect import detect
from hpcwizard.detect import rdma
from hpcwizard.facts import Facts
from hpcwizard.export import launch_script
from hpcwizard.plan import build_plan

from _ib_fixtures import (EMPTY_GID, SYSROOTS, gid_of, make_facts, rdma_machine, roce_gid_table,
                          sysfs_port, with_)

CATALOG = load_catalog()
LL0, LL1 = "fe80::ba3f:d2ff:fe12:3456", "fe80::ba3f:d2ff:fe12:3457"


@pytest.fixture
def einval(monkeypatch):
    """What a real kernel does with an empty GID slot: read() of gid_attrs/types/I fails with
    EINVAL. Every read of a type file whose slot is empty (its gid all zeros) fails so."""
    real_read = os.read

    def read(fd, n):
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return real_read(fd, n)
        head, slot = os.path.split(path)
        if head.endswith("gid_attrs/types"):
            gid = os.path.join(os.path.dirname(os.path.dirname(head)), "gids", slot)
            with open(gid) as f:
                if f.read().strip() == EMPTY_GID:
                    raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return real_read(fd, n)

    monkeypatch.setattr(inputs.os, "read", read)
    return read


def plan(facts, framework, **kw):
    return build_plan(facts, make_choices(framework=framework, network="ib", **kw), CATALOG)


def hw(root):
    """The facts of a plan for these RDMA ports (the rest: the usual fixture machine)."""
    f = detect(str(root))
    return with_(make_facts("debian12"), hcas=f.hcas, rdma=f.rdma)


# --- parsing ----------------------------------------------------------------------------------

@pytest.mark.parametrize("gid,ipv4", [
    ("0000:0000:0000:0000:0000:ffff:0a00:0005", True),     # ::ffff:10.0.0.5
    ("0000:0000:0000:0000:0000:FFFF:C0A8:6405\n", True),   # 192.168.100.5, upper case
    ("fe80:0000:0000:0000:ba3f:d2ff:fe12:3456", False),    # link-local IPv6
    ("2001:0db8:0000:0000:0000:0000:0000:0005", False),    # global IPv6
    (EMPTY_GID, False),                                    # an empty slot
    ("0000:0000:0000:0000:0000:ffff:0000:0000", False),    # ::ffff:0.0.0.0
    ("", False), ("garbage", False),
])
def test_ipv4_gid(gid, ipv4):
    assert rdma.is_ipv4_gid(gid) is ipv4


# --- detection --------------------------------------------------------------------------------

def test_the_dual_port_roce_tree_gives_index_3_on_both(einval):
    """rdma-roce-v2: two RoCE ports, each with its link-local GID (0: v1, 1: v2), its IPv4
    address (2: v1, 3: v2) and four empty slots, whose type the kernel refuses to read."""
    f = detect(str(SYSROOTS / "rdma-roce-v2"))
    assert [(p.name, p.link_layer, p.netdev, p.roce_v2_ipv4_gid) for p in f.active_ports] == [
        ("mlx5_0:1", "Ethernet", "ens1f0np0", 3), ("mlx5_1:1", "Ethernet", "ens1f1np1", 3)]
    assert f.warnings == ()


@pytest.mark.parametrize("table,index", [
    # IPv6 global first: its RoCE v2 GID (3) is not an IPv4 one
    (roce_gid_table(LL0, "2001:db8::5", "10.0.0.5"), 5),
    # a hole where an address was removed: empty slots (EINVAL) before the IPv4 pair
    (roce_gid_table(LL0)[:2] + (("", EMPTY_GID),) * 2 + roce_gid_table("10.0.0.5", empty=0), 5),
    # RoCE v1 only (the v2 entries not there): no index
    (tuple(e for e in roce_gid_table(LL0, "10.0.0.5") if e[0] != "RoCE v2"), None),
    # no IPv4 address on the interface
    (roce_gid_table(LL0, "2001:db8::5"), None),
    # an empty table
    ((("", EMPTY_GID),) * 4, None),
])
def test_the_lowest_roce_v2_ipv4_index(tmp_path, einval, table, index):
    root = rdma_machine(tmp_path)
    sysfs_port(root, "mlx5_0", layer="Ethernet", netdev="ens1f0np0", gids=table)
    (p,) = detect(str(root)).active_ports
    assert p.roce_v2_ipv4_gid == index


def test_more_than_ten_slots_are_read_as_numbers(tmp_path, einval):
    """Slot 10 sorts before 2 as text: the lowest index is by number."""
    table = [("", EMPTY_GID)] * 12
    table[10] = ("RoCE v2", gid_of("10.0.0.5"))
    table[2] = ("RoCE v2", gid_of("10.0.0.6"))
    root = rdma_machine(tmp_path)
    sysfs_port(root, "mlx5_0", layer="Ethernet", gids=tuple(table))
    assert detect(str(root)).active_ports[0].roce_v2_ipv4_gid == 2


def test_an_infiniband_port_has_no_roce_index(tmp_path):
    """InfiniBand GIDs are typed 'IB/RoCE v1' and are not addresses: nothing is chosen."""
    root = rdma_machine(tmp_path)
    sysfs_port(root, "mlx5_0", gids=(("IB/RoCE v1", "fe80:0000:0000:0000:b83f:d203:0012:3456"),
                                     ("RoCE v2", gid_of("10.0.0.5"))))
    (p,) = detect(str(root)).active_ports
    assert p.link_layer == "InfiniBand" and p.roce_v2_ipv4_gid is None


def test_new_fields_survive_json_and_older_facts_still_load():
    f = detect(str(SYSROOTS / "rdma-roce-v2"))
    again = Facts.from_dict(json.loads(json.dumps(f.to_dict())))
    assert again == f and again.active_ports[0].roce_v2_ipv4_gid == 3
    old = f.to_dict()
    for h in old["hcas"]:
        for p in h["ports"]:
            del p["roce_v2_ipv4_gid"]
    del old["rdma"]["gpudirect"], old["runtime"]["shm_mib"]
    loaded = Facts.from_dict(old)
    assert loaded.active_ports[0].roce_v2_ipv4_gid is None
    assert loaded.rdma.gpudirect == "" and loaded.runtime.shm_mib is None


# --- the plan and the launch script ------------------------------------------------------------

def test_pytorch_on_roce_gets_nccl_ib_gid_index_in_env_conf_and_launch_script():
    p = plan(hw(SYSROOTS / "rdma-roce-v2"), "pytorch")
    assert list(p.launch_env) == [
        ("NCCL_IB_DISABLE", "0"), ("NCCL_IB_HCA", "=mlx5_0:1,mlx5_1:1"),
        ("NCCL_IB_GID_INDEX", "3"), ("NCCL_SOCKET_IFNAME", "=eth0"),
        ("GLOO_SOCKET_IFNAME", "eth0")]
    conf = next(s for s in p.steps if s.id == "pytorch-ib/nccl-conf")
    assert "\nNCCL_IB_GID_INDEX=3\n" in conf.run and "NCCL_IB_TC" not in conf.run
    script = launch_script(p)
    for line in ("planned_env NCCL_IB_HCA '=mlx5_0:1,mlx5_1:1'", "planned_env NCCL_IB_GID_INDEX '3'",
                 "planned_env NCCL_SOCKET_IFNAME '=eth0'", "planned_env GLOO_SOCKET_IFNAME 'eth0'"):
        assert line + "\n" in script, line
    assert "UCX_IB_GID_INDEX" not in script  # NCCL's own verbs transport, not UCX
    (w,) = [w for w in p.warnings if "RoCE" in w]
    assert "IPv4 address is index 3 here, NCCL_IB_GID_INDEX for NCCL" in w
    assert "traffic class (NCCL_IB_TC) is left to the platform" in w


def test_mpi_on_roce_leaves_the_gid_to_ucx_on_each_instance():
    """UCX's default (UCX_IB_GID_INDEX=auto) picks each port's RoCE v2 IPv4 GID on each
    instance; one index passed to every rank with -x would be the launching instance's."""
    p = plan(hw(SYSROOTS / "rdma-roce-v2"), "mpi")
    assert list(p.launch_env) == [("UCX_NET_DEVICES", "mlx5_0:1,mlx5_1:1")]
    assert p.mpirun_args == ("--mca", "plm_rsh_args", "-p 2222", "--mca", "pml", "ucx",
                             "-x", "UCX_NET_DEVICES")
    script = launch_script(p)
    assert "UCX_IB_GID_INDEX" not in script and "NCCL_IB_GID_INDEX '" not in script
    (w,) = [w for w in p.warnings if "RoCE" in w]
    assert "UCX picks such a GID on each port by itself (UCX_IB_GID_INDEX=auto" in w


def test_ports_with_different_indexes_set_no_gid_index_and_say_why(tmp_path, einval):
    root = rdma_machine(tmp_path)
    sysfs_port(root, "mlx5_0", layer="Ethernet", gids=roce_gid_table(LL0, "10.0.0.5"))
    sysfs_port(root, "mlx5_1", layer="Ethernet", gids=roce_gid_table(LL1, "2001:db8::6",
                                                                     "10.0.1.5"))
    f = hw(root)
    assert [p.roce_v2_ipv4_gid for p in f.active_ports] == [3, 5]
    for fw in ("pytorch", "mpi"):
        p = plan(f, fw)
        env = dict(p.launch_env)
        assert "NCCL_IB_GID_INDEX" not in env and "UCX_IB_GID_INDEX" not in env, fw
        assert "UCX_IB_GID_INDEX" not in p.mpirun_args
        (w,) = [w for w in p.warnings if "GID" in w]
        assert "different indexes (mlx5_0:1 3, mlx5_1:1 5)" in w and "not set" in w


def test_roce_ports_without_an_ipv4_gid_warn_and_set_nothing(tmp_path):
    root = rdma_machine(tmp_path)
    sysfs_port(root, "mlx5_0", layer="Ethernet", gids=roce_gid_table(LL0, "2001:db8::5"))
    p = plan(hw(root), "pytorch")
    assert "NCCL_IB_GID_INDEX" not in dict(p.launch_env)
    (w,) = [w for w in p.warnings if "GID" in w]
    assert "No RoCE v2 GID with an IPv4 address was found on the RoCE ports (mlx5_0:1)" in w


def test_infiniband_ports_get_no_gid_index_nor_roce_warning():
    p = plan(hw(SYSROOTS / "rdma-ib-hdr"), "pytorch")
    assert "NCCL_IB_GID_INDEX" not in dict(p.launch_env)
    assert not [w for w in p.warnings if "GID" in w or "RoCE" in w]


def test_mixed_tree_uses_infiniband_and_no_gid_index(tmp_path, einval):
    """mlx5_0 and mlx5_10 InfiniBand, mlx5_1 RoCE with an IPv4 RoCE v2 GID at 3: the job takes
    the InfiniBand ports, so no GID index is set though the RoCE port has one."""
    root = rdma_machine(tmp_path)
    sysfs_port(root, "mlx5_0", netdev="ib0")
    sysfs_port(root, "mlx5_1", layer="Ethernet", netdev="ens1f0np0",
               gids=roce_gid_table(LL0, "10.0.0.5"))
    sysfs_port(root, "mlx5_10", netdev="ib1")
    f = hw(root)
    assert {p.name: p.roce_v2_ipv4_gid for p in f.active_ports} == {
        "mlx5_0:1": None, "mlx5_1:1": 3, "mlx5_10:1": None}
    torch_plan, mpi_plan = plan(f, "pytorch"), plan(f, "mpi")
    assert dict(torch_plan.launch_env)["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_10:1"
    assert "NCCL_IB_GID_INDEX" not in dict(torch_plan.launch_env)
    assert dict(mpi_plan.launch_env) == {"UCX_NET_DEVICES": "mlx5_0:1,mlx5_10:1"}
    assert not [w for w in torch_plan.warnings if "GID" in w]


def test_a_roce_port_from_an_older_record_is_told_as_unknown():
    """Facts without the GID field (an older record, or ports from ibv_devinfo) cannot name an
    index: nothing is set, and the plan says so."""
    ports = tuple(dataclasses.replace(p, link_layer="Ethernet")
                  for h in make_facts().hcas for p in h.ports)
    hcas = tuple(dataclasses.replace(h, ports=(q,)) for h, q in zip(make_facts().hcas, ports))
    p = plan(with_(make_facts(), hcas=hcas), "mpi")
    assert dict(p.launch_env) == {"UCX_NET_DEVICES": "mlx5_0:1,mlx5_1:1"}
    assert any("No RoCE v2 GID with an IPv4 address" in w for w in p.warnings)


def test_tcp_plans_ignore_roce(tmp_path):
    p = build_plan(hw(SYSROOTS / "rdma-roce-v2"), make_choices(framework="pytorch",
                                                               network="tcp"), CATALOG)
    assert dict(p.launch_env) == {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "=eth0",
                                  "GLOO_SOCKET_IFNAME": "eth0"}
    assert not [w for w in p.warnings if "GID" in w or "RoCE" in w]


def test_einval_fixture_makes_the_read_fail_for_real(tmp_path, einval):
    """The fixture's failure is the kernel's: the read fails with EINVAL, and detection's
    reader takes it as unreadable (None), not as a crash."""
    root = rdma_machine(tmp_path)
    d = sysfs_port(root, "mlx5_0", layer="Ethernet", gids=(("", EMPTY_GID),))
    with pytest.raises(OSError) as exc:
        with open(d / "gid_attrs/types/0", "rb", buffering=0) as f:
            os.read(f.fileno(), 10)
    assert exc.value.errno == errno.EINVAL
    from hpcwizard.detect.base import Context

    assert Context(sysroot=str(root)).read_value(
        "sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types/0") is None
