"""Which network interfaces, with which addresses?

With commands: `ip -j addr` (iproute2's JSON). Without (or when `ip` is missing): the
interfaces of <sysroot>/sys/class/net, IPv6 addresses from /proc/net/if_inet6 and, on this
machine only, each interface's primary IPv4 address through an ioctl.
"""
from __future__ import annotations

import ipaddress
import json
import socket
import struct
from typing import Dict, List, Optional, Tuple

from ..facts import Iface
from .base import TABLE_LIMIT, Context, Found
from .commands import IP_ADDR


def parse_ip_json(text: str) -> Tuple[Iface, ...]:
    """`ip -j addr` output -> interfaces (addresses in CIDR notation)."""
    data = json.loads(text)
    out = []
    for link in data:
        name = link.get("ifname")
        if not name:
            continue
        addrs = tuple(
            f"{a['local']}/{a['prefixlen']}"
            for a in link.get("addr_info", [])
            if "local" in a and "prefixlen" in a
        )
        out.append(
            Iface(
                name=name,
                state=str(link.get("operstate", "unknown")).upper(),
                mac=link.get("address", "") if link.get("link_type") != "none" else "",
                addresses=addrs,
            )
        )
    return tuple(out)


def parse_if_inet6(text: str) -> Dict[str, List[str]]:
    """/proc/net/if_inet6 -> {ifname: ["fe80::1/64", ...]}."""
    out: Dict[str, List[str]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 6 or len(parts[0]) != 32:
            continue
        try:
            addr = ipaddress.IPv6Address(bytes.fromhex(parts[0]))
            prefix = int(parts[2], 16)
        except ValueError:
            continue
        out.setdefault(parts[5], []).append(f"{addr}/{prefix}")
    return out


def parse_proc_net_route(text: str) -> str:
    """/proc/net/route -> the interface of the default route (lowest metric), '' if none."""
    best = ("", 1 << 31)
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 8 or parts[1] != "00000000" or parts[7] != "00000000":
            continue
        try:
            flags, metric = int(parts[3], 16), int(parts[6])
        except ValueError:
            continue
        if flags & 0x1 and metric < best[1]:  # RTF_UP
            best = (parts[0], metric)
    return best[0]


def _ipv4_of(name: str) -> Optional[str]:
    """The interface's primary IPv4 address (this machine only), or None."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not Linux
        return None
    packed = struct.pack("256s", name.encode()[:15])
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            addr = fcntl.ioctl(s.fileno(), 0x8915, packed)[20:24]  # SIOCGIFADDR
            mask = fcntl.ioctl(s.fileno(), 0x891B, packed)[20:24]  # SIOCGIFNETMASK
        except OSError:
            return None
    prefix = bin(int.from_bytes(mask, "big")).count("1")
    return f"{socket.inet_ntoa(addr)}/{prefix}"


def from_sysfs(ctx: Context) -> Tuple[Iface, ...]:
    v6 = parse_if_inet6(ctx.read("proc/net/if_inet6", TABLE_LIMIT) or "")
    out = []
    for name in ctx.listdir("sys/class/net"):
        if name.startswith(".") or name == "bonding_masters":
            continue
        base = f"sys/class/net/{name}"
        addrs: List[str] = []
        if ctx.local:
            v4 = _ipv4_of(name)
            if v4:
                addrs.append(v4)
        addrs.extend(v6.get(name, []))
        out.append(
            Iface(
                name=name,
                state=(ctx.read_value(f"{base}/operstate") or "unknown").upper(),
                mac=ctx.read_value(f"{base}/address") or "",
                addresses=tuple(addrs),
            )
        )
    return tuple(out)


def probe(ctx: Context, found: Found) -> None:
    route = ctx.read("proc/net/route", TABLE_LIMIT)
    if route is not None:
        found.set("default_iface", parse_proc_net_route(route))
    if ctx.run_commands:
        res = ctx.run(IP_ADDR)
        if res is not None and res.ok:
            try:
                found.set("ifaces", parse_ip_json(res.stdout))
                return
            except (ValueError, TypeError, KeyError, AttributeError):
                found.note("net.ip-unexpected")
        elif res is not None:
            found.note("net.ip-failed", output=res.first_line())
    ifaces = from_sysfs(ctx)
    if not ifaces:
        found.note("net.none")
    elif not ctx.local:
        found.note("net.no-addresses")
    found.set("ifaces", ifaces)
