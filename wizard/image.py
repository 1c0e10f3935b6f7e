"""The plan as a fresh image needs it, for `export --format dockerfile`: the image it starts
FROM (the preset's; else for PyTorch the official PyTorch image, presets.toml
[framework_images.pytorch]; for MPI the base matching this OS, presets.toml [base_images]),
and the setup script the image runs (companion_files).

The setup script of the image differs from `export --format setup` of this machine in two
ways, both said in its header: the packages step installs every package the recipes want
(this machine may have some already; a fresh base image has none of them) and is left out
when FROM is a preset image (which provides them), and sshd is not started during the build
(CMD starts it in each container). For MPI it also works under a mounted ~/.ssh (the MPI
Operator's or Volcano's Secret, which hides the image's): the client settings go to
/etc/ssh/ssh_config.d, the image's host key is pinned for the job's port in
/etc/ssh/ssh_known_hosts, a user's own sshd keeps its files in ~/.hpcwizard-sshd, and
recipes/mounted-keys.sh goes into the image to copy the keys of a Secret mounted on a
mode-1777 tmpfs where sshd's StrictModes accepts them (render/shell.py, MOUNTED_KEYS).
"""
from __future__ import annotations

import dataclasses
import re
from functools import lru_cache
from typing import Dict, List, Tuple

from . import ops, recipes
from .compat import tomllib
from .catalog import shipped_package_names
from .facts import Facts, OsInfo
from .plan import Plan, Step, install_step, package_manager
from .i18n import N_, _, comment, translations
from .render import dockerfile as render_dockerfile
from .render import setup as render_setup
from .render.shell import KEYS_COPY, MOUNTED_KEYS
from .validate import BadInput
from .vocab import EXPORT_FILE_NAMES

SETUP_NAME = EXPORT_FILE_NAMES["setup"]


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
    return plan.job.uses_preset


# Where the image's ssh settings go that a mounted ~/.ssh cannot hide: the MPI Operator and
# Volcano's ssh plugin mount a Secret (id_rsa, id_rsa.pub, authorized_keys) over the job
# user's ~/.ssh, read-only. ssh reads the system-wide files whatever ~/.ssh holds; Debian's,
# Ubuntu's and RHEL 8+'s /etc/ssh/ssh_config Include ssh_config.d/*.conf (hw_dropin writes a
# block at the top of ssh_config where it does not).
CLIENT_DROPIN = "/etc/ssh/ssh_config.d/00-hpcwizard.conf"
GLOBAL_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"
# A user's own sshd keeps its host key and pid file beside ~/.ssh, as plan.py does where the
# platform provides ~/.ssh: under the Secret, sshd could not read the one or write the other.
USER_SSHD_DIR = ".hpcwizard-sshd"


def image_pin_patterns(port: int) -> str:
    """known_hosts' host field for every container of the image: the pods' names are not
    known at build time, but their sshd listens on the plan's port and presents the image's
    host key. On port 22 (every host's), only the names the operators give a job's pods
    (<job>-launcher, <job>-worker-N, Volcano's <job>-master-N)."""
    if port == 22:
        return "*-launcher*,*-worker-*,*-master-*"
    return f"[*]:{port}"


def _moved_user_sshd(step: Step, home: str) -> Step:
    """The step with the user sshd's host key and pid file in ~/.hpcwizard-sshd."""
    old, new = f"{home}/.ssh/hpcwizard_host_ed25519_key", f"{home}/{USER_SSHD_DIR}/hpcwizard_host_ed25519_key"
    pid_old, pid_new = f"{home}/.ssh/sshd.pid", f"{home}/{USER_SSHD_DIR}/sshd.pid"

    def move(text: str) -> str:
        return text.replace(old, new).replace(pid_old, pid_new)

    return dataclasses.replace(
        step, title=move(step.title), check=move(step.check), run=move(step.run),
        undo=move(step.undo), note=move(step.note),
        i18n={lang: {k: move(v) for k, v in texts.items()} for lang, texts in step.i18n.items()})


