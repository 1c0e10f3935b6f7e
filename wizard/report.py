"""How does a plan or a run read in a terminal? Plain text for the CLI; the TUI draws its
own widgets from the same Plan and events."""
from __future__ import annotations

import re
import shlex
import sys
import textwrap
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Sequence, TextIO, Tuple

from .apply import RunFinished, StepFinished, StepOutput, StepStarted
from .i18n import N_, _, field
from .safe_text import visible
from .plan import Plan
from . import vocab

if TYPE_CHECKING:
    from .apply import ShellRunner


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


# The operations whose change is a file's: their diff is shown before anything runs.
FILE_OPERATIONS = ("hw_file", "hw_block", "hw_dropin", "hw_sshd_config")
# --host-keys, as the plan's header says it (the option's values stay English elsewhere)
HOST_KEYS = {"pinned": N_("pinned"), "off": N_("off (not checked)")}



def format_plan(plan: Plan, brief: bool = False, diffs: Optional[Mapping[str, str]] = None) -> str:
    """The plan as a person reviews it: each step's one call (or, for a shell step, its
    commands, the check that tells it is done, its undo), its note, and, when `diffs` has one
    for the step, the unified diff it would make to the files as they are now."""
    c = plan.choices
    out: List[str] = [
        _("hpcwizard plan: {framework} over {network} on {os}").format(
            framework=c.framework, network=c.network.upper(),
            os=plan.os_label or _("unknown OS")),
        (_("  job user {user} (home {home}), SSH port {port}, host keys {host_keys}").format(
            user=plan.target.user, home=plan.target.home, port=c.ssh_port,
            host_keys=_(HOST_KEYS.get(c.host_keys, c.host_keys)))
         if vocab.uses_ssh(c.framework) else
         _("  job user {user} (home {home})").format(user=plan.target.user,
                                                     home=plan.target.home)),
        "",
        format_recommendation(plan),
    ]
    for w in plan.warnings:
        out.append(_("WARNING: {warning}").format(warning=w))
    out.append("")
    if not brief and any(s.operation for s in plan.steps):
        out.append(_("A step that is one call (hw_...) runs hpcwizard's operations (recipes/ops.sh): "
                     "it checks first and changes only what is missing; undo runs the same call "
                     "and takes back only what it gave."))
        if diffs and any(s.operation == "hw_packages" and not s.satisfied for s in plan.steps):
            out.append(_("The diffs are against the files as they are now, before the packages "
                         "are installed (a package may bring a file of its own first)."))
        out.append("")
    for n, step in enumerate(plan.steps, 1):
        who = _("as {user}").format(user="root" if step.as_ == "root" else plan.target.user)
        out.append(f"[{n}/{len(plan.steps)}] {field(step, 'title')}  ({step.id}, {who})")
        if brief:
            continue
        if step.operation:
            out.append(_indent(step.run))
        else:
            out.append(_("    run:"))
            out.append(_indent(step.run))
            out.append(_("    done when:"))
            out.append(_indent(step.check))
            if step.undo:
                out.append(_("    undo:"))
                out.append(_indent(step.undo))
        diff = (diffs or {}).get(step.id, "")
        if diff:
            out.append(_indent(diff.rstrip("\n")))
        if step.note:
            out.append(_("    note: {note}").format(note=field(step, "note")))
        out.append("")
    if not plan.steps:
        out.append(_("Nothing to do on this machine."))
    return "\n".join(out).rstrip() + "\n"


def file_diffs(plan: Plan, runner: ShellRunner) -> Dict[str, str]:
    """For each step that changes a file, the unified diff against the file as it is now,
    computed read-only by the step's own call in diff mode (runner.capture). A step whose
    files cannot be read here says so instead."""
    out: Dict[str, str] = {}
    for step in plan.steps:
        if step.operation not in FILE_OPERATIONS:
            continue
        code, text, errors = runner.capture(step.as_, step.diff)
        if code != 0 or errors.strip():
            # e.g. contents read from a key an earlier step makes: known only when it runs
            last = errors.strip().splitlines()[-1] if errors.strip() else ""
            last = re.sub(r"^bash: line [0-9]+: ", "", last)
            out[step.id] = _("(no diff before the run: {error})").format(
                error=last or _("exit status {code}").format(code=code))
        elif text.strip():
            out[step.id] = text
    return out


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


def earlier_lines(earlier: Sequence[Tuple[str, str]]) -> List[str]:
    """What a run's end says of earlier applies that did not finish (RunFinished.earlier):
    this run skipped what they had done, so only their own record takes it back."""
    if not earlier:
        return []
    lines = [_("Earlier applies did not finish; what they changed is not in this record, "
               "and this record's undo leaves it. To take it back, undo each, newest first:")]
    # "running" in a record nobody runs (the lock is ours): killed mid-run
    lines += ["  " + _("{status}: hpcwizard undo {path}").format(
        status=_("stopped mid-run") if status == "running" else status_word(status),
        path=shlex.quote(path)) for path, status in earlier]
    return lines


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
            w(f"   {visible(event.line)}\n")
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
            for line in earlier_lines(event.earlier):
                w(line + "\n")
        self.stream.flush()
