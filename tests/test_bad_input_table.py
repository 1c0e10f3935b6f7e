"""Issue 6, bad input, table-driven: every input of the CLI (ports, user names, host names and
lists, hostfiles, patterns, URLs and sha256 values, sysroots, records, recipes, environment
variables) and every field of the TUI's Choose screen, fed values it must refuse.

CLI: exit status 2, exactly one line on stderr ("hpcwizard: ..." naming the problem), no
traceback, and nothing changed: /etc/ssh, ~/.ssh, /etc/hosts byte for byte, no state
directory, no file left in the working directory. TUI: the field shows one line naming the
problem and the wizard does not move on. Needs no root; changes nothing.
"""
from __future__ import annotations

import asyncio
import hashlib
import os
import stat
import subprocess
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from _core_fixtures import wizard_exe

MPI_TCP = ["--framework", "mpi", "--network", "tcp"]
MPI_IB = ["--framework", "mpi", "--network", "ib"]
APPLY = ["apply", *MPI_TCP, "--manual", "--yes"]
PLAN = ["plan", *MPI_TCP]
VERIFY = ["verify", *MPI_TCP]
SHA = "a" * 64
URL = "https://example.org/ucx-1.16.deb"

GOOD_RECORD = """schema = 1
tool = "hpcwizard 0.1.0"
status = "done"
log = "{tmp}/r.log"
[choices]
framework = "mpi"
network = "tcp"
[target]
user = "root"
uid = 0
home = "/root"
[[steps]]
id = "ssh/user-key"
status = "done"
as = "user"
run = "true"
undo = "true"
"""

