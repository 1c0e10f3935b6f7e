"""verify --fleet's health of each instance: the read-only program (programs/health.sh) run by
the real bash on sysfs trees and with a stand-in nvidia-smi that prints recorded real
formats (tests/fixtures/health, sources in its README.md), its parser, the judge as a table
of cases, and `verify --fleet --json` through the fake System: the odd node of 8 named,
nothing named when all are alike, a host that cannot be read named as not read."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Dict, Optional

import pytest

from hpcwizard.verify import probes as P
from hpcwizard.verify.healthjudge import FAR, FLOOR, fewer_than_usual, judge
from hpcwizard.verify.nodehealth import (HEALTH, IB_COUNTERS, GpuHealth, IbPortCounters,
                                         NodeHealth, NvlinkGpu, parse_health, parse_nvlink,
                                         script)
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


def test_nvidia_smi_that_fails_without_a_word_is_named_too(tmp_path):
    """Not taken for no GPU: the failure is the node's finding, with its status."""
    node = parse_health(run_program(tmp_path, "silent"))
    assert node.complete and node.smi and node.gpus == ()
    assert node.gpu_error == "nvidia-smi exited 9 with no output", node.gpu_error


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


# --- the judge, as a table -------------------------------------------------------------------


def hosts(n: int = 8):
    return tuple(f"n{i}" for i in range(1, n + 1))


def healthy(gpus: int = 8, links: int = 18, counters: Optional[Dict[str, int]] = None,
            **gpu) -> NodeHealth:
    g = dict(ecc_uncorrected=0, retired_pending=None, remap_pending=False, remap_failed=False)
    return NodeHealth(
        (IbPortCounters("mlx5_0", "1", dict(ZERO)),
         IbPortCounters("mlx5_1", "1", {**ZERO, **(counters or {})})), True,
        tuple(GpuHealth(str(i), f"00000000:{i:02X}:00.0", **{**g, **(gpu if i == 2 else {})})
              for i in range(gpus)),
        "", tuple(NvlinkGpu(str(i), links, 0) for i in range(gpus)), True)


NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
             "Make sure that the latest NVIDIA driver is installed and running.")


def unread(node: Optional[NodeHealth] = None) -> NodeHealth:
    """node as health.sh reads it when nvidia-smi is there and fails: no GPU, no NVLink."""
    import dataclasses

    return dataclasses.replace(node or healthy(), gpus=(), nvlink=(), gpu_error=NO_DRIVER)


def with_links(node: NodeHealth, gpu: int, active: int, inactive: int) -> NodeHealth:
    import dataclasses

    links = tuple(NvlinkGpu(x.gpu, active, inactive) if x.gpu == str(gpu) else x
                  for x in node.nvlink)
    return dataclasses.replace(node, nvlink=links)


# (case, n5's health (the others healthy()), [(host, kind, subject)] named)
CASES = [
    ("all alike", healthy(), []),
    ("uncorrected ECC", healthy(ecc_uncorrected=3), [("n5", "ecc-uncorrected", "GPU 2")]),
    ("ECC unknown is not an error", healthy(ecc_uncorrected=None), []),
    ("retired pages pending", healthy(retired_pending=True), [("n5", "retired-pending", "GPU 2")]),
    ("row remap pending", healthy(remap_pending=True), [("n5", "remap-pending", "GPU 2")]),
    ("row remap failed: the failure, not also the pending",
     healthy(remap_pending=True, remap_failed=True), [("n5", "remap-failed", "GPU 2")]),
    ("a link that went down", healthy(counters={"link_downed": 1}),
     [("n5", "link-downed", "mlx5_1:1")]),
    ("symbol errors far above the median", healthy(counters={"symbol_error": 5000}),
     [("n5", "ib-errors", "mlx5_1:1")]),
    ("a few errors are not far above", healthy(counters={"port_rcv_errors": FLOOR - 1}), []),
    ("as many as the floor are", healthy(counters={"port_rcv_errors": FLOOR}),
     [("n5", "ib-errors", "mlx5_1:1")]),
    ("two GPUs fewer", healthy(gpus=6), [("n5", "gpus-fewer", "")]),
    ("NVLinks down on one GPU", with_links(healthy(), 3, 16, 2),
     [("n5", "nvlink-fewer", "")]),
    ("nvidia-smi there and failing: that, not also fewer GPUs and NVLinks", unread(),
     [("n5", "gpus-unread", "")]),
]


