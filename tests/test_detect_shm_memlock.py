"""Issue 17, before the job: the size of /dev/shm (NCCL crashes in ncclShmOpen on a container's
64 MB; UCX and Open MPI put intra-node traffic there too) and the locked-memory limit (verbs
cannot register memory), each warned about with the docker and Kubernetes settings that fix it,
in the plans they matter to.

df-kP_dev-shm_64m.txt is `df -kP /dev/shm` where /dev/shm is what Docker mounts by default
(tmpfs 'shm', size=65536k), captured on this CI's Debian 12 in a private mount namespace;
df-kP_dev-shm_24g.txt the same on the machine's own /dev/shm."""
from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.detect import detect, runtime
from hpcwizard.detect.base import Context, Found
from hpcwizard.detect.core import merge
from hpcwizard.detect.rdma import probe as rdma_probe, rdma_warnings
from hpcwizard.facts import Facts, Rdma
from hpcwizard.plan import build_plan

from _ib_fixtures import make_facts, rdma_machine, sysfs_port, with_

CATALOG = load_catalog()
OUT = Path(__file__).parent / "fixtures" / "outputs"
PLANS = [(fw, net) for fw in ("mpi", "pytorch") for net in ("tcp", "ib")]


def plan_warnings(facts, fw, net):
    return build_plan(facts, make_choices(framework=fw, network=net), CATALOG).warnings


# --- /dev/shm -----------------------------------------------------------------------------------

def test_parse_df_of_real_captures():
    assert runtime.parse_df_kib((OUT / "df-kP_dev-shm_64m.txt").read_text()) == 65536
    assert runtime.parse_df_kib((OUT / "df-kP_dev-shm_24g.txt").read_text()) == 24683584
    assert runtime.parse_df_kib("df: /dev/shm: No such file or directory\n") is None
    assert runtime.parse_df_kib("") is None


def fake_df(tmp_path: Path, monkeypatch, text: str, code: int = 0) -> None:
    d = tmp_path / "bin"
    d.mkdir()
    (d / "df.out").write_text(text)
    (d / "df").write_text(f"#!/bin/sh\ncat '{d / 'df.out'}'\nexit {code}\n")
    (d / "df").chmod(0o755)
    monkeypatch.setenv("PATH", f"{d}:/usr/bin:/bin")


def runtime_of(root: Path, run_commands: bool = True) -> Facts:
    """The runtime probe alone, merged into facts as detect() merges it."""
    found = Found()
    runtime.probe(Context(sysroot=str(root), run_commands=run_commands), found)
    return merge([found])


def test_a_64_mb_shm_warns_with_the_docker_and_kubernetes_fixes(tmp_path, monkeypatch):
    fake_df(tmp_path, monkeypatch, (OUT / "df-kP_dev-shm_64m.txt").read_text())
    found = runtime_of(rdma_machine(tmp_path / "root"))
    assert found.runtime.shm_mib == 64
    (w,) = found.warnings
    assert w.code == "runtime.shm-small" and w.startswith("/dev/shm is 64 MiB")
    for fix in ("ncclShmOpen", "docker run --shm-size=16g (or --ipc=host)",
                "an emptyDir volume with medium: Memory mounted at /dev/shm"):
        assert fix in w, fix


def test_a_large_shm_is_no_warning_and_df_failing_is_a_note(tmp_path, monkeypatch):
    fake_df(tmp_path, monkeypatch, (OUT / "df-kP_dev-shm_24g.txt").read_text())
    found = runtime_of(rdma_machine(tmp_path / "root"))
    assert found.runtime.shm_mib == 24683584 // 1024 and found.warnings == ()
    shutil.rmtree(tmp_path / "bin")
    fake_df(tmp_path, monkeypatch, "df: /dev/shm: No such file or directory\n", code=1)
    found = runtime_of(rdma_machine(tmp_path / "root"))
    assert found.runtime.shm_mib is None and found.warnings == ()
    assert [n.code for n in found.notes if n.code.startswith("runtime.shm")] == [
        "runtime.shm-unknown"]
    assert "No such file or directory" in found.notes[-1]


