"""Reading what verify's commands print: `sshd -T` / `ssh -G`, `ucx_info -d`, `ip route
get`, the torch probe's line, the all-reduce's lines, which of the job's hosts answered
(HostMatcher), and which transport the UCX and NCCL logs say was chosen. Pure functions of
text, tested on recorded outputs."""
from __future__ import annotations

import ipaddress
import json
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..detect.rdma import parse_rate, parse_state
from ..detect.software import parse_ucx_version
from .nccl_log import nccl_transport


def first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def short(name: str) -> str:
    """A host name without its domain, in lower case: how names are compared (an address
    whole and in one spelling: its first number names no host, and fe80::1 is fe80:0::1)."""
    return _whole(name) if is_address(name) else name.split(".", 1)[0].lower()


def _whole(name: str) -> str:
    """The whole name in lower case; an address in its one spelling."""
    return str(ipaddress.ip_address(name)) if is_address(name) else name.lower()


def digits(text: str) -> bool:
    """Only 0-9 (str.isdigit() also takes '²' and other scripts' digits, which int() refuses
    or reads): a number in another host's output."""
    return text.isascii() and text.isdigit()


def is_address(name: str) -> bool:
    """An IP address (SkyPilot and dstack give these), not a name: a rank on that instance
    answers with its own host name, which the address does not tell."""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def effective(text: str) -> Dict[str, List[str]]:
    """'key value' lines (sshd -T, ssh -G) -> key: every value, in order."""
    out: Dict[str, List[str]] = {}
    for line in text.splitlines():
        key, _sep, value = line.strip().partition(" ")
        if key:
            out.setdefault(key.lower(), []).append(value.strip().lower())
    return out


def parse_ucx_devices(text: str) -> List[Tuple[str, str]]:
    """`ucx_info -d` -> [(transport, device)] in order."""
    pairs, transport = [], ""
    for line in text.splitlines():
        m = re.match(r"^#\s*Transport:\s*(\S+)", line)
        if m:
            transport = m.group(1)
            continue
        m = re.match(r"^#\s*Device:\s*(\S+)", line)
        if m and transport:
            pairs.append((transport, m.group(1)))
    return pairs


def ib_transports(pairs: Sequence[Tuple[str, str]], hcas: Sequence[str] = ()) -> List[str]:
    """The rc/dc/ud transports on an IB device: 'rc_mlx5/mlx5_0:1', ..."""
    out = []
    for tl, dev in pairs:
        hca = dev.split(":", 1)[0]
        if re.match(r"^(rc|dc|ud)(_|$)", tl) and (re.match(r"^mlx\d+_\d+$", hca) or hca in hcas):
            out.append(f"{tl}/{dev}")
    return out


def route_dev(text: str) -> str:
    """`ip -o route get ADDRESS` -> the interface the route goes through ('eth0'); '' when it
    names none, or only lo (the address is this instance's own: no network in between)."""
    m = re.search(r"\bdev (\S+)", text)
    dev = m.group(1) if m else ""
    return "" if dev == "lo" else dev


def address_of(getent_out: str) -> str:
    """`getent hosts NAME` -> the first address it names, '' for none."""
    words = first_line(getent_out).split()
    return words[0] if words else ""


_HOST_LINE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})")


def host_lines(text: str, names: Sequence[str] = ()) -> List[str]:
    """`mpirun hostname`'s answers: one host name a line; anything else is mpirun's own
    chatter (a setpgid warning of plm:rsh under load, say), not a rank's answer. A line that
    is two or more of the expected names run together (mpirun forwards a rank's text and
    its newline as two pieces, and another rank's text can come between) counts as each."""
    known = {short(n) for n in names}
    out: List[str] = []
    for line in text.splitlines():
        word = line.strip()
        if not _HOST_LINE.fullmatch(word):
            continue
        parts = None if short(word) in known else _joined(word.lower(), known)
        out.extend(parts or [word])
    return out


def _joined(word: str, known: "set[str]") -> List[str]:
    """word as a run of known names ("node1node12" -> node1, node12), [] when it is not.
    Each start is tried once (names that are runs of other names cannot blow it up)."""
    @lru_cache(maxsize=None)
    def rest_from(i: int) -> Optional[Tuple[str, ...]]:
        if i == len(word):
            return ()
        for end in range(len(word), i, -1):
            if word[i:end] in known:
                tail = rest_from(end)
                if tail is not None:
                    return (word[i:end], *tail)
        return None

    return list(rest_from(0) or ()) if word else []


