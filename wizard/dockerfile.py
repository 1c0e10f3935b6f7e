"""The plan as a Dockerfile: an image in which the job's environment is already configured.

    FROM <the preset image; else for PyTorch the official PyTorch image (presets.toml
         [framework_images.pytorch]: its python3 imports torch, which the setup script
         checks), for MPI the base matching this OS (presets.toml [base_images])>
    COPY hpcwizard-setup.sh      the plan's setup script, made for a fresh image (below)
    RUN  bash hpcwizard-setup.sh
    USER <the job's user>        when it is not root
    ENV  mpirun's SSH port       MPI only: Open MPI 4's and 5's names (mpi_env)
    EXPOSE <the SSH port>        MPI only: PyTorch needs no SSH server
    CMD  sshd in the foreground  root: /usr/sbin/sshd -D; a user: sshd -D -f ~/.sshd_config

The setup script of the image differs from `export --format setup` of this machine in two
ways, both said in its header: the packages step installs every package the recipes want
(this machine may have some already; a fresh base image has none of them) and is left out
when FROM is a preset image (which provides them), and sshd is not started during the build
(CMD starts it in each container). `hpcwizard export --format dockerfile -o DIR/Dockerfile`
writes the script beside the Dockerfile (companion_files).
"""
from __future__ import annotations

import dataclasses
import json
import re
from functools import lru_cache
from typing import Dict, List, Tuple

from . import __version__, recipes
from .compat import tomllib
from .catalog import shipped_package_names
from .facts import Facts, OsInfo
from .plan import Plan, install_step, package_manager
from .i18n import _, comment
from .validate import BadInput

SETUP_NAME = "hpcwizard-setup.sh"


@lru_cache(maxsize=1)
def base_images() -> Dict[str, str]:
    text = recipes.read_text("presets.toml")
    return dict(tomllib.loads(text).get("base_images", {}))


def base_image(os_info: OsInfo) -> str:
    """The Docker image of this distribution and release: debian:12, rockylinux:9, ..."""
    template = base_images().get(os_info.id.lower(), "")
    version = os_info.version_id
    if not template or not re.match(r"^[0-9][0-9A-Za-z.]*$", version or ""):
        raise BadInput(_("no base image is known for {os} {version}: use --preset, or add it "
                         "to [base_images] in presets.toml").format(
            os=os_info.pretty_name or os_info.id, version=version))
    return template.format(version=version, major=version.split(".")[0])


@lru_cache(maxsize=1)
def framework_images() -> Dict[str, Dict[str, str]]:
    text = recipes.read_text("presets.toml")
    return {k: dict(v) for k, v in tomllib.loads(text).get("framework_images", {}).items()}


def framework_image(plan: Plan) -> "Tuple[str, OsInfo] | None":
    """The image a framework's Dockerfile starts FROM when no preset is, with the
    distribution it is built on; None when the framework has none (MPI: the OS's base)."""
    entry = framework_images().get(plan.choices.framework)
    if not entry:
        return None
    os_id = entry["os"]
    os_info = OsInfo(id=os_id, version_id=entry["version"],
                     pretty_name=entry.get("pretty_name", ""),
                     family="debian" if os_id in ("ubuntu", "debian") else os_id,
                     package_manager="apt" if os_id in ("ubuntu", "debian") else "dnf")
    return entry["image"], os_info


def image_os(plan: Plan) -> OsInfo:
    """The distribution the image is built on: the framework image's, else the planned one."""
    own = None if uses_preset(plan) else framework_image(plan)
    return own[1] if own else plan.os


def uses_preset(plan: Plan) -> bool:
    rec = plan.recommendation
    return rec.preset is not None and (plan.choices.mode == "preset" or
                                       (plan.choices.mode == "auto" and rec.path == "preset"))


def image_plan(plan: Plan) -> Plan:
    """The plan as a fresh image needs it (see the module's docstring)."""
    # by what a step does, not by its name: no sshd is started in a build (the image's CMD
    # starts it), and the packages are planned afresh for an image built from scratch
    steps = [s for s in plan.steps if s.operation not in ("hw_packages", "hw_sshd")]
    os_info = image_os(plan)
    pm = package_manager(Facts(os=os_info))
    wanted = plan.packages_wanted
    if os_info != plan.os:  # the recipes' generic names, by their names on the image's release
        table = shipped_package_names()
        wanted = tuple(dict.fromkeys(
            n for n in (table.resolve(pm, g, os_info)
                        for g in dict(plan.packages_generic).get(pm, ())) if n))
    if not uses_preset(plan) and pm and wanted:
        old = next((s for s in plan.steps if s.operation == "hw_packages"), None)
        step = install_step(pm, wanted, {}, old.why if old else "")
        if step is not None:
            steps.insert(0, step)
    return dataclasses.replace(plan, steps=tuple(steps))


def image_setup_script(plan: Plan) -> str:
    from .export import setup_script

    text = setup_script(image_plan(plan))
    head, _sep, rest = text.partition("\n")
    sshd = any(s.operation == "hw_sshd" for s in plan.steps)
    return "\n".join([
        head,
        comment(_("For a Docker image: every package the recipes want is installed (none from "
                  "the\nplanning machine is assumed), and sshd is not started here: the image's "
                  "CMD starts it.") if sshd else
                _("For a Docker image: every package the recipes want is installed (none from "
                  "the\nplanning machine is assumed).")),
        rest,
    ])


