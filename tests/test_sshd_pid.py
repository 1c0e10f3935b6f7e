"""A pid file is not trusted (issue 13, part 4): the sshd-start steps, their undo and the
launch script signal the process a pid file names only when it is the sshd the plan
configures: /proc/PID/exe is an sshd binary (also one deleted since: ' (deleted)'), it runs
as the user running the step, and its -f is the plan's configuration (none: the system's).
Otherwise the step fails with one line naming the pid, the program and its user, and undo
leaves the process running, saying so.

The shell function (_hw_sshd_pid of recipes/ops.sh, which hw_sshd and the launch script use)
runs here against real processes: `sleep`, and stand-ins for sshd — a copy of `tail` named
sshd (`sshd -f CONFIG` follows CONFIG forever)."""
from __future__ import annotations

import os
import pwd
import shutil
import signal
import stat
import subprocess
from pathlib import Path

import pytest

from _core_fixtures import ROOT, bash, facts
from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.facts import UserInfo
from hpcwizard.export import launch_script
from hpcwizard import ops
from hpcwizard.plan import build_plan

SYSTEM_CONFIG = "/etc/ssh/sshd_config"
ME = pwd.getpwuid(os.getuid()).pw_name


@pytest.fixture
def procs():
    """Processes started by the test, each in a session of its own; killed at the end."""
    started = []

    def start(argv, **kw):
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True, **kw)
        started.append(p)
        return p

    yield start
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)


@pytest.fixture
def fake_sshd(tmp_path):
    """A program whose /proc/PID/exe is .../sshd: a copy of tail (`sshd -f FILE` blocks)."""
    exe = tmp_path / "bin" / "sshd"
    exe.parent.mkdir()
    shutil.copy2(shutil.which("tail"), exe)
    config = tmp_path / ".sshd_config"
    config.write_text("Port 2222\n")
    return exe, config


def other_config(tmp_path) -> Path:
    """A configuration no sshd on this machine runs with: a real sshd of the system's own
    (a developer's machine, a system test's) must not answer for these cases."""
    return tmp_path / "other" / "sshd_config"


def sshd_pid(pidfile, config):
    """_hw_sshd_pid as hw_sshd calls it: the pid file and the configuration (none: the
    system's) in its variables."""
    config = "" if str(config) == SYSTEM_CONFIG else str(config)
    return bash(ops.library() + '\npidfile=$1 config=$2 systemd=0 unit=ssh\n_hw_sshd_pid',
                strict=True, args=[str(pidfile), config])


def run_step(text):
    """A step's text as apply runs it: the operations library first, its state in a tmp dir."""
    return bash(ops.runnable(text), strict=False)


def alive(p: subprocess.Popen) -> bool:
    return p.poll() is None


def test_no_pid_file_a_dead_pid_or_no_number_is_status_1(tmp_path):
    pidfile = tmp_path / "sshd.pid"
    assert sshd_pid(pidfile, other_config(tmp_path)).returncode == 1
    for text in ("4194999\n", "", "12 34\n", "../1\n", "abc"):  # 4194999: over pid_max
        pidfile.write_text(text)
        r = sshd_pid(pidfile, other_config(tmp_path))
        assert (r.returncode, r.stdout, r.stderr) == (1, "", ""), text


def test_another_program_is_named_and_never_taken_for_sshd(tmp_path, procs):
    sleeper = procs(["sleep", "300"])
    pidfile = tmp_path / "sshd.pid"
    pidfile.write_text(f"{sleeper.pid}\n")
    r = sshd_pid(pidfile, other_config(tmp_path))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [
        f"hpcwizard: {pidfile} names pid {sleeper.pid} (sleep, user {ME}), which is not sshd: "
        "remove the stale pid file or stop that program"]
    assert alive(sleeper)


