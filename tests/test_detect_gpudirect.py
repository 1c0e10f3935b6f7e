"""Issue 17, GPUDirect RDMA as NCCL finds it (src/transport/net_ib.cc): a peer-memory module's
version file (which ones: by NCCL version, hpcwizard.peer_memory), else DMA-BUF (Linux 5.12 or later and the
NVIDIA driver's open kernel module, 515 or later). With GPUs and active RDMA ports and none of
them: a detection warning with the host's fix, shown in PyTorch-over-InfiniBand plans only.

proc_driver_nvidia_version.txt is the open kernel module's file; the proprietary one's
(proc_driver_nvidia_version_proprietary.txt) is the text of driver 535.183.01 as published
by its users ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12
19:39:15 UTC 2024")."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard import peer_memory
from hpcwizard.detect import detect, rdma
from hpcwizard.i18n import set_language
from hpcwizard.plan import build_plan

from _ib_fixtures import make_facts, rdma_machine, sysfs_port, with_

CATALOG = load_catalog()
OUT = Path(__file__).parent / "fixtures" / "outputs"
OPEN = (OUT / "proc_driver_nvidia_version.txt").read_text()
PROPRIETARY = (OUT / "proc_driver_nvidia_version_proprietary.txt").read_text()


def machine(root: Path, *, gpus: bool = True, ports: bool = True, driver: str = PROPRIETARY,
            kernel: str = "6.5.0-41-generic", files: tuple = ()) -> Path:
    rdma_machine(root)
    if ports:
        sysfs_port(root, "mlx5_0", netdev="ib0")
    if gpus:
        (root / "dev/nvidia0").write_text("")
        bus = root / "proc/driver/nvidia/gpus/0000:17:00.0"  # a colon: made here, not in git
        bus.mkdir(parents=True)
        (bus / "information").write_text("Model: \t\t NVIDIA H100 80GB HBM3\nDevice Minor: \t 0\n")
    if driver:
        (root / "proc/driver/nvidia").mkdir(parents=True, exist_ok=True)
        (root / "proc/driver/nvidia/version").write_text(driver)
    if kernel:
        (root / "proc/sys/kernel").mkdir(parents=True)
        (root / "proc/sys/kernel/osrelease").write_text(kernel + "\n")
    for rel in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("1.2\n")
    return root


def gdr_warnings(facts):
    return [w for w in facts.warnings if w.code == "rdma.no-gpudirect"]


@pytest.mark.parametrize("rel,mechanism", [
    ("sys/kernel/mm/memory_peers/nv_mem/version", "nv_mem"),
    ("sys/kernel/mm/memory_peers/nvidia-peermem/version", "nvidia-peermem"),  # NCCL < 2.22
    ("sys/kernel/mm/memory_peers/nv_mem_nc/version", "nv_mem_nc"),
    ("sys/module/nvidia_peermem/version", "nvidia_peermem"),
])
def test_each_peer_memory_path_is_gpudirect(tmp_path, rel, mechanism):
    f = detect(str(machine(tmp_path, files=(rel,))))
    assert (f.rdma.gpudirect, f.rdma.peermem) == (mechanism, True)
    assert gdr_warnings(f) == []


def test_nvidia_peermem_without_its_version_file_is_not_what_nccl_counts(tmp_path):
    """NCCL tests /sys/module/nvidia_peermem/version, not the directory."""
    f = detect(str(machine(tmp_path, files=("sys/module/nvidia_peermem/refcnt",))))
    assert (f.rdma.gpudirect, f.rdma.peermem) == ("", False)
    assert len(gdr_warnings(f)) == 1


def test_dmabuf_with_the_open_kernel_module_on_a_new_kernel(tmp_path):
    f = detect(str(machine(tmp_path, driver=OPEN, kernel="5.15.0-91-generic")))
    assert (f.rdma.gpudirect, f.rdma.peermem) == ("dmabuf", False)
    assert gdr_warnings(f) == []


@pytest.mark.parametrize("driver,kernel,seen", [
    (OPEN, "5.4.0-150-generic", "Linux 5.4.0-150-generic, driver 550.54.15 (open kernel module)"),
    (PROPRIETARY, "6.5.0-41-generic",
     "Linux 6.5.0-41-generic, driver 535.183.01 (proprietary kernel module)"),
    ("", "", "Linux ?, driver ? (kernel module unknown)"),
])
def test_no_gpudirect_warns_with_what_was_seen_and_the_hosts_fix(tmp_path, driver, kernel, seen):
    f = detect(str(machine(tmp_path, driver=driver, kernel=kernel)))
    assert f.rdma.gpudirect == ""
    (w,) = gdr_warnings(f)
    assert "active RDMA ports mlx5_0:1" in w and f"(here: {seen})" in w
    assert "modprobe nvidia-peermem on the host" in w and "open kernel module for DMA-BUF" in w
    assert "not the container's" in w


def test_no_warning_without_gpus_or_without_active_ports(tmp_path):
    assert gdr_warnings(detect(str(machine(tmp_path / "a", gpus=False)))) == []
    assert gdr_warnings(detect(str(machine(tmp_path / "b", ports=False)))) == []
    down = machine(tmp_path / "c", ports=False)
    sysfs_port(down, "mlx5_0", state="1: DOWN")
    assert gdr_warnings(detect(str(down))) == []


@pytest.mark.parametrize("dmabuf,ok", [
    (rdma.DmaBuf("5.12.0", "515.43.04", True), True),
    (rdma.DmaBuf("5.11.22", "550.54.15", True), False),     # kernel too old
    (rdma.DmaBuf("6.8.0-45-generic", "510.47.03", True), False),  # driver before CUDA 11.7
    (rdma.DmaBuf("6.8.0-45-generic", "550.54.15", False), False),  # proprietary module
    (rdma.DmaBuf("", "550.54.15", True), False),             # kernel unknown
    (rdma.DmaBuf("6.8.0", "", True), False),                 # driver unknown
    (rdma.DmaBuf("10.1.0", "1000.1", True), True),           # numbers, not text
])
def test_dmabuf_rule(dmabuf, ok):
    assert dmabuf.supported is ok


def test_parse_nvidia_version_file():
    assert rdma.parse_nvidia_version_file(OPEN) == ("550.54.15", True)
    assert rdma.parse_nvidia_version_file(PROPRIETARY) == ("535.183.01", False)
    assert rdma.parse_nvidia_version_file("") == ("", None)


def test_the_warning_is_in_pytorch_ib_plans_only(tmp_path):
    f = detect(str(machine(tmp_path)))
    facts = with_(make_facts("debian12"), hcas=f.hcas, rdma=f.rdma, gpus=f.gpus,
                  warnings=f.warnings)
    assert f.gpus, "the tree's GPU must be seen by detection for this test to mean anything"

    def has(fw, net):
        p = build_plan(facts, make_choices(framework=fw, network=net), CATALOG)
        return any("no GPUDirect RDMA" in w for w in p.warnings)

    assert has("pytorch", "ib")
    assert not has("pytorch", "tcp") and not has("mpi", "ib") and not has("mpi", "tcp")


def test_the_warning_reads_in_chinese_with_its_arguments_kept(tmp_path):
    """shown() translates the template and the kind of module, and keeps the versions."""
    (w,) = gdr_warnings(detect(str(machine(tmp_path))))
    try:
        set_language("zh")
        text = w.shown()
    finally:
        set_language("en")
    assert "535.183.01" in text and "6.5.0-41-generic" in text and "mlx5_0:1" in text


MEMORY_PEERS = "sys/kernel/mm/memory_peers"
NV_MEM, NV_MEM_NC = f"{MEMORY_PEERS}/nv_mem/version", f"{MEMORY_PEERS}/nv_mem_nc/version"
OFED_PEERMEM = f"{MEMORY_PEERS}/nvidia-peermem/version"
MODULE_PEERMEM = "sys/module/nvidia_peermem/version"


# The version files NCCL's ncclIbGdrSupport tests, read at each tag of NVIDIA/nccl
# (src/transport/net_ib.cc; src/transport/net_ib/gdr.cc at v2.29.2-1).
@pytest.mark.parametrize("nccl,files", [
    ((2, 9, 6), (NV_MEM,)),
    ((2, 18, 1), (NV_MEM, OFED_PEERMEM)),
    ((2, 21, 5), (NV_MEM, OFED_PEERMEM)),
    ((2, 22, 3), (NV_MEM, NV_MEM_NC)),
    ((2, 23, 4), (NV_MEM, NV_MEM_NC, MODULE_PEERMEM)),
    ((2, 29, 2), (NV_MEM, NV_MEM_NC, MODULE_PEERMEM)),
    ((), ()),  # the NCCL is unknown: no file claimed
])
def test_the_files_each_nccl_looks_for(nccl, files):
    assert tuple(peer_memory.BY_NAME[n].path for n in peer_memory.looks_for(nccl)) == files


@pytest.mark.parametrize("present,since", [
    (("nvidia_peermem",), "2.23"),
    (("nv_mem_nc",), "2.22"),
    (("nvidia-peermem", "nvidia_peermem"), "2.23"),
    (("nvidia-peermem",), ""),  # NCCL 2.22 stopped looking there
])
def test_the_first_nccl_from_which_every_release_sees_a_module(present, since):
    assert peer_memory.seen_since(present) == since


def test_detect_records_every_peer_memory_file_present(tmp_path):
    """With MLNX_OFED, one nvidia-peermem shows in two places: NCCL 2.21 finds one of them,
    2.23 the other; the first alone would not tell either."""
    f = detect(str(machine(tmp_path, files=(OFED_PEERMEM, MODULE_PEERMEM))))
    assert f.rdma.peer_memory == ("nvidia-peermem", "nvidia_peermem")
    assert f.rdma.gpudirect == "nvidia-peermem"


WARNING = "which this NCCL does not check: it will keep GPUDirect RDMA off."


def test_facts_recorded_before_peer_memory_are_read_by_their_first_file(tmp_path):
    f = detect(str(machine(tmp_path, files=(MODULE_PEERMEM,))))
    old = with_(f, rdma=dataclasses.replace(f.rdma, peer_memory=()),
                software=dataclasses.replace(f.software, nccl_version="2.22.3"))
    set_language("en")
    assert any(WARNING in w for w in build_plan(
        old, make_choices(framework="pytorch", network="ib"), CATALOG).warnings)


@pytest.mark.parametrize("files,nccl,advice", [
    ((MODULE_PEERMEM,), "2.20.5", "Use NCCL 2.23 or later"),
    ((MODULE_PEERMEM,), "2.21.5", "Use NCCL 2.23 or later"),
    ((MODULE_PEERMEM,), "2.22.3", "Use NCCL 2.23 or later"),
    ((MODULE_PEERMEM,), "2.23.4", None),
    ((MODULE_PEERMEM,), "2.27.7", None),
    ((NV_MEM_NC,), "2.21.5", "Use NCCL 2.22 or later"),
    ((NV_MEM_NC,), "2.22.3", None),  # 2.22 added nv_mem_nc
    ((OFED_PEERMEM,), "2.21.5", None),
    ((OFED_PEERMEM,), "2.22.3", ""),  # 2.22 dropped it, and no later NCCL looks there
    ((OFED_PEERMEM,), "2.23.4", ""),
    ((OFED_PEERMEM, MODULE_PEERMEM), "2.22.3", "Use NCCL 2.23 or later"),
    ((OFED_PEERMEM, MODULE_PEERMEM), "2.23.4", None),
    ((OFED_PEERMEM, MODULE_PEERMEM), "2.21.5", None),
    ((NV_MEM,), "2.9.6", None),
    ((NV_MEM,), "2.23.4", None),
    ((MODULE_PEERMEM,), "", None),  # the NCCL is unknown: nothing claimed
])
def test_the_plan_says_when_this_nccl_cannot_see_the_peer_memory_module(tmp_path, files, nccl,
                                                                       advice):
    f = detect(str(machine(tmp_path, files=files)))
    f = with_(f, software=dataclasses.replace(f.software, nccl_version=nccl))
    set_language("en")
    text = "\n".join(build_plan(f, make_choices(framework="pytorch", network="ib"),
                                CATALOG).warnings)
    assert (WARNING in text) == (advice is not None)
    if advice is not None:
        looked = ", ".join("/" + peer_memory.BY_NAME[n].path
                           for n in peer_memory.looks_for(tuple(map(int, nccl.split(".")))))
        assert f"NCCL {nccl} looks for the GPUDirect RDMA peer-memory module at {looked};" in text
        assert "the one loaded here is at /" + files[0] in text
        assert ("Use NCCL" in text) == bool(advice) and advice in text
    mpi = build_plan(f, make_choices(framework="mpi", network="ib"), CATALOG)
    assert not any(WARNING in w for w in mpi.warnings)  # no NCCL there
