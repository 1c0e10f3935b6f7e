"""Parsers of hpcwizard.detect, each on recorded outputs (tests/fixtures/outputs)."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from hpcwizard.detect import gpu, hardware, net, os_release, rdma, runtime, software, user
from hpcwizard.detect.listening import from_proc_net_tcp
from hpcwizard.detect.run import CommandTimeout, Result, run
from hpcwizard.facts import Hca, Port, Rdma, Software

FIX = Path(__file__).parent / "fixtures"
OUT = FIX / "outputs"
SYSROOTS = FIX / "sysroots"


def out(name: str) -> str:
    return (OUT / name).read_text()


# --- os-release --------------------------------------------------------------------------

def test_parse_os_release_quotes_comments_and_junk():
    text = '# comment\nID="rocky"\nID_LIKE="rhel centos fedora"\nNAME=\'Rocky Linux\'\nnot a line\nVERSION_ID=9.4\nBAD="unbalanced\n'
    f = os_release.parse_os_release(text)
    assert f["ID"] == "rocky"
    assert f["ID_LIKE"] == "rhel centos fedora"
    assert f["NAME"] == "Rocky Linux"
    assert f["VERSION_ID"] == "9.4"
    assert f["BAD"] == "unbalanced"
    assert "not a line" not in f


def test_parse_os_release_on_fixture_openeuler_has_no_id_like():
    f = os_release.parse_os_release((SYSROOTS / "openeuler2203/etc/os-release").read_text())
    assert f["ID"] == "openEuler"
    assert "ID_LIKE" not in f


@pytest.mark.parametrize(
    "os_id, id_like, pms, name, family",
    [
        ("debian", (), (), "", "debian"),
        ("ubuntu", ("debian",), (), "", "debian"),
        ("Deepin", (), (), "", "debian"),
        ("UOS", (), (), "UnionTech OS Server 20", "debian"),
        ("uos", (), ("dnf",), "UnionTech OS Server 20", "rhel"),  # the RPM-based edition
        ("openEuler", (), (), "", "rhel"),
        ("kylin", (), (), "Kylin Linux Advanced Server", "rhel"),
        ("kylin", (), ("apt",), "Kylin", "debian"),
        ("kylin", ("ubuntu",), (), "Kylin", "debian"),
        ("tencentos", ("tencentos",), (), "", "rhel"),
        ("opencloudos", (), (), "", "rhel"),
        ("anolis", (), (), "", "rhel"),
        ("amzn", ("fedora",), (), "", "rhel"),
        ("ol", ("fedora",), (), "", "rhel"),
        ("opensuse-leap", ("suse", "opensuse"), (), "", "suse"),
        ("sles", (), (), "", "suse"),
        ("alpine", (), (), "", "alpine"),
        ("myspin", ("centos", "rhel"), (), "", "rhel"),  # unknown ID, known ID_LIKE
        ("frobnix", (), ("dnf",), "", "rhel"),  # unknown everything: package manager decides
        ("frobnix", (), ("apt",), "", "debian"),
        ("frobnix", (), (), "", "unknown"),
    ],
)
def test_family_of(os_id, id_like, pms, name, family):
    assert os_release.family_of(os_id, id_like, pms, name) == family


@pytest.mark.parametrize(
    "family, pms, os_id, version, expected",
    [
        ("rhel", ("yum",), "centos", "7", "yum"),
        ("rhel", (), "centos", "7", "yum"),  # nothing to look at: go by release
        ("rhel", (), "rhel", "9.4", "dnf"),
        ("rhel", ("dnf", "yum"), "rocky", "9.4", "dnf"),
        ("rhel", (), "amzn", "2", "yum"),
        ("rhel", (), "amzn", "2023", "dnf"),
        ("rhel", (), "kylin", "V10", "dnf"),
        ("debian", (), "debian", "12", "apt"),
        ("suse", (), "sles", "15", "zypper"),
        ("alpine", (), "alpine", "3.20", "apk"),
        ("unknown", (), "frobnix", "1", ""),
    ],
)
def test_package_manager_of(family, pms, os_id, version, expected):
    assert os_release.package_manager_of(family, pms, os_id, version) == expected


# --- ssh / sshd / port -------------------------------------------------------------------

def test_parse_ssh_version():
    assert software.parse_ssh_version(out("ssh-V_debian12.txt")) == "OpenSSH_9.2p1"
    assert software.parse_ssh_version(out("ssh-V_ubuntu2204.txt")) == "OpenSSH_8.9p1"
    assert software.parse_ssh_version("ssh: command not found") == ""


def test_parse_sshd_version_old_usage_and_new():
    assert software.parse_sshd_version(out("sshd-V_ubuntu2204.txt")) == "OpenSSH_8.9p1"
    assert software.parse_sshd_version(out("sshd-V_ubuntu2404.txt")) == "OpenSSH_9.6p1"


def listens(text: str, port: int) -> bool:
    return port in from_proc_net_tcp(text).values()


def test_proc_net_tcp_listen_state_and_port():
    tcp = (SYSROOTS / "debian12/proc/net/tcp").read_text()
    assert listens(tcp, 2222) and listens(tcp, 631)
    assert not listens(tcp, 2200)


def test_proc_net_tcp_ignores_established_and_remote_ports():
    text = out("proc_net_tcp_established2222.txt")
    assert not listens(text, 2222)  # ESTABLISHED (01), and a remote 2222
    assert listens(text, 22)


def test_proc_net_tcp6():
    assert listens(out("proc_net_tcp6_listen2222.txt"), 2222)


# --- MPI / UCX ---------------------------------------------------------------------------

@pytest.mark.parametrize(
    "fixture, flavour, version",
    [
        ("mpirun_openmpi-4.1.4.txt", "openmpi", "4.1.4"),
        ("mpirun_mpich-4.0.txt", "mpich", "4.0"),
        ("mpirun_intelmpi-2021.10.txt", "intelmpi", "2021.10"),
    ],
)
def test_parse_mpirun_version(fixture, flavour, version):
    assert software.parse_mpirun_version(out(fixture)) == (flavour, version)


def test_parse_mpirun_version_unrecognised():
    assert software.parse_mpirun_version("mpirun: some other launcher 1.0") == ("", "")


def test_parse_ompi_info_with_ucx():
    info = software.parse_ompi_info(out("ompi_info_4.1.4_ucx.txt"))
    assert info["version"] == "4.1.4"
    assert info["pml"] == ("cm", "monitoring", "ob1", "ucx", "v")
    assert info["btl"] == ("ofi", "openib", "self", "tcp", "vader", "uct")
    assert Software(ompi_pml=info["pml"]).ompi_has_ucx


def test_parse_ompi_info_without_ucx_ignores_osc_ucx():
    info = software.parse_ompi_info(out("ompi_info_4.1.2_noucx.txt"))
    assert info["pml"] == ("cm", "ob1")
    assert info["btl"] == ("self", "tcp", "vader")
    assert not Software(ompi_pml=info["pml"]).ompi_has_ucx


def test_parse_ucx_version_both_formats():
    assert software.parse_ucx_version(out("ucx_info-v_1.13.1.txt")) == "1.13.1"
    assert software.parse_ucx_version(out("ucx_info-v_1.12.1.txt")) == "1.12.1"
    assert software.parse_ucx_version("# Version 1.10.0\n") == "1.10.0"
    assert software.parse_ucx_version("garbage") == ""


def test_parse_ucx_transports_in_order_without_repeats():
    t = software.parse_ucx_transports(out("ucx_info-d.txt"))
    assert t == ("posix", "sysv", "self", "tcp", "rc_verbs", "rc_mlx5", "dc_mlx5", "ud_verbs", "ud_mlx5")


# --- torch / packages --------------------------------------------------------------------

def test_parse_torch_probe():
    assert software.parse_torch_probe(out("torch_probe_cuda.txt")) == {
        "torch": "2.3.1+cu121", "cuda": "12.1", "nccl": "2.20.5"}
    assert software.parse_torch_probe(out("torch_probe_cpu.txt"))["cuda"] == ""
    missing = software.parse_torch_probe(out("torch_probe_missing.txt"))
    assert missing["torch"] == "" and "No module named" in missing["error"]
    with pytest.raises(ValueError):
        software.parse_torch_probe("Traceback (most recent call last):\n")


FAKE_VERSION_PY = """
from typing import Optional
__version__ = '2.4.0+cu124'
debug = False
cuda: Optional[str] = '12.4'
"""


def _fake_site(tmp_path, version_py, nccl=None, importable=True):
    """A site directory holding a stand-in torch package (whose __init__ raises, to prove the
    probe never imports it) and optionally an nvidia-nccl distribution's metadata."""
    if version_py is not None:
        pkg = tmp_path / "torch"
        pkg.mkdir()
        (pkg / "__init__.py").write_text("raise ImportError('the probe must not import torch')")
        (pkg / "version.py").write_text(version_py)
    if nccl:
        dist = tmp_path / f"nvidia_nccl_cu12-{nccl}.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: nvidia-nccl-cu12\nVersion: {nccl}\n")
    return tmp_path


