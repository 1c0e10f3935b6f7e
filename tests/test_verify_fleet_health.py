"""verify --fleet's health of each instance: the read-only program (programs/health.sh) run by
the real bash on sysfs trees and with a stand-in nvidia-smi that prints recorded real
formats (tests/fixtures/health, sources in its README.md), and its parser."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Dict, Optional

import pytest

from hpcwizard.verify import probes as P
from hpcwizard.verify.nodehealth import (HEALTH, IB_COUNTERS, GpuHealth, NvlinkGpu,
                                         parse_health, parse_nvlink, script)
from hpcwizard.verify.shipped import program

HEALTH_FIXTURES = Path(__file__).parent / "fixtures" / "health"
SMI = HEALTH_FIXTURES / "smi"
NO_SMI_PATH = "/usr/bin:/bin"


# --- the program, for real ---------------------------------------------------------------


def ib_tree(root: Path, ports: Dict[tuple, Dict[str, int]]) -> Path:
    """sysfs's /sys/class/infiniband/HCA/ports/N/counters/COUNTER files, one per counter."""
    for (hca, port), counters in ports.items():
        d = root / "sys/class/infiniband" / hca / "ports" / port
        (d / "counters").mkdir(parents=True)
        (d / "state").write_text("4: ACTIVE\n")
        for name, value in counters.items():
            (d / "counters" / name).write_text(f"{value}\n")
    return root


