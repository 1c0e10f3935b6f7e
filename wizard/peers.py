"""Which hosts get the job's SSH client settings? Only the job's own: a `Host *` block would
send every ssh the job's user makes (git over ssh to github.com included) to the job's port,
in BatchMode, with the job's key only.

`default_peers(env, hostname)` answers, from the first of:

1. the job's hosts the platform names (runtime.from_environment: HOSTS, hostfiles, SkyPilot,
   dstack, Volcengine MLP, Slurm, Volcano, MASTER_ADDR/WORLD_SIZE), compacted: names that differ only in a number after a
   separator share one pattern (`job-worker-0..15` -> `job-worker-*`), names with a number
   and no separator one `?` per digit (`node01..node16` -> `node??`), any other name as it is;
2. this instance's own naming (`job-abc-worker-3` -> `job-abc-worker-*`, `node07` ->
   `node*`, a pod's `trainer-5d8f-x2kqp` -> `trainer-5d8f-*`), else its domain
   (`box.lab.example.com` -> `*.lab.example.com`);
3. `*`, with a warning.

A platform variable that is set but cannot be read is BadInput (the user fixes it or gives
--peers): guessing past it would set up other hosts than the job's. Functions of their
inputs (the platform's variables are read by recipes/runtime.sh, through runtime.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from .runtime import from_environment
from .i18n import N_, _, translations
from .validate import BadInput, host_name, host_pattern

# A Host line and a known_hosts line a person reviewing the plan can still read; far below
# the line lengths any OpenSSH reads.
MAX_PATTERNS = 32
MAX_TEXT = 1000

_NUMBERED = re.compile(r"^(.*?)([0-9]+)$")  # a short name's stem and its trailing number
_IPV4 = re.compile(r"^([0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.)([0-9]{1,3})$")
_CONTAINER_ID = re.compile(r"^[0-9a-f]{12,64}$")  # docker's default host name: no naming
_SEPARATORS = ("-", "_", ".")

EVERY_HOST = N_("The SSH client settings apply to every host ('*'): every ssh the job's user "
                "makes gets the job's port, BatchMode and only the job's key, git over ssh "
                "(github.com) included. Name the job's hosts instead, e.g. --peers "
                "'job-worker-*'.")
NO_NAMES = N_("No job host names were found (no HOSTS, hostfile, Slurm, Volcano or "
              "MASTER_ADDR variable, and the host name {host!r} has no naming pattern), so "
              "the SSH client settings apply to every host ('*'): every ssh the job's user "
              "makes gets the job's port, BatchMode and only the job's key, git over ssh "
              "(github.com) included. Name the job's hosts with --peers, e.g. --peers "
              "'job-worker-*'.")

# a sysroot (or a container) without /etc/hostname: there is no name to read a pattern from
NO_NAMES_UNNAMED = N_("No job host names were found (no HOSTS, hostfile, Slurm, Volcano or "
                      "MASTER_ADDR variable, and this host's name is unknown), so the SSH "
                      "client settings apply to every host ('*'): every ssh the job's user "
                      "makes gets the job's port, BatchMode and only the job's key, git over "
                      "ssh (github.com) included. Name the job's hosts with --peers, e.g. "
                      "--peers 'job-worker-*'.")


# A domain or an address block holds more than the job: a git server there would get the
# job's port and key too. The plan says so; --peers names the instances.
WIDE = N_("The SSH client settings apply to '{pattern}', read from this host's name {host}: "
          "every host there gets the job's port, BatchMode and key, a git server included. If "
          "the job's instances are fewer, name them with --peers.")
WIDE_SOURCES = (N_("this host's domain (host name {host})"), N_("this host's address {host}"))


@dataclass(frozen=True)
class Peers:
    """An ssh_config Host pattern list and where it came from. The texts are kept as their
    English message and values, so that a plan can say them in each language."""
    pattern: str  # space separated: 'job-master-0 job-worker-*'
    how: str  # where it came from: an English message (N_) taking args
    args: Tuple[Tuple[str, str], ...] = ()
    caution: str = ""  # an English message (N_) taking args; set when pattern is too wide

    def source_in(self, lang: Optional[str] = None) -> str:
        return _say(self.how, self.args, lang)

    def warning_in(self, lang: Optional[str] = None) -> str:
        return _say(self.caution, self.args, lang) if self.caution else ""

    @property
    def source(self) -> str:
        return self.source_in()

    @property
    def warning(self) -> str:
        return self.warning_in()


def _say(message: str, args: Tuple[Tuple[str, str], ...], lang: Optional[str]) -> str:
    return translations(lang).gettext(message).format(**dict(args))


# --- the pattern list a user gives ----------------------------------------------------------

def pattern_list(text: str) -> str:
    """A Host pattern list as typed ('job-* node1', spaces between): each pattern checked,
    spaces normalised; '' stays '' (derive it). Only spaces separate: a newline or a tab is
    refused with the pattern it is in, never turned into a space."""
    items = [item for item in (text or "").split(" ") if item]
    for item in items:
        host_pattern(item)
    normal = " ".join(items)
    if len(items) > MAX_PATTERNS or len(normal) > MAX_TEXT:
        raise BadInput(_("host pattern list of {n} patterns ({chars} characters) is longer "
                         "than the {max} patterns ({max_chars} characters) allowed: use "
                         "wildcards, e.g. 'job-worker-*'").format(
            n=len(items), chars=len(normal), max=MAX_PATTERNS, max_chars=MAX_TEXT), "peers")
    return normal


def every_host(pattern: str) -> bool:
    """Does the list have a pattern that matches any host ('*', '?*', '*?*')?"""
    return any("*" in p and not p.strip("*?") for p in pattern.split())


def given_peers(pattern: str) -> Peers:
    return Peers(pattern, N_("your choice (--peers)"),
                 caution=EVERY_HOST if every_host(pattern) else "")


def resolve_peers(given: str, env: Mapping[str, str], hostname: str) -> Peers:
    """The peers a plan uses: the derived ones when nothing is given. A given list that is
    what would be derived says where that comes from (the wizard's field starts with it)."""
    if not given:
        peers = default_peers(env, hostname)
        pattern_list(peers.pattern)  # what goes into shell text is checked, derived or not
        return peers
    try:
        derived: Optional[Peers] = default_peers(env, hostname)
    except BadInput:  # given peers: a variable that cannot be read does not matter to them
        derived = None
    return derived if derived is not None and derived.pattern == given else given_peers(given)


# --- where the job's host names come from ---------------------------------------------------

def default_peers(env: Mapping[str, str], hostname: str) -> Peers:
    """The job's hosts as Host patterns: the platform's list, else this host's naming, else
    '*' with a warning (see the module's text). BadInput, naming the variable, for one that
    is set but cannot be read."""

    try:
        hosts = from_environment(env)
    except BadInput as exc:
        raise BadInput(_("{error}; the SSH client settings are for the hosts it names: fix "
                         "it, or name the hosts with --peers").format(error=exc),
                       "peers") from None
    own = from_host_name(hostname)
    if hosts is None:
        if own is None and not hostname:
            return Peers("*", N_("nothing better: this host's name is unknown"), (),
                         NO_NAMES_UNNAMED)
        if own is None:
            return Peers("*", N_("nothing better: the host name {host!r} has no naming "
                                 "pattern"), (("host", hostname),), NO_NAMES)
        return Peers(own[0], own[1], (("host", hostname), ("pattern", own[0])),
                     WIDE if own[1] in WIDE_SOURCES else "")
    patterns = compact(hosts.names)
    args = (("source", hosts.source), ("n", str(len(hosts.names))), ("host", hostname))
    if len(patterns) <= MAX_PATTERNS and len(" ".join(patterns)) <= MAX_TEXT:
        how = N_("{source}, 1 host") if len(hosts.names) == 1 else N_("{source}, {n} hosts")
        return Peers(" ".join(patterns), how, args)
    if own is None:
        return Peers("*", N_("nothing better: the {n} hosts of {source} have no short "
                             "pattern, and the host name {host!r} has none") if hostname else
                     N_("nothing better: the {n} hosts of {source} have no short pattern, and "
                        "this host's name is unknown"), args, EVERY_HOST)
    return Peers(own[0], N_("this host's naming ({host}): the {n} hosts of {source} have no "
                            "short pattern"), args)


def from_host_name(hostname: str) -> Optional[Tuple[str, str]]:
    """This instance's naming pattern and how it was read (an N_ message taking host), or
    None when its name has none."""
    try:
        name = host_name(hostname)
    except BadInput:
        return None
    ip = _IPV4.match(name)
    if ip:
        return f"{ip.group(1)}*", N_("this host's address {host}")
    short, dot, rest = name.partition(".")
    domain = dot + rest
    numbered = _NUMBERED.match(short)
    if not _CONTAINER_ID.match(short):
        if numbered and _named(numbered.group(1)):
            return f"{numbered.group(1)}*{domain}", N_("this host's name {host}")
        head, dash, tail = short.rpartition("-")
        if dash and _named(head) and re.search(r"[0-9]", tail):  # a pod's random suffix
            return f"{head}-*{domain}", N_("this host's name {host}")
    if rest.count(".") >= 1:  # a domain of two labels or more, not 'localdomain'
        return f"*{domain}", N_("this host's domain (host name {host})")
    return None


def _named(stem: str) -> bool:
    """Is stem a name, not a leftover ('n', '7-')? Two characters and a letter at least."""
    word = stem.rstrip("".join(_SEPARATORS))
    return len(word) >= 2 and bool(re.search(r"[A-Za-z]", word))


# --- many names, few patterns ---------------------------------------------------------------

def compact(names: Sequence[str]) -> List[str]:
    """Patterns that match every name of names and little else, in the order of the names:
    names that differ only in a trailing number share a pattern ('*' after a separator,
    else one '?' per digit); a name alone in its group stays as it is."""
    groups: Dict[Tuple[str, str], List[str]] = {}
    for name in names:
        groups.setdefault(_stem(name), []).append(name)
    out: List[str] = []
    for (stem, domain), members in groups.items():
        if len(members) == 1:
            out.append(members[0])
        elif stem.endswith(_SEPARATORS):
            out.append(f"{stem}*{domain}")
        else:  # 'node?' is node1..node9, where 'node*' would be nodejs.org too
            widths = sorted({len(m) - len(stem) - len(domain) for m in members})
            out.extend(f"{stem}{'?' * w}{domain}" for w in widths)
    return out


def _stem(name: str) -> Tuple[str, str]:
    """(stem, domain) of a name: its first label without the number it ends in ('gpu-3.job'
    -> ('gpu-', '.job')), an IPv4 address's first three octets, else the name itself."""
    ip = _IPV4.match(name)
    if ip:
        return ip.group(1), ""
    short, dot, rest = name.partition(".")
    numbered = _NUMBERED.match(short)
    if not numbered or not numbered.group(1):
        return name, ""
    return numbered.group(1), dot + rest
