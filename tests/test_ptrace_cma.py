"""Issue 30, containers without ptrace: whether the ranks on one instance may read each other's
memory (Linux CMA, process_vm_readv: Open MPI's single copy, UCX's cma transport), read from
CAP_SYS_PTRACE in /proc/self/status and Yama's ptrace_scope. One table of cases holds
detection (hpcwizard.detect.ptrace, facts.cma_allowed) and the launch script's own check
(recipes/runtime.sh hw_rt_cma, on a proc tree of its own: HW_RT_PROC) to the same answers;
the launch script, run for real by bash with test_launch's fake commands, turns single-copy
off in Open MPI 4's or 5's words and UCX's, and keeps a UCX_TLS the user set; verify runs
two ranks here with the same settings where (and only where) single copy must be off.

proc-self-status_root.txt is /proc/self/status of root in this CI's container (every
capability); proc-self-status_no-sys-ptrace.txt the same under
`capsh --drop=cap_sys_ptrace --`."""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Optional

import pytest

from test_launch import _run, plan
from test_launch_ompi import V4, V5, _cluster, _mpirun_line
from hpcwizard import runtime
from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.detect import ptrace
from hpcwizard.detect.base import Context, Found
from hpcwizard.detect.core import merge
from hpcwizard.detect.summary import cma_text
from hpcwizard.export import launch_script
from hpcwizard.facts import Runtime
from hpcwizard.hosts import Hosts
from hpcwizard import i18n
from hpcwizard.plan import build_plan
from hpcwizard.verify import FAIL, PASS, verify
from hpcwizard.verify import probes as P

from _core_fixtures import ROOT, facts as core_facts
from _ib_fixtures import make_facts, with_
from _verify_fixtures import FakeSystem

OUT = Path(__file__).parent / "fixtures" / "outputs"
ROOT_STATUS = (OUT / "proc-self-status_root.txt").read_text()
NO_PTRACE_STATUS = (OUT / "proc-self-status_no-sys-ptrace.txt").read_text()
# Docker's default capabilities (moby oci/caps/defaults.go), by number
# (include/uapi/linux/capability.h): CapEff 00000000a80425fb in a container run without
# --cap-add; SYS_PTRACE (19) added, a80c25fb.
DOCKER_CAPS = (0, 1, 3, 4, 5, 6, 7, 8, 10, 13, 18, 27, 29, 31)
DOCKER = sum(1 << c for c in DOCKER_CAPS)
DOCKER_PTRACE = DOCKER | 1 << 19


def status(eff: int) -> str:
    return f"Name:\tbash\nUmask:\t0022\nCapPrm:\t{eff:016x}\nCapEff:\t{eff:016x}\nSeccomp:\t2\n"


# (/proc/self/status, Yama's file: None for no Yama) -> (CAP_SYS_PTRACE, scope, CMA)
CASES = {
    # scope 1: Open MPI and UCX declare any process their ptracer (PR_SET_PTRACER_ANY)
    "docker default on an Ubuntu host (Yama 1)": (status(DOCKER), "1\n", (False, 1, True)),
    "a user without capabilities, Yama 1": (status(0), "1\n", (False, 1, True)),
    "docker default on a RHEL host (Yama 0)": (status(DOCKER), "0\n", (False, 0, True)),
    "root, no Yama (this CI)": (ROOT_STATUS, None, (True, None, True)),
    "capsh --drop=cap_sys_ptrace, no Yama": (NO_PTRACE_STATUS, None, (False, None, True)),
    "docker default, Yama 2": (status(DOCKER), "2\n", (False, 2, False)),
    "docker --cap-add SYS_PTRACE, Yama 2": (status(DOCKER_PTRACE), "2\n", (True, 2, True)),
    "capsh --drop=cap_sys_ptrace, Yama 2": (NO_PTRACE_STATUS, "2\n", (False, 2, False)),
    "privileged, Yama 2": (status((1 << 41) - 1), "2\n", (True, 2, True)),
    "CAP_SYS_PTRACE, Yama 3": (ROOT_STATUS, "3\n", (True, 3, False)),
    "no status, Yama 1": (None, "1\n", (None, 1, True)),
    "no status, Yama 2": (None, "2\n", (None, 2, None)),
    "no status, Yama 0 without a newline": (None, "0", (None, 0, True)),
    "no status, Yama 3": (None, "3\n", (None, 3, False)),
    "no status, no Yama": (None, None, (None, None, None)),
    "Yama's file holds no scope": (status(DOCKER), "x\n", (False, None, True)),
}


def proc_tree(tmp_path: Path, status_text: Optional[str], scope: Optional[str]) -> Path:
    root = tmp_path / "root"
    (root / "proc/self").mkdir(parents=True)
    if status_text is not None:
        (root / "proc/self/status").write_text(status_text)
    if scope is not None:
        (root / "proc/sys/kernel/yama").mkdir(parents=True)
        (root / "proc/sys/kernel/yama/ptrace_scope").write_text(scope)
    return root


def detected(root: Path):
    found = Found()
    ptrace.probe(Context(sysroot=str(root), run_commands=False), found)
    return merge([found])