# --- which of the job's hosts answered (mpirun hostname, the ranks' lines, the key login) ---


@dataclass(frozen=True)
class Answer:
    said: str  # an instance's answer: its host name, as it printed it
    host: str  # the listed host it stands for; "" none (a stranger)
    named: bool  # by a name that host is known by (False: dealt to an address, see match)


@dataclass(frozen=True)
class HostMatch:
    """The answers and the listed host each stands for: what a check judges and names."""
    matcher: "HostMatcher"
    answers: Tuple[Answer, ...]

    def of(self, host: str) -> List[Answer]:
        return [a for a in self.answers if a.host == host]

    @property
    def missing(self) -> List[str]:
        return [h for h in self.matcher.hosts if not self.of(h)]

    @property
    def twice(self) -> List[str]:
        return [h for h in self.matcher.hosts if len(self.of(h)) > 1]

    @property
    def strangers(self) -> List[str]:
        return [a.said for a in self.answers if not a.host]

    @property
    def ok(self) -> bool:
        """Every listed host answered once, and nothing else did."""
        return not (self.missing or self.twice or self.strangers)

    def label(self, host: str) -> str:
        """How to name a listed host to people: an address with its instance's name beside
        it ('10.0.0.2 (node2)'), since the address alone says nothing to the reader; a dealt
        answer by that name only (which address it came from is not known)."""
        dealt = [a.said for a in self.of(host) if not a.named]
        if dealt:
            return dealt[0]
        name = self.matcher.said.get(host, "")
        return f"{host} ({name})" if name and short(name) != short(host) else host


@dataclass(frozen=True)
class HostMatcher:
    """The one rule for "which instance answered": the job's hosts as listed (names or IP
    addresses, as the platform gives them) and the name each one's instance gave on the
    key login, against what instances answer (`hostname`, a rank's socket.gethostname())."""
    hosts: Tuple[str, ...]
    # host -> the name its instance answered the key login with: how an address is known
    said: Mapping[str, str] = field(default_factory=dict)

    def names_of(self, host: str) -> Tuple[str, ...]:
        name = self.said.get(host, "")
        return (host, name) if name else (host,)

    def lines(self, text: str) -> List[str]:
        """`mpirun hostname`'s answers (host_lines), run-together lines split by every name
        a host is known by: an address's instance answers with its name, not the address."""
        return host_lines(text, [n for h in self.hosts for n in self.names_of(h)])

    def match(self, answers: Sequence[str]) -> HostMatch:
        """Each answer -> the listed host known by that name (the whole name first, then
        without its domain). An answer no host is known by is dealt to a listed address
        whose instance's name is not known yet (the key login, which learns it, has only
        the address), the same name again to the same one; with none left, a stranger.
        Dealing comes after naming, so an address that answers with itself keeps it."""
        indexes = self._indexes()
        named = [_named(a, indexes) for a in answers]
        taken = set(named)
        unknown = [h for h in self.hosts
                   if is_address(h) and h not in self.said and h not in taken]
        dealt: Dict[str, str] = {}  # short answer -> the address it was dealt
        out = []
        for said, host in zip(answers, named):
            if not host and unknown and short(said) not in dealt:
                dealt[short(said)] = unknown.pop(0)
            out.append(Answer(said, host or dealt.get(short(said), ""), bool(host)))
        return HostMatch(self, tuple(out))

    def _indexes(self) -> "Tuple[_Index, ...]":
        """(how names are compared, name -> the first host known by it): the whole name
        first (node1.a and node1.b listed, answering in full), then without its domain."""
        out = []
        for key in (_whole, short):
            index: Dict[str, str] = {}
            for host in self.hosts:
                for name in self.names_of(host):
                    index.setdefault(key(name), host)
            out.append((key, index))
        return tuple(out)


_Index = Tuple[Callable[[str], str], Dict[str, str]]


def _named(answer: str, indexes: Sequence[_Index]) -> str:
    """The first listed host known by this name, "" none. Two hosts known by one name
    cannot be told apart by their answers: the first takes them all, so the other shows
    as not answered (two addresses of one instance, listed as two hosts)."""
    for key, index in indexes:
        if key(answer) in index:
            return index[key(answer)]
    return ""


