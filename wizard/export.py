"""The same plan as a file a user can keep. `setup`: one bash script holding every step's
exact check, run and undo text (the same rendering review shows and apply runs), idempotent
(each step guarded by its check) and reversible (`setup.sh --undo`)."""
from __future__ import annotations

import shlex
from typing import List

from . import __version__, ops, proc, vocab
from .i18n import _, comment, field
from .plan import Plan
from .dockerfile import dockerfile
from .launch import launch_script
from .vocab import EXPORT_FILE_NAMES

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


def setup_script(plan: Plan) -> str:
    c = plan.choices
    out = [
        "#!/usr/bin/env bash",
        comment(_("Written by hpcwizard {version}: the same steps as 'hpcwizard apply', as one "
                  "script.").format(version=__version__)),
        f"# framework={c.framework} network={c.network} user={plan.target.user}"
        + (f" ssh_port={c.ssh_port} host_keys={c.host_keys} peers={c.peers}"
           if vocab.uses_ssh(c.framework) else ""),
        comment(_("planned on: {os}").format(os=plan.os_label)),
        comment(_("Run as root, or as a user with passwordless sudo.")),
        comment(_("  bash {script}          apply (steps already done are skipped)").format(
            script=EXPORT_FILE_NAMES["setup"])),
        comment(_("  bash {script} --undo   take every step back, newest first").format(
            script=EXPORT_FILE_NAMES["setup"])),
    ]
    if c.host_keys == "off":
        out.append(comment(_("WARNING: host keys are not checked (--host-keys off).")))
    out.append(_PRELUDE.replace("__TARGET__", shlex.quote(plan.target.user))
               .replace("__DETACHED__", shlex.quote(proc.DETACHED)))
    out.append(comment(_("The operations library (hpcwizard's recipes/ops.sh, sha256 {sha}): "
                         "each step below is one call of it.").format(sha=ops.checksum()[:16])))
    out += _text("HW_OPS", ops.library().rstrip("\n"))
    out.append("")
    calls, undos = [], []
    for n, step in enumerate(plan.steps, 1):
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


def export_formats() -> "dict[str, object]":
    """Every export format by name -> function(plan) -> text. One registry for the CLI and
    the TUI; the dockerfile and launch formats live in their own modules."""
    formats: "dict[str, object]" = {"setup": setup_script, "dockerfile": dockerfile,
                                    "launch": launch_script}
    # the engines users grow into (hpcwizard.engines): Slurm, and Kubernetes' operators
    from .engines.mpijob import mpijob_manifest
    from .engines.pytorchjob import pytorchjob_manifest, trainjob_manifest
    from .engines.slurm import sbatch_script
    from .engines.volcano import volcano_manifest

    formats.update({"sbatch": sbatch_script, "mpijob": mpijob_manifest,
                    "pytorchjob": pytorchjob_manifest, "trainjob": trainjob_manifest,
                    "volcano": volcano_manifest})
    return formats


def render_export(plan: Plan, fmt: str) -> str:
    formats = export_formats()
    if fmt not in formats:
        from .validate import BadInput
        raise BadInput(_("export format {format!r} is not one of: {formats}").format(
            format=fmt, formats=", ".join(formats)))
    return formats[fmt](plan)  # type: ignore[operator]