def test_the_sshd_of_the_plans_configuration_is_recognised(tmp_path, procs, fake_sshd):
    exe, config = fake_sshd
    daemon = procs([str(exe), "-f", str(config)])
    pidfile = tmp_path / "sshd.pid"
    pidfile.write_text(f"{daemon.pid}\n")
    r = sshd_pid(pidfile, config)
    assert (r.returncode, r.stdout.strip(), r.stderr) == (0, str(daemon.pid), "")
    # the same sshd is not the one of another configuration (the system's, another user's)
    r = sshd_pid(pidfile, other_config(tmp_path))
    assert r.returncode == 2
    assert f"(sshd, user {ME}), which is not the sshd of {other_config(tmp_path)}:" in r.stderr
    # after a package upgrade the binary is gone: /proc/PID/exe ends in ' (deleted)'
    exe.unlink()
    assert os.readlink(f"/proc/{daemon.pid}/exe").endswith(" (deleted)")
    assert sshd_pid(pidfile, config).stdout.strip() == str(daemon.pid)


def test_an_sshd_that_rewrote_its_title_is_still_recognised(tmp_path):
    """A real sshd sets its title: /proc/PID/cmdline becomes one string, "sshd:
    /usr/sbin/sshd -f FILE [listener] 0 of 10-100 startups", not its argv. A copy of perl
    named sshd does the same ($0 = ...)."""
    perl = shutil.which("perl")
    if perl is None:
        pytest.skip("no perl to stand in for sshd's rewritten title")
    exe = tmp_path / "bin" / "sshd"
    exe.parent.mkdir()
    shutil.copy2(perl, exe)
    config = tmp_path / ".sshd_config"
    title = f"sshd: /usr/sbin/sshd -f {config} [listener] 0 of 10-100 startups"
    daemon = subprocess.Popen([str(exe), "-e", f'$0 = "{title}"; $| = 1; print "ready\\n"; '
                               'sleep 600'], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              start_new_session=True)
    try:
        assert daemon.stdout.readline() == b"ready\n"  # printed once the title is set
        assert Path(f"/proc/{daemon.pid}/cmdline").read_bytes().startswith(b"sshd: ")
        pidfile = tmp_path / "sshd.pid"
        pidfile.write_text(f"{daemon.pid}\n")
        assert sshd_pid(pidfile, config).stdout.strip() == str(daemon.pid)
        assert sshd_pid(pidfile, other_config(tmp_path)).returncode == 2
    finally:
        daemon.kill()
        daemon.wait()


def test_without_f_it_is_the_system_configuration(tmp_path, procs, fake_sshd):
    exe, _config = fake_sshd
    daemon = procs([str(exe), "-F", "/dev/null"])  # as `/usr/sbin/sshd -D`: no -f
    pidfile = tmp_path / "sshd.pid"
    pidfile.write_text(f"{daemon.pid}")  # no newline: sshd writes one, others may not
    assert sshd_pid(pidfile, SYSTEM_CONFIG).stdout.strip() == str(daemon.pid)
    assert sshd_pid(pidfile, "/home/u/.sshd_config").returncode == 2


def test_a_process_of_another_user_is_not_this_users_sshd(tmp_path):
    pidfile = tmp_path / "sshd.pid"
    pidfile.write_text("1\n")  # init: root's, not an sshd (and not ours when we are not root)
    r = sshd_pid(pidfile, other_config(tmp_path))
    assert r.returncode == 2 and f"{pidfile} names pid 1 (" in r.stderr
    assert "user root), which is not" in r.stderr


# --- the steps of the plan ----------------------------------------------------------------------

def user_plan(home: Path):
    """A plan whose target is a user (the per-user sshd), with its home in tmp_path; its
    texts run here as whoever runs the tests, as they would as that user (the uid in the
    plan only picks the per-user steps: the texts compare with `id -u` when they run)."""
    u = UserInfo(name="alice", uid=4242, gid=4242, home=str(home), sudo="none")
    return build_plan(facts(user=u), make_choices(framework="mpi", network="tcp",
                                                  mode="manual"), load_catalog())


def step(plan, sid="ssh/sshd-start"):
    return next(s for s in plan.steps if s.id == sid)


@pytest.fixture
def home(tmp_path):
    h = tmp_path / "home"
    (h / ".ssh").mkdir(parents=True)
    return h


