"""Helpers for the verify and launch system tests (tests/system/test_system_verify.py,
test_system_launch.py): a netns Cluster with its own namespace prefix, subnet and /etc/hosts mark
(so that it never touches the apply tests' cluster), and a module fixture that applies the
MPI/TCP configuration for root for real and undoes it afterwards.

Not a test module. Reuses netns.Cluster; changes nothing in it."""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pytest

from netns import Cluster, strip_block
from test_apply_mpi_tcp import show, wizard_exe  # noqa: F401  (re-exported)

PORT = 2222
MARK = "hpcwizard-verify-test"
OTHER_PREFIX = "hpcwt-"  # the apply tests' namespaces: wait while they exist


class VCluster(Cluster):
    """netns.Cluster under its own prefix, subnet and hosts-block mark."""

    def __init__(self, n: int) -> None:
        super().__init__(n, prefix="node", subnet="10.78.0", ns_prefix="hpcwv-")
        self.hidden: List[str] = []

    def _block(self) -> str:
        names = [n for n in self.names if n not in self.hidden]
        return "\n".join([f"# BEGIN {MARK}"] + [f"{self.ip(n)} {n}" for n in names]
                         + [f"# END {MARK}"]) + "\n"

    def _write_hosts(self) -> None:
        before = self.hosts_file.read_bytes().decode()
        text = strip_block(before, MARK)
        self._hosts_before = text.encode()
        if text and not text.endswith("\n"):
            text += "\n"
        with open(self.hosts_file, "w") as fh:  # in place: /etc/hosts may be a bind mount
            fh.write(text + self._block())

    def _restore_hosts(self) -> None:
        if self._hosts_before is None:
            return
        rest = strip_block(self.hosts_file.read_bytes().decode(), MARK)
        if rest.encode().rstrip(b"\n") == self._hosts_before.rstrip(b"\n"):
            rest = self._hosts_before.decode()
        with open(self.hosts_file, "w") as fh:
            fh.write(rest)
        self._hosts_before = None

    def hide(self, node: str) -> None:
        """Take node's name out of /etc/hosts (the namespace stays)."""
        self.hidden.append(node)
        self._rewrite()

    def unhide(self, node: str) -> None:
        self.hidden.remove(node)
        self._rewrite()

    def _rewrite(self) -> None:
        text = strip_block(self.hosts_file.read_bytes().decode(), MARK)
        if text and not text.endswith("\n"):
            text += "\n"
        with open(self.hosts_file, "w") as fh:
            fh.write(text + self._block())


def _applying() -> bool:
    """Another hpcwizard apply or undo is running (by its command line)."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"hpcwizard") for a in argv) and (b"apply" in argv or b"undo" in argv):
            return True
    return False


def wait_for_other_system_tests(limit: float = 1800) -> None:
    """The apply tests install and purge the same packages: never overlap with them."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        if not any(line.startswith(OTHER_PREFIX) for line in ns.split()) and not _applying():
            return
        time.sleep(5)
    pytest.fail("the apply system tests' namespaces (hpcwt-*) are still there after 30 min")


def applied(tmp_path_factory: pytest.TempPathFactory,
            platform_env: Optional[Dict[str, str]] = None) -> Iterator[dict]:
    """apply --framework mpi --network tcp --manual for root, for the instances node1..N
    (their SSH client settings: --peers 'node*', or what platform_env's host list gives,
    as a wizard started with that environment derives); undo afterwards. Removes what
    the launch script and verify leave in root's home (~/.hpcwizard, ~/.cache/hpcwizard)
    unless it was there before."""
    wait_for_other_system_tests()
    state = tmp_path_factory.mktemp("verify-state")
    env = dict(os.environ, HPCWIZARD_STATE_DIR=str(state), **(platform_env or {}))
    peers = [] if platform_env else ["--peers", "node*"]
    record = state / "apply.toml"
    home = Path(os.path.expanduser("~root"))
    leftovers = [p for p in (home / ".hpcwizard", home / ".cache" / "hpcwizard")
                 if not p.exists()]
    proc = subprocess.run([wizard_exe(), "apply", "--framework", "mpi", "--network", "tcp",
                           "--manual", *peers, "--yes", "--record", str(record)], env=env, text=True,
                          capture_output=True, stdin=subprocess.DEVNULL, timeout=900, cwd="/")
    try:
        assert proc.returncode == 0, f"apply failed{show(proc)}"
        yield {"env": env, "record": record}
    finally:
        for p in leftovers:
            shutil.rmtree(p, ignore_errors=True)
        if record.exists():
            undo = subprocess.run([wizard_exe(), "undo", str(record), "--yes"], env=env,
                                  text=True, capture_output=True, stdin=subprocess.DEVNULL,
                                  timeout=900, cwd="/")
            assert undo.returncode == 0, f"undo failed{show(undo)}"


def start_nodes(c: VCluster, extra: "dict[str, list]" = None) -> dict:
    """An sshd per node from the system configuration the wizard wrote; extra options
    per node (e.g. an AuthorizedKeysFile override). Returns node -> Daemon."""
    daemons = {}
    for node in c.names:
        daemons[node] = c.start_sshd(node, f"/run/sshd-v{node}.pid",
                                     extra=(extra or {}).get(node, []))
    for node in c.names:
        c.wait_port(node, PORT)
    return daemons
