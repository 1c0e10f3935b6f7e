"""The plan's steps as one bash script a user can keep (`export --format setup`): every step's
exact check, run and undo text (the same rendering review shows and apply runs), idempotent
(each step guarded by its check) and reversible (`setup.sh --undo`)."""
from __future__ import annotations

import shlex
from typing import List, Mapping, Protocol, Sequence

from .. import __version__, ops, proc
from ..i18n import _, comment, field
from ..job import Job
from ..vocab import EXPORT_FILE_NAMES

_DELIM = "HPCWIZARD_STEP"

_PRELUDE = r'''set -euo pipefail
cd /

TARGET_USER=__TARGET__

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo -n -- "$@"; fi
}

# The job's user's steps get no terminal (a session of their own; stdin, stdout and stderr
# not this one): what their files make run (ssh's Match exec) cannot type into it. Ctrl-C
# still reaches them: HW_DETACHED passes it on.
HW_DETACHED=__DETACHED__
as_user() {
  if [ "$(id -un)" = "$TARGET_USER" ]; then "$@"
  elif [ "$(id -u)" -eq 0 ]; then
    bash -c "$HW_DETACHED" hpcwizard-detached runuser -u "$TARGET_USER" -- "$@" 2>&1 | cat
  else sudo -n -u "$TARGET_USER" -- bash -c "$HW_DETACHED" hpcwizard-detached "$@" 2>&1 | cat
  fi
}

# Each step runs in a bash of its own, as root or as the job's user: the operations library
# (HW_OPS, below) first, then the step's call.
run_step() {
  local n=$1 as=$2 title=$3 check=$4 run=$5
  if "as_$as" bash -c "$HW_OPS"$'\n'"$check" >/dev/null 2>&1; then
    echo "[$n] $title: already done"
    return 0
  fi
  echo "[$n] $title"
  "as_$as" bash -euo pipefail -c "$HW_OPS"$'\n'"$run"
}

undo_step() {
  local n=$1 as=$2 title=$3 undo=$4
  if [ -z "$undo" ]; then
    echo "[$n] $title: nothing to undo"
    return 0
  fi
  echo "[$n] undo: $title"
  "as_$as" bash -euo pipefail -c "$HW_OPS"$'\n'"$undo"
}
'''


def _text(name: str, text: str) -> List[str]:
    if f"\n{_DELIM}\n" in f"\n{text}\n":
        raise ValueError("step text contains the heredoc delimiter")
    return [f"{name}=$(cat <<'{_DELIM}'", text, _DELIM, ")"]


class StepText(Protocol):
    """What the script takes of a step (hpcwizard.plan.Step): its texts and who runs it."""
    id: str
    title: str
    as_: str
    check: str
    run: str
    undo: str
    note: str
    i18n: Mapping[str, Mapping[str, str]]


def render(job: Job, steps: Sequence[StepText]) -> str:
    """steps: the plan's, in order."""
    out = [
        "#!/usr/bin/env bash",
        comment(_("Written by hpcwizard {version}: the same steps as 'hpcwizard apply', as one "
                  "script.").format(version=__version__)),
        f"# framework={job.framework} network={job.network} user={job.user}"
        + (f" ssh_port={job.ssh_port} host_keys={job.host_keys} peers={job.hosts}"
           if job.mpi else ""),
        comment(_("planned on: {os}").format(os=job.os_label)),
        comment(_("Run as root, or as a user with passwordless sudo.")),
        comment(_("  bash {script}          apply (steps already done are skipped)").format(
            script=EXPORT_FILE_NAMES["setup"])),
        comment(_("  bash {script} --undo   take every step back, newest first").format(
            script=EXPORT_FILE_NAMES["setup"])),
    ]
    if job.host_keys_off:
        out.append(comment(_("WARNING: host keys are not checked (--host-keys off).")))
    out.append(_PRELUDE.replace("__TARGET__", shlex.quote(job.user))
               .replace("__DETACHED__", shlex.quote(proc.DETACHED)))
    out.append(comment(_("The operations library (hpcwizard's recipes/ops.sh, sha256 {sha}): "
                         "each step below is one call of it.").format(sha=ops.checksum()[:16])))
    out += _text("HW_OPS", ops.library().rstrip("\n"))
    out.append("")
    calls, undos = [], []
    for n, step in enumerate(steps, 1):
        out.append(comment(f"[{n}] {step.id}: {field(step, 'title')}"))
        if step.note:
            out.append(comment(field(step, "note")))
        out += _text(f"S{n}_CHECK", step.check)
        out += _text(f"S{n}_RUN", step.run)
        out += _text(f"S{n}_UNDO", step.undo) if step.undo else [f"S{n}_UNDO=''"]
        out.append("")
        title = shlex.quote(step.title)
        calls.append(f'  run_step {n} {step.as_} {title} "$S{n}_CHECK" "$S{n}_RUN"')
        undos.insert(0, f'  undo_step {n} {step.as_} {title} "$S{n}_UNDO"')
    out += [
        'if [ "${1:-}" = "--undo" ]; then',
        *(undos or ["  :"]),
        "  echo 'hpcwizard: undone'",
        "else",
        *(calls or ["  :"]),
        "  echo 'hpcwizard: done'",
        "fi",
        "",
    ]
    return "\n".join(out)
