"""Recommend: the preset image or configuring here, with the plan's reasons; the user picks."""
from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Static

from .widgets import WizardScreen, bullet_text


class RecommendScreen(WizardScreen):
    """3. Preset image or configure here."""

    BINDINGS = [
        Binding("p", "preset", "Use preset"),
        Binding("c", "configure", "Configure here"),
        Binding("escape", "back", "Back"),
    ]

    def __init__(self, plan: Any) -> None:
        super().__init__()
        self.sub_title = "3/6 Recommend"
        self.plan = plan

    def compose_body(self) -> ComposeResult:
        plan = self.plan
        rec = plan.recommendation
        preset = rec.preset
        c = plan.choices
        head = Text()
        head.append(f"{c.framework.upper() if c.framework == 'mpi' else 'PyTorch'} over "
                    f"{'InfiniBand' if c.network == 'ib' else 'TCP'}, job user "
                    f"{plan.target.user}, SSH port {c.ssh_port}\n\n", style="dim")
        if rec.path == "preset" and preset is not None:
            head.append("Recommended: start the job from the preset image\n", style="bold green")
            head.append(f"  {preset.image}\n", style="bold")
            head.append(f"  {preset.title} ({preset.id})", style="")
        else:
            head.append("Recommended: configure this machine", style="bold green")
            head.append(f" ({len(plan.steps)} steps, reviewed before anything runs)")
        with VerticalScroll(id="recommend-body", classes="body"):
            yield Static(head, id="recommend-head")
            yield Static(Text("Why", style="bold"), classes="section")
            yield Static(bullet_text(rec.reasons), id="recommend-reasons")
            if preset is not None and rec.path != "preset":
                yield Static(Text(f"Preset image: {preset.image}", style="dim"),
                             id="recommend-alt")
            if plan.warnings:
                yield Static(bullet_text(plan.warnings, style="red"), id="recommend-warnings")
        with Horizontal(classes="buttons"):
            yield Button("Back (esc)", id="back", compact=True)
            yield Button("Use preset image (p)", id="preset", compact=True,
                         variant="primary" if rec.path == "preset" else "default",
                         disabled=preset is None)
            yield Button("Configure here (c)", id="configure", compact=True,
                         variant="primary" if rec.path != "preset" else "default")

    def on_mount(self) -> None:
        recommended = "preset" if self.plan.recommendation.path == "preset" else "configure"
        self.query_one(f"#{recommended}", Button).focus()

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
