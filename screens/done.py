"""Done: what was done and skipped, the record's path, Export to a path the user can edit,
and the verification (hpcwizard.verify, as `hpcwizard verify`): it starts by itself after a
run that finished, on this instance and on the hosts the platform names; the user can name
other hosts and verify again. Also where the preset path ends: the image to start from, and
its launch script (nothing here changed, so there is nothing here to verify)."""
from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Tuple, Union

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Input, Label, Static

from hpcwizard.i18n import N_, _, field, ljust, pick, width
from hpcwizard.report import status_word
from hpcwizard.report_verify import check_lines, counts_line, mark, mark_width
from hpcwizard.runtime import from_environment, hosts_from_text
from hpcwizard.validate import BadInput

from .widgets import ExportPanel, WizardScreen

# The hosts field is checked when typing pauses this long, and on enter: each check runs
# recipes/runtime.sh (about 10 ms; a 4096-host pattern, a quarter second), not at every key.
CHECK_PAUSE = 0.4  # seconds

if TYPE_CHECKING:
    from textual.timer import Timer

    from hpcwizard.hosts import Hosts
    from hpcwizard.plan import Plan
    from hpcwizard.record import Record
    from hpcwizard.verify import Check, Report

# how a line of the verification looks, by its role (report_verify.check_lines)
ROLE_STYLE = {"pass": "green", "fail": "bold red", "skip": "dim", "ran": "dim",
              "explain": "", "cause": "yellow", "fix": "cyan", "from": "dim"}


def _hosts_from_text(text: str) -> Optional[Hosts]:
    """The Hosts typed in the field (None when empty: this instance only)."""
    return hosts_from_text(text, _("hosts")) if text.strip() else None


def platform_hosts() -> Tuple[Optional[Hosts], str]:
    """The hosts the platform's variables name (Hosts or None), and the error if they are
    unreadable ("" otherwise)."""
    import os

    try:
        return from_environment(os.environ), ""
    except BadInput as exc:
        return None, str(exc)


class DoneBody(VerticalScroll):
    """The screen's scrolling body; tells the screen when its size or its content's height
    changed (a Resize comes for either), the moment a pending scroll can be made."""

    def on_resize(self) -> None:
        self.call_after_refresh(self.screen.scroll_to_verify)


