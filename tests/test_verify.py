"""verify with a fake System: which check fails, with which diagnosis; the bound on
concurrency; IB and PyTorch checks; the transport parsers; no printing."""
import dataclasses
import subprocess
from pathlib import Path

from _core_fixtures import ROOT, facts
from _verify_fixtures import FakeSystem, logins_by_name
from hpcwizard.verify import probes as P
from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.facts import Hca, Port, Rdma
from hpcwizard.hosts import Hosts
from hpcwizard.plan import build_plan
from hpcwizard.verify import (FAIL, PASS, SKIP, transport_from_nccl_log,
                              transport_from_ucx_log, verify)

OUT = Path(__file__).parent / "fixtures" / "outputs"


def plan(framework="mpi", network="tcp", f=None):
    return build_plan(f or facts(user=ROOT), make_choices(framework=framework, network=network,
                                                          mode="manual"), load_catalog())


def run(peers, framework="mpi", network="tcp", f=None, answers=None):
    sys_ = FakeSystem(peers, answers)
    hosts = Hosts(tuple(peers), "--hosts")
    report = verify(plan(framework, network, f), f or facts(user=ROOT), hosts, system=sys_)
    return report, {c.id: c for c in report.checks}, sys_


def test_all_pass():
    report, c, _ = run({"node1": "ok", "node2": "ok", "node3": "ok"})
    assert report.ok, [x for x in report.checks if x.status != PASS]
    assert c["cluster/mpirun"].status == PASS
    assert c["peer/node2/login"].command.startswith("ssh -o BatchMode=yes")
    assert "--allow-run-as-root" in c["cluster/mpirun"].command
    assert report.to_dict()["counts"][FAIL] == 0


def test_mpiruns_own_warnings_are_not_taken_for_ranks():
    """Under load plm:rsh may warn between the ranks' answers (seen with 16 instances on 2
    cores): the check counts host names, not lines."""
    peers = {"node1": "ok", "node2": "ok"}
    warning = ("[node1:17232] plm:rsh: warning: setpgid(17252,17252) failed in parent with "
               "errno=permission denied(13)\n")
    report, c, _ = run(peers, answers={P.Mpirun: (0, "node1\n" + warning + "node2\n")})
    assert c["cluster/mpirun"].status == PASS, c["cluster/mpirun"].detail
    report, c, _ = run(peers, answers={P.Mpirun: (0, "node1\n" + warning)})  # a rank missing
    assert c["cluster/mpirun"].status == FAIL


def test_the_settings_in_effect_are_checked_not_the_files():
    """sshd -T with passwords on (an image's earlier drop-in wins) and ssh -G with port 22
    (an earlier Host entry wins): both fail, naming what is in effect."""
    peers = {"node1": "ok"}
    _, c, _ = run(peers)
    assert c["here/sshd-settings"].status == PASS and c["here/ssh-settings"].status == PASS
    sshd = (0, "port 22\nport 2222\npasswordauthentication yes\nkbdinteractiveauthentication no\n"
               "pubkeyauthentication yes\npermitrootlogin yes\n")
    _, c, _ = run(peers, answers={P.SshdInEffect: sshd,
                                  P.SshInEffect: (0, "port 22\nbatchmode yes\n")})
    bad = c["here/sshd-settings"]
    assert bad.status == FAIL
    assert "passwordauthentication yes" in bad.detail and "permitrootlogin yes" in bad.detail
    assert "port" not in bad.detail.split(",")[0]  # 2222 is among the ports: not a failure
    assert c["here/ssh-settings"].status == FAIL and "port 22" in c["here/ssh-settings"].detail


def test_sshd_stopped_on_node2():
    report, c, _ = run({"node1": "ok", "node2": "down", "node3": "ok"})
    assert not report.ok
    bad = c["peer/node2/port"]
    assert bad.status == FAIL and [d.id for d in bad.diagnoses] == ["ssh-refused"]
    assert "does not answer on port 2222" in bad.explain
    assert c["peer/node2/login"].status == SKIP
    assert c["cluster/mpirun"].status == SKIP
    assert c["peer/node3/login"].status == PASS


