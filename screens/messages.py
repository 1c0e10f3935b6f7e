"""Messages between the App's workers and the screens. Workers never touch widgets: they
post one of these to the App, which keeps the state and tells the screen on top."""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Optional, Sequence, Tuple

from textual.message import Message

if TYPE_CHECKING:
    from hpcwizard.catalog import Catalog
    from hpcwizard.facts import Facts
    from hpcwizard.verify import Check, Report


class FactsReady(Message):
    """Detection finished (in a worker); the catalog is loaded too."""

    def __init__(self, facts: Facts, catalog: Catalog) -> None:
        super().__init__()
        self.facts = facts
        self.catalog = catalog


class DetectFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class StepChecked(Message):
    """One step's check ran (Review): done is True when the system already matches."""

    def __init__(self, index: int, done: Optional[bool]) -> None:
        super().__init__()
        self.index = index
        self.done = done


class DiffsReady(Message):
    """The unified diff each file-changing step would make, computed read-only (Review)."""

    def __init__(self, diffs: Dict[str, str]) -> None:
        super().__init__()
        self.diffs = diffs


class RunEvents(Message):
    """A batch of apply/undo events (StepStarted, StepOutput, StepFinished, RunFinished) in
    the order they happened. One message carries many output lines: a fast step cannot
    flood the UI."""

    def __init__(self, events: Sequence[object]) -> None:
        super().__init__()
        self.events: Tuple[object, ...] = tuple(events)


class RunEnded(Message):
    """The apply (or undo) worker returned: status as apply_record/undo_record gave it, or
    "error" with a message (another hpcwizard holds the lock, a crash)."""

    def __init__(self, action: str, status: str, error: str = "") -> None:
        super().__init__()
        self.action = action
        self.status = status
        self.error = error


class VerifyChecked(Message):
    """One verification check finished (from the verify worker's threads, in any order)."""

    def __init__(self, check: Check) -> None:
        super().__init__()
        self.check = check


class VerifyEnded(Message):
    """The verify worker returned: its Report (checks in order), or None and an error."""

    def __init__(self, report: Optional[Report], error: str = "") -> None:
        super().__init__()
        self.report = report
        self.error = error
