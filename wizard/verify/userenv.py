"""The job's environment on every rank: where the shell that runs verify has a python3 of its
own (a venv or conda environment) or an Open MPI outside /usr/bin, mpirun runs that python3
on every host with the launch script's -x names and --prefix (jobenv), and each rank says
which Python it is (sys.prefix) and the OMP_NUM_THREADS it got. A rank with another Python,
or without the setting, names its instance. Where nothing of the environment is outside the
system's directories, the check is no part of the report: verify's own programs, in
/usr/bin, are then the job's too."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence

from ..i18n import _
from .cluster import _hostfile, _mpirun_args, mpi_setup, unmatched
from .context import Ctx, _check, _skip
from .jobenv import JobEnv, job_env
from .parse import HostMatcher, marked
from .probes import Mpirun
from .results import PASS, Check
from .spec import Spec

ID = "cluster/user-env"
MARK = "HPCWIZARD-RANK-ENV "
# What each rank runs: the python3 its PATH finds (the forwarded one), reporting itself.
REPORT_PY = ("import json, os, socket, sys; print(" + repr(MARK) + " + json.dumps({"
             "'host': socket.gethostname(), 'prefix': sys.prefix, "
             "'omp': os.environ.get('OMP_NUM_THREADS')}), flush=True)")


@dataclass(frozen=True)
class RankEnv:
    host: str
    prefix: str
    omp: Optional[str]


def rank_envs(text: str) -> List[RankEnv]:
    """The ranks' lines (MARK, then JSON) -> what each said; other lines are mpirun's."""
    out = []
    for rest in marked(text, MARK):
        try:
            d = json.loads(rest)
        except ValueError:
            continue
        if isinstance(d, dict) and isinstance(d.get("host"), str) and \
                isinstance(d.get("prefix"), str):
            omp = d.get("omp")
            out.append(RankEnv(d["host"], d["prefix"], omp if isinstance(omp, str) else None))
    return out


def problems(env: JobEnv, names: Sequence[str], ranks: Sequence[RankEnv],
             said: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """host -> what is wrong there ({} when every host's rank runs this environment's Python
    with its OMP_NUM_THREADS): another Python, the setting missing or different, no answer,
    two answers, a stranger. said: the names the key logins learned (HostMatcher)."""
    found = HostMatcher(tuple(names), said or {}).match([r.host for r in ranks])
    gone = unmatched(found)
    out: Dict[str, str] = {}
    for host in found.matcher.hosts:  # in the hosts' order, as the check names them
        label = found.label(host)
        whys = [_wrong(env, r) for a, r in zip(found.answers, ranks) if a.host == host]
        why = gone.get(label) or next((w for w in whys if w), "")
        if why:
            out[label] = why
    out.update((s, gone[s]) for s in found.strangers)
    return out


def _wrong(env: JobEnv, r: RankEnv) -> str:
    """What is wrong with one rank's answer ("" nothing): another Python, the setting."""
    if r.prefix != env.sys_prefix:
        return _("python3 of {got}, not {want}").format(got=r.prefix, want=env.sys_prefix)
    if env.omp is not None and r.omp != env.omp:
        return (_("OMP_NUM_THREADS unset, not {want}") if r.omp is None else
                _("OMP_NUM_THREADS={got}, not {want}")).format(got=r.omp, want=env.omp)
    return ""


def title(ctx: Ctx, host: str = "") -> str:
    return _("every rank runs the program of this environment")


def check(ctx: Ctx, host: str = "") -> List[Check]:
    if ctx.cannot_act_as:
        return []
    env = job_env(ctx, mpi_setup(ctx)[1])
    if not env.own or not env.sys_prefix:
        return []
    mpirun = ctx.found("cluster/mpirun")
    if mpirun is None or mpirun.status != PASS:
        return [_skip(ID, title(ctx), _("mpirun across hosts did not pass"))]
    t0 = time.monotonic()
    names = list(ctx.names)
    hf = ctx.write_temp("hostfile-env", _hostfile(ctx, names))
    r = ctx.ask(Mpirun(hf, len(names), (*_mpirun_args(ctx), "--map-by", "node"),
                       ("python3", "-c", REPORT_PY), user=ctx.user))
    wrong = problems(env, names, rank_envs(r.out), ctx.said)
    ok = r.ok and not wrong
    omp = (_("; OMP_NUM_THREADS={value}").format(value=env.omp) if env.omp is not None else "")
    if ok:
        detail = _("{n} ranks run the python3 of {prefix}{omp}").format(
            n=len(names), prefix=env.sys_prefix, omp=omp)
    elif wrong:
        detail = "; ".join(f"{h}: {why}" for h, why in wrong.items())
    else:
        detail = r.last_line()
    return [_check(ID, title(ctx), r, ok, detail=detail, t0=t0,
                   fallback="" if r.ok else "mpi-daemons",
                   plain=_("The ranks on {hosts} do not run this environment's program. "
                           "mpirun -x passes PATH (and VIRTUAL_ENV, CONDA_PREFIX, "
                           "OMP_NUM_THREADS): activating the environment there is not needed, "
                           "but it must exist at the same path on every instance. Create "
                           "{prefix} on {hosts} (the same venv or conda environment), or put "
                           "it on a file system every instance mounts.").format(
                               hosts=", ".join(wrong) or ", ".join(names),
                               prefix=env.sys_prefix))]


# After cluster.CHECKS (orchestrate): it reads cluster/mpirun's result.
CHECKS = (Spec(ID, title, check, frameworks=("mpi",)),)
