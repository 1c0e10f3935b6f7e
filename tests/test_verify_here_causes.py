"""verify --here: a check's cause and fix follow from what it saw. A program that is not
installed is named as missing, with what installs it (not taken for the failure it would have
shown); no table cause contradicts the check's own line; an MPI check gets no NCCL cause."""
import dataclasses

from _core_fixtures import ROOT, facts
from _verify_fixtures import FakeSystem
from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.facts import Hca, Port, Rdma
from hpcwizard.hosts import Hosts
from hpcwizard.plan import build_plan
from hpcwizard.verify import FAIL, probes as P, verify


def ib_facts():
    return dataclasses.replace(
        facts(user=ROOT), rdma=Rdma(uverbs=("uverbs0",)),
        hcas=(Hca("mlx5_0", "mlx5_core", ports=(Port("mlx5_0", 1, "ACTIVE", "LinkUp", 200.0,
                                                     "InfiniBand"),)),))


def run(framework="mpi", network="tcp", f=None, answers=None):
    f = f or facts(user=ROOT)
    plan = build_plan(f, make_choices(framework=framework, network=network, mode="manual"),
                      load_catalog())
    report = verify(plan, f, Hosts(("node1",), "--hosts"), system=FakeSystem({"node1": "ok"},
                                                                            answers))
    return {c.id: c for c in report.checks}


def said(check):
    """Everything the check tells the user about why."""
    return " ".join([check.explain] + [d.cause + " " + d.fix for d in check.diagnoses])


def test_sshd_not_installed_is_named_missing_not_overridden():
    c = run(answers={P.SshdInEffect: (127, "/usr/sbin/sshd: command not found")})
    bad = c["here/sshd-settings"]
    assert bad.status == FAIL and bad.detail == "/usr/sbin/sshd: command not found"
    assert "sshd is not installed here" in bad.explain and "openssh-server" in bad.explain
    assert "another file" not in said(bad) and "apply' again" not in said(bad)


def test_sshd_that_refuses_its_configuration_is_not_said_to_be_overridden():
    c = run(answers={P.SshdInEffect: (255, "/etc/ssh/sshd_config line 3: Bad configuration "
                                           "option: Frobnicate")})
    bad = c["here/sshd-settings"]
    assert bad.status == FAIL and "sshd -T failed" in bad.explain
    assert "another file" not in said(bad)


def test_ompi_info_not_installed_is_named_missing_not_without_ucx():
    c = run(network="ib", f=ib_facts(),
            answers={P.OmpiInfo: (127, "ompi_info: command not found")})
    bad = c["here/ompi-ucx"]
    assert bad.status == FAIL and "ompi_info is not installed here" in bad.explain
    assert "openmpi-bin" in bad.explain  # the fixture's target is a Debian one
    assert "cannot use UCX" not in said(bad) and [d.id for d in bad.diagnoses] == []


def test_ucx_info_not_installed_is_named_missing_not_no_device():
    c = run(network="ib", f=ib_facts(), answers={P.UcxDevices: (127, "ucx_info: command not found")})
    bad = c["here/ucx-ib"]
    assert bad.status == FAIL and "ucx_info is not installed here" in bad.explain
    assert "ucx-utils" in bad.explain and bad.diagnoses == ()


def test_no_uverbs_device_gets_no_cause_that_says_libibverbs_sees_it():
    c = run(network="ib", f=ib_facts(),
            answers={P.OpenUverbs: (1, "no /dev/infiniband/uverbs*")})
    bad = c["here/uverbs"]
    assert bad.status == FAIL and bad.detail == "no /dev/infiniband/uverbs*"
    assert "no RDMA device" in bad.explain
    assert "sees the RDMA device" not in said(bad) and bad.diagnoses == ()


def test_an_mpi_ib_port_check_gets_no_nccl_cause():
    mpi = run(network="ib")["here/ib-ports"]  # the fixture's facts: no HCA at all
    assert mpi.status == FAIL and mpi.detail == "no InfiniBand port found"
    assert "NCCL" not in said(mpi)
    torch = run(framework="pytorch", network="ib")["here/ib-ports"]
    assert [d.id for d in torch.diagnoses] == ["nccl-socket-fallback"]
