"""The plan as a Slurm batch script (`export --format sbatch`), run with the user's program as
its arguments: `sbatch job.sbatch ./hello` (the command line's --nodes=N beats the #SBATCH
lines).

MPI: `srun --mpi=pmix` where this Slurm has PMIx (`srun --mpi=list`, asked when the job runs),
else `mpirun` over the allocation (an Open MPI built with Slurm support starts its daemons
through Slurm; one without reaches the hosts of the allocation over ssh on the plan's port),
and never a bare `srun` of an Open MPI program without PMIx: Open MPI 5 then starts every rank
as a singleton, rank 0 of 1, without an error. MPI_LAUNCHER=srun|mpirun chooses by hand.
PyTorch: one `torchrun` a node through srun, the rendezvous at the allocation's first node.
"""
from __future__ import annotations

from typing import List

from .. import __version__
from ..i18n import _, comment
from ..job import Job
from .engine import JOB_NAME, NODES
from .mpirun import mca_settings, with_ssh_retries
from .shell import TORCH_PROGRAM_SH, exports, mpirun_lines

_MPI = r'''
LAUNCHER=${MPI_LAUNCHER:-}
if [ -z "$LAUNCHER" ]; then
  # grep reads the whole list: grep -q stops at the match, srun's next line meets a closed
  # pipe, and pipefail takes its SIGPIPE for "no PMIx"
  if srun --mpi=list 2>&1 | grep -w pmix >/dev/null; then LAUNCHER=srun; else LAUNCHER=mpirun; fi
fi
case "$LAUNCHER" in
  srun)
    echo "sbatch[$SLURM_JOB_ID]: srun --mpi=pmix on $SLURM_JOB_NODELIST: $*" >&2
    exec srun --mpi=pmix "$@" ;;
  mpirun) ;;
  *) echo "MPI_LAUNCHER=$LAUNCHER is not srun or mpirun" >&2; exit 2 ;;
esac

__WARNING__
echo "sbatch[$SLURM_JOB_ID]: mpirun over the allocation $SLURM_JOB_NODELIST: $*" >&2
HOSTFILE=$(mktemp "${TMPDIR:-/tmp}/hpcwizard-hosts.XXXXXX")
trap 'rm -f "$HOSTFILE"' EXIT
scontrol show hostnames "$SLURM_JOB_NODELIST" \
  | awk -v slots="${SLURM_NTASKS_PER_NODE:-1}" '{print $1 " slots=" slots}' > "$HOSTFILE"
'''

_TORCH = r'''
# awk reads to the end: 'head -n 1' would leave scontrol a broken pipe (pipefail)
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | awk 'NR == 1')
NPROC=${NPROC_PER_NODE:-${SLURM_GPUS_ON_NODE:-1}}
# 'python3 train.py': torchrun runs the script with its own Python (an interpreter named by
# its path runs torch.distributed.run); another program runs as it is (--no-python).
__TORCH_PROGRAM_SH__
torch_program "$@" || { echo "sbatch[$SLURM_JOB_ID]: $TORCH_PROGRAM_ERROR" >&2; exit 2; }
TORCHRUN=(torchrun)
if [ -n "$TORCH_PY" ]; then TORCHRUN=("$TORCH_PY" -m torch.distributed.run); fi
echo "sbatch[$SLURM_JOB_ID]: torchrun on $SLURM_JOB_NODELIST, rendezvous $MASTER_ADDR: $*" >&2
exec srun --ntasks-per-node=1 "${TORCHRUN[@]}" --nnodes="$SLURM_JOB_NUM_NODES" \
  --nproc-per-node="$NPROC" --rdzv-id="$SLURM_JOB_ID" --rdzv-backend=c10d \
  --rdzv-endpoint="$MASTER_ADDR:${MASTER_PORT:-29500}" "${TORCH_PROGRAM[@]}"
'''


def _header(job: Job) -> List[str]:
    what = _("MPI over {network}").format(network=job.network.upper()) if job.mpi else \
        _("PyTorch over {network}").format(network=job.network.upper())
    out = [
        "#!/usr/bin/env bash",
        comment(_("Written by hpcwizard {version}: the plan as a Slurm batch script ({what}).")
                .format(version=__version__, what=what)),
        comment(_("Submit it with your program and its arguments:")),
        ("#   sbatch job.sbatch ./my_mpi_program ARGS" if job.mpi
         else "#   sbatch job.sbatch train.py --lr 0.1"),
        "#   sbatch --nodes=4 job.sbatch ...",
        comment(_("Edit: --nodes (instances) and --ntasks-per-node (ranks per node) below, "
                  "and add\n--time and --partition as your cluster wants, or give them to "
                  "sbatch (its command line\nwins); the environment below.")),
    ]
    if not job.mpi:
        out.append(comment(_("PyTorch: one task a node (torchrun starts the processes): set "
                             "NPROC_PER_NODE, or\nask for GPUs with --gpus-per-node=N.")))
    out.append(f"# framework={job.framework} network={job.network}"
               + (f" ssh_port={job.ssh_port}" if job.mpi else ""))  # PyTorch has no SSH
    out += [
        f"#SBATCH --job-name={JOB_NAME}",
        f"#SBATCH --nodes={NODES}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --output={JOB_NAME}-%j.out",
    ]
    return out


def render(job: Job) -> str:
    out = _header(job)
    out += [
        "",
        "set -euo pipefail",
        "[ $# -gt 0 ] || { echo \"usage: sbatch job.sbatch PROGRAM [ARGS...]\" >&2; exit 2; }",
    ]
    if job.env:
        out.append(comment(_("The plan's environment (srun passes it to every task; mpirun "
                             "with -x).")))
        out += exports(job, "sbatch[$SLURM_JOB_ID]")
    if job.mpi:
        out.append(comment(_("MPI_LAUNCHER=srun|mpirun chooses how the ranks start; by default "
                             "srun --mpi=pmix\nwhere this Slurm has PMIx (srun --mpi=list), "
                             "else mpirun over the allocation.")))
        warning = comment(_("Without PMIx, never start an Open MPI program with a bare srun: "
                            "Open MPI 5 then\nstarts every rank as a singleton (rank 0 of 1), "
                            "without an error."))
        out.append(_MPI.strip("\n").replace("__WARNING__", warning))
        out += mpirun_lines(job, with_ssh_retries(mca_settings(job)),
                            '--hostfile "$HOSTFILE" "$@"')
        out[-1] = "set +e\n" + out[-1] + "\nrc=$?\nset -e\nexit \"$rc\""
    else:
        out.append(_TORCH.strip("\n").replace("__TORCH_PROGRAM_SH__", TORCH_PROGRAM_SH))
    return "\n".join(out) + "\n"
