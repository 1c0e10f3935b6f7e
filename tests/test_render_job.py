"""The Job between the plan and every file: made once by the plan, with the SSH port an int
until a renderer writes it, and every renderer in hpcwizard.render taking it as data. A
table of cases: a Job in, the lines each output must hold out."""
from __future__ import annotations

import dataclasses

import pytest

from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.job import Job
from hpcwizard.plan import build_plan
from hpcwizard.render import launch, mpijob, setup, slurm, volcano
from hpcwizard.render import dockerfile as render_dockerfile
from hpcwizard.render.mpirun import mca_settings, mpirun_args, runtime_env

from _ib_fixtures import PRIVILEGES, make_facts

JOB = Job(framework="mpi", network="ib", user="alice", uid=1000, home="/home/alice",
          ssh_port=47113, host_keys="pinned", env={"UCX_NET_DEVICES": "mlx5_0:1"},
          mca={"pml": "ucx"}, passed=("UCX_NET_DEVICES",), os_label="Debian 12")

# renderer, what its text must hold for JOB (the port, the settings, the user)
CASES = [
    ("launch", lambda j: launch.render(j),
     ["PORT=47113", "MPIRUN_ARGS=(--mca plm_rsh_args '-p 47113' --mca pml ucx -x UCX_NET_DEVICES)",
      "MPIRUN_ARGS_5=(--prtemca plm_ssh_args '-p 47113' --mca pml ucx -x UCX_NET_DEVICES)",
      "planned_env UCX_NET_DEVICES 'mlx5_0:1'", "user=alice"]),
    ("sbatch", lambda j: slurm.render(j),
     ["ssh_port=47113", "'-p 47113 -o ConnectionAttempts=10'", "--prtemca plm_ssh_args"]),
    ("mpijob", lambda j: mpijob.render(j),
     ["containerPort: 47113", "-p 47113 -o ConnectionAttempts=10", "runAsUser: 1000"]),
    ("volcano", lambda j: volcano.render(j),
     ["--ssh-port=47113", "--ssh-key-file-path=/home/alice/.ssh", "containerPort: 47113"]),
    ("setup", lambda j: setup.render(j, ()),
     ["ssh_port=47113 host_keys=pinned", "TARGET_USER=alice"]),
    ("dockerfile", lambda j: render_dockerfile.render(j, render_dockerfile.Base("debian:12"),
                                                     sshd=True),
     ["FROM debian:12", "EXPOSE 47113", "USER alice",
      'ENV OMPI_MCA_plm_rsh_args="-p 47113" PRTE_MCA_plm_ssh_args="-p 47113"']),
]


@pytest.mark.parametrize("name,render,wanted", CASES, ids=[c[0] for c in CASES])
def test_each_renderer_writes_the_jobs_settings(name, render, wanted):
    text = render(JOB)
    for line in wanted:
        assert line in text, f"{name}: {line!r} missing"
    other = render(dataclasses.replace(JOB, ssh_port=52017))
    assert "47113" not in other and "52017" in other  # the port is the Job's, nothing else's


def test_the_plan_makes_the_job_with_the_port_an_int_and_settings_as_mappings():
    facts = make_facts("debian12", PRIVILEGES["sudo"], ib=True)
    plan = build_plan(facts, make_choices(framework="mpi", network="ib", ssh_port="47113"),
                      load_catalog())
    job = plan.job
    assert isinstance(job.ssh_port, int) and job.ssh_port == 47113
    assert job.user == "alice" and job.uid == 1000
    assert job.mca == {"pml": "ucx"}  # the port is no setting text until rendered
    assert dict(job.env) == {"UCX_NET_DEVICES": "mlx5_0:1,mlx5_1:1"}
    assert job.passed == ("UCX_NET_DEVICES",)
    assert mca_settings(job) == {"plm_rsh_args": "-p 47113", "pml": "ucx"}
    # what records and verify read, rendered from the same Job
    assert plan.mpirun_args == tuple(mpirun_args(job))
    assert plan.launch_env == (("UCX_NET_DEVICES", "mlx5_0:1,mlx5_1:1"),)


def test_open_mpi_5_names_are_chosen_when_rendering_only():
    assert mpirun_args(JOB)[:3] == ["--mca", "plm_rsh_args", "-p 47113"]
    assert mpirun_args(JOB, 5)[:3] == ["--prtemca", "plm_ssh_args", "-p 47113"]
    assert runtime_env(JOB) == [("OMPI_MCA_plm_rsh_args", "-p 47113"),
                                ("PRTE_MCA_plm_ssh_args", "-p 47113")]
    torch = dataclasses.replace(JOB, framework="pytorch", mca={})
    assert mpirun_args(torch) == ["-x", "UCX_NET_DEVICES"] and runtime_env(torch) == []


def test_a_job_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        JOB.ssh_port = 22  # type: ignore[misc]


def test_a_job_is_frozen_all_through_and_hashable():
    """Its environment and MCA settings keep the plan's order, cannot be changed through the
    Job, and compare as mappings: a Job can be a key, and a copy equals it."""
    with pytest.raises(TypeError):
        JOB.env["UCX_TLS"] = "rc"  # type: ignore[index]
    with pytest.raises(TypeError):
        JOB.mca["pml"] = "ob1"  # type: ignore[index]
    again = dataclasses.replace(JOB, env={"UCX_NET_DEVICES": "mlx5_0:1"})
    assert again == JOB and hash(again) == hash(JOB) and {JOB: 1}[again] == 1
    assert dataclasses.replace(JOB, mca={"pml": "ob1"}) != JOB
    two = dataclasses.replace(JOB, env={"B": "1", "A": "2"})
    assert list(two.env) == ["B", "A"] and two.env == {"A": "2", "B": "1"}