@pytest.mark.parametrize(
    "version_py, nccl, expected",
    [
        (FAKE_VERSION_PY, "2.21.5", {"torch": "2.4.0+cu124", "cuda": "12.4", "nccl": "2.21.5"}),
        (FAKE_VERSION_PY.replace("'12.4'", "None"), None,
         {"torch": "2.4.0+cu124", "cuda": "", "nccl": ""}),
        (None, None, {"torch": "", "cuda": "", "nccl": "",
                      "error": "ModuleNotFoundError: No module named 'torch'"}),
    ],
)
def test_torch_script_in_a_subprocess(tmp_path, version_py, nccl, expected):
    import subprocess
    import sys

    site = _fake_site(tmp_path, version_py, nccl)
    # -S: no site-packages, so only the fake site (first on sys.path) can answer.
    res = subprocess.run([sys.executable, "-S", "-c",
                          f"import sys; sys.path.insert(0, {str(site)!r}); exec({software.TORCH_SCRIPT!r})"],
                         capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert software.parse_torch_probe(res.stdout) == expected, res.stderr
    assert "torch" not in sys.modules  # hpcwizard's own process never imports it


def test_parse_dpkg_query_keeps_only_installed():
    pk = software.parse_dpkg_query(out("dpkg-query.txt"))
    assert pk == {"openssh-client": "1:9.2p1-2+deb12u3", "openmpi-bin": "4.1.4-3+b1",
                  "libucx0": "1.13.1-1"}


def test_parse_rpm_qa():
    pk = software.parse_rpm_qa(out("rpm-qa.txt"))
    assert pk["openmpi"] == "4.1.1-7.el9"
    assert pk["ucx"] == "1.15.0-2.el9"
    assert len(pk) == 4


# --- GPUs --------------------------------------------------------------------------------

def test_parse_nvidia_smi_csv_two_gpus():
    gpus = gpu.parse_nvidia_smi_csv(out("nvidia-smi_query_2xh100.csv"))
    assert [g.index for g in gpus] == [0, 1]
    assert gpus[1].name == "NVIDIA H100 80GB HBM3"
    assert gpus[0].memory_mib == 81559
    assert gpus[0].driver == "590.48.01"


def test_parse_nvidia_smi_csv_not_available_values_and_units():
    gpus = gpu.parse_nvidia_smi_csv("0, NVIDIA A100-SXM4-40GB, [N/A], [N/A]\n1, Tesla T4, 15360 MiB, 535.1\n")
    assert gpus[0].memory_mib is None and gpus[0].driver == ""
    assert gpus[1].memory_mib == 15360


def test_parse_nvidia_smi_csv_failure_text_gives_nothing():
    assert gpu.parse_nvidia_smi_csv(out("nvidia-smi_failed.txt")) == ()


def test_parse_nvidia_smi_cuda_and_driver_from_header():
    table = out("nvidia-smi_table_2xh100.txt")
    assert gpu.parse_nvidia_smi_cuda(table) == "13.1"
    assert gpu.parse_nvidia_smi_driver(table) == "590.48.01"
    assert gpu.parse_nvidia_smi_cuda("CUDA Version        : 12.4\n") == "12.4"  # --version form
    assert gpu.parse_nvidia_smi_cuda(out("nvidia-smi_failed.txt")) == ""


def test_parse_proc_driver_version():
    assert gpu.parse_proc_driver_version(out("proc_driver_nvidia_version.txt")) == "550.54.15"
    closed = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
    assert gpu.parse_proc_driver_version(closed) == "535.104.05"


def test_parse_proc_gpu_information():
    text = "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\nDevice Minor: \t 3\n"
    assert gpu.parse_proc_gpu_information(text) == ("NVIDIA H100 80GB HBM3", 3)


# --- RDMA --------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "text, rate",
    [("200 Gb/sec (4X HDR)", 200.0), ("2.5 Gb/sec (1X SDR)", 2.5), ("100 Gb/sec (2X HDR)", 100.0),
     ("400 Gb/sec (4X NDR)\n", 400.0), ("", None), ("invalid", None)],
)
def test_parse_rate(text, rate):
    assert rdma.parse_rate(text) == rate


