"""One run of a plan on this machine, the one way both front ends go through (harlequin's
`query.py` lesson): the command line and the wizard only draw its events and collect answers.

A session holds, in this order:
  1. the checks before anything runs (a uid without a passwd entry; the sudo password, asked
     once, and whether sudo then lets bash run as root);
  2. the lock (machine-wide when any step runs as root), then the record: a second hpcwizard
     stops at the lock having written nothing;
  3. apply, or after a failure retry / skip / undo, each under the lock again;
  4. the exit status.
Exports are here too (`write_export`): every file a format needs, one mode policy, and never
a file replaced without the caller saying so (`force`, after the user confirmed)."""
from __future__ import annotations

import contextlib
import os
import dataclasses
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterable, List, Optional, Sequence

from . import proc
from .apply import (UNDO_STATUSES, RunFinished, StepFinished, apply_record, skip_stopped_step,
                    undo_record)
from .exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from .export import render_export
from .i18n import _
from .image import companion_files
from .lock import run_lock
from .record import Record, check_state_dir, unfinished_records, write_private
from .validate import BadInput

if TYPE_CHECKING:
    from .apply import Runner
    from .facts import Facts, UserInfo
    from .plan import Plan

RESUMES = ("retry", "skip", "undo")


# --- before anything runs --------------------------------------------------------------------

def refuse_without_passwd_entry(runner: Runner, pending: "Iterable[tuple[str, str, str]]") -> None:
    """A uid without a passwd entry (docker run --user 12345) cannot use sudo ("you do not
    exist in the passwd database"), nor ssh-keygen ("No user exists for uid 12345") or sshd.
    pending: (as, check, id) of the steps about to run. Those that go through sudo or set up
    SSH, and whose check does not already pass (a configured machine needs neither), are
    refused now, before anything runs, rather than failing in the middle."""
    import pwd

    uid = os.geteuid()
    if uid == 0:
        return
    try:
        pwd.getpwuid(uid)
        return
    except KeyError:
        pass
    if any((runner.via_sudo(as_) or step_id.startswith("ssh/"))
           and not (check and runner.check(as_, check)) for as_, check, step_id in pending):
        raise BadInput(_("user id {uid} has no entry in /etc/passwd, and sudo, ssh-keygen and "
                         "sshd refuse such a user, so these steps cannot run: start the "
                         "container as root or as a named user, or add a passwd entry for uid "
                         "{uid}; nothing was changed").format(uid=uid))


def no_sudo_here(user: UserInfo) -> str:
    """Why a step that goes through sudo cannot run for this user, or "": not root, and
    sudo missing ("none") or running nothing as root ("denied"). The run would stop at the
    first such step; both front ends say so before it (Review, `apply`), and refuse it."""
    if user.sudo not in ("none", "denied"):
        return ""
    return _("You are {user}, not root, and {why}: the steps marked (root) cannot run for "
             "you, so a run would stop at the first of them. Run hpcwizard as root, or use "
             "the preset image.").format(
        user=user.name, why=_("there is no sudo here") if user.sudo == "none"
        else _("sudo here runs nothing as root for you"))


SUDO_TIMEOUT = 30.0


def open_sudo(password: str) -> bool:
    """Whether sudo accepted password (`sudo -S -v`, the password on its stdin): the
    credentials each step's `sudo -n` then finds. hpcwizard reads the password itself
    (ask_sudo_password): sudo never reads our terminal."""
    return proc.capture(["sudo", "-S", "-p", "", "-v"], SUDO_TIMEOUT,
                        stdin=(password + "\n").encode("utf-8"),
                        env=proc.child_env(proc.PARSED)).ok


def ask_sudo_password() -> bool:
    """The password read on the terminal (not echoed), then open_sudo. For both front ends
    (the wizard with its screen suspended); False when none could be read."""
    import getpass
    import pwd

    try:
        user = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:  # sudo refuses such a user anyway; the prompt still says who
        user = str(os.geteuid())
    try:
        password = getpass.getpass(_("[sudo] password for {user}: ").format(user=user))
    except (EOFError, OSError):
        return False
    return open_sudo(password)


