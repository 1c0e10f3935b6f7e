"""hw_packages on real apt: undo takes only what one transaction newly installed, in the five
cases where it used to take more (issue 14): a package removed but not purged before, a
failed install step, a killed run's list of what was there before, a package installed
since that depends on ours, and an install that found everything there already.

Small packages, none of them on this machine before (the test checks, and skips saying so
otherwise): nano (with a conffile, /etc/nanorc), liblzo2-2 with lzop (which depends on it),
tinycdb with libcdb1 (installed "by hand" in between). Everything is purged at the end."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Dict, Optional

import pytest

from hpcwizard.recipes import __file__ as _recipes_init

OPS = Path(_recipes_init).with_name("ops.sh")
TEST_PACKAGES = ("nano", "liblzo2-2", "lzop", "tinycdb", "libcdb1")


def state(name: str) -> str:
    """dpkg's two letters for name ('ii', 'rc'), or 'un' when dpkg does not know it."""
    out = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Abbrev}", name],
                         capture_output=True, text=True).stdout.strip()
    return out[:2] or "un"


def apt(*args: str) -> None:
    subprocess.run(["apt-get", "-q", "-y", "-o", "DPkg::Lock::Timeout=300", *args],
                   check=True, capture_output=True, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))


def op(tmp: Path, names: str, mode: str = "run", env: Optional[Dict[str, str]] = None,
       ) -> subprocess.CompletedProcess:
    full = dict(os.environ, HW_STATE=str(tmp / "state"), HW_MODE=mode, **(env or {}))
    return subprocess.run(["bash", "-euo", "pipefail", "-c", f". {OPS}\nhw_packages apt {names}"],
                          capture_output=True, text=True, env=full, timeout=900)


@pytest.fixture()
def packages_absent():
    there = [p for p in TEST_PACKAGES if state(p) not in ("un", "pn")]
    if there:
        pytest.skip(f"the test's packages must not be on this machine: {', '.join(there)} are")
    yield
    apt("purge", *[p for p in TEST_PACKAGES if state(p) not in ("un", "pn")] or ["--version"])
    assert [p for p in TEST_PACKAGES if state(p) not in ("un", "pn")] == []


def test_a_package_removed_but_not_purged_keeps_its_configuration(tmp_path, packages_absent) -> None:
    apt("install", "--no-install-recommends", "nano")
    nanorc = Path("/etc/nanorc")
    nanorc.write_text(nanorc.read_text() + "# the user's own setting\n")
    apt("remove", "nano")
    assert state("nano") == "rc"
    ran = op(tmp_path, "nano")
    assert ran.returncode == 0, ran.stderr
    assert state("nano") == "ii"
    undone = op(tmp_path, "nano", "undo")
    assert undone.returncode == 0, undone.stderr
    assert state("nano") == "rc", "undo must put it back as it was: removed, configuration kept"
    assert nanorc.read_text().endswith("# the user's own setting\n")


def test_a_failed_install_step_purges_nothing(tmp_path, packages_absent) -> None:
    no_mirror = tmp_path / "apt.conf"
    no_mirror.write_text('Dir::Etc::sourcelist "/dev/null";\nDir::Etc::sourceparts "/nonexistent";\n'
                         'Dir::State::Lists "%s";\n' % (tmp_path / "lists"))
    (tmp_path / "lists" / "partial").mkdir(parents=True)
    ran = op(tmp_path, "liblzo2-2", env={"APT_CONFIG": str(no_mirror)})
    assert ran.returncode == 1
    assert "could not reach any package mirror" in ran.stderr
    apt("install", "--no-install-recommends", "tinycdb")  # by hand, afterwards
    undone = op(tmp_path, "liblzo2-2", "undo")
    assert undone.returncode == 0, undone.stderr
    assert state("tinycdb") == "ii" and state("libcdb1") == "ii"


def test_a_killed_runs_list_is_not_stale_for_the_next_run(tmp_path, packages_absent) -> None:
    """kill -9 as apt-get install starts; tinycdb installed by hand; the next run completes:
    undo purges what that run installed, not tinycdb."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "apt-get").write_text(
        "#!/bin/bash\ncase \" $* \" in *' install '*) : > %s/killed; kill -9 0 ;; esac\n"
        "exec /usr/bin/apt-get \"$@\"\n" % bin_dir)
    (bin_dir / "apt-get").chmod(0o755)
    env = dict(os.environ, HW_STATE=str(tmp_path / "state"), HW_MODE="run",
               PATH=f"{bin_dir}:{os.environ['PATH']}")
    proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", f". {OPS}\nhw_packages apt liblzo2-2"],
                            env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    assert proc.wait(timeout=600) == -signal.SIGKILL
    assert (bin_dir / "killed").exists()
    assert list((tmp_path / "state").glob("packages-*.before")), "the killed run's list is there"
    apt("install", "--no-install-recommends", "tinycdb")
    ran = op(tmp_path, "liblzo2-2")
    assert ran.returncode == 0, ran.stderr
    undone = op(tmp_path, "liblzo2-2", "undo")
    assert undone.returncode == 0, undone.stderr
    assert state("liblzo2-2") in ("un", "pn")
    assert state("tinycdb") == "ii" and state("libcdb1") == "ii"


def test_a_package_that_now_depends_on_ours_keeps_it_and_undo_says_so(tmp_path, packages_absent) -> None:
    assert op(tmp_path, "liblzo2-2").returncode == 0
    apt("install", "--no-install-recommends", "lzop")  # depends on liblzo2-2
    undone = op(tmp_path, "liblzo2-2", "undo")
    assert undone.returncode == 0, undone.stderr
    assert state("lzop") == "ii" and state("liblzo2-2") == "ii"
    assert "kept liblzo2-2: lzop" in undone.stderr


def test_an_install_that_found_everything_there_purges_nothing(tmp_path, packages_absent) -> None:
    apt("install", "--no-install-recommends", "liblzo2-2")
    assert op(tmp_path, "liblzo2-2", "check").returncode == 0
    assert op(tmp_path, "liblzo2-2").returncode == 0
    undone = op(tmp_path, "liblzo2-2", "undo")
    assert undone.returncode == 0, undone.stderr
    assert state("liblzo2-2") == "ii"
