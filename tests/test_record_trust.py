"""Issue 13, records: a record is code, so it is trusted only when provably ours.

Through the CLI (the installed console script; HPCWIZARD_STATE_DIR in the test's directory):
undo, replay and verify --record each refuse a record that is nested 5,000 deep, over the size
limit, /dev/zero, a FIFO (without hanging), of the wrong shape (`undo = 5`, [target] without
user, an unknown status), group-writable, or in a world-writable directory that is not sticky:
exit 2, one line "hpcwizard: ...", no traceback, nothing changed, nothing run, well within a
time-out. `apply --record FILE` onto anything that is there keeps it byte for byte; undo
through a symlinked record updates the real record and keeps the link; a record's first save
creates its file and never replaces one (nor a default name's: it moves on to a free one).

The records here are harmless (steps `as = "user"`, `run = "true"`, `undo = "touch
{tmp}/undone"`, choices with `mode = "preset"` so a replay that went through would change
nothing); `apply` runs in a Python process whose ShellRunner is a fake that only notes what
it was given. Needs no root; changes nothing outside the test's directory.
"""
from __future__ import annotations

import datetime
import os
import pwd
import stat
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from _core_fixtures import ROOT, facts, wizard_exe
from hpcwizard import record as record_mod
from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.compat import tomllib
from hpcwizard.inputs import RECORD_LIMIT
from hpcwizard.plan import build_plan
from hpcwizard.record import Record, RecordExists, new_record_path
from hpcwizard.validate import BadInput

TIMEOUT = 30  # seconds; each run takes about one
ME = pwd.getpwuid(os.geteuid())


def harmless(tmp: Path, status: str = "done", **step: str) -> str:
    """A record whose only step, undone, touches tmp/undone (as this user)."""
    fields = dict({"id": "test/marker", "status": status, "as": "user", "run": "true",
                   "undo": f"touch {tmp}/undone", "check": "false"}, **step)
    lines = "".join(f"{k} = {v}\n" if v.startswith(("[", "{")) or v.isdigit()
                    else f'{k} = "{v}"\n' for k, v in fields.items())
    return f"""schema = 1
tool = "hpcwizard 0.1.0"
status = "{status}"
log = "{tmp}/r.log"
[choices]
framework = "mpi"
network = "tcp"
mode = "preset"
[target]
user = "{ME.pw_name}"
uid = {ME.pw_uid}
home = "{ME.pw_dir}"
[[steps]]
{lines}"""


def run(tmp: Path, argv: List[str], python: str = "") -> Tuple[subprocess.CompletedProcess, float]:
    """The console script (or, python: this code then hpcwizard.cli.main) in tmp/work."""
    work = tmp / "work"
    work.mkdir(exist_ok=True)
    env = dict(os.environ, HPCWIZARD_STATE_DIR=str(tmp / "state"), LANG="C.UTF-8")
    env.pop("HOSTS", None)
    cmd = [wizard_exe(), *argv] if not python else [
        sys.executable, "-c", python + "\nfrom hpcwizard.cli import main\n"
        "sys.exit(main(sys.argv[1:]))", *argv]
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(work),
                          stdin=subprocess.DEVNULL, timeout=TIMEOUT)
    return proc, time.monotonic() - started


def tree(root: Path) -> Dict[str, Tuple[int, bytes]]:
    """Every path under root: its mode and, for a regular file, its bytes (a FIFO is never
    opened), for a link, where it points."""
    seen: Dict[str, Tuple[int, bytes]] = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            body = b""
            if stat.S_ISREG(st.st_mode):
                body = Path(p).read_bytes()
            elif stat.S_ISLNK(st.st_mode):
                body = os.readlink(p).encode()
            seen[p] = (st.st_mode, body)
    return seen


def one_line_refusal(proc: subprocess.CompletedProcess, seconds: float) -> str:
    shown = f"\nexit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    assert proc.returncode == 2, shown
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("hpcwizard: "), shown
    assert "Traceback" not in proc.stdout + proc.stderr, shown
    assert seconds < TIMEOUT / 2, f"took {seconds:.1f}s{shown}"
    return lines[0]


# --- undo, replay, verify --record refuse a record that is not provably ours or not sound ---

COMMANDS = {"undo": ["undo", "{r}", "--yes"], "replay": ["replay", "{r}", "--yes"],
            "verify": ["verify", "--record", "{r}", "--here"]}


def case_deep(tmp: Path) -> Tuple[Path, str]:
    r = tmp / "r.toml"
    r.write_text(harmless(tmp) + "deep = " + "[" * 5000 + "]" * 5000 + "\n")
    return r, "nested too deep"


