"""The launch script at many instances (issue 31): a worker waits for the first instance
only, the first instance waits for its workers side by side, tells every worker the end of
the job side by side with retries and names the ones it could not tell, a worker whose
first instance is gone ends by itself, and one its word does not reach asks for the
record of this run's end. Run with the fake commands of test_launch.py."""
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from _pipes import until_line
from test_launch import HOSTS, _fakes, _run, plan

from hpcwizard import runtime
from hpcwizard.export import launch_script


def _script(tmp_path):
    f = tmp_path / "launch.sh"
    f.write_text(launch_script(plan("mpi", "tcp")))
    return f


# A fake ssh's first lines: its host (the word after -p PORT) in $h; a request to the
# shared connection's master (-O exit) ends there, told nothing and logged nowhere.
_SSH_HOST = ('a=("$@"); for ((i = 0; i < $#; i++)); do [ "${a[i]}" = -p ] && h=${a[i + 2]}; done\n'
             'case " $* " in *" -O exit "*) exit 0 ;; esac\n')


def _calls(fk) -> list:
    return fk["log"].read_text().splitlines() if fk["log"].exists() else []



def _worker_waiting(tmp_path, env, script=None):
    """A worker started (the launch script, or `script`), once it says it waits for the
    first instance: the process and the lines it wrote so far."""
    script = script or _script(tmp_path)
    proc = subprocess.Popen(["bash", str(script), "--", "hostname"], env=env,
                            stderr=subprocess.PIPE, text=True)
    seen: list = []
    until_line(proc, "waiting for node01 to run the job", seen)
    return proc, seen


def test_the_end_reaches_every_worker_at_once(tmp_path):
    """Each fake ssh waits until all three are running at the same time: told one after
    another, the first would give up waiting and fail."""
    fk = _fakes(tmp_path, "node01", HOSTS)
    met = tmp_path / "met"
    met.mkdir()
    (tmp_path / "bin/ssh").write_text(
        f'#!/bin/bash\n{_SSH_HOST}echo "ssh $h $*" >> {fk["log"]}\n: > {met}/"$h"\n'
        f'for i in $(seq 100); do [ "$(ls {met} | wc -l)" -ge 3 ] && exit 0; sleep 0.1; done\n'
        'exit 1\n')
    env = {**fk["env"], "HOSTS": "node01,node02,node03,node07"}
    r = _run(tmp_path, launch_script(plan("mpi", "tcp")), env, ["--", "hostname"])
    assert r.returncode == 0, r.stderr
    ssh = [c for c in _calls(fk) if c.startswith("ssh ")]
    assert sorted(c.split()[1] for c in ssh) == ["node02", "node03", "node07"], ssh
    assert "not told" not in r.stderr and "could not tell" not in r.stderr


def test_a_worker_not_told_is_retried_then_named_in_the_last_line(tmp_path):
    fk = _fakes(tmp_path, "node01", HOSTS)
    (tmp_path / "bin/ssh").write_text(
        f'#!/bin/bash\n{_SSH_HOST}echo "ssh $h $*" >> {fk["log"]}\n[ "$h" != node03 ]\n')
    env = {**fk["env"], "HOSTS": "node01,node02,node03,node07"}
    r = _run(tmp_path, launch_script(plan("mpi", "tcp")), env, ["--", "hostname"])
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 3, r.stderr
    assert last.endswith("the job ended with status 0; not told after 3 tries (exit 3): "
                         "node03"), last
    told = [c.split()[1] for c in _calls(fk) if c.startswith("ssh ")]
    assert told.count("node03") == 3 and told.count("node02") == 1, told
    assert "could not tell node03 that the job ended (try 2 of 3)" in r.stderr


def test_a_failed_job_keeps_its_status_when_a_worker_is_not_told(tmp_path):
    fk = _fakes(tmp_path, "node01", HOSTS)
    (tmp_path / "bin/ssh").write_text(f'#!/bin/bash\n{_SSH_HOST}[ "$h" != node02 ]\n')
    (tmp_path / "bin/mpirun").write_text("#!/bin/bash\nexit 5\n")
    env = {**fk["env"], "HOSTS": "node01,node02,node03"}
    r = _run(tmp_path, launch_script(plan("mpi", "tcp")), env, ["--", "hostname"])
    assert r.returncode == 5, r.stderr
    assert r.stderr.strip().splitlines()[-1].endswith(
        "the job ended with status 5; not told after 3 tries (exit 5): node02")


def _probe_log(tmp_path, fk, fails: str = "", off=None) -> None:
    """timeout (the port probe: timeout 2 bash -c ... _ HOST PORT) logs each host it is asked
    about, and each that answered; HOST `fails` never answers, nor does any host once the
    file `off` exists."""
    cond = f'[ "$6" != "{fails}" ]'
    if off is not None:
        cond += f" && [ ! -e {off} ]"
    (tmp_path / "bin/timeout").write_text(
        f'#!/bin/bash\necho "probe $6" >> {fk["log"]}\n'
        f'{cond} || exit 1\necho "answered $6" >> {fk["log"]}\n')