def sudo_allows_bash() -> bool:
    """Whether sudo, already opened, lets this user run bash as root without a password
    again: every root step is `sudo -n -- bash ...`."""
    return proc.capture(["sudo", "-n", "-l", "bash"], SUDO_TIMEOUT,
                        env=proc.child_env(proc.PARSED)).ok


def sudo_once(needed: bool, sudo: str, ask: Callable[[], bool],
              allows_bash: Callable[[], bool] = sudo_allows_bash) -> None:
    """Open sudo once, before the run (apply, replay, undo), never inside it: each root step
    then runs `sudo -n`, on the credentials this leaves. `ask` asks for the password
    (ask_sudo_password; the wizard suspends its screen around it) and says whether sudo
    accepted it. BadInput, with nothing changed, when it did not, or
    when sudo's rules do not let bash run as root."""
    if not (needed and sudo == "password"):
        return
    if not ask():
        raise BadInput(_("sudo did not accept the password: nothing was changed"))
    # The password opens sudo, but its rules may list some other commands only: ask now
    # whether bash is allowed, not at the first root step.
    if not allows_bash():
        raise BadInput(_("sudo accepted the password but does not let you run bash as root, "
                         "which every system step needs: ask an administrator, or use the "
                         "preset image; nothing was changed"))


# --- the run ------------------------------------------------------------------------------

