"""The job's hosts as the wizard needs them: the hosts field (`hosts_from_text`: a list or
patterns, checked as the user types) and the platform's variables (`from_environment`, for
the SSH client's Host patterns and the field's default). The launch script and `verify`
find hosts with recipes/runtime.sh (wizard/runtime.py); this module gives the same answers
for the inputs it takes, held to them by tests/fixtures/host-inputs.toml
(tests/test_runtime.py runs every case through both).

Lists: items between commas or any blanks (space, tab, newline); each item may be a
pattern with a count (`job-worker-{0..3}`) or a Slurm-style list (`node[01-03,07]`); a
range counting down (`n{3..1}`) is refused. The environment, the first one set:
   `HOSTS` (the launch script's own variable), `HOSTFILE`,
   an OpenMPI/PRRTE hostfile path (`OMPI_MCA_orte_default_hostfile`,
   `OMPI_MCA_prte_default_hostfile`, `PRTE_MCA_prte_default_hostfile`),
   a Slurm node list (`SLURM_JOB_NODELIST`, `SLURM_NODELIST`),
   Volcano's `VC_<TASK>_HOSTS` (lists like HOSTS; the tasks MASTER, LAUNCHER and MPIMASTER
   first, then the others, each group by task name in byte order: node ranks follow it),
   `MASTER_ADDR` (or `PET_MASTER_ADDR`) with `PET_NNODES`, else with `WORLD_SIZE` divided
   by `PET_NPROC_PER_NODE` (a Kubeflow PyTorchJob's WORLD_SIZE counts processes; its
   naming: `<job>-master-0` then `<job>-worker-0..N-2`; or `<prefix>-0` then
   `<prefix>-1..N-1`, as TrainJob's `<job>-node-0-0.<job>`; the pattern is read in the first
   label only). No source: `PET_NNODES` without a master (training-operator v1.9 sets it on
   every PyTorchJob) and an elastic `PET_NNODES` MIN:MAX (its rendezvous decides the hosts).

The result says which source was used. Every name is checked with validate.host_name, so a
name never reaches shell text unchecked. A platform variable that is set but cannot be read
is an error naming the variable (never "no hosts"): `from_environment` answers None only
when none of them is set. Patterns are parsed without recursion, with limits stated below
(checked before anything is expanded), numbers through hpcwizard.inputs (ASCII digits),
and hostfiles read through inputs.read_text (regular files, HOSTFILE_LIMIT). Pure functions
of their inputs (the environment is a parameter); only reading a hostfile touches the file
system.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from .i18n import _
from .inputs import HOSTFILE_LIMIT, ascii_int, read_text
from .validate import BadInput, host_name

HOSTFILE_VARS = ("OMPI_MCA_orte_default_hostfile", "OMPI_MCA_prte_default_hostfile",
                 "PRTE_MCA_prte_default_hostfile")
SLURM_VARS = ("SLURM_JOB_NODELIST", "SLURM_NODELIST")
MAX_HOSTS = 4096
MAX_RANGES = 16  # range groups ({a..b} or [...]) in one name: 4096 hosts need 12 of size 2
MAX_TEXT = 1024 * 1024  # characters of a host list or pattern (4096 long names fit)
MAX_SLOTS = 65536  # slots= / cpu= / host:N in a hostfile

# ASCII digits only: \d would take '٣' (Arabic-Indic three) as a digit
_BRACE = re.compile(r"\{([0-9]+)\.\.([0-9]+)\}")
_BRACKET = re.compile(r"\[([^\[\]]*)\]")
_VC = re.compile(r"^VC_([A-Z0-9_]+)_HOSTS$")


@dataclass(frozen=True)
class Hosts:
    names: Tuple[str, ...]
    source: str  # where they came from, in words: "--hosts", "SLURM_JOB_NODELIST", ...
    slots: Tuple[int, ...] = ()  # per host, when the source said (hostfiles); else empty

    def to_dict(self) -> Dict[str, object]:
        return {"names": list(self.names), "source": self.source, "slots": list(self.slots)}


# --- expansions ---------------------------------------------------------------------------

def _short(text: str, limit: int = 60) -> str:
    """text for a one-line refusal: a pattern bomb is not printed whole."""
    return text if len(text) <= limit else text[:limit] + "…"


def _too_many(text: str, count: int, already: int = 0) -> None:
    """Refuse before expanding: ranges multiply, and the wizard checks as the user types."""
    if count + already > MAX_HOSTS:
        raise BadInput(_("host pattern {text!r} gives more than {max} hosts").format(
            text=_short(text), max=MAX_HOSTS))


def _too_long(text: str) -> None:
    if len(text) > MAX_TEXT:
        raise BadInput(_("host list of {n} characters is longer than the {max} allowed").format(
            n=len(text), max=MAX_TEXT))


def _too_many_ranges(text: str, n: int) -> None:
    if n > MAX_RANGES:
        raise BadInput(_("host pattern {text!r} has more than {max} ranges").format(
            text=_short(text), max=MAX_RANGES))


def _join(literals: Sequence[str], groups: Sequence[Sequence[str]]) -> List[str]:
    """literals[0] g0 literals[1] g1 ... literals[-1], for every pick of one per group (the
    first group varies slowest, as in brace and Slurm expansion)."""
    out: List[str] = []
    for pick in itertools.product(*groups):
        parts = [literals[0]]
        for value, literal in zip(pick, literals[1:]):
            parts += [value, literal]
        out.append("".join(parts))
    return out


def expand_pattern(text: str, already: int = 0) -> List[str]:
    """'job-worker-{0..3}' -> job-worker-0..3; '{00..11}' keeps the zero padding;
    several ranges multiply. Text without a range is returned as one name. Refused: more
    than MAX_RANGES ranges, a range counting down, more than MAX_HOSTS names (with
    `already` names before these), all before a name is built."""
    _too_long(text)
    literals: List[str] = []
    bounds: List[Tuple[str, str]] = []
    pos = 0
    for m in _BRACE.finditer(text):
        bounds.append((m.group(1), m.group(2)))
        _too_many_ranges(text, len(bounds))
        literals.append(text[pos:m.start()])
        pos = m.end()
    literals.append(text[pos:])
    count = 1
    for lo_s, hi_s in bounds:
        lo, hi = ascii_int(lo_s), ascii_int(hi_s)
        if lo is None or hi is None:  # numbers of more than 18 digits
            _too_many(text, MAX_HOSTS + 1)
        elif hi < lo:
            raise BadInput(_("host pattern {text!r}: the range {range} counts down").format(
                text=_short(text), range=f"{{{lo_s}..{hi_s}}}"))
        else:
            count *= hi - lo + 1
            _too_many(text, count, already)
    groups: List[List[str]] = []
    for lo_s, hi_s in bounds:
        width = len(lo_s) if lo_s.startswith("0") and len(lo_s) > 1 else 0
        groups.append([str(i).zfill(width) for i in range(int(lo_s), int(hi_s) + 1)])
    return _join(literals, groups)


def _split_top(text: str) -> List[str]:
    """Split on commas that are not inside [...]: a comma is inside when the last bracket
    before it opens one (as recipes/runtime.sh splits: brackets do not nest)."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            depth = 1
        elif ch == "]":
            depth = 0
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def expand_nodelist(text: str, already: int = 0) -> List[str]:
    """Slurm's compressed host list: 'node[01-03,07],gpu5,rack[1-2]-n[1-2]' ->
    node01 node02 node03 node07 gpu5 rack1-n1 rack1-n2 rack2-n1 rack2-n2."""
    _too_long(text)
    out: List[str] = []
    for item in _split_top(text):
        out += _expand_brackets(item, already + len(out))
    return out