def test_a_worker_waits_for_the_first_instance_only(tmp_path):
    """node03 never answers: the worker node02 neither probes it nor waits for it. Nor does
    it probe node01's port before it waits: every worker's probe at once would land on the
    first instance's sshd; the wait's watch probes it, once a second here."""
    fk = _fakes(tmp_path, "node02", HOSTS)
    _probe_log(tmp_path, fk, fails="node03")
    env = {**fk["env"], "HOSTS": "node01,node02,node03", "WAIT_TRIES": "3",
           "FIRST_GONE_AFTER": "6"}
    proc, seen = _worker_waiting(tmp_path, env)
    assert not any(c == "probe node01" for c in _calls(fk)), _calls(fk)
    deadline = time.monotonic() + 30
    while "probe node01" not in _calls(fk) and time.monotonic() < deadline:
        time.sleep(0.1)
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
    # kept as the launch's end, for the workers that wait to learn by asking
    record = fk["home"] / ".hpcwizard/launch/end.node01"
    assert re.fullmatch(r"2 \d{16,19} launch\n", record.read_text()), record.read_text()
    assert record.stat().st_mode & 0o077 == 0


@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_first_instance_stopped_before_its_job_keeps_that_end(tmp_path, sig, status):
    """Stopped while it waits for a worker that never comes: its record says so, with the
    status the signal gives, so that the workers that came do not wait for ever."""
    fk = _fakes(tmp_path, "node01", HOSTS)
    _probe_log(tmp_path, fk, fails="node03")
    env = {**fk["env"], "HOSTS": "node01,node02,node03", "WAIT_TRIES": "8"}
    proc = subprocess.Popen(["bash", str(_script(tmp_path)), "--", "hostname"], env=env,
                            stderr=subprocess.PIPE, text=True)
    _wait_until(lambda: "probe node03" in _calls(fk))
    run_dir = fk["home"] / ".hpcwizard/launch"
    assert (run_dir / "begun.node01").exists()  # a launch runs here, workers that ask learn
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == status, err
    record = run_dir / "end.node01"
    assert re.fullmatch(rf"{status} \d{{16,19}} launch\n", record.read_text()), err
    assert not (run_dir / "begun.node01").exists()
    assert "mpirun" not in "".join(_calls(fk))


# mpirun's ssh arguments, one line, as mpirun is given them (plm_rsh_args' value whole)
_RSH_ARGS = ('a=("$@"); for ((i = 0; i < $#; i++)); do\n'
             '  [ "${a[i]}" = plm_rsh_args ] && echo "rsh ${a[i + 1]}" >> LOG; done; exit 0\n')
_SHARED = "-o ControlPath=~/.hpcwizard/launch/%C"


def _home_of(short: str, length: int) -> Path:
    """A home under the directory `short`, `length` bytes long in all."""
    return Path(short) / ("h" * (length - len(short) - 1))


def _until_probed(fk, host: str) -> None:
    """Until host's port has answered the waiting worker's probe (_probe_log's fake)."""
    _wait_until(lambda: f"answered {host}" in _calls(fk))


def _share_run(tmp_path, home, passwd_home=None):
    """The first instance of three with fakes that log mpirun's ssh arguments and every ssh
    call by its host (-O exit ones too), its HOME `home`; the password file gives it
    `passwd_home` (ssh's ~), else `home` too."""
    fk = _fakes(tmp_path, "node01", HOSTS)
    getent = tmp_path / "bin/getent"
    getent.write_text('#!/bin/bash\nif [ "$1" = passwd ]; then '
                      f'echo "u:x:0:0::{passwd_home or home}:/bin/bash"; exit 0; fi\n'
                      + getent.read_text().split("\n", 1)[1])
    (tmp_path / "bin/mpirun").write_text("#!/bin/bash\n" + _RSH_ARGS.replace("LOG", str(fk["log"])))
    (tmp_path / "bin/ssh").write_text(
        '#!/bin/bash\na=("$@"); for ((i = 0; i < $#; i++)); do [ "${a[i]}" = -p ] && h=${a[i + 2]}; done\n'
        f'echo "ssh $h $*" >> {fk["log"]}\n')
    home.mkdir(parents=True, exist_ok=True)
    env = {**fk["env"], "HOSTS": "node01,node02,node03", "HOME": str(home)}
    r = _run(tmp_path, launch_script(plan("mpi", "tcp")), env, ["--", "hostname"])
    assert r.returncode == 0, r.stderr
    return _calls(fk)


def test_mpirun_and_the_end_of_the_job_share_each_workers_connection(tmp_path):
    """mpirun's logins become shared connections (ssh's ControlMaster) in the private run
    directory; each worker is told over its connection, which then ends. The home is
    31 bytes long, the most whose socket's path fits in 107 (/home/NAME fits)."""
    with tempfile.TemporaryDirectory(prefix="h", dir="/tmp") as short:
        calls = _share_run(tmp_path, _home_of(short, 31))
    assert [c for c in calls if c.startswith("rsh ")] == [
        "rsh -p 2222 -o ControlMaster=auto -o ControlPersist=60 -o ServerAliveInterval=10 "
        f"-o ServerAliveCountMax=6 {_SHARED}"], calls
    for h in ("node02", "node03"):
        mine = [c for c in calls if c.startswith(f"ssh {h} ")]
        assert len(mine) == 2, calls
        tell, close = mine
        assert tell.startswith(f"ssh {h} {_SHARED} -o ControlMaster=no ") and "done." + h in tell
        assert close == f"ssh {h} {_SHARED} -O exit -p 2222 {h}", close


