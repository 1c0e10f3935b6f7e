"""The job's environment on every rank (hpcwizard.job.FORWARD): the launch script gives
mpirun -x for each name of the rule set where it runs, FORWARD_ENV names more (checked
before anything starts), and an Open MPI outside /usr/bin gets --prefix so that the other
instances find its orted/prted. Run with the fake commands of test_launch.py."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from hpcwizard.export import launch_script
from hpcwizard.job import FORWARD

from test_launch import HOSTS, _fakes, _run, plan

ROOT = Path(__file__).resolve().parent.parent


def _x_names(calls: str) -> list:
    [line] = [ln for ln in calls.splitlines() if ln.startswith("mpirun ") and " -np " in ln]
    return re.findall(r"(?:^| )-x (\S+)", line)


def test_the_rule_and_the_users_names_reach_mpirun_once_each(tmp_path):
    fk = _fakes(tmp_path, "node01", HOSTS)
    env = {**fk["env"], "HOSTS": "node01,node02", "OMP_NUM_THREADS": "3", "MKL_DYNAMIC": "0",
           "VIRTUAL_ENV": "/opt/venv", "LD_LIBRARY_PATH": "", "HF_HOME": "/data/hf",
           "WANDB_MODE": "off", "FORWARD_ENV": "HF_HOME, WANDB_MODE PATH\tNOT_SET_HERE"}
    r = _run(tmp_path, launch_script(plan("mpi", "ib")), env, ["--", "./a.out"])
    assert r.returncode == 0, r.stderr
    names = _x_names(fk["log"].read_text())
    # the plan's first (UCX_NET_DEVICES is MPIRUN_ARGS' own -x), then the rule's, then the user's
    assert names == ["UCX_NET_DEVICES", "NCCL_IB_HCA", "PATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV",
                     "MKL_DYNAMIC", "OMP_NUM_THREADS", "HF_HOME", "WANDB_MODE"], names
    assert ("to every rank (mpirun -x): UCX_NET_DEVICES NCCL_IB_HCA PATH LD_LIBRARY_PATH VIRTUAL_ENV "
            "MKL_DYNAMIC OMP_NUM_THREADS HF_HOME WANDB_MODE") in r.stderr
    assert "FORWARD_ENV names NOT_SET_HERE, which is not set here: not forwarded" in r.stderr


def test_names_not_set_are_not_forwarded(tmp_path):
    """mpirun -x of an unset name warns on every run (Open MPI 4: 'Could not find the
    environment variable'): only names set here are given."""
    fk = _fakes(tmp_path, "node01", HOSTS)
    env = {**fk["env"], "HOSTS": "node01,node02"}
    r = _run(tmp_path, launch_script(plan("mpi", "tcp")), env, ["--", "./a.out"])
    assert r.returncode == 0, r.stderr
    assert _x_names(fk["log"].read_text()) == ["PATH"]


BAD_NAMES = ["1A", "A=1", "A-B", "$(touch {pwned})", "A;touch {pwned}", "Ä", "A.B"]


@pytest.mark.parametrize("host", ["node01", "node02"])
@pytest.mark.parametrize("value", BAD_NAMES)
def test_a_bad_forward_env_name_is_refused_before_anything_starts(tmp_path, value, host):
    fk = _fakes(tmp_path, host, HOSTS)
    pwned = tmp_path / "pwned"
    env = {**fk["env"], "HOSTS": "node01,node02",
           "FORWARD_ENV": "OK_NAME " + value.replace("{pwned}", str(pwned))}
    r = _run(tmp_path, launch_script(plan("mpi", "tcp")), env, ["--", "./a.out"])
    assert r.returncode == 2, r.stderr
    assert not pwned.exists()
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"launch[{host}]: FORWARD_ENV: ") and "is not a variable name" in last
    assert "Traceback" not in r.stderr
    calls = fk["log"].read_text() if fk["log"].exists() else ""
    assert calls == "" and "sshd" not in r.stderr and "waiting" not in r.stderr, calls


def _mpirun_at(fk: dict, target: Path, version: str) -> None:
    """The fake mpirun at target, answering --version with `version`, reached through a
    symlink where it was."""
    fake = Path(fk["env"]["PATH"].split(":")[0]) / "mpirun"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(f'#!/bin/bash\nif [ "$1" = --version ]; then echo "{version}"; exit 0; fi\n'
                      f'echo "mpirun $*" >> {fk["log"]}\n')
    target.chmod(0o755)
    fake.unlink()
    fake.symlink_to(target)


