"""Which instances make up the job? `find_hosts()` answers from, in this order:

1. `--hosts a,b,c` (each item may be a pattern with a count: `job-worker-{0..3}`, or a
   Slurm-style list: `node[01-03,07]`);
2. `--hostfile FILE` (OpenMPI `host slots=N`, MPICH `host:N`, or one name a line);
3. the environment the platform provides:
   `HOSTS` (the launch script's own variable), `HOSTFILE`,
   an OpenMPI/PRRTE hostfile path (`OMPI_MCA_orte_default_hostfile`,
   `OMPI_MCA_prte_default_hostfile`, `PRTE_MCA_prte_default_hostfile`),
   a Slurm node list (`SLURM_JOB_NODELIST`, `SLURM_NODELIST`),
   Volcano's `VC_<TASK>_HOSTS` (master-like tasks first, then the others by name),
   `MASTER_ADDR` with `WORLD_SIZE` (Kubeflow PyTorchJob naming: `<job>-master-0` then
   `<job>-worker-0..N-2`; or `<prefix>-0` then `<prefix>-1..N-1`).

The result says which source was used. Every name is checked with validate.host_name, so a
name never reaches shell text unchecked. Pure functions of their inputs (the environment is
a parameter); only reading a hostfile touches the file system.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from .i18n import _
from .validate import BadInput, host_name

HOSTFILE_VARS = ("OMPI_MCA_orte_default_hostfile", "OMPI_MCA_prte_default_hostfile",
                 "PRTE_MCA_prte_default_hostfile")
SLURM_VARS = ("SLURM_JOB_NODELIST", "SLURM_NODELIST")
MAX_HOSTS = 4096

_BRACE = re.compile(r"\{(\d+)\.\.(\d+)\}")
_VC = re.compile(r"^VC_([A-Z0-9_]+)_HOSTS$")


@dataclass(frozen=True)
class Hosts:
    names: Tuple[str, ...]
    source: str  # where they came from, in words: "--hosts", "SLURM_JOB_NODELIST", ...
    slots: Tuple[int, ...] = ()  # per host, when the source said (hostfiles); else empty

    def to_dict(self) -> Dict[str, object]:
        return {"names": list(self.names), "source": self.source, "slots": list(self.slots)}


# --- expansions ---------------------------------------------------------------------------

def _too_many(text: str, count: int) -> None:
    """Refuse before expanding: ranges multiply, and the wizard checks as the user types."""
    if count > MAX_HOSTS:
        raise BadInput(_("host pattern {text!r} gives more than {max} hosts").format(
            text=text, max=MAX_HOSTS))


def expand_pattern(text: str) -> List[str]:
    """'job-worker-{0..3}' -> job-worker-0..3; '{00..11}' keeps the zero padding;
    several ranges multiply. Text without a range is returned as one name."""
    count = 1
    for m in _BRACE.finditer(text):
        count *= max(int(m.group(2)) - int(m.group(1)) + 1, 1)
    _too_many(text, count)
    return _expand_braces(text)


def _expand_braces(text: str) -> List[str]:
    m = _BRACE.search(text)
    if not m:
        return [text]
    lo_s, hi_s = m.group(1), m.group(2)
    lo, hi = int(lo_s), int(hi_s)
    if hi < lo:
        raise BadInput(_("host pattern {text!r}: the range {range} counts down").format(
            text=text, range=f"{{{lo_s}..{hi_s}}}"))
    if hi - lo + 1 > MAX_HOSTS:
        raise BadInput(_("host pattern {text!r} gives more than {max} hosts").format(
            text=text, max=MAX_HOSTS))
    width = len(lo_s) if lo_s.startswith("0") and len(lo_s) > 1 else 0
    out: List[str] = []
    for i in range(lo, hi + 1):
        num = str(i).zfill(width)
        out += _expand_braces(text[:m.start()] + num + text[m.end():])
    return out


def _split_top(text: str) -> List[str]:
    """Split on commas that are not inside [...]."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def expand_nodelist(text: str) -> List[str]:
    """Slurm's compressed host list: 'node[01-03,07],gpu5,rack[1-2]-n[1-2]' ->
    node01 node02 node03 node07 gpu5 rack1-n1 rack1-n2 rack2-n1 rack2-n2."""
    out: List[str] = []
    for item in _split_top(text):
        count = 1
        for group in re.findall(r"\[([^\[\]]*)\]", item):
            count *= sum(_range_size(r) for r in group.split(","))
        _too_many(item, count + len(out))
        out += _expand_brackets(item)
    return out