@pytest.mark.parametrize("blank, length", [(True, 31), (False, 32)], ids=["a blank", "too long"])
def test_a_home_no_socket_path_fits_shares_nothing(tmp_path, blank, length):
    """ORTE splits mpirun's ssh arguments at blanks, and a socket's path has at most 107
    bytes: such a home gets plain logins, as before, not a failed job."""
    with tempfile.TemporaryDirectory(prefix="h", dir="/tmp") as short:
        home = _home_of(short, length)
        if blank:
            home = home.with_name("h " + home.name[2:])
        calls = _share_run(tmp_path, home)
    assert [c for c in calls if c.startswith("rsh ")] == ["rsh -p 2222"], calls
    ssh = [c for c in calls if c.startswith("ssh ")]
    assert len(ssh) == 2 and not any("Control" in c or "-O exit" in c for c in ssh), ssh


def test_a_home_ssh_does_not_use_shares_nothing(tmp_path):
    """ssh reads its ~ from the password file, not $HOME: where the two differ, a socket
    ssh cannot make in its own home would fail every login, so nothing is shared."""
    with tempfile.TemporaryDirectory(prefix="h", dir="/tmp") as short:
        calls = _share_run(tmp_path, _home_of(short, 20), passwd_home=Path(short) / "other")
    assert [c for c in calls if c.startswith("rsh ")] == ["rsh -p 2222"], calls


def test_a_waiting_worker_starts_no_process_a_second(tmp_path):
    """The worker's wait rests without sleep and reads its marker without cat: with many
    instances on one machine, two processes a second per worker added up to a core."""
    fk = _fakes(tmp_path, "node02", HOSTS)
    _probe_log(tmp_path, fk)
    for name in ("sleep", "cat"):
        (tmp_path / "bin" / name).write_text(
            f'#!/bin/bash\necho "{name}" >> {fk["log"]}\nexec /bin/{name} "$@"\n')
        (tmp_path / "bin" / name).chmod(0o755)
    env = {**fk["env"], "HOSTS": "node01,node02", "FIRST_GONE_AFTER": "6"}
    proc, seen = _worker_waiting(tmp_path, env)
    # the watch probes node01 once a second (FIRST_GONE_AFTER / 6): three probes, two rests
    deadline = time.monotonic() + 30
    while sum(c == "probe node01" for c in _calls(fk)) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    (fk["home"] / ".hpcwizard/launch/done.node02").write_text("0\n")
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, "".join(seen) + err
    calls = _calls(fk)
    assert sum(c == "probe node01" for c in calls) >= 3, calls
    assert "sleep" not in calls and "cat" not in calls, calls


def test_a_worker_whose_first_instance_is_gone_ends_by_itself(tmp_path):
    """The first instance answers, then stops answering (its sshd gone): the worker ends
    after FIRST_GONE_AFTER with a line that says why, never told the job's status."""
    fk = _fakes(tmp_path, "node02", HOSTS)
    off = tmp_path / "first-gone"
    _probe_log(tmp_path, fk, off=off)
    env = {**fk["env"], "HOSTS": "node01,node02", "FIRST_GONE_AFTER": "3"}
    proc, seen = _worker_waiting(tmp_path, env)
    _until_probed(fk, "node01")  # it has answered once: started, then gone
    off.write_text("")
    _, err = proc.communicate(timeout=30)
    err = "".join(seen) + err
    last = err.strip().splitlines()[-1]
    assert proc.returncode == 3, err
    assert "node01 (the first instance) has not answered on port 2222 for " in last, last
    assert last.endswith("(FIRST_GONE_AFTER=3): ending without the job's status"), last
    # ended without its end: the next launch here clears a marker that comes late
    assert (fk["home"] / ".hpcwizard/launch/taken.node02").read_text() == "owed\n"


_LATE = re.compile(r"launch\[node02\]: the job had ended, with status (\d+), when this launch "
                   r"began: node01 told this instance \d+s ago \(it ran the job through the "
                   r"sshd already up on port 2222 here\)$")


def test_a_worker_started_after_its_job_ended_takes_the_end_at_once(tmp_path):
    """The worker's sshd was up before its launch began, so the first instance ran the job
    and told its end before then. After a launch here that took its own end, the marker is
    this run's: the worker ends with its status at once (no sshd, no wait, no ask). The
    same end told again (a tell tried again after it arrived) is not taken twice."""
    fk = _fakes(tmp_path, "node02", HOSTS)
    run_dir = fk["home"] / ".hpcwizard/launch"
    env = {**fk["env"], "HOSTS": "node01,node02", "FIRST_GONE_AFTER": "3"}
    proc, seen = _worker_waiting(tmp_path, env)  # the run before, told while it waits
    (run_dir / "done.node02").write_text("0 1111\n")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, "".join(seen) + err
    assert (run_dir / "taken.node02").read_text() == "1111\n"

    (run_dir / "done.node02").write_text("6 2222\n")  # told while no launch here waited
    before = _calls(fk)
    r = _run(tmp_path, launch_script(plan("mpi", "tcp")), env, ["--", "hostname"])
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 6, r.stderr
    assert len(lines) == 2 and lines[0].endswith("(this is node02, rank 1 of 2)"), r.stderr
    assert _LATE.match(lines[1]) and _LATE.match(lines[1])[1] == "6", r.stderr
    assert _calls(fk) == before  # no ssh, no mpirun
    assert not (run_dir / "done.node02").exists()
    assert (run_dir / "taken.node02").read_text() == "2222\n"

    (run_dir / "done.node02").write_text("6 2222\n")  # the same end, told again
    proc, seen = _worker_waiting(tmp_path, env)
    assert not (run_dir / "done.node02").exists(), "".join(seen)
    (run_dir / "done.node02").write_text("0 3333\n")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "when this launch began" not in err, "".join(seen) + err


