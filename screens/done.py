"""Done: what was done and skipped, the record's path, and Export to a path the user can
edit. Also where the preset path ends: the image to start from, and its launch script."""
from __future__ import annotations

from typing import Any, Optional

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Static

from hpcwizard.i18n import N_, _, field, ljust, pick, width
from hpcwizard.report import status_word

from .widgets import ExportPanel, WizardScreen


class DoneScreen(WizardScreen):
    """6. The result, and the files to keep."""

    BINDINGS = [
        Binding("escape", "back", "Back"),
        Binding("w", "write", "Write export"),
        Binding("q", "quit_done", "Quit"),
    ]

    def __init__(self, plan: Any, record: Optional[Any] = None, status: str = "") -> None:
        super().__init__()
        self.plan = plan
        self.record = record
        self.status = status
        self.SUB_TITLE = N_("6/6 Done") if record is not None else N_("6/6 Preset image")

    @property
    def BACK(self) -> bool:  # type: ignore[override]
        return self.record is None  # nothing ran: going back changes nothing

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="done-body", classes="body"):
            if self.record is None:
                yield Static(self.preset_text(), id="done-summary")
                default = "launch"
            else:
                yield Static(self.result_text(), id="done-summary")
                default = "setup"
            yield ExportPanel(self.plan, default=default, id="done-export")
        with Horizontal(classes="buttons"):
            if self.record is None:
                yield Button(_("Back (esc)"), id="back", compact=True)
            yield Button(_("Quit (q)"), id="quit", compact=True)

    def on_mount(self) -> None:
        self.query_one("#export-write", Button).focus()

    def after_language(self) -> None:
        self.on_mount()
        super().after_language()

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
        count = {k: sum(1 for s in steps if s["status"] == k)
                 for k in ("done", "skipped", "failed", "interrupted", "undone", "pending")}
        text = Text()
        headline = {"done": (_("Done: this machine is configured."), "bold green"),
                    "undone": (_("Undone: the changes were taken back."), "bold magenta")}.get(
            self.status, (_("Stopped ({status}): not every step ran.").format(
                status=status_word(self.status)), "bold yellow"))
        text.append(headline[0] + "\n", style=headline[1])
        parts = [_("{n} done").format(n=count["done"]),
                 _("{n} skipped (already done)").format(n=count["skipped"])]
        parts += [_("{n} {status}").format(n=count[k], status=status_word(k))
                  for k in ("failed", "interrupted", "undone", "pending") if count[k]]
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
        self.app.exit_with_status()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "back":
            self.action_back()
        elif event.button.id == "quit":
            self.action_quit_done()
