"""Shell text the scripts share: the job's environment as defaults, mpirun with the job's
settings in the names of the Open MPI that runs (4: ORTE, 5: PRRTE; decided when the job
runs), the user's program in torchrun's words, and the workers' sshd on the job's port."""
from __future__ import annotations

import re
import shlex
from typing import List, Mapping, Sequence, Tuple

from ..i18n import _, comment
from ..job import Job
from .engine import passed_env
from .mpirun import OMPI_VERSION_SH, mca_args

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # what `export NAME=` accepts


def checked_env(job: Job) -> List[Tuple[str, str]]:
    """The job's environment, every name one `export NAME=` accepts."""
    for k in job.env:
        if not ENV_NAME.match(k):
            raise ValueError(f"launch environment name {k!r} is not a shell variable name")
    return list(job.env.items())


# The user's command in the words torchrun takes (torch/distributed/run.py: a script it runs
# with its own Python, -m/--module for 'python -m', --no-python for any other program), for the
# launch script and the sbatch file alike: torch_program PROGRAM [ARGS...] -> TORCH_PROGRAM
# (torchrun's arguments after its options), TORCH_PY (an interpreter named by its path, for
# the caller to run torch.distributed.run with). Python's -u becomes PYTHONUNBUFFERED=1 (the
# same for every process torchrun starts); any other interpreter option has no torchrun word:
# status 1, TORCH_PROGRAM_ERROR saying so, rather than torchrun's own usage error.
TORCH_PROGRAM_SH = r'''
torch_program() {
  local py=0
  TORCH_PROGRAM=() TORCH_PY='' TORCH_PROGRAM_ERROR=''
  case $1 in
    python|python3|python3.*) py=1; shift ;;
    */python|*/python3|*/python3.*) py=1 TORCH_PY=$1; shift ;;
  esac
  if [ "$py" = 0 ]; then
    case $1 in
      *.py) TORCH_PROGRAM=("$@") ;;
      *) TORCH_PROGRAM=(--no-python "$@") ;;
    esac
    return 0
  fi
  while [ "${1:-}" = -u ]; do export PYTHONUNBUFFERED=1; shift; done
  case ${1:-} in
    -m) if [ $# -ge 2 ] && [ -n "$2" ]; then TORCH_PROGRAM=("$@"); return 0; fi ;;
    -m?*) TORCH_PROGRAM=(-m "${1#-m}" "${@:2}"); return 0 ;;
    ''|-*) ;;
    *) TORCH_PROGRAM=("$@"); return 0 ;;
  esac
  TORCH_PROGRAM_ERROR="torchrun cannot run 'python ${*:-}': give python [-u] SCRIPT, python [-u] -m MODULE, or a program"
  return 1
}
'''.strip("\n")


# The plan's environment as defaults: a variable the environment already sets (even to
# nothing) is kept and named in ENV_KEPT, as the nccl-conf step promises ("environment
# variables override these").
_PLANNED_ENV_SH = r'''
ENV_KEPT=()
planned_env() {
  if [ -n "${!1+set}" ]; then ENV_KEPT+=("$1"); export "${1?}"; else export "$1=$2"; fi
}
'''.strip("\n")


def planned_env_lines(env: Sequence[Tuple[str, str]]) -> List[str]:
    """Shell lines that export the plan's environment unless the environment sets it:
    ENV_KEPT then names the ones it did (shared with the sbatch file)."""
    lines = [comment(_("A variable the environment already sets keeps its value (even an "
                       "empty one):\nthe script names those it kept."))]
    lines += _PLANNED_ENV_SH.splitlines()
    if not env:  # nothing to keep: no function for shellcheck to call unused
        lines = ["ENV_KEPT=()"]
    return lines + [f"planned_env {k} " + "'" + v.replace("'", "'\\''") + "'"
                    for k, v in env]