def shell_cma(proc: Path) -> str:
    out = subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + runtime.library()
         + '\nhw_rt_cma; printf "%s" "$HW_RT_CMA"'],
        env={"HW_RT_PROC": str(proc), "PATH": "/usr/bin:/bin"}, capture_output=True,
        text=True, timeout=30, check=True)
    return out.stdout


@pytest.mark.parametrize("case", list(CASES))
def test_detection_and_the_launch_scripts_check_agree(tmp_path, case):
    status_text, scope, (cap, want_scope, cma) = CASES[case]
    root = proc_tree(tmp_path, status_text, scope)
    facts = detected(root)
    r = facts.runtime
    assert (r.cap_sys_ptrace, r.ptrace_scope, r.cma) == (cap, want_scope, cma)
    assert shell_cma(root / "proc") == {True: "yes", False: "no", None: "unknown"}[cma]
    codes = [w.code for w in facts.warnings]
    if cma is False:
        assert codes == ["runtime.no-cma-scope3" if want_scope == 3 else "runtime.no-cma"]
    else:
        assert codes == []


def test_the_capability_is_bit_19_of_capeff():
    assert f"{DOCKER:016x}" == "00000000a80425fb"  # as `grep CapEff` prints it in docker
    assert ptrace.cap_sys_ptrace("CapEff:\t0000000000080000\n") is True
    assert ptrace.cap_sys_ptrace("CapEff:\t0000000000040000\n") is False
    assert ptrace.cap_sys_ptrace("CapEff:\tzz\n") is None
    assert ptrace.cap_sys_ptrace("CapPrm:\t0000000000080000\n") is None  # the effective set only
    assert [ptrace.ptrace_scope(t) for t in ("0\n", " 3 ", "4", "-1", "", None)] == [
        0, 3, None, None, None, None]


def test_the_warning_says_what_the_launch_script_does_and_the_fixes(tmp_path):
    facts = detected(proc_tree(tmp_path, status(DOCKER), "2\n"))
    (w,) = facts.warnings
    for part in ("no CAP_SYS_PTRACE and Yama's ptrace_scope is 2", "errno = 1",
                 "btl_vader_single_copy_mechanism=none", "smsc=^cma", "UCX_TLS=^cma",
                 "--cap-add SYS_PTRACE", "capabilities.add: [SYS_PTRACE]"):
        assert part in w, part
    i18n.set_language("zh_CN")  # conftest sets English back
    zh = w.shown()
    assert zh != str(w) and "CAP_SYS_PTRACE" in zh and "UCX_TLS=^cma" in zh


@pytest.mark.parametrize("framework,warned", [("mpi", True), ("pytorch", False)])
def test_the_plan_warns_mpi_jobs_only(tmp_path, framework, warned):
    found = detected(proc_tree(tmp_path, status(DOCKER), "2\n"))
    facts = with_(make_facts("debian12"), runtime=found.runtime, warnings=found.warnings)
    p = build_plan(facts, make_choices(framework=framework, network="tcp"), load_catalog())
    assert any("CAP_SYS_PTRACE" in w for w in p.warnings) is warned


def test_detect_shows_it_in_english_and_chinese():
    off = Runtime(cap_sys_ptrace=False, ptrace_scope=2)
    assert cma_text(off) == ("ranks may not read each other's memory (the launch script "
                             "turns single-copy off): CAP_SYS_PTRACE no, Yama ptrace_scope 2")
    assert cma_text(Runtime(cap_sys_ptrace=False)) == (
        "ranks may read each other's memory: CAP_SYS_PTRACE no, no Yama")
    assert cma_text(Runtime()) == "unknown"
    i18n.set_language("zh_CN")
    zh = cma_text(off)
    assert "CAP_SYS_PTRACE" in zh and "ptrace_scope 2" in zh and "ranks" not in zh


# --- the launch script ------------------------------------------------------------------------

def launched(tmp_path, version, status_text, scope, **env):
    """The MPI launch script on node01 of node01,node02 with this proc tree: mpirun's command
    line (with the UCX_TLS it was given) and stderr."""
    fk = _cluster(tmp_path, version)
    bin_ = Path(fk["env"]["PATH"].split(":")[0])
    ver = f"cat {version}; exit 0"
    (bin_ / "mpirun").write_text(
        f'#!/bin/bash\nif [ "$1" = --version ]; then {ver}; fi\n'
        f'echo "mpirun $* UCX_TLS=${{UCX_TLS-unset}}" >> {fk["log"]}\n')
    proc = proc_tree(tmp_path, status_text, scope) / "proc"
    r = _run(tmp_path, launch_script(plan("mpi", "ib")),
             {**fk["env"], "HOSTS": "node01,node02", "HW_RT_PROC": str(proc), **env},
             ["--", "./a.out"])
    assert r.returncode == 0, r.stderr
    [call] = _mpirun_line(fk)
    return call, r.stderr


