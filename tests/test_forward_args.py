"""recipes/runtime.sh's hw_rt_forward_args, the job's environment for mpirun that the launch
script and verify both use, as a table of environments: which names mpirun -x passes (each
set there, once, in the rule's order), which of FORWARD_ENV's are not set, and the --prefix of
an Open MPI outside /usr/bin. Then verify's probe of it (JobEnvironment) run for real, read
back by hpcwizard.verify.jobenv."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Dict

import pytest

from hpcwizard import runtime
from hpcwizard.job import FORWARD
from hpcwizard.validate import BadInput
from hpcwizard.verify import probes as P
from hpcwizard.verify.jobenv import JobEnv, more_names, parse

NAMES = " ".join(FORWARD.names)
PREFIXES = " ".join(FORWARD.prefixes)
OMPI = "4.1.4"

# (id, environment, planned names before the rule's, FORWARD_ENV's words, where mpirun is
#  ("" none; "usr": a link to /usr/bin/mpirun; else a path under the test's directory),
#  Open MPI's version, the names passed, the names not set, the prefix's kind)
CASES = [
    ("only PATH", {}, "", "", "", OMPI, ["PATH"], [], ""),
    ("a venv with thread settings",
     {"VIRTUAL_ENV": "/opt/venv", "OMP_NUM_THREADS": "3", "MKL_DYNAMIC": "0",
      "OMPX_OTHER": "1"}, "", "", "", OMPI,
     ["PATH", "VIRTUAL_ENV", "MKL_DYNAMIC", "OMP_NUM_THREADS"], [], ""),  # OMPX_: no prefix
    ("set but empty is set", {"LD_LIBRARY_PATH": "", "CONDA_PREFIX": "/opt/conda"}, "", "",
     "", OMPI, ["PATH", "LD_LIBRARY_PATH", "CONDA_PREFIX"], [], ""),
    ("the plan's first, each name once",
     {"NCCL_IB_HCA": "mlx5_0", "UCX_TLS": "rc", "OMP_NUM_THREADS": "2"},
     "NCCL_IB_HCA UCX_TLS PATH", "PATH OMP_NUM_THREADS", "", OMPI,
     ["NCCL_IB_HCA", "UCX_TLS", "PATH", "OMP_NUM_THREADS"], [], ""),
    ("FORWARD_ENV: set ones passed, the others named",
     {"HF_HOME": "/data/hf", "WANDB_MODE": ""}, "", "HF_HOME NOT_HERE WANDB_MODE", "", OMPI,
     ["PATH", "HF_HOME", "WANDB_MODE"], ["NOT_HERE"], ""),
    ("a planned name not set here is not passed", {}, "NCCL_IB_HCA", "", "", OMPI,
     ["PATH"], [], ""),
    ("Open MPI under /opt gets its prefix", {}, "", "", "opt/hpcx/ompi/bin/mpirun", OMPI,
     ["PATH"], [], "prefix"),
    ("a prefix with a blank", {}, "", "", "opt/open mpi/bin/mpirun", "5.0.7", ["PATH"], [],
     "prefix"),
    ("another MPI: no prefix", {}, "", "", "opt/mpich/bin/mpirun", "", ["PATH"], [], ""),
    ("mpirun outside a bin directory", {}, "", "", "opt/ompi/mpirun", OMPI, ["PATH"], [],
     "not-bin"),
    ("the system's Open MPI: no prefix", {}, "", "", "usr", OMPI, ["PATH"], [], ""),
]


def _answer(tmp_path: Path, env: Dict[str, str], planned: str, more: str, mpirun: str,
            version: str) -> Dict[str, str]:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    if mpirun == "usr":
        if not os.path.exists("/usr/bin/mpirun"):
            pytest.skip("no /usr/bin/mpirun on this machine to link to")
        (bindir / "mpirun").symlink_to("/usr/bin/mpirun")
    elif mpirun:
        target = tmp_path / mpirun
        target.parent.mkdir(parents=True)
        target.write_text("#!/bin/sh\n")
        target.chmod(0o755)
        (bindir / "mpirun").symlink_to(target)  # as a venv's bin or /usr/local/bin holds it
    path = f"{bindir}:/usr/bin:/bin" if mpirun else f"{bindir}:/bin"
    script = runtime.library() + r'''
hw_rt_forward_args "$1" "$2" "$3" "$4"
printf 'forward=%s\n' "${HW_RT_FORWARD[*]-}"
printf 'unset=%s\n' "${HW_RT_UNSET[*]-}"
printf 'prefix=%s\n' "$HW_RT_PREFIX"
printf 'why=%s\n' "$HW_RT_PREFIX_WHY"
printf 'at=%s\n' "$HW_RT_MPIRUN_AT"
'''
    r = subprocess.run(["bash", "-c", "set -euo pipefail; " + script, "t",
                        f"{planned} {NAMES}".strip(), PREFIXES, more, version],
                       env={**env, "PATH": path}, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return dict(line.split("=", 1) for line in r.stdout.splitlines())


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_forward_args(tmp_path, case):
    _id, env, planned, more, mpirun, version, names, unset, why = case
    got = _answer(tmp_path, env, planned, more, mpirun, version)
    assert got["forward"].split() == names
    assert got["unset"].split() == unset
    assert got["why"] == why
    if why == "prefix":
        assert got["prefix"] == str(tmp_path / mpirun.rsplit("/bin/", 1)[0])
    else:
        assert got["prefix"] == ""
    if mpirun and mpirun != "usr":  # the link on PATH followed to the installation
        assert got["at"] == str(tmp_path / mpirun)


def test_verifys_probe_reads_the_same_rule(tmp_path):
    """JobEnvironment, run as the real System runs it (its argv, the library on stdin), in an
    environment with a venv's python3 first on PATH and OMP_NUM_THREADS set."""
    venv = tmp_path / "venv"
    subprocess.run(["python3", "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    probe = P.JobEnvironment(runtime.library(), FORWARD.names, FORWARD.prefixes,
                             ("HF_HOME",), OMPI)
    env = {"PATH": f"{venv}/bin:/usr/bin:/bin", "VIRTUAL_ENV": str(venv),
           "OMP_NUM_THREADS": "3", "HF_HOME": "/data/hf"}
    r = subprocess.run(probe.argv(), input=probe.stdin(), env=env, capture_output=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    got = parse(r.stdout.decode())
    assert got.forward == ("PATH", "VIRTUAL_ENV", "OMP_NUM_THREADS", "HF_HOME")
    assert got.python3 == f"{venv}/bin/python3" and got.sys_prefix == str(venv)
    assert got.omp == "3" and got.own


@pytest.mark.parametrize("env,own", [
    (JobEnv(python3="/usr/bin/python3", sys_prefix="/usr"), False),
    (JobEnv(python3="/bin/python3", sys_prefix="/usr"), False),
    (JobEnv(), False),
    (JobEnv(python3="/opt/venv/bin/python3", sys_prefix="/opt/venv"), True),
    (JobEnv(python3="/usr/bin/python3", sys_prefix="/usr", prefix="/opt/hpcx/ompi"), True),
])
def test_only_an_environment_outside_the_system_is_the_users_own(env, own):
    assert env.own is own


def test_mpirun_args_keep_what_is_passed_already():
    env = JobEnv(forward=("PATH", "UCX_NET_DEVICES", "OMP_NUM_THREADS"), prefix="/opt/o")
    assert env.mpirun_args(("-x", "UCX_NET_DEVICES=mlx5_0:1", "--mca", "pml", "ucx")) == (
        "--prefix", "/opt/o", "-x", "PATH", "-x", "OMP_NUM_THREADS")
    assert JobEnv().mpirun_args(("-x", "A")) == ()


def test_forward_env_words_as_the_launch_script_splits_them():
    assert more_names({"FORWARD_ENV": "HF_HOME, WANDB_MODE\tA_1"}) == (
        "HF_HOME", "WANDB_MODE", "A_1")
    assert more_names({}) == ()
    for bad in ("A;B", "1X", "HF_HOME $(id)", "A-B", "NCCL_DEBUG\r", "A\u00a0B"):
        with pytest.raises(BadInput, match="FORWARD_ENV: .* is not a variable name"):
            more_names({"FORWARD_ENV": bad})