class DoneScreen(WizardScreen):
    """6. The result, and the files to keep."""

    BINDINGS = [
        # b, not only escape: JupyterLab's terminal gives a second quick escape to the page
        Binding("b", "back", "Back"),
        Binding("escape", "back", "Back", show=False),
        Binding("w", "write", "Write export"),
        Binding("v", "verify", "Verify"),
        Binding("q", "quit_done", "Quit"),
    ]

    def __init__(self, plan: Plan, record: Optional[Record] = None, status: str = "") -> None:
        super().__init__()
        self.plan = plan
        self.record = record
        self.status = status
        self.SUB_TITLE = N_("6/6 Done") if record is not None else N_("6/6 Preset image")
        # the verification: what the field started with, and what came back (kept across F2)
        self.env_hosts, self.env_error = platform_hosts() if self.can_verify else (None, "")
        self.hosts_text = ",".join(self.env_hosts.names) if self.env_hosts else ""
        self.verify_state = "idle"  # idle | running | ended
        self.checks: List[Check] = []  # as they finish, then in the report's order
        self.report: Optional[Report] = None
        self.verify_seconds = 0.0
        self.verify_error = ""
        self.verified_hosts: Optional[Hosts] = None
        self.check_timer: Optional[Timer] = None  # the hosts field's check, when typing pauses
        self.started = False
        self.scroll_pending = False  # scroll the failures into view when laid out
        self.export_kept = ("", "")  # the format chosen and the file name typed, across F2

    @property
    def can_verify(self) -> bool:
        """The run configured this machine (not undone, not stopped part-way)."""
        return self.record is not None and self.status == "done"

    @property
    def BACK(self) -> bool:  # type: ignore[override]
        return self.record is None  # nothing ran: going back changes nothing

    def compose_body(self) -> ComposeResult:
        with DoneBody(id="done-body", classes="body"):
            if self.record is None:
                yield Static(self.preset_text(), id="done-summary")
                default = "launch"
            else:
                yield Static(self.result_text(), id="done-summary")
                default = "setup"
            fmt, path = self.export_kept
            yield ExportPanel(self.plan, default=fmt or default, path=path, id="done-export")
            if self.can_verify:
                with Horizontal(classes="verify-row"):
                    yield Label(_("Verify"), classes="field-label")
                    yield Input(self.hosts_text, id="verify-hosts", compact=True,
                                placeholder=_("hosts, e.g. node1,node2 or job-{0..3}"))
                    yield Button(_("Verify (v)"), id="verify-run", compact=True)
                yield Static(self.hosts_hint(), id="verify-hint", classes="hint")
                yield Static(self.verify_text(), id="verify-results")
        with Horizontal(classes="buttons"):
            if self.record is None:
                yield Button(_("Back (b)"), id="back", compact=True)
            yield Button(_("Quit (q)"), id="quit", compact=True)

    def on_mount(self) -> None:
        # Enter writes; the view stays at the top, where the image or the outcome is (on a
        # short terminal, scrolling to the button would hide it)
        self.query_one("#export-write", Button).focus(scroll_visible=False)
        if not self.started and self.can_verify:
            self.started = True
            self.action_verify()  # a finished run: does it work?

    async def refresh_language(self) -> None:
        """Drawn again in the other language, keeping the hosts typed and the export's
        format and file name. The checks already shown keep the language they were made in;
        Verify again makes them anew."""
        if self.can_verify:
            self.hosts_text = self.query_one("#verify-hosts", Input).value
        panel = self.query_one(ExportPanel)
        self.export_kept = (panel.fmt, panel.path)
        if self.check_timer is not None:  # its widgets go away with the old drawing
            self.check_timer.stop()
            self.check_timer = None
        await self.recompose()
        self.after_language()

    def after_language(self) -> None:
        self.on_mount()
        super().after_language()

    def check_action(self, action: str, parameters: Tuple[object, ...]) -> Optional[bool]:
        if action == "verify" and not self.can_verify:
            return False
        return super().check_action(action, parameters)

    # --- verification --------------------------------------------------------------------------

    def hosts_hint(self, error: str = "", value: Optional[str] = None) -> Text:
        """Under the hosts field: the refusal, else where the hosts came from (while the
        field still holds the platform's), else what to type."""
        if error:
            return Text(error, style="bold red")
        value = self.hosts_text if value is None else value
        if self.env_error and not value.strip():
            # the platform's variables name hosts hpcwizard cannot read: refused, as a bad
            # list typed here would be (never "this instance only" in silence)
            return Text(self.env_error, style="bold red")
        if self.env_hosts is not None and value.strip() == ",".join(self.env_hosts.names):
            return Text(_("from {source}; empty: this instance only").format(
                source=self.env_hosts.source))
        return Text(_("the job's instances, to check SSH and {framework} across them; empty: "
                      "this instance only").format(
            framework="mpirun" if self.plan.choices.framework == "mpi" else "torch.distributed"))

    def action_verify(self) -> None:
        """Check here and across the hosts in the field; a bad host list is refused at the
        field, with the reason."""
        if not self.can_verify:
            return
        if self.verify_state == "running":
            self.notify(_("A verification is running; wait for it to end."))
            return
        if self.check_timer is not None:  # enter checks now
            self.check_timer.stop()
            self.check_timer = None
        hosts_input = self.query_one("#verify-hosts", Input)
        text = hosts_input.value.strip()
        try:
            if not text and self.env_error:
                raise BadInput(self.env_error)  # a platform variable is set but unreadable
            if self.env_hosts is not None and text == ",".join(self.env_hosts.names):
                hosts = self.env_hosts  # keeps its source ("SLURM_JOB_NODELIST", ...)
            else:
                hosts = _hosts_from_text(text)
        except BadInput as exc:
            self.query_one("#verify-hint", Static).update(self.hosts_hint(str(exc)))
            hosts_input.focus()
            return
        if not self.app.start_verify(hosts):
            return
        self.query_one("#verify-hint", Static).update(self.hosts_hint(value=text))
        self.scroll_pending = False
        self.verify_state, self.checks, self.report, self.verify_error = "running", [], None, ""
        self.verified_hosts = hosts
        self._show_results()

    def verify_checked(self, check: Check) -> None:
        self.checks.append(check)
        self._show_results()

    def verify_ended(self, report: Optional[Report], seconds: float, error: str) -> None:
        self.verify_state, self.report, self.verify_seconds = "ended", report, seconds
        self.verify_error = error
        if report is not None:
            self.checks = list(report.checks)
        self._show_results()
        if error or (report is not None and not report.ok):
            # the failures are what the user must read now: from the Verify row down, once
            # the body has its new height (DoneBody.on_resize), or now if it did not change
            self.scroll_pending = True
            self.call_after_refresh(self.scroll_to_verify)

    def scroll_to_verify(self) -> None:
        """The Verify row to the top of the view. Done once the body is tall enough for it:
        the results' own height arrives a refresh before the body's, and a scroll made in
        between stops short (a CI run caught it). Until then each new height tries again;
        after it, resizes leave the view be."""
        if not self.scroll_pending:
            return
        body = self.query_one("#done-body", DoneBody)
        for row in self.query(".verify-row"):
            row.scroll_visible(top=True, animate=False)
            self.scroll_pending = row.virtual_region.y > body.max_scroll_y

    def _show_results(self) -> None:
        for results in self.query("#verify-results").results(Static):
            results.update(self.verify_text())

    def verify_text(self) -> Union[Text, Group]:
        """The verification as shown: who was checked, the outcome, then each check (the
        failures first once it ended), its further lines hanging under its title."""
        from rich.table import Table

        head = Text()
        if self.verify_state == "idle":
            head.append(_("Not verified yet: press v to check SSH, names and {framework} "
                          "here and across the hosts above.").format(
                framework="MPI" if self.plan.choices.framework == "mpi" else "PyTorch"),
                style="dim")
            return head
        hosts = self.verified_hosts
        head.append((_("Checked on: this instance only") if hosts is None else
                     _("Checked on: this instance and {names}").format(
                         names=", ".join(hosts.names))) + "\n", style="bold")
        checks = self.checks
        if self.verify_state == "running":
            head.append(_("Verifying… {n} checks finished").format(n=len(checks)),
                        style="dim italic")
        elif self.verify_error:
            head.append(_("verify could not run: {error}").format(error=self.verify_error),
                        style="bold red")
        elif self.report is not None:
            head.append(counts_line(self.report.counts, self.verify_seconds),
                        style="bold green" if self.report.ok else "bold red")
            # what needs the user first: failures, then what could not be checked
            checks = sorted(checks, key=lambda c: {"fail": 0, "skip": 1}.get(c.status, 2))
        grid = Table.grid(padding=(0, 2, 0, 0))
        grid.add_column(no_wrap=True, width=mark_width())
        grid.add_column(ratio=1)
        for check in checks:
            for role, line in check_lines(check):
                style = ROLE_STYLE.get(role, "")
                grid.add_row(Text(mark(role), style=style) if role == check.status else "",
                             Text(line, style=style))
        return Group(head, grid)

    def preset_text(self) -> Text:
        preset = self.plan.recommendation.preset
        text = Text()
        text.append(_("Start the job from the preset image:") + "\n", style="bold green")
        text.append(f"  {preset.image}\n" if preset else
                    "  " + _("(no preset for these choices)") + "\n", style="bold")
        if preset:
            text.append("  " + _("{title}; provides {provides}.").format(
                title=field(preset, "title"),
                provides=pick(", ".join(preset.provides), preset.i18n, "provides")) + "\n")
        text.append(_("Nothing on this machine was changed. Write the launch script below, "
                      "then start the instances from that image."), style="dim")
        return text

    def result_text(self) -> Text:
        steps = self.record.steps
        count = {k: sum(1 for s in steps if s.outcome.status == k)
                 for k in ("done", "skipped", "user-skipped", "failed", "interrupted", "undone",
                           "pending")}
        text = Text()
        done = (_("Done: this machine is configured."), "bold green")
        if count["user-skipped"]:  # the run finished, but without a step that failed
            done = (_("Finished without the steps you skipped: the job may not work; "
                      "the verification below says."), "bold yellow")
        headline = {"done": done,
                    "undone": (_("Undone: the changes were taken back."), "bold magenta")}.get(
            self.status, (_("Stopped ({status}): not every step ran.").format(
                status=status_word(self.status)), "bold yellow"))
        text.append(headline[0] + "\n", style=headline[1])
        parts = [_("{n} done").format(n=count["done"]),
                 _("{n} skipped (already done)").format(n=count["skipped"])]
        parts += [_("{n} {status}").format(n=count[k], status=status_word(k))
                  for k in ("user-skipped", "failed", "interrupted", "undone", "pending")
                  if count[k]]
        text.append("  " + _(", ").join(parts) + "\n")
        label_record, label_log = _("Record"), _("Log")
        cells = max(width(label_record), width(label_log)) + 1
        text.append(ljust(label_record, cells), style="bold")
        text.append(f"{self.record.path}\n")
        text.append(ljust(label_log, cells), style="bold")
        text.append(f"{self.record.log_path}\n")
        if self.status != "undone":
            text.append(_("To take it back: hpcwizard undo {path}").format(
                path=self.record.path), style="dim")
        text.rstrip()
        return text

    def action_write(self) -> None:
        self.query_one(ExportPanel).write()

    def action_quit_done(self) -> None:
        """After a run, q ends the wizard with the run's status; on the preset screen nothing
        has run and the export may not be written yet: it asks, as Ctrl+C does."""
        if self.record is None:
            self.app.action_quit_app()
        else:
            self.app.exit_with_status()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "verify-hosts":
            event.stop()
            self.action_verify()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "verify-hosts":
            # where the hosts come from, at once; whether they can be read, when typing pauses
            for hint in self.query("#verify-hint").results(Static):  # none mid-redraw
                hint.update(self.hosts_hint(value=event.value))
            if self.check_timer is not None:
                self.check_timer.stop()
            self.check_timer = self.set_timer(CHECK_PAUSE, self.check_hosts_field)

    def check_hosts_field(self) -> None:
        """The hosts typed, checked once typing paused: the refusal, else the usual hint."""
        self.check_timer = None
        hosts_input = next(self.query("#verify-hosts").results(Input), None)
        hint = next(self.query("#verify-hint").results(Static), None)
        if hosts_input is None or hint is None:  # mid-redraw: the redraw checks again
            return
        value = hosts_input.value
        error = ""
        if value.strip() and not (self.env_hosts is not None
                                  and value.strip() == ",".join(self.env_hosts.names)):
            try:
                _hosts_from_text(value)
            except BadInput as exc:
                error = str(exc)
        hosts_input.set_class(bool(error), "-invalid")  # the field's red border, as Input's own
        hint.update(self.hosts_hint(error, value))

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "verify-run":
            self.action_verify()
        elif event.button.id == "back":
            self.action_back()
        elif event.button.id == "quit":
            self.action_quit_done()