def test_an_open_mpi_outside_usr_bin_gets_its_prefix(tmp_path):
    """A symlink on PATH (a /usr/local/bin entry, a venv's) is followed to the installation."""
    fk = _fakes(tmp_path, "node01", HOSTS)
    prefix = tmp_path / "opt" / "open mpi"
    _mpirun_at(fk, prefix / "bin" / "mpirun", "mpirun (Open MPI) 5.0.7")
    env = {**fk["env"], "HOSTS": "node01,node02"}
    r = _run(tmp_path, launch_script(plan("mpi", "tcp")), env, ["--", "./a.out"])
    assert r.returncode == 0, r.stderr
    assert f"mpirun --prefix {prefix} --hostfile " in fk["log"].read_text()
    assert f"--prefix {str(prefix).replace(' ', chr(92) + ' ')}, so that" in r.stderr


def test_another_mpi_gets_no_prefix(tmp_path):
    """--prefix is Open MPI's: an mpirun that does not say Open MPI is run without it."""
    fk = _fakes(tmp_path, "node01", HOSTS)
    _mpirun_at(fk, tmp_path / "opt" / "mpich" / "bin" / "mpirun", "HYDRA build details:")
    env = {**fk["env"], "HOSTS": "node01,node02"}
    r = _run(tmp_path, launch_script(plan("mpi", "tcp")), env, ["--", "./a.out"])
    assert r.returncode == 0, r.stderr
    assert "mpirun --hostfile " in fk["log"].read_text() and "--prefix" not in r.stderr


def test_the_system_open_mpi_gets_no_prefix(tmp_path):
    """mpirun that resolves into /usr/bin (Debian's alternatives: /usr/bin/mpirun ->
    /etc/alternatives/mpirun -> /usr/bin/orterun): orted is on the other instances' PATH
    already. A fake readlink stands for that chain."""
    fk = _fakes(tmp_path, "node01", HOSTS)
    bin_ = Path(fk["env"]["PATH"].split(":")[0])
    _mpirun_at(fk, tmp_path / "alternatives" / "mpirun", "mpirun (Open MPI) 4.1.4")
    (bin_ / "readlink").write_text("#!/bin/bash\necho /usr/bin/orterun\n")
    (bin_ / "readlink").chmod(0o755)
    env = {**fk["env"], "HOSTS": "node01,node02"}
    r = _run(tmp_path, launch_script(plan("mpi", "tcp")), env, ["--", "./a.out"])
    assert r.returncode == 0, r.stderr
    assert "mpirun (Open MPI 4.1.4) -np 2" in r.stderr and "--prefix" not in r.stderr
    assert "mpirun --hostfile " in fk["log"].read_text()


@pytest.mark.parametrize("framework", ["mpi", "pytorch"])
def test_the_usage_states_the_rule(tmp_path, framework):
    fk = _fakes(tmp_path, "node01", HOSTS)
    r = _run(tmp_path, launch_script(plan(framework, "tcp")), fk["env"], ["--help"])
    usage = " ".join(r.stdout.split())
    if framework == "mpi":
        assert FORWARD.rule() in usage and "--prefix" in usage, usage
    else:
        assert "each instance runs the script in its own" in usage, usage


def test_the_docs_state_the_rule():
    text = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    launch = text.split("### launch", 1)[1].split("\n### ", 1)[0]
    flat = " ".join(launch.replace("`", "").split())
    assert FORWARD.listed() in flat and FORWARD.variable in flat and "--prefix" in flat
    assert "torchrun" in flat and "its own environment" in flat


def test_forward_env_for_torchrun_says_it_is_not_used(tmp_path):
    """torchrun's instances each run the script in their own environment: a FORWARD_ENV
    there is said to be unused, once, and the job still starts."""
    fk = _fakes(tmp_path, "node01", HOSTS)
    env = {**fk["env"], "HOSTS": "node01,node02", "FORWARD_ENV": "HF_HOME"}
    r = _run(tmp_path, launch_script(plan("pytorch", "tcp")), env, ["--", "./run.sh"])
    assert r.returncode == 0, r.stderr
    said = [ln for ln in r.stderr.splitlines() if "FORWARD_ENV" in ln]
    assert said == ["launch[node01]: FORWARD_ENV is not used: torchrun instances each run "
                    "this script in their own environment"], r.stderr
    assert "torchrun " in fk["log"].read_text()
    r = _run(tmp_path, launch_script(plan("pytorch", "tcp")), {**env, "FORWARD_ENV": ""},
             ["--", "./run.sh"])
    assert r.returncode == 0 and "FORWARD_ENV" not in r.stderr, r.stderr
