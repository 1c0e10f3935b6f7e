"""sudo told apart (root, nopasswd, password, denied, none) on the real texts sudo gave
(tests/fixtures/sudo/answers.json, captured by sudo_capture.py beside it), what each kind is
told, the password asked once before a run, and a uid without a passwd entry."""
from __future__ import annotations

import dataclasses
import json
import os
import pwd
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from hpcwizard import session
from hpcwizard.commands import configure
from hpcwizard.apply import ShellRunner
from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.detect import user as user_probe
from hpcwizard.detect.base import Context, Found
from hpcwizard.detect.run import Result
from hpcwizard.detect.summary import format_summary
from hpcwizard.facts import SUDO_MODES, Facts, UserInfo
from hpcwizard.plan import build_plan
from hpcwizard.validate import BadInput

from _core_fixtures import facts

ANSWERS = json.loads((Path(__file__).parent / "fixtures" / "sudo" / "answers.json").read_text())
CASES = ANSWERS["cases"]
CATALOG = load_catalog()


def result(case: str, command: str) -> Optional[Result]:
    a = CASES[case]["answers"].get(command)
    if a is None:
        return None
    return Result(tuple(command.split()), a["rc"], a["stdout"], a["stderr"])


class FakeSudo(Context):
    """A Context whose `sudo` answers as the captured case did; records what was asked."""

    def __init__(self, case: Optional[str]) -> None:
        super().__init__(sysroot="/", run_commands=True)
        self.case = case
        self.asked: List[str] = []

    def run(self, argv, timeout=None):  # type: ignore[override]
        self.asked.append(" ".join(argv))
        return None if self.case is None else result(self.case, " ".join(argv))


def alice(sudo: str, **kw) -> UserInfo:
    return UserInfo(name="alice", uid=1000, gid=1000, home="/home/alice", sudo=sudo, **kw)


# --- the parsers, on the captured texts --------------------------------------------------------