def case_huge(tmp: Path) -> Tuple[Path, str]:
    r = tmp / "r.toml"
    text = harmless(tmp)
    r.write_text(text + "#" * (RECORD_LIMIT + 1 - len(text)) + "\n")
    return r, "is larger than 4 MiB"


def case_dev_zero(tmp: Path) -> Tuple[Path, str]:
    return Path("/dev/zero"), "is not a regular file (a character device)"


def case_fifo(tmp: Path) -> Tuple[Path, str]:
    r = tmp / "r.toml"
    os.mkfifo(r, 0o600)
    return r, "is not a regular file (a FIFO)"


def case_undo_5(tmp: Path) -> Tuple[Path, str]:
    r = tmp / "r.toml"
    r.write_text(harmless(tmp, undo="5"))
    return r, "step 1 (test/marker) undo is a number, not text"


def case_target_without_user(tmp: Path) -> Tuple[Path, str]:
    r = tmp / "r.toml"
    r.write_text(harmless(tmp).replace(f'user = "{ME.pw_name}"\n', ""))
    return r, "[target] has no user"


def case_unknown_status(tmp: Path) -> Tuple[Path, str]:
    r = tmp / "r.toml"
    r.write_text(harmless(tmp).replace('status = "done"\nas', 'status = "finished"\nas'))
    return r, "step 1 (test/marker) status is 'finished', not pending | running | done"


def case_group_writable(tmp: Path) -> Tuple[Path, str]:
    r = tmp / "r.toml"
    r.write_text(harmless(tmp))
    os.chmod(r, 0o620)
    return r, "can be changed by its group (mode 0620)"


def case_open_directory(tmp: Path) -> Tuple[Path, str]:
    d = tmp / "open"
    d.mkdir()
    os.chmod(d, 0o777)
    r = d / "r.toml"
    r.write_text(harmless(tmp))
    os.chmod(r, 0o600)
    return r, f"directory {d} can be changed by others (mode 0777, not sticky)"


CASES = {name[5:]: fn for name, fn in dict(globals()).items() if name.startswith("case_")}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_record_is_refused_in_one_line(case: str, command: str, tmp_path: Path) -> None:
    r, words = CASES[case](tmp_path)
    (tmp_path / "work").mkdir()
    before = tree(tmp_path)
    proc, seconds = run(tmp_path, [a.format(r=r) for a in COMMANDS[command]])
    line = one_line_refusal(proc, seconds)
    assert str(r) in line and words in line, line
    assert tree(tmp_path) == before, "a refused record changed something"
    assert not (tmp_path / "undone").exists(), "a refused record's undo ran"
    assert not (tmp_path / "state").exists(), "a refused record wrote to the state directory"
    assert os.listdir(tmp_path / "work") == []


# --- the same rules, in-process: every field named ------------------------------------------

FIELD_CASES = {
    "run-list": ({"run": "[]"}, "step 1 (test/marker) run is a list, not text"),
    "check-number": ({"check": "1"}, "step 1 (test/marker) check is a number, not text"),
    "title-table": ({"title": "{}"}, "step 1 (test/marker) title is a table, not text"),
    "note-number": ({"note": "15"}, "step 1 (test/marker) note is a number, not text"),
    "as-admin": ({"as": "admin"}, "step 1 (test/marker) as is 'admin', not root | user"),
    "id-empty": ({"id": ""}, "step 1 id is '', not non-empty text"),
}


@pytest.mark.parametrize("case", list(FIELD_CASES))
def test_every_step_field_is_of_its_kind(case: str, tmp_path: Path) -> None:
    step, words = FIELD_CASES[case]
    r = tmp_path / "r.toml"
    r.write_text(harmless(tmp_path, **step))
    with pytest.raises(BadInput) as exc:
        Record.load(r)
    assert words in str(exc.value) and str(r) in str(exc.value) and "\n" not in str(exc.value)


TARGET_CASES = {
    "user-not-a-name": (f'user = "{ME.pw_name}"', 'user = "Bad User"', "[target] user: user name"),
    "user-newline": (f'user = "{ME.pw_name}"', 'user = "root\\n"', "[target] user: user name"),
    "uid-text": (f"uid = {ME.pw_uid}\n", 'uid = "0"\n', "[target] uid is '0', not a user id"),
    "uid-bool": (f"uid = {ME.pw_uid}\n", "uid = true\n", "[target] uid is true/false"),
    "home-number": (f'home = "{ME.pw_dir}"', "home = 5", "[target] home is a number, not text"),
    "choices-text": ('[choices]\nframework = "mpi"\nnetwork = "tcp"\nmode = "preset"\n',
                     'choices = "mpi"\n', "incomplete"),
    "schema-bool": ("schema = 1", "schema = true", "no schema version"),
    "log-number": ('log = "', 'log = 5 # "', "record {r}: log is a number, not non-empty text"),
}