def _range_size(rng: str) -> int:
    """How many numbers 'N' or 'N-M' stands for (1 for what _expand_brackets refuses)."""
    a, sep, b = rng.strip().partition("-")
    if sep and a.isdigit() and b.isdigit() and int(b) >= int(a):
        return int(b) - int(a) + 1
    return 1


def _expand_brackets(item: str) -> List[str]:
    m = re.search(r"\[([^\[\]]*)\]", item)
    if not m:
        if "[" in item or "]" in item:
            raise BadInput(_("node list item {item!r} has an unmatched bracket").format(item=item))
        return [item]
    head, tail = item[:m.start()], item[m.end():]
    out: List[str] = []
    for rng in m.group(1).split(","):
        rng = rng.strip()
        if re.fullmatch(r"\d+", rng):
            nums = [rng]
        elif re.fullmatch(r"\d+-\d+", rng):
            a, b = rng.split("-")
            if int(b) < int(a):
                raise BadInput(_("node list range {range!r} counts down").format(range=rng))
            if int(b) - int(a) + 1 > MAX_HOSTS:
                raise BadInput(_("node list range {range!r} gives more than {max} hosts").format(
                    range=rng, max=MAX_HOSTS))
            width = len(a)
            nums = [str(i).zfill(width) for i in range(int(a), int(b) + 1)]
        else:
            raise BadInput(_("node list range {range!r} in {item!r} is not N or N-M").format(
                range=rng, item=item))
        for num in nums:
            out += _expand_brackets(head + num + tail)
    return out


def parse_hostfile(text: str) -> Tuple[List[str], List[int]]:
    """OpenMPI ('node1 slots=4 max_slots=8'), MPICH/Hydra ('node1:4') or plain names;
    '#' comments and blank lines skipped. Returns names and slots (1 when not given)."""
    names: List[str] = []
    slots: List[int] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        name, n = fields[0], 1
        if ":" in name and not name.startswith("["):
            name, _, count = name.partition(":")
            if count.isdigit():
                n = int(count)
        for f in fields[1:]:
            key, _, value = f.partition("=")
            if key in ("slots", "cpu") and value.isdigit():
                n = int(value)
        names.append(name)
        slots.append(n)
    return names, slots


# --- sources ----------------------------------------------------------------------------

def _from_list(text: str) -> List[str]:
    out: List[str] = []
    for item in _split_top(text.replace(" ", ",")):
        if "[" in item:
            out += expand_nodelist(item)
        else:
            out += expand_pattern(item)
        _too_many(text, len(out))
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
    seen = set()
    dupes = [n for n in checked if n in seen or seen.add(n)]  # type: ignore[func-returns-value]
    if dupes:
        raise BadInput(_("{source} names {host} twice").format(source=source, host=dupes[0]))
    return Hosts(tuple(checked), source, tuple(slots))


def _read_hostfile(path: str, source: str) -> Hosts:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise BadInput(_("{source}: cannot read hostfile {path}: {error}").format(
            source=source, path=path, error=exc.strerror or exc)) from None
    names, slots = parse_hostfile(text)
    return _checked(names, source, slots)


def _volcano(env: Mapping[str, str]) -> Optional[Hosts]:
    tasks = sorted((m.group(1), k) for k in env if (m := _VC.match(k)) and env[k].strip())
    if not tasks:
        return None
    # master-like tasks first (mpirun runs on the first host), then the others by name
    tasks.sort(key=lambda t: (0 if t[0] in ("MASTER", "LAUNCHER", "MPIMASTER") else 1, t[0]))
    names: List[str] = []
    for _task, key in tasks:
        names += [n for n in re.split(r"[,\s]+", env[key].strip()) if n]
    return _checked(names, ", ".join(k for _, k in tasks))


