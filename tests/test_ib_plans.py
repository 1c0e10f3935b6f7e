"""MPI over InfiniBand (UCX), PyTorch over InfiniBand and over TCP: recipes, the
recommendation and its reasons, launch settings, the UCX-from-a-URL path, and the check steps
run for real against fake ompi_info / ucx_info programs."""
from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from hpcwizard import cli, ops
from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.detect import detect
from hpcwizard.diagnose import diagnose
from hpcwizard.facts import Gpu, Hca, Iface, Rdma
from hpcwizard.plan import build_plan, ib_problem, launch_settings, socket_iface, version_tuple
from hpcwizard.validate import BadInput

from _ib_fixtures import H100, PRIVILEGES, ROOT, SYSROOTS, TWO_HDR, UVERBS, make_facts, port, with_

CATALOG = load_catalog()
FIXTURE_OUT = Path(__file__).parent / "fixtures" / "outputs"
GUIDE_IB = ["ibverbs-providers", "libibumad3", "libibverbs1", "libnl-3-200", "libnl-route-3-200", "librdmacm1"]
GUIDE_TORCH_IB = ["libibverbs1", "ibverbs-providers", "rdma-core", "ibverbs-utils", "libibverbs-dev", "libibumad-dev"]
UCX_URL = "https://jiangsu-10.zos.ctyun.cn/bucket-7262/ucx-1.18.1-rc3.deb"


def plan_for(facts, **choices):
    return build_plan(facts, make_choices(**choices), CATALOG)


def steps(plan):
    return {s.id: s for s in plan.steps}


def packages(plan):
    pk = steps(plan).get("packages/install")
    return list(pk.packages) if pk else []


def reasons(plan) -> str:
    return "\n".join(plan.recommendation.reasons)


# --- recipes: package names per family --------------------------------------------------------

def test_mpi_ib_debian_installs_the_guides_list_plus_checking_tools_and_ucx():
    p = plan_for(make_facts("debian12"), framework="mpi", network="ib")
    pk = packages(p)
    assert all(name in pk for name in GUIDE_IB)
    assert {"ibverbs-utils", "libucx0", "ucx-utils", "openmpi-bin"} <= set(pk)
    # one transaction: the distribution's UCX in the same packages call, none other
    assert sum(s.operation == "hw_packages" for s in p.steps) == 1


@pytest.mark.parametrize("tree,pm", [("rocky9", "dnf"), ("centos7", "yum"), ("openeuler2203", "dnf")])
def test_mpi_ib_rhel_family_names(tree, pm):
    p = plan_for(make_facts(tree), framework="mpi", network="ib")
    pk = packages(p)
    assert pk[:3] == ["openssh-server", "openssh-clients", "bind-utils"]
    assert {"rdma-core", "libibverbs", "librdmacm", "libibumad", "libnl3", "libibverbs-utils",
            "ucx", "ucx-ib"} <= set(pk)
    assert not set(GUIDE_IB) & set(pk)
    assert steps(p)["packages/install"].run == f"hw_packages {pm} " + " ".join(pk)
    # RHEL's ompi_info lives outside PATH: the check puts it there
    assert "/usr/lib64/openmpi/bin" in steps(p)["openmpi-ucx/pml-ucx"].check


def test_pytorch_ib_packages_per_family():
    deb = packages(plan_for(make_facts("ubuntu2204"), framework="pytorch", network="ib"))
    assert deb == GUIDE_TORCH_IB + ["perftest"]  # perftest: verify --bandwidth's ib_write_bw
    rhel = packages(plan_for(make_facts("rocky9"), framework="pytorch", network="ib"))
    assert {"rdma-core", "libibverbs", "libibverbs-utils", "rdma-core-devel"} <= set(rhel)
    assert "libibverbs-dev" not in rhel