def test_name_removed():
    _, c, _ = run({"node1": "ok", "node2": "ok", "node3": "noname"})
    bad = c["peer/node3/resolve"]
    assert bad.status == FAIL and bad.diagnoses[0].id == "name-unresolved"
    # what the instances need, in both languages: each other's names, or the platform's IPs
    d = bad.diagnoses[0]
    assert "The instances must resolve each other's names." in d.cause
    assert "各实例必须能互相解析对方的名字" in d.i18n["zh"]["cause"]
    assert "give those as the hosts (HOSTS=10.0.0.1,10.0.0.2)" in d.fix
    assert "HOSTS=10.0.0.1,10.0.0.2" in d.i18n["zh"]["fix"]
    assert bad.command == "getent hosts node3"
    assert c["peer/node3/port"].status == SKIP


def test_key_missing():
    _, c, _ = run({"node1": "ok", "node2": "nokey", "node3": "ok"})
    bad = c["peer/node2/login"]
    assert bad.status == FAIL and [d.id for d in bad.diagnoses] == ["ssh-publickey"]


def test_wrong_host_answers():
    _, c, _ = run({"node1": "ok", "node2": "wrong"})
    assert c["peer/node2/login"].status == FAIL and "someone-else" in c["peer/node2/login"].explain


def test_bounded_concurrency():
    peers = {f"n{i}": "ok" for i in range(40)}
    report, _, sys_ = run(peers)
    assert report.ok
    assert 1 < sys_.max_inflight <= 16


def test_ib_checks():
    f = dataclasses.replace(
        facts(user=ROOT),
        hcas=(Hca("mlx5_0", "mlx5_core", ports=(Port("mlx5_0", 1, "ACTIVE", "LinkUp", 200.0,
                                                     "InfiniBand"),)),
              Hca("mlx5_1", "mlx5_core", ports=(Port("mlx5_1", 1, "DOWN", "Polling", None,
                                                     "InfiniBand"),))),
        rdma=Rdma(uverbs=("uverbs0",)))
    answers = {P.OmpiInfo: (0, (OUT / "ompi_info_4.1.4_ucx.txt").read_text()),
               P.UcxDevices: (0, (OUT / "ucx_info-d.txt").read_text()),
               P.MemlockLimit: (0, "65536\n"),
               P.OpenUverbs: (0, "/dev/infiniband/uverbs0\n"),
               P.IsExecutable: (1, ""),
               P.BuildMpiProgram: (1, "bash: mpicc: command not found")}
    report, c, _ = run({"node1": "ok", "node2": "ok"}, network="ib", f=f, answers=answers)
    assert c["here/ompi-ucx"].status == PASS
    assert c["here/ucx-ib"].status == PASS and "rc_mlx5/mlx5_0:1" in c["here/ucx-ib"].detail
    ports = c["here/ib-ports"]
    # the job's ports (UCX_NET_DEVICES from the plan) are checked: the active one
    assert ports.status == PASS and "mlx5_0:1 ACTIVE 200 Gb/s" in ports.detail
    assert c["here/memlock"].status == FAIL and c["here/memlock"].diagnoses[0].id == "memlock"
    assert c["here/uverbs"].status == PASS
    assert c["cluster/mpi-transport"].status == SKIP  # no mpicc here


def test_ib_port_down():
    f = dataclasses.replace(facts(user=ROOT), hcas=(Hca("mlx5_0", "mlx5_core", ports=(
        Port("mlx5_0", 1, "DOWN", "Polling", None, "InfiniBand"),)),))
    _, c, _ = run({"node1": "ok"}, network="ib", f=f, answers={P.OmpiInfo: (0, "")})
    assert c["here/ib-ports"].status == FAIL and "mlx5_0:1" in c["here/ib-ports"].explain


def test_ompi_without_ucx():
    answers = {P.OmpiInfo: (0, (OUT / "ompi_info_4.1.2_noucx.txt").read_text()),
               P.UcxDevices: (127, "ucx_info: command not found")}
    _, c, _ = run({"node1": "ok"}, network="ib", answers=answers)
    assert c["here/ompi-ucx"].status == FAIL and c["here/ompi-ucx"].diagnoses[0].id == "pml-ucx"
    assert c["here/ucx-ib"].status == FAIL
    assert c["here/ib-ports"].status == FAIL  # no HCA at all