@pytest.mark.parametrize("case,odd,named", CASES, ids=[c[0] for c in CASES])
def test_the_judge_names_the_odd_node_and_what_on_it(case, odd, named):
    read = {h: healthy() for h in hosts()}
    read["n5"] = odd
    v = judge(hosts(), read, {})
    assert [(f.host, f.kind, f.subject.split(" (")[0]) for f in v.findings] == named
    assert v.ok == (not named)
    for f in v.findings:
        # what it means and what to do; where is the report line's, so alike nodes share it
        assert f.seen and f.meaning.endswith(".") and f.host not in f.meaning


def test_far_above_is_relative_to_the_fleet():
    """The same count on every instance is the fleet's, not one node's; far above a median
    that is not 0 takes FAR times it."""
    read = {h: healthy(counters={"symbol_error": 5000}) for h in hosts()}
    assert judge(hosts(), read, {}).ok
    read = {h: healthy(counters={"symbol_error": 200}) for h in hosts()}
    read["n2"] = healthy(counters={"symbol_error": FAR * 200})
    assert judge(hosts(), read, {}).ok
    read["n2"] = healthy(counters={"symbol_error": FAR * 200 + 1})
    assert [f.host for f in judge(hosts(), read, {}).findings] == ["n2"]


def test_a_host_not_read_is_named_and_the_others_still_judged():
    read = {h: healthy() for h in hosts() if h != "n4"}
    read["n7"] = healthy(ecc_uncorrected=1)
    v = judge(hosts(), read, {"n4": "ssh: connect to host n4 port 2222: Connection refused"})
    assert [(f.host, f.kind) for f in v.findings] == [("n4", "not-read"),
                                                      ("n7", "ecc-uncorrected")]
    assert v.to_dict()["not_read"] == ["n4"] and not v.ok


@pytest.mark.parametrize("values,usual,fewer", [
    ({"a": 8, "b": 8, "c": 7}, 8, {"c": 7}),
    ({"a": 8, "b": 6}, 8, {"b": 6}),  # no most common: the highest
    ({"a": 8, "b": 8, "c": 9}, 8, {}),  # one more is not fewer
    ({}, 0, {}),
])
def test_fewer_than_usual(values, usual, fewer):
    assert fewer_than_usual(values) == (usual, fewer)


def test_nvidia_smi_failing_on_every_instance_is_no_pass():
    """Alike on every instance is not healthy when nothing of the GPUs could be read: each
    instance is named, and the report says what nvidia-smi said."""
    from hpcwizard.report_fleet import health_lines

    v = judge(hosts(), {h: unread() for h in hosts()}, {})
    assert not v.ok
    assert [(f.host, f.kind) for f in v.findings] == [(h, "gpus-unread") for h in hosts()]
    lines = health_lines(v)
    assert lines[0] == f"NODE every instance (8): nvidia-smi: {NO_DRIVER}"
    assert len(lines) == 2 and lines[1].startswith("  nvidia-smi is there but could not read")


def test_instances_with_the_same_findings_share_one_line():
    """At 64 instances one fault of them all was 128 lines: the same findings are said once,
    with their hosts; different ones, and an unread host's own reason, stay apart."""
    from hpcwizard.report_fleet import health_lines

    read = {h: healthy() for h in hosts()}
    for h in ("n2", "n5", "n7"):
        read[h] = unread()
    read["n3"] = healthy(gpus=6)
    lines = health_lines(judge(hosts(), read, {"n8": "ssh: connect to host n8: refused"}))
    nodes = [line for line in lines if not line.startswith("  ")]
    assert nodes == [f"NODE 3 of 8 instances: nvidia-smi: {NO_DRIVER}",
                     "NODE n3: 6 GPUs, the others 8",
                     "NOT READ n8: ssh: connect to host n8: refused"], lines
    assert lines[1] == "  n2, n5, n7"
    assert len(lines) == 2 * len(nodes) + 1  # one meaning under each


