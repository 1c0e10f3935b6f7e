"""Issue 30, containers without ptrace: two ranks on one instance exchange 1 MiB each way
(verify's samehost.c, far above the eager limit) through the launch script, in a container
without CAP_SYS_PTRACE on a host whose Yama ptrace_scope is 2. Without the launch script's
settings Open MPI's single copy is refused ('Read -1, expected 1048576, errno = 1'); with
them the job passes and the script says why.

What refuses CMA: process_vm_readv follows ptrace's access rules. Between two processes of
one uid with the same capabilities no capability is needed, so dropping CAP_SYS_PTRACE alone
breaks nothing (the last test shows it). Yama's scope 1 allows a process only its
descendants (two ranks are siblings), but Open MPI and UCX then declare any process their
ptracer (prctl PR_SET_PTRACER_ANY), which scope 1 honours; scope 2 ignores that and asks for
CAP_SYS_PTRACE, and Open MPI's vader BTL goes on to fail at the first large message.
Where the kernel has Yama the test sets ptrace_scope to 2 and restores it. Where it has none
(this CI's kernel) the condition is built as the instance sees it: in a mount namespace of
the job's own, /proc/sys/kernel is a directory whose yama/ptrace_scope holds 2 (what the
launch script and Open MPI read), and a seccomp filter answers process_vm_readv/writev with
EPERM and prctl(PR_SET_PTRACER) with success, as the kernel answers them at scope 2.
Root only, HPCWIZARD_SYSTEM_TESTS=1 (conftest.py skips otherwise)."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from _verify_cluster import VCluster, applied, show, start_nodes, wizard_exe
from test_system_launch import export, finish, start
from hpcwizard.verify import MPI_SAMEHOST_C

pytestmark = pytest.mark.system

YAMA = Path("/proc/sys/kernel/yama/ptrace_scope")
REFUSED = "Read -1, expected 1048576, errno = 1"  # opal/mca/btl/vader/btl_vader_get.c
PASSED = "HPCWIZARD-MPI-PAIR bytes=1048576 wrong=0"
# CAP_SYS_PTRACE out of the bounding set: gone from CapEff after exec, also for root
# (setpriv is util-linux's, which CI installs)
DROP = ["setpriv", "--bounding-set", "-sys_ptrace", "--inh-caps", "-sys_ptrace"]

# process_vm_readv and process_vm_writev -> EPERM, prctl(PR_SET_PTRACER, ...) -> 0 without
# running it (no Yama to take it), everything else allowed (x86-64 only).
NO_PROCESS_VM_C = r"""
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#ifndef PR_SET_PTRACER
#define PR_SET_PTRACER 0x59616d61
#endif
int main(int argc, char **argv) {
  struct sock_filter f[] = {
    /* 0 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
    /* 1 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
    /* 2 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    /* 3 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
    /* 4 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_readv, 5, 0),
    /* 5 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_writev, 4, 0),
    /* 6 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_prctl, 0, 2),
    /* 7 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
    /* 8 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PR_SET_PTRACER, 2, 0),
    /* 9 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    /* 10 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
    /* 11 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 0),
  };
  struct sock_fprog prog = {sizeof f / sizeof f[0], f};
  if (argc < 2 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
      prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) { perror("seccomp"); return 2; }
  execvp(argv[1], argv + 1);
  perror(argv[1]);
  return 127;
}
"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    yield from applied(tmp_path_factory)


def build(tmp: Path, name: str, source: str, cc: str) -> str:
    src = tmp / f"{name}.c"
    src.write_text(source)
    r = subprocess.run([cc, "-O2", "-o", str(tmp / name), str(src)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, f"{cc} {name}.c failed{show(r)}"
    return str(tmp / name)


@pytest.fixture
def without_ptrace(tmp_path):
    """A command prefix: what follows runs without CAP_SYS_PTRACE where sibling processes
    may not read each other's memory (Yama ptrace_scope 2, for real or as described above)."""
    if YAMA.exists():
        before = YAMA.read_text()
        YAMA.write_text("2\n")
        try:
            yield DROP
        finally:
            YAMA.write_text(before)
        assert YAMA.read_text() == before
        return
    if shutil.which("cc") is None:
        pytest.skip("no Yama in this kernel and no C compiler to build the seccomp filter")
    kernel = tmp_path / "kernel"
    (kernel / "yama").mkdir(parents=True)
    (kernel / "yama/ptrace_scope").write_text("2\n")
    filt = build(tmp_path, "no-process-vm", NO_PROCESS_VM_C, "cc")
    yield ["unshare", "-m", "--propagation", "private", "sh", "-c",
           f'mount --bind {kernel} /proc/sys/kernel && exec "$@"', "sh", *DROP, filt]


def one_instance(c: VCluster, env: dict, argv: list, timeout: float = 180):
    rc, out, err = finish({"node1": start(c, "node1", argv, env)}, timeout)["node1"]
    return rc, out, err, f"\n--- exit {rc}\n{out}\n{err}"


def test_two_ranks_without_ptrace_exchange_1_mib_through_the_launch_script(setup,
                                                                            without_ptrace):
    env = setup["env"]
    with VCluster(1) as c:
        start_nodes(c)
        script = export(c, env, "mpi")
        exe = build(c.tmp, "samehost", MPI_SAMEHOST_C, "mpicc")
        # the condition holds in there: no CAP_SYS_PTRACE, scope 2
        probe = c.run("node1", [*without_ptrace, "sh", "-c",
                                "grep CapEff /proc/self/status; cat /proc/sys/kernel/yama/"
                                "ptrace_scope"])
        eff = int(probe.stdout.split()[1], 16)
        assert not eff >> 19 & 1 and probe.stdout.split()[2] == "2", probe.stdout + probe.stderr
        bare = ["mpirun", "--allow-run-as-root", "-np", "2", "--host", "node1:2", exe]
        rc, out, err, report = one_instance(c, env, [*without_ptrace, *bare])
        assert REFUSED in out + err, "Open MPI's single copy was not refused" + report

        run_env = dict(env, HOSTS="node1", SLOTS="2", WAIT_TRIES="6")
        rc, out, err, report = one_instance(
            c, run_env, [*without_ptrace, "bash", script, "--", exe])
        assert rc == 0 and PASSED in out, report
        assert "errno = 1" not in out + err, report
        assert ("single-copy off (CAP_SYS_PTRACE no, Yama ptrace_scope 2): --mca "
                "btl_vader_single_copy_mechanism none -x UCX_TLS=^cma") in err, report


def test_verify_here_proves_two_ranks_exchange_1_mib_without_ptrace(setup, without_ptrace):
    """verify --here in the same container: its own two-rank check runs, as the launch script
    would run the job, and passes."""
    env = setup["env"]
    with VCluster(1) as c:
        start_nodes(c)
        proc = c.run("node1", [*without_ptrace, wizard_exe(), "verify", "--framework", "mpi",
                               "--network", "tcp", "--manual", "--json", "--here"],
                     timeout=300, cwd="/", env=env)
        try:
            checks = {x["id"]: x for x in json.loads(proc.stdout)["checks"]}
        except ValueError:
            pytest.fail(f"verify did not print JSON{show(proc)}")
        check = checks.get("here/single-copy-off")
        assert check is not None and check["status"] == "pass", f"{check}{show(proc)}"
        assert check["detail"] == ("single copy off (CAP_SYS_PTRACE no, Yama ptrace_scope 2): "
                                   "--mca btl_vader_single_copy_mechanism none")


def test_without_ptrace_alone_single_copy_works_and_stays_on(setup):
    """CAP_SYS_PTRACE dropped on a kernel whose Yama allows same-uid access (scope 0, or no
    Yama): the ranks read each other's memory, and the launch script changes nothing."""
    if YAMA.exists() and YAMA.read_text().strip() != "0":
        pytest.skip(f"Yama's ptrace_scope is {YAMA.read_text().strip()} here, not 0")
    env = setup["env"]
    with VCluster(1) as c:
        start_nodes(c)
        script = export(c, env, "mpi")
        exe = build(c.tmp, "samehost", MPI_SAMEHOST_C, "mpicc")
        rc, out, err, report = one_instance(
            c, dict(env, HOSTS="node1", SLOTS="2", WAIT_TRIES="6"),
            [*DROP, "bash", script, "--", exe])
        assert rc == 0 and PASSED in out and "errno = 1" not in out + err, report
        assert "single-copy off" not in err, report