def test_without_commands_a_foreign_tree_says_nothing_of_shm(tmp_path):
    found = runtime_of(rdma_machine(tmp_path), run_commands=False)
    assert found.runtime.shm_mib is None
    assert not [n for n in found.notes + found.warnings if n.code.startswith("runtime.shm")]


def test_this_machines_shm_is_measured():
    st = os.statvfs("/dev/shm")
    assert runtime_of(Path("/")).runtime.shm_mib == st.f_blocks * st.f_frsize // (1024 * 1024)


def test_a_real_64_mb_dev_shm_is_detected_and_warned(tmp_path):
    """For real: this machine's detection in a private mount namespace whose /dev/shm is what
    Docker mounts (tmpfs, 64 MiB). The machine's own /dev/shm is not touched."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare(1) for a private mount namespace")
    code = ("from hpcwizard.detect import detect; f = detect('/', timeout=20); "
            "print(f.runtime.shm_mib); print([w.code for w in f.warnings])")
    res = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c",
         'mount -t tmpfs -o size=65536k shm /dev/shm && exec "$0" -c "$1"', sys.executable, code],
        capture_output=True, text=True, timeout=120, cwd=str(Path(__file__).parent.parent))
    if res.returncode != 0 and "mount" in res.stderr:
        pytest.skip(f"no private mount namespace here: {res.stderr.strip()[:200]}")
    assert res.returncode == 0, res.stderr
    mib, codes = res.stdout.splitlines()[-2:]
    assert mib == "64" and "runtime.shm-small" in codes
    assert os.statvfs("/dev/shm").f_blocks * os.statvfs("/dev/shm").f_frsize > 64 << 20


def test_small_shm_is_in_every_plan(tmp_path, monkeypatch):
    fake_df(tmp_path, monkeypatch, (OUT / "df-kP_dev-shm_64m.txt").read_text())
    found = runtime_of(rdma_machine(tmp_path / "root"))
    facts = with_(make_facts("debian12"), runtime=found.runtime, warnings=found.warnings)
    for fw, net in PLANS:
        assert any(w.startswith("/dev/shm is 64 MiB") for w in plan_warnings(facts, fw, net)), \
            (fw, net)


# --- memlock ------------------------------------------------------------------------------------

@pytest.fixture
def memlock_64k():
    """This process's soft locked-memory limit at 64 KiB (the `bash -c 'ulimit -l'` detection
    runs inherits it), put back afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if hard != resource.RLIM_INFINITY and hard < 64 * 1024:
        pytest.skip(f"the hard memlock limit here ({hard} bytes) is below 64 KiB")
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (64 * 1024, hard))
    yield
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (soft, hard))


def test_a_real_64_kib_memlock_limit_warns_with_the_container_settings(tmp_path, memlock_64k):
    root = rdma_machine(tmp_path)
    sysfs_port(root, "mlx5_0", netdev="ib0")
    found = Found()
    rdma_probe(Context(sysroot=str(root), run_commands=True), found)
    assert found.values["rdma"].memlock_kib == 64
    (w,) = [w for w in found.warnings if w.code == "rdma.memlock-low"]
    assert "64 KiB, not unlimited" in w
    assert "docker run --ulimit memlock=-1 --cap-add IPC_LOCK" in w
    assert 'securityContext.capabilities.add: ["IPC_LOCK"]' in w
    facts = with_(make_facts("debian12"), rdma=found.values["rdma"], warnings=tuple(found.warnings))
    for fw, net in PLANS:
        shown = any("64 KiB, not unlimited" in x for x in plan_warnings(facts, fw, net))
        assert shown is (net == "ib"), (fw, net)


def test_an_unlimited_memlock_is_no_warning_and_unknown_is_a_note(tmp_path):
    hcas = make_facts().hcas
    unlimited = Rdma(uverbs=("/dev/infiniband/uverbs0",), memlock_unlimited=True)
    assert not [w for w in rdma_warnings(hcas, unlimited) if w.code == "rdma.memlock-low"]
    root = rdma_machine(tmp_path)
    sysfs_port(root, "mlx5_0", netdev="ib0")
    f = detect(str(root), run_commands=False)  # not measured: said so, not warned
    assert "rdma.memlock-unknown" in [n.code for n in f.notes]
    assert not [w for w in f.warnings if w.code == "rdma.memlock-low"]
