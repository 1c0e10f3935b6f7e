"""What was done? A TOML record, rewritten atomically after every step so that a crash or a
signal leaves a true one, and a full log beside it. Both readable by their owner alone.

A record holds the exact commands that ran and their undo, so `undo` and `replay` need
nothing else. It never holds key material: only paths and commands.

A record is code, so it is trusted only when provably ours (`Record.load`, the one way to
read one): a regular file owned by the user running hpcwizard, writable by nobody else, in
directories nobody else can change; read with the bounded reader, and every field checked.
A record is never written over a file: its first save creates it (a link, which fails if
anything is there), later saves replace that file, found through its real path.
"""
from __future__ import annotations

import datetime as _dt
import errno
import functools
import os
import pwd
import shlex
import socket
import stat
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import tomli_w

from . import __version__, ops
from .compat import tomllib
from .i18n import _
from .inputs import RECORD_LIMIT, read_bytes
from .step import STATUSES, BadStepTable, RecordStep
from .validate import BadInput, user_name

if TYPE_CHECKING:
    from .facts import Facts
    from .plan import Plan

SCHEMA = 1
# A record is a few tables deep (steps -> step -> packages); deeper is not one of ours, and
# tomllib (recursive) or tomli-w would raise RecursionError on it.
MAX_DEPTH = 16


@functools.lru_cache(maxsize=4)
def _ops_table(sha256: str, library: str) -> str:
    return tomli_w.dumps({"ops": {"sha256": sha256, "library": library}}, multiline_strings=True)


def _dumps(data: Dict[str, Any]) -> bytes:
    """The record as TOML. Its operations library (900 lines, the same in every save) is
    rendered once: tomli_w escapes strings a character at a time, and a record is saved
    after every step."""
    rest = {k: v for k, v in data.items() if k != "ops"}
    text = tomli_w.dumps(rest, multiline_strings=True)
    ops_data = data.get("ops")
    if isinstance(ops_data, dict) and set(ops_data) == {"sha256", "library"}:
        text += "\n" + _ops_table(str(ops_data["sha256"]), str(ops_data["library"]))
    elif ops_data is not None:
        text += "\n" + tomli_w.dumps({"ops": ops_data}, multiline_strings=True)
    return text.encode("utf-8")


class RecordExists(BadInput):
    """A new record's path is taken (a file, a link, another run's record): never replaced."""


def state_dir() -> Path:
    """Where records and logs go: $HPCWIZARD_STATE_DIR, else the platform's user state
    directory (~/.local/state/hpcwizard on Linux)."""
    env = os.environ.get("HPCWIZARD_STATE_DIR")
    if env:
        return Path(env)
    from platformdirs import user_state_path

    return user_state_path("hpcwizard")


def unwritable_dir(path: Path) -> str:
    """Why no file can be written in the directory path (made as needed), or "": a path
    under a file, a file, or a directory this user cannot write to (read-only too)."""
    existing = os.path.abspath(path)
    while not os.path.exists(existing) and existing != os.path.dirname(existing):
        existing = os.path.dirname(existing)  # /dev/null/x: stat says ENOTDIR, not "a file"
    if not os.path.isdir(existing):
        return _("{path} is not a directory").format(path=existing)
    if not os.access(existing, os.W_OK | os.X_OK):
        return _("{path} is not writable by you").format(path=existing)
    return ""


def check_state_dir(base: Optional[Path] = None) -> None:
    """Refuse, before a run changes anything, a state directory that cannot hold its lock,
    records and logs: else the first write ends the run in a traceback."""
    where = Path(base) if base is not None else state_dir()
    problem = unwritable_dir(where / "records")
    if problem:
        raise BadInput(_("state directory {path} cannot be used: {problem} (set "
                         "HPCWIZARD_STATE_DIR to a directory you can write to)").format(
            path=where, problem=problem), "state")


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).astimezone().isoformat(timespec="seconds")