def test_a_set_of_many_alike_names_what_is_wrong_before_its_hosts():
    """Every line is cut at 300 characters: 40 of 64 long names still leave the finding on
    its line, and every name is listed."""
    from hpcwizard.report_fleet import health_lines

    names = tuple(f"gpu-node-{i:03d}.cluster.example" for i in range(64))
    read = {h: (unread() if i < 40 else healthy()) for i, h in enumerate(names)}
    lines = health_lines(judge(names, read, {}))
    assert lines[0] == f"NODE 40 of 64 instances: nvidia-smi: {NO_DRIVER}"
    listed = [line for line in lines[1:] if line.startswith("  gpu-node-")]
    assert all(len(line) <= 90 for line in listed)
    assert " ".join(line.strip() for line in listed).split(", ") == list(names[:40])


def test_nvidia_smi_failing_on_most_instances_leaves_the_others_judged():
    """The failing ones' 0 GPUs are no count: the instances read are held to each other."""
    read = {h: unread() for h in hosts()[:5]}
    read.update({h: healthy() for h in hosts()[5:]})
    read["n8"] = healthy(gpus=6)
    v = judge(hosts(), read, {})
    assert [(f.host, f.kind) for f in v.findings] == (
        [(h, "gpus-unread") for h in hosts()[:5]] + [("n8", "gpus-fewer")])


def test_no_instance_read_at_all_is_no_pass():
    v = judge(hosts(3), {}, {h: f"ssh: connect to host {h} port 2222: Connection refused"
                             for h in hosts(3)})
    assert not v.ok and v.to_dict()["not_read"] == list(hosts(3))


def test_a_fleet_without_gpus_or_nvlink_names_nothing():
    bare = NodeHealth((), False, (), "", (), True)
    v = judge(hosts(3), {h: bare for h in hosts(3)}, {})
    assert v.ok


# --- verify --fleet --json through the fake System ------------------------------------------

from _core_fixtures import ROOT, facts  # noqa: E402
from _verify_fixtures import FakeSystem  # noqa: E402


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> Dict[str, str]:
    """What the program prints on a healthy 8-GPU instance with two ports, and on ones with
    an uncorrected ECC error, NVLinks down, a port that went down, an nvidia-smi without its
    driver: the real program's lines."""
    base = tmp_path_factory.mktemp("health")
    out = {}
    for name, smi, downed in (("healthy", "h100x8", 0), ("ecc", "h100x8-ecc", 0),
                              ("links", "h100x8-links-down", 0), ("downed", "h100x8", 4),
                              ("no-driver", "no-driver", 0)):
        root = ib_tree(base / name, {("mlx5_0", "1"): ZERO,
                                     ("mlx5_1", "1"): {**ZERO, "link_downed": downed}})
        out[name] = run_program(root, smi)
    return out


def run_cli(monkeypatch, capsys, health: Dict[str, tuple], n: int = 8, as_json: bool = True):
    """`verify --fleet --json` on n1..nN (this instance n1), each host's health program
    answered with health[host] (rc, output), the others' "healthy"."""
    import hpcwizard.verify.fleetcheck as fc
    from hpcwizard.cli import main

    names = [f"n{i}" for i in range(1, n + 1)]

    def health_of(p):
        return health.get(p.host or "n1")

    sys_ = FakeSystem({h: "ok" for h in names}, {
        P.RouteTo: (0, "10.0.0.2 dev eth0 src 10.0.0.1 uid 0 \\    cache \n"),
        lambda p: isinstance(p, P.TcpBwAt) and "--receive" in p.args:
            (0, f"HPCWIZARD-TCPBW-LISTEN port=40001 token={FakeSystem.TOKEN}\n"),
        lambda p: isinstance(p, P.TcpBwAt) and "--send" in p.args:
            (0, FakeSystem.tcp_bw_line(9.0))}, here="n1")
    orig = sys_.answer
    sys_.answer = lambda p: health_of(p) if isinstance(p, P.ReadHealth) else orig(p)
    monkeypatch.setattr(fc, "System", lambda: sys_)
    monkeypatch.setattr("hpcwizard.commands.configure.facts_here",
                        lambda sysroot, **_: facts(user=ROOT))
    rc = main(["verify", "--framework", "mpi", "--network", "tcp", "--manual",
               "--hosts", ",".join(names), "--fleet", *(["--json"] if as_json else [])])
    out = capsys.readouterr().out
    return rc, json.loads(out) if as_json else out, sys_