def test_pytorch_tcp_installs_nothing_needs_no_ssh_and_says_why():
    p = plan_for(make_facts("debian12"), framework="pytorch", network="tcp")
    assert packages(p) == []
    assert not [s for s in p.steps if s.recipe == "ssh"]
    assert not p.needs_root
    assert "Nothing needs installing for PyTorch over TCP" in reasons(p)
    assert "no SSH server" in reasons(p)
    assert dict(p.launch_env) == {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "=eth0",
                                  "GLOO_SOCKET_IFNAME": "eth0"}


def test_ssh_recipe_is_for_mpi_only():
    assert "mpi" in CATALOG.for_choices("mpi", "ib")[0].frameworks
    for net in ("tcp", "ib"):
        assert "ssh" not in [r.id for r in CATALOG.for_choices("pytorch", net)]


def test_every_new_recipe_names_packages_for_apt_dnf_and_yum():
    for r in CATALOG.recipes:
        if r.id in ("ib-verbs", "ucx", "ucx-url", "pytorch-ib"):
            assert set(r.packages) == {"apt", "dnf", "yum"}, r.id


def test_openib_is_reported_as_legacy_not_required():
    p = plan_for(make_facts("debian12"), framework="mpi", network="ib")
    check = steps(p)["openmpi-ucx/pml-ucx"]
    assert "openib" not in check.check
    ucx_recipe = next(r for r in CATALOG.recipes if r.id == "openmpi-ucx")
    assert "deprecated in 4.x and gone in 5.x" in ucx_recipe.why
    # Debian/Ubuntu disable UCX in their params file: the plan says so, launch asks for it
    assert "/etc/openmpi/openmpi-mca-params.conf" in check.note and "pml = ^ucx" in check.note
    assert p.mpirun_args[3:6] == ("--mca", "pml", "ucx")


# --- launch settings ----------------------------------------------------------------------------

def test_mpi_ib_launch_uses_ucx_on_the_active_hardware_ports_only():
    hcas = TWO_HDR + (
        Hca("mlx5_2", "mlx5_core", ports=(port("mlx5_2", state="DOWN"),)),
        Hca("rxe0", "rdma_rxe", ports=(port("rxe0", layer="Ethernet", netdev="eth0"),)),
    )
    f = with_(make_facts("debian12"), hcas=hcas)
    env, mca, passed = launch_settings(f, make_choices(framework="mpi", network="ib"))
    assert env == {"UCX_NET_DEVICES": "mlx5_0:1,mlx5_1:1"}
    assert mca == {"pml": "ucx"} and passed == ("UCX_NET_DEVICES",)


def test_mpi_tcp_launch_has_no_ucx():
    f, c = make_facts("debian12"), make_choices(framework="mpi", network="tcp", ssh_port=2200)
    env, mca, passed = launch_settings(f, c)
    assert env == {} and mca == {} and passed == ()
    assert build_plan(f, c, CATALOG).mpirun_args == ("--mca", "plm_rsh_args", "-p 2200")


def test_pytorch_ib_nccl_env_and_conf_file(tmp_path):
    user = dataclasses.replace(PRIVILEGES["sudo"], home=str(tmp_path))
    f = make_facts("debian12", user)
    p = plan_for(f, framework="pytorch", network="ib")
    assert dict(p.launch_env) == {"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1",
                                  "NCCL_SOCKET_IFNAME": "=eth0", "GLOO_SOCKET_IFNAME": "eth0"}
    conf = steps(p)["pytorch-ib/nccl-conf"]
    assert conf.as_ == "user"
    # the step's own text, run for real as apply runs it (the operations library first): it
    # writes the file, its check then passes, and undo takes it away
    env = dict(os.environ, HW_STATE=str(tmp_path / "ops-state"))
    subprocess.run(["bash", "-euo", "pipefail", "-c", ops.runnable(conf.run)], check=True, env=env)
    text = (tmp_path / ".nccl.conf").read_text()
    assert "NCCL_IB_HCA==mlx5_0:1,mlx5_1:1\n" in text and "NCCL_SOCKET_IFNAME==eth0\n" in text
    assert "GLOO" not in text  # NCCL's file: gloo reads only the environment
    assert subprocess.run(["bash", "-c", ops.runnable(conf.check)], env=env).returncode == 0
    subprocess.run(["bash", "-euo", "pipefail", "-c", ops.runnable(conf.undo)], check=True, env=env)
    assert not (tmp_path / ".nccl.conf").exists()


