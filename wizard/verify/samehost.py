"""Where the ranks on this instance may not read each other's memory (Yama's ptrace_scope 2
without CAP_SYS_PTRACE, or 3: recipes/runtime.sh hw_rt_cma, asked as the job's user), two
ranks here exchange 1 MiB each way (programs/samehost.c, far above the eager limits) with the
settings the launch script then passes: single copy off in the words of the Open MPI
installed here, UCX_TLS=^cma. Where single copy works, the check is no part of the report:
the job's own transfers are then Open MPI's defaults, which cluster/mpirun runs."""
from __future__ import annotations

import time
from typing import List

from .. import runtime
from ..i18n import _
from ..render.mpirun import NO_CMA_ENV, mca_args, no_cma_args
from ..runtime import hostfile_text
from .cluster import mpi_setup
from .context import Ctx, _check, _skip
from .pair import cache_path
from .probes import BuildMpiProgram, IsExecutable, Mpirun, SingleCopy
from .results import Check
from .shipped import MPI_SAMEHOST, program
from .spec import Spec

ID = "here/single-copy-off"
PASSED = "HPCWIZARD-MPI-PAIR bytes=1048576 wrong=0"


def title(ctx: Ctx, host: str = "") -> str:
    return _("two ranks on this instance exchange 1 MiB with single copy off")


def check(ctx: Ctx, host: str = "") -> List[Check]:
    if ctx.cannot_act_as:  # the ranks' capabilities are the job user's: unknown from here
        return []
    t0 = time.monotonic()
    asked = ctx.ask(SingleCopy(runtime.library(), user=ctx.user))
    lines = asked.lines()
    if not asked.ok or not lines or lines[0] != "no":
        return []
    why = lines[1] if len(lines) > 1 else ""
    source = program(MPI_SAMEHOST)
    exe = cache_path(ctx, MPI_SAMEHOST, source)[:-2]
    if not ctx.ask(IsExecutable(exe, user=ctx.user)).ok:
        built = ctx.ask(BuildMpiProgram(exe, source, user=ctx.user))
        if not built.ok:
            return [_skip(ID, title(ctx), _("cannot build the test program with mpicc: "
                                            "{error}").format(error=built.last_line()),
                          command=built.command)]
    major = mpi_setup(ctx)[0]
    hf = ctx.write_temp("hostfile-here", hostfile_text([ctx.here_name() or "localhost"], [2]))
    args = ["--allow-run-as-root"] if ctx.target == "root" or ctx.plan.target.uid == 0 else []
    args += [*mca_args(ctx.plan.job.mca, major=major), *no_cma_args(major)]
    for name in NO_CMA_ENV:
        args += ["-x", name]
    r = ctx.ask(Mpirun(hf, 2, tuple(args), (exe,), user=ctx.user,
                       extra_env=tuple(NO_CMA_ENV.items())))
    ok = r.ok and PASSED in r.out and "errno = 1" not in r.out
    return [_check(ID, title(ctx), r, ok, t0=t0,
                   detail=_("single copy off ({why}): {args}").format(
                       why=why, args=" ".join(no_cma_args(major))) if ok else r.last_line(),
                   plain=_("Two ranks on this instance could not exchange a large message "
                           "with single copy off; the diagnosis below names the reason."))]


# After here.CHECKS (orchestrate), with or without hosts: it reads cluster's mpi_setup,
# and cluster's checks read here's.
CHECKS = (Spec(ID, title, check, frameworks=("mpi",)),)