def test_pytorch_without_torch_skips_the_cross_test():
    answers = {P.TorchImport: (1, "ModuleNotFoundError: No module named 'torch'")}
    report, c, _ = run({"node1": "ok", "node2": "down"}, framework="pytorch", answers=answers)
    assert c["here/torch"].status == FAIL
    assert c["cluster/torch-allreduce"].status == SKIP
    assert c["peer/node2/port"].status == SKIP  # PyTorch needs no SSH


def test_transport_parsers():
    ucx_ib = ("[1718] [n1:1:0] ucp_worker.c:1855 UCX INFO ep_cfg[1]: tag(self/memory0 "
              "rc_mlx5/mlx5_0:1 ud_mlx5/mlx5_0:1)")
    ucx_tcp = "[1718] [n1:1:0] ucp_worker.c:1855 UCX INFO ep_cfg[1]: tag(self/memory tcp/eth0)"
    assert transport_from_ucx_log(ucx_ib) == "ib"
    assert transport_from_ucx_log(ucx_tcp) == "tcp"
    assert transport_from_ucx_log("nothing") == ""
    assert transport_from_nccl_log("n1:1:2 [0] NCCL INFO Using network IB") == "ib"
    fallback = (Path(__file__).parent / "fixtures/logs/nccl-socket-fallback.log").read_text()
    assert transport_from_nccl_log(fallback) == "tcp"


def test_no_printing_in_verify(capsys):
    run({"node1": "ok", "node2": "down"})
    assert capsys.readouterr().out == ""


