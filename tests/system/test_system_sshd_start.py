"""Starting sshd when the port or sshd itself is not free (issue 14), on this machine for real:

- another user's program holds 0.0.0.0:2222 (IPv4 only). sshd would still bind [::]:2222, so
  "sshd runs" is not "sshd serves the port": the step must fail, naming that program's pid,
  name and user, and undo must stop the sshd it started and leave that program running;
- an sshd already serves port 22: after apply the same process serves 2222 and still 22, and
  undo leaves it running, on 22 alone, with every byte under /etc/ssh as it was.

What is checked is what the kernel says is listening (ss), not what a file says."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Set

import pytest

from _hardening import RecordedRuns, packages_installed
from test_apply_mpi_tcp import PORT, diff, load, show, snapshot, step_table

ROOTS = (Path("/etc/ssh"), Path("/root/.ssh"), Path("/var/lib/hpcwizard"))
CHOICES = ["--framework", "mpi", "--network", "tcp", "--manual"]

HOLDER = f"""
import os, socket, sys, time
s = socket.socket(socket.AF_INET)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", {PORT}))
s.listen()
print(os.getpid(), flush=True)
time.sleep(3600)
"""


@pytest.fixture(scope="module")
def installed() -> None:
    yield from packages_installed()


def listeners(port: int) -> List[str]:
    """'ADDRESS PID' for every socket listening on port, from the kernel (ss)."""
    out = subprocess.run(["ss", "-Hltnp", f"sport = :{port}"], capture_output=True, text=True,
                         check=True).stdout
    found = []
    for line in out.splitlines():
        fields = line.split()
        pids = [p.split("=")[1].rstrip(",)") for p in line.split(",") if p.startswith("pid=")]
        found.extend(f"{fields[3]} {pid}" for pid in pids)
    return sorted(found)


def pids_of(port: int) -> Set[int]:
    return {int(entry.split()[1]) for entry in listeners(port)}


def wait_listening(port: int, pid: int, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while pid not in pids_of(port):
        assert time.monotonic() < end, f"pid {pid} never listened on {port}: {listeners(port)}"
        time.sleep(0.05)


def wait_ports(want: "dict[int, Set[int]]", timeout: float = 30.0) -> None:
    """Until each port is listened on by exactly its pids: sshd re-executes on SIGHUP and
    binds its ports one after another, so one port's listener says nothing of the next."""
    end = time.monotonic() + timeout
    while {port: pids_of(port) for port in want} != want:
        assert time.monotonic() < end, {port: listeners(port) for port in want}
        time.sleep(0.05)


@pytest.fixture
def ipv4_holder(installed: None):
    """python3 as 'nobody' on 0.0.0.0:PORT; its pid, once it listens."""
    assert not listeners(PORT), f"port {PORT} is in use already: {listeners(PORT)}"
    proc = subprocess.Popen(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                             sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    pid = int(proc.stdout.readline())  # printed after listen(): the state, not a sleep
    yield pid
    proc.kill()
    proc.wait()


def test_a_port_held_on_ipv4_fails_the_start_naming_the_holder(ipv4_holder, tmp_path):
    runs = RecordedRuns(tmp_path)
    before = snapshot(*ROOTS)
    rec = runs.state / "held.toml"
    runs.records.append(rec)
    try:
        proc = runs.run("apply", *CHOICES, "--yes", "--record", str(rec))
        assert proc.returncode == 1, show(proc)
        data = load(rec)
        statuses = {s["id"]: s["status"] for s in data["steps"]}
        assert statuses["ssh/sshd-start"] == "failed", step_table(data)
        out = proc.stdout + proc.stderr
        assert f"port {PORT} is taken" in out, out
        # who holds it: address, program, pid and user, as ss and /proc say
        program = Path(f"/proc/{ipv4_holder}/comm").read_text().strip()
        assert f"0.0.0.0:{PORT}: {program} (pid {ipv4_holder}, user nobody)" in out, out
        assert ipv4_holder in pids_of(PORT)
    finally:
        problems = runs.undo_all()
    assert not problems, "".join(problems)
    # the holder still runs and still listens; no sshd is left on the port
    os.kill(ipv4_holder, 0)
    assert pids_of(PORT) == {ipv4_holder}, listeners(PORT)
    after = snapshot(*ROOTS)
    assert after == before, f"after undo:\n{diff(before, after)}"


@pytest.fixture
def sshd_on_22(installed: None):
    """The system sshd, started before hpcwizard with the image's configuration (port 22),
    in the foreground (-D): its pid is the listener's, known without a pid file."""
    assert not listeners(22), f"port 22 is in use already: {listeners(22)}"
    keys_before = set(Path("/etc/ssh").glob("ssh_host_*"))
    subprocess.run(["ssh-keygen", "-A"], check=True, capture_output=True)
    subprocess.run(["install", "-d", "-m", "0755", "/run/sshd"], check=True)
    sshd = subprocess.Popen(["/usr/sbin/sshd", "-D"], stdin=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        wait_listening(22, sshd.pid)
        yield sshd.pid
    finally:
        sshd.terminate()
        sshd.wait(timeout=30)
        for key in set(Path("/etc/ssh").glob("ssh_host_*")) - keys_before:
            key.unlink()


def test_an_sshd_serving_22_keeps_serving_it_and_undo_leaves_it_running(sshd_on_22, tmp_path):
    runs = RecordedRuns(tmp_path)
    before = snapshot(*ROOTS)
    rec = runs.state / "kept.toml"
    runs.records.append(rec)
    try:
        proc = runs.run("apply", *CHOICES, "--yes", "--record", str(rec))
        assert proc.returncode == 0, f"{show(proc)}\n{runs.log(rec)}"
        data = load(rec)
        assert data["status"] == "done", step_table(data)
        # the same process, reloaded: the new port and the one it served
        wait_ports({PORT: {sshd_on_22}, 22: {sshd_on_22}})
    finally:
        problems = runs.undo_all()
    assert not problems, "".join(problems)
    os.kill(sshd_on_22, 0)  # undo did not stop an sshd it did not start
    # undo's SIGHUP re-executes sshd: 22 bound again, 2222 dropped once it has re-read
    wait_ports({22: {sshd_on_22}, PORT: set()})
    after = snapshot(*ROOTS)
    assert after == before, f"after undo:\n{diff(before, after)}"