def test_a_waiting_worker_does_not_take_the_end_taken_last_told_again(tmp_path):
    """The last launch here took its end from the first instance's record; a retry of that
    run's tell lands while the next launch waits. It is not this run's end: cleared, and
    the worker waits on for the marker that names another end."""
    fk = _fakes(tmp_path, "node02", HOSTS)
    run_dir = fk["home"] / ".hpcwizard/launch"
    run_dir.mkdir(parents=True)
    (run_dir / "taken.node02").write_text("7777\n")
    env = {**fk["env"], "HOSTS": "node01,node02", "FIRST_GONE_AFTER": "30"}
    proc, seen = _worker_waiting(tmp_path, env)
    (run_dir / "done.node02").write_text("5 7777\n")
    _wait_until(lambda: not (run_dir / "done.node02").exists())
    assert proc.poll() is None, "".join(seen)
    (run_dir / "done.node02").write_text("2 8888\n")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2, "".join(seen) + err
    assert (run_dir / "taken.node02").read_text() == "8888\n"


@pytest.mark.parametrize("before", ["none ran", "one lost its end", "too old", "unnamed"])
def test_a_marker_found_as_a_worker_begins_is_taken_only_when_it_can_be_this_runs(
        tmp_path, before):
    """Taken at once when no launch here is owed an end (none ran, or the last took its own)
    and the marker names its end and is no older than a worker waits for its first instance
    (FIRST_GONE_AFTER here). Cleared when the last launch here ended without its end (the
    marker may be that run's late word), when older, or unnamed (an older script's): that
    worker waits for this run's end."""
    fk = _fakes(tmp_path, "node02", HOSTS)
    run_dir = fk["home"] / ".hpcwizard/launch"
    run_dir.mkdir(parents=True)
    marker = run_dir / "done.node02"
    marker.write_text("5\n" if before == "unnamed" else "5 4444\n")
    if before == "one lost its end":
        (run_dir / "taken.node02").write_text("owed\n")
    if before == "too old":
        os.utime(marker, (time.time() - 60, time.time() - 60))
    env = {**fk["env"], "HOSTS": "node01,node02", "FIRST_GONE_AFTER": "30"}
    if before == "none ran":
        r = _run(tmp_path, launch_script(plan("mpi", "tcp")), env, ["--", "hostname"])
        assert r.returncode == 5 and _LATE.match(r.stderr.strip().splitlines()[-1]), r.stderr
        return
    proc, seen = _worker_waiting(tmp_path, env)
    assert not marker.exists(), "".join(seen)
    assert (run_dir / "taken.node02").read_text() == "owed\n"
    marker.write_text("0 5555\n")
    _, err = proc.communicate(timeout=30)
    err = "".join(seen) + err
    assert proc.returncode == 0 and err.strip().endswith("the job ended with status 0"), err
    assert "when this launch began" not in err


@pytest.mark.parametrize("gone_after, tries", [("3", "2"), ("0", "3")],
                         ids=["FIRST_GONE_AFTER the longer", "WAIT_TRIES, the watch off"])
def test_a_worker_whose_first_instance_never_answers_ends_after_its_waits(tmp_path, gone_after,
                                                                           tries):
    """The first instance never starts: a worker probes it until WAIT_TRIES' waits (1, 2, 4...
    seconds) or FIRST_GONE_AFTER, the longer, have passed, then says so, exit 2."""
    fk = _fakes(tmp_path, "node02", HOSTS)
    _probe_log(tmp_path, fk, fails="node01")
    env = {**fk["env"], "HOSTS": "node01,node02", "FIRST_GONE_AFTER": gone_after,
           "WAIT_TRIES": tries}
    proc, seen = _worker_waiting(tmp_path, env)
    _, err = proc.communicate(timeout=30)
    err = "".join(seen) + err
    assert proc.returncode == 2, err
    assert re.search(rf"node01: port 2222 not ready after \d+s \(WAIT_TRIES={tries}\); the "
                     "first instance runs the job$", err.strip()), err
    assert sum(c == "probe node01" for c in _calls(fk)) >= 2, _calls(fk)