def test_cli_formats_and_exits(monkeypatch, capsys):
    import hpcwizard.verify.orchestrate as v  # where verify() makes its System
    from hpcwizard.cli import main

    fake = FakeSystem({"node1": "ok", "node2": "down"})
    monkeypatch.setattr(v, "System", lambda: fake)
    monkeypatch.setattr("hpcwizard.commands.configure.facts_here",
                        lambda sysroot, **_: facts(user=ROOT))
    rc = main(["verify", "--framework", "mpi", "--network", "tcp", "--manual",
               "--hosts", "node1,node2"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "hosts from --hosts: node1, node2" in out
    assert "FAIL  node2: SSH port 2222 answers" in out and "cause:" in out
    fake1 = FakeSystem({"node1": "ok"})
    monkeypatch.setattr(v, "System", lambda: fake1)
    rc = main(["verify", "--framework", "mpi", "--network", "tcp", "--manual",
               "--hosts", "node1", "--json"])
    import json
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["ok"] and data["hosts"]["source"] == "--hosts"


def test_cli_verify_record_uses_its_choices_and_keeps_the_outcome(monkeypatch, capsys,
                                                                  tmp_path):
    """`verify --record R`: the record's choices (its port 2022), the outcome kept in it, as
    the wizard's Done screen does; choices given beside it are refused, nothing run."""
    import hpcwizard.verify.orchestrate as v  # where verify() makes its System
    from hpcwizard.cli import main
    from hpcwizard.compat import tomllib
    from hpcwizard.record import Record

    fake = FakeSystem({"node1": "ok", "node2": "nokey"}, port=2022)
    monkeypatch.setattr(v, "System", lambda: fake)
    monkeypatch.setattr("hpcwizard.commands.configure.facts_here",
                        lambda sysroot, **_: facts(user=ROOT))
    made = build_plan(facts(user=ROOT), make_choices(framework="mpi", network="tcp",
                                                     mode="manual", ssh_port="2022"),
                      load_catalog())
    record = Record.new(made, facts(user=ROOT), tmp_path / "r.toml")
    record.save()
    before = record.path.read_bytes()

    rc = main(["verify", "--ssh-port", "2023", "--record", str(record.path), "--hosts", "node1"])
    err = capsys.readouterr().err
    assert rc == 2 and "--ssh-port" in err and "not both" in err and len(err.splitlines()) == 1
    assert fake.calls == [] and record.path.read_bytes() == before

    rc = main(["verify", "--record", str(record.path), "--hosts", "node1,node2"])
    out = capsys.readouterr().out
    assert rc == 1 and "FAIL  node2: key login returns its name" in out
    # every ssh to a host on the record's port (ssh -G only asks what is in effect)
    assert all("2022" in argv for argv in fake.calls if argv[0] == "ssh" and "-G" not in argv)
    kept = tomllib.loads(record.path.read_text())
    assert kept["verify"]["failed"] == ["peer/node2/login"]
    assert kept["verify"]["hosts"] == ["node1", "node2"]
    assert kept["steps"] == tomllib.loads(before.decode())["steps"]  # only [verify] added
    assert "-- verify" in record.log_path.read_text()

    rc = main(["verify", "--here"])
    assert rc == 2 and "--framework and --network, or --record" in capsys.readouterr().err


def _cli_record(monkeypatch, tmp_path, peers):
    import hpcwizard.verify.orchestrate as v  # where verify() makes its System
    from hpcwizard.record import Record

    fake = FakeSystem(peers)
    monkeypatch.setattr(v, "System", lambda: fake)
    monkeypatch.setattr("hpcwizard.commands.configure.facts_here",
                        lambda sysroot, **_: facts(user=ROOT))
    made = build_plan(facts(user=ROOT), make_choices(framework="mpi", network="tcp",
                                                     mode="manual"), load_catalog())
    record = Record.new(made, facts(user=ROOT), tmp_path / "r.toml")
    record.save()
    return fake, record


def test_cli_verify_record_of_another_user_is_refused(monkeypatch, capsys, tmp_path):
    """Root verifying alice's record would check root's setup and leave alice a record she
    cannot read: refused, nothing run, the record as it was."""
    import os

    from hpcwizard.cli import main

    fake, record = _cli_record(monkeypatch, tmp_path, {"node1": "ok"})
    before = record.path.read_bytes()
    monkeypatch.setattr(os, "geteuid", lambda: record.path.stat().st_uid + 1)
    rc = main(["verify", "--record", str(record.path), "--hosts", "node1"])
    err = capsys.readouterr().err
    import pwd

    uid = record.path.stat().st_uid
    owner = f"is owned by {pwd.getpwuid(uid).pw_name} (uid {uid})"  # the shared trusted load
    assert rc == 2 and owner in err and "hpcwizard verify --record" in err, err
    assert len(err.splitlines()) == 1
    assert fake.calls == [] and record.path.read_bytes() == before


def test_cli_verify_record_that_cannot_be_written_keeps_the_printed_checks(monkeypatch,
                                                                          capsys, tmp_path):
    from hpcwizard.cli import main
    from hpcwizard.record import Record

    fake, record = _cli_record(monkeypatch, tmp_path, {"node1": "ok"})

    def full(self):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Record, "save", full)
    rc = main(["verify", "--record", str(record.path), "--hosts", "node1"])
    out, err = capsys.readouterr()
    assert "PASS  node1: key login returns its name" in out  # the checks are not lost
    assert rc == 1 and err.strip().endswith("No space left on device")
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_stop_kills_the_commands_in_flight_and_refuses_new_ones():
    """The wizard's quit during a verification: a real `sleep` (standing in for an ssh that
    waits on a dead peer) is killed with its process group; a later command does not start."""
    import threading
    import time

    from hpcwizard.verify import System

    system = System()
    results = []
    worker = threading.Thread(target=lambda: results.append(
        system.run(["bash", "-c", "sleep 60 & wait"], timeout=60)))
    t0 = time.monotonic()
    worker.start()
    while not system.running() and time.monotonic() - t0 < 10:
        time.sleep(0.01)
    assert system.running(), "the command did not start"
    pid = system.running()[0].pid
    system.stop()
    worker.join(10)
    assert not worker.is_alive() and time.monotonic() - t0 < 10
    assert results[0].rc == -9  # SIGKILL, not a time-out (124) or success
    assert _live_in_group(pid) == [], "the backgrounded sleep outlived stop()"
    later = system.run(["true"])
    assert later.rc == 130 and not system.running()


def _live_in_group(pgid, wait=5.0):
    """Processes of the group that are not zombies (a killed orphan may wait to be reaped),
    after up to `wait` seconds for the kill to land."""
    import time

    end = time.monotonic() + wait
    while True:
        ps = subprocess.run(["ps", "-o", "pid=,stat=", "-g", str(pgid)], capture_output=True,
                            text=True).stdout.split("\n")
        rows = [line.split() for line in ps if line.split()]
        live = [pid for pid, stat in rows if not stat.startswith("Z")]
        if not live or time.monotonic() > end:
            return live
        time.sleep(0.05)


def test_ctrl_c_during_verify_ends_it_at_once_and_kills_its_commands(tmp_path):
    """`hpcwizard verify` across hosts whose name look-up hangs (a getent that sleeps):
    SIGINT ends it with 130 within seconds, not after the look-ups' time-outs, and the
    sleeping commands are gone."""
    import os
    import signal
    import sys
    import time

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "getent").write_text(f"#!/bin/bash\necho $$ >> {tmp_path}/pids\nexec sleep 60\n")
    (fake / "getent").chmod(0o755)
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}", LC_ALL="C")
    proc = subprocess.Popen([sys.executable, "-m", "hpcwizard", "verify", "--framework", "mpi",
                             "--network", "tcp", "--hosts", "node1,node2,node3"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids = tmp_path / "pids"
    end = time.monotonic() + 30
    while (not pids.exists() or len(pids.read_text().split()) < 3) and time.monotonic() < end:
        time.sleep(0.05)
    assert pids.exists() and len(pids.read_text().split()) == 3, "the look-ups did not start"
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, (out, err)
    assert time.monotonic() - t0 < 5
    assert "interrupted" in err and "Traceback" not in err
    for pid in pids.read_text().split():
        assert _live_in_group(int(pid)) == [], f"getent {pid} outlived the Ctrl+C"


def test_a_diagnosis_names_the_instance_and_rank_its_line_came_from():
    """mpirun's output names the rank that failed ([host][[job,1],rank]): the report and the
    JSON say which, as `hpcwizard diagnose` does."""
    from hpcwizard.report_verify import check_text

    line = ("[node3][[52336,1],2][btl_tcp_endpoint.c:625:mca_btl_tcp_endpoint_recv_connect_ack]"
            " received unexpected process identifier [[52336,1],0]")
    hostname_run = lambda p: isinstance(p, P.Mpirun) and p.program == ("hostname",)  # noqa: E731
    _, c, _ = run({"node1": "ok", "node2": "ok", "node3": "ok"},
                  answers={hostname_run: (1, line + "\n")})
    bad = c["cluster/mpirun"]
    assert bad.status == FAIL and bad.diagnoses, bad
    assert bad.to_dict()["diagnoses"][0]["origin"] == {"host": "node3", "rank": 2}
    assert "from:  host node3, rank 2" in "\n".join(check_text(bad))


def test_hosts_given_as_addresses_pass_mpirun_by_their_own_names():
    """SkyPilot and dstack give the instances' IP addresses; `hostname` on each prints its
    name. Every instance answering once passes; one missing fails."""
    ips = {"10.78.0.1": "ok", "10.78.0.2": "ok", "10.78.0.3": "ok"}
    hostname_run = lambda p: isinstance(p, P.Mpirun) and p.program == ("hostname",)  # noqa: E731
    report, c, _ = run(ips, answers={hostname_run: (0, "node1\nnode2\nnode3\n"),
                                     **logins_by_name(ips)})
    assert c["cluster/mpirun"].status == PASS, c["cluster/mpirun"].detail
    assert "node1, node2, node3" in c["cluster/mpirun"].detail
    # the key login's answer is the instance's name, not its address: not a stale entry
    assert c["peer/10.78.0.2/login"].status == PASS, c["peer/10.78.0.2/login"].explain
    assert report.ok, [x.id for x in report.checks if x.status == FAIL]
    _, c, _ = run(ips, answers={hostname_run: (0, "node1\nnode2\n")})
    assert c["cluster/mpirun"].status == FAIL
    _, c, _ = run(ips, answers={hostname_run: (0, "node1\nnode1\nnode2\n")})  # twice on one
    assert c["cluster/mpirun"].status == FAIL


def test_instances_whose_host_names_are_their_addresses():
    """`hostname` may print the address itself; two addresses are two instances."""
    ips = {"10.78.0.1": "ok", "10.78.0.2": "ok"}
    hostname_run = lambda p: isinstance(p, P.Mpirun) and p.program == ("hostname",)  # noqa: E731
    _, c, _ = run(ips, answers={hostname_run: (0, "10.78.0.1\n10.78.0.2\n")})
    assert c["cluster/mpirun"].status == PASS, c["cluster/mpirun"].detail
