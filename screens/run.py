"""Run: the step list with live status, a progress bar, elapsed time and the live log of the
running step. The worker is the App's; this screen only draws the events it is handed.
On failure: the diagnosis, and Retry / Skip / Undo / Quit."""
from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Log, ProgressBar, Static

from hpcwizard.apply import RunFinished, StepFinished, StepOutput, StepStarted
from hpcwizard.i18n import N_, _, field, get_language
from hpcwizard.report import earlier_lines, status_word
from hpcwizard.safe_text import visible

from .widgets import WizardScreen, translate_bindings

if TYPE_CHECKING:
    from hpcwizard.diagnose import Diagnosis
    from hpcwizard.plan import Plan
    from hpcwizard.record import Record

STATUS = {
    "pending": ("·", "dim", ""),
    "running": ("▶", "bold cyan", N_("running")),
    "done": ("✓", "green", ""),
    "skipped": ("✓", "dim green", N_("already done")),
    "user-skipped": ("»", "yellow", N_("skipped by you")),
    "failed": ("✗", "bold red", N_("failed")),
    "interrupted": ("■", "yellow", N_("stopped")),
    "undoing": ("↶", "bold cyan", N_("undoing")),
    "undone": ("↶", "magenta", N_("undone")),
    "undo-failed": ("✗", "bold red", N_("undo failed")),
}
BUTTONS = {"retry": N_("Retry (r)"), "skip": N_("Skip (s)"), "undo": N_("Undo (u)"),
           "quit": N_("Quit (q)"), "continue": N_("Continue (n)")}


def _clock(seconds: float) -> str:
    s = int(max(seconds, 0))
    return f"{s // 60:02d}:{s % 60:02d}"