def test_cli_names_the_one_odd_node_of_eight(monkeypatch, capsys, outputs):
    good = (0, outputs["healthy"])
    health = {f"n{i}": good for i in range(1, 9)}
    health["n6"] = (0, outputs["ecc"])
    rc, data, sys_ = run_cli(monkeypatch, capsys, health)
    assert rc == 1 and data["ok"] is False and data["pairs_ok"] is True
    h = data["health"]
    assert h["ok"] is False and h["not_read"] == []
    assert [(f["host"], f["kind"], f["subject"]) for f in h["findings"]] == [
        ("n6", "ecc-uncorrected", "GPU 2 (00000000:3A:00.0)"),
        ("n6", "remap-pending", "GPU 2 (00000000:3A:00.0)"),
        ("n6", "remap-failed", "GPU 6 (00000000:BA:00.0)")]
    assert h["read"]["n1"]["gpus"][0]["bus_id"] == "00000000:18:00.0"
    # every host read once, in parallel with the job's port; this one without SSH
    reads = sys_.asked(P.ReadHealth)
    assert sorted(p.host for p in reads) == [""] + [f"n{i}" for i in range(2, 9)]
    assert all(p.port == 2222 for p in reads)
    assert sys_.probes.index(reads[-1]) < sys_.probes.index(sys_.asked(P.TcpBwAt)[0])


@pytest.mark.parametrize("odd,kind", [("links", "nvlink-fewer"), ("downed", "link-downed")])
def test_cli_names_links_down_and_a_flapping_port(monkeypatch, capsys, outputs, odd, kind):
    health = {f"n{i}": (0, outputs["healthy"]) for i in range(1, 9)}
    health["n3"] = (0, outputs[odd])
    rc, data, _sys = run_cli(monkeypatch, capsys, health)
    assert rc == 1
    assert [(f["host"], f["kind"]) for f in data["health"]["findings"]] == [("n3", kind)]


def test_cli_names_nothing_when_all_are_alike(monkeypatch, capsys, outputs):
    health = {f"n{i}": (0, outputs["healthy"]) for i in range(1, 9)}
    rc, data, _sys = run_cli(monkeypatch, capsys, health)
    assert rc == 0 and data["ok"] is True
    assert data["health"]["findings"] == [] and len(data["health"]["read"]) == 8


def test_cli_fails_a_fleet_whose_nvidia_smi_fails_everywhere(monkeypatch, capsys, outputs):
    """The real program's lines with the stand-in nvidia-smi that has no driver, on all 8."""
    health = {f"n{i}": (0, outputs["no-driver"]) for i in range(1, 9)}
    rc, data, _sys = run_cli(monkeypatch, capsys, health)
    assert rc == 1 and data["ok"] is False and data["pairs_ok"] is True
    assert {(f["host"], f["kind"]) for f in data["health"]["findings"]} == {
        (f"n{i}", "gpus-unread") for i in range(1, 9)}


def test_cli_fails_a_fleet_whose_health_cannot_be_read_anywhere(monkeypatch, capsys, outputs):
    health = {f"n{i}": (255, f"root@n{i}: Permission denied (publickey).")
              for i in range(1, 9)}
    health["n1"] = (1, "bash: line 1: syntax error")  # this instance: no SSH, still unread
    rc, data, _sys = run_cli(monkeypatch, capsys, health)
    assert rc == 1 and data["ok"] is False and data["health"]["ok"] is False
    assert data["health"]["not_read"] == [f"n{i}" for i in range(1, 9)]
    assert data["health"]["read"] == {}


def test_cli_names_a_host_that_cannot_be_read(monkeypatch, capsys, outputs):
    health = {f"n{i}": (0, outputs["healthy"]) for i in range(1, 9)}
    health["n8"] = (255, "root@n8: Permission denied (publickey).")
    health["n2"] = (0, outputs["healthy"].replace("HPCWIZARD-HEALTH\tend\n", ""))
    rc, data, _sys = run_cli(monkeypatch, capsys, health)
    assert rc == 1 and data["health"]["not_read"] == ["n2", "n8"]
    seen = {f["host"]: f["seen"] for f in data["health"]["findings"]}
    assert seen["n8"] == "root@n8: Permission denied (publickey)."


