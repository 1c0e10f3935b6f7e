"""How does a plan or a run read in a terminal? Plain text for the CLI; the TUI draws its
own widgets from the same Plan and events."""
from __future__ import annotations

import sys
import textwrap
from typing import List, Sequence, TextIO

from .apply import RunFinished, StepFinished, StepOutput, StepStarted
from .i18n import N_, _, field
from .plan import Plan


def _indent(text: str, prefix: str = "      ") -> str:
    return textwrap.indent(text, prefix)


def format_recommendation(plan: Plan) -> str:
    rec = plan.recommendation
    if rec.path == "preset" and rec.preset:
        head = _("Recommended: start the job from the preset image {image}").format(
            image=rec.preset.image)
    else:
        head = _("Recommended: configure this machine")
    lines = [head] + [f"  - {r}" for r in rec.reasons]
    return "\n".join(lines)


def format_plan(plan: Plan, brief: bool = False) -> str:
    c = plan.choices
    out: List[str] = [
        _("hpcwizard plan: {framework} over {network} on {os}").format(
            framework=c.framework, network=c.network.upper(),
            os=plan.os_label or _("unknown OS")),
        _("  job user {user} (home {home}), SSH port {port}, host keys {host_keys}").format(
            user=plan.target.user, home=plan.target.home, port=c.ssh_port,
            host_keys=c.host_keys),
        "",
        format_recommendation(plan),
    ]
    for w in plan.warnings:
        out.append(_("WARNING: {warning}").format(warning=w))
    out.append("")
    for n, step in enumerate(plan.steps, 1):
        who = _("as {user}").format(user="root" if step.as_ == "root" else plan.target.user)
        out.append(f"[{n}/{len(plan.steps)}] {field(step, 'title')}  ({step.id}, {who})")
        if brief:
            continue
        out.append(_("    run:"))
        out.append(_indent(step.run))
        out.append(_("    done when:"))
        out.append(_indent(step.check))
        if step.undo:
            out.append(_("    undo:"))
            out.append(_indent(step.undo))
        if step.note:
            out.append(_("    note: {note}").format(note=field(step, "note")))
        out.append("")
    if not plan.steps:
        out.append(_("Nothing to do on this machine."))
    return "\n".join(out).rstrip() + "\n"


def format_dry_run(plan: Plan, done: Sequence[bool]) -> str:
    out = [format_plan(plan), _("Dry run: nothing was changed. On a real run:")]
    for n, (step, is_done) in enumerate(zip(plan.steps, done), 1):
        what = _("skip (already done)") if is_done else _("run")
        out.append(f"  [{n}] {what}: {field(step, 'title')}")
    return "\n".join(out)


STATUS_WORDS = {"done": N_("done"), "skipped": N_("skipped"),
                "user-skipped": N_("skipped by you"), "failed": N_("failed"),
                "interrupted": N_("interrupted"), "undone": N_("undone"),
                "undo-failed": N_("undo failed"), "pending": N_("pending")}


def status_word(status: str) -> str:
    """A step's or a run's status as a person reads it (the record keeps the English key)."""
    return _(STATUS_WORDS[status]) if status in STATUS_WORDS else status


class ConsoleSink:
    """Prints apply events: a header per step, its output, and the outcome."""

    def __init__(self, stream: TextIO = sys.stdout, titles: Sequence[str] = ()):
        self.stream = stream
        self.closed = False
        self.titles = list(titles)  # the steps' titles in the chosen language, by index

    def title(self, event: StepStarted) -> str:
        if self.titles and len(self.titles) == event.total and event.index < len(self.titles):
            return self.titles[event.index]
        return event.title

    def __call__(self, event: object) -> None:
        """A reader that went away (`apply | head`) must not stop a run half-way: the
        record and the log still get everything."""
        if self.closed:
            return
        try:
            self._write(event)
        except (BrokenPipeError, ValueError):
            self.closed = True

    def _write(self, event: object) -> None:
        w = self.stream.write
        if isinstance(event, StepStarted):
            verb = _("undo") if event.undo else _("step")
            w(f"\n== {verb} [{event.index + 1}/{event.total}] {self.title(event)}\n")
        elif isinstance(event, StepOutput):
            w(f"   {event.line}\n")
        elif isinstance(event, StepFinished):
            w(f"-- {status_word(event.status)} ({event.seconds:.1f}s)\n")
            if event.status == "failed":
                w(_("FAILED with exit status {code}.").format(code=event.exit_code) + "\n")
                for d in event.diagnoses:
                    w(_("  cause: {cause}").format(cause=field(d, "cause")) + "\n")
                    w(_("  fix:   {fix}").format(fix=field(d, "fix")) + "\n")
                if not event.diagnoses:
                    w(_("  The step's output is above; the full log is beside the record.")
                      + "\n")
        elif isinstance(event, RunFinished):
            w("\n" + _("record: {path}").format(path=event.record) + "\n")
            if event.status in ("failed", "interrupted"):
                w(_("To take back what was done: hpcwizard undo {path}").format(
                    path=event.record) + "\n")
            w(_("result: {status}").format(status=status_word(event.status)) + "\n")
        self.stream.flush()
