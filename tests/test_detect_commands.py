"""detect() with fake commands first (and alone) on PATH: outputs, failures, hangs, concurrency."""
from __future__ import annotations

import os
import shlex
import shutil
import threading
import time
from pathlib import Path

import pytest

from hpcwizard.detect import core, detect, user as user_probe
from hpcwizard.detect.core import Probe

FIX = Path(__file__).parent / "fixtures"
OUT = FIX / "outputs"
SYSROOTS = FIX / "sysroots"
SLEEP = shutil.which("sleep") or "/bin/sleep"
CAT = shutil.which("cat") or "/bin/cat"


def out(name: str) -> str:
    return (OUT / name).read_text()


def _case_pattern(pattern: str) -> str:
    """A `case` pattern: literal text quoted, each `*` left as a glob."""
    return "*".join(shlex.quote(part) if part else "" for part in pattern.split("*")) or "''"


class FakeBin:
    """A directory of /bin/sh scripts that answer like the real programs would."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)

    def add(self, name: str, *cases) -> None:
        """cases: (glob on "$*", stdout, stderr, rc[, delay seconds]); no match -> exit 127."""
        lines = ["#!/bin/sh", 'case "$*" in']
        for pattern, stdout, stderr, rc, *delay in cases:
            body = []
            if delay and delay[0]:
                body.append(f"{SLEEP} {delay[0]}")
            if stdout:
                body.append(f"printf '%s' {shlex.quote(stdout)}")
            if stderr:
                body.append(f"printf '%s' {shlex.quote(stderr)} >&2")
            body.append(f"exit {rc}")
            lines.append(f"  {_case_pattern(pattern)}) " + "; ".join(body) + " ;;")
        lines += ["esac", "exit 127", ""]
        script = self.path / name
        script.write_text("\n".join(lines))
        script.chmod(0o755)


@pytest.fixture
def fakebin(tmp_path, monkeypatch):
    fb = FakeBin(tmp_path / "bin")
    monkeypatch.setenv("PATH", str(fb.path))  # only the fakes: no real tool leaks in
    return fb


def machine(tmp_path: Path, base: str = "debian12") -> Path:
    """A writable copy of a fixture sysroot."""
    dst = tmp_path / "root"
    shutil.copytree(SYSROOTS / base, dst, symlinks=True)
    return dst


def add_full_toolset(fb: FakeBin) -> None:
    fb.add("ssh", ("-V", "", out("ssh-V_debian12.txt"), 0))
    fb.add("sshd", ("-V", "", out("sshd-V_ubuntu2204.txt"), 1))
    fb.add("mpirun", ("--version", out("mpirun_openmpi-4.1.4.txt"), "", 0))
    fb.add("ompi_info", ("", out("ompi_info_4.1.4_ucx.txt"), "", 0))
    fb.add("ucx_info", ("-v", out("ucx_info-v_1.13.1.txt"), "", 0), ("-d", out("ucx_info-d.txt"), "", 0))
    fb.add("nvidia-smi", ("--query-gpu=*", out("nvidia-smi_query_2xh100.csv"), "", 0),
           ("", out("nvidia-smi_table_2xh100.txt"), "", 0))
    fb.add("ibv_devinfo", ("", out("ibv_devinfo_mlx5_hdr.txt"), "", 0))
    fb.add("sudo", ("-n true", "", "", 0))
    fb.add("bash", ("-c ulimit -l", "unlimited\n", "", 0))
    fb.add("python3", ("-c *", out("torch_probe_cuda.txt"), "", 0))
    fb.add("dpkg-query", ("*", out("dpkg-query.txt"), "", 0))
    fb.add("ip", ("-j addr", out("ip-j-addr.json"), "", 0))


def test_everything_found_through_commands(tmp_path, fakebin):
    add_full_toolset(fakebin)
    r = machine(tmp_path)
    (r / "var/lib/dpkg").mkdir(parents=True)
    (r / "var/lib/dpkg/status").write_text("Package: dpkg\n")
    f = detect(str(r), run_commands=True)
    s = f.software
    assert (s.ssh_version, s.sshd_path, s.sshd_version) == ("OpenSSH_9.2p1", "/usr/sbin/sshd", "OpenSSH_8.9p1")
    assert (s.mpi_flavour, s.mpi_version) == ("openmpi", "4.1.4")
    assert s.ompi_has_ucx and "vader" in s.ompi_btl
    assert s.ucx_version == "1.13.1" and "rc_mlx5" in s.ucx_transports
    assert (s.torch_version, s.torch_cuda, s.nccl_version) == ("2.3.1+cu121", "12.1", "2.20.5")
    assert s.packages == {"openssh-client": "1:9.2p1-2+deb12u3", "openmpi-bin": "4.1.4-3+b1",
                          "libucx0": "1.13.1-1"}
    assert [g.index for g in f.gpus] == [0, 1]
    assert all(g.cuda == "13.1" and g.memory_mib == 81559 and g.driver == "590.48.01" for g in f.gpus)
    assert [i.name for i in f.ifaces] == ["lo", "eth0", "ib0"]  # from `ip -j addr`
    (h,) = f.hcas  # the tree has no /sys/class/infiniband: ibv_devinfo supplies the HCA
    assert h.name == "mlx5_0" and h.ports[0].active
    assert any("read from ibv_devinfo" in n for n in f.notes)
    assert f.user.sudo == ("root" if os.getuid() == 0 else "nopasswd")
    assert not any(n.startswith("Commands were not run") for n in f.notes)


def test_sysfs_and_ibv_devinfo_merge(tmp_path, fakebin):
    fakebin.add("ibv_devinfo", ("", out("ibv_devinfo_mlx5_hdr.txt"), "", 0))
    r = machine(tmp_path, "rdma-ib-hdr")
    (r / "sys/class/infiniband/mlx5_0/fw_ver").unlink()
    f = detect(str(r), run_commands=True)
    (h,) = f.hcas
    assert h.fw_version == "20.39.1002"  # filled from ibv_devinfo
    assert h.vendor_id == "0x15b3"  # sysfs wins where it has a value
    assert h.ports[0].rate_gbps == 200.0


@pytest.mark.parametrize(
    "fixture, flavour, version",
    [("mpirun_mpich-4.0.txt", "mpich", "4.0"), ("mpirun_intelmpi-2021.10.txt", "intelmpi", "2021.10")],
)
def test_other_mpi_flavours(tmp_path, fakebin, fixture, flavour, version):
    fakebin.add("mpirun", ("--version", out(fixture), "", 0))
    f = detect(str(machine(tmp_path)), run_commands=True)
    assert (f.software.mpi_flavour, f.software.mpi_version) == (flavour, version)
    assert f.software.ompi_pml == ()


def test_open_mpi_without_ucx(tmp_path, fakebin):
    fakebin.add("mpirun", ("--version", out("mpirun_openmpi-4.1.4.txt"), "", 0))
    fakebin.add("ompi_info", ("", out("ompi_info_4.1.2_noucx.txt"), "", 0))
    f = detect(str(machine(tmp_path)), run_commands=True)
    assert f.software.mpi_flavour == "openmpi"
    assert not f.software.ompi_has_ucx


def test_a_plan_without_ucx_runs_no_ompi_info(tmp_path, fakebin):
    """ompi_info costs a quarter of a second and only MPI over InfiniBand reads its lists:
    mpi_components=False leaves them empty and runs no ompi_info, while mpirun still gives
    the version (and an MPI that mpirun does not name is still found through ompi_info)."""
    marker = tmp_path / "ompi_info-ran"
    fakebin.add("mpirun", ("--version", out("mpirun_openmpi-4.1.4.txt"), "", 0))
    fakebin.add("ompi_info", ("", out("ompi_info_4.1.4_ucx.txt"), "", 0))
    wrapper = fakebin.path / "ompi_info"
    wrapper.rename(fakebin.path / "ompi_info.real")
    wrapper.write_text(f"#!/bin/sh\n: > {marker}\nexec {fakebin.path / 'ompi_info.real'} \"$@\"\n")
    wrapper.chmod(0o755)
    f = detect(str(machine(tmp_path)), run_commands=True, mpi_components=False)
    assert (f.software.mpi_flavour, f.software.mpi_version) == ("openmpi", "4.1.4")
    assert f.software.ompi_pml == () and not marker.exists()
    (tmp_path / "again").mkdir()
    f = detect(str(machine(tmp_path / "again")), run_commands=True)
    assert f.software.ompi_has_ucx and marker.exists()


def test_nothing_installed(tmp_path, fakebin):
    f = detect(str(machine(tmp_path, "centos7")), run_commands=True)
    s = f.software
    assert (s.ssh_version, s.mpi_flavour, s.ucx_version, s.torch_version) == ("", "", "", "")
    assert s.packages is None
    assert f.gpus == ()
    assert any("nvidia-smi is not installed" in n for n in f.notes)
    assert any("No python3" in n for n in f.notes)
    assert any("Installed packages are unknown" in n for n in f.notes)


def test_nvidia_smi_failing_without_devices_is_a_note(tmp_path, fakebin):
    fakebin.add("nvidia-smi", ("*", out("nvidia-smi_failed.txt"), "", 9))
    f = detect(str(machine(tmp_path)), run_commands=True)
    assert f.gpus == ()
    assert any("couldn't communicate with the NVIDIA driver" in n for n in f.notes)
    assert f.warnings == ()


def test_nvidia_smi_failing_with_devices_is_a_warning(tmp_path, fakebin):
    fakebin.add("nvidia-smi", ("*", out("nvidia-smi_failed.txt"), "", 9))
    r = machine(tmp_path)
    (r / "dev").mkdir()
    (r / "dev/nvidia0").touch()
    f = detect(str(r), run_commands=True)
    assert f.gpus == ()
    assert any("couldn't communicate" in w and "cannot be used" in w for w in f.warnings)


def test_ibv_devinfo_no_devices_is_not_an_error(tmp_path, fakebin):
    fakebin.add("ibv_devinfo", ("", "", out("ibv_devinfo_none.txt"), 255))
    f = detect(str(machine(tmp_path)), run_commands=True)
    assert f.hcas == ()
    assert f.warnings == ()
    assert not any("ibv_devinfo" in n for n in f.notes)


def test_ibv_devinfo_sees_nothing_but_kernel_has_hca(tmp_path, fakebin):
    fakebin.add("ibv_devinfo", ("", "", out("ibv_devinfo_none.txt"), 255))
    f = detect(str(machine(tmp_path, "rdma-ib-hdr")), run_commands=True)
    assert len(f.hcas) == 1
    assert any("ibv_devinfo sees no device" in w for w in f.warnings)


def test_ibv_devinfo_only_two_hcas_without_uverbs(tmp_path, fakebin):
    fakebin.add("ibv_devinfo", ("", out("ibv_devinfo_two_hcas.txt"), "", 0))
    f = detect(str(machine(tmp_path)), run_commands=True)
    assert [p.name for p in f.active_ports] == ["mlx4_1:1", "rocep1s0f0:1"]
    assert any("started without the InfiniBand devices" in w for w in f.warnings)


@pytest.mark.parametrize("limit, warned", [("64\n", True), ("unlimited\n", False)])
def test_memlock_limit_with_rdma_ports(tmp_path, fakebin, limit, warned):
    fakebin.add("bash", ("-c ulimit -l", limit, "", 0))
    f = detect(str(machine(tmp_path, "rdma-ib-hdr")), run_commands=True)
    assert f.rdma.memlock_unlimited is (not warned)
    assert f.rdma.memlock_kib == (64 if warned else None)
    assert any("64 KiB, not unlimited" in w for w in f.warnings) is warned


def test_memlock_limit_without_rdma_is_no_warning(tmp_path, fakebin):
    fakebin.add("bash", ("-c ulimit -l", "64\n", "", 0))
    f = detect(str(machine(tmp_path)), run_commands=True)
    assert f.rdma.memlock_kib == 64
    assert f.warnings == ()


def test_rpm_packages(tmp_path, fakebin):
    fakebin.add("rpm", ("*", out("rpm-qa.txt"), "", 0))
    r = machine(tmp_path, "rocky9")
    (r / "var/lib/rpm").mkdir(parents=True)
    (r / "var/lib/rpm/rpmdb.sqlite").touch()
    f = detect(str(r), run_commands=True)
    assert f.software.packages is not None and f.software.packages["ucx"] == "1.15.0-2.el9"


def test_torch_not_installed_is_empty_without_note(tmp_path, fakebin):
    fakebin.add("python3", ("-c *", out("torch_probe_missing.txt"), "", 0))
    f = detect(str(machine(tmp_path)), run_commands=True)
    assert f.software.torch_version == ""
    assert not any("torch" in n.lower() for n in f.notes)


def test_torch_broken_import_is_a_note(tmp_path, fakebin):
    fakebin.add("python3", ("-c *", 'HPCWIZARD-TORCH {"torch": "", "cuda": "", "nccl": "", '
                            '"error": "OSError: libcudnn.so.9: cannot open shared object file"}\n', "", 0))
    f = detect(str(machine(tmp_path)), run_commands=True)
    assert any("libcudnn" in n for n in f.notes)


# --- sudo --------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "rc, stderr, mode",
    [(0, "", "nopasswd"), (1, "sudo: a password is required\n", "password"),
     (1, "ana is not in the sudoers file.  This incident will be reported.\n", "denied")],
)
def test_sudo_modes_for_a_normal_user(tmp_path, fakebin, monkeypatch, rc, stderr, mode):
    fakebin.add("sudo", ("-n true", "", stderr, rc))
    monkeypatch.setattr(user_probe.os, "getuid", lambda: 4321)
    f = detect(str(machine(tmp_path)), run_commands=True)
    assert f.user.uid == 4321
    assert f.user.sudo == mode


def test_no_sudo_for_a_normal_user(tmp_path, fakebin, monkeypatch):
    monkeypatch.setattr(user_probe.os, "getuid", lambda: 4321)
    assert detect(str(machine(tmp_path)), run_commands=True).user.sudo == "none"


def _logging_sudo(fb: FakeBin, log: Path, validate_rc: int, validate_err: str) -> None:
    """sudo that writes each question to log, and answers -n -v with validate_rc."""
    script = fb.path / "sudo"
    script.write_text("#!/bin/sh\n"
                      f'echo "$*" >> {shlex.quote(str(log))}\n'
                      f'if [ "$*" = "-n -v" ]; then printf %s {shlex.quote(validate_err)} >&2; '
                      f"exit {validate_rc}; fi\nexit 0\n")
    script.chmod(0o755)


@pytest.mark.parametrize("uid, asked", [
    (4321, ["-n -v"]),  # denied: the second question is not asked, ahead or later
    (0, []),  # root asks sudo nothing
])
def test_sudo_is_asked_what_it_was_before_and_once(tmp_path, fakebin, monkeypatch, uid, asked):
    log = tmp_path / "sudo.log"
    log.write_text("")
    _logging_sudo(fakebin, log, 1,
                  "ana is not in the sudoers file.  This incident will be reported.\n")
    monkeypatch.setattr(user_probe.os, "getuid", lambda: uid)
    f = detect(str(machine(tmp_path)), run_commands=True)
    assert log.read_text().splitlines() == asked
    assert f.user.sudo == ("denied" if uid else "root")


def test_a_command_a_probe_ran_is_not_started_again(tmp_path, fakebin):
    """Whoever comes first: a probe taken on by another thread may ask before the start."""
    from hpcwizard.detect.base import Context

    log = tmp_path / "sudo.log"
    log.write_text("")
    _logging_sudo(fakebin, log, 0, "")
    ctx = Context(run_commands=True)
    assert ctx.run(["sudo", "-n", "-v"]).ok
    ctx.start(["sudo", "-n", "-v"])
    assert ctx.ahead.waiting() == []  # not started again
    ctx.stop_started()
    ctx.start(["sudo", "-n", "true"])  # after stop(): nothing starts, ahead or asked for
    assert ctx.run(["sudo", "-n", "true"]) is None
    assert log.read_text().splitlines() == ["-n -v"] and ctx.ahead.waiting() == []


def test_a_start_held_up_holds_up_nothing_else(tmp_path, fakebin, monkeypatch):
    """A program whose start hangs (its binary on a hung mount) holds up neither the other
    commands nor stop(); once it starts after stop() it is killed at once."""
    from hpcwizard.detect import base
    from hpcwizard.detect.base import Context

    log = tmp_path / "ran.log"
    log.write_text("")
    for name in ("ssh", "ip"):
        script = fakebin.path / name
        script.write_text(f"#!/bin/sh\necho {name} >> {shlex.quote(str(log))}\n{SLEEP} 60\n")
        script.chmod(0o755)
    release = threading.Event()
    real_start = base.start

    def slow_start(argv, *args, **kwargs):
        if argv[0] == "ssh":
            release.wait(60)
        return real_start(argv, *args, **kwargs)

    monkeypatch.setattr(base, "start", slow_start)
    ctx = Context(run_commands=True, timeout=30.0)
    try:
        starter = threading.Thread(target=ctx.start, args=(("ssh", "-V"),), daemon=True)
        starter.start()
        while ("ssh", "-V") not in ctx.ahead.waiting():
            time.sleep(0.02)
        ctx.start(("ip", "-j", "addr"))  # not held up by ssh's start
        assert ("ip", "-j", "addr") in ctx.ahead.waiting()
        ctx.stop_started()  # returns though ssh's start is still held up
        assert not release.is_set()
    finally:
        release.set()
    starter.join(30)
    assert not starter.is_alive()
    assert _ends(str(fakebin.path / "ssh")) and _ends(str(fakebin.path / "ip"))
    assert "ssh" not in log.read_text().split()  # it started after stop(): killed unborn


# --- failures, hangs, concurrency --------------------------------------------------------

def test_hanging_command_becomes_a_note_and_detect_returns(tmp_path, fakebin):
    fakebin.add("ssh", ("-V", "", out("ssh-V_debian12.txt"), 0))
    fakebin.add("mpirun", ("*", "", "", 0, 30))
    start = time.monotonic()
    f = detect(str(machine(tmp_path)), run_commands=True, timeout=1.0)
    assert time.monotonic() - start < 4
    assert f.software.mpi_flavour == ""
    assert any("mpirun --version" in n and "did not finish within 1 s" in n for n in f.notes)
    assert f.software.ssh_version == "OpenSSH_9.2p1"  # the other probes were not held up


def test_the_commands_started_first_run_side_by_side(tmp_path, fakebin):
    # Each of these takes a second; run one after another they would take over 6 s.
    fakebin.add("ssh", ("-V", "", out("ssh-V_debian12.txt"), 0, 1))
    fakebin.add("mpirun", ("--version", out("mpirun_mpich-4.0.txt"), "", 0, 1))
    fakebin.add("ucx_info", ("-v", out("ucx_info-v_1.13.1.txt"), "", 0, 1), ("-d", "", "", 0, 1))
    fakebin.add("nvidia-smi", ("--query-gpu=*", out("nvidia-smi_query_2xh100.csv"), "", 0, 1),
                ("", out("nvidia-smi_table_2xh100.txt"), "", 0, 1))
    fakebin.add("ibv_devinfo", ("", "", out("ibv_devinfo_none.txt"), 255, 1))
    fakebin.add("python3", ("-c *", out("torch_probe_cpu.txt"), "", 0))
    fakebin.add("bash", ("-c ulimit -l", "unlimited\n", "", 0))
    fakebin.add("ip", ("-j addr", out("ip-j-addr.json"), "", 0, 1))
    start = time.monotonic()
    f = detect(str(machine(tmp_path)), run_commands=True, timeout=5.0)
    elapsed = time.monotonic() - start
    assert elapsed < 3.5, elapsed
    assert f.software.mpi_flavour == "mpich" and len(f.gpus) == 2 and f.software.torch_version
    assert all(g.cuda == "13.1" for g in f.gpus)  # the table, started beside the query
    assert [i.name for i in f.ifaces] == ["lo", "eth0", "ib0"]


def test_each_program_runs_once_and_one_nobody_asks_for_is_stopped(tmp_path, fakebin,
                                                                   monkeypatch):
    """A program started ahead is not run again when its probe asks; one no probe asks for
    (ompi_info, where mpirun is MPICH's) is killed before detect returns, not left behind."""
    from hpcwizard.detect import base

    log = tmp_path / "ran.log"
    for name, reply in (("ssh", "printf '%s' 'OpenSSH_9.2p1 Debian-2, OpenSSL 3.0.11' >&2"),
                        ("ip", f"{CAT} {shlex.quote(str(OUT / 'ip-j-addr.json'))}"),
                        ("mpirun", f"{CAT} {shlex.quote(str(OUT / 'mpirun_mpich-4.0.txt'))}")):
        script = fakebin.path / name
        # PATH holds only the fakes: what they use besides the shell's builtins, by full path
        script.write_text(f"#!/bin/sh\necho {name} >> {shlex.quote(str(log))}\n{reply}\n")
        script.chmod(0o755)
    ompi_info = fakebin.path / "ompi_info"
    ompi_info.write_text(f"#!/bin/sh\n{SLEEP} 60\n")  # sh stays, its script on its cmdline
    ompi_info.chmod(0o755)
    started = []
    real_start = base.start

    def recording_start(argv, *args, **kwargs):
        res = real_start(argv, *args, **kwargs)
        if res is not None:
            started.append(argv[0])
        return res

    monkeypatch.setattr(base, "start", recording_start)
    f = detect(str(machine(tmp_path)), run_commands=True, timeout=30.0)
    assert sorted(log.read_text().split()) == ["ip", "mpirun", "ssh"]
    assert f.software.ssh_version == "OpenSSH_9.2p1" and f.software.mpi_flavour == "mpich"
    assert [i.name for i in f.ifaces] == ["lo", "eth0", "ib0"]
    assert "ompi_info" in started  # it was started ahead, and no probe asked for it
    assert _ends(str(ompi_info))


def _ends(script: str) -> bool:
    """No process runs script, within 10 s: a kill is sent without waiting for it to land."""
    end = time.monotonic() + 10
    while _running(script):
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def _running(script: str) -> list:
    """The pids of processes running script (not zombies)."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if script.encode() in f.read().split(b"\0"):
                    pids.append(int(entry))
        except (OSError, ValueError):
            pass
    return pids


def test_probe_that_raises_becomes_a_note(tmp_path, monkeypatch):
    def boom(ctx, found):
        found.set("gpus", "garbage that must not land in Facts")
        raise RuntimeError("boom")

    probes = [p if p.name != "gpu" else Probe("gpu", "the GPUs", boom) for p in core.PROBES]
    monkeypatch.setattr(core, "PROBES", probes)
    f = detect(str(SYSROOTS / "debian12"))
    assert f.gpus == ()
    assert "Could not check the GPUs: RuntimeError: boom" in f.notes
    assert f.os.family == "debian"  # everything else still detected


@pytest.fixture
def stuck_probe():
    """A probe that never finishes by itself (a read from a hung file system), and whether
    it is still stuck; released when the test ends."""
    release = threading.Event()
    entered = threading.Event()

    def stuck(ctx, found):
        entered.set()
        release.wait(60)
        found.set("cpus", 999)

    yield Probe("stuck", "the stuck thing", stuck), release
    release.set()


def test_probe_that_never_finishes_is_cut_off(monkeypatch, stuck_probe):
    probe, release = stuck_probe
    monkeypatch.setattr(core, "PROBES", list(core.PROBES) + [probe])
    f = detect(str(SYSROOTS / "debian12"), timeout=0.2)  # deadline: 4 x 0.2 + 1 = 1.8 s
    assert not release.is_set()  # detect returned while the probe was still stuck
    assert any("the stuck thing did not finish" in n for n in f.notes)
    assert f.cpus == 4


def test_a_stuck_probe_does_not_hold_up_the_ones_after_it(tmp_path, fakebin, monkeypatch,
                                                          stuck_probe):
    """The probes run in turn; the ones after a stuck one are taken on by another thread, and
    the programs started for them at the start are read, though their time-out has passed
    by the time they are asked for."""
    fakebin.add("ssh", ("-V", "", out("ssh-V_debian12.txt"), 0))
    fakebin.add("mpirun", ("--version", out("mpirun_mpich-4.0.txt"), "", 0))
    fakebin.add("ip", ("-j addr", out("ip-j-addr.json"), "", 0))
    probe, release = stuck_probe
    monkeypatch.setattr(core, "PROBES", [probe] + list(core.PROBES))
    # timeout 1 s: the others are taken on after a quarter of a second, the deadline is 5 s
    f = detect(str(machine(tmp_path)), run_commands=True, timeout=1.0)
    assert not release.is_set()
    assert any("the stuck thing did not finish" in n for n in f.notes)
    assert f.cpus == 4 and f.os.family == "debian"  # every other probe still answered
    assert f.software.ssh_version == "OpenSSH_9.2p1" and f.software.mpi_flavour == "mpich"
    assert [i.name for i in f.ifaces] == ["lo", "eth0", "ib0"]
    assert not any("did not finish" in n for n in f.notes if "stuck thing" not in n)


def test_many_hung_programs_cost_only_their_own_probes(tmp_path, fakebin):
    """Six programs hang: each of their probes waits out its own time-out side by side with
    the others, and every probe still answers before the deadline (4 x 1 + 1 s)."""
    for name in ("nvidia-smi", "ibv_devinfo", "mpirun", "ucx_info", "ssh", "ip"):
        fakebin.add(name, ("*", "", "", 0, 30))
    fakebin.add("dpkg-query", ("*", out("dpkg-query.txt"), "", 0))
    r = machine(tmp_path)
    (r / "var/lib/dpkg").mkdir(parents=True, exist_ok=True)
    (r / "var/lib/dpkg/status").write_text("Package: dpkg\n")
    f = detect(str(r), run_commands=True, timeout=1.0)
    late = [n for n in f.notes if "did not finish within 1 s" in n]
    assert len(late) == 6, late  # one for each program: `nvidia-smi ...` ... `ip -j addr`
    assert not any(n.startswith("Checking") and "did not finish" in n for n in f.notes)
    assert f.software.packages["openmpi-bin"] == "4.1.4-3+b1"  # after them, still answered
    assert f.cpus == 4 and f.os.family == "debian"
    for name in ("nvidia-smi", "ibv_devinfo", "mpirun", "ucx_info", "ssh", "ip"):
        assert _ends(str(fakebin.path / name)), name


def test_a_hung_program_costs_only_its_own_facts(tmp_path, fakebin):
    """nvidia-smi hangs (a wedged driver): its probe waits out the time-out, and the probes
    after it still get the programs that finished meanwhile."""
    fakebin.add("nvidia-smi", ("*", "", "", 0, 30))
    fakebin.add("ssh", ("-V", "", out("ssh-V_debian12.txt"), 0))
    fakebin.add("mpirun", ("--version", out("mpirun_mpich-4.0.txt"), "", 0))
    fakebin.add("ucx_info", ("-v", out("ucx_info-v_1.13.1.txt"), "", 0), ("-d", "", "", 0))
    fakebin.add("ip", ("-j addr", out("ip-j-addr.json"), "", 0))
    f = detect(str(machine(tmp_path)), run_commands=True, timeout=1.0)
    late = [n for n in f.notes if "did not finish" in n]
    assert len(late) == 1 and "nvidia-smi" in late[0], late
    assert f.software.ssh_version == "OpenSSH_9.2p1" and f.software.mpi_flavour == "mpich"
    assert f.software.ucx_version == "1.13.1" and f.gpus == ()
    assert [i.name for i in f.ifaces] == ["lo", "eth0", "ib0"]
    assert _ends(str(fakebin.path / "nvidia-smi"))  # both of its runs are gone


def test_unknown_fact_from_a_probe_is_a_note_not_a_crash(monkeypatch):
    def typo(ctx, found):
        found.set("software.mpi_flavor", "openmpi")
        found.set("cpu_count", 3)

    monkeypatch.setattr(core, "PROBES", list(core.PROBES) + [Probe("typo", "a typo", typo)])
    f = detect(str(SYSROOTS / "debian12"))
    assert f.software.mpi_flavour == ""
    assert "Internal: a probe reported an unknown fact 'software.mpi_flavor'." in f.notes
    assert "Internal: a probe reported an unknown fact 'cpu_count'." in f.notes


def test_a_program_found_missing_ahead_is_not_looked_up_again(fakebin, monkeypatch):
    from hpcwizard.detect import base
    from hpcwizard.detect.base import Context

    ctx = Context(run_commands=True)
    ctx.start(["ssh", "-V"])  # PATH holds only the (empty) fakes
    assert ctx.ahead.waiting() == [("ssh", "-V")]

    def no_second_look(*args, **kwargs):
        raise AssertionError("looked up again")

    monkeypatch.setattr(base, "run", no_second_look)
    assert ctx.run(["ssh", "-V"]) is None and ctx.ahead.waiting() == []


def test_nothing_starts_ahead_where_commands_are_off(tmp_path, fakebin):
    from hpcwizard.detect import commands
    from hpcwizard.detect.base import Context

    fakebin.add("ssh", ("-V", "", out("ssh-V_debian12.txt"), 0))
    ctx = Context(sysroot=str(machine(tmp_path)), run_commands=False)
    commands.start(ctx)
    assert ctx.ahead.waiting() == []
