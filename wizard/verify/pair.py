"""A test program run on two instances at once, through the job's own launch script: the
torch checks' halves (all-reduce, bus bandwidth), and the files they need copied to the
other instance first."""
from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from typing import Mapping, Optional, Sequence, Tuple

from ..facts import Facts
from ..i18n import _
from ..inputs import ascii_int
from ..render import launch
from .context import Ctx, gather
from .probes import CopyTo, LaunchHalf, Ran, WriteOnce
from .shipped import program

RENDEZVOUS_PORT = "29500"  # torchrun's MASTER_PORT in the launch script, when none is set
# torchrun takes PET_<OPTION> as its options' defaults: an elastic job's rendezvous in
# verify's own environment would reach the local half only. Said to both: static, at
# MASTER_ADDR:MASTER_PORT (torch.distributed.run get_rdzv_endpoint: an empty endpoint with
# static is the master's), the default id and conf, and no standalone (check_env reads it
# with int(), so "0", not "").
STATIC_RENDEZVOUS = (("PET_RDZV_BACKEND", "static"), ("PET_RDZV_ENDPOINT", ""),
                     ("PET_RDZV_ID", "none"), ("PET_RDZV_CONF", ""), ("PET_STANDALONE", "0"))


def spread(ctx: Ctx, hosts: Sequence[str], path: str, data: bytes) -> Optional[Ran]:
    """Put a file at the same path on each host over SSH (skipped where it already is, so a
    shared home is never truncated). Returns the failed command, if any."""
    for host in hosts:
        r = ctx.ask(CopyTo(host, ctx.port, path, data, user=ctx.user))
        if not r.ok:
            return r
    return None


def cache_path(ctx: Ctx, name: str, text: str) -> str:
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return f"{ctx.plan.target.home}/.cache/hpcwizard/{digest}-{name}"


# torchrun's --nproc-per-node words (torch.distributed.run determine_local_world_size):
# gpu refuses to start without CUDA, cpu starts one per CPU, auto the accelerators else as cpu
_CPU_SAMPLE = 2


def torch_nproc(facts: Facts, env: Mapping[str, str]) -> Tuple[int, str]:
    """(the processes per instance verify's all-reduce starts, where that count came from),
    by the launch script's rule: NPROC_PER_NODE, a number (the launch script refuses a word
    there: it is hpcwizard's own count); else Kubeflow's PET_NPROC_PER_NODE, a number or
    one of torchrun's words, which the launch passes to torchrun as they are; else the GPUs
    (the facts': the launch counts them with nvidia-smi when it runs), at least 1. The
    words as torchrun counts them: auto and gpu the GPUs here; gpu with none is refused, as
    torchrun refuses it. cpu, and auto with no GPU, start one process per CPU in torchrun:
    verify starts 2 (fewer CPUs: 1 each), which proves what a per-CPU count needs (several
    local ranks on each instance, a world of 2 x N) without a Python with torch per core on
    both instances. xpu: 1, verify does not count XPUs. Told through the environment, so
    verify run where the job runs checks the job's count; given to both halves outright,
    since the remote one, over SSH, sees none of this environment. None of these as a
    count: (0, the refusal)."""
    for var in ("NPROC_PER_NODE", "PET_NPROC_PER_NODE"):
        value = env.get(var, "").strip()
        if not value:
            continue
        if var == "PET_NPROC_PER_NODE" and value in ("auto", "cpu", "gpu", "xpu"):
            return _nproc_word(facts, var, value)
        n = ascii_int(value)
        if n is None or not 1 <= n <= 999999:
            return 0, _("{var}={value!r} is not a number of processes (1 or more): the launch "
                        "script refuses it").format(var=var, value=value[:40])
        return n, var
    gpus = len(facts.gpus)
    return (gpus, _("the GPUs here")) if gpus else (1, _("no GPU here, 1"))


def _nproc_word(facts: Facts, var: str, word: str) -> Tuple[int, str]:
    gpus = len(facts.gpus)
    if word in ("auto", "gpu") and gpus:
        return gpus, _("the GPUs here")
    if word == "gpu":
        return 0, _("{var}=gpu, and no GPU here: torchrun refuses it without CUDA").format(
            var=var)
    if word == "xpu":
        return 1, _("{var}=xpu: 1, verify does not count XPUs").format(var=var)
    cpus = facts.cpus or 1
    n = min(_CPU_SAMPLE, cpus)
    return n, _("{var}={word}: {n} of the {cpus} CPUs here (torchrun starts one per "
                "CPU)").format(var=var, word=word, n=n, cpus=cpus)


def launch_pair(ctx: Ctx, other: str, name: str, nproc: int,
                extra_env: Sequence[Tuple[str, str]] = ()) -> Tuple[Ran, Ran, str, Optional[str]]:
    """programs/NAME through the launch script, nproc processes here (node rank 0) and nproc
    on other (node rank 1), at once: (this half, that half, the command both are, why they
    could not start or None)."""
    here = ctx.here_name()
    script = launch.render(ctx.plan.job)
    test = program(name)
    spath = cache_path(ctx, "launch.sh", script)
    ppath = cache_path(ctx, name, test)
    for path, text in ((spath, script), (ppath, test)):
        ctx.ask(WriteOnce(path, text, user=ctx.user))
        failed = spread(ctx, [other], path, text.encode())
        if failed is not None:
            empty = Ran((), 1, "")
            return empty, empty, failed.command, _(
                "cannot copy the test to {host} over SSH ({error})").format(
                host=other, error=failed.last_line())
    # The rendezvous (torchrun's TCP store on the first host) named on both sides: a
    # MASTER_ADDR or MASTER_PORT in verify's own environment must not reach one half only.
    # So is the count of processes: the expected lines are 2 x nproc whatever each half
    # would count by itself.
    env = (*extra_env, ("HOSTS", f"{here},{other}"), ("WAIT_TRIES", "5"),
           ("MASTER_ADDR", here), ("MASTER_PORT", RENDEZVOUS_PORT),
           ("NPROC_PER_NODE", str(nproc)), *STATIC_RENDEZVOUS)
    # The python3 that imports torch here (the same image is at the same path there): an
    # SSH command's PATH often lacks a conda or pyenv interpreter.
    # Each half's rank said outright: a NODE_RANK in verify's environment (the platform's
    # rank of this instance in the whole job) would reach the local half and, for HOSTS of
    # two, be refused or make both halves rank 1.
    local = LaunchHalf(spath, ctx.python, ppath, env + (("NODE_RANK", "0"),), user=ctx.user)
    remote = LaunchHalf(spath, ctx.python, ppath, env + (("NODE_RANK", "1"),), host=other,
                        port=ctx.port, user=ctx.user)
    with ThreadPoolExecutor(max_workers=2) as pool:
        r_local, r_remote = gather(ctx, [pool.submit(ctx.ask, local),
                                         pool.submit(ctx.ask, remote)])
    return r_local, r_remote, local.command + "  &  " + remote.command, None
