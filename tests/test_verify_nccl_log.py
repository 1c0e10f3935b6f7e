"""verify's reading of the all-reduce's NCCL_DEBUG=INFO log (issue 17): IB or sockets, and
over IB whether NCCL's connections use GPUDirect RDMA, on excerpts of published logs
(tests/fixtures/logs/SOURCES.md names each one's thread); and what the transport check
reports for each: with GDR, without it (with the fix), without it by NCCL's own choice for
the PCIe distance, and over sockets."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from hpcwizard.verify import FAIL, PASS, transport_from_nccl_log
from hpcwizard.verify.cluster import check_nccl_transport
from hpcwizard.verify.nccl_log import NcclTransport, nccl_transport
from hpcwizard.verify.probes import Ran

LOGS = Path(__file__).parent / "fixtures" / "logs"
PUBLISHED = LOGS / "nccl-transport"


def read(name: str) -> str:
    return (PUBLISHED / name).read_text()


# --- the parser, on published logs ------------------------------------------------------------

@pytest.mark.parametrize("name, net, gdr", [
    ("ib-gdrdma_aks-rdma-infiniband-pr36.txt", "ib", True),    # NET/IB/0/GDRDMA
    ("ibext-gdrdma_nccl-1357.txt", "ib", True),                # the IB plugin: NET/IBext/1/GDRDMA
    ("ib-no-gdr_nccl-1412.txt", "ib", False),                  # NET/IB/3, no GDRDMA
    ("ibext-no-gdr_nccl-1814.txt", "ib", False),               # NET/IBext_v8/2
    ("ib-no-gdr-ring_nccl-mesh-plugin-56.txt", "ib", False),   # 2.24+: "... PXN 0 GDR 0"
    ("ring-2.5.7_nccl-392.txt", "ib", False),                  # old wording: "Ring 00 :"
    ("roce-hca-disabled_nccl-1537.txt", "ib", False),          # no connection, every HCA off
    ("ib-using_aks-rdma-infiniband-30.txt", "ib", None),       # IB, no connection line yet
    ("ibext-sharp_nccl-988.txt", "ib", None),
    ("socket_nccl-952.txt", "socket", None),                   # NET/Socket/0: GDR not asked
    ("socket-2.19.3_nccl-1267.txt", "socket", None),
    ("dmabuf-gpu-only_nccl-tests-245.txt", "", None),          # the GPU's DMA-BUF alone: nothing
])
def test_network_and_gdr_from_published_logs(name, net, gdr):
    found = nccl_transport(read(name))
    assert (found.net, found.gdr) == (net, gdr)


def test_the_old_answer_stays_for_its_callers():
    assert transport_from_nccl_log(read("ib-gdrdma_aks-rdma-infiniband-pr36.txt")) == "ib"
    assert transport_from_nccl_log(read("socket_nccl-952.txt")) == "tcp"
    assert transport_from_nccl_log((LOGS / "nccl-socket-fallback.log").read_text()) == "tcp"
    assert transport_from_nccl_log(read("dmabuf-gpu-only_nccl-tests-245.txt")) == ""


def test_a_host_without_gdr_is_named_even_when_the_other_has_it():
    """nccl-tests#152: nv_peer_mem was loaded on gpu32, not on gpu37."""
    found = nccl_transport(read("mixed-hosts_nccl-tests-152.txt"))
    assert found.gdr is False and found.hosts_without_gdr == ("gpu37",)


@pytest.mark.parametrize("ib, socket, host", [
    # 'Using network IB' on one host, 'Using network Socket' on the other
    ("ib-using_aks-rdma-infiniband-30.txt", "socket-2.19.3_nccl-1267.txt", "instance-8g-96c-4"),
    # the connection lines: NET/IB/0/GDRDMA on one host, NET/Socket/0 on the other
    ("ib-gdrdma_aks-rdma-infiniband-pr36.txt", "socket_nccl-952.txt", "<cluster_name>"),
])
def test_one_host_on_sockets_is_sockets_whatever_the_others_chose(ib, socket, host):
    """One container without /dev/infiniband: its NCCL chooses sockets while the others
    choose IB, and the job runs at the sockets' speed."""
    for log in (read(ib) + read(socket), read(socket) + read(ib)):
        found = nccl_transport(log)
        assert (found.net, found.socket_hosts) == ("socket", (host,))
        assert found.ib_hosts and host not in found.ib_hosts
        assert transport_from_nccl_log(log) == "tcp"
    assert nccl_transport(read(ib)).socket_hosts == ()
    assert nccl_transport(read(socket)).ib_hosts == ()


def test_hcas_their_gdr_state_and_the_version():
    found = nccl_transport(read("roce-hca-disabled_nccl-1537.txt"))
    assert found.hcas == ("mlx5_0:1/RoCE", "mlx5_1:1/RoCE")
    assert found.gdr_disabled_hcas == ("mlx5_0", "mlx5_1") and not found.gdr_enabled_hcas
    assert nccl_transport(read("socket-2.19.3_nccl-1267.txt")).version_tuple == (2, 19, 3)
    assert nccl_transport(read("dmabuf-gpu-only_nccl-tests-245.txt")).dmabuf_gpu