@pytest.mark.parametrize(
    "text, state",
    [("4: ACTIVE", "ACTIVE"), ("1: DOWN", "DOWN"), ("5: LinkUp", "LinkUp"), ("2: Polling", "Polling"),
     ("PORT_ACTIVE (4)", "ACTIVE"), ("PORT_DOWN (1)", "DOWN"), ("", "unknown")],
)
def test_parse_state(text, state):
    assert rdma.parse_state(text) == state


def test_parse_ibv_devinfo_mlx5():
    (h,) = rdma.parse_ibv_devinfo(out("ibv_devinfo_mlx5_hdr.txt"))
    assert h.name == "mlx5_0" and h.fw_version == "20.39.1002" and h.vendor_id == "0x02c9"
    (p,) = h.ports
    assert (p.number, p.state, p.link_layer, p.active) == (1, "ACTIVE", "InfiniBand", True)


def test_parse_ibv_devinfo_two_hcas_with_down_port_and_roce():
    a, b = rdma.parse_ibv_devinfo(out("ibv_devinfo_two_hcas.txt"))
    assert a.name == "mlx4_1" and [p.state for p in a.ports] == ["ACTIVE", "DOWN"]
    assert b.name == "rocep1s0f0" and b.ports[0].link_layer == "Ethernet"
    assert b.fw_version == "22.36.1010"


