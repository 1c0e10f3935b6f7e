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


# --- a local repository of tiny packages: alternatives, conflicts, conffiles ------------------
# Modelled on Debian 13's openssh-server: hwt-server depends on "hwt-systemd |
# hwt-standalone", which conflict with each other (systemd and systemd-standalone-sysusers);
# hwt-server has a dpkg conffile and a file ucf keeps (as sshd_config). apt sees only this
# repository (APT_CONFIG): no network, no real package touched.

LOCAL = ("hwt-systemd", "hwt-standalone", "hwt-server")


def _deb(root: Path, name: str, control: str, files: Dict[str, str], scripts: Dict[str, str]) -> None:
    d = root / "build" / name
    (d / "DEBIAN").mkdir(parents=True)
    (d / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: 1.0\nArchitecture: all\nMaintainer: hpcwizard tests <t@example.invalid>\n"
        f"Description: hpcwizard test package\n{control}")
    for path, text in files.items():
        p = d / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    conffiles = [p for p in files if p.startswith("/etc/")]
    if conffiles:
        (d / "DEBIAN" / "conffiles").write_text("".join(f"{p}\n" for p in conffiles))
    for script, text in scripts.items():
        (d / "DEBIAN" / script).write_text("#!/bin/sh\nset -e\n" + text)
        (d / "DEBIAN" / script).chmod(0o755)
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(d), str(root / "repo" / f"{name}.deb")],
                   check=True, capture_output=True)


@pytest.fixture()
def local_repo(tmp_path):
    if [p for p in LOCAL if state(p) not in ("un", "pn")]:
        pytest.skip("the test's packages are on this machine already")
    for path in ("/etc/hwt-server.conf", "/etc/hwt-server.ucf"):
        if os.path.lexists(path):
            pytest.skip(f"{path} is there already")
    root = tmp_path / "apt"
    (root / "repo").mkdir(parents=True)
    _deb(root, "hwt-systemd", "Conflicts: hwt-standalone\n", {}, {})
    _deb(root, "hwt-standalone", "Conflicts: hwt-systemd\nProvides: hwt-sysusers\n", {}, {})
    _deb(root, "hwt-server", "Depends: hwt-systemd | hwt-standalone, ucf\n",
         {"/etc/hwt-server.conf": "# shipped\n", "/usr/share/hwt-server/hwt-server.ucf": "# shipped by ucf\n"},
         {"postinst": 'if [ "$1" = configure ]; then\n'
                      '  ucf /usr/share/hwt-server/hwt-server.ucf /etc/hwt-server.ucf\n'
                      '  ucfr hwt-server /etc/hwt-server.ucf\nfi\n',
          "postrm": 'if [ "$1" = purge ]; then\n  rm -f /etc/hwt-server.ucf\n'
                    '  if command -v ucf >/dev/null; then ucf --purge /etc/hwt-server.ucf; fi\n'
                    '  if command -v ucfr >/dev/null; then ucfr --purge hwt-server /etc/hwt-server.ucf; fi\nfi\n'})
    packages = subprocess.run(["dpkg-scanpackages", "."], cwd=root / "repo", check=True,
                              capture_output=True, text=True).stdout
    (root / "repo" / "Packages").write_text(packages)
    (root / "sources.list").write_text(f"deb [trusted=yes] file:{root / 'repo'} ./\n")
    for d in ("lists/partial", "cache/archives/partial"):
        (root / d).mkdir(parents=True)
    conf = root / "apt.conf"
    conf.write_text(f'Dir::Etc::sourcelist "{root / "sources.list"}";\nDir::Etc::sourceparts "/nonexistent";\n'
                    f'Dir::State::Lists "{root / "lists"}";\nDir::Cache "{root / "cache"}";\n')
    env = {"APT_CONFIG": str(conf)}
    subprocess.run(["apt-get", "-q", "update"], check=True, capture_output=True, env=dict(os.environ, **env))
    before = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Abbrev} ${Package}\n"],
                            capture_output=True, text=True).stdout
    yield env
    there = [p for p in LOCAL if state(p) not in ("un", "pn")]
    if there:
        local_apt(env, "purge", *there)
    for path in ("/etc/hwt-server.conf.hpcwizard-kept", "/etc/hwt-server.ucf.hpcwizard-kept"):
        if os.path.lexists(path):
            os.unlink(path)
    after = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Abbrev} ${Package}\n"],
                           capture_output=True, text=True).stdout
    assert after == before, "the machine's package list must be as before the test"


def local_apt(env: Dict[str, str], *args: str) -> None:
    # others' apt may hold the lock: wait for it, as apt() does
    subprocess.run(["apt-get", "-q", "-y", "-o", "DPkg::Lock::Timeout=300", *args], check=True, capture_output=True,
                   env=dict(os.environ, DEBIAN_FRONTEND="noninteractive", **env))