def marked(text: str, mark: str) -> List[str]:
    """What follows each `mark` up to the end of its line: each rank's answer, also where
    two ranks' lines ran together (one's text, then the other's, then the newlines)."""
    return [chunk.split("\n", 1)[0] for chunk in text.split(mark)[1:]]


def parse_torch_probe(lines: Sequence[str]) -> Dict[str, object]:
    """The torch probe's HPCWIZARD-TORCH line -> its fields ({} when it printed none)."""
    data: Dict[str, object] = {}
    for line in lines:
        if line.startswith("HPCWIZARD-TORCH "):
            data = json.loads(line[len("HPCWIZARD-TORCH "):])
    return data


def parse_allreduce(text: str) -> List[Dict[str, str]]:
    """Each rank's 'HPCWIZARD-ALLREDUCE rank=0 size=4 ...' as a dict, also where two ranks'
    lines ran together (one's text, then the other's, then the newlines)."""
    out = []
    for fields in marked(text, "HPCWIZARD-ALLREDUCE "):
        out.append(dict(kv.split("=", 1) for kv in fields.split() if "=" in kv))
    return out


def transport_from_ucx_log(text: str) -> str:
    """'ib' when UCX's endpoint configuration uses rc/dc/ud on an IB device, 'tcp' when the
    network lanes are tcp only, '' when the log does not say."""
    lanes = re.findall(r"\b((?:rc|dc|ud|tcp)[a-z0-9_]*)/([A-Za-z0-9_.:-]+)", text)
    if not lanes:
        return ""
    if any(tl.startswith(("rc", "dc", "ud")) for tl, _ in lanes):
        return "ib"
    return "tcp"


def transport_from_nccl_log(text: str) -> str:
    """'ib' for 'Using network IB' (or IBext/ a plugin over IB), 'tcp' for 'Using network
    Socket', '' when the log does not say. The whole reading (GPUDirect RDMA, the HCAs):
    nccl_log.nccl_transport."""
    return {"ib": "ib", "socket": "tcp"}.get(nccl_transport(text).net, "")


# --- one instance's InfiniBand facts (programs/ib_facts.sh) --------------------------------


@dataclass(frozen=True)
class IbPort:
    hca: str
    number: str
    state: str  # ACTIVE, DOWN, INIT...: sysfs's '4: ACTIVE' without its number
    rate_gbps: float  # 0.0 when sysfs's rate is unreadable
    link_layer: str  # InfiniBand | Ethernet (RoCE)

    @property
    def name(self) -> str:
        return f"{self.hca}:{self.number}"

    @property
    def active(self) -> bool:
        return self.state.upper() == "ACTIVE"

    @property
    def software(self) -> bool:
        """rxe and siw: RDMA emulated over Ethernet, never the job's ports."""
        return self.hca.startswith(("rxe", "siw"))


@dataclass(frozen=True)
class IbFacts:
    ports: Tuple[IbPort, ...]
    uverbs: Tuple[str, ...]  # /dev/infiniband/uverbs* present
    memlock: str  # `ulimit -l`: 'unlimited' or KiB
    ucx: str  # UCX's version, '' without ucx_info
    nccl: str  # the NCCL torch links, '' without one (or not asked)
    libibverbs: str  # the library's file version (1.14.50.0), '' when not found
    complete: bool  # the probe's last line came: nothing was cut off


def parse_ib_facts(text: str) -> IbFacts:
    """ib_facts.sh's HPCWIZARD-IB lines -> IbFacts; other lines (a banner) are not facts."""
    ports: List[IbPort] = []
    uverbs: List[str] = []
    ucx_lines: List[str] = []
    found: Dict[str, str] = {}
    complete = False
    for line in text.splitlines():
        fields = line.rstrip("\r").split("\t")
        if fields[0] != "HPCWIZARD-IB" or len(fields) < 2:
            continue
        kind, rest = fields[1], fields[2:]
        if kind == "port" and len(rest) == 5:
            hca, number, state, rate, layer = rest
            ports.append(IbPort(hca, number, parse_state(state), parse_rate(rate) or 0.0,
                                layer.strip() or "unknown"))
        elif kind == "uverbs" and rest:
            uverbs.append(rest[0])
        elif kind == "ucx" and rest:
            ucx_lines.append(rest[0])
        elif kind in ("memlock", "nccl", "libibverbs") and rest:
            found[kind] = rest[0].strip()
        elif kind == "end":
            complete = True
    return IbFacts(tuple(ports), tuple(uverbs), found.get("memlock", ""),
                   parse_ucx_version("\n".join(ucx_lines)), found.get("nccl", ""),
                   found.get("libibverbs", ""), complete)