def test_parse_ibv_devinfo_no_devices():
    assert rdma.parse_ibv_devinfo(out("ibv_devinfo_none.txt")) == ()


def test_parse_ulimit_l():
    assert rdma.parse_ulimit_l("unlimited\n") == (None, True)
    assert rdma.parse_ulimit_l("8192\n") == (8192, False)
    with pytest.raises(ValueError):
        rdma.parse_ulimit_l("bash: ulimit: error")


def _ib(name="mlx5_0", state="ACTIVE", driver="mlx5_core"):
    return Hca(name=name, driver=driver, ports=(Port(hca=name, number=1, state=state),))


def test_rdma_warnings_missing_uverbs_memlock_and_software():
    w = rdma.rdma_warnings([_ib()], Rdma(uverbs=(), memlock_kib=64))
    assert any("started without the InfiniBand devices" in x for x in w)
    assert any("64 KiB, not unlimited" in x for x in w)
    w = rdma.rdma_warnings([_ib()], Rdma(uverbs=("/dev/infiniband/uverbs0",), memlock_unlimited=True))
    assert w == []
    w = rdma.rdma_warnings([_ib("rxe0", driver="rdma_rxe")], Rdma(uverbs=("/dev/infiniband/uverbs0",),
                                                                  memlock_unlimited=True))
    assert len(w) == 1 and "not hardware: no speed-up over TCP" in w[0]
    # A DOWN port does not need the device, and no ports at all needs no memlock.
    assert rdma.rdma_warnings([_ib(state="DOWN")], Rdma(memlock_unlimited=True)) == []
    assert rdma.rdma_warnings([], Rdma(memlock_kib=64)) == []


# --- net / hardware / runtime / user ------------------------------------------------------

