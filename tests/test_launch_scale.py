"""The launch script at many instances (issue 31): a worker waits for the first instance
only, the first instance waits for its workers side by side, tells every worker the end of
the job side by side with retries and names the ones it could not tell, and a worker whose
first instance is gone ends by itself. Run with the fake commands of test_launch.py."""
import subprocess

from test_launch import HOSTS, _fakes, _run, plan

from hpcwizard.export import launch_script


def _script(tmp_path):
    f = tmp_path / "launch.sh"
    f.write_text(launch_script(plan("mpi", "tcp")))
    return f


def _calls(fk) -> list:
    return fk["log"].read_text().splitlines() if fk["log"].exists() else []



def _worker_waiting(tmp_path, env):
    """A worker started, once it says it waits for the first instance: the process and the
    lines it wrote so far."""
    proc = subprocess.Popen(["bash", str(_script(tmp_path)), "--", "hostname"], env=env,
                            stderr=subprocess.PIPE, text=True)
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if "waiting for node01 to run the job" in line:
            break
    return proc, seen


def test_the_end_reaches_every_worker_at_once(tmp_path):
    """Each fake ssh waits until all three are running at the same time: told one after
    another, the first would give up waiting and fail."""
    fk = _fakes(tmp_path, "node01", HOSTS)
    met = tmp_path / "met"
    met.mkdir()
    (tmp_path / "bin/ssh").write_text(
        f'#!/bin/bash\necho "ssh $*" >> {fk["log"]}\n: > {met}/"$7"\n'
        f'for i in $(seq 100); do [ "$(ls {met} | wc -l)" -ge 3 ] && exit 0; sleep 0.1; done\n'
        'exit 1\n')
    env = {**fk["env"], "HOSTS": "node01,node02,node03,node07"}
    r = _run(tmp_path, launch_script(plan("mpi", "tcp")), env, ["--", "hostname"])
    assert r.returncode == 0, r.stderr
    ssh = [c for c in _calls(fk) if c.startswith("ssh ")]
    assert sorted(c.split()[7] for c in ssh) == ["node02", "node03", "node07"], ssh
    assert "not told" not in r.stderr and "could not tell" not in r.stderr


def test_a_worker_not_told_is_retried_then_named_in_the_last_line(tmp_path):
    fk = _fakes(tmp_path, "node01", HOSTS)
    (tmp_path / "bin/ssh").write_text(
        f'#!/bin/bash\necho "ssh $*" >> {fk["log"]}\n[ "$7" != node03 ]\n')
    env = {**fk["env"], "HOSTS": "node01,node02,node03,node07"}
    r = _run(tmp_path, launch_script(plan("mpi", "tcp")), env, ["--", "hostname"])
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 3, r.stderr
    assert last.endswith("the job ended with status 0; not told after 3 tries (exit 3): "
                         "node03"), last
    told = [c.split()[7] for c in _calls(fk) if c.startswith("ssh ")]
    assert told.count("node03") == 3 and told.count("node02") == 1, told
    assert "could not tell node03 that the job ended (try 2 of 3)" in r.stderr


def test_a_failed_job_keeps_its_status_when_a_worker_is_not_told(tmp_path):
    fk = _fakes(tmp_path, "node01", HOSTS)
    (tmp_path / "bin/ssh").write_text('#!/bin/bash\n[ "$7" != node02 ]\n')
    (tmp_path / "bin/mpirun").write_text("#!/bin/bash\nexit 5\n")
    env = {**fk["env"], "HOSTS": "node01,node02,node03"}
    r = _run(tmp_path, launch_script(plan("mpi", "tcp")), env, ["--", "hostname"])
    assert r.returncode == 5, r.stderr
    assert r.stderr.strip().splitlines()[-1].endswith(
        "the job ended with status 5; not told after 3 tries (exit 5): node02")


def _probe_log(tmp_path, fk, fails: str = "", off=None) -> None:
    """timeout (the port probe: timeout 2 bash -c ... _ HOST PORT) logs each host it is asked
    about; HOST `fails` never answers, nor does any host once the file `off` exists."""
    cond = f'[ "$6" != "{fails}" ]'
    if off is not None:
        cond += f" && [ ! -e {off} ]"
    (tmp_path / "bin/timeout").write_text(
        f'#!/bin/bash\necho "probe $6" >> {fk["log"]}\n{cond}\n')


def test_a_worker_waits_for_the_first_instance_only(tmp_path):
    """node03 never answers: the worker node02 neither probes it nor waits for it."""
    fk = _fakes(tmp_path, "node02", HOSTS)
    _probe_log(tmp_path, fk, fails="node03")
    env = {**fk["env"], "HOSTS": "node01,node02,node03", "WAIT_TRIES": "3"}
    proc, seen = _worker_waiting(tmp_path, env)
    (fk["home"] / ".hpcwizard/launch/done.node02").write_text("0\n")
    _, err = proc.communicate(timeout=20)
    err = "".join(seen) + err
    assert proc.returncode == 0, err
    probes = {c.split()[1] for c in _calls(fk) if c.startswith("probe ")}
    assert "node03" not in probes and "node01" in probes, probes


def test_the_first_instance_waits_for_every_worker_and_names_the_missing(tmp_path):
    fk = _fakes(tmp_path, "node01", HOSTS)
    (tmp_path / "bin/timeout").write_text('#!/bin/bash\n[ "$6" != node03 ] && [ "$6" != node07 ]\n')
    env = {**fk["env"], "HOSTS": "node01,node02,node03,node07", "WAIT_TRIES": "1"}
    r = _run(tmp_path, launch_script(plan("mpi", "tcp")), env, ["--", "hostname"])
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 2, r.stderr
    assert last.endswith("node03: port 2222 not ready after 1 tries; not ready either: node07"), last
    assert "mpirun" not in "".join(_calls(fk))


def test_a_worker_whose_first_instance_is_gone_ends_by_itself(tmp_path):
    """The first instance answers, then stops answering (its sshd gone): the worker ends
    after FIRST_GONE_AFTER with a line that says why, never told the job's status."""
    fk = _fakes(tmp_path, "node02", HOSTS)
    off = tmp_path / "first-gone"
    _probe_log(tmp_path, fk, off=off)
    env = {**fk["env"], "HOSTS": "node01,node02", "FIRST_GONE_AFTER": "3"}
    proc, seen = _worker_waiting(tmp_path, env)
    off.write_text("")
    _, err = proc.communicate(timeout=30)
    err = "".join(seen) + err
    last = err.strip().splitlines()[-1]
    assert proc.returncode == 3, err
    assert "node01 (the first instance) has not answered on port 2222 for " in last, last
    assert last.endswith("(FIRST_GONE_AFTER=3): ending without the job's status"), last


def test_a_worker_with_first_gone_after_zero_waits_for_worker_timeout(tmp_path):
    """FIRST_GONE_AFTER=0 turns the watch off; WORKER_TIMEOUT stays the overall cap."""
    fk = _fakes(tmp_path, "node02", HOSTS)
    _probe_log(tmp_path, fk, off=tmp_path / "started")
    env = {**fk["env"], "HOSTS": "node01,node02", "FIRST_GONE_AFTER": "0",
           "WORKER_TIMEOUT": "3"}
    proc, seen = _worker_waiting(tmp_path, env)
    (tmp_path / "started").write_text("")
    _, err = proc.communicate(timeout=30)
    err = "".join(seen) + err
    assert proc.returncode == 2, err
    assert err.strip().splitlines()[-1].endswith(
        "the job did not end within 3s (WORKER_TIMEOUT)"), err
