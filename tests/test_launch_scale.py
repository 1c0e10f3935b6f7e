"""The launch script at many instances (issue 31): a worker waits for the first instance
only, the first instance waits for its workers side by side, tells every worker the end of
the job side by side with retries and names the ones it could not tell, a worker whose
first instance is gone ends by itself, and one its word does not reach asks for the
record of this run's end. Run with the fake commands of test_launch.py."""
import os
import re
import signal
import subprocess
import time

import pytest

from test_launch import HOSTS, _fakes, _run, plan

from hpcwizard import runtime
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


# --- the end of the job kept on the first instance, asked for by a worker not told ---------

def _first_over_ssh(tmp_path, fk, fails: bool = False):
    """ssh as the first instance answers it: the remote command runs with sh in the first
    instance's home (its own directory here); each call logged. fails: every call fails as
    an unreachable host does."""
    first_home = tmp_path / "first-home"
    (first_home / ".hpcwizard/launch").mkdir(parents=True)
    body = (f'echo "ssh $*" >> {fk["log"]}\n'
            + ('echo "ssh: connect to host node01 port 2222: No route to host" >&2; exit 255\n'
               if fails else f'cd {first_home} && exec sh -c "${{@: -1}}"\n'))
    (tmp_path / "bin/ssh").write_text("#!/bin/bash\n" + body)
    return first_home / ".hpcwizard/launch/end.node01"


def _us(t: float) -> int:
    return int(t * 1e6)


def _asks(fk) -> int:
    return sum(1 for c in _calls(fk) if c.startswith("ssh ") and "end.node01" in c)


def _wait_until(cond, limit: float = 30) -> None:
    deadline = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < deadline, "the state did not come"
        time.sleep(0.1)


def test_the_first_instance_keeps_the_jobs_status_before_it_tells(tmp_path):
    """The record is written whole, private, before the first worker is told: a worker
    not told can read it as soon as the first instance knows it."""
    fk = _fakes(tmp_path, "node01", HOSTS)
    run_dir = fk["home"] / ".hpcwizard/launch"
    (tmp_path / "bin/ssh").write_text(
        f'#!/bin/bash\necho "tell $7 sees $(cat {run_dir}/end.node01)" >> {fk["log"]}\n')
    (tmp_path / "bin/mpirun").write_text("#!/bin/bash\nexit 5\n")
    env = {**fk["env"], "HOSTS": "node01,node02,node03"}
    before = time.time()
    r = _run(tmp_path, launch_script(plan("mpi", "tcp")), env, ["--", "hostname"])
    assert r.returncode == 5, r.stderr
    record = run_dir / "end.node01"
    status, written = record.read_text().split()
    assert status == "5" and before <= int(written) / 1e6 <= time.time(), record.read_text()
    assert record.stat().st_mode & 0o077 == 0
    told = [c for c in _calls(fk) if c.startswith("tell ")]
    assert sorted(told) == [f"tell {h} sees 5 {written}" for h in ("node02", "node03")], told


def test_a_worker_not_told_asks_the_first_instance_and_ends_with_the_jobs_status(tmp_path):
    """The first instance answers on its port but its word never comes: the worker asks
    for the record, passes over an earlier run's (written before this worker started),
    and ends with this run's status once it is there."""
    fk = _fakes(tmp_path, "node02", HOSTS)
    record = _first_over_ssh(tmp_path, fk)
    record.write_text(f"7 {_us(time.time() - 100)}\n")  # an earlier run's
    env = {**fk["env"], "HOSTS": "node01,node02", "FIRST_GONE_AFTER": "3"}
    proc, seen = _worker_waiting(tmp_path, env)
    _wait_until(lambda: _asks(fk) >= 2)
    assert proc.poll() is None, "".join(seen)
    record.write_text(f"5 {_us(time.time())}\n")
    _, err = proc.communicate(timeout=30)
    err = "".join(seen) + err
    assert proc.returncode == 5, err
    assert err.strip().splitlines()[-1].endswith(
        "the job ended with status 5 (from node01's record: it could not tell this instance)"), err
    assert "could not ask" not in err