def companion_files(plan: Plan) -> Dict[str, str]:
    """Files the Dockerfile's build context needs beside it."""
    return {SETUP_NAME: image_setup_script(plan)}


def mpi_env(plan: Plan) -> List[Tuple[str, str]]:
    """The runtime settings among the plan's mpirun arguments (the ssh port: plm_rsh_args) as
    environment variables for both Open MPI 4 (ORTE reads OMPI_MCA_plm_rsh_args) and 5 (PRRTE
    reads PRTE_MCA_plm_ssh_args; see launch.mpirun_args_for): mpirun run by hand in the image
    then reaches the other containers' sshd on the plan's port, whichever Open MPI the image
    has."""
    from .launch import mpirun_args_for

    four = list(plan.mpirun_args)
    five = mpirun_args_for(four, 5)
    env: List[Tuple[str, str]] = []
    for i in range(len(four) - 2):
        if four[i] == "--mca" and five[i] == "--prtemca":  # a runtime setting PRRTE renames
            env += [(f"OMPI_MCA_{four[i + 1]}", four[i + 2]),
                    (f"PRTE_MCA_{five[i + 1]}", five[i + 2])]
    return env


def _env_value(value: str) -> str:
    """A Dockerfile ENV value in double quotes (ENV expands $ and treats \\ as an escape)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def dockerfile(plan: Plan) -> str:
    c, t = plan.choices, plan.target
    preset = uses_preset(plan)
    own = None if preset else framework_image(plan)
    image = (plan.recommendation.preset.image if preset  # type: ignore[union-attr]
             else own[0] if own else base_image(plan.os))
    sshd = any(s.recipe == "ssh" for s in plan.steps)
    out = [
        comment((_("Written by hpcwizard {version}: {framework} over {network}, job user "
                   "{user}, SSH port {port}.") if sshd else
                 _("Written by hpcwizard {version}: {framework} over {network}, job user "
                   "{user}.")).format(version=__version__, framework=c.framework,
                                      network=c.network, user=t.user, port=c.ssh_port)),
        comment((_("Planned on {os} for the preset image the recommendation names.") if preset
                 else _("Planned on {os}.")).format(os=plan.os_label or _("an unknown OS"))),
        comment(_("The build context needs {file} beside this file; both are written by")
                .format(file=SETUP_NAME)),
        f"#   hpcwizard export --format dockerfile --framework {c.framework} --network {c.network}"
        " -o DIR/Dockerfile",
        comment(_("then: docker build -t my-job DIR")),
        f"FROM {image}",
    ]
    if preset:
        out.append(comment(_("The preset provides the packages; the setup script configures "
                             "the rest.")))
    elif own:
        out.append(comment(_("The official PyTorch image, on {os}: its python3 imports torch.\n"
                             "Edit the tag for another PyTorch or CUDA (the driver must "
                             "support that CUDA).").format(os=own[1].pretty_name)))
    if not t.is_root:
        if not re.match(r"^[a-z_][a-z0-9_.-]{0,31}$", t.user) or not re.match(r"^/[A-Za-z0-9._/-]*$", t.home):
            raise BadInput(_("user {user!r} or home {home!r} cannot go into a Dockerfile").format(
                user=t.user, home=t.home))
        out += [
            comment(_("The job's user, {user}, with the uid it has on the planning machine when "
                      "free.").format(user=t.user)),
            f"RUN if ! id -u {t.user} >/dev/null 2>&1; then \\",
            f"      if getent passwd {t.uid} >/dev/null; then useradd -l -m -d {t.home} -s /bin/bash {t.user}; \\",
            f"      else useradd -l -m -d {t.home} -u {t.uid} -s /bin/bash {t.user}; fi; \\",
            "    fi",
        ]
    out += [
        f"COPY {SETUP_NAME} /tmp/{SETUP_NAME}",
        f"RUN bash /tmp/{SETUP_NAME} && rm -f /tmp/{SETUP_NAME}",
    ]
    if not t.is_root:
        out.append(f"USER {t.user}")
        out.append(f"WORKDIR {t.home}")
    env = mpi_env(plan) if c.framework == "mpi" else []
    if env:
        out.append(comment(_("mpirun's SSH settings, for Open MPI 4 (ORTE: OMPI_MCA_*) and "
                             "for Open MPI 5\n(PRRTE: PRTE_MCA_*, in its own names).")))
        out.append("ENV " + " ".join(f"{k}={_env_value(v)}" for k, v in env))
    if sshd:
        out.append(f"EXPOSE {c.ssh_port}")
        if t.is_root:
            cmd = ["/bin/sh", "-c", "install -d -m 0755 /run/sshd && exec /usr/sbin/sshd -D -e"]
            out.append(comment(_("sshd in the foreground, as root, with the port of "
                                 "/etc/ssh/sshd_config.d.")))
        else:
            cmd = ["/usr/sbin/sshd", "-D", "-e", "-f", f"{t.home}/.sshd_config"]
            out.append(comment(_("{user}'s own sshd in the foreground (it can log in only "
                                 "{user}).").format(user=t.user)))
        out.append("CMD " + json.dumps(cmd))
    else:
        out.append(comment(_("No SSH server: torchrun is started on every instance and meets the "
                             "others over TCP.")))
    return "\n".join(out) + "\n"
