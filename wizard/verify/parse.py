"""Reading what verify's commands print: `sshd -T` / `ssh -G`, `ucx_info -d`, `ip route
get`, the torch probe's line, the all-reduce's lines, and which transport the UCX and NCCL
logs say was chosen. Pure functions of text, tested on recorded outputs."""
from __future__ import annotations

import json
import re
from typing import Dict, List, Sequence, Tuple


def first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def short(name: str) -> str:
    """A host name without its domain, in lower case: how names are compared."""
    return name.split(".", 1)[0].lower()


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


def host_lines(text: str) -> List[str]:
    """`mpirun hostname`'s answers: one host name a line; anything else is mpirun's own
    chatter (a setpgid warning of plm:rsh under load, say), not a rank's answer."""
    return [ln.strip() for ln in text.splitlines() if _HOST_LINE.fullmatch(ln.strip())]


def parse_torch_probe(lines: Sequence[str]) -> Dict[str, object]:
    """The torch probe's HPCWIZARD-TORCH line -> its fields ({} when it printed none)."""
    data: Dict[str, object] = {}
    for line in lines:
        if line.startswith("HPCWIZARD-TORCH "):
            data = json.loads(line[len("HPCWIZARD-TORCH "):])
    return data


def parse_allreduce(text: str) -> List[Dict[str, str]]:
    out = []
    for m in re.finditer(r"HPCWIZARD-ALLREDUCE (.*)", text):
        out.append(dict(kv.split("=", 1) for kv in m.group(1).split() if "=" in kv))
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
    Socket', '' when the log does not say."""
    m = re.findall(r"Using network (\S+)", text)
    if not m:
        if re.search(r"NET/IB : Using \[", text):
            return "ib"
        return ""
    return "tcp" if all(x.lower().startswith("socket") for x in m) else "ib"
