"""Choose: framework, network, job user, SSH port, host-key policy, instances. Each typed
value is checked as it is typed with the same functions the CLI uses (hpcwizard.validate),
and the whole with make_choices and build_plan; a refusal shows at its field."""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Optional, Tuple

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Input, Label, RadioButton, RadioSet, Static

from hpcwizard import vocab
from hpcwizard.i18n import N_, _
from hpcwizard.peers import default_peers, pattern_list
from hpcwizard.validate import BadInput, port, user_name

from .widgets import CoreCheck, WizardScreen

if TYPE_CHECKING:
    from hpcwizard.facts import Facts


def _user(value: str) -> None:
    if value.strip():
        user_name(value.strip())


def _port(value: str) -> None:
    port(value)


def _peers(value: str) -> None:
    pattern_list(value.strip())


EVERY_HOST = N_("* is every host: every ssh of the job's user gets these settings, git over "
                "ssh too. Name the instances, e.g. job-worker-*")


def derived_peers(facts: Facts) -> Tuple[str, str, bool]:
    """What the Instances field starts with, what its hint says, and whether that is a
    warning: the job's hosts as the platform names them (hpcwizard.peers), or the refusal
    of a platform variable that cannot be read, at the field it is about."""
    import os
    import socket

    hostname = facts.hostname if facts is not None else socket.gethostname()
    try:
        peers = default_peers(os.environ, hostname)
    except BadInput as exc:
        return "", str(exc), True
    if peers.warning:
        return peers.pattern, _(EVERY_HOST), True
    return peers.pattern, _("ssh Host patterns of the job's instances, from {source}.").format(
        source=peers.source), False


def ib_unavailable(facts: Facts) -> str:
    """Why InfiniBand cannot be chosen here, or "" when a port is active."""
    if facts is None or facts.active_ports:
        return ""
    if not facts.hcas:
        return _("no RDMA device in this container")
    if all(h.software for h in facts.hcas):
        return _("only software RDMA (rxe/siw): no InfiniBand hardware")
    ports = [f"{p.name} {p.state}" for h in facts.hcas if not h.software for p in h.ports]
    return (_("no active port ({ports})").format(ports=", ".join(ports)) if ports
            else _("no InfiniBand port"))


def radio_buttons(choice: "vocab.Choice", rdma_missing: bool = False) -> ComposeResult:
    """A button for each of the choice's values (hpcwizard.vocab), its default pressed; a
    value that needs RDMA is offered but cannot be pressed where no RDMA port is active."""
    for value in choice.values:
        yield RadioButton(_(value.label), value=value.id == choice.default,
                          id=f"{choice.name}-{value.id}", disabled=value.rdma and rdma_missing)


def peers_hint(value: str, derived: Tuple[str, str, bool]) -> Tuple[str, bool]:
    """The Instances hint for what the field holds now: the derived value's own hint (where
    it came from, or its warning), the warning for a `*` typed by hand, else what it is."""
    pattern, hint, warn = derived
    if value.strip() == pattern:
        return hint, warn
    if "*" in value.split():
        return _(EVERY_HOST), True
    return _("ssh Host patterns of the job's instances."), False


FIELDS = ("user", "ssh_port", "peers")
# What PyTorch does not use (hpcwizard.choices.SSH_ONLY): greyed out while it is chosen
SSH_FIELDS = ("ssh_port", "host_keys", "peers")
FIELD_OF_ERROR = {"user": "user", "port": "ssh_port", "peers": "peers"}  # BadInput.field


class PickThenNext(RadioSet):
    """A RadioSet where Enter picks the highlighted value and, on the value already picked,
    goes Next: Enter is Choose's Next key (a browser keeps Ctrl+N for a new window), and
    Space still picks."""

    BINDINGS = [Binding("enter", "pick_or_next", "Next", show=False)]

    def action_pick_or_next(self) -> None:
        index = self._selected
        buttons = list(self.query(RadioButton))
        if index is not None and 0 <= index < len(buttons) and not buttons[index].value:
            self.action_toggle_button()
        else:
            self.screen.action_next()  # type: ignore[attr-defined]


