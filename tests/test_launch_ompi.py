"""Open MPI 4 (ORTE) and 5 (PRRTE) in the launch script, the Dockerfile and the facts: the
names each gets, decided in bash from `mpirun --version`; and the TCP interface the script
keeps mpirun to (`ip -o route get` of the second host). The script runs with test_launch's
fake commands, a fake `mpirun --version` (fixtures/outputs/mpirun_openmpi-*.txt) and a fake
`ip` (fixtures/outputs/ip-o-route-get_*.txt; sources in fixtures/outputs/SOURCES.md)."""
import re
from pathlib import Path

import pytest

from test_launch import HOSTS, _fakes, _run, plan
from hpcwizard.detect.software import parse_mpirun_version
from hpcwizard.export import launch_script
from hpcwizard.facts import Software
from hpcwizard.render.mpirun import IFACE_ARGS_4, IFACE_ARGS_5, iface_args, mca_args

OUT = Path(__file__).parent / "fixtures" / "outputs"
V4, V5 = OUT / "mpirun_openmpi-4.1.4.txt", OUT / "mpirun_openmpi-5.0.7.txt"
ROUTE = OUT / "ip-o-route-get_direct.txt"  # ... dev eth0 ...
LOCAL = OUT / "ip-o-route-get_local.txt"  # local ... dev lo ...


# --- names ------------------------------------------------------------------------------------

def test_facts_know_the_major_version():
    for name, major in ((V4, 4), (V5, 5)):
        flavour, version = parse_mpirun_version(name.read_text())
        assert Software(mpi_flavour=flavour, mpi_version=version).ompi_major == major
    assert Software(mpi_flavour="mpich", mpi_version="4.0").ompi_major is None
    assert Software(mpi_flavour="openmpi", mpi_version="").ompi_major is None
    assert Software().ompi_major is None


def test_job_settings_get_prrtes_names_for_open_mpi_5_only():
    mca = {"plm_rsh_args": "-p 2222", "pml": "ucx", "orte_keep_fqdn_hostnames": "1"}
    four = ["--mca", "plm_rsh_args", "-p 2222", "--mca", "pml", "ucx",
            "--mca", "orte_keep_fqdn_hostnames", "1", "-x", "UCX_NET_DEVICES"]
    assert mca_args(mca, ("UCX_NET_DEVICES",), 4) == four
    assert mca_args(mca, ("UCX_NET_DEVICES",), None) == four  # unknown: 4.x names
    assert mca_args(mca, ("UCX_NET_DEVICES",), 5) == [
        "--prtemca", "plm_ssh_args", "-p 2222", "--mca", "pml", "ucx",
        "--prtemca", "prte_keep_fqdn_hostnames", "1", "-x", "UCX_NET_DEVICES"]
    assert iface_args("eth0", 4) == ["--mca", "btl_tcp_if_include", "eth0",
                                     "--mca", "oob_tcp_if_include", "eth0"]
    assert iface_args("eth0", 5) == ["--mca", "btl_tcp_if_include", "eth0",
                                     "--prtemca", "prte_if_include", "eth0"]


def test_script_text_names_the_interface_as_verify_does():
    """Both sets of MPIRUN_ARGS are rows of tests/fixtures/render-cases.toml."""
    text = launch_script(plan("mpi", "ib"))
    # the bash names what verify (iface_args) names, for each version
    assert IFACE_ARGS_4[:2] == IFACE_ARGS_5[:2] == ("--mca", "btl_tcp_if_include")
    assert ('IFACE_ARGS=("${IF_NAMES[0]}" "${IF_NAMES[1]}" "$IFACE" "${IF_NAMES[2]}" '
            '"${IF_NAMES[3]}" "$IFACE")') in text
    for names in (IFACE_ARGS_4, IFACE_ARGS_5):
        assert f"IF_NAMES=({' '.join(names)})" in text


# --- the script, run --------------------------------------------------------------------------

def _cluster(tmp_path, version=None, route=ROUTE, hosts=None):
    """test_launch's fakes on node01, with `mpirun --version` answering from a fixture (none:
    a bare fake that prints nothing) and `ip -o route get ADDR` printing `route` (None: ip
    fails, as where there is no route or no ip)."""
    fk = _fakes(tmp_path, "node01", hosts or HOSTS)
    bin_ = Path(fk["env"]["PATH"].split(":")[0])
    log = fk["log"]
    ver = f'cat {version}; exit 0' if version else "exit 0"
    (bin_ / "mpirun").write_text(
        f'#!/bin/bash\nif [ "$1" = --version ]; then {ver}; fi\necho "mpirun $*" >> {log}\n')
    body = f'cat {route}' if route else "exit 2"
    (bin_ / "ip").write_text(f'#!/bin/bash\necho "ip $*" >> {log}\n{body}\n')
    (bin_ / "ip").chmod(0o755)
    return fk


def _mpirun_line(fk):
    return [ln for ln in fk["log"].read_text().splitlines() if ln.startswith("mpirun ")]


def _launch_lines(stderr, word):
    return [ln for ln in stderr.splitlines() if word in ln]