def test_a_worker_with_first_gone_after_zero_waits_for_worker_timeout(tmp_path):
    """FIRST_GONE_AFTER=0 turns the watch off; WORKER_TIMEOUT stays the overall cap."""
    fk = _fakes(tmp_path, "node02", HOSTS)
    _probe_log(tmp_path, fk, off=tmp_path / "started")
    env = {**fk["env"], "HOSTS": "node01,node02", "FIRST_GONE_AFTER": "0",
           "WORKER_TIMEOUT": "3"}
    proc, seen = _worker_waiting(tmp_path, env)
    _until_probed(fk, "node01")
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
        f'#!/bin/bash\n{_SSH_HOST}echo "tell $h sees $(cat {run_dir}/end.node01)" >> {fk["log"]}\n')
    (tmp_path / "bin/mpirun").write_text(
        f'#!/bin/bash\n[ -s {run_dir}/begun.node01 ] && '
        f'echo "begun while mpirun ran" >> {fk["log"]}\nexit 5\n')
    env = {**fk["env"], "HOSTS": "node01,node02,node03"}
    before = time.time()
    r = _run(tmp_path, launch_script(plan("mpi", "tcp")), env, ["--", "hostname"])
    assert r.returncode == 5, r.stderr
    record = run_dir / "end.node01"
    status, written = record.read_text().split()
    assert status == "5" and before <= int(written) / 1e6 <= time.time(), record.read_text()
    assert record.stat().st_mode & 0o077 == 0
    # its mark that a launch runs there is gone once the end is kept, before any tell
    assert not (run_dir / "begun.node01").exists()
    told = [c for c in _calls(fk) if c.startswith("tell ")]
    assert sorted(told) == [f"tell {h} sees 5 {written}" for h in ("node02", "node03")], told
    assert "begun while mpirun ran" in _calls(fk)


def test_a_worker_not_told_asks_the_first_instance_and_ends_with_the_jobs_status(tmp_path):
    """The first instance answers on its port but its word never comes: the worker asks
    for the record, passes over an earlier run's (written before this worker started),
    and ends with this run's status once it is there."""
    fk = _fakes(tmp_path, "node02", HOSTS)
    record = _first_over_ssh(tmp_path, fk)
    record.write_text(f"7 {_us(time.time() - 100)}\n")  # an earlier run's
    begun = record.with_name("begun.node01")
    begun.write_text(f"{_us(time.time() - 10)}\n")  # this run's launch runs there
    env = {**fk["env"], "HOSTS": "node01,node02", "FIRST_GONE_AFTER": "3"}
    proc, seen = _worker_waiting(tmp_path, env)
    _wait_until(lambda: _asks(fk) >= 2)
    assert proc.poll() is None, "".join(seen)
    record.write_text(f"5 {_us(time.time())}\n")
    begun.unlink()
    _, err = proc.communicate(timeout=30)
    err = "".join(seen) + err
    assert proc.returncode == 5, err
    # the end it took, by its name: the same end told later is not taken by the next launch
    taken = (fk["home"] / ".hpcwizard/launch/taken.node02").read_text()
    assert taken == record.read_text().split()[1] + "\n", taken
    assert err.strip().splitlines()[-1].endswith(
        "the job ended with status 5 (from node01's record: it could not tell this instance)"), err
    assert "could not ask" not in err


def test_a_worker_learns_by_asking_that_the_first_instance_gave_up_before_the_job(tmp_path):
    """The first instance ended its launch before mpirun (another worker never ready): a
    worker that came ends with that status and a line that says the job did not run."""
    fk = _fakes(tmp_path, "node02", HOSTS)
    record = _first_over_ssh(tmp_path, fk)
    env = {**fk["env"], "HOSTS": "node01,node02,node03", "FIRST_GONE_AFTER": "3"}
    proc, seen = _worker_waiting(tmp_path, env)
    _wait_until(lambda: _asks(fk) >= 1)
    assert proc.poll() is None, "".join(seen)
    record.write_text(f"2 {_us(time.time())} launch\n")
    _, err = proc.communicate(timeout=30)
    err = "".join(seen) + err
    assert proc.returncode == 2, err
    assert err.strip().splitlines()[-1].endswith(
        "the job did not run: node01's launch ended with status 2 before its mpirun (from "
        "its record; its log says why)"), err


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
    ("2 {now} launch", 100, (0, "2", "launch")),  # the first instance's launch, no job
    ("2 {now-200} launch", 100, (1, "")),
    ("2 {now} done", 100, (2, "")),     # no other word
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
              'printf "%s|%s|%s" "$rc" "$HW_RT_END_STATUS" "$HW_RT_END_WHAT"\n')
    r = subprocess.run(["bash", "-c", script], env=fk["env"], capture_output=True, text=True,
                       timeout=30)
    what = want[2] if len(want) > 2 else ("job" if want[0] == 0 else "")
    assert r.stdout == f"{want[0]}|{want[1]}|{what}", r.stderr


