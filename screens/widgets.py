"""Pieces several screens share: the screen base with header and footer, the keys help,
a yes/no question, and the export panel (Review and Done)."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Tuple

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.dom import DOMNode
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.validation import ValidationResult, Validator
from textual.widgets import Button, Footer, Header, Input, Label, RadioButton, RadioSet, Static

from hpcwizard.facts import Note
from hpcwizard.i18n import N_, _, get_language, width
from hpcwizard.validate import BadInput
from hpcwizard.vocab import EXPORT_FILE_NAMES

if TYPE_CHECKING:
    from hpcwizard.plan import Plan

# Short: the eight sit three to a row in 80 columns (wizard.tcss, #export-format)
FORMAT_LABELS = {"setup": N_("Setup script"), "dockerfile": N_("Dockerfile"),
                 "launch": N_("Launch script"), "sbatch": N_("Slurm sbatch"),
                 "mpijob": N_("MPIJob"), "pytorchjob": N_("PyTorchJob"),
                 "trainjob": N_("TrainJob"), "volcano": N_("Volcano Job")}
# Keys Textual's own classes bind (shown in the `?` help): translated like ours
TEXTUAL_KEYS = (N_("Focus Next"), N_("Focus Previous"), N_("Copy selected text"))
WROTE = {"setup": N_("Wrote setup script {path}"), "dockerfile": N_("Wrote dockerfile {path}"),
         "launch": N_("Wrote launch script {path}"),
         "sbatch": N_("Wrote Slurm batch script {path}"),
         "mpijob": N_("Wrote MPIJob manifest {path}"),
         "pytorchjob": N_("Wrote PyTorchJob manifest {path}"),
         "trainjob": N_("Wrote TrainJob manifest {path}"),
         "volcano": N_("Wrote Volcano Job manifest {path}")}
DEFAULT_PATHS = {fmt: f"./{name}" for fmt, name in EXPORT_FILE_NAMES.items()}


def translate_bindings(node: DOMNode) -> None:
    """The key descriptions of node (a screen, the app) in the chosen language. The class's
    BINDINGS keep the English msgid; the node's own copy gets the translation."""
    english = {}
    for cls in reversed(type(node).__mro__):
        for b in cls.__dict__.get("BINDINGS", ()):
            if isinstance(b, Binding):
                english[b.action] = b.description
    table = node._bindings.key_to_bindings
    for key, bindings in table.items():
        table[key] = [dataclasses.replace(b, description=_(english.get(b.action, b.description)))
                      for b in bindings]


class WizardScreen(Screen):
    """A step of the wizard: header, body, footer with this screen's keys. F2 (the App's
    key) switches the language: every screen on the stack is drawn again at once
    (refresh_language), keeping what the user typed and chose."""

    BACK = True  # b (or escape) goes back one screen (every screen before Run)
    SUB_TITLE = ""  # the msgid of the screen's title ("1/6 System")

    def compose(self) -> ComposeResult:
        self.shown_language = get_language()
        translate_bindings(self)
        if self.SUB_TITLE:
            self.sub_title = _(self.SUB_TITLE)
        yield Header(icon="")
        yield from self.compose_body()
        yield Footer()

    async def refresh_language(self) -> None:
        """Draw the screen again in the chosen language (screens with state they must keep
        override this)."""
        await self.recompose()
        self.after_language()

    def after_language(self) -> None:
        """What on_mount does to a freshly composed screen, minus starting work again."""
        self.refresh_bindings()

    async def on_screen_resume(self) -> None:
        if getattr(self, "shown_language", None) not in (None, get_language()):
            await self.refresh_language()

    def compose_body(self) -> ComposeResult:  # pragma: no cover - every screen overrides
        yield from ()

    def check_action(self, action: str, parameters: Tuple[object, ...]) -> Optional[bool]:
        if action == "back" and not self.BACK:
            return False
        return True

    def action_back(self) -> None:
        if self.BACK and len(self.app.screen_stack) > 2:
            self.app.pop_screen()


# Keys no terminal in a browser delivers (the browser or the OS keeps super+…): never shown
UNDELIVERED = ("super+",)


