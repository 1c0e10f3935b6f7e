"""The job's environment as the launch script passes it, for verify's mpirun commands:
recipes/runtime.sh's hw_rt_forward_args asked once in verify's own environment (the shell
that would run the launch script), so that verify's ranks get the same `-x` names and
`--prefix` as the job's. Core: no textual."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Mapping, Optional, Tuple

from .. import runtime
from ..i18n import _
from ..job import FORWARD
from ..safe_text import cut
from ..render.shell import ENV_NAME  # the launch script refuses other words; verify skips them
from ..validate import BadInput
from .context import Ctx
from .probes import JobEnvironment

# Where the system's programs live: a python3 or an Open MPI elsewhere is the user's own (a
# venv, conda, a module, HPC-X), which the other instances must have at the same path.
SYSTEM_DIRS = ("/usr/", "/bin/", "/sbin/")


@dataclass(frozen=True)
class JobEnv:
    forward: Tuple[str, ...] = ()  # the names mpirun -x passes, in the launch script's order
    prefix: str = ""  # Open MPI's installation outside /usr/bin (mpirun --prefix), else ""
    python3: str = ""  # the python3 PATH finds here ("" none)
    sys_prefix: str = ""  # its sys.prefix
    omp: Optional[str] = None  # OMP_NUM_THREADS here, when set

    @property
    def own(self) -> bool:
        """Is anything of the job's environment outside the system's directories (a python3
        of a venv or conda, an Open MPI under /opt)? Only then is it checked on every rank."""
        return bool(self.prefix) or (bool(self.python3)
                                     and not self.python3.startswith(SYSTEM_DIRS))

    def mpirun_args(self, given: Tuple[str, ...] = ()) -> Tuple[str, ...]:
        """--prefix and -x NAME for each name that `given` (mpirun's other arguments) does not
        pass already."""
        passed = {a.split("=", 1)[0] for i, a in enumerate(given) if i and given[i - 1] == "-x"}
        out: Tuple[str, ...] = ("--prefix", self.prefix) if self.prefix else ()
        for name in self.forward:
            if name not in passed:
                out += ("-x", name)
        return out


def parse(text: str) -> JobEnv:
    """JobEnvironment's answer -> a JobEnv."""
    forward, fields = [], {}
    for line in text.splitlines():
        key, _sep, value = line.partition(" ")
        if key == "x" and ENV_NAME.fullmatch(value):
            forward.append(value)
        elif key in ("prefix", "python3", "sysprefix", "omp"):
            fields[key] = value
    return JobEnv(tuple(forward), fields.get("prefix", ""), fields.get("python3", ""),
                  fields.get("sysprefix", ""), fields.get("omp"))


def more_names(env: Mapping[str, str]) -> Tuple[str, ...]:
    """FORWARD_ENV's names (blanks or commas between them), as the launch script reads it;
    a word that is no variable name is refused as the launch script refuses it."""
    # split as the launch script's `read -a` with IFS space, tab and newline: a \r is part
    # of a word there, and refused
    words = [w for w in re.split(r"[ \t\n,]+", env.get(FORWARD.variable, "")) if w]
    for word in words:
        if not ENV_NAME.fullmatch(word):
            raise BadInput(_("{variable}: {word!r} is not a variable name (letters, digits and "
                             "_, not first a digit)").format(variable=FORWARD.variable,
                                                            word=cut(word)))
    return tuple(words)


def job_env(ctx: Ctx, ompi_version: str) -> JobEnv:
    """The job's environment here, asked once per verification; an empty one when the
    runtime cannot answer (nothing is then added to verify's mpirun)."""
    if ctx.job_env is None:
        names = tuple(n for n in FORWARD.names if n not in ctx.plan.job.passed)
        try:
            more = more_names(os.environ)
        except BadInput:  # the CLI refused it before the checks; the wizard's verify goes on
            more = ()
        r = ctx.ask(JobEnvironment(runtime.library(), names, FORWARD.prefixes, more,
                                   ompi_version, user=ctx.user))
        ctx.job_env = parse(r.out) if r.ok else JobEnv()
    return ctx.job_env