def _expand_brackets(item: str, already: int = 0) -> List[str]:
    """One node list item, its [...] groups parsed and sized first, then multiplied."""
    literals: List[str] = []
    groups: List[List[Tuple[int, int, int]]] = []  # per group: (first, last, width) ranges
    pos = 0
    for m in _BRACKET.finditer(item):
        literals.append(item[pos:m.start()])
        pos = m.end()
        groups.append([])
        _too_many_ranges(item, len(groups))
    literals.append(item[pos:])
    if any("[" in lit or "]" in lit for lit in literals):
        raise BadInput(_("node list item {item!r} has an unmatched bracket").format(
            item=_short(item)))
    count = 1
    for group, m in zip(groups, _BRACKET.finditer(item)):
        size = 0
        for rng in m.group(1).split(","):
            rng = rng.strip()
            a, sep, b = rng.partition("-")
            if not re.fullmatch(r"[0-9]+", a) or (sep and not re.fullmatch(r"[0-9]+", b)):
                raise BadInput(_("node list range {range!r} in {item!r} is not N or N-M").format(
                    range=_short(rng), item=_short(item)))
            first, last = ascii_int(a), ascii_int(b if sep else a)
            if first is None or last is None:  # numbers of more than 18 digits
                raise BadInput(_("node list range {range!r} gives more than {max} "
                                 "hosts").format(range=_short(rng), max=MAX_HOSTS))
            if last < first:
                raise BadInput(_("node list range {range!r} counts down").format(range=rng))
            if last - first + 1 > MAX_HOSTS:
                raise BadInput(_("node list range {range!r} gives more than {max} "
                                 "hosts").format(range=rng, max=MAX_HOSTS))
            group.append((first, last, len(a)))
            size += last - first + 1
            _too_many(item, count * size, already)
        count *= size
        _too_many(item, count, already)
    values = [[str(i).zfill(width) for first, last, width in group
               for i in range(first, last + 1)] for group in groups]
    return _join(literals, values)