@pytest.mark.parametrize("case", list(TARGET_CASES))
def test_target_choices_and_header_are_of_their_kind(case: str, tmp_path: Path) -> None:
    old, new, words = TARGET_CASES[case]
    text = harmless(tmp_path)
    assert old in text
    r = tmp_path / "r.toml"
    r.write_text(text.replace(old, new, 1))
    with pytest.raises(BadInput) as exc:
        Record.load(r)
    words = words.format(r=r)
    assert words in str(exc.value) and str(r) in str(exc.value) and "\n" not in str(exc.value)


def test_a_record_of_another_user_names_its_owner_and_what_to_do(tmp_path: Path,
                                                                 monkeypatch) -> None:
    r = tmp_path / "r.toml"
    r.write_text(harmless(tmp_path))
    monkeypatch.setattr(os, "geteuid", lambda: ME.pw_uid + 1)  # someone else runs hpcwizard
    with pytest.raises(BadInput) as exc:
        Record.load(r, use="undo")
    msg = str(exc.value)
    assert f"record {r} is owned by {ME.pw_name} (uid {ME.pw_uid}), not by you" in msg, msg
    assert f"run 'hpcwizard undo {r}' as {ME.pw_name}" in msg and "\n" not in msg


def test_the_harmless_record_itself_loads(tmp_path: Path) -> None:
    """The refusals above are about what each case changed, not about the record."""
    r = tmp_path / "r.toml"
    r.write_text(harmless(tmp_path))
    rec = Record.load(r)
    assert rec.steps[0].step.undo == f"touch {tmp_path}/undone" and rec.path == r


# --- apply --record never writes over anything -------------------------------------------

# apply in a process whose runner only notes what it was given: nothing of the plan runs
FAKE_RUNNER = """import sys
import hpcwizard.apply as apply
RAN = {ran!r}
class Fake:  # each step: its check fails, it runs, then its check passes
    def __init__(self, *a, **k): self.ran = False
    def via_sudo(self, as_): return False  # run as root here
    def check(self, as_, text):
        ran, self.ran = self.ran, False
        return ran
    def run(self, as_, text, on_line):
        with open(RAN, "a") as fh: fh.write(text + "\\n")
        self.ran = True
        return 0
apply.ShellRunner = Fake
"""
APPLY = ["apply", "--framework", "mpi", "--network", "tcp", "--manual", "--yes", "--record"]


def existing_notes(tmp: Path) -> Path:
    p = tmp / "notes.txt"
    p.write_bytes(b"my notes\x00\xff keep me\n")
    os.chmod(p, 0o640)
    return p


def earlier_record(tmp: Path) -> Path:
    p = tmp / "earlier.toml"
    p.write_text(harmless(tmp))
    os.chmod(p, 0o600)
    return p


def dangling_link(tmp: Path) -> Path:
    p = tmp / "link.toml"
    os.symlink(tmp / "elsewhere.toml", p)
    return p


def existing_log(tmp: Path) -> Path:
    (tmp / "new.log").write_text("someone's log\n")
    return tmp / "new.toml"


@pytest.mark.parametrize("make", [existing_notes, earlier_record, dangling_link, existing_log],
                         ids=["notes.txt", "earlier-record", "dangling-symlink", "its-log"])
def test_apply_record_onto_an_existing_file_is_refused(make, tmp_path: Path) -> None:
    target = make(tmp_path)
    (tmp_path / "work").mkdir()
    before = tree(tmp_path)
    proc, seconds = run(tmp_path, [*APPLY, str(target)],
                        python=FAKE_RUNNER.format(ran=str(tmp_path / "ran")))
    line = one_line_refusal(proc, seconds)
    assert "already exists" in line and "never writes a record over a file" in line, line
    assert tree(tmp_path) == before, "apply --record changed a file that was there"
    assert not (tmp_path / "ran").exists() and not (tmp_path / "state").exists()


def test_apply_record_into_a_directory_others_can_change_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "open"
    d.mkdir()
    os.chmod(d, 0o777)
    proc, seconds = run(tmp_path, [*APPLY, str(d / "r.toml")],
                        python=FAKE_RUNNER.format(ran=str(tmp_path / "ran")))
    line = one_line_refusal(proc, seconds)
    assert f"directory {d} can be changed by others" in line, line
    assert os.listdir(d) == [] and not (tmp_path / "ran").exists()