def test_the_fixture_holds_every_case_with_its_real_texts():
    assert set(CASES) >= {"not_in_sudoers", "password", "nopasswd", "limited_nopasswd",
                          "limited_password", "no_new_privs", "no_passwd_entry", "group_sudo"}
    assert "may not run sudo" in result("not_in_sudoers", "sudo -n -v").stderr
    # the trap this issue is about: to a user not in sudoers, `sudo -n true` says this too
    assert "a password is required" in result("not_in_sudoers", "sudo -n true").stderr


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_captured_case_is_classified_as_its_kind(case):
    kind = user_probe.classify_sudo(result(case, "sudo -n true"), result(case, "sudo -n -v"))
    assert kind == CASES[case]["kind"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_probe_asks_in_order_and_finds_the_kind(case, monkeypatch):
    monkeypatch.setattr(user_probe.os, "getuid", lambda: 4321)
    ctx = FakeSudo(case)
    kind, why = user_probe.sudo_kind(ctx)
    assert kind == CASES[case]["kind"]
    assert ctx.asked[0] == "sudo -n -v"
    # -v decides alone only for "denied": after "password" `true` is still asked (one more
    # mail to root under mail_badpass), since -v wants a password unless every rule is
    # NOPASSWD while `true` may run without one
    said = user_probe.read_sudo(result(case, "sudo -n -v"))
    assert ("sudo -n true" in ctx.asked) == (said != "denied")
    assert bool(why) == (kind == "denied")


def test_nopasswd_for_a_shell_wins_over_a_password_that_v_wants():
    """Group sudo (a password) plus cloud-init's 90-cloud-init-users (NOPASSWD:ALL): -v wants
    a password (sudoers' verifypw=all: every rule must be NOPASSWD), `sudo -n true` runs."""
    from hpcwizard.detect.run import Result

    wants = Result(("sudo", "-n", "-v"), 1, "", "sudo: a password is required\n")
    runs = Result(("sudo", "-n", "true"), 0, "", "")
    assert user_probe.classify_sudo(runs, wants) == "nopasswd"
    refused = Result(("sudo", "-n", "true"), 1, "", "sudo: a password is required\n")
    assert user_probe.classify_sudo(refused, wants) == "password"


def test_the_reason_for_denied_is_in_sudo_s_words_or_says_what_it_means(monkeypatch):
    assert user_probe.sudo_kind(FakeSudo("not_in_sudoers"))[1].startswith("Sorry, user ")
    assert "no new privileges" in user_probe.sudo_kind(FakeSudo("no_new_privs"))[1]
    # -v passes but `true` wants a password: that text would mislead, so it is not given
    why = user_probe.sudo_kind(FakeSudo("limited_nopasswd"))[1]
    assert "password" not in why and "some other commands only" in why


@pytest.mark.parametrize("case, command, said", [
    ("not_in_sudoers", "after password: sudo -S true", "denied"),  # "is not in the sudoers file"
    ("limited_password", "after password: sudo -S true", "denied"),  # "is not allowed to execute"
    ("not_in_sudoers", "after password: sudo -S -v", "denied"),
    ("password", "after password: sudo -S -l bash", "ok"),
    ("no_passwd_entry", "sudo -n -v", "denied"),
    ("no_new_privs", "sudo -n true", "other"),
])
def test_read_sudo_on_the_texts_after_a_password(case, command, said):
    assert user_probe.read_sudo(result(case, command)) == said


def test_no_sudo_program_is_none_and_asks_nothing_more():
    ctx = FakeSudo(None)
    assert user_probe.sudo_kind(ctx) == ("none", "")
    assert ctx.asked == ["sudo -n -v"]
    assert user_probe.classify_sudo(None) == "none"


def test_the_probe_notes_denied_with_sudo_s_words(monkeypatch):
    monkeypatch.setattr(user_probe.os, "getuid", lambda: 4321)
    monkeypatch.setattr(user_probe.pwd, "getpwuid",
                        lambda uid: pwd.struct_passwd(("ana", "x", uid, uid, "", "/home/ana", "/bin/sh")))
    found = Found()
    user_probe.probe(FakeSudo("not_in_sudoers"), found)
    assert found.values["user"].sudo == "denied" and found.values["user"].in_passwd
    assert any("runs nothing as root for ana" in n and "may not run sudo" in n
               for n in found.notes), found.notes


# --- a uid without a passwd entry --------------------------------------------------------------

def no_entry(uid):
    raise KeyError(f"getpwuid(): uid not found: {uid}")


def test_a_uid_without_passwd_entry_is_detected_and_named(monkeypatch):
    monkeypatch.setattr(user_probe.os, "getuid", lambda: 12345)
    monkeypatch.setattr(user_probe.pwd, "getpwuid", no_entry)
    monkeypatch.setenv("USER", "root")  # an image's ENV USER=root: another user's name
    monkeypatch.delenv("LOGNAME", raising=False)
    found = Found()
    user_probe.probe(FakeSudo("no_passwd_entry"), found)
    u = found.values["user"]
    assert (u.uid, u.in_passwd, u.sudo, u.name) == (12345, False, "denied", "unknown")
    assert any("no entry in /etc/passwd" in n for n in found.notes)
    # the sudo note would repeat what that one says
    assert not any("runs nothing as root" in n for n in found.notes)
    text = format_summary(Facts(user=u))
    assert "uid 12345 has no passwd entry" in text


def test_fallback_name_keeps_a_name_nobody_else_has(monkeypatch):
    monkeypatch.setenv("USER", "builder")
    monkeypatch.setattr(user_probe.pwd, "getpwnam", lambda name: no_entry(name))
    assert user_probe.fallback_name(12345) == "builder"


def test_steps_for_this_nameless_user_run_directly_not_through_sudo(monkeypatch):
    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    monkeypatch.setattr(os, "geteuid", lambda: 12345)
    monkeypatch.delenv("USER", raising=False)
    monkeypatch.delenv("LOGNAME", raising=False)
    runner = ShellRunner("unknown", uid=12345, library="")
    assert runner.argv("user", "true")[0] == "bash"  # was: sudo -n -u unknown (refused)
    assert not runner.via_sudo("user")
    assert runner.via_sudo("root")
    assert ShellRunner("bob", uid=12345, library="").via_sudo("user")


class Checks:
    """A runner whose checks pass or fail as told, and which must run nothing else."""

    def __init__(self, passing=()):
        self.passing = set(passing)
        self.checked: List[str] = []

    def via_sudo(self, as_):
        return as_ == "root"

    def check(self, as_, text):
        self.checked.append(text)
        return text in self.passing


@pytest.mark.parametrize("pending, refused", [
    ([("root", "test -e /x", "packages/install")], True),
    ([("user", "test -e /y", "ssh/user-key")], True),  # ssh-keygen: "No user exists for uid"
    ([("user", "test -e /z", "launch/env")], False),  # a plain file of this user's own
    ([("root", "", "packages/install")], True),  # an undo: no check can spare it
])
def test_no_passwd_entry_refuses_before_anything_runs(monkeypatch, pending, refused):
    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    monkeypatch.setattr(os, "geteuid", lambda: 12345)
    if not refused:
        session.refuse_without_passwd_entry(Checks(), pending)
        return
    with pytest.raises(BadInput) as exc:
        session.refuse_without_passwd_entry(Checks(), pending)
    line = str(exc.value)
    assert "user id 12345 has no entry in /etc/passwd" in line and "\n" not in line
    assert "nothing was changed" in line


def test_no_passwd_entry_lets_a_configured_machine_through(monkeypatch):
    """A re-apply where every step's check passes needs no sudo and no ssh-keygen."""
    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    monkeypatch.setattr(os, "geteuid", lambda: 12345)
    runner = Checks(passing={"test -e /x", "test -e /y"})
    session.refuse_without_passwd_entry(runner, [("root", "test -e /x", "ssh/sshd-port"),
                                              ("user", "test -e /y", "ssh/user-key")])
    assert runner.checked == ["test -e /x", "test -e /y"]


def test_a_named_user_is_never_refused_for_its_passwd_entry(monkeypatch):
    me = pwd.getpwuid(os.geteuid())
    monkeypatch.setattr(os, "geteuid", lambda: 4321)
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: me)
    session.refuse_without_passwd_entry(Checks(), [("root", "", "packages/install")])