class ChooseScreen(WizardScreen):
    """2. What the job needs."""

    BINDINGS = [
        # Enter (in a field it submits, on a choice it goes on once the choice is picked) and
        # n; ctrl+n too, which a terminal gives but a desktop browser keeps for a new window
        Binding("enter,n,ctrl+n", "next", "Next"),
        # b, not only escape: JupyterLab's terminal gives a second quick escape to the page
        Binding("b", "back", "Back"),
        Binding("escape", "back", "Back", show=False),
    ]

    SUB_TITLE = N_("2/6 Choose")

    def compose_body(self) -> ComposeResult:
        facts = self.app.facts
        why_not_ib = ib_unavailable(facts)
        me = facts.user.name if facts else _("you")
        with VerticalScroll(id="choose-body", classes="body"):
            with Horizontal(classes="field"):
                yield Label(_("Framework"), classes="field-label")
                with PickThenNext(id="framework", classes="inline"):
                    yield from radio_buttons(vocab.FRAMEWORK)
            with Horizontal(classes="field"):
                yield Label(_("Network"), classes="field-label")
                with PickThenNext(id="network", classes="inline"):
                    yield from radio_buttons(vocab.NETWORK, rdma_missing=bool(why_not_ib))
            yield Static(_("InfiniBand unavailable: {why}").format(why=why_not_ib) if why_not_ib
                         else _("InfiniBand: {ports} active").format(
                             ports=", ".join(p.name for p in facts.active_ports)),
                         id="network-hint", classes="hint" + (" warn" if why_not_ib else ""))
            with Horizontal(classes="field"):
                yield Label(_("Job user"), classes="field-label")
                yield Input("", placeholder=_("{name} (you)").format(name=me), id="user",
                            compact=True,
                            validators=[CoreCheck(_user)], validate_on=["changed", "submitted"])
            yield Static(_("The user the job runs as; empty: you."), id="user-hint",
                         classes="hint")
            with Horizontal(classes="field"):
                yield Label(_("SSH port"), classes="field-label")
                yield Input(str(vocab.DEFAULT_SSH_PORT), id="ssh_port", compact=True, max_length=5,
                            validators=[CoreCheck(_port)], validate_on=["changed", "submitted"])
            yield Static(_("sshd between the instances listens here."), id="ssh_port-hint",
                         classes="hint")
            with Horizontal(classes="field"):
                yield Label(_("Host keys"), classes="field-label")
                with PickThenNext(id="host_keys", classes="inline"):
                    yield from radio_buttons(vocab.HOST_KEYS)
            self.derived = derived_peers(facts)
            peers, peers_text, peers_warn = self.derived
            with Horizontal(classes="field"):
                yield Label(_("Instances"), classes="field-label")
                yield Input(peers, id="peers", compact=True,
                            validators=[CoreCheck(_peers)], validate_on=["changed", "submitted"])
            yield Static(peers_text, id="peers-hint",
                         classes="hint" + (" warn" if peers_warn else ""))
            yield Static("", id="choose-error", classes="hint error")
        with Horizontal(classes="buttons"):
            yield Button(_("Back (b)"), id="back", compact=True)
            yield Button(_("Next ⏎"), id="next", variant="primary", compact=True)

    def on_mount(self) -> None:
        self.hints: Dict[str, str] = {}
        for name in FIELDS:
            self.hints[name] = str(self.query_one(f"#{name}-hint", Static).content)
        self.show_ssh_fields()
        self.query_one("#framework", RadioSet).focus()

    async def refresh_language(self) -> None:
        """Drawn again in the other language, with what the user typed and picked kept."""
        values = self.raw_values(every=True)
        focused = self.focused.id if self.focused is not None else None
        await self.recompose()
        for name in ("framework", "network", "host_keys"):
            button = self.query(f"#{name}-{values[name]}")
            if button:
                button.first(RadioButton).value = True
        for name in FIELDS:
            self.query_one(f"#{name}", Input).value = values[name]
        self.on_mount()
        if focused and self.query(f"#{focused}"):
            self.query_one(f"#{focused}").focus()
        self.after_language()

    def pytorch(self) -> bool:
        return not vocab.uses_ssh(self._radio("framework"))

    def show_ssh_fields(self) -> None:
        """SSH port, Host keys and Instances are MPI's (mpirun starts its ranks over SSH):
        greyed out, and not handed to the core, while PyTorch is chosen."""
        off = self.pytorch()
        for name in SSH_FIELDS:
            self.query_one(f"#{name}").disabled = off
        if off:
            hint = self.query_one("#ssh_port-hint", Static)
            hint.update(_("PyTorch needs no SSH (torchrun): these are for MPI only."))
            hint.remove_class("error")
        else:  # what the port field says again, its refusal included
            port = self.query_one("#ssh_port", Input)
            result = port.validate(port.value)
            self.show_field_error("ssh_port", "" if result is None or result.is_valid
                                  else "; ".join(result.failure_descriptions))

    def on_radio_set_changed(self, event: RadioSet.Changed) -> None:
        if event.radio_set.id == "framework" and hasattr(self, "hints"):
            self.show_ssh_fields()

    # --- field-level refusal -------------------------------------------------------------

    def show_field_error(self, name: str, message: str) -> None:
        hint = self.query_one(f"#{name}-hint", Static)
        text, warn = self.hints.get(name, ""), False
        if name == "peers":
            text, warn = peers_hint(self.query_one("#peers", Input).value, self.derived)
        hint.update(message or text)
        hint.set_class(bool(message), "error")
        hint.set_class(warn and not message, "warn")

    def on_input_changed(self, event: Input.Changed) -> None:
        name = event.input.id or ""
        if name in FIELDS and event.validation_result is not None:
            self.show_field_error(name, "; ".join(event.validation_result.failure_descriptions))
        self.query_one("#choose-error", Static).update("")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.action_next()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "next":
            self.action_next()
        elif event.button.id == "back":
            self.action_back()

    # --- values ----------------------------------------------------------------------------

    def _radio(self, name: str) -> str:
        pressed = self.query_one(f"#{name}", RadioSet).pressed_button
        return (pressed.id or "").split("-", 1)[1] if pressed else ""

    def raw_values(self, every: bool = False) -> Dict[str, str]:
        """The fields as typed; for PyTorch without the SSH ones (unless every), which the
        core would set aside anyway."""
        values = {
            "framework": self._radio("framework"),
            "network": self._radio("network"),
            "user": self.query_one("#user", Input).value.strip(),
            "ssh_port": self.query_one("#ssh_port", Input).value.strip(),
            "host_keys": self._radio("host_keys"),
            "peers": self.query_one("#peers", Input).value.strip(),
        }
        if self.pytorch() and not every:
            for name in SSH_FIELDS:
                del values[name]
        return values

    def action_next(self) -> None:
        """Validate every field, then the whole; on success the App builds the plan."""
        first_bad: Optional[str] = None
        for name in FIELDS:
            widget = self.query_one(f"#{name}", Input)
            if widget.disabled:
                continue
            result = widget.validate(widget.value)
            if result is not None and not result.is_valid:
                self.show_field_error(name, "; ".join(result.failure_descriptions))
                first_bad = first_bad or name
        if first_bad:
            self.query_one(f"#{first_bad}", Input).focus()
            return
        try:
            self.app.choose(self.raw_values())
        except BadInput as exc:
            message = str(exc)
            field = FIELD_OF_ERROR.get(getattr(exc, "field", ""))
            if field:
                self.show_field_error(field, message)
                self.query_one(f"#{field}", Input).focus()
            else:
                self.query_one("#choose-error", Static).update(message)