@pytest.mark.parametrize("record, running, want", [
    ("0 {now-200}", False, (1, "", "0 200")),       # its last launch ended before this worker
    ("2 {now-200} launch", False, (1, "", "2 200")),
    ("0 {now-200}", True, (1, "", "")),             # a launch runs there now
    (None, False, (1, "", "")),                     # no record: not known to keep any
    ("0 {now-100.5}", False, (1, "", "0 100")),     # just before this worker's start
    ("0 {now}", False, (0, "0", "")),               # this run's end: taken
    ("0 {now-5}", True, (0, "0", "")),              # this run's end, another launch since
    ("2 {now-5} launch", False, (0, "2", "")),
    ("2 {now-5} launch", True, (1, "", "")),        # gave up; the one begun since may run it
])
def test_asking_tells_whether_a_launch_runs_on_the_first_instance(tmp_path, record, running,
                                                                  want):
    """The worker has waited 100 s; the first instance's record of its last end, and its
    mark while a launch runs (begun.node01), say whether one will run the job here."""
    fk = _fakes(tmp_path, "node02", HOSTS)
    path = _first_over_ssh(tmp_path, fk)
    now = time.time()
    if record is not None:
        path.write_text(re.sub(r"\{now(-[0-9.]+)?\}",
                               lambda m: str(_us(now + float(m.group(1) or 0))), record) + "\n")
    if running:
        path.with_name("begun.node01").write_text(f"{_us(now - 2)}\n")
    script = (runtime.library() + "\nrc=0\nhw_rt_clock now\nstart=$((now - 100000000))\n"
              "hw_rt_end_ask node01 2222 .hpcwizard/launch $start || rc=$?\n"
              'printf "%s|%s|%s" "$rc" "$HW_RT_END_STATUS" "$HW_RT_IDLE_STATUS $HW_RT_IDLE_AGE"\n')
    r = subprocess.run(["bash", "-c", script], env=fk["env"], capture_output=True, text=True,
                       timeout=30)
    rc, status, idle = r.stdout.split("|")
    assert (int(rc), status, idle.strip()) == want, r.stderr


def _worker_after_first(tmp_path, running: bool):
    """A worker waiting (FIRST_GONE_AFTER=3), its first instance's last launch ended 50 s
    ago, another running there or not: fakes, the record, the worker, its lines."""
    fk = _fakes(tmp_path, "node02", HOSTS)
    record = _first_over_ssh(tmp_path, fk)
    now = time.time()
    record.write_text(f"0 {_us(now - 50)}\n")
    if running:
        record.with_name("begun.node01").write_text(f"{_us(now - 40)}\n")
    env = {**fk["env"], "HOSTS": "node01,node02", "FIRST_GONE_AFTER": "3"}
    return (fk, record, *_worker_waiting(tmp_path, env))


def test_a_worker_ends_when_the_first_instance_runs_no_launch(tmp_path):
    """The first instance's last launch ended before this worker began, and none runs
    there (its sshd still answers): after the wait for a first instance that has not come
    (FIRST_GONE_AFTER here), the worker ends with a line saying why."""
    started = time.monotonic()
    fk, _, proc, seen = _worker_after_first(tmp_path, running=False)
    _, err = proc.communicate(timeout=60)
    err = "".join(seen) + err
    assert proc.returncode == 3, err
    assert time.monotonic() - started >= 3, err
    assert re.search(r"node01 \(the first instance\) runs no launch: its last ended 5\ds ago "
                     r"with status 0, before this one began, and none has begun in 3s "
                     r"\(WAIT_TRIES=1, FIRST_GONE_AFTER=3\): ending without the job's status$",
                     err.strip().splitlines()[-1]), err


def test_a_worker_waits_on_while_a_launch_runs_on_the_first_instance(tmp_path):
    """A launch began there after its last end (it waits for other workers, say): the
    worker asks on, past the wait for a first instance, and takes the end when it comes."""
    fk, record, proc, seen = _worker_after_first(tmp_path, running=True)
    started = time.monotonic()
    _wait_until(lambda: _asks(fk) >= 3 and time.monotonic() - started > 4)
    assert proc.poll() is None, "".join(seen)
    record.write_text(f"6 {_us(time.time())}\n")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 6, "".join(seen) + err


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


# --- the job's MPI daemon here says when the end is due ----------------------------------

def _proc_tree(tmp_path, daemons: dict):
    """A proc file system with this shell's network namespace (self/ns/net) and one
    directory per pid: {pid: (comm, same namespace)}, each owned by this user."""
    root = tmp_path / "proc"
    (root / "self/ns").mkdir(parents=True)
    (root / "self/ns/net").write_text("net:[1]\n")
    (root / "other-net").write_text("net:[2]\n")
    for pid, (comm, same_ns) in daemons.items():
        (root / str(pid) / "ns").mkdir(parents=True)
        (root / str(pid) / "comm").write_text(comm + "\n")
        (root / str(pid) / "ns/net").symlink_to(root / ("self/ns/net" if same_ns else "other-net"))
    return root


def _daemon(root, first_pid: str = "") -> tuple:
    script = (runtime.library() + f"\nHW_RT_DAEMON_PID={first_pid}\nrc=0\n"
              'hw_rt_mpi_daemon "$1" || rc=$?\nprintf "%s|%s" "$rc" "$HW_RT_DAEMON_PID"\n')
    r = subprocess.run(["bash", "-c", script, "_", str(root)], capture_output=True, text=True,
                       timeout=30)
    assert r.stderr == "", r.stderr
    return tuple(r.stdout.split("|"))


@pytest.mark.parametrize("daemons, want", [
    ({}, ("1", "")),
    ({"40": ("orted", True)}, ("0", "40")),                    # Open MPI 4
    ({"41": ("prted", True)}, ("0", "41")),                    # Open MPI 5 (PRRTE)
    ({"40": ("orted", False)}, ("1", "")),                     # another instance's
    ({"40": ("mpirun", True), "41": ("sshd", True)}, ("1", "")),
    ({"40": ("orted", False), "52": ("prted", True)}, ("0", "52")),
    ({"40": ("orted-x", True)}, ("1", "")),
])
def test_the_mpi_daemon_here_is_this_users_orted_or_prted_in_this_namespace(tmp_path, daemons,
                                                                           want):
    assert _daemon(_proc_tree(tmp_path, daemons)) == want


