"""Issue 17, GPUDirect RDMA as NCCL finds it (src/transport/net_ib.cc): a peer-memory module's
version file (nv_mem, nv_mem_nc, nvidia_peermem), else DMA-BUF (Linux 5.12 or later and the
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
    ("sys/kernel/mm/memory_peers/nvidia-peermem/version", "nvidia-peermem"),  # NCCL < 2.23
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


@pytest.mark.parametrize("rel,nccl,warned", [
    # NCCL before 2.23 looks under /sys/kernel/mm/memory_peers only (nv_mem, nvidia-peermem)
    ("sys/module/nvidia_peermem/version", "2.20.5", True),
    ("sys/kernel/mm/memory_peers/nv_mem_nc/version", "2.22.3", True),
    ("sys/module/nvidia_peermem/version", "2.23.4", False),
    ("sys/kernel/mm/memory_peers/nvidia-peermem/version", "2.20.5", False),
    ("sys/kernel/mm/memory_peers/nv_mem/version", "2.18.1", False),
    ("sys/module/nvidia_peermem/version", "", False),  # the NCCL is unknown: nothing claimed
])
def test_the_plan_says_when_this_nccl_cannot_see_the_peer_memory_module(tmp_path, rel, nccl,
                                                                       warned):
    f = detect(str(machine(tmp_path, files=(rel,))))
    f = with_(f, software=dataclasses.replace(f.software, nccl_version=nccl))
    set_language("en")
    text = "\n".join(build_plan(f, make_choices(framework="pytorch", network="ib"),
                                CATALOG).warnings)
    assert ("looks for the GPUDirect RDMA peer-memory module only under" in text) == warned
    if warned:
        assert f"NCCL {nccl} " in text and f"found as {f.rdma.gpudirect}" in text
    mpi = build_plan(f, make_choices(framework="mpi", network="ib"), CATALOG)
    assert not any("peer-memory module only under" in w for w in mpi.warnings)  # no NCCL there