def test_the_plan_of_a_nameless_uid_recommends_the_preset_and_says_why():
    u = UserInfo(name="unknown", uid=12345, gid=12345, home="/tmp/h", sudo="denied",
                 in_passwd=False)
    plan = build_plan(facts("debian12", u), make_choices(), CATALOG)
    rec = plan.recommendation
    assert rec.path == "preset", rec
    assert "User id 12345 has no entry in /etc/passwd" in rec.reasons[0]


# --- what each kind is told --------------------------------------------------------------------

def reasons(sudo: str, **kw) -> List[str]:
    return list(build_plan(facts("debian12", alice(sudo, **kw)), make_choices(), CATALOG)
                .recommendation.reasons)


def test_denied_gets_the_same_way_out_as_no_sudo_and_says_which():
    for sudo in ("denied", "none"):
        plan = build_plan(facts("debian12", alice(sudo)), make_choices(), CATALOG)
        assert plan.needs_root
        assert plan.recommendation.path == "preset", sudo
    denied = reasons("denied")
    assert "not in the sudoers file" in denied[0] and "administrator" in denied[0]
    assert not any("You have sudo" in r for r in denied)


def test_only_sudo_kinds_that_work_say_you_have_sudo():
    said: Dict[str, List[str]] = {k: reasons(k) for k in ("nopasswd", "password", "denied", "none")}
    assert any(r.startswith("You have sudo without a password") for r in said["nopasswd"])
    assert any(r.startswith("You have sudo: hpcwizard asks for your password once")
               for r in said["password"])
    for kind in ("denied", "none"):
        assert not any("You have sudo" in r for r in said[kind]), kind


@pytest.mark.parametrize("kind, words", [
    ("denied", "sudo is here but runs nothing as root for you"),
    ("none", "no sudo: cannot change the system"),
    ("password", "sudo with password"),
    ("nopasswd", "sudo without password"),
])
def test_the_summary_tells_each_kind(kind, words):
    line = next(l for l in format_summary(Facts(user=alice(kind))).splitlines()
                if l.strip().startswith("Privileges"))
    assert words in line


def test_the_system_screen_names_every_kind():
    pytest.importorskip("textual")
    from hpcwizard.screens.system import SUDO

    assert set(SUDO) == set(SUDO_MODES)


# --- the password, once, before the run ----------------------------------------------------------

