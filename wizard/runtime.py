"""The instance runtime's answers, from the one place they are written: recipes/runtime.sh,
the library the launch script embeds. `verify` asks it which hosts make up the job and in
what order (`discover`), which of them this instance is (`rank_of`), and writes hostfiles as
the launch does (`hostfile_text`), so that what verify checks is what the launch will use.
The wizard's hosts field (`hosts_from_text`) and the SSH client's Host patterns
(`from_environment`) ask it too: Python holds no host grammar of its own.

The library runs as `bash -c LIBRARY; hw_rt_answer ...`: its text and a fixed call are the
only shell source; what the user gave (--hosts, --hostfile, the environment, the names)
reaches it as arguments and environment variables, never as source. Its answers come back
NUL-separated. Core: no textual.
"""
from __future__ import annotations

import os
import subprocess
from functools import lru_cache
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import recipes
from .hosts import Hosts
from .i18n import N_, _
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


# The library's refusals a user may see (_hw_rt_fail's templates, in str.format syntax), so
# that they are said in the user's language; tests/test_runtime.py holds this list to the
# library's text.
MESSAGES = (
    N_("host pattern {text!r} gives more than {max} hosts"),
    N_("host pattern {text!r} has more than {max} ranges"),
    N_("host pattern {text!r}: the range {range} counts down"),
    N_("node list item {item!r} has an unmatched bracket"),
    N_("node list range {range!r} in {item!r} is not N or N-M"),
    N_("node list range {range!r} gives more than {max} hosts"),
    N_("node list range {range!r} counts down"),
    N_("host list of {n} characters is longer than the {max} allowed"),
    N_("the brace list {braces} is not supported: write the names out (n1,n2), or give a "
       "range (n{{1..2}}, n[1-2]) or a bracket list (n[1,2])"),
    N_("{source} names no hosts"),
    N_("{source} names more than {max} hosts"),
    N_("host name {value!r} is not valid: use letters, digits, '-' and '.', no spaces or "
       "other characters"),
    N_("{source} names {host} twice"),
    N_("{source} names {host} twice: {first} and {host} are one host (host names do not "
       "tell case apart)"),
    N_("{what} {path} does not exist"),
    N_("{what} {path} is not a regular file ({kind})"),
    N_("{what} {path} cannot be read: {error}"),
    N_("{what} {path} is larger than {limit}"),
    N_("{what} {path} holds a NUL byte: a hostfile is text, one host a line"),
    N_("line {line}: the count in {field!r} is not a number from 1 to {max}"),
    N_("line {line}: more than {max} hosts"),
    N_("{var} {value!r} is not a positive number"),
    N_("{given} is set but {missing} is not: together they name the job's hosts; set "
       "{missing} too, or give the hosts with --hosts or HOSTS"),
    N_("{source}: WORLD_SIZE {size} is not a multiple of {var} {per}: set PET_NNODES, or "
       "give the hosts with --hosts or HOSTS"),
    N_("{source}: {var} {n} is more than {max} hosts"),
    N_("{source}: cannot tell the other {n} host names from {var} {master!r}; give them "
       "with --hosts or HOSTS"),
    N_("give --hosts or --hostfile, not both"),
    N_("{var}={value!r} is not 0..{last}"),
    N_("{var}={value!r}, but {source} names {n} hosts"),
    N_("{var}={value!r} is not the first host of {source} ({first})"),
    N_("{file} names other hosts than {source}, or in another order"),
)
# values that are words of the library's, said in the user's language too
_WORDS = {"kind": (N_("a directory"), N_("a FIFO"), N_("a character device"),
                   N_("a block device"), N_("a socket"), N_("not a regular file"))}


