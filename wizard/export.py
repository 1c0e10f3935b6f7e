"""The plan as files a user can keep: every export format by name, each the plan's Job (and
steps, or image) given to its renderer in hpcwizard.render. One registry for the CLI and the
TUI."""
from __future__ import annotations

from typing import Callable, Dict

from . import image
from .i18n import _
from .plan import Plan
from .render import launch, mpijob, pytorchjob, setup, slurm, volcano
from .validate import BadInput

Renderer = Callable[[Plan], str]


def setup_script(plan: Plan) -> str:
    return setup.render(plan.job, plan.steps)


def launch_script(plan: Plan) -> str:
    return launch.render(plan.job)


def sbatch_script(plan: Plan) -> str:
    return slurm.render(plan.job)


def mpijob_manifest(plan: Plan) -> str:
    return mpijob.render(plan.job)


def pytorchjob_manifest(plan: Plan) -> str:
    return pytorchjob.render(plan.job)


def trainjob_manifest(plan: Plan) -> str:
    return pytorchjob.render_trainjob(plan.job)


def volcano_manifest(plan: Plan) -> str:
    return volcano.render(plan.job)


# the machine's own files, then the engines users grow into: Slurm, Kubernetes' operators
FORMATS: Dict[str, Renderer] = {
    "setup": setup_script, "dockerfile": image.dockerfile, "launch": launch_script,
    "sbatch": sbatch_script, "mpijob": mpijob_manifest, "pytorchjob": pytorchjob_manifest,
    "trainjob": trainjob_manifest, "volcano": volcano_manifest,
}


def export_formats() -> Dict[str, Renderer]:
    """Every export format by name -> function(plan) -> text."""
    return dict(FORMATS)


def render_export(plan: Plan, fmt: str) -> str:
    if fmt not in FORMATS:
        raise BadInput(_("export format {format!r} is not one of: {formats}").format(
            format=fmt, formats=", ".join(FORMATS)))
    return FORMATS[fmt](plan)