def test_the_mpi_daemon_found_last_is_looked_at_first_and_forgotten_once_gone(tmp_path):
    root = _proc_tree(tmp_path, {"40": ("orted", True), "52": ("orted", True)})
    assert _daemon(root, "52") == ("0", "52")
    assert _daemon(root, "77") == ("0", "40")  # gone: any other one
    (root / "40/comm").write_text("bash\n")    # its pid taken by another program
    assert _daemon(root, "40") == ("0", "52")


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to give a process to another user")
def test_an_mpi_daemon_of_another_user_is_not_this_jobs(tmp_path):
    root = _proc_tree(tmp_path, {"40": ("orted", True)})
    os.chown(root / "40", 65534, 65534)
    assert _daemon(root) == ("1", "")


def test_a_real_process_named_orted_is_seen_in_proc(tmp_path):
    """The real /proc: a copy of sleep named orted, started here, is found by its pid."""
    exe = tmp_path / "orted"
    shutil.copy2(shutil.which("sleep"), exe)
    proc = subprocess.Popen([str(exe), "300"])
    try:
        assert _daemon("/proc", "") == ("0", str(proc.pid))
        assert _daemon("/proc", str(proc.pid)) == ("0", str(proc.pid))
    finally:
        proc.kill()
        proc.wait()
    assert _daemon("/proc", str(proc.pid))[1] != str(proc.pid)


def _worker_with_daemon(tmp_path, fk, root):
    """The launch script with the daemon looked for in the proc tree root."""
    text = launch_script(plan("mpi", "tcp"))
    assert text.count("if hw_rt_mpi_daemon; then") == 1
    (tmp_path / "launch.sh").write_text(
        text.replace("if hw_rt_mpi_daemon; then", f"if hw_rt_mpi_daemon {root}; then"))


def test_a_worker_asks_only_once_the_mpi_daemon_here_has_ended(tmp_path):
    """This run's record is there from the start, but while the daemon runs (6 probes of
    the first instance's port, twice the period) nobody asks for it; once the daemon has
    ended the worker asks and ends with the record's status."""
    fk = _fakes(tmp_path, "node02", HOSTS)
    record = _first_over_ssh(tmp_path, fk)
    _probe_log(tmp_path, fk)
    root = _proc_tree(tmp_path, {"4242": ("orted", True)})
    _worker_with_daemon(tmp_path, fk, root)
    env = {**fk["env"], "HOSTS": "node01,node02", "FIRST_GONE_AFTER": "3"}
    proc, seen = _worker_waiting(tmp_path, env, tmp_path / "launch.sh")
    try:
        record.write_text(f"6 {_us(time.time())}\n")
        _wait_until(lambda: sum(1 for c in _calls(fk) if c == "probe node01") >= 7)
        assert _asks(fk) == 0, _calls(fk)
        (root / "4242/comm").write_text("bash\n")  # the daemon ended, its pid taken
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    err = "".join(seen) + err
    assert proc.returncode == 6, err
    assert _asks(fk) == 1, _calls(fk)
    # said once, though looked at every second while it ran
    assert err.count("node01 started the job here") == 1, err
    assert "launch[node02]: node01 started the job here (its MPI daemon: pid 4242)\n" in err, err
    assert err.strip().splitlines()[-1].endswith(
        "the job ended with status 6 (from node01's record: it could not tell this instance)")


@pytest.mark.parametrize("first", ["no record", "cannot be asked"])
def test_a_worker_whose_daemon_ended_without_a_record_ends_by_itself(tmp_path, first):
    """The first instance was killed before it kept its record, its sshd still answers:
    FIRST_GONE_AFTER after the daemon here ended, an ask that brings no status ends the
    worker with exit 3 and a line that says why, not at WORKER_TIMEOUT."""
    fk = _fakes(tmp_path, "node02", HOSTS)
    record = _first_over_ssh(tmp_path, fk, fails=first == "cannot be asked")
    record.write_text(f"7 {_us(time.time() - 100)}\n")  # an earlier run's
    root = _proc_tree(tmp_path, {"4242": ("prted", True)})
    _probe_log(tmp_path, fk)
    _worker_with_daemon(tmp_path, fk, root)
    env = {**fk["env"], "HOSTS": "node01,node02", "FIRST_GONE_AFTER": "3",
           "WORKER_TIMEOUT": "120"}
    proc, seen = _worker_waiting(tmp_path, env, tmp_path / "launch.sh")
    try:
        # a probe from the loop (the first is the wait before it): the daemon was looked at
        _wait_until(lambda: sum(1 for c in _calls(fk) if c == "probe node01") >= 2)
        shutil.rmtree(root / "4242")
        ended = time.monotonic()
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    err = "".join(seen) + err
    last = err.strip().splitlines()[-1]
    assert proc.returncode == 3, err
    why = ("has no record of its end" if first == "no record" else
           "could not be asked for its end (ssh to node01 failed: ssh: connect to host node01 "
           "port 2222: No route to host)")
    assert re.search(r"the job's MPI daemon here ended [0-9]+s ago and node01 \(the first "
                     rf"instance\) {re.escape(why)} \(FIRST_GONE_AFTER=3\): ending without "
                     r"the job's status$", last), last
    # FIRST_GONE_AFTER, the grace (5 s) and half a period of asking, and an ask's login
    assert time.monotonic() - ended < 3 + 5 + 2 + 10, err
    assert _asks(fk) >= 1, _calls(fk)


