"""Shell text the engines' files share: the environment as exports, mpirun with the plan's
arguments in the names of the Open MPI that runs (4: ORTE, 5: PRRTE; decided when the job
runs, as in the launch script), and the workers' sshd on the plan's port."""
from __future__ import annotations

import shlex
from typing import List, Sequence

from ..i18n import _, comment
from ..launch import OMPI_VERSION_SH, mpirun_args_for, planned_env_lines
from .job import EngineJob, passed_env


def sq(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def exports(job: EngineJob, tag: str) -> List[str]:
    """The plan's environment, each variable unless the environment sets it already (tag:
    the prefix of the line that names those)."""
    return planned_env_lines(job.env) + [
        f"if [ \"${{#ENV_KEPT[@]}}\" -gt 0 ]; then echo \"{tag}: from the environment, not "
        f"the plan: ${{ENV_KEPT[*]}}\" >&2; fi"]


def words(args: Sequence[str]) -> str:
    return " ".join(shlex.quote(a) for a in args)


def mpirun_lines(job: EngineJob, args: Sequence[str], tail: str) -> List[str]:
    """Lines that pick the mpirun arguments (args: Open MPI 4 names) for the Open MPI
    installed, then run `mpirun ... tail`: tail is the rest of mpirun's command line."""
    x = [a for k in passed_env(job) for a in ("-x", k)]
    return [
        comment(_("Open MPI 5 (PRRTE) names the ssh settings differently from Open MPI 4 "
                  "(ORTE):\nthe mpirun installed says which it is.")),
        f"major=$({OMPI_VERSION_SH}) || true",
        "major=${major%%.*}",
        "if [[ $major =~ ^[0-9]+$ ]] && [ \"$major\" -ge 5 ]; then",
        f"  ARGS=({words(mpirun_args_for(args, 5))})",
        "else",
        f"  ARGS=({words(args)})",
        "fi",
        "if [ \"$(id -u)\" -eq 0 ]; then ARGS+=(--allow-run-as-root); fi",
        f"mpirun \"${{ARGS[@]}}\" {words(x) + ' ' if x else ''}{tail}".rstrip(),
    ]


def sshd_lines(job: EngineJob) -> List[str]:
    """The worker's sshd in the foreground on the plan's port: as root the system sshd (host
    keys made when the image has none), as another user the sshd settings hpcwizard's setup
    wrote in its home (they name the port)."""
    return [
        "if [ \"$(id -u)\" -eq 0 ]; then",
        "  install -d -m 0755 /run/sshd",
        "  if ! compgen -G '/etc/ssh/ssh_host_*_key' >/dev/null; then ssh-keygen -A; fi",
        f"  exec /usr/sbin/sshd -D -e -p {job.port}",
        "fi",
        "[ -r \"$HOME/.sshd_config\" ] || { echo \"no $HOME/.sshd_config: build the image with"
        " hpcwizard's setup for $(id -un)\" >&2; exit 2; }",
        "exec /usr/sbin/sshd -D -e -f \"$HOME/.sshd_config\"",
    ]


def torchrun_lines(nnodes: str, node_rank: str, master: str, nproc: str,
                   program: Sequence[str]) -> List[str]:
    """torchrun with the rendezvous given: each a shell word ("$SLURM_JOB_NUM_NODES")."""
    return [f"exec torchrun --nnodes={nnodes} --node-rank={node_rank} --nproc-per-node={nproc} "
            f"--master-addr={master} --master-port=\"${{MASTER_PORT:-29500}}\" {words(program)}"]