def write_private(path: Path, data: bytes, mode: int = 0o600, exclusive: bool = False) -> None:
    """Write data to path atomically (temporary file, fsync, rename), mode 0600 (or `mode`,
    set on the temporary file before the rename: never a chmod of a path after it).
    exclusive: create path, never replace what is there (a file or a symlink): the temporary
    file is linked to path, which fails with FileExistsError if anything is at path."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.parent))
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if exclusive:
            _link_new(tmp, path, data, mode)
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _link_new(tmp: str, path: Path, data: bytes, mode: int) -> None:
    try:
        os.link(tmp, path)  # does not follow a symlink at path: EEXIST
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
            raise
        # a file system without hard links: create it exclusively (not atomic, but it is
        # never a file that was there before)
        fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())


def _taken(path: Path) -> bool:
    """A record's path is taken if it or its log exists (a dangling symlink included)."""
    return os.path.lexists(path) or os.path.lexists(path.with_suffix(".log"))


def _free(path: Path) -> Path:
    """path, or NAME-2.toml, NAME-3.toml, ... beside it: the first whose record and log are
    both free."""
    for n in range(1, 1000):
        candidate = path if n == 1 else path.with_name(f"{path.stem}-{n}{path.suffix}")
        if not _taken(candidate):
            return candidate
    raise RecordExists(_("no free record name beside {path}: remove old records").format(
        path=path))


def default_path(plan: Plan, base: Optional[Path] = None, name: str = "") -> Path:
    """Where a run's record goes: BASE/records/NAME, by default the state directory and
    YYYYmmdd-HHMMSS-FRAMEWORK-NETWORK.toml; if that is taken (a run in the same second),
    NAME-2.toml and so on."""
    return _free(_default_name(plan, base, name))


def _default_name(plan: Plan, base: Optional[Path], name: str) -> Path:
    c = plan.choices
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(os.path.abspath((Path(base) if base is not None else state_dir()) / "records"
                                / (name or f"{stamp}-{c.framework}-{c.network}.toml")))


def new_record_path(path: Path) -> Path:
    """A record path the user gave (--record FILE), checked before anything runs: nothing
    may be there (nor at its log, FILE with .log), and its directory must be one only this
    user (or root) can change, else the record could not be trusted later."""
    path = Path(os.path.abspath(path))
    if path.suffix == ".log":
        raise BadInput(_("record {path}: its log would be the same file; give a name that "
                         "does not end in .log, e.g. {name}").format(
            path=path, name=path.with_suffix(".toml").name))
    for taken in (path, path.with_suffix(".log")):
        if os.path.lexists(taken):
            raise RecordExists(_exists_message(path, taken))
    problem = unwritable_dir(path.parent)
    parent = path.parent
    while not os.path.exists(parent) and parent != parent.parent:
        parent = parent.parent  # write_private creates the rest, 0700
    problem = problem or _directory_problem(os.path.realpath(parent), os.geteuid())
    if problem:
        raise BadInput(_("record {path} cannot go there: {problem}; give a path in a "
                         "directory only you can change").format(path=path, problem=problem))
    return path


def _exists_message(path: Path, taken: Path) -> str:
    return _("{taken} already exists: hpcwizard never writes a record over a file (yours, or "
             "another run's record and its undo steps); give a new name with --record, or "
             "leave --record out").format(taken=taken)


# --- trust ---------------------------------------------------------------------------------

def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return ""


def _owner(uid: int) -> str:
    name = _user(uid)
    return f"{name} (uid {uid})" if name else f"uid {uid}"