def test_the_per_user_step_fails_naming_another_program_and_leaves_it(home, procs, monkeypatch,
                                                                     tmp_path):
    monkeypatch.setenv("HW_STATE", str(tmp_path / "ops-state"))
    start = step(user_plan(home))
    sleeper = procs(["sleep", "300"])
    (home / ".ssh/sshd.pid").write_text(f"{sleeper.pid}\n")
    assert run_step(start.check).returncode != 0  # not done: that is not our sshd
    r = run_step(start.run)
    assert r.returncode == 1
    want = (f"hpcwizard: {home}/.ssh/sshd.pid names pid {sleeper.pid} (sleep, user {ME}), "
            "which is not sshd: remove the stale pid file or stop that program")
    assert r.stdout.strip() == "" and r.stderr.strip().splitlines() == [want]
    assert alive(sleeper)
    u = run_step(start.undo)
    assert u.returncode == 0, u.stderr  # undo goes on, and signals nothing
    assert want in u.stderr
    assert alive(sleeper)


def test_undo_leaves_an_sshd_it_did_not_start(home, procs, tmp_path, monkeypatch):
    """An sshd of the user's configuration that ran before: undo keeps it running (only one
    this step started is stopped; tests/system/test_system_tempfiles_pids.py shows that)."""
    monkeypatch.setenv("HW_STATE", str(tmp_path / "ops-state"))
    start = step(user_plan(home))
    exe = tmp_path / "bin" / "sshd"
    exe.parent.mkdir()
    shutil.copy2(shutil.which("tail"), exe)
    (home / ".sshd_config").write_text("Port 2222\n")
    daemon = procs([str(exe), "-f", f"{home}/.sshd_config"])
    (home / ".ssh/sshd.pid").write_text(f"{daemon.pid}\n")
    u = run_step(start.undo)
    assert u.returncode == 0, u.stderr
    assert alive(daemon)


def test_every_pid_file_is_read_by_the_one_function_that_checks_it():
    """The steps are calls of hw_sshd; in the library only _hw_sshd_pid reads a pid file, and
    every signal goes to a pid it gave."""
    root = build_plan(facts(user=ROOT), make_choices(framework="mpi", network="tcp",
                                                     mode="manual"), load_catalog())
    user = user_plan(Path("/home/alice"))
    assert step(root).run == "hw_sshd --port 2222"
    assert step(user).run == ("hw_sshd --port 2222 --config /home/alice/.sshd_config "
                              "--pidfile /home/alice/.ssh/sshd.pid")
    lib = ops.library()
    reader = ops.functions("_hw_sshd_pid")
    assert lib.count('"$pidfile"') == reader.count('"$pidfile"')
    assert "kill -0" not in lib and "cat /run/sshd.pid" not in lib
    for line in lib.splitlines():
        code = line.split("#", 1)[0]  # comments aside
        if code.strip().startswith("kill ") or " kill " in code:
            assert '"$pid"' in code, line


def test_the_launch_script_never_signals_and_reports_what_the_pid_file_names():
    text = launch_script(build_plan(facts(user=ROOT), make_choices(
        framework="mpi", network="tcp", mode="manual"), load_catalog()))
    reader = ops.functions("_hw_sshd_pid")
    assert reader in text
    # the only signals: the end-of-job ask ends the coproc it started itself, and the
    # coproc, told so, ends its own ssh job while it runs (one that hangs would outlive it);
    # the first instance, ending before its job, ends its own background waits
    kills = [ln.strip() for ln in text.replace(reader, "").splitlines()
             if "kill" in ln.split("#", 1)[0]]
    assert kills == ["trap 'kill $(jobs -pr) 2>/dev/null' TERM  # ssh while it runs, never a "
                     "reaped pid",
                     'kill "$pid" 2>/dev/null || true  # the coproc this function started, '
                     "never a pid file's",
                     "kill $(jobs -pr) 2>/dev/null || true  # its own waits for workers' "
                     "ports"], kills
    assert "pid=$_HW_RT_ASK_PID " in text
    assert "pid=$(_hw_sshd_pid 2>&1)" in text