def test_a_worker_started_into_a_running_job_knows_the_first_instance_has_answered(tmp_path):
    """A worker started after mpirun already runs the job's daemon here, then cut off from
    the first instance before it probed it once: the daemon is the first's answer, so the
    worker says the first is gone (exit 3), not that it never came (exit 2)."""
    fk = _fakes(tmp_path, "node02", HOSTS)
    _probe_log(tmp_path, fk, fails="node01")
    root = _proc_tree(tmp_path, {"4242": ("orted", True)})
    _worker_with_daemon(tmp_path, fk, root)
    env = {**fk["env"], "HOSTS": "node01,node02", "FIRST_GONE_AFTER": "3",
           "WAIT_TRIES": "2", "WORKER_TIMEOUT": "120"}
    proc, seen = _worker_waiting(tmp_path, env, tmp_path / "launch.sh")
    _, err = proc.communicate(timeout=60)
    err = "".join(seen) + err
    assert proc.returncode == 3 and "not ready after" not in err, err
    assert "node01 (the first instance) has not answered on port 2222 for " in err, err
    lines = [line.split(": ", 1)[1] for line in err.splitlines()]
    assert lines.index("node01 started the job here (its MPI daemon: pid 4242)") == \
        lines.index("waiting for node01 to run the job") + 1, err


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


def _fake_ssh_runs_the_command(tmp_path, fk):
    """ssh that runs its remote command with sh in the home, as a login there would."""
    (tmp_path / "bin/ssh").write_text(
        f'#!/bin/bash\n{_SSH_HOST}echo "ssh $h" >> {fk["log"]}\ncd {fk["home"]} && exec sh -c "${{@: -1}}"\n')


def _tell(fk, status: int) -> None:
    """The first instance's word to node02, as its launch script says it (hw_rt_end_tell)."""
    tell = subprocess.run(
        ["bash", "-c",
         runtime.library() + f'\nhw_rt_end_tell node02 2222 {status} 1234 .hpcwizard/launch'],
        env=fk["env"], capture_output=True, text=True, timeout=60)
    assert tell.returncode == 0, tell.stderr


def test_the_end_of_the_job_wakes_a_resting_worker_at_once(tmp_path):
    """The worker rests on its FIFO; the first instance's word writes the marker, then a
    line into it: a rest of ten minutes ends then, not when its time is up."""
    fk = _fakes(tmp_path, "node01", HOSTS)
    _fake_ssh_runs_the_command(tmp_path, fk)
    run_dir = fk["home"] / ".hpcwizard/launch"
    run_dir.mkdir(parents=True)
    wake = run_dir / "wake.node02"
    rest = subprocess.Popen(
        ["bash", "-c", runtime.library() + '\nhw_rt_wake "$1" || exit 9\necho resting\n'
         'hw_rt_rest 600\necho "$(< "$2")"', "hw_rt", str(wake), str(run_dir / "done.node02")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert rest.stdout.readline() == "resting\n"
        _tell(fk, 7)
        out, _ = rest.communicate(timeout=60)
    finally:
        rest.kill()
    assert (rest.returncode, out) == (0, "7 1234\n")
    assert wake.is_fifo() and wake.stat().st_mode & 0o777 == 0o600


def test_telling_a_worker_gone_from_its_fifo_never_blocks(tmp_path):
    """A worker killed leaves its FIFO, with nobody reading: the word still arrives, and
    the ssh session ends."""
    fk = _fakes(tmp_path, "node01", HOSTS)
    _fake_ssh_runs_the_command(tmp_path, fk)
    run_dir = fk["home"] / ".hpcwizard/launch"
    run_dir.mkdir(parents=True)
    os.mkfifo(run_dir / "wake.node02", 0o600)
    _tell(fk, 0)
    assert (run_dir / "done.node02").read_text() == "0 1234\n"


def _open_files(pid: int) -> set:
    """What pid holds open now (its fds come and go while it is read)."""
    found = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            found.add(os.readlink(fd))
        except FileNotFoundError:
            pass
    return found


def test_a_worker_told_ends_and_takes_its_fifo_away(tmp_path):
    fk = _fakes(tmp_path, "node02", HOSTS)
    _fake_ssh_runs_the_command(tmp_path, fk)
    env = {**fk["env"], "HOSTS": "node01,node02", "FIRST_GONE_AFTER": "600"}
    proc, seen = _worker_waiting(tmp_path, env)
    wake = fk["home"] / ".hpcwizard/launch/wake.node02"
    try:
        assert wake.is_fifo()
        # it rests on that FIFO: the tell's line reaches it (one second's look would hide it)
        _wait_until(lambda: str(wake) in _open_files(proc.pid))
        _tell(fk, 4)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 4, "".join(seen) + err
    assert not wake.exists()
    assert (fk["home"] / ".hpcwizard/launch/taken.node02").read_text() == "1234\n"
