"""The instance runtime's answers, from the one place they are written: recipes/runtime.sh,
the library the launch script embeds. `verify` asks it which hosts make up the job and in
what order (`discover`), which of them this instance is (`rank_of`), and writes hostfiles as
the launch does (`hostfile_text`), so that what verify checks is what the launch will use.

The library runs as `bash -c LIBRARY; hw_rt_answer ...`: its text and a fixed call are the
only shell source; what the user gave (--hosts, --hostfile, the environment, the names)
reaches it as arguments and environment variables, never as source. Its answers come back
NUL-separated. Core: no textual.
"""
from __future__ import annotations

import os
import subprocess
from functools import lru_cache
from typing import Dict, Mapping, Optional, Sequence, Union

from . import recipes
from .hosts import Hosts
from .i18n import _
from .validate import BadInput

# Variables bash itself reads at start or that change how the library's text is parsed: a
# user's environment decides the inputs, never the program.
_SHELL_VARS = ("BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "CDPATH", "GLOBIGNORE", "IFS",
               "BASH_XTRACEFD", "PS4")
TIMEOUT = 60  # seconds: 4096 hosts take about a second; getent for each of them, more


@lru_cache(maxsize=1)
def library() -> str:
    """The text of recipes/runtime.sh as shipped (a wheel, a checkout and the zipapp alike)."""
    return recipes.read_text("runtime.sh")


def _environment(env: Optional[Mapping[str, str]]) -> Dict[str, str]:
    given = os.environ if env is None else env
    out = {k: v for k, v in given.items()
           if k not in _SHELL_VARS and not k.startswith("BASH_FUNC_")}
    out.setdefault("PATH", os.environ.get("PATH", os.defpath))
    return out


# --hosts comes on standard input: an argument is at most 128 KiB (MAX_ARG_STRLEN), a host
# list up to 1 MiB ($(cat) drops trailing newlines, which only separate names).
_CALL = '''
if [ "$1" = discover-stdin ]; then
  shift
  hw_rt_answer discover --hosts "$(cat)" "$@"
else
  hw_rt_answer "$@"
fi
'''


def _answer(what: str, args: Sequence[str], env: Optional[Mapping[str, str]],
            stdin: Optional[str] = None) -> "subprocess.CompletedProcess[bytes]":
    script = library() + "\n" + _CALL
    try:
        return subprocess.run(["bash", "--norc", "--noprofile", "-c", script, "hw_rt", what,
                               *args], env=_environment(env),
                              input=None if stdin is None else stdin.encode("utf-8"),
                              stdin=subprocess.DEVNULL if stdin is None else None,
                              capture_output=True, timeout=TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BadInput(_("the instance runtime (bash) could not run: {error}").format(
            error=exc)) from None


def _refusal(proc: "subprocess.CompletedProcess[bytes]") -> BadInput:
    lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
    return BadInput(lines[-1] if lines else _("the instance runtime failed (status {rc})")
                    .format(rc=proc.returncode), "hosts")


def discover(hosts: Optional[str] = None, hostfile: Optional[str] = None,
             env: Optional[Mapping[str, str]] = None) -> Optional[Hosts]:
    """The job's hosts as the launch script finds them: from --hosts, --hostfile, else the
    platform's variables in env (default os.environ), in the library's order and naming its
    source; None when no source names any. BadInput with the library's line when one is
    given but cannot be read."""
    args = ["--hostfile", hostfile] if hostfile is not None else []
    proc = _answer("discover-stdin" if hosts is not None else "discover", args, env, hosts)
    if proc.returncode != 0:
        raise _refusal(proc)
    fields = [f.decode("utf-8", "replace") for f in proc.stdout.split(b"\0")[:-1]]
    source, count = fields[0], int(fields[1])
    names = tuple(fields[2:2 + count])
    slots = tuple(int(s) for s in fields[3 + count:])
    if not names:
        return None
    return Hosts(names, source, slots)


def rank_of(names: Sequence[str], env: Optional[Mapping[str, str]] = None) -> Optional[int]:
    """Which of names this instance is, as the launch script decides it: NODE_RANK, else
    PET_NODE_RANK (Kubeflow's: a TrainJob sets no NODE_RANK), else the host name, else an
    address; None when it is none of them. BadInput when the rank variable is set but is
    not one of the ranks."""
    if not names:
        return None
    proc = _answer("rank", list(names), env)
    if proc.returncode == 1:
        return None
    if proc.returncode != 0:
        raise _refusal(proc)
    return int(proc.stdout.split(b"\0")[0])


def hostfile_text(names: Sequence[str], slots: Union[int, Sequence[int]]) -> str:
    """The hostfile hw_rt_write_hostfile writes: 'NAME slots=N' a line, N the one number
    for every host or each host's (tests/test_runtime.py holds the two to the same text)."""
    per = [int(slots)] * len(names) if isinstance(slots, int) else [int(n) for n in slots]
    return "".join(f"{name} slots={n}\n" for name, n in zip(names, per))