def test_pytorch_ib_without_active_ports_leaves_hca_choice_to_nccl():
    f = with_(make_facts("debian12"), hcas=(), rdma=Rdma())
    p = plan_for(f, framework="pytorch", network="ib")
    assert "NCCL_IB_HCA" not in dict(p.launch_env)
    assert "NCCL chooses the HCAs itself" in steps(p)["pytorch-ib/nccl-conf"].run


def test_socket_iface_default_route_then_a_sensible_interface():
    f = make_facts("debian12")
    assert socket_iface(f) == "eth0"
    f = with_(f, default_iface="", ifaces=(Iface("lo", "UNKNOWN", addresses=("127.0.0.1/8",)),
                                           Iface("docker0", "UP", addresses=("172.17.0.1/16",)),
                                           Iface("ens5", "UP", addresses=("10.1.2.3/24",))))
    assert socket_iface(f) == "ens5"
    f = with_(f, ifaces=(Iface("lo", "UNKNOWN", addresses=("127.0.0.1/8",)),))
    assert socket_iface(f) == ""
    assert "NCCL_SOCKET_IFNAME" not in dict(launch_settings(f, make_choices(framework="pytorch"))[0])


def test_default_route_is_read_by_detection(tmp_path):
    (tmp_path / "proc" / "net").mkdir(parents=True)
    (tmp_path / "proc" / "net" / "route").write_text(
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
        "ens9\t00000000\t0102000A\t0003\t0\t0\t200\t00000000\t0\t0\t0\n"
        "ens5\t00000000\t0101000A\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"
        "ens5\t0001000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n")
    assert detect(str(tmp_path)).default_iface == "ens5"


# --- the recommendation -----------------------------------------------------------------------

def test_root_with_active_ib_configures_here():
    p = plan_for(make_facts("debian12"), framework="mpi", network="ib")
    assert p.recommendation.path == "configure"
    assert p.recommendation.reasons[0] == "You are root: every step can run here."
    assert "Alternatively, start from the preset image ehub.ctcdn.cn/esx-batchcom/openmpi-ib:v1." in reasons(p)


@pytest.mark.parametrize("fw", ["mpi", "pytorch"])
def test_mirrors_unreachable_means_preset(fw):
    f = with_(make_facts("ubuntu2204"), mirrors_reachable=False)
    p = plan_for(f, framework=fw, network="ib")
    assert p.recommendation.path == "preset"
    assert "package mirrors cannot be reached" in p.recommendation.reasons[0]


@pytest.mark.parametrize("sysroot,expect", [
    (None, "No InfiniBand device is visible"),
    ("rdma-rxe", "software RDMA device (rxe0)"),
    ("rdma-down", "No InfiniBand port is active here (mlx5_0:1 is DOWN)"),
])
def test_ib_that_cannot_be_shown_to_work_means_preset(sysroot, expect):
    hw = detect(str(SYSROOTS / sysroot), run_commands=False) if sysroot else None
    f = with_(make_facts("debian12"), hcas=hw.hcas if hw else (), rdma=hw.rdma if hw else Rdma())
    for fw in ("mpi", "pytorch"):
        p = plan_for(f, framework=fw, network="ib")
        assert p.recommendation.path == "preset", fw
        assert expect in p.recommendation.reasons[0]
        assert "on instances that have InfiniBand" in p.recommendation.reasons[1]


def test_active_port_without_uverbs_means_preset():
    f = with_(make_facts("debian12"), rdma=Rdma(memlock_unlimited=True))
    p = plan_for(f, framework="mpi", network="ib")
    assert p.recommendation.path == "preset"
    assert "/dev/infiniband/uverbs* is missing" in p.recommendation.reasons[0]