def keys_of(screen: Screen) -> List[Tuple[str, str]]:
    """The keys that do something on screen, the screen's then the App's, as (keys, what it
    does); the keys that do one thing on one line ("b / esc"). Read from the bindings, not from
    what the focused widget leaves active: System's Enter is the focused button's too."""
    from textual.actions import parse

    app = screen.app
    # the App's priority keys (ctrl+c) come first wherever the focus is
    taken = {k for k, bs in app._bindings.key_to_bindings.items() if any(b.priority for b in bs)}
    rows: Dict[str, List[str]] = {}
    for node in (screen, app):
        for key, bindings in node._bindings.key_to_bindings.items():
            if key.startswith(UNDELIVERED) or (node is screen and key in taken):
                continue
            for b in bindings:
                if not b.description:
                    continue
                target, action, params = parse(b.action)
                owner = app if target == "app" else node
                if owner.check_action(action, params) is False:
                    continue
                keys = rows.setdefault(b.description, [])
                shown = app.get_key_display(b)
                if shown not in keys:
                    keys.append(shown)
    return [(" / ".join(keys), what) for what, keys in rows.items()]


class CoreCheck(Validator):
    """A Textual validator around one hpcwizard.validate function: its BadInput text is the
    message shown under the field."""

    def __init__(self, check: Callable[[str], Any]) -> None:
        super().__init__()
        self.check = check

    def validate(self, value: str) -> ValidationResult:
        try:
            self.check(value)
        except BadInput as exc:
            return self.failure(str(exc))
        return self.success()


