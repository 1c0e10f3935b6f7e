"""detect() on fixture trees (tests/fixtures/sysroots): files only, no commands."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hpcwizard.detect import detect
from hpcwizard.detect.summary import format_summary
from hpcwizard.facts import Facts

SYSROOTS = Path(__file__).parent / "fixtures" / "sysroots"


def root(name: str) -> str:
    return str(SYSROOTS / name)


def copy_root(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    shutil.copytree(SYSROOTS / name, dst, symlinks=True)
    return dst


@pytest.mark.parametrize(
    "name, os_id, version, family, pm",
    [
        ("debian12", "debian", "12", "debian", "apt"),
        ("ubuntu2004", "ubuntu", "20.04", "debian", "apt"),
        ("ubuntu2204", "ubuntu", "22.04", "debian", "apt"),
        ("ubuntu2404", "ubuntu", "24.04", "debian", "apt"),
        ("rocky9", "rocky", "9.4", "rhel", "dnf"),
        ("centos7", "centos", "7", "rhel", "yum"),
        ("openeuler2203", "openeuler", "22.03", "rhel", "dnf"),
        ("kylin10", "kylin", "V10", "rhel", "dnf"),
        ("uos20", "uos", "20", "debian", "apt"),
        ("deepin20", "deepin", "20.9", "debian", "apt"),
        ("tencentos4", "tencentos", "4.2", "rhel", "dnf"),
        ("amzn2023", "amzn", "2023", "rhel", "dnf"),
        ("opensuse156", "opensuse-leap", "15.6", "suse", "zypper"),
        ("alpine320", "alpine", "3.20.3", "alpine", "apk"),
        ("unknown-os", "frobnix", "1.0", "unknown", ""),
    ],
)
def test_os_family_and_package_manager(name, os_id, version, family, pm):
    f = detect(root(name))
    assert (f.os.id, f.os.version_id, f.os.family, f.os.package_manager) == (os_id, version, family, pm)


def test_openeuler_has_no_id_like_yet_is_rhel_with_dnf():
    f = detect(root("openeuler2203"))
    assert f.os.id_like == ()
    assert (f.os.family, f.os.package_manager) == ("rhel", "dnf")
    assert f.os.pretty_name == "openEuler 22.03 (LTS-SP3)"


def test_rocky_os_release_read_from_usr_lib():
    assert not (SYSROOTS / "rocky9/etc/os-release").exists()
    f = detect(root("rocky9"))
    assert f.os.id_like == ("rhel", "centos", "fedora")


def test_unknown_id_without_package_manager_is_unknown_with_a_note():
    f = detect(root("unknown-os"))
    assert f.os.family == "unknown"
    assert any("frobnix" in n and "not one hpcwizard knows" in n for n in f.notes)


def test_unknown_id_with_dnf_is_rhel(tmp_path):
    r = copy_root("unknown-os", tmp_path)
    (r / "usr/bin").mkdir(parents=True)
    (r / "usr/bin/dnf").touch()
    f = detect(str(r))
    assert (f.os.family, f.os.package_manager) == ("rhel", "dnf")


def test_no_os_release_at_all(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/apt-get").touch()
    f = detect(str(tmp_path))
    assert (f.os.id, f.os.family, f.os.package_manager) == ("unknown", "debian", "apt")
    assert any("os-release" in n for n in f.notes)


def test_foreign_sysroot_skips_commands_and_says_so():
    f = detect(root("debian12"))
    assert any(n.startswith("Commands were not run") for n in f.notes)
    assert f.software.ssh_version == ""  # not guessed from this machine's ssh
    assert f.software.packages is None
    assert f.user.sudo in ("root", "unknown")


def test_debian12_machine_files():
    f = detect(root("debian12"))
    assert f.hostname == "node-a"
    assert f.cpus == 4
    assert f.memory_mib == 16000
    assert (f.runtime.container, f.runtime.pid1, f.runtime.systemd) == ("docker", "systemd", True)
    assert f.runtime.jupyter is False
    assert f.software.sshd_path == "/usr/sbin/sshd"
    assert f.software.ssh_port_listening is True
    ifaces = {i.name: i for i in f.ifaces}
    assert ifaces["eth0"].state == "UP" and ifaces["eth0"].mac == "00:11:22:33:44:55"
    assert ifaces["eth0"].addresses == ("fe80::211:22ff:fe33:4455/64",)
    assert ifaces["lo"].addresses == ("::1/128",)


def test_ssh_port_is_a_parameter():
    assert detect(root("debian12"), ssh_port=2200).software.ssh_port_listening is False


def test_port_unknown_without_proc_net(tmp_path):
    f = detect(root("centos7"))
    assert f.software.ssh_port_listening is None
    assert any("/proc/net/tcp" in n for n in f.notes)


def test_runtime_podman_kubernetes_lxc_jupyter(tmp_path):
    f = detect(root("ubuntu2204"))
    assert (f.runtime.container, f.runtime.pid1) == ("podman", "bash")
    f = detect(root("ubuntu2004"))
    assert (f.runtime.container, f.runtime.pid1) == ("kubernetes", "tini")
    r = copy_root("centos7", tmp_path)
    (r / "proc/1").mkdir(parents=True)
    (r / "proc/1/environ").write_bytes(b"container=lxc\0JPY_PARENT_PID=12\0")
    (r / "proc/1/cgroup").write_text("0::/\n")
    f = detect(str(r))
    assert f.runtime.container == "lxc" and f.runtime.jupyter is True
    # cgroup readable, no sign of a container: "none"
    (r / "proc/1/environ").write_bytes(b"HOME=/\0")
    assert detect(str(r)).runtime.container == "none"


def test_runtime_unknown_without_proc():
    f = detect(root("centos7"))
    assert f.runtime.container == "unknown"
    assert f.runtime.pid1 == ""


# --- RDMA trees --------------------------------------------------------------------------

def test_rdma_hdr_infiniband_active():
    f = detect(root("rdma-ib-hdr"))
    (h,) = f.hcas
    assert (h.name, h.driver, h.vendor_id, h.fw_version) == ("mlx5_0", "mlx5_core", "0x15b3", "20.39.1002")
    assert not h.software
    (p,) = f.active_ports
    assert (p.name, p.state, p.phys_state, p.rate_gbps, p.link_layer, p.netdev) == (
        "mlx5_0:1", "ACTIVE", "LinkUp", 200.0, "InfiniBand", "ib0")
    assert f.rdma.uverbs == ("/dev/infiniband/uverbs0",)
    assert f.rdma.peermem is True
    assert f.warnings == ()


def test_rdma_roce_port():
    f = detect(root("rdma-roce"))
    (p,) = f.active_ports
    assert (p.link_layer, p.rate_gbps, p.netdev) == ("Ethernet", 100.0, "ens1f0np0")
    assert f.rdma.peermem is False
    assert f.warnings == ()


def test_rdma_down_port():
    f = detect(root("rdma-down"))
    assert f.active_ports == ()
    (p,) = f.hcas[0].ports
    assert (p.state, p.phys_state, p.rate_gbps) == ("DOWN", "Polling", 10.0)
    assert any("mlx5_0:1 is DOWN" in n for n in f.notes)
    assert f.warnings == ()


def test_no_infiniband_at_all():
    f = detect(root("debian12"))
    assert f.hcas == () and f.active_ports == ()
    assert f.rdma.uverbs == ()
    assert f.warnings == ()


def test_rxe_software_device():
    f = detect(root("rdma-rxe"))
    (h,) = f.hcas
    assert h.software and h.driver == "rdma_rxe"
    assert h.ports[0].netdev == "eth0" and h.ports[0].active
    assert f.active_ports == ()  # software ports are not offered as RDMA
    assert len(f.warnings) == 1
    assert "rxe0" in f.warnings[0] and "not hardware: no speed-up over TCP" in f.warnings[0]


def test_active_ib_without_uverbs_warns(tmp_path):
    r = copy_root("rdma-ib-hdr", tmp_path)
    shutil.rmtree(r / "dev")
    f = detect(str(r))
    assert f.rdma.uverbs == ()
    assert len(f.active_ports) == 1
    (w,) = f.warnings
    assert "mlx5_0:1" in w and "the container was started without the InfiniBand devices" in w


def test_dual_port_netdev_by_dev_port(tmp_path):
    r = copy_root("rdma-roce", tmp_path)
    base = r / "sys/class/infiniband/mlx5_0"
    shutil.rmtree(base / "ports/1/gid_attrs")
    (base / "device/net/ens1f1np1").mkdir(parents=True)
    (base / "device/net/ens1f1np1/dev_port").write_text("1\n")
    p2 = base / "ports/2"
    p2.mkdir()
    for k, v in {"state": "1: DOWN", "phys_state": "3: Disabled", "rate": "100 Gb/sec (2X HDR)",
                 "link_layer": "Ethernet"}.items():
        (p2 / k).write_text(v + "\n")
    f = detect(str(r))
    ports = f.hcas[0].ports
    assert [(p.number, p.netdev) for p in ports] == [(1, "ens1f0np0"), (2, "ens1f1np1")]


def test_gpus_from_proc_without_commands(tmp_path):
    r = copy_root("ubuntu2204", tmp_path)
    nv = r / "proc/driver/nvidia"
    (nv / "gpus/0000:00:09.0").mkdir(parents=True)  # made here: a colon in a name is unkind to git
    (nv / "gpus/0000:00:09.0/information").write_text(
        "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\nDevice Minor: \t 0\n")
    (nv / "version").write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build\n")
    f = detect(str(r))
    (g,) = f.gpus
    assert (g.index, g.name, g.driver, g.memory_mib) == (0, "NVIDIA H100 80GB HBM3", "550.54.15", None)
    assert any("/proc/driver/nvidia" in n for n in f.notes)


# --- summary and serialisation -------------------------------------------------------------

def test_summary_of_rdma_machine_is_aligned_and_complete():
    f = detect(root("rdma-ib-hdr"))
    text = format_summary(f)
    for needle in ("Ubuntu 22.04.4 LTS", "mlx5_0:1", "ACTIVE", "200 Gb/s", "InfiniBand", "ib0",
                   "/dev/infiniband/uverbs0", "GPUDirect      nvidia_peermem", "port 2222", "Notes"):
        assert needle in text, needle
    # Section rows: the value column starts at the same place in every labelled row.
    rows = [line for line in text.splitlines() if line.startswith("  ") and not line.startswith("  -")]
    starts = {len(line) - len(line[2:].split("  ", 1)[1].lstrip()) for line in rows if "  " in line[2:]}
    assert starts == {17}  # 2 indent + 14 label + 1 space
    assert "MPI            not checked (commands were not run)" in text


def test_summary_lists_warnings_before_notes(tmp_path):
    r = copy_root("rdma-ib-hdr", tmp_path)
    shutil.rmtree(r / "dev")
    text = format_summary(detect(str(r)))
    assert text.index("Warnings") < text.index("Notes")
    assert "  ! RDMA port mlx5_0:1 is active" in text


def test_facts_survive_a_json_round_trip():
    import json

    f = detect(root("rdma-roce"))
    assert Facts.from_dict(json.loads(json.dumps(f.to_dict()))) == f