def test_apply_record_to_a_new_path_runs(tmp_path: Path) -> None:
    """The same command onto a free path: the fake runner runs every step, the record is
    written 0600 (so the refusals above come from the path that was there)."""
    path = tmp_path / "new.toml"
    proc, _ = run(tmp_path, [*APPLY, str(path)],
                  python=FAKE_RUNNER.format(ran=str(tmp_path / "ran")))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "ran").read_text().strip()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert tomllib.loads(path.read_text())["status"] == "done"


# --- undo through a symlink: the real record is updated, the link stays ------------------

def test_undo_through_a_symlink_updates_the_real_record_and_keeps_the_link(
        tmp_path: Path) -> None:
    real_dir = tmp_path / "records"
    real_dir.mkdir(mode=0o700)
    real = real_dir / "r.toml"
    real.write_text(harmless(tmp_path))
    link = tmp_path / "latest.toml"
    os.symlink(real, link)

    proc, _ = run(tmp_path, ["undo", str(link), "--yes"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "undone").exists(), "the undo did not run"
    assert os.path.islink(link) and os.readlink(link) == str(real), "the link was replaced"
    assert tomllib.loads(real.read_text())["steps"][0]["status"] == "undone"
    assert sorted(os.listdir(real_dir)) == ["r.toml"]  # no temporary file left

    (tmp_path / "undone").unlink()
    proc, _ = run(tmp_path, ["undo", str(link), "--yes"])
    assert proc.returncode == 0 and "nothing to undo" in proc.stdout, proc.stdout + proc.stderr
    assert not (tmp_path / "undone").exists(), "a second undo ran the step again"


# --- the first save creates the file, never replaces one -----------------------------------

def _plan():
    f = facts("debian12", ROOT)
    return build_plan(f, make_choices(), load_catalog()), f


@pytest.mark.parametrize("appears", ["file", "symlink"])
def test_the_first_save_never_replaces_what_appeared_at_the_path(appears: str,
                                                                 tmp_path: Path) -> None:
    plan, f = _plan()
    path = new_record_path(tmp_path / "r.toml")  # free when checked
    rec = Record.new(plan, f, path)
    if appears == "file":  # ... and then taken before the first save
        path.write_bytes(b"appeared meanwhile\n")
    else:
        os.symlink(tmp_path / "target-of-link", path)
    before = tree(tmp_path)
    with pytest.raises(RecordExists) as exc:
        rec.save()
    assert str(path) in str(exc.value) and "\n" not in str(exc.value)
    assert tree(tmp_path) == before
    assert not (tmp_path / "target-of-link").exists()
    rec_later = Record.new(plan, f, tmp_path / "other.toml")
    rec_later.save()
    rec_later.save()  # later saves of its own record replace it
    assert rec_later.path.exists() and not os.path.islink(rec_later.path)


def test_a_new_record_does_not_append_to_a_log_that_appeared(tmp_path: Path) -> None:
    plan, f = _plan()
    rec = Record.new(plan, f, tmp_path / "r.toml")
    rec.save()
    rec.log_path.write_text("not ours\n")
    rec.log("a line")
    assert rec.log_path.read_text() == "not ours\n" and rec.log_error


def test_default_names_in_the_same_second_do_not_collide(tmp_path: Path, monkeypatch) -> None:
    class Frozen(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=tz)

    monkeypatch.setattr(record_mod, "_dt", types.SimpleNamespace(
        datetime=Frozen, timezone=datetime.timezone))
    plan, f = _plan()
    first = Record.new(plan, f, base=tmp_path)
    taken = first.path  # another run takes the name between this one's choice and its save
    taken.parent.mkdir(parents=True)
    taken.write_bytes(b"another run's\n")
    first.save()
    second = Record.new(plan, f, base=tmp_path)  # a run in the same second
    second.save()
    stem = "20240506-070809-mpi-tcp"
    assert taken.name == f"{stem}.toml" and taken.read_bytes() == b"another run's\n"
    assert (first.path.name, second.path.name) == (f"{stem}-2.toml", f"{stem}-3.toml")
    assert sorted(os.listdir(tmp_path / "records")) == sorted(
        [f"{stem}.toml", f"{stem}-2.toml", f"{stem}-3.toml"])
    for rec in (first, second):
        assert rec.data["log"] == str(rec.path.with_suffix(".log"))
        assert Record.load(rec.path).data["log"] == rec.data["log"]
