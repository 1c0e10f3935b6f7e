"""Helpers shared by the issue-6 system tests (test_interrupt, test_faults, test_system_security):
running the installed hpcwizard in the background, holding a step at a chosen command
(test-only, through BASH_ENV: the shell text that runs stays exactly what plan shows),
killing a process tree, and installing the plan's packages for a module. Not a test module.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence

from test_apply_mpi_tcp import PACKAGES, show, wizard_exe  # noqa: F401  (re-exported)

# Sourced by every bash hpcwizard starts (BASH_ENV; test-only). When the bash runs exactly
# the text in $HPCWT_HOLD/text (after the operations library), a DEBUG trap (inherited by subshells: set -T) numbers the
# commands it runs; at number $HPCWT_HOLD/at it writes $HPCWT_HOLD/ready and waits for
# $HPCWT_HOLD/release. In count mode (text "count", at 0) every bash writes the last number
# it reached to count.LENGTH.PID, LENGTH being the length of the text it runs.
HOLD_SCRIPT = r"""
if [ -n "${HPCWT_HOLD:-}" ] && [ -n "${BASH_EXECUTION_STRING:-}" ] && [ -r "$HPCWT_HOLD/text" ]; then
  __hpcwt_want=
  IFS= read -r -d '' __hpcwt_want < "$HPCWT_HOLD/text" || true
  # the step's own text: what follows the operations library apply puts before it
  __hpcwt_step=${BASH_EXECUTION_STRING##*$'\n# --- the step ---\n'}
  if [ "$__hpcwt_want" = count ] || [ "$__hpcwt_step" = "$__hpcwt_want" ]; then
    __hpcwt_n=0
    __hpcwt_at=0
    IFS= read -r __hpcwt_at < "$HPCWT_HOLD/at" || true
    __hpcwt_hit() {
      __hpcwt_n=$((__hpcwt_n + 1))
      if [ "${__hpcwt_at:-0}" = 0 ]; then
        echo "$__hpcwt_n" > "$HPCWT_HOLD/count.${#__hpcwt_step}.$BASHPID"
      elif [ "$__hpcwt_n" = "$__hpcwt_at" ]; then
        # written aside and renamed: the test reads the pid as soon as "ready" exists
        echo "$BASHPID" > "$HPCWT_HOLD/ready.$BASHPID"
        mv -f "$HPCWT_HOLD/ready.$BASHPID" "$HPCWT_HOLD/ready"
        while [ ! -e "$HPCWT_HOLD/release" ]; do sleep 0.05; done
      fi
    }
    set -T
    trap '__hpcwt_hit' DEBUG
  fi
fi
"""


class Hold:
    """Holds the step whose run text is `text` before its at-th command (1: before any)."""

    def __init__(self, directory: Path):
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.script = self.dir / "bash_env.sh"
        self.script.write_text(HOLD_SCRIPT)

    def env(self) -> Dict[str, str]:
        return {"BASH_ENV": str(self.script), "HPCWT_HOLD": str(self.dir)}

    def arm(self, text: str, at: int) -> None:
        for name in ("ready", "release"):
            (self.dir / name).unlink(missing_ok=True)
        for f in self.dir.glob("count.*"):
            f.unlink()
        (self.dir / "text").write_text(text)
        (self.dir / "at").write_text(f"{at}\n")

    def disarm(self) -> None:
        (self.dir / "text").unlink(missing_ok=True)
        (self.dir / "release").touch()

    def count_all(self) -> None:
        self.arm("count", 0)

    def counted(self, text: str) -> int:
        """After count mode: how many commands the bash running text ran (its largest number)."""
        return max((int(f.read_text() or 0) for f in self.dir.glob(f"count.{len(text)}.*")),
                   default=0)

    def wait_ready(self, proc: subprocess.Popen, timeout: float = 60) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if (self.dir / "ready").exists():
                return True
            if proc.poll() is not None:
                return False
            time.sleep(0.02)
        return False


def start(argv: Sequence[str], env: Dict[str, str]) -> subprocess.Popen:
    """hpcwizard in the background, in a session of its own (as in a terminal of its own)."""
    return subprocess.Popen([wizard_exe(), *argv], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd="/", start_new_session=True)


def descendants(pid: int) -> List[int]:
    children: Dict[int, List[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in children.get(p, ()):
            out.append(c)
            todo.append(c)
    return out


def kill_tree(pid: int) -> None:
    """SIGKILL pid and every process below it, as when the container or VM dies: stopped
    first (SIGSTOP, until no new child appears) so that none escapes, then killed."""
    seen: List[int] = []
    for _ in range(20):
        new = [p for p in [pid, *descendants(pid)] if p not in seen]
        if not new:
            break
        for p in new:
            try:
                os.kill(p, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        seen += new
    for p in seen:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def finish(proc: subprocess.Popen, timeout: float = 120) -> subprocess.CompletedProcess:
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def wait_gone(pids: Sequence[int], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(Path(f"/proc/{p}").exists() for p in pids):
            return
        time.sleep(0.05)


def package_list() -> List[str]:
    r = subprocess.run(["dpkg-query", "-W", "-f", "${db:Status-Abbrev} ${Package}\n"],
                       capture_output=True, text=True, check=True)
    return sorted(line.split()[1] for line in r.stdout.splitlines()
                  if len(line.split()) == 2 and not line.startswith(("un", "pn")))


def apt(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    return subprocess.run(["apt-get", "-q", "-y", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, stdin=subprocess.DEVNULL)


class InstalledPackages:
    """The plan's packages, installed with apt for a module and purged after it (exactly the
    packages that were not there before)."""

    def __init__(self) -> None:
        self.before: Optional[List[str]] = None

    def install(self) -> None:
        self.before = package_list()
        r = apt("install", "--no-install-recommends", *PACKAGES, "openssh-client")
        if r.returncode != 0:
            r = apt("update")
            r = apt("install", "--no-install-recommends", *PACKAGES, "openssh-client")
        assert r.returncode == 0, f"apt-get install failed{show(r)}"

    def purge(self) -> None:
        if self.before is None:
            return
        new = sorted(set(package_list()) - set(self.before))
        if new:
            r = apt("purge", *new)
            assert r.returncode == 0, f"apt-get purge failed{show(r)}"
        self.before = None


def packages_installed() -> Iterator[None]:
    """For a fixture: the plan's packages installed for its scope, purged after it."""
    p = InstalledPackages()
    try:
        p.install()
        yield
    finally:
        p.purge()


