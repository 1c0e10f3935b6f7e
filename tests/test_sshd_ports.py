"""An sshd already serving another port keeps serving it (issue 14): detection reads, from
/proc alone, the ports root's sshd of /etc/ssh/sshd_config listens on, and the plan's sshd
settings keep them beside the job's port (before, a reload moved an sshd on port 22 to 2222
alone, and undo then killed it)."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from _core_fixtures import ROOT, facts
from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.detect.base import Context
from hpcwizard.detect.listening import from_proc_net_tcp
from hpcwizard.detect.software import system_sshd_ports
from hpcwizard.plan import build_plan

TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 55501 1 0000000000000000 100 0 0 10 0
   1: 00000000:08AE 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 55502 1 0000000000000000 100 0 0 10 0
   2: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 55503 1 0000000000000000 20 4 30 10 -1
"""


def test_listening_sockets_by_inode():
    assert from_proc_net_tcp(TCP) == {"55501": 22, "55502": 2222}  # 55503 is a connection


def fake_proc(root: Path, pid: int, exe: str, cmdline: str, inodes) -> None:
    d = root / "proc" / str(pid)
    (d / "fd").mkdir(parents=True)
    (d / "exe").symlink_to(exe)
    (d / "cmdline").write_text(cmdline.replace(" ", "\0") + "\0")
    for n, inode in enumerate(inodes, 3):
        (d / "fd" / str(n)).symlink_to(f"socket:[{inode}]")


@pytest.mark.skipif(os.geteuid() != 0, reason="the fake /proc entries must be root's, as an "
                    "sshd's are (needs root to make them so)")
def test_root_sshd_of_the_system_configuration_only(tmp_path):
    fake_proc(tmp_path, 100, "/usr/sbin/sshd", "sshd: /usr/sbin/sshd [listener] 0 of 10-100",
              ["55501"])
    fake_proc(tmp_path, 200, "/usr/sbin/sshd (deleted)", "/usr/sbin/sshd -D", ["55502"])
    fake_proc(tmp_path, 300, "/usr/sbin/sshd", "/usr/sbin/sshd -f /home/u/.sshd_config",
              ["55504"])  # a user's own sshd: not the system's
    fake_proc(tmp_path, 400, "/usr/bin/python3", "python3 -m http.server 8000", ["55505"])
    ctx = Context(sysroot=str(tmp_path), run_commands=False)
    inodes = {"55501": 22, "55502": 2200, "55504": 2345, "55505": 8000}
    assert system_sshd_ports(ctx, inodes) == (22, 2200)


def test_the_ports_sshd_serves_now_are_kept_in_its_settings():
    f = facts(user=ROOT)
    f = dataclasses.replace(f, software=dataclasses.replace(f.software, sshd_ports=(22, 2222)))
    plan = build_plan(f, make_choices(framework="mpi", network="tcp", mode="manual"),
                      load_catalog())
    cfg = next(s for s in plan.steps if s.id == "ssh/sshd-config")
    assert "\nPort 2222\n# sshd serves port 22 now: it keeps serving it\nPort 22\n" in cfg.run
    assert cfg.run.count("Port 2222") == 1  # the job's port is not kept twice
    plain = build_plan(facts(user=ROOT), make_choices(framework="mpi", network="tcp",
                                                      mode="manual"), load_catalog())
    assert "Port 22\n" not in next(s for s in plain.steps if s.id == "ssh/sshd-config").run