def test_hdr_fixture_tree_is_good_enough_for_ib():
    hw = detect(str(SYSROOTS / "rdma-ib-hdr"), run_commands=False)
    assert ib_problem(with_(make_facts(), hcas=hw.hcas, rdma=hw.rdma)) == ""


def test_tcp_ignores_missing_ib():
    f = with_(make_facts("debian12"), hcas=(), rdma=Rdma())
    assert plan_for(f, framework="mpi", network="tcp").recommendation.path == "configure"


def test_versions_compare_as_numbers():
    assert version_tuple("525.105.17") > version_tuple("525.60.13")  # as text it would be smaller
    assert version_tuple("470.82.01") < version_tuple("525.60.13") < version_tuple("530.30.02")


def gpus(driver: str, cuda: str):
    return tuple(dataclasses.replace(g, driver=driver, cuda=cuda) for g in H100)


def test_driver_too_old_for_the_presets_cuda_says_what_to_do():
    f = make_facts("ubuntu2204", gpus=gpus("470.82.01", "11.4"))
    p = plan_for(f, framework="pytorch", network="ib")
    text = reasons(p)
    assert "470.82.01, too old for the preset image's CUDA 12.1" in text
    assert "525.60.13 or newer" in text and "530.30.02 without" in text
    assert "will not run on these GPUs either" in text and "newer driver" in text
    assert "CUDA 11.4 at most" in text
    assert p.recommendation.path == "configure"
    assert "Alternatively, start from the preset image" not in text


def test_driver_too_old_with_no_sudo_still_says_the_preset_will_not_help():
    f = make_facts("ubuntu2204", PRIVILEGES["none"], gpus=gpus("470.82.01", "11.4"))
    p = plan_for(f, framework="pytorch", network="ib")
    assert p.recommendation.path == "preset"
    assert "will not run on these GPUs either" in reasons(p)


def test_driver_between_minor_version_compat_and_full_support():
    f = make_facts("ubuntu2204", gpus=gpus("525.105.17", "12.0"))
    text = reasons(plan_for(f, framework="pytorch", network="ib"))
    assert "only through CUDA minor-version compatibility (full support from 530.30.02)" in text
    assert "too old" not in text


def test_new_driver_has_no_driver_reason():
    f = make_facts("ubuntu2204", gpus=gpus("535.104.05", "12.2"))
    assert "driver" not in reasons(plan_for(f, framework="pytorch", network="ib"))


def test_torch_built_for_a_newer_cuda_than_the_driver():
    f = make_facts("ubuntu2204", gpus=gpus("470.82.01", "11.4"), torch_version="2.3.1",
                   torch_cuda="12.1")
    assert "PyTorch here is built for CUDA 12.1, but the GPU driver 470.82.01 supports CUDA 11.4" in \
        reasons(plan_for(f, framework="pytorch", network="tcp"))


def test_already_on_a_matching_mpi_ib_image():
    f = make_facts("debian12", packages={})
    wanted = packages(plan_for(f, framework="mpi", network="ib"))
    f = make_facts("debian12", packages={p: "1" for p in wanted}, mpi_flavour="openmpi",
                   mpi_version="4.1.4", ompi_pml=("ob1", "ucx"))
    p = plan_for(f, framework="mpi", network="ib")
    assert p.recommendation.path == "configure"
    assert f"already matches the job (all {len(wanted)} packages installed, Open MPI 4.1.4 with UCX)" in reasons(p)
    # the same image without UCX in its Open MPI does not match
    f = dataclasses.replace(f, software=dataclasses.replace(f.software, ompi_pml=("ob1",)))
    assert "already matches" not in reasons(plan_for(f, framework="mpi", network="ib"))