def _directory_problem(directory: str, euid: int) -> str:
    """Why a file in `directory` could be replaced by someone else, or "": the directory and
    each one above it must belong to this user or root and be writable by nobody else
    (a sticky directory such as /tmp may be: there only an entry's owner can replace it)."""
    current = directory
    while True:
        try:
            st = os.stat(current)
        except OSError as exc:
            return _("directory {dir} cannot be checked: {error}").format(
                dir=current, error=exc.strerror or exc)
        if st.st_uid not in (euid, 0):
            return _("directory {dir} is owned by {owner}, who can replace what is in "
                     "it").format(dir=current, owner=_owner(st.st_uid))
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
            return _("directory {dir} can be changed by {who} (mode {mode:04o}, not "
                     "sticky)").format(dir=current, mode=stat.S_IMODE(st.st_mode),
                                       who=_("others") if st.st_mode & stat.S_IWOTH
                                       else _("its group"))
        parent = os.path.dirname(current)
        if parent == current:
            return ""
        current = parent


def trusted_path(path: Path, use: str = "", update: bool = False) -> str:
    """The real path (symlinks resolved) of a record that may be run: a regular file owned by
    the effective user (root: by root), writable by nobody else, in directories nobody else
    can change. Otherwise BadInput, one line naming the file, its owner and what to do.
    use: the command ("undo", "replay", "verify --record"), for that line; update: the
    record will be rewritten, so its directory must be writable."""
    real = os.path.realpath(path)
    try:
        st: Optional[os.stat_result] = os.lstat(real)
    except OSError:
        st = None
    if st is None or not stat.S_ISREG(st.st_mode):
        read_bytes(real, _("record"), RECORD_LIMIT)  # raises: missing, a FIFO, a device, ...
        raise BadInput(_("record {path} cannot be read: it changed while checked").format(
            path=real))
    shown = real if real == os.path.abspath(path) else f"{path} (-> {real})"
    euid = os.geteuid()
    program = f"hpcwizard {use}" if use else "hpcwizard"
    command = f"{program} {shlex.quote(real)}"
    if st.st_uid != euid:
        owner = _user(st.st_uid)
        raise BadInput(_(
            "record {path} is owned by {owner}, not by you ({you}): a record runs commands, "
            "so only its owner's hpcwizard runs it; run '{command}' as {who}").format(
            path=shown, owner=_owner(st.st_uid), you=_user(euid) or f"uid {euid}",
            command=command, who=owner or _("the user with uid {uid}").format(uid=st.st_uid)))
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise BadInput(_(
            "record {path} can be changed by {who} (mode {mode:04o}): a record runs commands, "
            "so hpcwizard runs only one that nobody else can change; if its commands are "
            "yours, run 'chmod go-w {quoted}' first").format(
            path=shown, mode=stat.S_IMODE(st.st_mode), quoted=shlex.quote(real),
            who=_("others") if st.st_mode & stat.S_IWOTH else _("its group")))
    problem = _directory_problem(os.path.dirname(real), euid)
    if problem:
        raise BadInput(_(
            "record {path} could have been replaced: {problem}; a record runs commands, so "
            "check its commands, move it into a directory only you can change and give it "
            "to '{program}' there").format(path=shown, problem=problem, program=program))
    if update and not os.access(os.path.dirname(real), os.W_OK):
        raise BadInput(_("record {path} cannot be updated: you cannot write to its directory "
                         "{dir}").format(path=shown, dir=os.path.dirname(real)))
    return real


# What a run did not finish: killed (its record still says running), interrupted, failed.
UNFINISHED = ("running", "interrupted", "failed")


def unfinished_records(directory: Path, but: Path, limit: int = 20) -> List[Tuple[str, str]]:
    """(path, status) of the newest records in directory (at most `limit` looked at) whose
    run did not finish, `but` (the new run's own) left out, newest first. A run after them
    finds their changes made and skips those steps, so its own record cannot take them back:
    each stays theirs to undo. Only records provably ours are read (Record.load); others are
    passed over, unread."""
    try:
        names = sorted((n for n in os.listdir(directory) if n.endswith(".toml")), reverse=True)
    except OSError:
        return []
    found: List[Tuple[str, str]] = []
    for name in names[:limit + 1]:
        path = Path(directory) / name
        if os.path.abspath(path) == os.path.abspath(but):
            continue
        try:
            status = Record.load(path).data.get("status", "")
        except BadInput:
            continue
        if status in UNFINISHED:
            found.append((str(path), status))
    return found