# name -> (argv, extra environment, files to create {name: bytes}); {tmp} is the test's dir.
Case = Tuple[List[str], Dict[str, str], Dict[str, bytes]]
CASES: Dict[str, Case] = {
    # ports
    "port-0": (APPLY + ["--ssh-port", "0"], {}, {}),
    "port-65536": (APPLY + ["--ssh-port", "65536"], {}, {}),
    "port-negative": (PLAN + ["--ssh-port=-1"], {}, {}),
    "port-letters": (PLAN + ["--ssh-port", "ssh"], {}, {}),
    "port-float": (PLAN + ["--ssh-port", "22.5"], {}, {}),
    "port-exponent": (PLAN + ["--ssh-port", "1e3"], {}, {}),
    "port-quoted-dollar": (PLAN + ["--ssh-port", "$2222"], {}, {}),
    "port-shell": (APPLY + ["--ssh-port", "2222;touch {tmp}/pwned"], {}, {}),
    "port-empty": (PLAN + ["--ssh-port", ""], {}, {}),
    # user names
    "user-semicolon": (APPLY + ["--user", "a;b"], {}, {}),
    "user-capital": (PLAN + ["--user", "Root"], {}, {}),
    "user-space": (PLAN + ["--user", "bad user"], {}, {}),
    "user-subst": (APPLY + ["--user", "$(touch {tmp}/pwned)"], {}, {}),
    "user-too-long": (PLAN + ["--user", "u" * 33], {}, {}),
    "user-missing": (APPLY + ["--user", "nosuchuser-hpcw"], {}, {}),
    "user-dash": (PLAN + ["--user=-rf"], {}, {}),
    # ssh Host patterns (--peers)
    "peers-slash": (PLAN + ["--peers", "job/*"], {}, {}),
    "peers-space": (PLAN + ["--peers", "job-* node-*"], {}, {}),
    "peers-backtick": (APPLY + ["--peers", "`touch {tmp}/pwned`"], {}, {}),
    "peers-newline": (PLAN + ["--peers", "job-*\nMatch all"], {}, {}),
    "peers-empty": (PLAN + ["--peers", ""], {}, {}),
    # host names and lists (verify --hosts)
    "hosts-semicolon": (VERIFY + ["--hosts", "node1;touch {tmp}/pwned"], {}, {}),
    "hosts-twice": (VERIFY + ["--hosts", "node1,node1"], {}, {}),
    "hosts-underscore": (VERIFY + ["--hosts", "node_1"], {}, {}),
    "hosts-leading-dash": (VERIFY + ["--hosts", "-node1,node2"], {}, {}),
    "hosts-bracket": (VERIFY + ["--hosts", "node[1-"], {}, {}),
    "hosts-empty": (VERIFY + ["--hosts", ","], {}, {}),
    "hosts-label-too-long": (VERIFY + ["--hosts", "n" * 64], {}, {}),
    "hosts-and-hostfile": (VERIFY + ["--hosts", "a", "--hostfile", "{tmp}/hf"], {},
                           {"hf": b"a\n"}),
    # hostfiles
    "hostfile-missing": (VERIFY + ["--hostfile", "{tmp}/no-such-hostfile"], {}, {}),
    "hostfile-directory": (VERIFY + ["--hostfile", "{tmp}"], {}, {}),
    "hostfile-shell": (VERIFY + ["--hostfile", "{tmp}/hf"], {},
                       {"hf": b"node1 slots=1\n$(touch /tmp/pwned) slots=1\n"}),
    "hostfile-quote": (VERIFY + ["--hostfile", "{tmp}/hf"], {}, {"hf": b"node1\nnode'2 slots=1\n"}),
    "hostfile-empty": (VERIFY + ["--hostfile", "{tmp}/hf"], {}, {"hf": b"# nothing\n"}),
    "hostfile-binary": (VERIFY + ["--hostfile", "{tmp}/hf"], {}, {"hf": b"\x00\xff\xfe\n"}),
    # URLs and sha256 values
    "url-ftp": (["plan", *MPI_IB, "--ucx-url", "ftp://example.org/ucx.deb"], {}, {}),
    "url-quote": (["plan", *MPI_IB, "--ucx-url", "https://example.org/u'x.deb"], {}, {}),
    "url-space": (["plan", *MPI_IB, "--ucx-url", "https://example.org/u x.deb"], {}, {}),
    "url-not-package": (["plan", *MPI_IB, "--ucx-url", "https://example.org/ucx.tar.gz"], {}, {}),
    "url-subst": (["plan", *MPI_IB, "--ucx-url", "https://$(touch /tmp/pwned)/u.deb"], {}, {}),
    "sha-short": (["plan", *MPI_IB, "--ucx-url", URL, "--ucx-sha256", SHA[:63]], {}, {}),
    "sha-not-hex": (["plan", *MPI_IB, "--ucx-url", URL, "--ucx-sha256", "g" * 64], {}, {}),
    "sha-without-url": (["plan", *MPI_IB, "--ucx-sha256", SHA], {}, {}),
    # sysroots
    "sysroot-missing": (PLAN + ["--sysroot", "{tmp}/no-such-root"], {}, {}),
    "sysroot-file": (PLAN + ["--sysroot", "{tmp}/f"], {}, {"f": b"x"}),
    "sysroot-on-apply": (APPLY + ["--sysroot", "{tmp}"], {}, {}),
    # records
    "record-missing": (["undo", "{tmp}/no-such-record.toml", "--yes"], {}, {}),
    "record-not-toml": (["undo", "{tmp}/r.toml", "--yes"], {}, {"r.toml": b"this is [not toml\n"}),
    "record-binary": (["undo", "{tmp}/r.toml", "--yes"], {}, {"r.toml": b"\x89PNG\r\n\x1a\n\x00"}),
    "record-empty": (["replay", "{tmp}/r.toml", "--yes"], {}, {"r.toml": b""}),
    "record-truncated": (["undo", "{tmp}/r.toml", "--yes"], {},
                         {"r.toml": GOOD_RECORD.encode()[:200]}),
    "record-newer-schema": (["undo", "{tmp}/r.toml", "--yes"], {},
                            {"r.toml": GOOD_RECORD.replace("schema = 1", "schema = 99").encode()}),
    "record-no-schema": (["replay", "{tmp}/r.toml", "--yes"], {},
                         {"r.toml": GOOD_RECORD.replace("schema = 1\n", "").encode()}),
    "record-bad-choice": (["replay", "{tmp}/r.toml", "--yes"], {},
                          {"r.toml": GOOD_RECORD.replace('network = "tcp"',
                                                         'network = "tcp"\nssh_port = "22;id"')
                           .encode()}),
    "record-wrong-type": (["replay", "{tmp}/r.toml", "--yes"], {},
                          {"r.toml": GOOD_RECORD.replace('network = "tcp"',
                                                         'network = "tcp"\nuser = 5').encode()}),
    "record-directory": (["undo", "{tmp}", "--yes"], {}, {}),
    # commands and choices
    "no-command-no-terminal": ([], {}, {}),
    "unknown-command": (["bogus"], {}, {}),
    "framework-foo": (["apply", "--framework", "foo", "--network", "tcp", "--manual", "--yes"],
                      {}, {}),
    "network-missing": (["plan", "--framework", "mpi"], {}, {}),
    "host-keys-maybe": (PLAN + ["--host-keys", "maybe"], {}, {}),
    "export-format": (["export", *MPI_TCP, "--format", "rpm"], {}, {}),
    "export-into-missing-dir": (["export", *MPI_TCP, "--format", "setup", "-o",
                                 "{tmp}/no/such/dir/setup.sh"], {}, {}),
    "export-onto-directory": (["export", *MPI_TCP, "--format", "setup", "-o", "{tmp}"], {}, {}),
    "diagnose-missing": (["diagnose", "{tmp}/no-such.log"], {}, {}),
    # environment read at plan time
    "env-apt-lock-timeout": (PLAN, {"HPCWIZARD_APT_LOCK_TIMEOUT": "soon"}, {}),
    "env-apt-lock-timeout-shell": (APPLY, {"HPCWIZARD_APT_LOCK_TIMEOUT": "1;touch /tmp/pwned"}, {}),
}