def run_program(root: Path, smi: Optional[str] = None, log: Optional[Path] = None,
                host: str = "") -> str:
    """health.sh on root as verify runs it (bash -c, one line), nvidia-smi the stand-in
    answering from smi/<smi>, or none on PATH."""
    if smi is None and shutil.which("nvidia-smi", path=NO_SMI_PATH):
        pytest.skip("this machine has an nvidia-smi in /usr/bin: no PATH without one")
    env = {**os.environ, "PATH": NO_SMI_PATH if smi is None
           else f"{HEALTH_FIXTURES / 'bin'}:{NO_SMI_PATH}"}
    if smi is not None:
        env["HPCWIZARD_FAKE_SMI"] = str(SMI / smi)
    if log is not None:
        env["HPCWIZARD_FAKE_SMI_LOG"] = str(log)
    done = subprocess.run(P.ReadHealth(script(), root=str(root)).argv(), capture_output=True,
                          text=True, env=env, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout


ZERO = {c: 0 for c in IB_COUNTERS}


def test_the_ib_counters_present_are_read_and_the_missing_left_out(tmp_path):
    partial = {"link_downed": 2, "symbol_error": 65535, "port_rcv_errors": 7}
    root = ib_tree(tmp_path, {("mlx5_0", "1"): ZERO, ("mlx5_1", "1"): partial})
    # a software port whose driver has no counters directory there
    (tmp_path / "sys/class/infiniband/rxe0/ports/1").mkdir(parents=True)
    node = parse_health(run_program(root))
    assert node.complete and not node.smi and node.gpus == () and node.nvlink == ()
    assert {p.name: p.counters for p in node.ib} == {"mlx5_0:1": ZERO, "mlx5_1:1": partial}


def test_eight_h100s_with_every_link_up(tmp_path):
    log = tmp_path / "calls"
    node = parse_health(run_program(tmp_path, "h100x8", log))
    assert node.complete and node.smi and node.gpu_error == ""
    assert [g.index for g in node.gpus] == [str(i) for i in range(8)]
    assert node.gpus[0] == GpuHealth("0", "00000000:18:00.0", 0, None, False, False)
    assert node.nvlink == tuple(NvlinkGpu(str(i), 18, 0) for i in range(8))
    assert node.nvlinks_active == 144
    assert log.read_text().splitlines() == [
        "--query-gpu=index,pci.bus_id,ecc.errors.uncorrected.volatile.total,"
        "retired_pages.pending,remapped_rows.pending,remapped_rows.failure "
        "--format=csv,noheader,nounits",
        "nvlink -s"]


def test_a_driver_without_row_remapping_is_asked_without_it(tmp_path):
    node = parse_health(run_program(tmp_path, "v100x4-old-driver"))
    assert [(g.index, g.ecc_uncorrected, g.retired_pending, g.remap_pending, g.remap_failed)
            for g in node.gpus] == [(str(i), 0, False, None, None) for i in range(4)]
    assert node.nvlink[3] == NvlinkGpu("3", 4, 2) and node.nvlink[0] == NvlinkGpu("0", 6, 0)


def test_nvidia_smi_without_its_driver_says_so(tmp_path):
    node = parse_health(run_program(tmp_path, "no-driver"))
    assert node.complete and node.smi and node.gpus == () and node.nvlink == ()
    assert node.gpu_error.startswith("NVIDIA-SMI has failed because it couldn't communicate")


def test_the_ssh_form_is_the_same_program_quoted_once_more(tmp_path):
    root = ib_tree(tmp_path, {("mlx5_0", "1"): ZERO})
    remote = P.ReadHealth(script(), host="node2", port=2222, root=str(root)).argv()
    assert remote[:2] == ("ssh", "-o") and "node2" in remote and "2222" in remote
    assert "\n" not in remote[-1]  # the command the report shows is one line
    env = {**os.environ, "PATH": NO_SMI_PATH}
    done = subprocess.run(["sh", "-c", remote[-1]], capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode == 0 and done.stdout == run_program(root)


def test_the_program_file_runs_as_it_is_and_has_no_single_quote(tmp_path):
    text = program(HEALTH)
    assert "'" not in script()  # see its header: quoted once more for ssh
    path = tmp_path / "health.sh"
    path.write_text(text)
    root = ib_tree(tmp_path / "root", {("mlx5_0", "1"): {"link_downed": 1}})
    env = {**os.environ, "PATH": f"{HEALTH_FIXTURES / 'bin'}:{NO_SMI_PATH}",
           "HPCWIZARD_FAKE_SMI": str(SMI / "h100x8")}
    done = subprocess.run(["bash", str(path), str(root)], capture_output=True, text=True,
                          env=env)
    assert done.stdout == run_program(root, "h100x8")


# --- the parser, on the real formats -------------------------------------------------------


def tagged(kind: str, text: str) -> str:
    return "".join(f"HPCWIZARD-HEALTH\t{kind}\t{line}\n" for line in text.splitlines())


def test_unknown_values_are_unknown_never_zero():
    fields = ("index,pci.bus_id,ecc.errors.uncorrected.volatile.total,retired_pages.pending,"
              "remapped_rows.pending,remapped_rows.failure")
    out = ("Welcome to node2\n" + tagged("gpu-fields", fields)
           + tagged("gpu", (SMI / "a40x2-pcie/query-gpu.csv").read_text())
           + tagged("nvlink", (SMI / "a40x2-pcie/nvlink.txt").read_text())
           + "HPCWIZARD-HEALTH\tend\n")
    node = parse_health(out)
    assert node.gpus == (GpuHealth("0", "00000000:4F:00.0", 0, False, False, False),
                         GpuHealth("1", "00000000:52:00.0", None, None, None, None))
    # NVML's "all links are inActive" under a GPU: no link active on it
    assert node.nvlink == (NvlinkGpu("0", 0, 0), NvlinkGpu("1", 0, 0))


def test_a_reading_cut_short_is_not_complete():
    out = tagged("gpu-tool", "absent") + "HPCWIZARD-HEALTH\tib\tmlx5_0\t1\tlink_downed\t0\n"
    node = parse_health(out)
    assert not node.complete and node.ib[0].counters == {"link_downed": 0}
    assert parse_health(out + "HPCWIZARD-HEALTH\tend\n").complete


def test_nvlink_lines_before_any_gpu_are_not_links():
    assert parse_nvlink(["Link 0: 26.562 GB/s", "GPU 1: X (UUID: u)", "  Link 0: <inactive>",
                         "  Link 1: 1.562 GB/s"]) == (NvlinkGpu("1", 1, 1),)
