"""Fixture facts, a fake Runner and the Pilot helpers for the TUI tests (test_tui*.py).
Not a test module."""
from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Callable, Iterable, List, Optional, Tuple

from hpcwizard.facts import (Facts, Gpu, Hca, Iface, OsInfo, Port, Rdma, Runtime, Software,
                             UserInfo)
from hpcwizard.notes import note

UBUNTU = OsInfo(id="ubuntu", version_id="22.04", pretty_name="Ubuntu 22.04.4 LTS",
                id_like=("debian",), family="debian", package_manager="apt")
DEBIAN = OsInfo(id="debian", version_id="12", pretty_name="Debian GNU/Linux 12 (bookworm)",
                family="debian", package_manager="apt")


def gpu_ib(sudo: str = "none") -> Facts:
    """A GPU+IB machine: 2 H100, one active HDR port, one down; user alice (no sudo by
    default: the preset image is what can work here)."""
    return Facts(
        os=UBUNTU,
        user=UserInfo(name="alice", uid=1000, gid=1000, home="/home/alice", sudo=sudo),
        runtime=Runtime(container="kubernetes", pid1="tini", jupyter=True),
        hostname="gpu-node-7",
        cpus=128,
        memory_mib=2063597,
        ifaces=(Iface("eth0", "UP", "02:42:ac:11:00:02", ("10.0.3.7/24",)),
                Iface("ib0", "UP", "", ("192.168.50.7/24",))),
        hcas=(
            Hca("mlx5_0", driver="mlx5_core", vendor_id="0x15b3", fw_version="20.39.1002",
                ports=(Port("mlx5_0", 1, "ACTIVE", "LinkUp", 200.0, "InfiniBand", "ib0"),)),
            Hca("mlx5_1", driver="mlx5_core", vendor_id="0x15b3", fw_version="20.39.1002",
                ports=(Port("mlx5_1", 1, "DOWN", "Disabled", None, "InfiniBand", ""),)),
        ),
        gpus=(Gpu(0, "NVIDIA H100 80GB HBM3", 81559, "535.129.03", "12.2"),
              Gpu(1, "NVIDIA H100 80GB HBM3", 81559, "535.129.03", "12.2")),
        rdma=Rdma(uverbs=("uverbs0", "uverbs1"), memlock_kib=None, memlock_unlimited=True,
                  peermem=False),
        software=Software(ssh_version="OpenSSH_8.9p1", mpi_flavour="", torch_version="2.3.1",
                          nccl_version="2.20.5", torch_cuda="12.1", packages={}),
        mirrors_reachable=True,
        warnings=("GPUs and an active IB port, but nvidia_peermem is not loaded: NCCL will not "
                  "use GPUDirect RDMA.",),
    )


def bare_container() -> Facts:
    """A bare Debian container, root, nothing installed, no GPU, no RDMA."""
    return Facts(
        os=DEBIAN,
        user=UserInfo(name="root", uid=0, gid=0, home="/root", sudo="root"),
        runtime=Runtime(container="docker", pid1="sleep"),
        hostname="c0ffee",
        cpus=2,
        memory_mib=3934,
        ifaces=(Iface("eth0", "UP", "02:42:ac:11:00:03", ("172.17.0.3/16",)),),
        software=Software(packages={}),
        mirrors_reachable=True,
        notes=(note("gpu.none"),),
    )


def write_facts(facts: Facts, path: Path) -> Path:
    path.write_text(json.dumps(facts.to_dict()), encoding="utf-8")
    return path