def test_parse_ip_json():
    ifaces = net.parse_ip_json(out("ip-j-addr.json"))
    by = {i.name: i for i in ifaces}
    assert list(by) == ["lo", "eth0", "ib0"]
    assert by["eth0"].addresses == ("10.0.0.5/24", "fe80::5054:ff:fe12:3456/64")
    assert by["eth0"].state == "UP" and by["eth0"].mac == "52:54:00:12:34:56"
    assert by["ib0"].state == "DOWN" and by["ib0"].addresses == ()


def test_parse_if_inet6():
    v6 = net.parse_if_inet6((SYSROOTS / "debian12/proc/net/if_inet6").read_text())
    assert v6 == {"eth0": ["fe80::211:22ff:fe33:4455/64"], "lo": ["::1/128"]}


@pytest.mark.parametrize("address", [
    "::", "::1", "fe80::211:22ff:fe33:4455", "2001:db8::1:0:0:1", "2001:db8:0:0:1::1",
    "fd00::2", "1:2:3:4:5:6:7:8", "::ffff:10.0.0.5", "::10.0.0.5", "::ffff:0:1.2.3.4",
    "64:ff9b::1.2.3.4", "2001:db8:85a3::8a2e:370:7334", "0:0:1::"])
def test_if_inet6_addresses_are_written_as_ipaddress_writes_them(address):
    """The IPv4-tailed forms included."""
    import ipaddress

    packed = ipaddress.IPv6Address(address).packed
    line = f"{packed.hex()} 02 40 00 80 eth0\n"
    assert net.parse_if_inet6(line) == {"eth0": [f"{ipaddress.IPv6Address(address)}/64"]}


def test_parse_cpuinfo_and_meminfo():
    assert hardware.parse_cpuinfo((SYSROOTS / "debian12/proc/cpuinfo").read_text()) == 4
    assert hardware.parse_meminfo((SYSROOTS / "debian12/proc/meminfo").read_text()) == 16000
    assert hardware.parse_cpuinfo("") is None
    assert hardware.parse_meminfo("MemFree: 1 kB\n") is None


def test_parse_environ_and_cgroup_and_jupyter():
    env = runtime.parse_environ(b"PATH=/bin\0container=podman\0JPY_PARENT_PID=7\0")
    assert env["container"] == "podman"
    assert runtime.jupyter_from_env(env)
    assert runtime.jupyter_from_env({"JUPYTERHUB_USER": "ana"})
    assert not runtime.jupyter_from_env({"HOME": "/root"})
    assert runtime.container_from_cgroup("12:memory:/kubepods/besteffort/pod1/x\n") == "kubernetes"
    assert runtime.container_from_cgroup("1:name=systemd:/docker/0123abcd\n") == "docker"
    assert runtime.container_from_cgroup("0::/\n") is None


@pytest.mark.parametrize(
    "rc, err, mode",
    [
        (0, "", "nopasswd"),
        (1, "sudo: a password is required\n", "password"),
        (1, "ana is not in the sudoers file.  This incident will be reported.\n", "denied"),
        (1, "Sorry, user ana may not run sudo on node-a.\n", "denied"),
    ],
)
def test_classify_sudo(rc, err, mode):
    assert user.classify_sudo(Result(("sudo", "-n", "true"), rc, "", err)) == mode


def test_classify_sudo_missing():
    assert user.classify_sudo(None) == "none"


# --- run ---------------------------------------------------------------------------------

def test_run_missing_program_is_none():
    assert run(["hpcwizard-no-such-program-xyz"]) is None


def test_run_captures_rc_stdout_stderr_in_c_locale():
    res = run(["sh", "-c", "echo out; echo err >&2; echo $LC_ALL; exit 3"])
    assert res is not None
    assert (res.rc, res.stderr, res.ok) == (3, "err\n", False)
    assert res.stdout == "out\nC\n"
    assert res.output.startswith("out\n") and res.output.endswith("err\n")


def test_run_timeout_kills_the_whole_group_quickly():
    start = time.monotonic()
    with pytest.raises(CommandTimeout) as exc:
        run(["sh", "-c", "sleep 30; echo late"], timeout=0.5)
    assert time.monotonic() - start < 3
    assert "did not finish within 0.5 s" in str(exc.value)