# --- structure -----------------------------------------------------------------------------

def _kind(value: Any) -> str:
    for t, name in ((bool, _("true/false")), (int, _("a number")), (float, _("a number")),
                    (str, _("text")), (list, _("a list")), (dict, _("a table"))):
        if isinstance(value, t):
            return name
    return _("a date or time")


def _too_deep(data: Any) -> bool:
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            return True
        children = value.values() if isinstance(value, dict) else \
            value if isinstance(value, list) else ()
        stack.extend((child, depth + 1) for child in children
                     if isinstance(child, (dict, list)))
    return False


def _bad(path: Path, name: str, value: Any, want: str) -> BadInput:
    got = repr(value[:40]) + ("..." if len(value) > 40 else "") \
        if isinstance(value, str) else _kind(value)
    return BadInput(_("record {path}: {field} is {got}, not {want}: it was edited or is "
                      "not an hpcwizard record").format(
        path=path, field=name, got=got, want=want))


def _check_fields(path: Path, data: Dict[str, Any]) -> None:
    """Every field hpcwizard reads or runs is of its kind: one line naming the field (a
    step's: _steps)."""
    def bad(name: str, value: Any, want: str) -> BadInput:
        return _bad(path, name, value, want)

    def text(name: str, value: Any, allowed: tuple = (), empty: bool = True) -> None:
        if not isinstance(value, str) or (allowed and value not in allowed) \
                or (not empty and not value.strip()):
            raise bad(name, value, " | ".join(allowed) if allowed else
                      _("text") if empty else _("non-empty text"))

    for key in ("status", "log"):
        if key in data:
            text(key, data[key], ("",) + STATUSES if key == "status" else (),
                 empty=key == "status")
    target = data["target"]
    for key in ("user", "uid", "home"):
        if key not in target:
            raise BadInput(_("record {path}: [target] has no {field}: it was edited or is "
                             "not an hpcwizard record").format(path=path, field=key))
    try:
        user = target["user"]
        if not isinstance(user, str) or user != user.strip():
            raise BadInput(_("user name {value!r} is not valid").format(value=user))
        user_name(user)
    except BadInput as exc:
        raise BadInput(_("record {path}: [target] user: {error}").format(
            path=path, error=exc)) from None
    uid = target["uid"]
    if not isinstance(uid, int) or isinstance(uid, bool) or uid < 0:
        raise bad("[target] uid", uid, _("a user id (a number from 0)"))
    text("[target] home", target["home"])


def _steps(path: Path, tables: List[Dict[str, Any]]) -> List[RecordStep]:
    """The record's steps, each field of its kind: one line naming the step and field."""
    steps = []
    for i, table in enumerate(tables, 1):
        try:
            steps.append(RecordStep.from_toml(table))
        except BadStepTable as exc:
            name = f"step {i} id" if exc.key == "id" else f"step {i} ({table['id']}) {exc.key}"
            raise _bad(path, name, exc.value, _(exc.want)) from None
    return steps