def test_alternatives_ask_for_nothing_when_one_is_there(tmp_path, local_repo) -> None:
    """The user has hwt-server with hwt-systemd: the sysusers group is satisfied, nothing is
    installed or removed, and undo purges nothing."""
    local_apt(local_repo, "install", "--no-install-recommends", "hwt-server", "hwt-systemd")
    names = "hwt-server 'hwt-standalone|hwt-systemd'"
    assert op(tmp_path, names, "check", local_repo).returncode == 0
    ran = op(tmp_path, names, env=local_repo)
    assert ran.returncode == 0, ran.stderr
    assert state("hwt-systemd") == "ii" and state("hwt-standalone") == "un"
    undone = op(tmp_path, names, "undo", local_repo)
    assert undone.returncode == 0, undone.stderr
    assert state("hwt-systemd") == "ii" and state("hwt-server") == "ii"


def test_alternatives_none_there_install_the_first(tmp_path, local_repo) -> None:
    names = "'hwt-standalone|hwt-systemd'"
    assert op(tmp_path, names, "check", local_repo).returncode == 1
    ran = op(tmp_path, names, env=local_repo)
    assert ran.returncode == 0, ran.stderr
    assert state("hwt-standalone") == "ii" and state("hwt-systemd") == "un"
    assert op(tmp_path, names, "check", local_repo).returncode == 0
    undone = op(tmp_path, names, "undo", local_repo)
    assert undone.returncode == 0, undone.stderr
    assert state("hwt-standalone") == "un"


def test_an_install_that_would_remove_a_users_package_fails_and_removes_nothing(tmp_path, local_repo) -> None:
    local_apt(local_repo, "install", "--no-install-recommends", "hwt-systemd")
    ran = op(tmp_path, "hwt-standalone", env=local_repo)
    assert ran.returncode != 0
    assert "would make apt remove hwt-systemd" in ran.stderr and "removes no package" in ran.stderr
    assert state("hwt-systemd") == "ii" and state("hwt-standalone") == "un"
    undone = op(tmp_path, "hwt-standalone", "undo", local_repo)
    assert undone.returncode == 0, undone.stderr
    assert state("hwt-systemd") == "ii"


def test_undo_installs_nothing_in_place_of_ours(tmp_path, local_repo) -> None:
    """hpcwizard gave hwt-standalone; the user then installed hwt-server, which it satisfies.
    Purging it would make apt install hwt-systemd: it is kept, and undo says so."""
    assert op(tmp_path, "hwt-standalone", env=local_repo).returncode == 0
    local_apt(local_repo, "install", "--no-install-recommends", "hwt-server")
    assert state("hwt-systemd") == "un"
    undone = op(tmp_path, "hwt-standalone", "undo", local_repo)
    assert undone.returncode == 0, undone.stderr
    assert state("hwt-systemd") == "un", "undo must install nothing"
    assert state("hwt-standalone") == "ii" and state("hwt-server") == "ii"
    assert "kept hwt-standalone" in undone.stderr, undone.stderr


def test_undo_keeps_changed_config_files_of_what_it_purges(tmp_path, local_repo) -> None:
    """A dpkg conffile and a ucf file of a package hpcwizard installed, edited by the user:
    the purge would delete both; each is kept beside, with its mode, and undo says so."""
    assert op(tmp_path, "hwt-server hwt-standalone", env=local_repo).returncode == 0
    conf, ucf_file = Path("/etc/hwt-server.conf"), Path("/etc/hwt-server.ucf")
    assert ucf_file.read_text() == "# shipped by ucf\n"
    conf.write_text(conf.read_text() + "mine\n")
    ucf_file.write_text(ucf_file.read_text() + "mine too\n")
    ucf_file.chmod(0o600)
    undone = op(tmp_path, "hwt-server hwt-standalone", "undo", local_repo)
    assert undone.returncode == 0, undone.stderr
    assert state("hwt-server") == "un" and state("hwt-standalone") == "un"
    assert not conf.exists() and not ucf_file.exists()
    kept = Path("/etc/hwt-server.conf.hpcwizard-kept")
    kept_ucf = Path("/etc/hwt-server.ucf.hpcwizard-kept")
    assert kept.read_text() == "# shipped\nmine\n"
    assert kept_ucf.read_text() == "# shipped by ucf\nmine too\n"
    assert oct(kept_ucf.stat().st_mode & 0o777) == "0o600"
    assert f"kept in {kept}" in undone.stderr and f"kept in {kept_ucf}" in undone.stderr


def test_undo_of_unchanged_config_files_keeps_nothing(tmp_path, local_repo) -> None:
    assert op(tmp_path, "hwt-server hwt-standalone", env=local_repo).returncode == 0
    undone = op(tmp_path, "hwt-server hwt-standalone", "undo", local_repo)
    assert undone.returncode == 0, undone.stderr
    assert "kept" not in undone.stderr
    assert not list(Path("/etc").glob("hwt-server.*"))


def test_an_install_apt_cannot_resolve_fails_with_apts_own_words(tmp_path, local_repo) -> None:
    ran = op(tmp_path, "hwt-no-such-package", env=local_repo)
    assert ran.returncode != 0
    assert "hwt-no-such-package" in ran.stderr, ran.stderr  # not a silent exit of the check before it