def parse_hostfile(text: str) -> Tuple[List[str], List[int]]:
    """OpenMPI ('node1 slots=4 max_slots=8'), MPICH/Hydra ('node1:4') or plain names;
    '#' comments and blank lines skipped. Returns names and slots (1 when not given). A
    count that is given but is not a number from 1 to MAX_SLOTS in ASCII digits is refused,
    naming its line: taking it as 1 would check a job other than the one the file names."""
    names: List[str] = []
    slots: List[int] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        name, n = fields[0], 1
        counts: List[Tuple[str, str]] = []
        if ":" in name and not name.startswith("["):
            name, _sep, count = name.partition(":")
            counts.append((fields[0], count))
        for f in fields[1:]:
            key, _sep, value = f.partition("=")
            if key in ("slots", "cpu"):
                counts.append((f, value))
        for where, value in counts:
            got = ascii_int(value)
            if got is None or not 1 <= got <= MAX_SLOTS:
                raise BadInput(_("line {line}: the count in {field!r} is not a number from 1 "
                                 "to {max}").format(line=number, field=_short(where),
                                                    max=MAX_SLOTS))
            n = got
        names.append(name)
        slots.append(n)
        if len(names) > MAX_HOSTS:
            raise BadInput(_("line {line}: more than {max} hosts").format(
                line=number, max=MAX_HOSTS))
    return names, slots


# --- sources ----------------------------------------------------------------------------

def _named(source: str, exc: BadInput) -> BadInput:
    """exc's refusal, naming where the value came from (a variable, an option, a field)."""
    text = str(exc)
    if text.startswith(source):
        return exc
    return BadInput(_("{source}: {error}").format(source=source, error=text), exc.field)


_BLANKS = re.compile(r"[ \t\n\r\f\v]")  # ASCII blanks, as the library's: \s takes U+3000 too


_BRACE_LIST = re.compile(r"\{[^{}]*[, \t\n\r\f\v][^{}]*\}")


def _from_list(text: str, already: int = 0) -> List[str]:
    """A list's names; `already` names come before them (the cap counts them too)."""
    _too_long(text)
    brace_list = _BRACE_LIST.search(text) if "{" in text else None
    if brace_list:  # split at its comma it would give names that are not valid (n{1)
        raise BadInput(_("the brace list {braces} is not supported: write the names out "
                         "(n1,n2), or give a range (n{{1..2}}, n[1-2]) or a bracket list "
                         "(n[1,2])").format(braces=brace_list.group(0)))
    out: List[str] = []
    for item in _split_top(_BLANKS.sub(",", text)):
        if "[" in item or "]" in item:
            out += expand_nodelist(item, already + len(out))
        else:
            out += expand_pattern(item, already + len(out))
    return out