def snapshot(*roots: Path) -> Dict[str, str]:
    """sha256 (and mode) of every file under roots; a file itself is one entry."""
    out: Dict[str, str] = {}

    def entry(p: Path) -> str:
        st = p.lstat()
        if not stat.S_ISREG(st.st_mode):
            return f"{stat.S_IFMT(st.st_mode):o}"
        try:
            digest = hashlib.sha256(p.read_bytes()).hexdigest()
        except PermissionError:  # not root: a private host key; its metadata
            digest = f"unreadable {st.st_size} {st.st_mtime_ns}"
        return f"{stat.S_IMODE(st.st_mode):04o} {digest}"

    for root in roots:
        if not root.exists():
            out[str(root)] = "absent"
        elif root.is_file():
            out[str(root)] = entry(root)
        else:
            for dirpath, _dirs, files in os.walk(root):
                out[dirpath] = "dir"
                for name in files:
                    out[str(Path(dirpath, name))] = entry(Path(dirpath, name))
    return out


ROOTS = (Path("/etc/ssh"), Path.home() / ".ssh", Path("/etc/hosts"), Path("/var/lib/hpcwizard"))


def test_the_table_has_at_least_40_inputs() -> None:
    assert len(CASES) + len(TUI_CASES) >= 40


@pytest.mark.parametrize("case", list(CASES))
def test_cli_bad_input(case: str, tmp_path: Path) -> None:
    argv, env, files = CASES[case]
    work = tmp_path / "work"
    work.mkdir()
    for name, body in files.items():
        (work / name).write_bytes(body.replace(b"{tmp}", str(work).encode()))
    argv = [a.replace("{tmp}", str(work)) for a in argv]
    state = tmp_path / "state"
    before = snapshot(*ROOTS)
    listing = sorted(os.listdir(work))
    full_env = dict(os.environ, HPCWIZARD_STATE_DIR=str(state), **env)
    proc = subprocess.run([wizard_exe(), *argv], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=60, cwd=str(work), env=full_env)
    shown = (f"\n$ hpcwizard {' '.join(map(repr, argv))}\n--- stdout:\n{proc.stdout}"
             f"\n--- stderr:\n{proc.stderr}")
    assert proc.returncode == 2, f"exit {proc.returncode}, expected 2{shown}"
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("hpcwizard: "), \
        f"stderr is not one 'hpcwizard: ...' line{shown}"
    assert len(lines[0]) > len("hpcwizard: ") + 10, f"the line names no problem{shown}"
    assert "Traceback" not in proc.stderr + proc.stdout, shown
    assert snapshot(*ROOTS) == before, f"bad input changed the system{shown}"
    assert not state.exists(), f"bad input wrote to the state directory{shown}"
    assert sorted(os.listdir(work)) == listing, f"bad input left files behind{shown}"
    assert not (work / "pwned").exists() and not Path("/tmp/pwned").exists(), shown