class FakeRunner:
    """A Runner that changes nothing: checks pass for texts containing one of `done`; a run
    prints `lines` lines and succeeds, unless its text contains one of `fail` (then it prints
    apt's 'Unable to locate package' and exits 100, `failures` times)."""

    def __init__(self, done: Iterable[str] = (), fail: Iterable[str] = (), lines: int = 3,
                 failures: int = 1, line: Optional[Callable[[str, int], str]] = None) -> None:
        self.done = tuple(done)
        self.fail = tuple(fail)
        self.lines = lines
        self.failures = failures
        self.line = line or (lambda text, k: f"{text.strip().splitlines()[0][:50]} ... {k}")
        self.calls: List[Tuple[str, str, str]] = []
        self._just_ran = False

    def via_sudo(self, as_: str) -> bool:
        return as_ == "root"  # as for a user, the facts' sudo kind says whether it asks

    def check(self, as_: str, text: str) -> bool:
        self.calls.append(("check", as_, text))
        if self._just_ran:
            self._just_ran = False
            return True
        return any(d in text for d in self.done)

    def run(self, as_: str, text: str, on_line: Callable[[str], None]) -> int:
        self.calls.append(("run", as_, text))
        for k in range(1, self.lines + 1):
            on_line(self.line(text, k))
        if self.failures > 0 and any(f in text for f in self.fail):
            self.failures -= 1
            on_line("E: Unable to locate package openmpi-bin")
            return 100
        self._just_ran = True
        return 0

    def ran(self) -> List[str]:
        return [t for kind, _, t in self.calls if kind == "run"]


# --- Pilot helpers ----------------------------------------------------------------------

def sync(fn):
    """Run an async test without a pytest asyncio plugin (none is a dependency)."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))

    return wrapper


def make_app(tmp_path: Path, facts=None, runner=None, **kw):
    """The wizard on fixture facts; nothing it runs touches this machine: the fake runner,
    and for the Done screen's checks a fake verify System (every peer answers)."""
    from _verify_fixtures import FakeSystem
    from hpcwizard.catalog import load_catalog
    from hpcwizard.screens.app import WizardApp

    kw.setdefault("verify_system", FakeSystem({}))
    return WizardApp(facts=facts or bare_container(), runner=runner or FakeRunner(),
                     catalog=load_catalog(), state_dir=tmp_path / "state", clock=lambda: 0.0,
                     record_name="test-record.toml", **kw)


# Only bounds a failure: a loaded machine (the full suite beside other work) can take many
# seconds for what takes milliseconds alone, and a passing test never waits this long.
WAIT_TIMEOUT = 90.0


async def wait_for(pilot, cond: Callable[[], bool], timeout: float = WAIT_TIMEOUT,
                   what: str = "") -> None:
    """Until cond() holds: each round lets the app handle what is queued (pilot.pause()
    without a delay waits for the screen's messages and for the process to go idle), so the
    test waits for a state, never for a fixed time."""
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:g} s waiting for "
                                 f"{what or 'the app'}")
        await pilot.pause()


def nothing_pending(app) -> bool:
    """No message waits in the App or in any widget of the screen: what was typed has been
    handled to the end (an Input's Changed bubbles up widget by widget, each a new message)."""
    nodes = [app, *app.screen.walk_children(with_self=True)]
    return all(node._message_queue.empty() for node in nodes)


async def until_handled(pilot) -> None:
    await wait_for(pilot, lambda: nothing_pending(pilot.app), what="the app to handle its queue")


def name(app) -> str:
    return type(app.screen).__name__


def text_of(widget) -> str:
    """What a Static shows, as plain text (tables and groups included)."""
    import io

    from rich.console import Console

    content = widget.content
    if isinstance(content, str):
        return content
    console = Console(width=200, color_system=None, file=io.StringIO())
    console.print(content)
    return console.file.getvalue()


async def to_choose(pilot) -> None:
    assert name(pilot.app) == "SystemScreen"
    await pilot.press("enter")
    await wait_for(pilot, lambda: name(pilot.app) == "ChooseScreen")


async def to_review(pilot) -> None:
    """System -> Choose (its defaults: MPI over TCP) -> Recommend -> configure here -> Review."""
    await to_choose(pilot)
    await pilot.press("enter")  # Choose's Next (a browser keeps ctrl+n)
    await wait_for(pilot, lambda: name(pilot.app) == "RecommendScreen")
    await pilot.press("c")
    await wait_for(pilot, lambda: name(pilot.app) == "ReviewScreen")


async def run_until(pilot, *statuses: str) -> None:
    """From System: Review with its checks done, Run, until the run ends with one of statuses."""
    await to_review(pilot)
    await wait_for(pilot, lambda: all(pilot.app.screen.checked))
    await pilot.press("r")
    await wait_for(pilot, lambda: pilot.app.run_status in statuses)
    await pilot.pause()
