"""Which RDMA devices and ports, and can this container use them?

Reads <sysroot>/sys/class/infiniband/<hca>/ (ports, rates, link layers, drivers, netdevs),
/dev/infiniband/uverbs* (is the device passed into the container?), the locked-memory limit
(RDMA pins memory) and /sys/module/nvidia_peermem (GPUDirect RDMA). `ibv_devinfo`, when
installed, fills gaps and tells whether user space can see the devices at all.
"""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Dict, List, Optional, Sequence, Tuple

from ..facts import Hca, Note, Port, Rdma
from ..i18n import N_
from ..inputs import ascii_int
from .base import Context, Found
from .notes import note

SOFTWARE_PREFIXES = {"rxe": "rdma_rxe", "siw": "siw"}


# --- parsers -----------------------------------------------------------------------------

def parse_rate(text: str) -> Optional[float]:
    """'200 Gb/sec (4X HDR)' -> 200.0; '2.5 Gb/sec (1X SDR)' -> 2.5; None if unreadable."""
    m = re.match(r"\s*([0-9]+(?:\.[0-9]+)?)\s*Gb/s", text or "")
    return float(m.group(1)) if m else None


def parse_state(text: str) -> str:
    """'4: ACTIVE' -> 'ACTIVE'; '5: LinkUp' -> 'LinkUp'; 'PORT_ACTIVE (4)' -> 'ACTIVE'."""
    text = (text or "").strip()
    if not text:
        return "unknown"
    if ":" in text:
        text = text.split(":", 1)[1].strip()
    text = re.sub(r"\s*\(\d+\)$", "", text)
    if text.startswith("PORT_"):
        text = text[len("PORT_"):]
    return text or "unknown"


def parse_ibv_devinfo(text: str) -> Tuple[Hca, ...]:
    """`ibv_devinfo` -> HCAs with their ports. 'No IB devices found' -> ()."""
    hcas: List[Hca] = []
    cur: Optional[Dict[str, object]] = None
    port: Optional[Dict[str, object]] = None

    def close_port() -> None:
        nonlocal port
        if cur is not None and port is not None:
            cur["ports"].append(port)  # type: ignore[union-attr]
        port = None

    def close_hca() -> None:
        nonlocal cur
        close_port()
        if cur is not None:
            name = str(cur["name"])
            ports = tuple(
                Port(hca=name, number=int(p["number"]), state=str(p.get("state", "unknown")),
                     link_layer=str(p.get("link_layer", "unknown")))
                for p in cur["ports"]  # type: ignore[union-attr]
            )
            hcas.append(Hca(name=name, driver=_driver_from_name(name),
                            vendor_id=str(cur.get("vendor_id", "")),
                            fw_version=str(cur.get("fw_ver", "")), ports=ports))
        cur = None

    for raw in text.splitlines():
        line = raw.strip()
        key, _, value = line.partition(":")
        value = value.strip()
        if key == "hca_id":
            close_hca()
            cur = {"name": value, "ports": []}
        elif cur is None:
            continue
        elif key == "port" and ascii_int(value) is not None:
            close_port()
            port = {"number": ascii_int(value)}
        elif port is not None and key == "state":
            port["state"] = parse_state(value)
        elif port is not None and key == "phys_state":
            port["phys_state"] = parse_state(value)
        elif port is not None and key == "link_layer":
            port["link_layer"] = value
        elif port is None and key in ("fw_ver", "vendor_id"):
            cur[key] = value
    close_hca()
    return tuple(hcas)


def parse_ulimit_l(text: str) -> Tuple[Optional[int], bool]:
    """`ulimit -l` output -> (KiB or None, unlimited?)."""
    word = (text or "").strip().split()[0:1]
    if word == ["unlimited"]:
        return None, True
    kib = ascii_int(word[0]) if word else None  # '²'.isdigit() is True; int('²') fails
    if kib is not None:
        return kib, False
    raise ValueError(f"unexpected `ulimit -l` output: {text.strip()!r}")


def _driver_from_name(name: str) -> str:
    for prefix, driver in SOFTWARE_PREFIXES.items():
        if name.startswith(prefix):
            return driver
    return ""


# --- sysfs -------------------------------------------------------------------------------

def _netdev(ctx: Context, base: str, number: int) -> str:
    nd = ctx.read_value(f"{base}/ports/{number}/gid_attrs/ndevs/0")
    if nd:
        return nd
    nets = [n for n in ctx.listdir(f"{base}/device/net") if not n.startswith(".")]
    if len(nets) > 1:  # dual-port card: dev_port is 0-based
        for n in nets:
            if ctx.read_value(f"{base}/device/net/{n}/dev_port") == str(number - 1):
                return n
    if nets:
        return nets[0]
    return ctx.read_value(f"{base}/parent") or ""  # rxe/siw: the Ethernet device it rides on