def test_the_2_27_wordings_and_the_plugins():
    """Lines built from NCCL 2.27.3's and the RDMA plugin's format strings: (PCI) after
    GDRDMA, a proxy rank '0(1)', a plugin name with spaces, the plugin's '(nvidia-peermem)
    enabled' and '(DMABUF) enabled', and the distance that keeps GDR off."""
    found = nccl_transport(read("format-strings_2.27.3.txt"))
    assert found.gdr is True and found.version == "2.27.3"
    assert found.hcas == ("mlx5_0:1/IB", "mlx5_10:1/IB")
    assert found.gdr_enabled_hcas == ("mlx5_0",) and found.too_far
    plugin_only = "\n".join(l for l in read("format-strings_2.27.3.txt").splitlines()
                            if "NCCL RDMA Plugin" in l)
    assert nccl_transport(plugin_only) == NcclTransport(net="ib", gdr=True, ib_hosts=("node2",))


def test_intra_node_lines_are_not_network_connections():
    p2p = ("n1:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
           "n1:1:2 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via SHM/direct/direct\n")
    assert nccl_transport(p2p) == NcclTransport()
    assert nccl_transport("n1:1:2 [0] NCCL INFO Using network IB\n" + p2p).gdr is None


# --- the check ---------------------------------------------------------------------------------

def check(log: str):
    ctx = SimpleNamespace(allreduce=(Ran(("torchrun",), 0, log), "nccl", "torchrun ..."))
    return check_nccl_transport(ctx)


def test_ib_with_gdr_passes_saying_so():
    c = check(read("ib-gdrdma_aks-rdma-infiniband-pr36.txt"))
    assert (c.status, c.detail) == (PASS, "NCCL chose IB with GPUDirect RDMA")
    assert not c.diagnoses


def test_ib_without_gdr_fails_with_the_fix():
    c = check(read("ib-no-gdr_nccl-1412.txt"))
    assert c.status == FAIL
    assert c.detail == "NCCL chose IB without GPUDirect RDMA: data goes through host memory"
    assert "nvidia-peermem" in c.explain and "DMA-BUF" in c.explain
    assert c.diagnoses[0].id == "nccl-gdr-disabled" and c.diagnoses[0].i18n["zh"]["fix"]
    # no HCA line in the log (NCCL_NET's): the topology may be the reason, and it says so
    assert "nvidia-smi topo -m" in c.explain


def test_the_hca_line_is_the_diagnosis_and_old_nccl_is_named():
    log = "NCCL version 2.20.5+cuda12.4\n" + read("roce-hca-disabled_nccl-1537.txt")
    c = check(log)
    assert c.status == FAIL
    assert c.diagnoses[0].id == "nccl-gdr-disabled"
    assert "GPU Direct RDMA Disabled for HCA 0 'mlx5_0'" in c.diagnoses[0].line
    assert ("NCCL 2.20.5 looks for a loaded peer-memory module only at "
            "/sys/kernel/mm/memory_peers/nv_mem/version, "
            "/sys/kernel/mm/memory_peers/nvidia-peermem/version; NCCL 2.23 and later look at "
            "/sys/kernel/mm/memory_peers/nv_mem/version, "
            "/sys/kernel/mm/memory_peers/nv_mem_nc/version, "
            "/sys/module/nvidia_peermem/version.") in c.explain
    # 2.22 looks at nv_mem_nc and no longer at nvidia-peermem (src/transport/net_ib.cc)
    v22 = check("NCCL version 2.22.3+cuda12.4\n" + read("roce-hca-disabled_nccl-1537.txt"))
    assert ("NCCL 2.22.3 looks for a loaded peer-memory module only at "
            "/sys/kernel/mm/memory_peers/nv_mem/version, "
            "/sys/kernel/mm/memory_peers/nv_mem_nc/version;") in v22.explain
    newer = check("NCCL version 2.23.4+cuda12.6\n" + read("roce-hca-disabled_nccl-1537.txt"))
    assert "memory_peers" not in newer.explain
    assert "nvidia-smi topo -m" not in newer.explain  # the HCA line said why


def test_one_host_without_gdr_is_named_in_the_failure():
    c = check(read("mixed-hosts_nccl-tests-152.txt"))
    assert c.status == FAIL and c.detail == (
        "NCCL chose IB without GPUDirect RDMA on gpu37: data goes through host memory")


def test_gdr_kept_off_for_the_pcie_distance_passes_with_the_reason():
    far = ("n1:1:2 [0] NCCL INFO Using network IB\n"
           "n1:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'\n"
           "n1:1:2 [0] NCCL INFO GPU Direct RDMA Disabled for GPU 0 / HCA 0 (distance 5 > 4)\n"
           "n1:1:3 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0\n")
    c = check(far)
    assert c.status == PASS and "too far apart on PCIe" in c.detail


def test_sockets_fail_as_before_and_nothing_of_gdr_is_said():
    c = check(read("socket_nccl-952.txt"))
    assert (c.status, c.detail) == (FAIL, "NCCL fell back to sockets (TCP)")
    assert "GPUDirect" not in c.detail + c.explain
    assert [d.id for d in c.diagnoses] == ["nccl-socket-fallback"]
    c = check(read("dmabuf-gpu-only_nccl-tests-245.txt"))
    assert (c.status, c.detail) == (FAIL, "the NCCL log does not say")


def test_ib_on_one_host_and_sockets_on_the_other_fails():
    c = check(read("ib-using_aks-rdma-infiniband-30.txt") + read("socket-2.19.3_nccl-1267.txt"))
    assert c.status == FAIL and c.detail.startswith("NCCL fell back to sockets (TCP)")
    c = check(read("ib-gdrdma_aks-rdma-infiniband-pr36.txt") + read("socket_nccl-952.txt"))
    assert c.status == FAIL and "GPUDirect" not in c.detail


def test_ib_with_no_connection_line_passes_without_a_gdr_claim():
    c = check(read("ib-using_aks-rdma-infiniband-30.txt"))
    assert (c.status, c.detail) == (PASS, "NCCL chose IB")