# --- recipes with errors: the shipped recipes, edited (in-process: the catalog is swapped) ---

BROKEN_RECIPES = {
    "not-toml": "id = \"ssh\"\ntitle = [oops\n",
    "unknown-placeholder": """id = "x"
title = "X"
why = "x"
frameworks = ["mpi"]
networks = ["tcp"]
[[steps]]
id = "s"
title = "S"
as = "root"
check = "true"
run = "echo {{no_such_value}}"
undo = "true"
""",
    "unknown-kind": """id = "x"
title = "X"
why = "x"
frameworks = ["mpi"]
networks = ["tcp"]
[[steps]]
id = "s"
title = "S"
as = "root"
kind = "symlink"
check = "true"
run = "true"
undo = "true"
""",
    "no-undo-no-note": """id = "x"
title = "X"
why = "x"
frameworks = ["mpi"]
networks = ["tcp"]
[[steps]]
id = "s"
title = "S"
as = "root"
check = "true"
run = "true"
""",
}


@pytest.mark.parametrize("case", list(BROKEN_RECIPES))
def test_recipe_errors_are_one_line(case: str, tmp_path: Path, monkeypatch, capsys) -> None:
    from hpcwizard import catalog, cli

    (tmp_path / "broken.toml").write_text(BROKEN_RECIPES[case])
    real = catalog._recipe_files
    monkeypatch.setattr(catalog, "_recipe_files",
                        lambda directory: [*real(directory), tmp_path / "broken.toml"])
    monkeypatch.setenv("HPCWIZARD_STATE_DIR", str(tmp_path / "state"))
    before = snapshot(*ROOTS)
    code = cli.main(["plan", *MPI_TCP])
    out, err = capsys.readouterr()
    assert code == 2, f"exit {code}\n{out}\n{err}"
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("hpcwizard: ") and "broken" in lines[0], err
    assert snapshot(*ROOTS) == before
    assert not (tmp_path / "state").exists()


# --- the TUI's fields ---------------------------------------------------------------------

TUI_CASES: Dict[str, Tuple[str, str, str]] = {  # field, typed value, words of the refusal
    "tui-port-0": ("ssh_port", "0", "out of range"),
    "tui-port-70000": ("ssh_port", "70000", "out of range"),
    "tui-port-letters": ("ssh_port", "22x", "not a number"),
    "tui-port-shell": ("ssh_port", "2;id", "not a number"),
    "tui-user-space": ("user", "Bad User", "is not valid"),
    "tui-user-shell": ("user", "x;touch /tmp/pwned", "is not valid"),
    "tui-user-subst": ("user", "$(touch /tmp/pwned)", "is not valid"),
    "tui-user-missing": ("user", "nosuchuser-hpcw", "does not exist"),
    "tui-peers-space": ("peers", "job-* x", "is not valid"),
    "tui-peers-backtick": ("peers", "`touch /tmp/pwned`", "is not valid"),
    "tui-peers-semicolon": ("peers", "job-*;id", "is not valid"),
}


