"""Issue 4, system test: the installed wizard in a real terminal (tmux, 120x40) inside node1
of three network-namespace instances, on a machine configured for real (MPI/TCP, root).
It plans and runs again — every step is already done, so nothing changes — and Done
verifies with real ssh and mpirun across node1..3 (named by HOSTS, as a platform would):
all pass. With node3's name taken out of /etc/hosts, Verify again (v) fails on that check
with its diagnosis. The wizard's record: every step skipped, the last verification's outcome.
Root only, HPCWIZARD_SYSTEM_TESTS=1 (conftest.py skips otherwise)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from _verify_cluster import VCluster, applied, start_nodes, wizard_exe
from hpcwizard.record import Record
from test_tui_tmux import Tmux

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    # the wizard below derives its peers from HOSTS: so does the apply it runs again
    yield from applied(tmp_path_factory, {"HOSTS": "node1,node2,node3"})


def wait_until_shown(t: Tmux, present: str, absent: str = "", timeout: float = 30) -> str:
    import time

    end = time.monotonic() + timeout
    shown = ""
    while time.monotonic() < end:
        shown = t.screen()
        if present in shown and not (absent and absent in shown):
            return shown
        time.sleep(0.2)
    raise AssertionError(f"{present!r} (without {absent!r}) did not appear; the screen:\n{shown}")


def test_done_verifies_across_three_instances_for_real(setup, tmp_path):
    state = tmp_path / "tui-state"
    t = Tmux(tmp_path)
    with VCluster(3) as c:
        start_nodes(c)
        try:
            # the system's python3 and Open MPI on PATH (not the test's venv): nothing of the
            # user's environment for cluster/user-env to prove, so the counts below are these
            command = (f"env HOSTS=node1,node2,node3 HPCWIZARD_STATE_DIR={state} "
                       f"PATH=/usr/sbin:/usr/bin:/sbin:/bin "
                       f"{wizard_exe()}; echo HPCWIZARD-EXIT=$?; sleep 120")
            subprocess.run(c.argv("node1", ["tmux", "-L", t.socket, "new-session", "-d", "-s",
                                            t.session, "-x", "120", "-y", "40", "-c", "/",
                                            command]), check=True, timeout=30)
            t.wait_for("Machine", timeout=60)  # detection finished
            t.keys("Enter")
            t.wait_for("2/6 Choose")
            t.keys("C-n")  # MPI over TCP, root, port 2222: the defaults
            t.wait_for("3/6 Recommend")
            t.keys("c")
            t.wait_for("4/6 Review")
            t.keys("r")
            t.wait_for("Continue (n)", timeout=300)
            t.keys("n")
            shown = wait_until_shown(t, "6/6 Done", absent="Verifying", timeout=30)
            shown = wait_until_shown(t, " passed, ", timeout=180)
            assert "from HOSTS" in shown
            assert "Checked on: this instance and node1, node2, node3" in shown
            assert "14 passed, 0 failed, 0 skipped" in shown, shown
            first = Record.load(next((state / "records").glob("*.toml"))).data["verify"]
            # here 4 (sshd, its settings in effect, ssh's, login), per host name/port/login
            # 3 x 3, and mpirun on all three
            assert first["ok"] is True and first["counts"]["pass"] == 14

            c.hide("node3")  # its name no longer resolves
            t.keys("v")
            # the failure scrolls into view by itself
            wait_until_shown(t, "FAIL  node3: name resolves", timeout=180)
            # node3's failure shows as soon as it is found; the others' checks may still run
            shown = wait_until_shown(t, " passed, ", absent="Verifying", timeout=180)
            assert "FAIL  node3: name resolves" in shown, shown
            assert "10 passed, 1 failed, 3 skipped" in shown, shown
            assert "cause:" in shown and "fix:" in shown
            t.keys("q")
            t.wait_for("HPCWIZARD-EXIT=1")  # its last verification failed
        finally:
            t.kill()
            if "node3" in c.hidden:
                c.unhide("node3")
    records = sorted((state / "records").glob("*.toml"))
    assert len(records) == 1
    loaded = Record.load(records[0])
    assert {s.outcome.status for s in loaded.steps} == {"skipped"}  # a configured machine
    record = loaded.data
    assert record["verify"]["ok"] is False
    assert record["verify"]["failed"] == ["peer/node3/resolve"]
    assert record["verify"]["hosts"] == ["node1", "node2", "node3"]
    log = Path(record["log"]).read_text()
    assert log.count("-- verify") == 2
    assert "PASS  mpirun starts a process on all 3 hosts" in log  # each check, in the log