# --- bandwidth (verify --bandwidth) --------------------------------------------------------

_PERFTEST_UNIT = re.compile(r"BW average\[(Gb|MB|MiB)/sec\]")
_TO_GBPS = {"Gb": 1.0, "MB": 8 / 1000, "MiB": 8 * 1.048576 / 1000}


def parse_ib_write_bw(text: str) -> "float | None":
    """perftest's result table -> BW average in Gb/s (from Gb/sec, MB/sec or MiB/sec, as its
    header names the unit), of the largest message size; rows repeated at one size (a run
    with --run_infinitely) are averaged. None when there is no result row. Lines perftest
    mixes into the table (a CPU-frequency warning) are not rows."""
    m = _PERFTEST_UNIT.search(text)
    if not m:
        return None
    scale = _TO_GBPS[m.group(1)]
    rows: Dict[int, List[float]] = {}
    for line in text[m.end():].splitlines():
        words = line.split()
        if len(words) >= 4 and digits(words[0]) and digits(words[1]):
            try:
                rows.setdefault(int(words[0]), []).append(float(words[3]))
            except ValueError:
                continue
    if not rows:
        return None
    avgs = rows[max(rows)]
    return finite(sum(avgs) / len(avgs) * scale)


def finite(value: "float | str | None") -> "float | None":
    """A figure as a float, None unless it is a finite number: perftest prints 'nan' for a run
    that took no time, and a nan or inf figure has no share of a line rate. Digits of other
    scripts ('١٢', which float() reads) are no figure: the programs print ASCII."""
    if isinstance(value, str) and not value.isascii():
        return None
    try:
        figure = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return figure if math.isfinite(figure) else None


def _fields(line: str) -> Dict[str, str]:
    return dict(kv.split("=", 1) for kv in line.split() if "=" in kv)


def parse_tcp_listen(text: str) -> Dict[str, str]:
    """The TCP test's receiver: 'HPCWIZARD-TCPBW-LISTEN port=N token=T' -> {port, token}."""
    m = re.search(r"HPCWIZARD-TCPBW-LISTEN (.*)", text)
    return _fields(m.group(1)) if m else {}


def parse_tcp_bw(text: str) -> "float | None":
    """The TCP test's sender: 'HPCWIZARD-TCPBW bytes=.. seconds=.. gbps=G' -> G (Gb/s)."""
    m = re.search(r"HPCWIZARD-TCPBW (.*)", text)
    return finite(_fields(m.group(1)).get("gbps")) if m else None


RTT_MAX_US = 5e6  # tcp_bw.py's PING_WAIT: a round trip slower did not come back


def parse_tcp_rtt(text: str) -> "float | None":
    """The TCP test's sender: '... rtt_us=R' -> R, the lowest round trip in µs (None: none,
    or not a finite number in 0 < R <= RTT_MAX_US)."""
    m = re.search(r"HPCWIZARD-TCPBW (.*)", text)
    rtt = finite(_fields(m.group(1)).get("rtt_us")) if m else None
    return rtt if rtt is not None and 0 < rtt <= RTT_MAX_US else None


def parse_busbw(text: str) -> Dict[str, str]:
    """busbw.py's 'HPCWIZARD-BUSBW size=.. backend=.. busbw=B ...' -> its fields ({} none);
    a busbw that is not a finite number is left out (no figure)."""
    m = re.search(r"HPCWIZARD-BUSBW (.*)", text)
    seen = _fields(m.group(1)) if m else {}
    if "busbw" in seen and finite(seen["busbw"]) is None:
        del seen["busbw"]
    return seen


def parse_link_speed(text: str) -> Dict[str, str]:
    """The LinkSpeed probe's 'speed=10000 virtual=0 kind=none' -> its fields."""
    return _fields(first_line(text))