def test_the_launch_script_reports_a_pid_file_naming_another_program(tmp_path, procs):
    """Run with test_launch's fake commands (every port answers) and a fake `id` (a user, so
    that the pid file is ~/.ssh/sshd.pid): the sleeping process is named, and lives on."""
    from test_launch import _fakes, _run

    fk = _fakes(tmp_path, "node01", {"node01": "10.0.0.1"})
    fake_id = Path(fk["env"]["PATH"].split(":")[0]) / "id"
    fake_id.write_text('#!/bin/bash\n[ "${1:-}" = -u ] && { echo 4242; exit 0; }; echo alice\n')
    fake_id.chmod(0o755)
    sleeper = procs(["sleep", "300"])
    (fk["home"] / ".ssh").mkdir()
    (fk["home"] / ".ssh/sshd.pid").write_text(f"{sleeper.pid}\n")
    text = launch_script(build_plan(facts(user=ROOT), make_choices(
        framework="mpi", network="tcp", mode="manual"), load_catalog()))
    r = _run(tmp_path, text, {**fk["env"], "HOSTS": "node01"}, ["--", "hostname"])
    assert r.returncode == 0, r.stderr
    assert (f"port 2222 already answers; {fk['home']}/.ssh/sshd.pid names pid {sleeper.pid} "
            f"(sleep, user {ME}), which is not sshd: remove the stale pid file or stop that "
            "program") in r.stderr
    assert alive(sleeper)
    assert list((fk["home"] / ".hpcwizard/launch").glob("hosts.*")) == []  # its mktemp file
    assert stat.S_IMODE((fk["home"] / ".hpcwizard/launch").stat().st_mode) == 0o700


def test_the_launch_script_reads_the_pid_file_the_users_sshd_config_names(tmp_path, procs):
    """Beside a platform's ~/.ssh the user's sshd keeps its pid file in ~/.hpcwizard-sshd
    (its ~/.sshd_config says PidFile): the launch script looks there, not in ~/.ssh."""
    from test_launch import _fakes, _run

    fk = _fakes(tmp_path, "node01", {"node01": "10.0.0.1"})
    fake_id = Path(fk["env"]["PATH"].split(":")[0]) / "id"
    fake_id.write_text('#!/bin/bash\n[ "${1:-}" = -u ] && { echo 4242; exit 0; }; echo alice\n')
    fake_id.chmod(0o755)
    sleeper = procs(["sleep", "300"])
    own = fk["home"] / ".hpcwizard-sshd"
    own.mkdir()
    (own / "sshd.pid").write_text(f"{sleeper.pid}\n")
    (fk["home"] / ".sshd_config").write_text(f"Port 2222\nPidFile {own}/sshd.pid\n")
    text = launch_script(build_plan(facts(user=ROOT), make_choices(
        framework="mpi", network="tcp", mode="manual"), load_catalog()))
    r = _run(tmp_path, text, {**fk["env"], "HOSTS": "node01"}, ["--", "hostname"])
    assert r.returncode == 0, r.stderr
    assert f"{own}/sshd.pid names pid {sleeper.pid} (sleep, user {ME})" in r.stderr, r.stderr
    assert alive(sleeper)


@pytest.mark.parametrize("says, known_by_greeting", [
    (b"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n", True),
    (b"SSH-2.0-dropbear_2022.83\r\n", True),
    (b"HTTP/1.0 400 Bad Request\r\n", False),
    (b"", False),
])
def test_an_ssh_server_on_the_port_is_known_by_its_greeting_not_by_proc(tmp_path, says,
                                                                         known_by_greeting):
    """Every instance of a job starts the launch script at once: naming the sshd on its port
    by its pid searches /proc, whose every process is read. An SSH greeting is enough; a
    port that answers otherwise is still looked up (and its pid file judged)."""
    import socket
    import threading

    from hpcwizard import runtime

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.sendall(says)
                    conn.recv(1)  # until the prober leaves: the port does not look closed
                except OSError:
                    pass  # a probe that connected and left at once

    threading.Thread(target=answer, daemon=True).start()
    calls = tmp_path / "calls"
    script = (runtime.library() +
              f'\nfind() {{ echo find >> {calls}; }}'
              f'\n_hw_sshd_pid() {{ echo _hw_sshd_pid >> {calls}; return 1; }}'
              '\nhw_rt_sshd "$1"\n')
    try:
        r = subprocess.run(["bash", "-c", script, "hw_rt", str(port)], capture_output=True,
                           text=True, timeout=60)
    finally:
        server.close()
    assert r.returncode == 0, r.stderr
    if known_by_greeting:
        greeting = says.decode().strip()
        assert f"an SSH server already listens on port {port}: {greeting}\n" in r.stderr
        assert not calls.exists()
    else:
        assert f"port {port} already answers" in r.stderr
        assert calls.read_text() == "_hw_sshd_pid\n"