@pytest.mark.parametrize("case", list(TUI_CASES))
def test_tui_field_refuses(case: str, tmp_path: Path) -> None:
    pytest.importorskip("textual")
    from textual.widgets import Input, Static

    from _tui_fixtures import FakeRunner, make_app, to_choose

    field, value, words = TUI_CASES[case]
    runner = FakeRunner()
    app = make_app(tmp_path, runner=runner)
    before = snapshot(*ROOTS)

    async def go() -> Tuple[str, str, Optional[object]]:
        async with app.run_test(size=(80, 24)) as pilot:
            await to_choose(pilot)
            widget = app.screen.query_one(f"#{field}", Input)
            widget.focus()
            await pilot.pause()
            await pilot.press("end", *["backspace"] * len(widget.value))
            await pilot.press(*value)
            await pilot.press("ctrl+n")
            await pilot.pause(0.1)
            hint = app.screen.query_one(f"#{field}-hint", Static)
            shown = hint.content if isinstance(hint.content, str) else str(hint.render())
            return type(app.screen).__name__, str(shown), app.plan

    screen, hint, plan = asyncio.run(go())
    assert screen == "ChooseScreen" and plan is None, f"{case}: the wizard moved on"
    assert words in hint and "\n" not in hint.strip(), f"{case}: the field says {hint!r}"
    assert not runner.calls, f"{case}: something ran or was checked"
    assert snapshot(*ROOTS) == before
    assert not (tmp_path / "state").exists()
    assert not Path("/tmp/pwned").exists()


# --- the Done screen's hosts field (verification) ------------------------------------------

DONE_HOSTS_CASES: Dict[str, Tuple[str, str]] = {  # typed value, words of the refusal
    "done-hosts-semicolon": ("node1;reboot", "hosts: host name 'node1;reboot' is not valid"),
    "done-hosts-subst": ("$(touch /tmp/pwned)", "is not valid"),
    "done-hosts-backtick": ("`touch /tmp/pwned`", "is not valid"),
    "done-hosts-option": ("-oProxyCommand=id", "is not valid"),
    "done-hosts-countdown": ("n{5..1}", "counts down"),
    "done-hosts-bracket": ("node[1-", "unmatched bracket"),
    "done-hosts-huge": ("x{0..4095}{0..4095}", "more than 4096 hosts"),
    "done-hosts-twice": ("node1,node1", "twice"),
}


@pytest.mark.parametrize("case", list(DONE_HOSTS_CASES))
def test_done_hosts_field_refuses(case: str, tmp_path: Path) -> None:
    """Typed into Done's hosts field and submitted: refused at the field in one line, no
    verification started (the fake System sees no new command), nothing written."""
    pytest.importorskip("textual")
    from textual.widgets import Input, Static

    from _tui_fixtures import make_app, run_until, text_of, wait_for
    from _verify_fixtures import FakeSystem

    value, words = DONE_HOSTS_CASES[case]
    system = FakeSystem({})
    app = make_app(tmp_path, verify_system=system)

    async def go() -> Tuple[int, str, str]:
        async with app.run_test(size=(80, 24)) as pilot:
            await run_until(pilot, "done")
            await pilot.press("n")
            await wait_for(pilot, lambda: type(app.screen).__name__ == "DoneScreen"
                           and app.screen.verify_state == "ended")
            calls = len(system.calls)
            app.screen.query_one("#verify-hosts", Input).focus()
            await pilot.press(*value, "enter")
            await pilot.pause(0.1)
            hint = app.screen.query_one("#verify-hint", Static)
            return len(system.calls) - calls, text_of(hint), str(hint.content.style)

    new_calls, hint, style = asyncio.run(go())
    assert new_calls == 0, f"{case}: a verification ran"
    assert words in hint and "\n" not in hint.strip(), f"{case}: the field says {hint!r}"
    assert style == "bold red"
    assert not Path("/tmp/pwned").exists()


# --- an older record still loads (a newer one is refused: tests/test_record.py) -------------

def test_an_older_record_without_the_newer_optional_fields_loads_and_undoes(tmp_path) -> None:
    """Schema 1 with only what every record had: no log path, no step titles or notes, no
    times, no facts or recommendation."""
    from hpcwizard.apply import undo_record
    from hpcwizard.record import Record

    path = tmp_path / "old.toml"
    path.write_text(GOOD_RECORD.replace('log = "{tmp}/r.log"\n', ""))
    record = Record.load(path)
    assert record.log_path == path.with_suffix(".log")

    class Runner:
        ran: List[str] = []

        def check(self, as_: str, text: str) -> bool:
            return False

        def run(self, as_: str, text: str, on_line) -> int:
            self.ran.append(text)
            return 0

    runner = Runner()
    assert undo_record(record, runner, lambda event: None) == "undone"
    assert runner.ran == ["true"]
    assert Record.load(path).steps[0]["status"] == "undone"