def sq(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def exports(job: Job, tag: str) -> List[str]:
    """The plan's environment, each variable unless the environment sets it already (tag:
    the prefix of the line that names those)."""
    return planned_env_lines(checked_env(job)) + [
        f"if [ \"${{#ENV_KEPT[@]}}\" -gt 0 ]; then echo \"{tag}: from the environment, not "
        f"the plan: ${{ENV_KEPT[*]}}\" >&2; fi"]


def words(args: Sequence[str]) -> str:
    return " ".join(shlex.quote(a) for a in args)


def mpirun_lines(job: Job, mca: Mapping[str, str], tail: str) -> List[str]:
    """Lines that pick the mpirun arguments (mca: settings in Open MPI 4 names) for the Open
    MPI installed, then run `mpirun ... tail`: tail is the rest of mpirun's command line."""
    x = [a for k in passed_env(job) for a in ("-x", k)]
    return [
        comment(_("Open MPI 5 (PRRTE) names the ssh settings differently from Open MPI 4 "
                  "(ORTE):\nthe mpirun installed says which it is.")),
        f"major=$({OMPI_VERSION_SH}) || true",
        "major=${major%%.*}",
        "if [[ $major =~ ^[0-9]+$ ]] && [ \"$major\" -ge 5 ]; then",
        f"  ARGS=({words(mca_args(mca, job.passed, 5))})",
        "else",
        f"  ARGS=({words(mca_args(mca, job.passed))})",
        "fi",
        "if [ \"$(id -u)\" -eq 0 ]; then ARGS+=(--allow-run-as-root); fi",
        f"mpirun \"${{ARGS[@]}}\" {words(x) + ' ' if x else ''}{tail}".rstrip(),
    ]


# The job's sshd in a container (the Dockerfile's CMD, the MPIJob's and Volcano's workers)
# reads a private copy of authorized_keys first: the image's MOUNTED_KEYS makes it, at the
# container's start, where ~/.ssh is an operator's Secret on a mode-1777 tmpfs (sshd's
# StrictModes refuses keys there); anywhere else there is no copy and ~/.ssh/authorized_keys
# is read as before. An option on sshd's command line, so that a plain instance's
# configuration (apply, the launch script) stays as it is.
MOUNTED_KEYS = "/usr/local/libexec/hpcwizard/mounted-keys"  # recipes/mounted-keys.sh
KEYS_COPY = ".hpcwizard-sshd/authorized_keys"  # under the job user's home
SSHD_KEYS_OPTION = ("-o", f"AuthorizedKeysFile={KEYS_COPY} .ssh/authorized_keys")


def mounted_keys_line() -> str:
    """The copy made when the image has the script (an image without hpcwizard's setup
    has none, and its sshd reads ~/.ssh as before)."""
    return f"if [ -x {MOUNTED_KEYS} ]; then {MOUNTED_KEYS} {KEYS_COPY}; fi"


def sshd_lines(job: Job) -> List[str]:
    """The worker's sshd in the foreground on the plan's port: as root the system sshd (host
    keys made when the image has none), as another user the sshd settings hpcwizard's setup
    wrote in its home (they name the port); either reads the keys a mounted Secret holds
    (MOUNTED_KEYS)."""
    keys = words(SSHD_KEYS_OPTION)
    return [
        comment(_("Under the operator's Secret (a mode-1777 ~/.ssh) sshd reads a private copy "
                  "of its keys.")),
        mounted_keys_line(),
        "if [ \"$(id -u)\" -eq 0 ]; then",
        "  install -d -m 0755 /run/sshd",
        "  if ! compgen -G '/etc/ssh/ssh_host_*_key' >/dev/null; then ssh-keygen -A; fi",
        f"  exec /usr/sbin/sshd -D -e -p {job.ssh_port} {keys}",
        "fi",
        "[ -r \"$HOME/.sshd_config\" ] || { echo \"no $HOME/.sshd_config: build the image with"
        " hpcwizard's setup for $(id -un)\" >&2; exit 2; }",
        f"exec /usr/sbin/sshd -D -e -f \"$HOME/.sshd_config\" {keys}",
    ]


def torchrun_lines(nnodes: str, node_rank: str, master: str, nproc: str,
                   program: Sequence[str]) -> List[str]:
    """torchrun with the rendezvous given: each a shell word ("$SLURM_JOB_NUM_NODES")."""
    return [f"exec torchrun --nnodes={nnodes} --node-rank={node_rank} --nproc-per-node={nproc} "
            f"--master-addr={master} --master-port=\"${{MASTER_PORT:-29500}}\" {words(program)}"]