class KeysScreen(ModalScreen[None]):
    """`?`: the keys of the screen below, in a box."""

    BINDINGS = [Binding("escape,question_mark,f1,q", "dismiss", "Close")]

    def __init__(self, title: str, keys: Iterable[Tuple[str, str]]) -> None:
        super().__init__()
        self.keys_title = title
        self.keys = list(keys)

    def compose(self) -> ComposeResult:
        translate_bindings(self)
        text = Text()
        cells = max((width(k) for k, _what in self.keys), default=4)
        for key, what in self.keys:
            text.append(f"  {key}{' ' * (cells - width(key))}  ", style="bold")
            text.append(f"{what}\n")
        text.append("\n  " + _("tab / shift+tab move between fields; the mouse works too."),
                    style="dim")
        text.append("\n  " + _("F2 switches the language (English / 中文)."), style="dim")
        # scrolls when the terminal is short (60x12): Close stays reachable
        with VerticalScroll(id="keys-box", classes="dialog"):
            yield Label(_("Keys: {screen}").format(screen=self.keys_title),
                        classes="dialog-title")
            yield Static(text, id="keys-text")
            yield Button(_("Close"), id="keys-close", compact=True)
        yield Footer()  # the dialog's own keys, over those of the screen below

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(None)


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question; escape is no."""

    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n,escape", "answer(False)", "No")]

    def __init__(self, question: str, yes: str = "", no: str = "") -> None:
        super().__init__()
        self.question = question
        self.yes, self.no = yes or _("Yes"), no or _("No")

    def compose(self) -> ComposeResult:
        translate_bindings(self)
        with VerticalScroll(id="confirm-box", classes="dialog"):
            yield Static(self.question, id="confirm-question")
            with Horizontal(classes="buttons"):
                yield Button(_("{label} (y)").format(label=self.yes), id="confirm-yes",
                             variant="error", compact=True)
                yield Button(_("{label} (n)").format(label=self.no), id="confirm-no",
                             compact=True)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#confirm-no", Button).focus()

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "confirm-yes")


class ChoiceSet(RadioSet):
    """A RadioSet whose highlight starts on the chosen button. (Textual's highlights the
    first one when it is mounted, whichever is chosen: on the preset path "Setup script"
    looked chosen while "Launch script" was.)"""

    def on_mount(self) -> None:
        self.call_later(self.highlight_chosen)  # after RadioSet's own Mount handler

    def highlight_chosen(self) -> None:
        if self.pressed_index >= 0:
            self._selected = self.pressed_index


class ExportPanel(Vertical):
    """Choose a format, edit the path, write. The text is render_export(plan, fmt): the same
    as `hpcwizard export --format FMT`."""

    class Written(Message):
        def __init__(self, path: Path, fmt: str) -> None:
            super().__init__()
            self.path = path
            self.fmt = fmt

    def __init__(self, plan: Plan, default: str = "", id: Optional[str] = None,
                 path: str = "") -> None:
        """path: the file name to start with (what the user had typed, drawn again after
        F2); empty: the format's default."""
        super().__init__(id=id, classes="export")
        # kept lazy: Textual's first frame does not wait for export (and what it imports)
        from hpcwizard.export import export_formats

        self.plan = plan
        self.formats: List[str] = list(export_formats())
        self.fmt = default if default in self.formats else self.formats[0]
        self.start_path = path

    def compose(self) -> ComposeResult:
        with Horizontal(classes="export-row formats"):
            yield Label(_("Export"), classes="field-label")
            with ChoiceSet(id="export-format", classes="inline"):
                for fmt in self.formats:
                    yield RadioButton(_(FORMAT_LABELS.get(fmt, fmt)), value=fmt == self.fmt,
                                      id=f"fmt-{fmt}")
        with Horizontal(classes="export-row"):
            yield Label(_("To file"), classes="field-label")
            yield Input(self.start_path or DEFAULT_PATHS.get(self.fmt, f"./hpcwizard-{self.fmt}"),
                        id="export-path", compact=True)
            yield Button(_("Write"), id="export-write", variant="primary", compact=True)
        yield Static("", id="export-result")

    @property
    def path(self) -> str:
        """What the file name field holds (kept across F2)."""
        return self.query_one("#export-path", Input).value

    def on_radio_set_changed(self, event: RadioSet.Changed) -> None:
        event.stop()
        fmt = (event.pressed.id or "fmt-").removeprefix("fmt-")
        path = self.query_one("#export-path", Input)
        if path.value == DEFAULT_PATHS.get(self.fmt, ""):  # the user did not edit it
            path.value = DEFAULT_PATHS.get(fmt, f"./hpcwizard-{fmt}")
        self.fmt = fmt

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "export-path":
            event.stop()
            self.write()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "export-write":
            event.stop()
            self.write()

    def _say(self, text: str, error: bool = False) -> None:
        result = self.query_one("#export-result", Static)
        result.set_class(error, "error")
        result.update(Text(text))
        # on a short terminal the line is below the fold (62x16: under eight formats):
        # the user must see what Write did
        self.call_after_refresh(lambda: result.scroll_visible(animate=False))

    def write(self, force: "bool | Tuple[Path, ...]" = False) -> Optional[Path]:
        """session.write_export, as `hpcwizard export -o PATH`: every file the format needs,
        the same modes. Files already at those names are replaced only after the user says
        so here (the command line's --force)."""
        # kept lazy: Textual's first frame does not wait for session (and what it imports)
        from hpcwizard.session import ExportExists, write_export
        raw = self.query_one("#export-path", Input).value.strip()
        if not raw:
            self._say(_("Give a file name to write to."), error=True)
            return None
        out = Path(raw).expanduser()
        try:
            written = write_export(self.plan, self.fmt, out, force=force)
        except ExportExists as exc:
            fmt, asked = self.fmt, exc.paths

            def answer(replace: Optional[bool]) -> None:
                if not (replace and self.fmt == fmt and self.query_one(
                        "#export-path", Input).value.strip() == raw):
                    self._say(_("Nothing was written: {paths} stays as it is.").format(
                        paths=", ".join(str(p) for p in asked)), error=True)
                    return
                self.write(force=asked)  # those it asked about, nothing that came since

            self.app.push_screen(ConfirmScreen(
                _("{paths} already exists. Replace it?").format(
                    paths=", ".join(str(p) for p in exc.paths)),
                yes=_("Replace"), no=_("Keep it")), answer)
            return None
        except BadInput as exc:
            self._say(str(exc), error=True)
            return None
        except (OSError, ValueError) as exc:
            self._say(_("could not write {path}: {error}").format(path=out, error=exc),
                      error=True)
            return None
        full = written[0].resolve()
        said = _(WROTE.get(self.fmt, N_("Wrote {path}"))).format(path=full)
        if len(written) > 1:
            said += "\n" + _("and beside it: {names}").format(
                names=", ".join(p.name for p in written[1:]))
        self._say(said)
        self.post_message(self.Written(full, self.fmt))
        return full


class ExportScreen(ModalScreen[None]):
    """Export from Review, without running anything."""

    BINDINGS = [Binding("escape", "dismiss", "Close")]

    def __init__(self, plan: Plan) -> None:
        super().__init__()
        self.plan = plan

    def compose(self) -> ComposeResult:
        translate_bindings(self)
        with VerticalScroll(id="export-box", classes="dialog"):
            yield Label(_("Export the plan (nothing runs)"), classes="dialog-title")
            yield ExportPanel(self.plan)
            yield Button(_("Close (esc)"), id="export-close", compact=True)
        yield Footer()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "export-close":
            self.dismiss(None)


def bullet_text(items: Iterable[str], style: str = "") -> Text:
    """One bullet per item; a detection Note (a plan's warnings carry them) in the chosen
    language."""
    text = Text()
    for item in items:
        text.append("• ", style="bold")
        text.append(f"{item.shown() if isinstance(item, Note) else item}\n", style=style)
    text.rstrip()
    return text