class RunScreen(WizardScreen):
    """5. Doing it."""

    BACK = False
    BINDINGS = [
        Binding("r", "retry", "Retry"),
        Binding("s", "skip", "Skip"),
        Binding("u", "undo", "Undo"),
        Binding("q", "quit_run", "Quit"),
        Binding("n", "continue", "Continue"),
    ]

    SUB_TITLE = N_("5/6 Run")

    def __init__(self, plan: Plan, record: Record) -> None:
        super().__init__()
        self.plan = plan
        self.record = record
        self.titles = self.step_titles()
        self.status: List[str] = [s.outcome.status for s in record.steps]
        self.seconds: List[Optional[float]] = [None] * len(self.titles)
        self.state = "running"  # running | failed | finished | undoing | undone | error
        self.action_name = "apply"
        self.failed_index: Optional[int] = None
        self.diagnoses: Sequence[Diagnosis] = ()
        self.started = self.app.clock()
        self.ended: Optional[float] = None

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="run-steps-box"):
            yield Static(self.steps_text(), id="run-steps")
        with Horizontal(id="run-progress-row"):
            yield ProgressBar(total=len(self.titles), show_eta=False, id="run-progress")
            yield Static("", id="run-elapsed")
        yield Log(id="run-log", highlight=False, auto_scroll=True)
        with VerticalScroll(id="run-failure"):  # a long diagnosis scrolls on a short terminal
            yield Static("", id="run-diagnosis")
        yield Static("", id="run-message")
        with Horizontal(classes="buttons", id="run-buttons"):
            yield Button(_(BUTTONS["retry"]), id="retry", compact=True, variant="primary")
            yield Button(_(BUTTONS["skip"]), id="skip", compact=True)
            yield Button(_(BUTTONS["undo"]), id="undo", compact=True, variant="warning")
            yield Button(_(BUTTONS["quit"]), id="quit", compact=True)
            yield Button(_(BUTTONS["continue"]), id="continue", compact=True, variant="primary")

    def step_titles(self) -> List[str]:
        """The record's steps by title, in the chosen language (a step carries its
        translations into the record)."""
        return [field(s.step, "title") for s in self.record.steps]

    async def refresh_language(self) -> None:
        """Labels in the other language; the log, the state and the run go on untouched."""
        translate_bindings(self)
        self.sub_title = _(self.SUB_TITLE)
        self.shown_language = self.app_language()
        self.titles = self.step_titles()
        for bid, label in BUTTONS.items():
            self.query_one(f"#{bid}", Button).label = _(label)
        self.query_one("#run-steps", Static).update(self.steps_text())
        if self.state == "failed" and self.failed_index is not None:
            self.query_one("#run-diagnosis", Static).update(self.diagnosis_text())
        self.update_elapsed()
        self.refresh_bindings()

    @staticmethod
    def app_language() -> str:
        return get_language()

    def on_mount(self) -> None:
        self.update_elapsed()
        self.set_interval(1.0, self.update_elapsed)
        self.update_controls()
        self.app.start_worker("apply")

    # --- drawing ---------------------------------------------------------------------------

    def steps_text(self) -> Text:
        text = Text()
        total = len(self.titles)
        for i, title in enumerate(self.titles):
            mark, style, word = STATUS.get(self.status[i], ("?", "", self.status[i]))
            text.append(f"{mark} ", style=style)
            text.append(f"{i + 1}/{total} {title}", style="bold" if self.status[i] in (
                "running", "undoing", "failed") else "")
            if word:
                text.append(f"  {_(word)}", style=style)
            text.append("\n")
        text.rstrip()
        return text

    def update_elapsed(self) -> None:
        end = self.ended if self.ended is not None else self.app.clock()
        self.query_one("#run-elapsed", Static).update(
            _("elapsed {time}").format(time=_clock(end - self.started)))

    def update_controls(self) -> None:
        failed = self.state == "failed"
        self.query_one("#run-failure").display = failed or self.state == "error"
        for bid in ("retry", "skip", "undo", "quit"):
            self.query_one(f"#{bid}", Button).display = self.state in ("failed", "error") and (
                bid in ("undo", "quit") or failed)
        self.query_one("#continue", Button).display = self.state in ("finished", "undone")
        if self.state in ("finished", "undone"):
            self.query_one("#continue", Button).focus()
        elif failed:
            self.query_one("#retry", Button).focus()
        self.refresh_bindings()

    def done_count(self) -> int:
        return sum(1 for s in self.status if s in ("done", "skipped", "user-skipped", "undone",
                                                   "undo-failed", "failed"))

    # --- events from the App's worker -------------------------------------------------------

    def start(self, action: str) -> None:
        """The App started its worker again (retry, skip, undo). The record says where each
        step stands (a skipped failure is "user-skipped" now)."""
        self.status = [s.outcome.status for s in self.record.steps]
        self.query_one("#run-steps", Static).update(self.steps_text())
        self.action_name = action
        self.state = "undoing" if action == "undo" else "running"
        self.ended = None
        self.query_one("#run-message", Static).update("")
        if action == "undo":
            self.query_one("#run-progress", ProgressBar).update(progress=0)
        self.update_controls()

    def apply_events(self, events: Sequence[object]) -> None:
        log = self.query_one("#run-log", Log)
        pending: List[str] = []
        total = len(self.titles)
        for ev in events:
            if isinstance(ev, StepOutput):
                pending.append(f"  {visible(ev.line)}")
                continue
            if pending:
                log.write_lines(pending)
                pending = []
            if isinstance(ev, StepStarted):
                self.status[ev.index] = "undoing" if ev.undo else "running"
                verb = _("undo") if ev.undo else _("step")
                title = self.titles[ev.index] if ev.index < len(self.titles) else ev.title
                log.write_line(f"── {verb} {ev.index + 1}/{total}: {title}")
                self._scroll_to(ev.index)
            elif isinstance(ev, StepFinished):
                self.status[ev.index] = ev.status
                self.seconds[ev.index] = ev.seconds
                log.write_line("   " + _("{status} (exit {code})").format(
                    status=status_word(ev.status), code=ev.exit_code))
                if ev.status == "failed":
                    self.failed_index = ev.index
                    self.diagnoses = tuple(ev.diagnoses)
            elif isinstance(ev, RunFinished):
                log.write_line("── " + _("{status}; record: {path}").format(
                    status=status_word(ev.status), path=ev.record))
                log.write_lines(earlier_lines(ev.earlier))
        if pending:
            log.write_lines(pending)
        self.query_one("#run-steps", Static).update(self.steps_text())
        progress = sum(1 for s in self.status if s in (
            ("undone", "undo-failed") if self.action_name == "undo"
            else ("done", "skipped", "user-skipped")))
        self.query_one("#run-progress", ProgressBar).update(progress=progress, total=total)

    def _scroll_to(self, index: int) -> None:
        box = self.query_one("#run-steps-box", VerticalScroll)
        box.scroll_to(y=max(index - 2, 0), animate=False)

    def ended_with(self, action: str, status: str, error: str = "") -> None:
        self.ended = self.app.clock()
        self.update_elapsed()
        message = self.query_one("#run-message", Static)
        if error:
            self.state = "error"
            self.query_one("#run-diagnosis", Static).update(Text(error, style="bold red"))
        elif action == "undo":
            self.state = "undone"
            message.update(Text(_("Undone: the changes were taken back, newest first.")
                                if status == "undone" else
                                _("Undo ended: {status}.").format(status=status_word(status)),
                                style="bold green" if status == "undone" else "bold red"))
        elif status == "done":
            self.state = "finished"
            message.update(Text(_("All steps finished."), style="bold green"))
        elif status == "failed":
            self.state = "failed"
            self.query_one("#run-diagnosis", Static).update(self.diagnosis_text())
        else:  # interrupted
            self.state = "failed"
            self.query_one("#run-diagnosis", Static).update(Text(
                _("Stopped. Retry runs the step again; Undo takes back what was done."),
                style="bold yellow"))
        self.update_controls()

    def diagnosis_text(self) -> Text:
        text = Text()
        i = self.failed_index
        title = self.titles[i] if i is not None else _("a step")
        text.append(_("✗ {title} failed.").format(title=title) + "\n", style="bold red")
        for d in self.diagnoses:
            text.append(_("cause: "), style="bold")
            text.append(f"{field(d, 'cause')}\n")
            text.append(_("fix:   "), style="bold")
            text.append(f"{field(d, 'fix')}\n")
        if not self.diagnoses:
            text.append(_("No known cause: the step's output is in the log above; the full log "
                          "is {path}").format(path=self.record.log_path) + "\n")
        text.rstrip()
        return text

    # --- the user's answer to a failure -------------------------------------------------------

    def check_action(self, action: str, parameters: tuple):
        if action in ("retry", "skip"):
            return self.state == "failed"
        if action in ("undo", "quit_run"):
            return self.state in ("failed", "error")
        if action == "continue":
            return self.state in ("finished", "undone")
        return super().check_action(action, parameters)

    def action_retry(self) -> None:
        self.app.resume_run("retry")

    def action_skip(self) -> None:
        self.app.resume_run("skip")

    def action_undo(self) -> None:
        self.app.resume_run("undo")

    def action_quit_run(self) -> None:
        self.app.finish_run(quit=True)

    def action_continue(self) -> None:
        self.app.finish_run(quit=False)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        {"retry": self.action_retry, "skip": self.action_skip, "undo": self.action_undo,
         "quit": self.action_quit_run, "continue": self.action_continue}[event.button.id or "quit"]()
