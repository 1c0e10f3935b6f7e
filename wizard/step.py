"""A step: one change to the system with its check and its undo. The plan yields them; the
record keeps each with what happened when it ran (RecordStep: the Step and its
StepOutcome). Both are saved to and read from a record's TOML table by one pair of
functions each (to_toml / from_toml), so plan, record, apply, undo and the screens share
one shape."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Tuple

from . import ops
from .i18n import N_

# skipped: its check passed, nothing to do; user-skipped: it failed (or was stopped) and the
# user went on without it, so it may be partly done
STATUSES = ("pending", "running", "done", "skipped", "user-skipped", "failed", "interrupted",
            "undone", "undo-failed")


class BadStepTable(ValueError):
    """A step's TOML table holds a field of the wrong kind: `field` is its key, `value` what
    is there, `want` the kind expected (marked for translation: "text", "a number", ...);
    the record names its file and turns this into one line."""

    def __init__(self, key: str, value: Any, want: str) -> None:
        super().__init__(f"{key}: {value!r} is not {want}")
        self.key, self.value, self.want = key, value, want


@dataclass(frozen=True)
class Step:
    id: str  # recipe/step, unique in a plan
    recipe: str
    title: str
    as_: str  # root | user
    kind: str
    check: str
    run: str
    undo: str
    note: str = ""
    why: str = ""
    packages: Tuple[str, ...] = ()  # the packages step only
    satisfied: bool = False  # the facts already show it done here: it needs no privilege here
    i18n: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    @property
    def operation(self) -> str:
        """The operation of recipes/ops.sh the step calls ('hw_sshd', ...); '' for shell."""
        return ops.operation(self.run) if self.kind != "shell" else ""

    @property
    def diff(self) -> str:
        """The text that prints, read-only, the unified diff the step would make ('' for a
        shell step)."""
        return ops.diffed(self.run) if self.operation else ""

    def to_toml(self) -> Dict[str, Any]:
        """The step as a TOML table (the record's [[steps]], `plan --json`'s steps). Its
        translations and `satisfied` only when set: a step without them is saved as records
        always saved it."""
        table: Dict[str, Any] = {
            "id": self.id, "recipe": self.recipe, "title": self.title, "as": self.as_,
            "kind": self.kind, "check": self.check, "run": self.run, "undo": self.undo,
            "note": self.note, "why": self.why, "packages": list(self.packages)}
        if self.satisfied:
            table["satisfied"] = True
        if self.i18n:
            table["i18n"] = {lang: dict(texts) for lang, texts in self.i18n.items()}
        return table

    @classmethod
    def from_toml(cls, table: Mapping[str, Any]) -> "Step":
        """The step a table holds (to_toml's, or an older record's, which may lack all but
        id, as, run and undo: the defaults stand in). BadStepTable names a field of the
        wrong kind; keys it does not know are left out."""
        step_id = table.get("id", "")
        if not isinstance(step_id, str) or not step_id.strip():
            raise BadStepTable("id", step_id, N_("non-empty text"))
        if not step_id.isprintable():
            raise BadStepTable("id", step_id, N_("printable text"))
        if table.get("as") not in ("root", "user"):
            raise BadStepTable("as", table.get("as"), "root | user")

        def text(key: str, default: str = "") -> str:
            value = table.get(key, default)
            if not isinstance(value, str):
                raise BadStepTable(key, value, N_("text"))
            return value

        packages = table.get("packages", [])
        if not isinstance(packages, list) or not all(isinstance(p, str) for p in packages):
            raise BadStepTable("packages", packages, N_("a list"))
        satisfied = table.get("satisfied", False)
        if not isinstance(satisfied, bool):
            raise BadStepTable("satisfied", satisfied, N_("true/false"))
        i18n = table.get("i18n", {})
        if not isinstance(i18n, dict) or not all(
                isinstance(texts, dict) and all(isinstance(v, str) for v in texts.values())
                for texts in i18n.values()):
            raise BadStepTable("i18n", i18n, N_("a table"))
        return cls(id=step_id, recipe=text("recipe"), title=text("title", step_id),
                   as_=text("as"), kind=text("kind", "shell"), check=text("check"),
                   run=text("run"), undo=text("undo"), note=text("note"), why=text("why"),
                   packages=tuple(packages), satisfied=satisfied,
                   i18n={lang: dict(texts) for lang, texts in i18n.items()})


@dataclass(frozen=True)
class StepOutcome:
    """What happened to a step in a run: its status (STATUSES), when it started and ended,
    its exit code (-1: it never ran), how long it took and, when it failed, the diagnosis."""
    status: str = "pending"
    started: str = ""
    ended: str = ""
    exit_code: int = -1
    seconds: float = 0.0
    diagnosis: str = ""

    def to_toml(self) -> Dict[str, Any]:
        return {"status": self.status, "started": self.started, "ended": self.ended,
                "exit_code": self.exit_code, "seconds": self.seconds,
                "diagnosis": self.diagnosis}

    @classmethod
    def from_toml(cls, table: Mapping[str, Any]) -> "StepOutcome":
        status = table.get("status", "pending")
        if status not in STATUSES:
            raise BadStepTable("status", status, " | ".join(STATUSES))
        for key in ("started", "ended", "diagnosis"):
            if not isinstance(table.get(key, ""), str):
                raise BadStepTable(key, table[key], N_("text"))
        code = table.get("exit_code", -1)
        if not isinstance(code, int) or isinstance(code, bool):
            raise BadStepTable("exit_code", code, N_("a number"))
        seconds = table.get("seconds", 0.0)
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
            raise BadStepTable("seconds", seconds, N_("a number"))
        return cls(status=status, started=table.get("started", ""),
                   ended=table.get("ended", ""), exit_code=code, seconds=float(seconds),
                   diagnosis=table.get("diagnosis", ""))


@dataclass(frozen=True)
class RecordStep:
    """A step of a record: the plan's Step and what happened to it. Saved as one table,
    the step's fields and the outcome's side by side."""
    step: Step
    outcome: StepOutcome = field(default_factory=StepOutcome)

    def to_toml(self) -> Dict[str, Any]:
        return {**self.step.to_toml(), **self.outcome.to_toml()}

    @classmethod
    def from_toml(cls, table: Mapping[str, Any]) -> "RecordStep":
        return cls(Step.from_toml(table), StepOutcome.from_toml(table))