def test_the_terminal_report_one_line_per_odd_node(monkeypatch, capsys, outputs):
    from hpcwizard.report_fleet import health_lines

    read = {h: parse_health(outputs["healthy"]) for h in hosts()}
    assert health_lines(judge(hosts(), read, {})) == [
        "8 instances alike: 8 GPUs, 144 NVLinks active, 2 InfiniBand ports"]
    read["n4"] = parse_health(outputs["links"])
    read["n6"] = parse_health(outputs["ecc"])
    lines = health_lines(judge(hosts(), read, {"n8": "ssh: \x1b[31mrefused"}))
    nodes = [line for line in lines if not line.startswith("  ")]
    assert nodes == [
        "NODE n4: 142 NVLinks active, the others 144 (GPU 3 16/18)",
        "NODE n6: GPU 2 (00000000:3A:00.0): 4 uncorrected ECC errors since the driver loaded; "
        "GPU 2 (00000000:3A:00.0): memory rows wait to be remapped; "
        "GPU 6 (00000000:BA:00.0): row remapping failed",
        "NOT READ n8: ssh: \\x1b[31mrefused"]
    assert any("ask the platform to replace the GPU" in line for line in lines)


def test_cli_text_says_the_node_then_the_pairs(monkeypatch, capsys, outputs):
    health = {f"n{i}": (0, outputs["healthy"]) for i in range(1, 9)}
    health["n2"] = (0, outputs["downed"])
    rc, text, _sys = run_cli(monkeypatch, capsys, health, as_json=False)
    assert rc == 1
    node = text.index("NODE n2: mlx5_1:1: link_downed 4")
    assert "  Port mlx5_1:1 lost its link 4 times" in text
    assert node < text.index("TCP Gb/s, row → column")
    assert "No slow node or link" in text and "instances alike" not in text


class MeetingSystem(FakeSystem):
    """Each health read waits until `parties` of them are in flight at once: read one after
    another, the first would wait alone (and the barrier break at its time-out)."""

    def __init__(self, peers, parties, out):
        super().__init__(peers, here="n1")
        self.barrier = threading.Barrier(parties, timeout=60)
        self.broken = False
        self.out = out

    def answer(self, p):
        try:
            self.barrier.wait()
        except threading.BrokenBarrierError:
            self.broken = True
        return 0, self.out


def test_the_reads_run_at_once_and_never_more_than_asked(outputs):
    from hpcwizard.catalog import load_catalog
    from hpcwizard.choices import make_choices
    from hpcwizard.hosts import Hosts
    from hpcwizard.plan import build_plan
    from hpcwizard.verify.context import Ctx
    from hpcwizard.verify.fleetcheck import read_health

    f = facts(user=ROOT)
    plan = build_plan(f, make_choices(framework="mpi", network="tcp", mode="manual"),
                      load_catalog())
    system = MeetingSystem({h: "ok" for h in hosts()}, 4, outputs["healthy"])
    v = read_health(Ctx(plan, f, system, Hosts(hosts(), "--hosts")), max_workers=4)
    assert not system.broken and system.max_inflight == 4  # 8 hosts, 4 at a time
    assert v.ok and list(v.read) == list(hosts())


def test_every_kind_the_judge_names_is_a_known_one():
    from hpcwizard.verify.healthjudge import KINDS

    named = {kind for _case, _odd, found in CASES for _h, kind, _s in found}
    assert named | {"not-read"} == set(KINDS)


def test_digits_of_other_scripts_in_the_output_are_no_numbers():
    """str.isdigit() takes '²' and '٣'; int() refuses the one and reads the other: another
    host's odd output is unknown, never a traceback or a made-up count."""
    from hpcwizard.verify.nodehealth import TAG

    text = (f"{TAG}\tib\tmlx5_0\t1\tlink_downed\t²\n"
            f"{TAG}\tib\tmlx5_0\t1\tsymbol_error\t٣\n"
            f"{TAG}\tib\tmlx5_0\t1\tport_rcv_errors\t7\n"
            f"{TAG}\tgpu-fields\tindex,pci.bus_id,ecc.errors.uncorrected.volatile.total\n"
            f"{TAG}\tgpu\t²,00000000:3A:00.0,0\n"
            f"{TAG}\tend\n")
    node = parse_health(text)
    assert node.complete and node.gpus == ()
    assert [dict(p.counters) for p in node.ports] == [{"port_rcv_errors": 7}]