class Session:
    """A plan's run (or a loaded record's undo). The lock is taken before the record is
    written and held until the action ends; each resume takes it again.

    runner    runs the steps' shell text (apply.ShellRunner, a test's fake)
    lock      lock(machine=bool, directory=state_dir) -> context manager (lock.run_lock)
    """

    def __init__(self, plan: Optional[Plan], facts: Optional[Facts], runner: Runner, *,
                 record: Optional[Record] = None, record_path: Optional[Path] = None,
                 state_dir: Optional[Path] = None, record_name: str = "",
                 lock: Optional[Callable[..., ContextManager[Any]]] = None) -> None:
        self.plan = plan
        self.facts = facts
        self.runner = runner
        self.record = record
        self.status: Optional[str] = record.data.get("status") if record is not None else None
        self._record_path = record_path
        self._state_dir = state_dir
        self._record_name = record_name
        self._lock = run_lock if lock is None else lock
        self._held: Optional[contextlib.ExitStack] = None
        self._reload = False
        self.earlier: "tuple[tuple[str, str], ...]" = ()

    @classmethod
    def of_record(cls, record: Record, runner: Runner, **kw: Any) -> Session:
        """A session over a record already on disk (`undo --record`). It is read again once
        the lock is held: what another hpcwizard did to it meanwhile (while the user read the
        question) is what the undo goes by."""
        session = cls(None, None, runner, record=record, **kw)
        session._reload = True
        return session

    # which steps an action would run, as (as, check, id)
    def _pending(self, action: str) -> "List[tuple[str, str, str]]":
        if action == "undo":
            return [(s.step.as_, "", "") for s in self.record.steps
                    if s.outcome.status in UNDO_STATUSES]
        if self.record is not None:
            return [(s.step.as_, s.step.check, s.step.id) for s in self.record.steps
                    if s.outcome.status not in ("done", "skipped")]
        return [(s.as_, s.check, s.id) for s in self.plan.steps if not s.satisfied]

    def needs_machine_lock(self, action: str = "apply") -> bool:
        return any(as_ == "root" for as_, _c, _i in self._pending(action))

    def preflight(self, action: str = "apply") -> None:
        """What refuses an action before it changes anything, the sudo password apart."""
        check_state_dir(self._state_dir)  # the lock's, and a new record's, directory
        pending = self._pending(action)
        refuse_without_passwd_entry(self.runner, pending)
        why = no_sudo_here(self.facts.user) if self.facts is not None else ""
        # a step whose check already passes is skipped, sudo or not
        if why and any(self.runner.via_sudo(as_) and not (check and self.runner.check(as_, check))
                       for as_, check, _i in pending):
            raise BadInput(why + " " + _("Nothing was run."))

    def goes_through_sudo(self, action: str = "apply") -> bool:
        """Whether a step the action runs goes through sudo: then the password is asked
        once, before it (sudo_once)."""
        return any(self.runner.via_sudo(as_) for as_, _c, _i in self._pending(action))

    def begin(self) -> Record:
        """The lock, then the record (created, never written over). Returns the record; the
        lock stays held until the next run() ends, or release()."""
        self._acquire("apply")
        try:
            record = Record.new(self.plan, self.facts, self._record_path,
                                base=self._state_dir, name=self._record_name)
            record.save()  # creates it: a file that appeared there meanwhile is refused (2)
        except BaseException:
            self.release()
            raise
        self.record = record
        # read under the lock: no other apply of this machine is writing one meanwhile
        self.earlier = tuple(unfinished_records(record.path.parent, record.path))
        if self.earlier:
            record.log("earlier records that did not finish (theirs to undo): "
                       + ", ".join(f"{p} ({s})" for p, s in self.earlier))
        return record

    def run(self, action: str, sink: Callable[[object], None]) -> str:
        """apply | retry | skip | undo, under the lock (taken now if begin() did not leave it
        held). Returns the status the record ends with."""
        if action not in ("apply",) + RESUMES:
            raise ValueError(f"unknown action {action!r}")
        if self.record is None:
            raise RuntimeError("run() before begin()")
        try:
            if self._held is None:
                self._acquire(action)
            if action == "skip":
                i = skip_stopped_step(self.record)
                if i is not None:  # the front end draws it as any step's end
                    skipped = self.record.steps[i]
                    sink(StepFinished(i, skipped.step.id, "user-skipped",
                                      skipped.outcome.exit_code, 0.0))
            if action == "undo":
                self.status = undo_record(self.record, self.runner, sink)
            else:
                self.status = apply_record(self.record, self.runner, self._telling_earlier(sink))
        except BaseException:
            # a record that could not be written (a full disk): the run did not end well,
            # and None would make exit_code() say "nothing ran" (0) to the wizard's caller
            self.status = self.record.data.get("status") or "failed"
            raise
        finally:
            self.release()
        return self.status

    def _telling_earlier(self, sink: Callable[[object], None]) -> Callable[[object], None]:
        """sink, with the run's end naming the earlier unfinished records (begin())."""
        if not self.earlier:
            return sink

        def tell(event: object) -> None:
            if isinstance(event, RunFinished):
                event = dataclasses.replace(event, earlier=self.earlier)
            sink(event)
        return tell

    def _acquire(self, action: str) -> None:
        stack = contextlib.ExitStack()
        stack.enter_context(self._lock(machine=self.needs_machine_lock(action),
                                        directory=self._state_dir))
        self._held = stack
        if self._reload:
            try:
                self.record = Record.load(self.record.path, use=action, update=True)
            except BaseException:
                self.release()
                raise

    def release(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.close()

    def exit_code(self, verified: Optional[bool] = None) -> int:
        """0 done (and verified, when verified) or nothing run, or undone; 1 a step failed or
        was skipped by the user, or the verification failed; 130 interrupted."""
        code = {None: EXIT_OK, "done": EXIT_OK, "undone": EXIT_OK,
                "interrupted": EXIT_INTERRUPTED}.get(self.status, EXIT_FAILED)
        skipped = self.record is not None and any(
            s.outcome.status == "user-skipped" for s in self.record.steps)
        if self.status == "done" and (skipped or verified is False):
            return EXIT_FAILED
        return code


# --- exports -------------------------------------------------------------------------------

# What an exported file is for decides its mode, the same from both front ends. They hold no
# secret (no key material: tests/test_security.py) and are meant to be copied to the other
# instances, into an image, into a repository: readable by all, executable when a program.
SCRIPT_MODE, TEXT_MODE = 0o755, 0o644


@dataclass(frozen=True)
class ExportFile:
    path: Path
    text: str

    @property
    def mode(self) -> int:
        return SCRIPT_MODE if self.text.startswith("#!") else TEXT_MODE


class ExportExists(BadInput):
    """Files are already at the export's names: nothing was written. The wizard asks the user
    and writes again with force; the command line says --force."""

    def __init__(self, paths: Sequence[Path]) -> None:
        self.paths = tuple(paths)
        super().__init__(_("{paths} already exists: add --force to replace it, or give another "
                           "name; nothing was written").format(
            paths=", ".join(str(p) for p in self.paths)))


def export_files(plan: Plan, fmt: str, path: Path) -> List[ExportFile]:
    """Every file `fmt` needs, the named one first: a Dockerfile's build context (the setup
    script it COPYs) goes beside it, or `docker build` fails at COPY."""
    files = [ExportFile(path, render_export(plan, fmt))]
    if fmt == "dockerfile":
        files += [ExportFile(path.parent / name, body)
                  for name, body in companion_files(plan).items()]
    return files


def _check_target(path: Path) -> None:
    try:
        _check_target_os(path)
    except OSError as exc:  # a name too long for the file system, a denied directory
        raise BadInput(_("could not write {path}: {error}").format(
            path=path, error=exc.strerror or exc)) from None


def _check_target_os(path: Path) -> None:
    if path.is_dir():
        raise BadInput(_("{path} is a directory: give a file name").format(path=path))
    if os.path.lexists(path) and not (stat.S_ISREG(os.lstat(path).st_mode)
                                      or stat.S_ISLNK(os.lstat(path).st_mode)):
        # a FIFO or a device: renaming over it would lose what it is (a link is replaced
        # by the file, never written through)
        raise BadInput(_("{path} is not a regular file: give the name of a file to write").format(
            path=path))
    if not path.parent.is_dir():
        # the nearest part of the path that is there says why: -o notes.txt/x is under a file
        for up in (path.parent, *path.parent.parents):
            if os.path.lexists(up):
                if not up.is_dir():
                    raise BadInput(_("{path} is not a directory: {target} cannot be written "
                                     "under it").format(path=up, target=path))
                break
        raise BadInput(_("directory {path} does not exist").format(path=path.parent))


def _same(path: Path, text: str) -> bool:
    """Already this export, byte for byte (a regular file, not a link): writing it again
    replaces nothing a person made."""
    try:
        st = os.lstat(path)
        return stat.S_ISREG(st.st_mode) and path.read_bytes() == text.encode("utf-8")
    except OSError:
        return False


def write_export(plan: Plan, fmt: str, path: Path,
                 force: "bool | Sequence[Path]" = False) -> List[Path]:
    """Write every file of the export. Without force, anything already at one of the names
    (a user's own ./Dockerfile, a link) that is not this very export refuses the whole export
    (ExportExists) before a byte is written. force: True replaces whatever is there; a list of
    paths replaces those only (the ones a person was asked about), anything else is refused. The mode is set on each new file before it is
    renamed into place: never a chmod of a path afterwards, never a write through a link."""
    path = Path(path).expanduser()
    _check_target(path)
    files = export_files(plan, fmt, path)
    for f in files[1:]:  # a companion's name is refused as the named file's would be
        _check_target(f.path)
        if os.path.normpath(os.path.abspath(f.path)) == os.path.normpath(os.path.abspath(path)):
            # the export would be its own companion (a Dockerfile that COPYs itself)
            raise BadInput(_("{path} is the name of the file this export writes beside it: "
                             "give the export another name").format(path=path))
    taken = [f.path for f in files if os.path.lexists(f.path) and not _same(f.path, f.text)]
    if force is True:
        may_replace = {f.path for f in files}
    else:
        asked = set() if force is False else {Path(p) for p in force}  # type: ignore[union-attr]
        refused = [p for p in taken if p not in asked]
        if refused:
            raise ExportExists(refused)
        may_replace = set(taken) | {f.path for f in files if _same(f.path, f.text)}
    # the companions first: the named file appears only with its build context
    made: List[Path] = []  # new files of this call: a later failure takes them back
    for f in files[1:] + files[:1]:
        new = not os.path.lexists(f.path)
        try:
            # a file nobody agreed to replace is created, never replaced: one that appeared
            # since the look above is refused
            write_private(f.path, f.text.encode("utf-8"), mode=f.mode,
                          exclusive=f.path not in may_replace)
        except FileExistsError:
            _take_back(made)
            raise ExportExists([f.path]) from None
        except OSError as exc:  # a read-only or special file system: one line, not a traceback
            _take_back(made)
            raise BadInput(_("could not write {path}: {error}").format(
                path=f.path, error=exc.strerror or exc)) from None
        if new:
            made.append(f.path)
    return [f.path for f in files]


def _take_back(made: List[Path]) -> None:
    """Remove the files this export created before it failed (none it replaced)."""
    for p in made:
        try:
            os.unlink(p)
        except OSError:
            pass