def test_already_on_a_matching_pytorch_image():
    f = make_facts("ubuntu2204", packages={p: "1" for p in GUIDE_TORCH_IB + ["perftest"]},
                   torch_version="2.3.1", gpus=H100)
    p = plan_for(f, framework="pytorch", network="ib")
    assert p.recommendation.path == "configure"
    assert "already matches the job (all 7 packages installed, PyTorch 2.3.1)" in reasons(p)


# --- UCX from a URL ---------------------------------------------------------------------------

def test_ucx_url_replaces_the_distribution_ucx():
    p = plan_for(make_facts("debian12"), framework="mpi", network="ib", ucx_source="url",
                 ucx_url=UCX_URL, ucx_sha256="ab" * 32)
    pk = packages(p)
    assert "libucx0" not in pk and "ucx-utils" not in pk
    assert {"curl", "ca-certificates"} <= set(pk)
    step = steps(p)["ucx-url/ucx-package"]
    assert f"'{UCX_URL}'" in step.run
    assert "apt-get -o DPkg::Lock::Timeout=120 install -y ./ucx-1.18.1-rc3.deb" in step.run
    assert "dpkg -i" not in step.run
    assert "python3 -m hpcwizard.download" in step.run and "curl -fL" in step.run and "-C -" in step.run
    assert "ab" * 32 in step.run
    assert "purge" in step.undo and "ucx-check" in " ".join(steps(p))


def test_ucx_url_rpm_on_rhel_and_mismatch_refused():
    url = "https://example.org/pkgs/ucx-1.18.1-1.el9.x86_64.rpm"
    p = plan_for(make_facts("rocky9"), framework="mpi", network="ib", ucx_source="url", ucx_url=url)
    assert "dnf install -y ./ucx-1.18.1-1.el9.x86_64.rpm" in steps(p)["ucx-url/ucx-package"].run
    with pytest.raises(BadInput, match=r"is a \.rpm, but .* installs packages with apt"):
        plan_for(make_facts("debian12"), framework="mpi", network="ib", ucx_source="url", ucx_url=url)


@pytest.mark.parametrize("raw,msg", [
    (dict(ucx_source="url"), "needs the package's address"),
    (dict(ucx_source="url", ucx_url="ftp://host/ucx.deb"), "http:// or https://"),
    (dict(ucx_source="url", ucx_url="https://host/ucx'; rm -rf /.deb"), "without spaces or quotes"),
    (dict(ucx_source="url", ucx_url="https://host/a b.deb"), "without spaces or quotes"),
    (dict(ucx_source="url", ucx_url='https://host/"x".deb'), "without spaces or quotes"),
    (dict(ucx_source="url", ucx_url="https://host/ucx.tar.gz"), "package file name"),
    (dict(ucx_source="url", ucx_url=UCX_URL, ucx_sha256="xyz"), "64 hexadecimal digits"),
    (dict(ucx_url=UCX_URL), "source is 'distro'"),
    (dict(ucx_sha256="ab" * 32), "without a UCX URL"),
    (dict(ucx_source="ftp"), "UCX source 'ftp' is not one of"),
])
def test_ucx_choices_are_validated(raw, msg):
    with pytest.raises(BadInput, match=msg):
        make_choices(framework="mpi", network="ib", **raw)