class Record:
    """The record of one apply (or undo) run: `steps` its steps, `data` the rest of what the
    TOML file holds (to_toml() is the whole)."""

    def __init__(self, path: Path, data: Dict[str, Any], steps: List[RecordStep],
                 new: bool = False, auto: bool = False):
        self.path = Path(path)  # a loaded record: its real path (a symlink to it stays one)
        self.data = data
        self.steps = steps
        self.log_error = ""  # why the log could not be written, if it could not
        # new: not on disk yet; its first save creates the file, never replaces one (nor does
        # its first log line). auto: a default name, so a taken one is replaced by a free one.
        self._new = self._new_log = new
        self._auto = auto
        self._wanted = self.path  # auto: the default name that NAME-2, NAME-3 ... stand in for

    # --- creation and loading -------------------------------------------------------------

    @classmethod
    def new(cls, plan: Plan, facts: Facts, path: Optional[Path] = None,
            base: Optional[Path] = None, name: str = "") -> Record:
        """A record of a run about to start, not yet on disk. path: where it goes (give one
        checked with new_record_path); else a free default name (default_path(plan, base,
        name)), another one if a run takes it before this one's first save."""
        c = plan.choices
        auto = path is None
        wanted = _default_name(plan, base, name) if auto else Path(os.path.abspath(path))
        path = _free(wanted) if auto else wanted
        data: Dict[str, Any] = {
            "schema": SCHEMA,
            "tool": f"hpcwizard {__version__}",
            "created": now(),
            "host": socket.gethostname(),
            "status": "pending",
            "log": str(path.with_suffix(".log")),
            "choices": c.to_dict(),
            "target": {"user": plan.target.user, "uid": plan.target.uid, "home": plan.target.home},
            "facts": facts_summary(facts),
            "recommendation": {"path": plan.recommendation.path,
                               "reasons": list(plan.recommendation.reasons)},
            # the operations the steps call, as they ran: undo uses these, not the ones a
            # later hpcwizard ships
            "ops": {"sha256": ops.checksum(), "library": ops.library()},
        }
        record = cls(path, data, [RecordStep(s) for s in plan.steps], new=True, auto=auto)
        record._wanted = wanted
        return record

    @classmethod
    def load(cls, path: Path, use: str = "", update: bool = False) -> "Record":
        """The one way to read a record (undo, replay, verify --record): trusted only when
        provably ours (trusted_path), read with the bounded reader, every field checked.
        use: the command, named in a refusal; update: it will be rewritten."""
        path = Path(trusted_path(Path(path), use, update))
        raw = read_bytes(str(path), _("record"), RECORD_LIMIT)
        try:
            data = tomllib.loads(raw.decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise BadInput(_("record {path} is not a valid TOML file: {error}").format(
                path=path, error=str(exc).splitlines()[0] if str(exc) else exc)) from None
        except RecursionError:
            data = None
        if data is None or _too_deep(data):
            raise BadInput(_("record {path} is nested too deep (more than {n} levels): it is "
                             "not an hpcwizard record").format(path=path, n=MAX_DEPTH))
        schema = data.get("schema")
        if not isinstance(schema, int) or isinstance(schema, bool):
            raise BadInput(_("record {path} has no schema version: it is not an hpcwizard "
                             "record").format(path=path))
        if schema > SCHEMA:
            raise BadInput(_("record {path} has schema {schema}, newer than this hpcwizard "
                             "understands ({known}): upgrade hpcwizard").format(
                path=path, schema=schema, known=SCHEMA))
        steps = data.get("steps")
        if not isinstance(steps, list) or not isinstance(data.get("choices"), dict) \
                or not isinstance(data.get("target"), dict) \
                or not all(isinstance(s, dict) and {"id", "status", "as", "run", "undo"} <= set(s)
                           for s in steps):
            raise BadInput(_("record {path} is incomplete (truncated or edited): missing "
                             "steps, choices or target").format(path=path))
        _check_fields(path, data)
        library = data.get("ops", {}).get("library", "") if isinstance(data.get("ops"), dict) else None
        if "ops" in data and (not isinstance(library, str)
                              or data["ops"].get("sha256") != ops.checksum(library)):
            raise BadInput(_("record {path}: its operations library does not match its sha256: "
                             "it was edited or is not an hpcwizard record").format(path=path))
        # An older record may lack what newer ones carry: the defaults stand in (a step's
        # in RecordStep.from_toml).
        data.setdefault("log", str(path.with_suffix(".log")))
        data.setdefault("status", "")
        return cls(path, data, _steps(path, data.pop("steps")))

    # --- updates --------------------------------------------------------------------------

    @property
    def library(self) -> str:
        """The operations library the record's steps ran with ('' for a record made before
        there was one: its texts hold their own shell)."""
        return self.data.get("ops", {}).get("library", "")

    @property
    def log_path(self) -> Path:
        return Path(self.data["log"])

    def to_toml(self) -> Dict[str, Any]:
        """The whole record as the TOML file holds it: the steps after the run's summary
        tables, before its verification and operations library."""
        tail = ("verify", "ops")
        table = {k: v for k, v in self.data.items() if k not in tail}
        table["steps"] = [s.to_toml() for s in self.steps]
        table.update((k, self.data[k]) for k in tail if k in self.data)
        return table

    def set_status(self, status: str) -> None:
        self.data["status"] = status
        self.data["updated"] = now()
        self.save()

    def update_step(self, index: int, save: bool = True, **fields: Any) -> None:
        """fields: of the step's StepOutcome (status, exit_code, ...). save=False: the change
        goes to disk with the next save (a record killed before then says what it said,
        e.g. "pending" for a step found already done)."""
        step = self.steps[index]
        self.steps[index] = replace(step, outcome=replace(step.outcome, **fields))
        self.data["updated"] = now()
        if save:
            self.save()

    def set_verification(self, summary: Dict[str, Any]) -> None:
        """The latest verification's outcome (Report.summary()), kept beside the steps."""
        self.data["verify"] = dict(summary, at=now())
        self.save()

    def save(self) -> None:
        """Write the record. The first save of a new one creates its file and never replaces
        anything there (RecordExists; a default name moves on to a free one); later saves
        replace that file."""
        if not self._new:
            write_private(self.path, _dumps(self.to_toml()))
            return
        while True:
            try:
                write_private(self.path, _dumps(self.to_toml()), exclusive=True)
                break
            except FileExistsError:
                if not self._auto:
                    raise RecordExists(_exists_message(self.path, self.path)) from None
                self.path = _free(self._wanted)
                self.data["log"] = str(self.path.with_suffix(".log"))
        self._new = False

    def log(self, text: str) -> None:
        """Append to the log beside the record (created 0600; a new record's log is created,
        never appended to a file that was there; a symlink is never followed)."""
        path = self.log_path
        flags = (os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NOCTTY
                 | os.O_NONBLOCK)  # a FIFO there: an error, not a hang
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(str(path), flags | (os.O_EXCL if self._new_log else 0), 0o600)
            self._new_log = False
            with os.fdopen(fd, "a", encoding="utf-8") as fh:
                fh.write(text if text.endswith("\n") else text + "\n")
        except OSError as exc:
            # A full disk must not stop a step half-way through its output: the log loses
            # lines (said here), and the next record.save() fails and stops the run.
            self.log_error = f"{path}: {exc.strerror or exc}"


def facts_summary(facts: Facts) -> Dict[str, Any]:
    """Enough of the facts to understand a record later, with no None (TOML has none)."""
    return {
        "os": facts.os.pretty_name or facts.os.id,
        "family": facts.os.family,
        "package_manager": facts.os.package_manager,
        "user": facts.user.name,
        "uid": facts.user.uid,
        "sudo": facts.user.sudo,
        "container": facts.runtime.container,
        "pid1": facts.runtime.pid1,
        "hostname": facts.hostname,
        "cpus": facts.cpus or 0,
        "gpus": [g.name for g in facts.gpus],
        "rdma_ports": [f"{p.name} {p.state} {p.rate_gbps or 0:g} Gb/s {p.link_layer}"
                       for h in facts.hcas for p in h.ports],
        "mpi": f"{facts.software.mpi_flavour} {facts.software.mpi_version}".strip(),
    }