def _master_world(env: Mapping[str, str]) -> Optional[Hosts]:
    master, size = env.get("MASTER_ADDR", "").strip(), env.get("WORLD_SIZE", "").strip()
    if not master or not size:
        return None
    source = "MASTER_ADDR and WORLD_SIZE"
    if not size.isdigit() or int(size) < 1:
        raise BadInput(_("{source}: WORLD_SIZE {size!r} is not a positive number").format(
            source=source, size=size))
    n = int(size)
    if n > MAX_HOSTS:
        raise BadInput(_("{source}: WORLD_SIZE {n} is more than {max} hosts").format(
            source=source, n=n, max=MAX_HOSTS))
    try:
        host_name(master)
    except BadInput as exc:
        raise BadInput(_("{source}: {error}").format(source="MASTER_ADDR", error=exc)) from None
    m = re.fullmatch(r"(.*)-master-0(\..*)?", master)
    if m:
        head, domain = m.group(1), m.group(2) or ""
        names = [master] + [f"{head}-worker-{i}{domain}" for i in range(n - 1)]
        return _checked(names, source + " (Kubeflow naming <job>-master-0, <job>-worker-i)")
    m = re.fullmatch(r"(.*-)0(\..*)?", master)
    if m:
        names = [f"{m.group(1)}{i}{m.group(2) or ''}" for i in range(n)]
        return _checked(names, source + " (naming <prefix>-0 .. <prefix>-N-1)")
    if n == 1:
        return _checked([master], source)
    raise BadInput(_("{source}: cannot tell the other {n} host names from MASTER_ADDR "
                     "{master!r}; give them with --hosts or HOSTS").format(
        source=source, n=n - 1, master=master))


def from_environment(env: Mapping[str, str]) -> Optional[Hosts]:
    """The hosts the platform's environment names, or None when it names none."""
    if env.get("HOSTS", "").strip():
        return _checked(_from_list(env["HOSTS"]), "HOSTS")
    if env.get("HOSTFILE", "").strip():
        return _read_hostfile(env["HOSTFILE"].strip(), f"HOSTFILE={env['HOSTFILE'].strip()}")
    for var in HOSTFILE_VARS:
        if env.get(var, "").strip():
            return _read_hostfile(env[var].strip(), f"{var}={env[var].strip()}")
    for var in SLURM_VARS:
        if env.get(var, "").strip():
            return _checked(expand_nodelist(env[var].strip()), var)
    vc = _volcano(env)
    if vc is not None:
        return vc
    return _master_world(env)


def hosts_from_text(text: str, source: str) -> Hosts:
    """Hosts typed as a list or patterns ("node1,node2", "job-{0..3}", "node[1-4]"); source
    names where, in the refusals ("--hosts", the wizard's field)."""
    return _checked(_from_list(text), source)


def find_hosts(hosts: Optional[str] = None, hostfile: Optional[str] = None,
               env: Optional[Mapping[str, str]] = None) -> Hosts:
    """The job's hosts, from the first source that names any; BadInput when none does."""
    if hosts and hostfile:
        raise BadInput(_("give --hosts or --hostfile, not both"))
    if hosts is not None:
        return hosts_from_text(hosts, "--hosts")
    if hostfile is not None:
        return _read_hostfile(hostfile, f"--hostfile {hostfile}")
    found = from_environment(os.environ if env is None else env)
    if found is None:
        raise BadInput(_("no hosts given: use --hosts node1,node2 (or a pattern like "
                         "'job-worker-{{0..3}}'), --hostfile FILE, or run where the platform "
                         "sets HOSTS, an OpenMPI hostfile variable, SLURM_JOB_NODELIST, "
                         "VC_*_HOSTS, or MASTER_ADDR with WORLD_SIZE").format())
    return found