def test_a_worker_that_cannot_ask_says_so_once_and_still_takes_the_marker(tmp_path):
    fk = _fakes(tmp_path, "node02", HOSTS)
    _first_over_ssh(tmp_path, fk, fails=True)
    env = {**fk["env"], "HOSTS": "node01,node02", "FIRST_GONE_AFTER": "3"}
    proc, seen = _worker_waiting(tmp_path, env)
    _wait_until(lambda: _asks(fk) >= 3)
    (fk["home"] / ".hpcwizard/launch/done.node02").write_text("4\n")
    _, err = proc.communicate(timeout=30)
    err = "".join(seen) + err
    assert proc.returncode == 4, err
    failed = [ln for ln in err.splitlines() if "could not ask node01" in ln]
    assert len(failed) == 1 and failed[0].endswith(
        "(ssh to node01 failed: ssh: connect to host node01 port 2222: No route to host); "
        "asking again about every 3s"), err


def test_a_worker_asks_no_more_often_than_its_period(tmp_path):
    """At 40 hosts and FIRST_GONE_AFTER=1 the period is N/4 = 10 s: in the first 5 s the
    worker, which probes the port every second, asks at most once."""
    hosts = {f"n{i:02d}": f"10.0.1.{i}" for i in range(40)}
    fk = _fakes(tmp_path, "n01", hosts)
    _first_over_ssh(tmp_path, fk)
    _probe_log(tmp_path, fk)
    env = {**fk["env"], "HOSTS": "n{00..39}", "FIRST_GONE_AFTER": "1"}
    proc = subprocess.Popen(["bash", str(_script(tmp_path)), "--", "hostname"], env=env,
                            stderr=subprocess.PIPE, text=True)
    try:
        _wait_until(lambda: sum(1 for c in _calls(fk) if c == "probe n00") >= 6)
        assert sum(1 for c in _calls(fk) if c.startswith("ssh ")) <= 1, _calls(fk)
    finally:
        proc.kill()
        proc.communicate()


@pytest.mark.parametrize("record, waited, want", [
    (None, 100, (1, "")),               # the job runs: no record yet
    ("3 {now}", 100, (0, "3")),         # written after the worker started
    ("3 {now-200}", 100, (1, "")),      # an earlier run's: older than the worker's wait
    ("3 {now-0.5}", 1, (0, "3")),       # half a second after the worker started
    ("3 {now-1.5}", 1, (1, "")),        # half a second before it
    ("3 {now-1.1}", "1 no %N", (1, "")),  # whole seconds: never an earlier run's taken
    ("3 {now-5}", "100 no %N", (0, "3")),
    ("x y", 100, (2, "")),              # not a record: no answer
    ("3 {now-100}", "10 no date", (1, "")),  # no clock there: an earlier run's not taken
])
def test_asking_for_the_record_tells_this_runs_from_an_earlier_ones(tmp_path, record, waited,
                                                                    want):
    """waited: the worker's wait in seconds; 'no %N': the first instance's date gives whole
    seconds only (busybox); 'no date': it gives nothing."""
    fk = _fakes(tmp_path, "node02", HOSTS)
    path = _first_over_ssh(tmp_path, fk)
    if "no %N" in str(waited):
        (tmp_path / "bin/date").write_text(
            '#!/bin/bash\nif [ "$1" = +%s%N ]; then echo "$(/bin/date +%s)N"; '
            'else exec /bin/date "$@"; fi\n')
        (tmp_path / "bin/date").chmod(0o755)
    if "no date" in str(waited):
        (tmp_path / "bin/date").write_text("#!/bin/bash\nexit 127\n")
        (tmp_path / "bin/date").chmod(0o755)
    now = time.time()
    if record is not None:
        path.write_text(re.sub(r"\{now(-[0-9.]+)?\}",
                               lambda m: str(_us(now + float(m.group(1) or 0))), record) + "\n")
    script = (runtime.library() + "\nrc=0\nhw_rt_clock now\n"
              f"start=$((now - {int(str(waited).split()[0]) * 10**6}))\n"
              "hw_rt_end_ask node01 2222 .hpcwizard/launch $start || rc=$?\n"
              'printf "%s|%s" "$rc" "$HW_RT_END_STATUS"\n')
    r = subprocess.run(["bash", "-c", script], env=fk["env"], capture_output=True, text=True,
                       timeout=30)
    assert r.stdout == f"{want[0]}|{want[1]}", r.stderr


