"""What was done? A TOML record, rewritten atomically after every step so that a crash or a
signal leaves a true one, and a full log beside it. Both readable by their owner alone.

A record holds the exact commands that ran and their undo, so `undo` and `replay` need
nothing else. It never holds key material: only paths and commands.
"""
from __future__ import annotations

import datetime as _dt
import os
import socket
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional

import tomli_w

from . import __version__
from .compat import tomllib
from .i18n import _
from .validate import BadInput

SCHEMA = 1
# skipped: its check passed, nothing to do; user-skipped: it failed (or was stopped) and the
# user went on without it, so it may be partly done
STATUSES = ("pending", "running", "done", "skipped", "user-skipped", "failed", "interrupted",
            "undone", "undo-failed")


def state_dir() -> Path:
    """Where records and logs go: $HPCWIZARD_STATE_DIR, else the platform's user state
    directory (~/.local/state/hpcwizard on Linux)."""
    env = os.environ.get("HPCWIZARD_STATE_DIR")
    if env:
        return Path(env)
    from platformdirs import user_state_path

    return user_state_path("hpcwizard")


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).astimezone().isoformat(timespec="seconds")


def write_private(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Write data to path atomically (temporary file, fsync, rename), mode 0600 (or `mode`,
    set on the temporary file before the rename: never a chmod of a path after it)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.parent))
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def default_path(plan: Any, base: Optional[Path] = None, name: str = "") -> Path:
    """Where a run's record goes: BASE/records/NAME, by default the state directory and
    YYYYmmdd-HHMMSS-FRAMEWORK-NETWORK.toml."""
    c = plan.choices
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return (Path(base) if base is not None else state_dir()) / "records" / (
        name or f"{stamp}-{c.framework}-{c.network}.toml")


class Record:
    """The record of one apply (or undo) run; `data` is exactly what the TOML file holds."""

    def __init__(self, path: Path, data: Dict[str, Any]):
        self.path = Path(path)
        self.data = data
        self.log_error = ""  # why the log could not be written, if it could not

    # --- creation and loading -------------------------------------------------------------

    @classmethod
    def new(cls, plan: Any, facts: Any, path: Optional[Path] = None) -> "Record":
        c = plan.choices
        path = Path(path) if path is not None else default_path(plan)
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
            "steps": [dict(s.to_dict(), status="pending", started="", ended="", exit_code=-1,
                           seconds=0.0, diagnosis="") for s in plan.steps],
        }
        return cls(path, data)

    @classmethod
    def load(cls, path: Path) -> "Record":
        path = Path(path)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise BadInput(_("record {path} does not exist").format(path=path)) from None
        except OSError as exc:
            raise BadInput(_("record {path} cannot be read: {error}").format(
                path=path, error=exc.strerror)) from None
        try:
            data = tomllib.loads(raw.decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise BadInput(_("record {path} is not a valid TOML file: {error}").format(
                path=path, error=exc)) from None
        schema = data.get("schema")
        if not isinstance(schema, int):
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
        # An older record may lack what newer ones carry: the defaults stand in.
        data.setdefault("log", str(path.with_suffix(".log")))
        data.setdefault("status", "")
        for step in steps:
            step.setdefault("title", step["id"])
            step.setdefault("note", "")
        return cls(path, data)

    # --- updates --------------------------------------------------------------------------

    @property
    def log_path(self) -> Path:
        return Path(self.data["log"])

    @property
    def steps(self) -> List[Dict[str, Any]]:
        return self.data["steps"]

    def set_status(self, status: str) -> None:
        self.data["status"] = status
        self.data["updated"] = now()
        self.save()

    def update_step(self, index: int, **fields: Any) -> None:
        self.steps[index].update(fields)
        self.data["updated"] = now()
        self.save()

    def set_verification(self, summary: Dict[str, Any]) -> None:
        """The latest verification's outcome (Report.summary()), kept beside the steps."""
        self.data["verify"] = dict(summary, at=now())
        self.save()

    def save(self) -> None:
        write_private(self.path, tomli_w.dumps(self.data).encode("utf-8"))

    def log(self, text: str) -> None:
        """Append to the log beside the record (created 0600)."""
        path = self.log_path
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(str(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "a", encoding="utf-8") as fh:
                fh.write(text if text.endswith("\n") else text + "\n")
        except OSError as exc:
            # A full disk must not stop a step half-way through its output: the log loses
            # lines (said here), and the next record.save() fails and stops the run.
            self.log_error = f"{path}: {exc.strerror or exc}"


def facts_summary(facts: Any) -> Dict[str, Any]:
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