def _checked(names: Sequence[str], source: str, slots: Sequence[int] = ()) -> Hosts:
    if not names:
        raise BadInput(_("{source} names no hosts").format(source=source))
    if len(names) > MAX_HOSTS:
        raise BadInput(_("{source} names more than {max} hosts").format(source=source, max=MAX_HOSTS))
    checked = []
    for n in names:
        try:
            checked.append(host_name(n))
        except BadInput as exc:
            raise BadInput(_("{source}: {error}").format(source=source, error=exc)) from None
    # host names do not tell case apart (DNS, /etc/hosts): node1 and NODE1 are one host
    seen: Dict[str, str] = {}
    for n in checked:
        first = seen.get(n.lower())
        if first is None:
            seen[n.lower()] = n
            continue
        if first == n:
            raise BadInput(_("{source} names {host} twice").format(source=source, host=n))
        raise BadInput(_("{source} names {host} twice: {first} and {host} are one host (host "
                         "names do not tell case apart)").format(source=source, host=n,
                                                                   first=first))
    return Hosts(tuple(checked), source, tuple(slots))


def _read_hostfile(path: str, what: str, source: str) -> Hosts:
    """The hostfile at path: what names it in a refusal ("--hostfile", "HOSTFILE"), source
    in the result and in refusals of its lines."""
    text = read_text(path, what, HOSTFILE_LIMIT)
    try:
        names, slots = parse_hostfile(text)
    except BadInput as exc:
        raise _named(source, exc) from None
    return _checked(names, source, slots)


def _volcano(env: Mapping[str, str]) -> Optional[Hosts]:
    tasks = [(m.group(1), k) for k in env if (m := _VC.match(k)) and env[k].strip()]
    if not tasks:
        return None
    # master-like tasks first (mpirun runs on the first host), then the others; each group
    # by task name, code point order (recipes/runtime.sh: LC_ALL=C sort)
    tasks.sort(key=lambda t: (0 if t[0] in ("MASTER", "LAUNCHER", "MPIMASTER") else 1, t[0]))
    names: List[str] = []
    for _task, key in tasks:
        try:
            names += _from_list(env[key], len(names))
        except BadInput as exc:
            raise _named(key, exc) from None
    return _checked(names, ", ".join(k for _, k in tasks))


# torchrun's words for "as many as there are": the operator counts a node of them as one
# process in WORLD_SIZE (training-operator v1.9 getNprocPerNodeInt)
_NPROC_WORDS = ("auto", "cpu", "gpu", "xpu")
# torchrun's MIN:MAX nodes: an elastic job's, whose members its rendezvous decides
_ELASTIC = re.compile(r"[0-9]{1,18}:[0-9]{1,18}")


def _per_node(env: Mapping[str, str]) -> Tuple[str, int]:
    """(the variable, the processes per node) WORLD_SIZE is divided by: PET_NPROC_PER_NODE,
    what the operator computed it with; ('', 1) when it is not set (an operator <= 1.6 sets
    WORLD_SIZE to the replicas and no PET_NPROC_PER_NODE). Never NPROC_PER_NODE: that is
    the launch script's own setting, which says how many processes start, not how many
    nodes the job has."""
    var = "PET_NPROC_PER_NODE"
    value = env.get(var, "").strip()
    if not value:
        return "", 1
    if value in _NPROC_WORDS:
        return var, 1
    got = ascii_int(value)
    if got is None or got < 1:
        raise BadInput(_("{var} {value!r} is not a positive number").format(
            var=var, value=_short(value)))
    return var, got


