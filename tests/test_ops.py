"""The operations library (recipes/ops.sh), run for real by bash on temporary trees: create,
replace, block, drop-in, symlinks, a user's edit before re-apply and before undo, a failed
validation, kill -9 at every rename, and undo byte for byte. Needs no root."""
from __future__ import annotations

import hashlib
import os
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path
from typing import Dict, Optional

import pytest

from hpcwizard.recipes import __file__ as _recipes_init

OPS = Path(_recipes_init).with_name("ops.sh")
SSHD = "Port 2222\nPasswordAuthentication no\nPermitRootLogin prohibit-password\n"


def op(tmp: Path, call: str, contents: Optional[str] = None, mode: str = "run",
       env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """One operation call as apply runs it: the library, then the call, under bash -euo
    pipefail, contents on standard input (the here-document's job)."""
    full = dict(os.environ, HW_STATE=str(tmp / "state"), HW_MODE=mode)
    full.update(env or {})
    return subprocess.run(["bash", "-euo", "pipefail", "-c", f". {OPS}\n{call}"],
                          input=contents or "", capture_output=True, text=True, env=full,
                          cwd=str(tmp), timeout=60)


def tree(root: Path) -> Dict[str, str]:
    """Every entry under root but the state directory: bytes, mode, and what a link says."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != "state"]
        for name in dirs + files:
            p = Path(dirpath, name)
            st = p.lstat()
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = "link -> " + os.readlink(p)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = f"dir {stat.S_IMODE(st.st_mode):o}"
            else:
                out[rel] = f"{stat.S_IMODE(st.st_mode):o} {hashlib.sha256(p.read_bytes()).hexdigest()[:16]}"
    return out


def state_left(tmp: Path) -> list:
    return sorted(os.listdir(tmp / "state")) if (tmp / "state").exists() else []


def test_the_library_is_shellcheck_clean() -> None:
    shellcheck = shutil.which("shellcheck")
    if not shellcheck:
        pytest.skip("shellcheck is not installed (pip install '.[test]' brings it)")
    proc = subprocess.run([shellcheck, "-s", "bash", str(OPS)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


# --- hw_file ------------------------------------------------------------------------------

def test_file_created_then_undone_leaves_nothing(tmp_path: Path) -> None:
    before = tree(tmp_path)
    call = "hw_file etc/x.conf --mode 0600"
    assert op(tmp_path, call, SSHD, "check").returncode == 1
    ran = op(tmp_path, call, SSHD)
    assert ran.returncode == 0, ran.stderr
    assert (tmp_path / "etc/x.conf").read_text() == SSHD
    assert stat.S_IMODE((tmp_path / "etc/x.conf").stat().st_mode) == 0o600
    assert op(tmp_path, call, SSHD, "check").returncode == 0
    assert op(tmp_path, call, SSHD).returncode == 0  # again: nothing more
    assert op(tmp_path, call, mode="undo").returncode == 0
    after = tree(tmp_path)
    after.pop("etc", None)  # the directory run made for it stays (it may hold others' files)
    before.pop("etc", None)
    assert after == before
    assert state_left(tmp_path) == []


def test_file_replaced_then_undone_is_byte_for_byte_with_its_mode(tmp_path: Path) -> None:
    f = tmp_path / "sshd_config"
    f.write_bytes(b"# the image's own\nPort 22\n")
    f.chmod(0o640)
    before = tree(tmp_path)
    assert op(tmp_path, "hw_file sshd_config --mode 0644", SSHD).returncode == 0
    assert f.read_text() == SSHD and stat.S_IMODE(f.stat().st_mode) == 0o644
    assert op(tmp_path, "hw_file sshd_config", mode="undo").returncode == 0
    assert tree(tmp_path) == before


def test_a_symlink_is_followed_and_stays_a_link(tmp_path: Path) -> None:
    (tmp_path / "dotfiles").mkdir()
    (tmp_path / "dotfiles/config").write_text("Host github.com\n    User git\n")
    (tmp_path / "config").symlink_to("dotfiles/config")
    before = tree(tmp_path)
    assert op(tmp_path, "hw_file config --mode 0600", SSHD).returncode == 0
    assert (tmp_path / "config").is_symlink()
    assert (tmp_path / "dotfiles/config").read_text() == SSHD
    assert op(tmp_path, "hw_file config", mode="undo").returncode == 0
    assert tree(tmp_path) == before


def test_a_users_edit_before_reapply_is_kept_beside_and_named(tmp_path: Path) -> None:
    f = tmp_path / "x.conf"
    assert op(tmp_path, "hw_file x.conf", SSHD).returncode == 0
    f.write_text(SSHD + "MaxSessions 50\n")
    ran = op(tmp_path, "hw_file x.conf", SSHD)
    assert ran.returncode == 0
    assert f.read_text() == SSHD
    assert (tmp_path / "x.conf.hpcwizard-kept").read_text() == SSHD + "MaxSessions 50\n"
    assert "x.conf was changed after hpcwizard wrote it" in ran.stderr
    assert "x.conf.hpcwizard-kept" in ran.stderr


def test_a_users_edit_before_undo_is_kept_and_the_original_returns(tmp_path: Path) -> None:
    f = tmp_path / "x.conf"
    f.write_text("original\n")
    assert op(tmp_path, "hw_file x.conf", SSHD).returncode == 0
    f.write_text(SSHD + "# mine\n")
    undone = op(tmp_path, "hw_file x.conf", mode="undo")
    assert undone.returncode == 0
    assert f.read_text() == "original\n"
    assert (tmp_path / "x.conf.hpcwizard-kept").read_text() == SSHD + "# mine\n"
    assert "kept in" in undone.stderr


def test_undo_of_a_file_it_never_wrote_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "x.conf").write_text("someone else's\n")
    before = tree(tmp_path)
    assert op(tmp_path, "hw_file x.conf", mode="undo").returncode == 0
    assert tree(tmp_path) == before


def test_a_failed_validation_puts_the_previous_file_back(tmp_path: Path) -> None:
    f = tmp_path / "x.conf"
    f.write_text("good\n")
    before = tree(tmp_path)
    ran = op(tmp_path, "hw_file x.conf --validate 'grep -q good x.conf'", SSHD)
    assert ran.returncode == 1
    assert "failed its test" in ran.stderr and "put back" in ran.stderr
    assert tree(tmp_path) == before
    # and a later undo takes nothing: only the remembered original, which is the same
    assert op(tmp_path, "hw_file x.conf", mode="undo").returncode == 0
    assert tree(tmp_path) == before


def test_diff_is_read_only_and_is_what_run_writes(tmp_path: Path) -> None:
    if not shutil.which("patch"):
        pytest.skip("patch is not installed (.ci/run installs it)")
    for name, call, old in (("f", "hw_file f", "a\nb\n"),
                            ("b", "hw_block b", "one\ntwo"),  # no newline at the end
                            ("t", "hw_block t --top", "user\n")):
        (tmp_path / name).write_text(old)
        copy = tmp_path / f"{name}.copy"
        copy.write_text(old)
        before = tree(tmp_path)
        env = {"HW_STATE": str(tmp_path / "state" / name)}
        diff = op(tmp_path, call, SSHD, "diff", env=env)
        assert diff.returncode == 0 and diff.stdout.startswith(f"--- {name}\n"), diff.stderr
        assert tree(tmp_path) == before and not (tmp_path / "state" / name).exists()
        subprocess.run(["patch", "-s", str(copy)], input=diff.stdout, text=True, check=True)
        assert op(tmp_path, call, SSHD, env=env).returncode == 0
        assert copy.read_bytes() == (tmp_path / name).read_bytes(), name


# --- hw_block -----------------------------------------------------------------------------

def test_block_at_the_end_of_a_file_without_a_final_newline_undoes_exactly(tmp_path: Path) -> None:
    f = tmp_path / "authorized_keys"
    f.write_bytes(b"ssh-ed25519 AAAA user@laptop")  # no newline
    f.chmod(0o600)
    before = tree(tmp_path)
    assert op(tmp_path, "hw_block authorized_keys", "ssh-ed25519 BBBB job\n").returncode == 0
    assert f.read_text() == ("ssh-ed25519 AAAA user@laptop\n# BEGIN hpcwizard\n"
                             "ssh-ed25519 BBBB job\n# END hpcwizard\n")
    assert op(tmp_path, "hw_block authorized_keys", "ssh-ed25519 BBBB job\n", "check").returncode == 0
    assert op(tmp_path, "hw_block authorized_keys", mode="undo").returncode == 0
    assert tree(tmp_path) == before


def test_block_at_the_top_keeps_what_others_wrote(tmp_path: Path) -> None:
    f = tmp_path / "config"
    f.write_text("Host *\n    Port 22\n")
    before = tree(tmp_path)
    assert op(tmp_path, "hw_block config --top", "Host job-*\n    Port 2222\n").returncode == 0
    assert f.read_text().startswith("# BEGIN hpcwizard\nHost job-*\n")
    assert f.read_text().endswith("# END hpcwizard\nHost *\n    Port 22\n")
    assert op(tmp_path, "hw_block config", mode="undo").returncode == 0
    assert tree(tmp_path) == before


def test_block_in_a_new_file_is_removed_with_the_file(tmp_path: Path) -> None:
    assert op(tmp_path, "hw_block known_hosts --mode 0600", "[*]:2222 ssh-ed25519 AAAA\n").returncode == 0
    assert stat.S_IMODE((tmp_path / "known_hosts").stat().st_mode) == 0o600
    assert op(tmp_path, "hw_block known_hosts", mode="undo").returncode == 0
    assert not (tmp_path / "known_hosts").exists()


def test_a_users_line_inside_the_block_is_kept_on_reapply_and_on_undo(tmp_path: Path) -> None:
    f = tmp_path / "config"
    f.write_text("# mine\n")
    block = "Host job-*\n    Port 2222\n"
    assert op(tmp_path, "hw_block config", block).returncode == 0
    f.write_text(f.read_text().replace("    Port 2222\n", "    Port 2222\n    User me\n"))
    ran = op(tmp_path, "hw_block config", block)
    assert ran.returncode == 0 and "kept in" in ran.stderr
    assert "User me" in (tmp_path / "config.hpcwizard-kept").read_text()
    assert "User me" not in f.read_text()
    f.write_text(f.read_text().replace("    Port 2222\n", "    Port 2222\n    User again\n"))
    undone = op(tmp_path, "hw_block config", mode="undo")
    assert undone.returncode == 0 and "kept in" in undone.stderr
    assert f.read_text() == "# mine\n"
    assert "User again" in (tmp_path / "config.hpcwizard-kept.1").read_text()


def test_a_begin_without_end_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    f = tmp_path / "config"
    f.write_text("# BEGIN hpcwizard\nHost x\n# the user's own lines after it\n")
    before = tree(tmp_path)
    ran = op(tmp_path, "hw_block config", "Host y\n")
    assert ran.returncode == 1 and "mend the block by hand" in ran.stderr
    assert tree(tmp_path) == before
    # the refused run changed nothing, so its undo has nothing to take back
    undone = op(tmp_path, "hw_block config", mode="undo")
    assert undone.returncode == 0 and "nothing to take back" in undone.stderr
    assert tree(tmp_path) == before


# --- hw_dropin ----------------------------------------------------------------------------

INCLUDE = "'^Include sshd_config\\.d/\\*\\.conf'"


def test_dropin_writes_the_file_where_the_main_file_includes_its_directory(tmp_path: Path) -> None:
    (tmp_path / "sshd_config").write_text("Include sshd_config.d/*.conf\nPort 22\n")
    (tmp_path / "sshd_config.d").mkdir()
    before = tree(tmp_path)
    call = f"hw_dropin sshd_config.d/00-hpcwizard.conf --else-block sshd_config --include {INCLUDE}"
    assert op(tmp_path, call, SSHD).returncode == 0
    assert (tmp_path / "sshd_config.d/00-hpcwizard.conf").read_text() == SSHD
    assert "hpcwizard" not in (tmp_path / "sshd_config").read_text()
    assert op(tmp_path, call, SSHD, "check").returncode == 0
    assert op(tmp_path, call, mode="undo").returncode == 0
    assert tree(tmp_path) == before and state_left(tmp_path) == []


@pytest.mark.parametrize("include,expected", [
    ("Include sshd_config.d/*.conf", True),        # relative: from the main file's directory
    ("Include {tmp}/sshd_config.d/*.conf", True),  # absolute
    ("  include other.d/*.conf sshd_config.d/0*.conf", True),  # any of several patterns
    ("#Include sshd_config.d/*.conf", False),      # commented out
    ("Include sshd_config.d/*.cfg", False),
])
def test_dropin_reads_the_include_lines_when_no_regex_is_given(tmp_path: Path, include: str,
                                                                expected: bool) -> None:
    (tmp_path / "sshd_config").write_text(include.replace("{tmp}", str(tmp_path)) + "\nPort 22\n")
    (tmp_path / "sshd_config.d").mkdir()
    # the image's own drop-ins: a pattern is matched against the path, never expanded
    (tmp_path / "sshd_config.d/50-cloud-init.conf").write_text("PasswordAuthentication yes\n")
    ran = op(tmp_path, "hw_dropin sshd_config.d/00-hpcwizard.conf --else-block sshd_config", SSHD)
    assert ran.returncode == 0, ran.stderr
    assert (tmp_path / "sshd_config.d/00-hpcwizard.conf").exists() is expected
    assert ("# BEGIN hpcwizard" in (tmp_path / "sshd_config").read_text()) is not expected


def test_dropin_falls_back_to_a_block_at_the_top_and_validates_it(tmp_path: Path) -> None:
    main = tmp_path / "sshd_config"
    main.write_text("Port 22\n")
    before = tree(tmp_path)
    call = (f"hw_dropin sshd_config.d/00-hpcwizard.conf --else-block sshd_config "
            f"--include {INCLUDE} --validate 'grep -q \"^Port 2222\" sshd_config'")
    assert op(tmp_path, call, SSHD).returncode == 0
    assert main.read_text() == f"# BEGIN hpcwizard\n{SSHD}# END hpcwizard\nPort 22\n"
    assert not (tmp_path / "sshd_config.d").exists()
    assert op(tmp_path, call, mode="undo").returncode == 0
    assert tree(tmp_path) == before
    failing = call.replace("2222", "9999")
    ran = op(tmp_path, failing, SSHD)
    assert ran.returncode == 1 and "put back" in ran.stderr
    assert tree(tmp_path) == before


def test_settings_another_file_overrides_fail_naming_the_setting(tmp_path: Path) -> None:
    """--in-effect: what the program reports, not what the file says. A fake `sshd -T`
    that reports passwords on, as an earlier drop-in would make it."""
    (tmp_path / "sshd_config").write_text("Include sshd_config.d/*.conf\n")
    (tmp_path / "sshd_config.d").mkdir()
    effective = tmp_path / "effective"
    effective.write_text("port 2222\nport 22\npasswordauthentication yes\n"
                         "permitrootlogin without-password\n")
    before = tree(tmp_path)
    call = (f"hw_dropin sshd_config.d/00-hpcwizard.conf --else-block sshd_config "
            f"--include {INCLUDE} --in-effect 'cat {effective}'")
    ran = op(tmp_path, call, SSHD)
    assert ran.returncode == 1
    assert "passwordauthentication is 'yes' in effect, not 'no'" in ran.stderr
    assert "permitrootlogin" not in ran.stderr  # without-password is prohibit-password
    assert "port" not in ran.stderr.replace("passwordauthentication", "")  # 2222 is among them
    assert tree(tmp_path) == before
    effective.write_text("port 2222\npasswordauthentication no\npermitrootlogin prohibit-password\n")
    assert op(tmp_path, call, SSHD).returncode == 0


# --- kill -9 at every rename ----------------------------------------------------------------

def kill_9_once(marker: Path, call: str, contents: str, cwd: Path, env: Dict[str, str],
                what: str) -> None:
    """Run the call in a session of its own and SIGKILL all of it as soon as `marker`
    appears (the state it was to be stopped in), failing if it ends first or never gets there."""
    proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", f". {OPS}\n{call}"],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=str(cwd), env=env,
                            start_new_session=True, text=True)
    proc.stdin.write(contents)
    proc.stdin.close()
    deadline = time.monotonic() + 60
    while not marker.exists():  # poll for the state, bounded
        assert proc.poll() is None, f"{what}: it ended first"
        assert time.monotonic() < deadline, f"{what}: never reached"
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _mv_that_stops(bin_dir: Path, nth: int) -> Path:
    """A `mv` first on PATH that, on its nth call, says so and waits to be killed."""
    bin_dir.mkdir()
    real = shutil.which("mv")
    script = bin_dir / "mv"
    script.write_text(f"""#!/bin/bash
n=$(( $(cat {bin_dir}/count 2>/dev/null || echo 0) + 1 ))
echo $n > {bin_dir}/count
if [ "$n" = {nth} ]; then : > {bin_dir}/stopped; exec sleep 600; fi
exec {real} "$@"
""")
    script.chmod(0o755)
    return script


def _renames(tmp: Path, call: str, contents: str) -> int:
    """How many times the call runs mv, from a fresh copy of the tree."""
    probe = tmp / "probe"
    shutil.copytree(tmp / "tree", probe, symlinks=True)
    _mv_that_stops(tmp / "count-bin", 10 ** 6)
    env = {"PATH": f"{tmp / 'count-bin'}:{os.environ['PATH']}", "HW_STATE": str(tmp / "probe-state")}
    ran = op(probe, call, contents, env=env)
    assert ran.returncode == 0, ran.stderr
    return int((tmp / "count-bin/count").read_text())


@pytest.mark.parametrize("call,contents", [
    ("hw_file x.conf --validate 'grep -q 2222 x.conf'", SSHD),
    ("hw_block x.conf --validate 'grep -q 2222 x.conf'", SSHD),
])
def test_kill_9_at_every_rename_leaves_old_or_new_and_reapply_completes(
        tmp_path: Path, call: str, contents: str) -> None:
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree/x.conf").write_text("Port 22\n")
    renames = _renames(tmp_path, call, contents)
    assert renames >= 3
    for nth in range(1, renames + 1):
        case = tmp_path / f"kill-{nth}"
        work = case / "tree"
        shutil.copytree(tmp_path / "tree", work, symlinks=True)
        old = (work / "x.conf").read_bytes()
        bin_dir = case / "bin"
        _mv_that_stops(bin_dir, nth)
        env = dict(os.environ, HW_STATE=str(case / "state"), HW_MODE="run",
                   PATH=f"{bin_dir}:{os.environ['PATH']}")
        kill_9_once(bin_dir / "stopped", call, contents, work, env, f"rename {nth}")
        now = (work / "x.conf").read_bytes()
        new_text = op(work, call, contents, "diff", env={"HW_STATE": str(case / "state")})
        assert now == old or b"2222" in now, f"rename {nth}: half a file: {now!r}"
        # the next run completes; check agrees; nothing of ours is left beside the file
        again = op(work, call, contents, env={"HW_STATE": str(case / "state")})
        assert again.returncode == 0, f"rename {nth}: {again.stderr}"
        assert op(work, call, contents, "check",
                  env={"HW_STATE": str(case / "state")}).returncode == 0, f"rename {nth}"
        assert not [n for n in os.listdir(work) if n.startswith(".hpcwizard.")], nth
        assert new_text.returncode == 0
        # and undo brings back the file as it was before the first run
        assert op(work, call, mode="undo", env={"HW_STATE": str(case / "state")}).returncode == 0
        assert (work / "x.conf").read_bytes() == old, f"rename {nth}: undo"
        assert not [n for n in os.listdir(work) if n != "x.conf"], f"rename {nth}: {os.listdir(work)}"


def test_a_change_killed_before_its_validation_is_validated_by_the_next_run(tmp_path: Path) -> None:
    """Killed while validating: the new file is there, untested. check says not done, and
    the next run validates it — failing, it puts the old one back."""
    f = tmp_path / "x.conf"
    f.write_text("Port 22\n")
    gate = tmp_path / "gate"
    call = f"hw_file x.conf --validate ': > {gate}; sleep 600'"
    env = dict(os.environ, HW_STATE=str(tmp_path / "state"), HW_MODE="run")
    kill_9_once(gate, call, SSHD, tmp_path, env, "validation")
    assert f.read_text() == SSHD  # the new one, not yet validated
    assert op(tmp_path, "hw_file x.conf", SSHD, "check").returncode == 1
    failing = op(tmp_path, "hw_file x.conf --validate false", SSHD)
    assert failing.returncode == 1 and "put back" in failing.stderr
    assert f.read_text() == "Port 22\n"


def test_a_taken_port_names_who_holds_it(tmp_path: Path) -> None:
    """hw_sshd's refusal names the program, pid and user at each address (ss's report, here
    a stand-in `ss` first on PATH printing what iproute2's does for a Python listener)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    me = os.getpid()
    (bin_dir / "ss").write_text(
        "#!/bin/bash\n"
        f"echo 'LISTEN 0 5 0.0.0.0:2222 0.0.0.0:* users:((\"python3\",pid={me},fd=3))'\n")
    (bin_dir / "ss").chmod(0o755)
    ran = op(tmp_path, "port=2222\n_hw_port_holders",
             env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    import pwd

    user = pwd.getpwuid(os.getuid()).pw_name
    assert ran.stdout == f"0.0.0.0:2222: python3 (pid {me}, user {user})\n", ran.stderr


# --- hw_packages check: names as dpkg answers them -------------------------------------------

def _dpkg_names() -> "tuple[str, str, str]":
    """From this machine's dpkg database, read only: an installed package, a name only an
    installed package provides (virtual, as Debian 13's dnsutils), and one it provides with
    a version ('foo (= 1.2)', as a t64 library provides its old name)."""
    if not shutil.which("dpkg-query"):
        pytest.skip("no dpkg here")
    if subprocess.run(["dpkg", "--audit"], capture_output=True, text=True).stdout.strip():
        pytest.skip("dpkg has something half done here: the check rightly fails")
    rows = subprocess.run(["dpkg-query", "-W", "-f",
                           "${db:Status-Abbrev}\t${Package}\t${Provides}\n"],
                          capture_output=True, text=True).stdout.splitlines()
    installed = {r.split("\t")[1] for r in rows if r.startswith("ii")}
    plain, versioned = "", ""
    for row in rows:
        state, _name, provides = (row.split("\t") + ["", ""])[:3]
        if not state.startswith("ii"):
            continue
        for item in (p.strip() for p in provides.split(",") if p.strip()):
            name = item.split(" ", 1)[0]
            if name in installed:
                continue  # also a real installed package: not what this test needs
            if "(" in item and not versioned:
                versioned = name
            elif "(" not in item and not plain:
                plain = name
    if not (installed and plain and versioned):
        pytest.skip("this dpkg database has no virtual names to ask about")
    return sorted(installed)[0], plain, versioned


def test_packages_check_accepts_virtual_names_as_apt_installs_them(tmp_path: Path) -> None:
    """apt installs a virtual name through its one provider, so the check (run strict, as a
    step's text) must count a provided name as installed, plain or versioned; a name nobody
    has is missing, and diff says what would be installed."""
    real, plain, versioned = _dpkg_names()
    call = f"hw_packages apt {real} {plain} {versioned}"
    checked = op(tmp_path, call, mode="check")
    assert checked.returncode == 0, (call, checked.stderr)
    missing = f"hw_packages apt {real} hpcwizard-no-such-package"
    assert op(tmp_path, missing, mode="check").returncode == 1
    diffed = op(tmp_path, missing, mode="diff")
    assert diffed.stdout == f"install with apt: {real} hpcwizard-no-such-package\n", diffed.stderr
    assert not (tmp_path / "state").exists()  # check and diff write nothing


@pytest.mark.parametrize("when", ["run", "undo"])
def test_a_kept_copy_has_the_mode_of_the_file_it_copies(tmp_path: Path, when: str) -> None:
    """~/.ssh/config is 0600: the user's block kept beside it was 0644 (a copy of a
    temporary file), readable by every user. A kept file, whole or a block of it, has the
    mode and owner of the file it comes from."""
    os.umask(0o022)
    f = tmp_path / "config"
    f.write_text("# mine\n")
    f.chmod(0o600)
    block = "Host job-*\n    Port 2222\n"
    assert op(tmp_path, "hw_block config", block).returncode == 0
    f.write_text(f.read_text().replace("    Port 2222\n", "    Port 2222\n    User me\n"))
    done = op(tmp_path, "hw_block config", block if when == "run" else None, mode=when)
    assert done.returncode == 0 and "kept in" in done.stderr, done.stderr
    kept = tmp_path / "config.hpcwizard-kept"
    assert "User me" in kept.read_text()
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert kept.stat().st_uid == f.stat().st_uid

    g = tmp_path / "secret.conf"
    g.write_text("a\n")
    g.chmod(0o640)
    assert op(tmp_path, "hw_file secret.conf --mode 0640", "b\n").returncode == 0
    g.write_text("b\nmine\n")
    done = op(tmp_path, "hw_file secret.conf --mode 0640", "c\n" if when == "run" else None, mode=when)
    assert done.returncode == 0 and "kept in" in done.stderr, done.stderr
    assert stat.S_IMODE((tmp_path / "secret.conf.hpcwizard-kept").stat().st_mode) == 0o640


def test_packages_check_takes_alternatives_as_debian_does(tmp_path: Path) -> None:
    """a|b|c is there when any of them is installed or provided (systemd for Debian 13's
    sysusers), and missing only when none is."""
    real, plain, _versioned = _dpkg_names()
    for there in (f"'hpcwizard-no-such-package|{real}'", f"'hpcwizard-no-such-package|{plain}'"):
        checked = op(tmp_path, f"hw_packages apt {real} {there}", mode="check")
        assert checked.returncode == 0, (there, checked.stderr)
    none = "'hpcwizard-no-such-package|hpcwizard-no-such-either'"
    assert op(tmp_path, f"hw_packages apt {real} {none}", mode="check").returncode == 1
    diffed = op(tmp_path, f"hw_packages apt {real} {none}", mode="diff")
    assert diffed.stdout == (f"install with apt: {real} "
                             "hpcwizard-no-such-package|hpcwizard-no-such-either\n"), diffed.stderr


# --- odd files in the place of the one changed: refused before any temporary file ---------

def _temps(tmp: Path) -> list:
    """What an operation may leave behind: its work directories (TMPDIR) and its
    .hpcwizard.XXXXXX files anywhere under tmp."""
    return sorted(os.listdir(tmp / "tmpdir")) + sorted(
        str(p.relative_to(tmp)) for p in tmp.rglob(".hpcwizard.*"))


@pytest.mark.parametrize("call", ["hw_file .sshd_config --mode 0600",
                                  "hw_block .sshd_config",
                                  "hw_sshd_config --config .sshd_config"])
def test_a_directory_in_the_place_of_the_file_is_refused_and_leaves_nothing(
        tmp_path: Path, call: str) -> None:
    (tmp_path / "tmpdir").mkdir()
    (tmp_path / ".sshd_config").mkdir()
    (tmp_path / ".sshd_config" / "inside").write_text("x\n")
    before = tree(tmp_path)
    env = {"TMPDIR": str(tmp_path / "tmpdir")}
    ran = op(tmp_path, call, SSHD, env=env)
    assert ran.returncode == 1 and "is not a regular file (directory)" in ran.stderr, ran
    assert ran.stderr.startswith("hpcwizard: ") and "nothing was changed" in ran.stderr
    assert tree(tmp_path) == before and _temps(tmp_path) == []
    undone = op(tmp_path, call, mode="undo", env=env)
    assert undone.returncode == 0 and "nothing to take back" in undone.stderr, undone
    assert tree(tmp_path) == before and _temps(tmp_path) == []


@pytest.mark.parametrize("mode", ["check", "run", "diff"])
def test_a_huge_sparse_config_is_refused_up_front_in_one_line(tmp_path: Path, mode: str) -> None:
    """3 GB of holes: sed gave up after a minute with 'regex input buffer length larger
    than INT_MAX'; refused at once now, naming the bound."""
    (tmp_path / "tmpdir").mkdir()
    (tmp_path / ".ssh").mkdir()
    config = tmp_path / ".ssh" / "config"
    with open(config, "wb") as f:
        f.truncate(3 << 30)
    started = time.monotonic()
    ran = op(tmp_path, "hw_block .ssh/config", "Host *\n  Port 2222\n", mode=mode,
             env={"TMPDIR": str(tmp_path / "tmpdir")})
    assert time.monotonic() - started < 20  # it reads none of the 3 GB
    assert ran.returncode == 1, ran
    assert ran.stderr.strip().splitlines() == [
        f"hpcwizard: .ssh/config is {3 << 30} bytes, more than a configuration file "
        "hpcwizard reads (1048576 bytes): hpcwizard does not read or change it; nothing was "
        "changed"]
    assert config.stat().st_size == 3 << 30 and _temps(tmp_path) == []


@pytest.mark.parametrize("sig", ["TERM", "INT", "HUP"])
def test_a_signal_mid_operation_leaves_no_temporary_directory(tmp_path: Path, sig: str) -> None:
    """bash runs no EXIT trap for a signal it does not catch: the work directory stayed."""
    (tmp_path / "tmpdir").mkdir()
    # the validation's parent is the operation's own shell (hw_file runs in a subshell). INT
    # goes to both, as Ctrl-C does: bash waiting for a child that survives an INT takes the
    # child to have handled it (wait-and-cooperative-exit), and under load that decided the test
    also = " $v" if sig == "INT" else ""
    ran = op(tmp_path, f"hw_file x.conf --validate 'v=$BASHPID; kill -{sig} $(ps -o ppid= -p $v){also}'",
             SSHD,
             env={"TMPDIR": str(tmp_path / "tmpdir")})
    assert ran.returncode == 128 + getattr(signal, f"SIG{sig}"), ran
    assert os.listdir(tmp_path / "tmpdir") == []


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
@pytest.mark.parametrize("call", ["hw_file x.conf", "hw_block x.conf"])
def test_undo_of_a_refused_change_says_nothing_changed_and_succeeds(
        tmp_path: Path, call: str) -> None:
    """A link to another user's file is refused (nothing written, nothing remembered): its
    undo is no failure, and still touches nothing."""
    theirs = tmp_path / "theirs.conf"
    theirs.write_text("not yours\n")
    os.chown(theirs, 65534, 65534)
    (tmp_path / "x.conf").symlink_to(theirs)
    before = tree(tmp_path)
    ran = op(tmp_path, call, SSHD)
    assert ran.returncode == 1 and "changes no other user's file through a link" in ran.stderr
    undone = op(tmp_path, call, mode="undo")
    assert undone.returncode == 0, undone
    assert undone.stderr == "hpcwizard: x.conf: nothing to take back (hpcwizard did not change it)\n"
    assert tree(tmp_path) == before and state_left(tmp_path) == []