def read_hcas(ctx: Context) -> Tuple[Hca, ...]:
    hcas = []
    for name in ctx.listdir("sys/class/infiniband"):
        base = f"sys/class/infiniband/{name}"
        ports = []
        for pn in ctx.listdir(f"{base}/ports"):
            got = ascii_int(pn)
            if got is None:
                continue
            n = got
            pb = f"{base}/ports/{pn}"
            ports.append(Port(
                hca=name,
                number=n,
                state=parse_state(ctx.read_value(f"{pb}/state") or ""),
                phys_state=parse_state(ctx.read_value(f"{pb}/phys_state") or ""),
                rate_gbps=parse_rate(ctx.read_value(f"{pb}/rate") or ""),
                link_layer=ctx.read_value(f"{pb}/link_layer") or "unknown",
                netdev=_netdev(ctx, base, n),
            ))
        ports.sort(key=lambda p: p.number)
        hcas.append(Hca(
            name=name,
            driver=ctx.readlink_name(f"{base}/device/driver") or _driver_from_name(name),
            vendor_id=ctx.read_value(f"{base}/device/vendor") or "",
            fw_version=ctx.read_value(f"{base}/fw_ver") or "",
            ports=tuple(ports),
        ))
    return tuple(hcas)


def merge_ibv(sysfs: Sequence[Hca], ibv: Sequence[Hca]) -> Tuple[Hca, ...]:
    """Fill what sysfs left empty (firmware, vendor) from ibv_devinfo; add HCAs only it saw."""
    by_name = {h.name: h for h in ibv}
    out = []
    for h in sysfs:
        other = by_name.pop(h.name, None)
        if other is not None:
            h = replace(h, fw_version=h.fw_version or other.fw_version,
                        vendor_id=h.vendor_id or other.vendor_id)
        out.append(h)
    out.extend(by_name.values())
    return tuple(out)


# --- judgement ---------------------------------------------------------------------------

def rdma_warnings(hcas: Sequence[Hca], rdma: Rdma, memlock_known: bool = True) -> List[Note]:
    """What will break or slow down an RDMA job, one plain line each."""
    out = []
    active = [p for h in hcas if not h.software for p in h.ports if p.active]
    if active and not rdma.uverbs:
        out.append(note("rdma.no-uverbs", ports=", ".join(p.name for p in active)))
    any_ports = any(h.ports for h in hcas)
    if any_ports and memlock_known and not rdma.memlock_unlimited and rdma.memlock_kib is not None:
        out.append(note("rdma.memlock-low", kib=rdma.memlock_kib))
    for h in hcas:
        if h.software:
            over = sorted({p.netdev for p in h.ports if p.netdev})
            driver = h.driver or N_("emulated")
            out.append(note("rdma.software-over", hca=h.name, driver=driver,
                            netdevs=", ".join(over)) if over
                       else note("rdma.software", hca=h.name, driver=driver))
    return out


# --- probe -------------------------------------------------------------------------------

def _memlock(ctx: Context, found: Found) -> Tuple[Optional[int], bool, bool]:
    """(KiB, unlimited, known)."""
    if ctx.local:
        try:
            import resource

            soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
            if soft == resource.RLIM_INFINITY:
                return None, True, True
            return soft // 1024, False, True
        except (ImportError, OSError, ValueError):
            pass
    if ctx.run_commands:
        res = ctx.run(["bash", "-c", "ulimit -l"])
        if res is not None and res.ok:
            try:
                kib, unlimited = parse_ulimit_l(res.stdout)
                return kib, unlimited, True
            except ValueError as exc:
                found.note("rdma.memlock-unreadable", error=str(exc))
    return None, False, False


def probe(ctx: Context, found: Found) -> None:
    hcas = read_hcas(ctx)
    if ctx.run_commands:
        res = ctx.run(["ibv_devinfo"])
        if res is not None:
            # Without any device, ibv_devinfo says "No IB devices found", or, where the kernel
            # has no RDMA subsystem for this container, "Failed to get IB devices list:
            # Function not implemented": both mean no RDMA device, not a failure.
            if "No IB devices found" in res.output or "Failed to get IB devices list" in res.output:
                if any(h.ports for h in hcas if not h.software):
                    names = ", ".join(h.name for h in hcas if not h.software)
                    found.warn("rdma.no-verbs-library", hcas=names)
            elif res.ok:
                ibv = parse_ibv_devinfo(res.stdout)
                if ibv and not hcas:
                    found.note("rdma.from-ibv-devinfo")
                hcas = merge_ibv(hcas, ibv)
            else:
                found.note("rdma.ibv-devinfo-failed", output=res.first_line())

    uverbs = tuple(ctx.glob("dev/infiniband/uverbs*"))
    kib, unlimited, known = _memlock(ctx, found)
    if not known and any(h.ports for h in hcas):
        found.note("rdma.memlock-unknown")
    rdma = Rdma(
        uverbs=uverbs,
        memlock_kib=kib,
        memlock_unlimited=unlimited,
        peermem=ctx.exists("sys/module/nvidia_peermem"),
    )
    for h in hcas:
        if h.software:
            continue
        for p in h.ports:
            if not p.active:
                phys = f", {p.phys_state}" if p.phys_state != "unknown" else ""
                found.note("rdma.port-down", port=p.name, state=p.state, phys=phys)
    for w in rdma_warnings(hcas, rdma, known):
        found.warn(w)
    found.set("hcas", hcas)
    found.set("rdma", rdma)