def _refusal(proc: "subprocess.CompletedProcess[bytes]") -> BadInput:
    """The library's refusal as data (where, template, KEY VALUE...), said with _(): the
    English line on its standard error when the data is not there or does not fit."""
    lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
    english = lines[-1] if lines else _("the instance runtime failed (status {rc})").format(
        rc=proc.returncode)
    fields = [f.decode("utf-8", "replace") for f in proc.stdout.split(b"\0")[:-1]]
    if len(fields) < 2 or len(fields) % 2:
        return BadInput(english, "hosts")
    where, template, pairs = fields[0], fields[1], fields[2:]
    args = dict(zip(pairs[::2], pairs[1::2]))
    for key, words in _WORDS.items():
        if args.get(key) in words:
            args[key] = _(args[key])
    try:
        text = _(template).format(**args)
    except (KeyError, IndexError, ValueError):
        return BadInput(english, "hosts")
    if where:
        text = _("{source}: {error}").format(source=where, error=text)
    return BadInput(text, "hosts")


def _fields(proc: "subprocess.CompletedProcess[bytes]") -> List[str]:
    return [f.decode("utf-8", "replace") for f in proc.stdout.split(b"\0")[:-1]]


def discover(hosts: Optional[str] = None, hostfile: Optional[str] = None,
             env: Optional[Mapping[str, str]] = None,
             label: Optional[str] = None) -> Optional[Hosts]:
    """The job's hosts as the launch script finds them: from --hosts, --hostfile, else the
    platform's variables in env (default os.environ), in the library's order and naming its
    source (label for hosts, when given: the wizard's field says "hosts"); None when no
    source names any. BadInput with the library's refusal when one is given but cannot be
    read."""
    args = ["--hostfile", hostfile] if hostfile is not None else []
    if label is not None:
        args += ["--label", label]
    proc = _answer("discover-stdin" if hosts is not None else "discover", args, env, hosts)
    if proc.returncode != 0:
        raise _refusal(proc)
    fields = _fields(proc)
    source, count = fields[0], int(fields[1])
    names = tuple(fields[2:2 + count])
    nslots = int(fields[2 + count])
    slots = tuple(int(s) for s in fields[3 + count:3 + count + nslots])
    rank_var = fields[3 + count + nslots]
    if not names:
        return None
    return Hosts(names, source, slots, rank_var)


def hosts_from_text(text: str, source: str) -> Hosts:
    """Hosts typed as a list or patterns ("node1,node2", "job-{0..3}", "node[1-4]"); source
    names them in the answer and in refusals ("--hosts", the wizard's field)."""
    got = discover(text, None, {}, label=source)
    if got is None:  # the library answers names or a refusal for a list: kept so for types
        raise BadInput(_("{source} names no hosts").format(source=source), "hosts")
    return got


def from_environment(env: Mapping[str, str]) -> Optional[Hosts]:
    """The hosts the platform's variables in env name; None only when none of them is set.
    BadInput naming the first one set when it cannot be read (never "no hosts", which would
    verify this instance only). Without bash when none is set at all (every plan asks)."""
    if not any(v.strip(_BLANKS) for k, v in env.items()
               if k in platform_variables() or (k.startswith("VC_") and k.endswith("_HOSTS"))):
        return None
    return discover(None, None, env)


_BLANKS = " \t\n\r\f\v"  # what the library takes as blank: ASCII only


@lru_cache(maxsize=1)
def platform_variables() -> Tuple[str, ...]:
    """The variables the library reads the job's hosts and this instance's rank from, the
    one list of them (Volcano's VC_<TASK>_HOSTS aside: a pattern, not names)."""
    proc = _answer("variables", [], {})
    if proc.returncode != 0:
        raise _refusal(proc)
    return tuple(_fields(proc))


def rank_of(names: Sequence[str], env: Optional[Mapping[str, str]] = None,
            rank_var: str = "") -> Optional[int]:
    """Which of names this instance is, as the launch script decides it: NODE_RANK, else
    PET_NODE_RANK (Kubeflow's: a TrainJob sets no NODE_RANK), else rank_var (Hosts.rank_var:
    the rank variable of the platform that named them), else the host name, else an
    address; None when it is none of them. BadInput when the rank variable is set but is
    not one of the ranks."""
    if not names:
        return None
    args = ["--rank-var", rank_var] if rank_var else []
    proc = _answer("rank", [*args, *names], env)
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
