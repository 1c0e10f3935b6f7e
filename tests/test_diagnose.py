"""diagnose: every recorded log excerpt under fixtures/logs is recognised as its signature
(the file name is the signature id), and the CLI's exit statuses: 0 found, 1 nothing, 2 unreadable."""
from pathlib import Path

import pytest

from hpcwizard.cli import main
from hpcwizard.diagnose import diagnose, signatures

LOGS = Path(__file__).parent / "fixtures" / "logs"
REQUIRED = ["ssh-host-key", "ssh-publickey", "ssh-refused", "name-unresolved", "mpi-daemons",
            "mpi-root", "pml-ucx", "ucx-no-transports", "memlock", "nccl-socket-fallback",
            "nccl-no-socket", "verbs-no-driver", "nccl-shm"]


def test_every_required_signature_has_a_log():
    have = {p.stem for p in LOGS.glob("*.log")}
    assert set(REQUIRED) <= have


@pytest.mark.parametrize("log", sorted(LOGS.glob("*.log")), ids=lambda p: p.stem)
def test_log_is_recognised(log):
    found = [d.id for d in diagnose(log.read_text().splitlines())]
    assert log.stem in found


def _scope(log: Path) -> str:
    return next(s.scope for s in signatures() if s.id == log.stem)


@pytest.mark.parametrize("log", sorted(LOGS.glob("*.log")), ids=lambda p: p.stem)
def test_its_own_scope_finds_it(log):
    """A job's failures are found by verify (scope "job"), an apply step's by apply (""),
    and a step's log never reads as a job's."""
    scope = _scope(log)
    assert log.stem in [d.id for d in diagnose(log.read_text().splitlines(), scope=scope)]
    if scope == "":
        assert diagnose(log.read_text().splitlines(), scope="job") == [], log.stem


def test_apts_own_failures_each_have_a_log():
    have = {p.stem for p in LOGS.glob("*.log")}
    assert {"apt-source-missing", "apt-would-remove", "mirror-unreachable"} <= have


def test_every_signature_has_chinese_cause_and_fix():
    for s in signatures():
        assert s.i18n["zh"].get("cause") and s.i18n["zh"].get("fix"), s.id


def test_publickey_is_not_taken_for_a_root_problem():
    ids = [d.id for d in diagnose(["node2: Permission denied (publickey,password)."])]
    assert ids == ["ssh-publickey"]


def test_cli_exit_codes(tmp_path, capsys):
    assert main(["diagnose", str(LOGS / "mpi-root.log")]) == 0
    out = capsys.readouterr().out
    assert "[mpi-root]" in out and "--allow-run-as-root" in out
    clean = tmp_path / "clean.log"
    clean.write_text("all fine\n")
    assert main(["diagnose", str(clean)]) == 1
    assert main(["diagnose", str(tmp_path / "missing.log")]) == 2


def test_cli_json(capsys):
    import json

    assert main(["diagnose", "--json", str(LOGS / "nccl-socket-fallback.log")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data[0]["id"] == "nccl-socket-fallback" and data[0]["fix_zh"]


def test_gdr_disabled_is_the_hcas_not_the_pcie_distance_nor_a_healthy_log():
    """NCCL's 'GPU Direct RDMA Disabled for HCA' (no peermem, no DMA-BUF) is a fault to fix on
    the host; 'Disabled for GPU 0 / HCA 0 (distance 5 > 4)' is NCCL's choice for the PCIe
    topology, and a log with GDRDMA connections has nothing to diagnose."""
    assert (LOGS / "nccl-gdr-disabled.log").exists()
    far = ["n1:1:2 [0] NCCL INFO GPU Direct RDMA Disabled for GPU 0 / HCA 0 (distance 5 > 4)"]
    assert "nccl-gdr-disabled" not in [d.id for d in diagnose(far, scope="job")]
    healthy = (LOGS / "nccl-transport" / "ib-gdrdma_aks-rdma-infiniband-pr36.txt").read_text()
    assert diagnose(healthy.splitlines(), scope="job") == []
    fix = next(s for s in signatures() if s.id == "nccl-gdr-disabled").fix
    assert "nvidia-peermem" in fix and "DMA-BUF" in fix