@pytest.mark.parametrize("version,off,other", [
    (V4, "--mca btl_vader_single_copy_mechanism none", "smsc"),
    (V5, "--mca smsc ^cma", "btl_vader_single_copy_mechanism"),
])
def test_without_cma_single_copy_is_off_in_the_running_open_mpis_words(tmp_path, version, off,
                                                                        other):
    call, err = launched(tmp_path, version, status(DOCKER), "2\n")
    assert off in call and other not in call
    assert "-x UCX_TLS" in call and call.endswith("./a.out UCX_TLS=^cma")
    [line] = [ln for ln in err.splitlines() if "single-copy off" in ln]
    assert line == (f"launch[node01]: single-copy off (CAP_SYS_PTRACE no, Yama ptrace_scope 2): "
                    f"{off} -x UCX_TLS=^cma")


def test_a_ucx_tls_the_user_set_is_kept(tmp_path):
    call, err = launched(tmp_path, V4, status(DOCKER), "2\n", UCX_TLS="rc,self")
    assert "--mca btl_vader_single_copy_mechanism none" in call
    assert "-x UCX_TLS" not in call and call.endswith("UCX_TLS=rc,self")
    assert "UCX_TLS=rc,self is yours, kept" in err


@pytest.mark.parametrize("status_text,scope", [(status(DOCKER_PTRACE), "2\n"),
                                               (status(DOCKER), "1\n"), (status(DOCKER), None),
                                               (None, "2\n")],
                         ids=["cap", "scope-1", "no-yama", "unknown"])
def test_with_cma_or_unknown_nothing_changes(tmp_path, status_text, scope):
    call, err = launched(tmp_path, V4, status_text, scope)
    assert "single_copy" not in call and "smsc" not in call and "-x UCX_TLS" not in call
    assert call.endswith("UCX_TLS=unset") and "single-copy" not in err


# --- verify -----------------------------------------------------------------------------------

def verify_here(answers):
    """verify on node1 of node1,node2 (MPI over TCP, as root) with the fake system."""
    f = core_facts(user=ROOT)
    p = build_plan(f, make_choices(framework="mpi", network="tcp", mode="manual"), load_catalog())
    fake = FakeSystem({"node1": "ok", "node2": "ok"}, answers)
    report = verify(p, f, Hosts(("node1", "node2"), "--hosts"), system=fake)
    return {c.id: c for c in report.checks}, fake


def samehost_answers(cma, out):
    return {P.SingleCopy: (0, f"{cma}\nCAP_SYS_PTRACE no, Yama ptrace_scope 2\n"),
            P.MpirunVersion: (0, V4.read_text()), P.IsExecutable: (0, ""),
            lambda p: isinstance(p, P.Mpirun) and p.program[0].endswith("samehost"): (0, out)}


def test_verify_runs_two_ranks_here_with_the_launch_scripts_settings_where_cma_is_off():
    checks, fake = verify_here(samehost_answers("no", "HPCWIZARD-MPI-PAIR bytes=1048576 "
                                                "wrong=0\n"))
    c = checks["here/single-copy-off"]
    assert c.status == PASS, c
    assert c.detail == ("single copy off (CAP_SYS_PTRACE no, Yama ptrace_scope 2): --mca "
                        "btl_vader_single_copy_mechanism none")
    [run] = [p for p in fake.asked(P.Mpirun) if p.program[0].endswith("samehost")]
    assert run.np == 2 and "-x UCX_TLS" in " ".join(run.args)
    assert ("UCX_TLS", "^cma") in run.extra_env
    # the ranks' capabilities are the job user's: the check is asked as that user, in bash
    [asked] = fake.asked(P.SingleCopy)
    assert asked.argv()[-2:] == ("bash", "-s") and b"hw_rt_cma" in asked.stdin()


def test_verify_fails_when_the_large_message_is_refused():
    checks, _fake = verify_here(samehost_answers(
        "no", "[node1:123] Read -1, expected 1048576, errno = 1\n"))
    assert checks["here/single-copy-off"].status == FAIL


@pytest.mark.parametrize("cma", ["yes", "unknown"])
def test_where_single_copy_works_verify_has_no_such_check(cma):
    checks, fake = verify_here(samehost_answers(cma, ""))
    assert "here/single-copy-off" not in checks
    assert not [p for p in fake.probes if getattr(p, "program", ("",))[0].endswith("samehost")]


@pytest.mark.parametrize("user,scope,warned", [("nobody", 2, True), ("root", 2, False),
                                                ("nobody", 1, False)])
def test_the_plan_warns_for_a_job_user_without_the_capability_detect_had(user, scope, warned):
    """detect ran as root with CAP_SYS_PTRACE; the job's user (nobody) has no capability."""
    f = with_(make_facts("debian12"), runtime=Runtime(cap_sys_ptrace=True, ptrace_scope=scope))
    p = build_plan(f, make_choices(framework="mpi", network="tcp", user=user), load_catalog())
    said = [w for w in p.warnings if "who has no CAP_SYS_PTRACE" in w]
    assert bool(said) is warned
    if warned:
        assert said[0].startswith("The job runs as nobody,") and "UCX_TLS=^cma" in said[0]