def test_the_first_instance_says_where_its_time_went(tmp_path):
    """One line before the last: the workers' sshd, mpirun's start and run, and the telling,
    each as long as it took (a 1 s job, a 0.5 s ssh per worker)."""
    fk = _fakes(tmp_path, "node01", HOSTS)
    (tmp_path / "bin/mpirun").write_text("#!/bin/bash\nsleep 1\n")
    (tmp_path / "bin/ssh").write_text("#!/bin/bash\nsleep 0.5\n")
    env = {**fk["env"], "HOSTS": "node01,node02,node03,node07"}
    r = _run(tmp_path, launch_script(plan("mpi", "tcp")), env, ["--", "hostname"])
    assert r.returncode == 0, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    m = re.fullmatch(r"launch\[node01\]: times: the workers' sshd ready after (\S+)s, mpirun "
                     r"started after (\S+)s and ran (\S+)s, telling 3 workers took (\S+)s; "
                     r"(\S+)s in all", last)
    assert m, last
    ready, started, ran, told, total = map(float, m.groups())
    assert ready <= started and 1.0 <= ran < 5 and 0.5 <= told < 3, last
    assert started + ran + told <= total + 0.2, last


def test_a_record_written_just_after_the_worker_started_is_taken_over_a_slow_login(tmp_path):
    """The first instance's clock is read once the session is open: a login of 2 s does not
    make a record written half a second after the worker began look like an earlier run's
    (a worker started while the job was ending would otherwise wait for ever)."""
    fk = _fakes(tmp_path, "node02", HOSTS)
    path = _first_over_ssh(tmp_path, fk)
    ssh = tmp_path / "bin/ssh"
    ssh.write_text(ssh.read_text().replace("#!/bin/bash\n", "#!/bin/bash\nsleep 2\n", 1))
    now = time.time()
    path.write_text(f"6 {_us(now - 0.5)}\n")
    script = (runtime.library() + "\nrc=0\nhw_rt_clock now\nstart=$((now - 1000000))\n"
              "hw_rt_end_ask node01 2222 .hpcwizard/launch $start || rc=$?\n"
              'printf "%s|%s" "$rc" "$HW_RT_END_STATUS"\n')
    r = subprocess.run(["bash", "-c", script], env=fk["env"], capture_output=True, text=True,
                       timeout=30)
    assert r.stdout == "0|6", r.stderr


def _gone(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("ssh_body", [
    'echo $$ > {pidfile}\nexec sleep 300\n',                         # a login that hangs
    'echo $$ > {pidfile}\necho hw_ready\nexec sleep 300\n',          # a remote command that hangs
    'echo $$ > {pidfile}\nwhile :; do echo motd; sleep 0.5; done\n',  # talks, never answers
])
def test_an_ask_that_gets_no_answer_ends_in_time_and_leaves_no_ssh(tmp_path, ssh_body):
    """The ask is bounded as a whole (not per line read) and ends its ssh: nothing it
    started runs on once it has returned."""
    fk = _fakes(tmp_path, "node02", HOSTS)
    pidfile = tmp_path / "ssh.pid"
    (tmp_path / "bin/ssh").write_text("#!/bin/bash\n" + ssh_body.format(pidfile=pidfile))
    script = (runtime.library() + "\n_HW_RT_ASK_SECONDS=2\nrc=0\n"
              "hw_rt_end_ask node01 2222 .hpcwizard/launch 0 || rc=$?\n"
              'printf "%s|%s" "$rc" "$HW_RT_ERROR"\n')
    began = time.monotonic()
    try:
        r = subprocess.run(["bash", "-c", script], env=fk["env"], capture_output=True,
                           text=True, timeout=30)
        took = time.monotonic() - began
        rc, error = r.stdout.split("|", 1)
        assert rc == "2" and error.startswith("node01 gave no answer within 2s"), r
        assert took < 10, took
        pid = int(pidfile.read_text())
        _wait_until(lambda: _gone(pid), limit=10)
    finally:  # the fake ssh this test started, should it have outlived the ask
        if pidfile.exists() and not _gone(int(pidfile.read_text())):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
