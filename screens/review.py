"""Review: every step with its exact commands (highlighted), the steps already done, the undo
note of each. The checks run through the Runner in a worker; nothing changes here."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional

from rich.console import Group
from rich.syntax import Syntax
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, OptionList, Static
from textual.widgets.option_list import Option

from .messages import DiffsReady, StepChecked
from hpcwizard.i18n import N_, _, field
from hpcwizard.report import file_diffs
from hpcwizard.session import no_sudo_here

from .widgets import ExportScreen, WizardScreen

if TYPE_CHECKING:
    from hpcwizard.plan import Plan, Step

MARK = {None: ("…", "dim"), True: ("✓", "green"), False: ("•", "yellow")}


def step_prompt(n: int, total: int, step: Step, done: Optional[bool], checked: bool) -> Text:
    mark, style = MARK[done] if checked else ("…", "dim")
    text = Text()
    text.append(f"{mark} ", style=style)
    text.append(f"{n}/{total} {field(step, 'title')}")
    text.append(" (root)" if step.as_ == "root" else "", style="dim")
    if checked and done:
        text.append("  " + _("already done"), style="green")
    return text


def _code(text: str) -> Syntax:
    return Syntax(text.rstrip("\n"), "bash", theme="ansi_dark", word_wrap=True,
                  background_color="default")


def _diff(text: str) -> Syntax:
    return Syntax(text.rstrip("\n"), "diff", theme="ansi_dark", word_wrap=True,
                  background_color="default")


def step_detail(step: Step, target_user: str, diff: str = "") -> Group:
    """A step as a person reviews it: its one call (a shell step: its commands, check and
    undo), the diff it would make to the files as they are now, its note."""
    who = "root" if step.as_ == "root" else target_user
    parts: List[Any] = [Text.assemble((field(step, "title"), "bold"), (
        "  " + _("{id}, as {user}").format(id=step.id, user=who), "dim"))]
    if step.why:
        parts.append(Text(field(step, "why"), style="italic dim"))
    if step.operation:
        parts.append(_code(step.run))
        if diff:
            parts.append(_diff(diff) if diff.startswith("---") else Text(diff, style="dim"))
        parts.append(Text(_("undo: the same call takes back what it gave"), style="dim"))
    else:
        parts += [Text(_("run:"), style="bold cyan"), _code(step.run),
                  Text(_("done when this succeeds:"), style="bold cyan"), _code(step.check)]
        if step.undo:
            parts += [Text(_("undo:"), style="bold cyan"), _code(step.undo)]
        else:
            parts.append(Text(_("undo: nothing (see the note)"), style="bold cyan"))
    if step.note:
        parts.append(Text(_("note: {note}").format(note=field(step, "note")), style="yellow"))
    return Group(*parts)


class ReviewScreen(WizardScreen):
    """4. Every step before anything runs."""

    BINDINGS = [
        Binding("r", "run", "Run"),
        Binding("e", "export", "Export"),
        # b, not only escape: JupyterLab's terminal gives a second quick escape to the page
        Binding("b", "back", "Back"),
        Binding("escape", "back", "Back", show=False),
    ]

    SUB_TITLE = N_("4/6 Review")

    def __init__(self, plan: Plan) -> None:
        super().__init__()
        self.plan = plan
        self.done: List[Optional[bool]] = [None] * len(plan.steps)
        self.checked = [False] * len(plan.steps)
        self.diffs: Dict[str, str] = {}

    def compose_body(self) -> ComposeResult:
        total = len(self.plan.steps)
        yield Static(self.summary(), id="review-summary")
        yield OptionList(*[Option(step_prompt(n, total, s, None, False), id=f"step-{n - 1}")
                           for n, s in enumerate(self.plan.steps, 1)], id="review-steps")
        with VerticalScroll(id="review-detail-box"):
            yield Static("", id="review-detail")
        with Horizontal(classes="buttons"):
            yield Button(_("Back (b)"), id="back", compact=True)
            yield Button(_("Export (e)"), id="export", compact=True)
            yield Button(_("Run these steps (r)"), id="run", variant="primary", compact=True,
                         disabled=not self.plan.steps)

    def summary(self) -> Text:
        total = len(self.plan.steps)
        if all(self.checked):
            n = sum(1 for d in self.done if d)
            # the catalogue has no plural entries: one msgid per form English needs
            one = (_("1 step, already done here (✓): it will be skipped. Nothing has run "
                     "yet.") if n else _("1 step, not done here yet. Nothing has run yet."))
            text = Text((one if total == 1 else
                         _("{total} steps, {n} already done here (✓): they will be skipped. "
                           "Nothing has run yet.")).format(total=total, n=n), style="dim")
        else:
            text = Text((_("1 step; ✓ = already done here (checked, not run). Nothing has run "
                           "yet.") if total == 1 else
                         _("{total} steps; ✓ = already done here (checked, not run). Nothing "
                           "has run yet.")).format(total=total), style="dim")
        blocked = self.blocked()
        if blocked:
            text.append("\n" + blocked, style="bold red")
        return text

    def blocked(self) -> str:
        """Why Run cannot work for this user (hpcwizard.session.no_sudo_here), while a step
        that needs sudo is not known to be done already: said before Run, not at step 1."""
        facts = self.app.facts
        why = no_sudo_here(facts.user) if facts is not None else ""
        if why and any(s.as_ == "root" and not self.done[i]
                       for i, s in enumerate(self.plan.steps)):
            return why
        return ""

    def on_mount(self) -> None:
        self.show_first()
        self.run_checks()

    def show_first(self, index: int = 0) -> None:
        steps = self.query_one("#review-steps", OptionList)
        if self.plan.steps:
            steps.highlighted = index
            self.show_step(index)
        else:
            self.query_one("#review-detail", Static).update(_("Nothing to do on this machine."))
        steps.focus()

    async def refresh_language(self) -> None:
        """Drawn again in the other language; the checks' results are kept, not run again."""
        highlighted = self.query_one("#review-steps", OptionList).highlighted or 0
        await self.recompose()
        total = len(self.plan.steps)
        options = self.query_one("#review-steps", OptionList)
        for i, step in enumerate(self.plan.steps):
            if self.checked[i]:
                options.replace_option_prompt_at_index(
                    i, step_prompt(i + 1, total, step, self.done[i], True))
        self.show_first(highlighted)
        self.after_language()

    @work(thread=True, exit_on_error=False, group="checks", exclusive=True)
    def run_checks(self) -> None:
        runner = self.app.runner_for(self.plan)
        for i, step in enumerate(self.plan.steps):
            try:
                done: Optional[bool] = bool(runner.check(step.as_, step.check))
            except Exception:  # noqa: BLE001 - a check that cannot run is "not known"
                done = None
            self.post_message(StepChecked(i, done))
        if hasattr(runner, "capture"):  # the diffs, read-only, after the checks
            self.post_message(DiffsReady(file_diffs(self.plan, runner)))

    def on_diffs_ready(self, message: DiffsReady) -> None:
        self.diffs = message.diffs
        highlighted = self.query_one("#review-steps", OptionList).highlighted
        if highlighted is not None and self.plan.steps:
            self.show_step(highlighted, scroll=False)

    def on_step_checked(self, message: StepChecked) -> None:
        i = message.index
        self.done[i] = message.done
        self.checked[i] = True
        total = len(self.plan.steps)
        self.query_one("#review-steps", OptionList).replace_option_prompt_at_index(
            i, step_prompt(i + 1, total, self.plan.steps[i], message.done, True))
        if all(self.checked):
            self.query_one("#review-summary", Static).update(self.summary())

    @on(OptionList.OptionHighlighted, "#review-steps")
    def _highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option_index is not None:
            self.show_step(event.option_index)

    def show_step(self, index: int, scroll: bool = True) -> None:
        step = self.plan.steps[index]
        self.query_one("#review-detail", Static).update(
            step_detail(step, self.plan.target.user, self.diffs.get(step.id, "")))
        if scroll:
            self.query_one("#review-detail-box", VerticalScroll).scroll_home(animate=False)

    def commands_text(self) -> str:
        """Every step's exact text, as shown (for tests and copy)."""
        return "\n".join(f"{s.run}\n{s.check}\n{s.undo}" for s in self.plan.steps)

    def action_run(self) -> None:
        self.app.start_run(self.plan)

    def action_export(self) -> None:
        self.app.push_screen(ExportScreen(self.plan))

    def check_action(self, action: str, parameters: tuple):
        if action == "run":
            return bool(self.plan.steps)
        return super().check_action(action, parameters)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        {"back": self.action_back, "export": self.action_export,
         "run": self.action_run}[event.button.id or "back"]()
