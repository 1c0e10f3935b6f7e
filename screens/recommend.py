"""Recommend: the preset image or configuring here, with the plan's reasons; the user picks."""
from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Static

from hpcwizard import vocab
from hpcwizard.i18n import N_, _, field

from .widgets import WizardScreen, bullet_text

if TYPE_CHECKING:
    from hpcwizard.plan import Plan


class RecommendScreen(WizardScreen):
    """3. Preset image or configure here."""

    BINDINGS = [
        Binding("p", "preset", "Use preset"),
        Binding("c", "configure", "Configure here"),
        # b, not only escape: JupyterLab's terminal gives a second quick escape to the page
        Binding("b", "back", "Back"),
        Binding("escape", "back", "Back", show=False),
    ]

    SUB_TITLE = N_("3/6 Recommend")

    def __init__(self, plan: Plan) -> None:
        super().__init__()
        self.plan = plan

    def compose_body(self) -> ComposeResult:
        plan = self.plan
        rec = plan.recommendation
        preset = rec.preset
        c = plan.choices
        head = Text()
        what = dict(framework=c.framework.upper() if c.framework == "mpi" else "PyTorch",
                    network="InfiniBand" if c.network == "ib" else "TCP",
                    user=plan.target.user, port=c.ssh_port)
        head.append((_("{framework} over {network}, job user {user}, SSH port {port}")
                     if vocab.uses_ssh(c.framework) else
                     _("{framework} over {network}, job user {user}")).format(**what) + "\n\n",
                    style="dim")
        if rec.path == "preset" and preset is not None:
            head.append(_("Recommended: start the job from the preset image") + "\n",
                        style="bold green")
            head.append(f"  {preset.image}\n", style="bold")
            head.append(f"  {field(preset, 'title')} ({preset.id})", style="")
        else:
            head.append(_("Recommended: configure this machine"), style="bold green")
            n = len(plan.steps)
            # the catalogue has no plural entries: one msgid per form English needs
            head.append((_(" ({n} step, reviewed before it runs)") if n == 1 else
                         _(" ({n} steps, reviewed before anything runs)")).format(n=n))
        with VerticalScroll(id="recommend-body", classes="body"):
            yield Static(head, id="recommend-head")
            yield Static(Text(_("Why"), style="bold"), classes="section")
            yield Static(bullet_text(rec.reasons), id="recommend-reasons")
            if preset is not None and rec.path != "preset":
                yield Static(Text(_("Preset image: {image}").format(image=preset.image),
                                  style="dim"), id="recommend-alt")
            if plan.warnings:
                yield Static(bullet_text(plan.warnings, style="red"), id="recommend-warnings")
        with Horizontal(classes="buttons"):
            yield Button(_("Back (b)"), id="back", compact=True)
            yield Button(_("Use preset image (p)"), id="preset", compact=True,
                         variant="primary" if rec.path == "preset" else "default",
                         disabled=preset is None)
            yield Button(_("Configure here (c)"), id="configure", compact=True,
                         variant="primary" if rec.path != "preset" else "default")

    def on_mount(self) -> None:
        recommended = "preset" if self.plan.recommendation.path == "preset" else "configure"
        self.query_one(f"#{recommended}", Button).focus()

    def after_language(self) -> None:
        self.on_mount()
        super().after_language()

    def check_action(self, action: str, parameters: tuple):
        if action == "preset":
            return self.plan.recommendation.preset is not None
        return super().check_action(action, parameters)

    def action_preset(self) -> None:
        self.app.take_preset()

    def action_configure(self) -> None:
        self.app.configure_here()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        {"back": self.action_back, "preset": self.action_preset,
         "configure": self.action_configure}[event.button.id or "back"]()