class RecordedRuns:
    """hpcwizard runs with their own state directory and the hold script in their env;
    every record they make is undone at teardown (undo_all), newest first."""

    def __init__(self, tmp: Path, **env: str):
        self.tmp = tmp
        self.state = tmp / "state"
        self.hold = Hold(tmp / "hold")
        self.env = dict(os.environ, HPCWIZARD_STATE_DIR=str(self.state), **self.hold.env(), **env)
        self.records: List[Path] = []

    def run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run([wizard_exe(), *args], stdin=subprocess.DEVNULL, text=True,
                              capture_output=True, env=self.env, cwd="/", timeout=timeout)

    def undo(self, rec: Path) -> subprocess.CompletedProcess:
        return self.run("undo", str(rec), "--yes")

    def undo_all(self) -> List[str]:
        """Undo every record that has something to undo (the core's own list of statuses),
        newest first; what failed, as text."""
        from hpcwizard.apply import UNDO_STATUSES
        from hpcwizard.record import Record

        self.hold.disarm()
        problems = []
        for rec in reversed(self.records):
            if rec.exists() and any(s.outcome.status in UNDO_STATUSES
                                    for s in Record.load(rec).steps):
                proc = self.undo(rec)
                if proc.returncode != 0:
                    problems.append(show(proc))
        self.records.clear()
        return problems

    def log(self, rec: Path) -> str:
        try:
            return rec.with_suffix(".log").read_text(errors="replace")[-5000:]
        except OSError:
            return "(no log)"