@pytest.mark.parametrize("version,port,iface,gone", [
    (V4, "--mca plm_rsh_args -p 2222", "--mca oob_tcp_if_include eth0",
     ("--prtemca", "plm_ssh_args", "prte_if_include")),
    (V5, "--prtemca plm_ssh_args -p 2222", "--prtemca prte_if_include eth0",
     ("plm_rsh_args", "oob_tcp_if_include")),
])
def test_names_follow_the_installed_open_mpi(tmp_path, version, port, iface, gone):
    fk = _cluster(tmp_path, version)
    r = _run(tmp_path, launch_script(plan("mpi", "ib")), {**fk["env"], "HOSTS": "node01,node02"},
             ["--", "./a.out"])
    assert r.returncode == 0, r.stderr
    [call] = _mpirun_line(fk)
    assert port in call and iface in call and "--mca btl_tcp_if_include eth0" in call
    assert "--mca pml ucx" in call and call.endswith("./a.out")
    for name in gone:
        assert name not in call
    number = parse_mpirun_version(version.read_text())[1]
    assert _launch_lines(r.stderr, "-np 2") == [
        f"launch[node01]: mpirun (Open MPI {number}) -np 2 on node01 node02: ./a.out"]
    # one line says which interface, and from what; ip was asked about node02's address
    assert _launch_lines(r.stderr, "TCP interface") == [
        "launch[node01]: TCP interface eth0, from the route to node02 (10.0.0.2)"]
    assert "ip -o route get 10.0.0.2" in fk["log"].read_text()


def test_unknown_version_keeps_the_plans_names(tmp_path):
    """An mpirun whose --version names no Open MPI: the plan's (4.x) names, as before."""
    fk = _cluster(tmp_path, version=None)
    r = _run(tmp_path, launch_script(plan("mpi", "tcp")), {**fk["env"], "HOSTS": "node01,node02"},
             ["--", "hostname"])
    assert r.returncode == 0, r.stderr
    [call] = _mpirun_line(fk)
    assert "--mca plm_rsh_args -p 2222" in call and "--mca oob_tcp_if_include eth0" in call
    assert "launch[node01]: mpirun -np 2 on node01 node02: hostname" in r.stderr


@pytest.mark.parametrize("route", [None, LOCAL], ids=["no-route", "lo"])
def test_no_interface_chosen_when_the_route_names_none(tmp_path, route):
    fk = _cluster(tmp_path, V5, route=route)
    r = _run(tmp_path, launch_script(plan("mpi", "tcp")), {**fk["env"], "HOSTS": "node01,node02"},
             ["--", "hostname"])
    assert r.returncode == 0, r.stderr
    [call] = _mpirun_line(fk)
    assert "if_include" not in call and "--prtemca plm_ssh_args -p 2222" in call
    assert _launch_lines(r.stderr, "TCP interface") == [
        "launch[node01]: TCP interface not chosen ('ip route get' gave none for node02): MPI "
        "tries every interface"]


def test_tcp_iface_overrides_the_route(tmp_path):
    fk = _cluster(tmp_path, V4)
    env = {**fk["env"], "HOSTS": "node01,node02", "TCP_IFACE": "ib0"}
    r = _run(tmp_path, launch_script(plan("mpi", "tcp")), env, ["--", "hostname"])
    assert r.returncode == 0, r.stderr
    [call] = _mpirun_line(fk)
    assert "--mca btl_tcp_if_include ib0 --mca oob_tcp_if_include ib0" in call
    assert _launch_lines(r.stderr, "TCP interface") == [
        "launch[node01]: TCP interface ib0, from TCP_IFACE"]
    assert "ip " not in fk["log"].read_text()  # the route is not asked


def test_one_host_chooses_no_interface(tmp_path):
    fk = _cluster(tmp_path, V5)
    r = _run(tmp_path, launch_script(plan("mpi", "tcp")), {**fk["env"], "HOSTS": "node01"},
             ["--", "hostname"])
    assert r.returncode == 0, r.stderr
    [call] = _mpirun_line(fk)
    assert "if_include" not in call and not _launch_lines(r.stderr, "TCP interface")


def test_the_version_check_survives_a_missing_mpirun_under_pipefail(tmp_path):
    """`set -euo pipefail`: `mpirun --version` failing (here: exit 127 from a wrapper) must
    not end the script before mpirun itself reports."""
    fk = _cluster(tmp_path, V4)
    bin_ = Path(fk["env"]["PATH"].split(":")[0])
    log = fk["log"]
    (bin_ / "mpirun").write_text(
        f'#!/bin/bash\n[ "$1" = --version ] && exit 127\necho "mpirun $*" >> {log}\n')
    r = _run(tmp_path, launch_script(plan("mpi", "tcp")), {**fk["env"], "HOSTS": "node01,node02"},
             ["--", "hostname"])
    assert r.returncode == 0, r.stderr
    assert re.search(r"--mca plm_rsh_args -p 2222 .*--mca oob_tcp_if_include eth0",
                     _mpirun_line(fk)[0])
