"""How does a plan or a run read in a terminal? Plain text for the CLI; the TUI draws its
own widgets from the same Plan and events."""
from __future__ import annotations

import sys
import textwrap
from typing import List, Sequence, TextIO

from .apply import RunFinished, StepFinished, StepOutput, StepStarted
from .plan import Plan


def _indent(text: str, prefix: str = "      ") -> str:
    return textwrap.indent(text, prefix)


def format_recommendation(plan: Plan) -> str:
    rec = plan.recommendation
    if rec.path == "preset" and rec.preset:
        head = f"Recommended: start the job from the preset image {rec.preset.image}"
    else:
        head = "Recommended: configure this machine"
    lines = [head] + [f"  - {r}" for r in rec.reasons]
    return "\n".join(lines)


def format_plan(plan: Plan, brief: bool = False) -> str:
    c = plan.choices
    out: List[str] = [
        f"hpcwizard plan: {c.framework} over {c.network.upper()} on {plan.os_label or 'unknown OS'}",
        f"  job user {plan.target.user} (home {plan.target.home}), SSH port {c.ssh_port}, "
        f"host keys {c.host_keys}",
        "",
        format_recommendation(plan),
    ]
    for w in plan.warnings:
        out.append(f"WARNING: {w}")
    out.append("")
    for n, step in enumerate(plan.steps, 1):
        who = "as root" if step.as_ == "root" else f"as {plan.target.user}"
        out.append(f"[{n}/{len(plan.steps)}] {step.title}  ({step.id}, {who})")
        if brief:
            continue
        out.append("    run:")
        out.append(_indent(step.run))
        out.append("    done when:")
        out.append(_indent(step.check))
        if step.undo:
            out.append("    undo:")
            out.append(_indent(step.undo))
        if step.note:
            out.append(f"    note: {step.note}")
        out.append("")
    if not plan.steps:
        out.append("Nothing to do on this machine.")
    return "\n".join(out).rstrip() + "\n"


def format_dry_run(plan: Plan, done: Sequence[bool]) -> str:
    out = [format_plan(plan), "Dry run: nothing was changed. On a real run:"]
    for n, (step, is_done) in enumerate(zip(plan.steps, done), 1):
        out.append(f"  [{n}] {'skip (already done)' if is_done else 'run'}: {step.title}")
    return "\n".join(out)


class ConsoleSink:
    """Prints apply events: a header per step, its output, and the outcome."""

    def __init__(self, stream: TextIO = sys.stdout):
        self.stream = stream
        self.closed = False

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
            verb = "undo" if event.undo else "step"
            w(f"\n== {verb} [{event.index + 1}/{event.total}] {event.title}\n")
        elif isinstance(event, StepOutput):
            w(f"   {event.line}\n")
        elif isinstance(event, StepFinished):
            w(f"-- {event.status} ({event.seconds:.1f}s)\n")
            if event.status == "failed":
                w(f"FAILED with exit status {event.exit_code}.\n")
                for d in event.diagnoses:
                    w(f"  cause: {d.cause}\n  fix:   {d.fix}\n")
                if not event.diagnoses:
                    w("  The step's output is above; the full log is beside the record.\n")
        elif isinstance(event, RunFinished):
            w(f"\nrecord: {event.record}\n")
            if event.status in ("failed", "interrupted"):
                w(f"To take back what was done: hpcwizard undo {event.record}\n")
            w(f"result: {event.status}\n")
        self.stream.flush()