def test_cli_ucx_url_options(capsys, monkeypatch):
    monkeypatch.setattr("hpcwizard.commands.configure.facts_here",
                        lambda sysroot, **_: make_facts("ubuntu2204"))
    code = cli.main(["plan", "--framework", "mpi", "--network", "ib", "--ucx-url", UCX_URL,
                     "--ucx-sha256", "AB" * 32, "--json"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["choices"]["ucx_source"] == "url" and data["choices"]["ucx_sha256"] == "ab" * 32
    assert "ucx-url/ucx-package" in [s["id"] for s in data["steps"]]
    assert cli.main(["plan", "--framework", "mpi", "--network", "ib", "--ucx-url", "file:///x.deb"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "http:// or https://" in err[0]


# --- the check steps, run for real against fake programs ---------------------------------------

def fakebin(tmp_path: Path, name: str, output: str, code: int = 0) -> Path:
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    (d / f"{name}.out").write_text(output)
    exe = d / name
    exe.write_text(f"#!/bin/sh\ncat '{d / (name + '.out')}'\nexit {code}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return d


def run_step(text: str, path: Path, strict: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{path}:/usr/bin:/bin")
    argv = ["bash", "-euo", "pipefail", "-c", text] if strict else ["bash", "-c", text]
    return subprocess.run(argv, env=env, capture_output=True, text=True)


@pytest.mark.parametrize("tree", ["debian12", "rocky9"])
def test_pml_ucx_check_passes_with_ucx_and_diagnoses_without(tmp_path, tree):
    step = steps(plan_for(make_facts(tree), framework="mpi", network="ib"))["openmpi-ucx/pml-ucx"]
    good = fakebin(tmp_path, "ompi_info", (FIXTURE_OUT / "ompi_info_4.1.4_ucx.txt").read_text())
    assert run_step(step.check, good, strict=False).returncode == 0
    bad = fakebin(tmp_path, "ompi_info", (FIXTURE_OUT / "ompi_info_4.1.2_noucx.txt").read_text())
    assert run_step(step.check, bad, strict=False).returncode != 0
    res = run_step(step.run, bad)
    assert res.returncode == 1
    found = diagnose(res.stderr.splitlines())
    assert [d.id for d in found] == ["ompi-without-ucx"]
    assert "built with UCX" in found[0].fix and "preset" in found[0].fix


def test_ucx_check_reads_ucx_info(tmp_path):
    step = steps(plan_for(make_facts("debian12"), framework="mpi", network="ib"))["ucx/ucx-check"]
    ok = fakebin(tmp_path, "ucx_info", (FIXTURE_OUT / "ucx_info-v_1.13.1.txt").read_text())
    assert run_step(step.check, ok, strict=False).returncode == 0
    broken = fakebin(tmp_path, "ucx_info", "", code=127)
    assert run_step(step.check, broken, strict=False).returncode != 0
    assert run_step(step.run, broken).returncode == 1


def test_rendered_ib_plans_pass_shellcheck(tmp_path):
    from hpcwizard.export import setup_script

    from _core_fixtures import shellcheck

    for tree, extra in (("debian12", dict(ucx_source="url", ucx_url=UCX_URL)),
                        ("rocky9", dict(ucx_source="url", ucx_url="https://h/ucx-1.rpm")),
                        ("centos7", {})):
        for fw in ("mpi", "pytorch"):
            more = extra if fw == "mpi" else {}
            script = setup_script(plan_for(make_facts(tree), framework=fw, network="ib", **more))
            assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
            res = shellcheck(script, tmp_path, f"{tree}-{fw}.sh")
            assert res.returncode == 0, res.stdout
            # and each step's own text, which runs through bash -c
            for s in plan_for(make_facts(tree), framework=fw, network="ib", **more).steps:
                for part in (s.check, s.run, s.undo):
                    if part:
                        r = shellcheck("#!/bin/bash\n" + part + "\n", tmp_path, "step.sh")
                        assert r.returncode == 0, (s.id, r.stdout)


# --- detection: a container without the kernel's RDMA subsystem ------------------------------

@pytest.mark.parametrize("message", ["Failed to get IB devices list: Function not implemented",
                                     "No IB devices found"])
def test_ibv_devinfo_without_any_device_is_no_rdma_device(tmp_path, monkeypatch, message):
    """What ibv_devinfo says on this Debian CI machine (ENOSYS) means "no RDMA device"."""
    import shutil

    root = tmp_path / "root"
    shutil.copytree(SYSROOTS / "debian12", root, symlinks=True)
    d = fakebin(tmp_path, "ibv_devinfo", "")
    (d / "ibv_devinfo").write_text(f"#!/bin/sh\necho '{message}' >&2\nexit 255\n")
    monkeypatch.setenv("PATH", str(d))
    f = detect(str(root), run_commands=True)
    assert f.hcas == () and f.warnings == ()
    assert not [n for n in f.notes if "ibv_devinfo" in n]


# --- devices NCCL and UCX accept (issue 17) ---------------------------------------------------

MIXED = (Hca("mlx5_0", "mlx5_core", "0x15b3", ports=(port("mlx5_0", netdev="ib0"),)),
         Hca("mlx5_1", "mlx5_core", "0x15b3", ports=(port("mlx5_1", layer="Ethernet",
                                                           netdev="ens1f0np0"),)),
         Hca("mlx5_10", "mlx5_core", "0x15b3", ports=(port("mlx5_10", netdev="ib1"),)))


@pytest.mark.parametrize("framework", ["mpi", "pytorch"])
def test_one_link_layer_exact_names_and_the_reason_in_the_plan(framework):
    """mlx5_0 and mlx5_10 are InfiniBand, mlx5_1 RoCE: NCCL refuses to mix link layers, and
    NCCL_IB_HCA=mlx5_1 would also take mlx5_10. The job gets the InfiniBand ports, named
    exactly ('=' for NCCL; UCX matches whole names), and the plan says what was left out."""
    f = with_(make_facts("debian12"), hcas=MIXED)
    p = plan_for(f, framework=framework, network="ib")
    env = dict(p.launch_env)
    if framework == "pytorch":
        assert env["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_10:1"
        assert env["NCCL_SOCKET_IFNAME"] == "=eth0"
    else:
        assert env["UCX_NET_DEVICES"] == "mlx5_0:1,mlx5_10:1"
    (w,) = [w for w in p.warnings if "link layers" in w]
    assert "InfiniBand ones (mlx5_0:1, mlx5_10:1)" in w and "leaves out mlx5_1:1" in w


def test_one_link_layer_is_no_warning():
    p = plan_for(make_facts("debian12"), framework="pytorch", network="ib")
    assert not [w for w in p.warnings if "link layers" in w]
    roce = tuple(Hca(h.name, h.driver, h.vendor_id, ports=tuple(
        dataclasses.replace(q, link_layer="Ethernet") for q in h.ports)) for h in TWO_HDR)
    p = plan_for(with_(make_facts("debian12"), hcas=roce), framework="pytorch", network="ib")
    assert dict(p.launch_env)["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_1:1"
    assert not [w for w in p.warnings if "link layers" in w]


def test_mixed_link_layers_detected_from_sysfs_give_the_infiniband_ports(tmp_path):
    """The same machine as a sysfs tree, read by detection: mlx5_0 and mlx5_10 InfiniBand,
    mlx5_1 RoCE (Ethernet), all ACTIVE."""
    from hpcwizard.detect import detect

    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/os-release").write_text('ID=debian\nVERSION_ID="12"\nPRETTY_NAME="Debian 12"\n')
    for hca, layer in (("mlx5_0", "InfiniBand"), ("mlx5_1", "Ethernet"),
                       ("mlx5_10", "InfiniBand")):
        ports = root / "sys/class/infiniband" / hca / "ports/1"
        ports.mkdir(parents=True)
        for k, v in {"state": "4: ACTIVE", "phys_state": "5: LinkUp",
                     "rate": "200 Gb/sec (4X HDR)", "link_layer": layer}.items():
            (ports / k).write_text(v + "\n")
    f = detect(str(root))
    assert sorted(p.name for p in f.active_ports) == ["mlx5_0:1", "mlx5_10:1", "mlx5_1:1"]
    p = plan_for(f, framework="pytorch", network="ib")
    assert dict(p.launch_env)["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_10:1"
    # InfiniBand is used: no RoCE GID index, and gloo gets the interface by its exact name
    assert "NCCL_IB_GID_INDEX" not in dict(p.launch_env)
    assert "GLOO_SOCKET_IFNAME" not in dict(p.launch_env)  # (this tree has no interfaces)
