"""The Job as a Dockerfile: an image in which the job's environment is already configured.

    FROM <the base: a preset image, the framework's official image, or the OS's (image.py)>
    COPY hpcwizard-setup.sh      the plan's setup script, made for a fresh image (image.py)
    RUN  bash hpcwizard-setup.sh
    USER <the job's user>        when it is not root
    ENV  mpirun's SSH port       MPI only: Open MPI 4's and 5's names (mpirun.runtime_env)
    EXPOSE <the SSH port>        MPI only: PyTorch needs no SSH server
    CMD  sshd in the foreground  root: /usr/sbin/sshd -D; a user: sshd -D -f ~/.sshd_config,
                                 after a private copy of the keys a mounted Secret holds

`hpcwizard export --format dockerfile -o DIR/Dockerfile` writes the setup script beside it.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from .. import __version__
from ..i18n import _, comment
from ..job import Job
from ..validate import BadInput
from ..vocab import EXPORT_FILE_NAMES
from .mpirun import runtime_env
from .shell import KEYS_COPY, MOUNTED_KEYS, SSHD_KEYS_OPTION, words

SETUP_NAME = EXPORT_FILE_NAMES["setup"]


@dataclass(frozen=True)
class Base:
    """The image FROM: official_os names the distribution of a framework's official image
    ('' for a preset or an OS base image)."""
    image: str
    official_os: str = ""


def _env_value(value: str) -> str:
    """A Dockerfile ENV value in double quotes (ENV expands $ and treats \\ as an escape)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def render(job: Job, base: Base, sshd: bool) -> str:
    """sshd: the plan sets up an SSH server (MPI)."""
    preset = job.uses_preset
    out = [
        comment((_("Written by hpcwizard {version}: {framework} over {network}, job user "
                   "{user}, SSH port {port}.") if sshd else
                 _("Written by hpcwizard {version}: {framework} over {network}, job user "
                   "{user}.")).format(version=__version__, framework=job.framework,
                                      network=job.network, user=job.user, port=job.ssh_port)),
        comment((_("Planned on {os} for the preset image the recommendation names.") if preset
                 else _("Planned on {os}.")).format(os=job.os_label or _("an unknown OS"))),
        comment(_("The build context needs {file} beside this file; both are written by")
                .format(file=SETUP_NAME)),
        f"#   hpcwizard export --format dockerfile --framework {job.framework} --network {job.network}"
        " -o DIR/Dockerfile",
        comment(_("then: docker build -t my-job DIR")),
        f"FROM {base.image}",
    ]
    if preset:
        out.append(comment(_("The preset provides the packages; the setup script configures "
                             "the rest.")))
    elif base.official_os:
        out.append(comment(_("The official PyTorch image, on {os}: its python3 imports torch.\n"
                             "Edit the tag for another PyTorch or CUDA (the driver must "
                             "support that CUDA).").format(os=base.official_os)))
    if not job.is_root:
        if not re.match(r"^[a-z_][a-z0-9_.-]{0,31}$", job.user) or not re.match(r"^/[A-Za-z0-9._/-]*$", job.home):
            raise BadInput(_("user {user!r} or home {home!r} cannot go into a Dockerfile").format(
                user=job.user, home=job.home))
        out += [
            comment(_("The job's user, {user}, with the uid it has on the planning machine when "
                      "free.").format(user=job.user)),
            f"RUN if ! id -u {job.user} >/dev/null 2>&1; then \\",
            f"      if getent passwd {job.uid} >/dev/null; then useradd -l -m -d {job.home} -s /bin/bash {job.user}; \\",
            f"      else useradd -l -m -d {job.home} -u {job.uid} -s /bin/bash {job.user}; fi; \\",
            "    fi",
        ]
    out += [
        f"COPY {SETUP_NAME} /tmp/{SETUP_NAME}",
        f"RUN bash /tmp/{SETUP_NAME} && rm -f /tmp/{SETUP_NAME}",
    ]
    if not job.is_root:
        out.append(f"USER {job.user}")
        out.append(f"WORKDIR {job.home}")
    env = runtime_env(job) if job.mpi else []
    if env:
        out.append(comment(_("mpirun's SSH settings, for Open MPI 4 (ORTE: OMPI_MCA_*) and "
                             "for Open MPI 5\n(PRRTE: PRTE_MCA_*, in its own names).")))
        out.append("ENV " + " ".join(f"{k}={_env_value(v)}" for k, v in env))
    if sshd:
        out.append(f"EXPOSE {job.ssh_port}")
        keys = f"{MOUNTED_KEYS} {KEYS_COPY}"
        if job.is_root:
            cmd = ["/bin/sh", "-c", "install -d -m 0755 /run/sshd && " + keys
                   + " && exec /usr/sbin/sshd -D -e " + words(SSHD_KEYS_OPTION)]
            out.append(comment(_("sshd in the foreground, as root, with the port of "
                                 "/etc/ssh/sshd_config.d.")))
        else:
            cmd = ["/bin/sh", "-c", f"{keys} && exec /usr/sbin/sshd -D -e -f "
                   f"{job.home}/.sshd_config " + words(SSHD_KEYS_OPTION)]
            out.append(comment(_("{user}'s own sshd in the foreground (it can log in only "
                                 "{user}).").format(user=job.user)))
        out.append(comment(_("Under a Secret mounted over ~/.ssh (the MPI Operator's tmpfs of "
                             "mode 1777, which\nsshd's StrictModes refuses), the first command "
                             "copies its authorized_keys to\n~/{copy}, private to the user; sshd "
                             "reads that copy first.").format(copy=KEYS_COPY)))
        out.append("CMD " + json.dumps(cmd))
    else:
        out.append(comment(_("No SSH server: torchrun is started on every instance and meets the "
                             "others over TCP.")))
    return "\n".join(out) + "\n"