def image_ssh_steps(plan: Plan) -> List[Step]:
    """The client settings and the pinned host key, system-wide (see CLIENT_DROPIN)."""
    c, t = plan.choices, plan.target
    key = ("/etc/ssh/ssh_host_ed25519_key" if t.is_root
           else f"{t.home}/{USER_SSHD_DIR}/hpcwizard_host_ed25519_key")
    head = ("# Written by hpcwizard: ssh between the containers of this image, where a mounted "
            "~/.ssh\n# (the MPI Operator's or Volcano's Secret) hides ~/.ssh/config and "
            "known_hosts.\n")
    steps: List[Step] = []
    if c.host_keys == "off":
        content = head + ("# --host-keys off: no host key is checked (as mpi-operator's own "
                          "base image).\nHost *\n    StrictHostKeyChecking no\n"
                          "    UserKnownHostsFile /dev/null\n    CheckHostIP no\n"
                          "    LogLevel ERROR\n")
    else:
        content = head + (f"# Their host key is this image's, pinned for port {c.ssh_port} in "
                          f"{GLOBAL_KNOWN_HOSTS}.\n# CheckHostIP no: no pod address goes into "
                          "a known_hosts.\nHost *\n    CheckHostIP no\n")
        pin = ops.block_call(GLOBAL_KNOWN_HOSTS, "", "0644", content_cmd=(
            f"printf '%s %s\\n' '{image_pin_patterns(c.ssh_port)}' "
            f"\"$(cut -d' ' -f1,2 {key}.pub)\""))
        steps.append(_root_step("ssh/image-known-hosts", "block", pin, N_(
            "Pin this image's host key for port {port}, system-wide"), N_(
            "Every container of this image presents this host key on the port; {file} is "
            "read whatever ~/.ssh holds."), port=c.ssh_port, file=GLOBAL_KNOWN_HOSTS))
    call = ops.dropin_call(CLIENT_DROPIN, "/etc/ssh/ssh_config", "", content, "0644")
    steps.append(_root_step("ssh/image-client-config", "dropin", call, N_(
        "SSH client settings system-wide, outside ~/.ssh"), N_(
        "{file}, which /etc/ssh/ssh_config Includes (else a block at its top)."),
        file=CLIENT_DROPIN))
    steps.append(_root_step("ssh/image-mounted-keys", "file", mounted_keys_call(), N_(
        "Let sshd read the keys of an operator's Secret mounted over ~/.ssh"), N_(
        "{script} runs before the image's sshd: where ~/.ssh is writable by others (the MPI "
        "Operator's tmpfs of mode 1777, which sshd's StrictModes refuses) and only root and "
        "the user own what it holds, it copies authorized_keys to ~/{copy} (mode 0600), "
        "which the image's sshd reads first. StrictModes stays on."),
        script=MOUNTED_KEYS, copy=KEYS_COPY))
    return steps


def mounted_keys_call() -> str:
    """The step that puts recipes/mounted-keys.sh into the image (run as root: root owns it)."""
    return ops.file_call(MOUNTED_KEYS, recipes.read_text("mounted-keys.sh"), "0755")


def _root_step(step_id: str, kind: str, call: str, title: str, note: str, **values) -> Step:
    """A step of the image's own, its texts English with each language's beside them."""
    zh = translations("zh")
    return Step(id=step_id, recipe="ssh", as_="root", kind=kind, title=title.format(**values),
                check=ops.checked(call), run=call, undo=ops.undo_call(call),
                note=note.format(**values),
                i18n={"zh": {"title": zh.gettext(title).format(**values),
                             "note": zh.gettext(note).format(**values)}})


def image_plan(plan: Plan) -> Plan:
    """The plan as a fresh image needs it (see the module's docstring)."""
    # by what a step does, not by its name: no sshd is started in a build (the image's CMD
    # starts it), and the packages are planned afresh for an image built from scratch
    steps = [s for s in plan.steps if s.operation not in ("hw_packages", "hw_sshd")]
    ssh = [i for i, s in enumerate(steps) if s.recipe == "ssh"]
    if ssh:
        if not plan.target.is_root:
            steps = [_moved_user_sshd(s, plan.target.home) if s.recipe == "ssh" else s
                     for s in steps]
        steps[ssh[-1] + 1:ssh[-1] + 1] = image_ssh_steps(plan)
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
    image = image_plan(plan)
    text = render_setup.render(image.job, image.steps)
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


def base(plan: Plan) -> render_dockerfile.Base:
    """The image the Dockerfile starts FROM."""
    if plan.job.uses_preset:
        return render_dockerfile.Base(plan.job.preset_image)
    own = framework_image(plan)
    if own:
        return render_dockerfile.Base(own[0], official_os=own[1].pretty_name)
    return render_dockerfile.Base(base_image(plan.os))


def dockerfile(plan: Plan) -> str:
    return render_dockerfile.render(plan.job, base(plan),
                                    sshd=any(s.recipe == "ssh" for s in plan.steps))
