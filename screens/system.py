"""System: what was detected, at a glance. Up at once; the facts arrive from the App's
detection worker (FactsReady) and fill it in."""
from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, LoadingIndicator, Static

from hpcwizard.detect.summary import gpudirect_text
from hpcwizard.i18n import N_, _, ljust

from .early_frame import DETECTING, STEP
from .widgets import WizardScreen

if TYPE_CHECKING:
    from hpcwizard.facts import Facts

SUDO = {
    "root": (N_("root: can change the system"), "green"),
    "nopasswd": (N_("sudo without a password"), "green"),
    "password": (N_("sudo with a password (asked once, before the run)"), "yellow"),
    # sudo is installed but lets this user run nothing as root (not in sudoers)
    "denied": (N_("sudo is here but runs nothing as root for you: cannot change the system"),
               "red"),
    "none": (N_("no sudo: cannot change the system"), "red"),
    "unknown": (N_("sudo: unknown"), "yellow"),
}


def _mem(mib: Optional[int]) -> str:
    if mib is None:
        return _("memory unknown")
    return f"{mib / 1024:.1f} GiB" if mib >= 1024 else f"{mib} MiB"


def facts_table(facts: Facts) -> Table:
    """The facts as two columns; colour only where it means something."""
    o, u, r, rd = facts.os, facts.user, facts.runtime, facts.rdma
    t = Table.grid(padding=(0, 1), expand=True)
    t.add_column(style="bold", no_wrap=True, width=10)
    t.add_column(ratio=1)
    os_text = Text(o.pretty_name or o.id or _("unknown"))
    os_text.append(f"  {o.family}, " + (o.package_manager or _("no package manager")),
                   style="dim")
    t.add_row(_("OS"), os_text)
    sudo, colour = SUDO.get(u.sudo, (u.sudo, "yellow"))
    user = Text(f"{u.name} (uid {u.uid})  ")
    user.append(_(sudo), style=colour)
    if not u.in_passwd:  # sudo refuses such a user: why root steps cannot run
        user.append("; " + _("uid {uid} has no passwd entry").format(uid=u.uid), style="red")
    t.add_row(_("User"), user)
    container = Text(r.container)
    container.append(f"  PID 1 {r.pid1 or _('unknown')}" + ("  Jupyter" if r.jupyter else ""),
                     style="dim")
    t.add_row(_("Container"), container)
    machine = _("{cpus} CPUs, {memory}").format(
        cpus=facts.cpus if facts.cpus is not None else "?", memory=_mem(facts.memory_mib))
    if facts.hostname:
        machine = _("{machine}, host {host}").format(machine=machine, host=facts.hostname)
    t.add_row(_("Machine"), machine)
    if facts.gpus:
        names: List[str] = []
        for g in facts.gpus:
            if g.name not in names:
                names.append(g.name)
        g0 = facts.gpus[0]
        # the list separator of the language ("，" in Chinese, as on the Machine row)
        extra = _(", ").join(x for x in (_mem(g0.memory_mib) if g0.memory_mib else "",
                                      _("driver {version}").format(version=g0.driver)
                                      if g0.driver else "",
                                      f"CUDA {g0.cuda}" if g0.cuda else "") if x)
        gpu = Text(f"{len(facts.gpus)} × {', '.join(names)}")
        if extra:
            gpu.append(f"  {extra}", style="dim")
        t.add_row(_("GPUs"), gpu)
    else:
        t.add_row(_("GPUs"), Text(_("none"), style="dim"))
    if facts.hcas:
        ports = Text()
        for h in facts.hcas:
            if not h.ports:
                ports.append(_("{hca}: no ports").format(hca=h.name) + "\n", style="dim")
            for p in h.ports:
                state_style = "green" if p.active and not h.software else "red"
                ports.append(f"{p.name:<9} ")
                ports.append(f"{p.state:<7}", style=state_style)
                rate = _("rate ?") if p.rate_gbps is None else f"{p.rate_gbps:g} Gb/s"
                ports.append(f" {ljust(rate, 9)} {p.link_layer}")
                if h.software:
                    ports.append("  " + _("software (no speed-up)"), style="yellow")
                ports.append("\n")
        ports.rstrip()
        t.add_row("RDMA", ports)
    else:
        t.add_row("RDMA", Text(_("no RDMA devices"), style="dim"))
    memlock = _("unlimited") if rd.memlock_unlimited else (
        f"{rd.memlock_kib} KiB" if rd.memlock_kib is not None else _("unknown"))
    if facts.hcas:
        line = f"uverbs: {', '.join(rd.uverbs) or _('none')}  memlock: {memlock}"
        if facts.gpus:  # GPUDirect RDMA matters where GPUs and RDMA ports meet
            line += "  GPUDirect: " + gpudirect_text(rd)
        t.add_row("", Text(line, style="dim"))
    t.add_row(_("Installed"), installed_text(facts))
    return t