def fake_sudo(tmp_path: Path, monkeypatch, validate_rc: int = 0, list_rc: int = 0) -> Path:
    """A `sudo` first on PATH that logs its arguments and answers -v and -l as told."""
    log = tmp_path / "sudo.log"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sudo").write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {log}\n'
        f'case "$*" in "-S -p  -v")\n'
        f'  read -r pw; echo "stdin: $pw" >> {log}; exit {validate_rc};;\n'
        f'  "-n -l bash") exit {list_rc};; esac\n'
        "exit 99\n")
    (bin_dir / "sudo").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    # hpcwizard reads the password itself (on /dev/tty, which a test has not): typed here
    import getpass
    monkeypatch.setattr(getpass, "getpass", lambda prompt="": "secret")
    return log


def test_no_terminal_refuses_before_sudo_is_asked(tmp_path, monkeypatch):
    log = fake_sudo(tmp_path, monkeypatch)
    monkeypatch.setattr("hpcwizard.commands.configure._has_terminal", lambda: False)
    with pytest.raises(BadInput) as exc:
        configure._sudo_once(True, "password")
    assert "no terminal" in str(exc.value) and "nothing was changed" in str(exc.value)
    assert not log.exists()


def test_the_password_is_asked_once_then_bash_is_checked(tmp_path, monkeypatch):
    log = fake_sudo(tmp_path, monkeypatch)
    monkeypatch.setattr("hpcwizard.commands.configure._has_terminal", lambda: True)
    configure._sudo_once(True, "password")
    # the password on sudo's stdin, never on its command line
    assert log.read_text().splitlines() == ["-S -p  -v", "stdin: secret", "-n -l bash"]


def test_a_password_that_opens_no_shell_is_refused(tmp_path, monkeypatch):
    fake_sudo(tmp_path, monkeypatch, list_rc=1)
    monkeypatch.setattr("hpcwizard.commands.configure._has_terminal", lambda: True)
    with pytest.raises(BadInput) as exc:
        configure._sudo_once(True, "password")
    assert "does not let you run bash as root" in str(exc.value)


def test_a_wrong_password_is_refused(tmp_path, monkeypatch):
    fake_sudo(tmp_path, monkeypatch, validate_rc=1)
    monkeypatch.setattr("hpcwizard.commands.configure._has_terminal", lambda: True)
    with pytest.raises(BadInput) as exc:
        configure._sudo_once(True, "password")
    assert "did not accept the password" in str(exc.value)


@pytest.mark.parametrize("needs_root, sudo", [(False, "password"), (True, "nopasswd"),
                                              (True, "root"), (True, "denied")])
def test_sudo_is_not_asked_when_there_is_nothing_to_ask(tmp_path, monkeypatch, needs_root, sudo):
    log = fake_sudo(tmp_path, monkeypatch)
    monkeypatch.setattr("hpcwizard.commands.configure._has_terminal", lambda: False)
    configure._sudo_once(needs_root, sudo)
    assert not log.exists()


def test_has_terminal_is_false_without_a_controlling_terminal():
    import subprocess
    import sys

    # a new session has no controlling terminal, whatever this one has
    proc = subprocess.run([sys.executable, "-c", "from hpcwizard.commands import configure; "
                           "print(configure._has_terminal())"], capture_output=True, text=True,
                          start_new_session=True, stdin=subprocess.DEVNULL)
    assert proc.stdout.strip() == "False", proc.stderr


def test_facts_keep_the_new_user_field_through_json():
    f = Facts(user=alice("denied", in_passwd=False))
    assert Facts.from_dict(json.loads(json.dumps(f.to_dict()))) == f
    # an older record's facts, without the field, read as "has an entry"
    data = f.to_dict()
    del data["user"]["in_passwd"]
    assert Facts.from_dict(data).user.in_passwd is True
    assert dataclasses.replace(f.user, in_passwd=True).in_passwd


def test_current_user_survives_a_hanging_sudo(monkeypatch):
    """undo asks who runs it; a sudo that hangs leaves the kind unknown, not a traceback."""
    from hpcwizard.detect.run import CommandTimeout

    def hangs(ctx):
        raise CommandTimeout(["sudo", "-n", "-v"], 5.0)

    monkeypatch.setattr(user_probe.os, "getuid", lambda: 4321)
    monkeypatch.setattr(user_probe, "sudo_kind", hangs)
    u = user_probe.current_user()
    assert (u.uid, u.sudo) == (4321, "unknown")
