"""The installed `hpcwizard` in a real terminal (tmux, 80x24): the headline flow with keys
alone, MPI + InfiniBand -> the preset image -> the launch script on disk.

This machine has no active InfiniBand port, so the facts come from a fixture through
HPCWIZARD_FACTS (a testing/demo aid of run_tui): a GPU+IB machine, user without sudo."""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from _tui_fixtures import gpu_ib, write_facts

pytestmark = pytest.mark.skipif(not shutil.which("tmux") or not shutil.which("hpcwizard"),
                                reason="needs tmux and the installed hpcwizard")


class Tmux:
    def __init__(self, tmp: Path) -> None:
        self.socket = f"hpcwizard-test-{os.getpid()}"
        self.session = "wizard"

    def __call__(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], check=True, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=10).stdout

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", self.session)

    def wait_for(self, text: str, timeout: float = 20.0) -> str:
        end = time.monotonic() + timeout
        shown = ""
        while time.monotonic() < end:
            shown = self.screen()
            if text in shown:
                return shown
            time.sleep(0.1)
        raise AssertionError(f"{text!r} did not appear within {timeout:g} s; the screen:\n{shown}")

    def keys(self, *keys: str) -> None:
        for key in keys:
            self("send-keys", "-t", self.session, key)
            time.sleep(0.15)

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=10)


@pytest.fixture
def tmux(tmp_path):
    t = Tmux(tmp_path)
    yield t
    t.kill()


def test_headline_flow_in_tmux_writes_the_launch_script(tmux, tmp_path):
    facts = write_facts(gpu_ib(sudo="none"), tmp_path / "facts.json")
    state = tmp_path / "state"
    command = (f"env HPCWIZARD_FACTS={facts} HPCWIZARD_STATE_DIR={state} hpcwizard; "
               "echo HPCWIZARD-EXIT=$?; sleep 60")
    tmux("new-session", "-d", "-s", tmux.session, "-x", "80", "-y", "24", "-c", str(tmp_path),
         command)
    started = time.monotonic()
    shown = tmux.wait_for("1/6 System")
    assert "mlx5_0:1" in shown and "ACTIVE" in shown
    assert time.monotonic() - started < 10
    tmux.keys("Enter")
    tmux.wait_for("2/6 Choose")
    tmux.keys("Tab", "Right", "Enter")  # network: InfiniBand
    tmux.keys("C-n")
    shown = tmux.wait_for("3/6 Recommend")
    assert "Recommended: start the job from the preset image" in shown
    assert "esx-batchcom/openmpi-ib:v1" in shown
    assert "cannot use sudo" in shown  # the reason
    tmux.keys("Enter")  # take the recommended preset
    tmux.wait_for("Preset image")
    tmux.keys("Enter")  # Write (focused) with the launch script selected
    shown = tmux.wait_for("Wrote launch script")
    script = tmp_path / "hpcwizard-launch.sh"
    assert script.is_file()
    assert "hpcwizard-launch.sh" in shown.replace("\n", "")
    assert "esx-batchcom/openmpi-ib:v1" in script.read_text()
    assert os.access(script, os.X_OK)
    tmux.keys("q")
    tmux.wait_for("HPCWIZARD-EXIT=0")
    assert not (state / "records").exists()  # nothing ran