def installed_text(facts: Facts) -> Text:
    s = facts.software
    text = Text()

    def item(name: str, value: str) -> None:
        text.append(f"{name} ", style="bold" if value else "dim")
        text.append(f"{value or '—'}  ", style="" if value else "dim")

    item("sshd", _("yes") if s.sshd_path else "")
    mpi = {"openmpi": "Open MPI", "mpich": "MPICH", "intelmpi": "Intel MPI"}.get(
        s.mpi_flavour, s.mpi_flavour)
    item("MPI", f"{mpi} {s.mpi_version}".strip() + (" +UCX" if s.ompi_has_ucx else ""))
    item("UCX", s.ucx_version)
    item("PyTorch", s.torch_version)
    if s.nccl_version:
        item("NCCL", s.nccl_version)
    text.rstrip()
    return text


def warnings_text(facts: Facts) -> Text:
    text = Text()
    for w in facts.warnings:
        text.append("! ", style="bold red")
        text.append(f"{w.shown()}\n", style="red")
    for n in facts.notes:
        text.append("- ", style="dim")
        text.append(f"{n.shown()}\n", style="dim")
    text.rstrip()
    return text


class SystemScreen(WizardScreen):
    """1. What this machine is."""

    BACK = False
    BINDINGS = [
        Binding("enter,n", "next", "Next", priority=False),
        # asks, as Ctrl+C and Ctrl+Q do: nothing is lost only if the user meant it
        Binding("q", "app.quit_app", "Quit"),
    ]
    SUB_TITLE = STEP  # the early frame draws it before Textual loads

    def __init__(self) -> None:
        super().__init__()
        self.ready = False
        self.error = ""

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="system-body", classes="body"):
            yield Static(_(DETECTING), id="system-status")
            yield LoadingIndicator(id="system-loading")
            yield Static("", id="system-facts")
            yield Static("", id="system-warnings")
        with Horizontal(classes="buttons"):
            yield Button(_("Next ⏎"), id="next", variant="primary", disabled=True, compact=True)

    def after_language(self) -> None:
        facts = getattr(self.app, "facts", None)
        if self.ready and facts is not None:
            self.show_facts(facts)
        elif self.error:
            self.show_error(self.error)
        super().after_language()

    def on_mount(self) -> None:
        facts = getattr(self.app, "facts", None)
        if facts is not None:
            self.show_facts(facts)

    def show_facts(self, facts: Facts) -> None:
        self.ready = True
        self.query_one("#system-loading").display = False
        self.query_one("#system-status", Static).update(
            Text(_("This machine, as detected. Nothing has been changed."), style="bold"))
        self.query_one("#system-facts", Static).update(facts_table(facts))
        self.query_one("#system-warnings", Static).update(warnings_text(facts))
        button = self.query_one("#next", Button)
        button.disabled = False
        button.focus()
        self.refresh_bindings()

    def show_error(self, error: str) -> None:
        self.error = error
        self.query_one("#system-loading").display = False
        self.query_one("#system-status", Static).update(
            Text(_("Detection failed: {error}").format(error=error), style="bold red"))

    def check_action(self, action: str, parameters: tuple) -> Optional[bool]:
        if action == "next":
            return self.ready
        return super().check_action(action, parameters)

    def action_next(self) -> None:
        self.app.goto_choose()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "next":
            self.action_next()