def _master_world(env: Mapping[str, str]) -> Optional[Hosts]:
    """A master's name with a count of nodes (recipes/runtime.sh _hw_rt_master_world says
    which platform sets which): the master MASTER_ADDR, else PET_MASTER_ADDR; the nodes
    PET_NNODES, else WORLD_SIZE divided by PET_NPROC_PER_NODE (a PyTorchJob's WORLD_SIZE
    is replicas x nprocPerNode). None for an elastic PET_NNODES and for PET_NNODES without
    a master, as when PET_NNODES was not read: neither names a host."""
    mvar, master = "MASTER_ADDR", env.get("MASTER_ADDR", "").strip()
    if not master:
        mvar, master = "PET_MASTER_ADDR", env.get("PET_MASTER_ADDR", "").strip()
        mvar = mvar if master else "MASTER_ADDR"
    nnodes, world = env.get("PET_NNODES", "").strip(), env.get("WORLD_SIZE", "").strip()
    if _ELASTIC.fullmatch(nnodes):
        return None  # elastic: the rendezvous decides the members, no name says them
    cvar, size = ("PET_NNODES", nnodes) if nnodes else ("WORLD_SIZE", world)
    got = ascii_int(size) if size else 1
    if got is None or got < 1:
        raise BadInput(_("{var} {value!r} is not a positive number").format(
            var=cvar, value=_short(size)))
    n = got
    if not master and not world:
        # PET_NNODES alone: training-operator v1.9 sets it on every PyTorchJob, one without
        # a Master replica too, which names no host
        return None
    if not master or not size:  # half of the pair: the hosts cannot be told
        if master:
            given, missing = mvar, "PET_NNODES" if mvar == "PET_MASTER_ADDR" else "WORLD_SIZE"
        else:
            given, missing = "WORLD_SIZE", "MASTER_ADDR"
        raise BadInput(_("{given} is set but {missing} is not: together they name the job's "
                         "hosts; set {missing} too, or give the hosts with --hosts or "
                         "HOSTS").format(given=given, missing=missing))
    pvar, per = _per_node(env) if cvar == "WORLD_SIZE" else ("", 1)
    count = cvar + (f"/{pvar}" if pvar else "")
    source = f"{mvar} and {count}"
    if n % per:
        raise BadInput(_("{source}: WORLD_SIZE {size} is not a multiple of {var} {per}: set "
                         "PET_NNODES, or give the hosts with --hosts or HOSTS").format(
            source=source, size=n, var=pvar, per=per))
    n //= per
    if n > MAX_HOSTS:
        raise BadInput(_("{source}: {var} {n} is more than {max} hosts").format(
            source=source, var=count, n=n, max=MAX_HOSTS))
    try:
        host_name(master)
    except BadInput as exc:
        raise BadInput(_("{source}: {error}").format(source=mvar, error=exc)) from None
    # the first label only: a domain such as ns-master-0.svc or exp-0 is not the job's name
    m = re.fullmatch(r"([^.]*)-master-0(\..*)?", master)
    if m:
        head, domain = m.group(1), m.group(2) or ""
        names = [master] + [f"{head}-worker-{i}{domain}" for i in range(n - 1)]
        return _checked(names, source + " (Kubeflow naming <job>-master-0, <job>-worker-i)")
    m = re.fullmatch(r"([^.]*-)0(\..*)?", master)
    if m:
        names = [f"{m.group(1)}{i}{m.group(2) or ''}" for i in range(n)]
        return _checked(names, source + " (naming <prefix>-0 .. <prefix>-N-1)")
    if n == 1:
        return _checked([master], source)
    raise BadInput(_("{source}: cannot tell the other {n} host names from {var} {master!r}; "
                     "give them with --hosts or HOSTS").format(
        source=source, n=n - 1, var=mvar, master=master))


def from_environment(env: Mapping[str, str]) -> Optional[Hosts]:
    """The hosts the platform's environment names; None only when none of its variables is
    set (or all are empty; PET_NNODES without a master, or elastic, names none either: see
    _master_world). The first one set decides: when it cannot be read, BadInput
    naming it (never "no hosts", which would verify this instance only)."""
    def value(var: str) -> str:
        return env.get(var, "").strip()

    if value("HOSTS"):
        return hosts_from_text(env["HOSTS"], "HOSTS")
    for var in ("HOSTFILE", *HOSTFILE_VARS):
        if value(var):
            return _read_hostfile(value(var), var, f"{var}={value(var)}")
    for var in SLURM_VARS:
        if value(var):
            try:
                names = expand_nodelist(value(var))
            except BadInput as exc:
                raise _named(var, exc) from None
            return _checked(names, var)
    vc = _volcano(env)
    if vc is not None:
        return vc
    return _master_world(env)


def hosts_from_text(text: str, source: str) -> Hosts:
    """Hosts typed as a list or patterns ("node1,node2", "job-{0..3}", "node[1-4]"); source
    names where, in the refusals ("--hosts", the wizard's field)."""
    try:
        names = _from_list(text)
    except BadInput as exc:
        raise _named(source, exc) from None
    return _checked(names, source)
