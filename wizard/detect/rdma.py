"""Which RDMA devices and ports, and can this container use them?

Reads <sysroot>/sys/class/infiniband/<hca>/ (ports, rates, link layers, drivers, netdevs),
/dev/infiniband/uverbs* (is the device passed into the container?), the locked-memory limit
(RDMA pins memory), each RoCE port's GID table (which index is RoCE v2 with an IPv4 address)
and GPUDirect RDMA as NCCL checks it (peer-memory modules, DMA-BUF). `ibv_devinfo`, when
installed, fills gaps and tells whether user space can see the devices at all.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Sequence, Tuple

from ..facts import Hca, Note, Port, Rdma
from ..i18n import N_
from ..inputs import ascii_int
from .base import Context, Found
from .commands import IBV_DEVINFO
from .gpu import _device_evidence as gpus_present, parse_proc_driver_version
from ..notes import note
from ..peer_memory import FILES as PEER_MEMORY_FILES

SOFTWARE_PREFIXES = {"rxe": "rdma_rxe", "siw": "siw"}

# GPUDirect RDMA without a peer-memory module (those: hpcwizard.peer_memory), DMA-BUF: the kernel registers DMA-BUF memory with the NIC from Linux 5.12
# (ibv_reg_dmabuf_mr; NCCL probes it with a dummy call), and CUDA exports GPU memory as
# DMA-BUF from CUDA 11.7 (driver 515) with the open kernel module only (NCCL checks
# CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, 0 with the proprietary one).
DMABUF_KERNEL = (5, 12)
DMABUF_DRIVER = 515


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


def is_ipv4_gid(text: str) -> bool:
    """A GID as sysfs prints it ('0000:0000:0000:0000:0000:ffff:0a00:0005') that is an IPv4
    address (::ffff:a.b.c.d, here 10.0.0.5): what RoCE v2 routes across IP subnets."""
    import ipaddress  # here: only a machine with RDMA devices has GIDs to read

    try:
        v4 = ipaddress.IPv6Address((text or "").strip()).ipv4_mapped
    except ValueError:
        return False
    return v4 is not None and not v4.is_unspecified


def leading_numbers(text: str, count: int) -> Tuple[int, ...]:
    """'5.15.0-91-generic' -> (5, 15) for count 2; () when it does not start with them."""
    m = re.match(r"\s*([0-9]{1,9})" + r"\.([0-9]{1,9})" * (count - 1), text or "")
    return tuple(int(g) for g in m.groups()) if m else ()


@dataclass(frozen=True)
class DmaBuf:
    """What DMA-BUF GPUDirect needs, as read here (see DMABUF_KERNEL)."""
    kernel: str = ""  # the running kernel's release, "" when unreadable
    nvidia: str = ""  # the NVIDIA driver's version, "" when unknown
    open_module: Optional[bool] = None  # the open kernel module? None: no driver file

    @property
    def supported(self) -> bool:
        return (leading_numbers(self.kernel, 2) >= DMABUF_KERNEL and self.open_module is True
                and leading_numbers(self.nvidia, 1) >= (DMABUF_DRIVER,))


def parse_nvidia_version_file(text: str) -> Tuple[str, Optional[bool]]:
    """/proc/driver/nvidia/version -> (driver version, open kernel module?). The open module
    says 'NVIDIA UNIX Open Kernel Module for x86_64  550.54.15', the proprietary one 'NVIDIA
    UNIX x86_64 Kernel Module  535.104.05'."""
    if "NVRM version" not in (text or ""):
        return "", None
    return parse_proc_driver_version(text), "Open Kernel Module" in text


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


def roce_v2_ipv4_gid(ctx: Context, port_dir: str) -> Optional[int]:
    """The lowest index of the port's GID table whose type is 'RoCE v2' and whose GID is an
    IPv4 address. An empty slot's type cannot be read (the kernel answers EINVAL): absent."""
    indexes = sorted(i for i in (ascii_int(n) for n in ctx.listdir(f"{port_dir}/gids"))
                     if i is not None)
    for i in indexes:
        kind = ctx.read_value(f"{port_dir}/gid_attrs/types/{i}")
        if kind is not None and kind.lower() == "roce v2" and \
                is_ipv4_gid(ctx.read_value(f"{port_dir}/gids/{i}") or ""):
            return i
    return None


def read_dmabuf(ctx: Context) -> DmaBuf:
    nvidia, open_module = parse_nvidia_version_file(ctx.read("proc/driver/nvidia/version") or "")
    return DmaBuf(kernel=ctx.read_value("proc/sys/kernel/osrelease") or "", nvidia=nvidia,
                  open_module=open_module)


def peer_memory(ctx: Context) -> Tuple[str, ...]:
    """The peer-memory version files present here, of those some NCCL tests
    (hpcwizard.peer_memory): which NCCL finds them is the plan's and verify's question."""
    return tuple(f.name for f in PEER_MEMORY_FILES if ctx.exists(f.path))


def gpudirect(present: Tuple[str, ...], dmabuf: DmaBuf) -> str:
    """The GPUDirect RDMA mechanism NCCL finds here: a peer-memory module first (its
    ncclIbGdrSupport), else DMA-BUF; "" for none."""
    return present[0] if present else "dmabuf" if dmabuf.supported else ""


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
            layer = ctx.read_value(f"{pb}/link_layer") or "unknown"
            ports.append(Port(
                hca=name,
                number=n,
                state=parse_state(ctx.read_value(f"{pb}/state") or ""),
                phys_state=parse_state(ctx.read_value(f"{pb}/phys_state") or ""),
                rate_gbps=parse_rate(ctx.read_value(f"{pb}/rate") or ""),
                link_layer=layer,
                netdev=_netdev(ctx, base, n),
                roce_v2_ipv4_gid=roce_v2_ipv4_gid(ctx, pb) if layer == "Ethernet" else None,
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

def rdma_warnings(hcas: Sequence[Hca], rdma: Rdma, memlock_known: bool = True,
                  gpus: bool = False, dmabuf: Optional[DmaBuf] = None) -> List[Note]:
    """What will break or slow down an RDMA job, one plain line each. gpus: this machine has
    NVIDIA GPUs; dmabuf: what DMA-BUF needs, as read here (named when GPUDirect is missing)."""
    out = []
    active = [p for h in hcas if not h.software for p in h.ports if p.active]
    if active and not rdma.uverbs:
        out.append(note("rdma.no-uverbs", ports=", ".join(p.name for p in active)))
    if active and gpus and not rdma.gpudirect:
        seen = dmabuf or DmaBuf()
        module = {True: N_("(open kernel module)"), False: N_("(proprietary kernel module)"),
                  None: N_("(kernel module unknown)")}[seen.open_module]
        out.append(note("rdma.no-gpudirect", ports=", ".join(p.name for p in active),
                        kernel=seen.kernel or "?", nvidia=seen.nvidia or "?", module=module))
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
        res = ctx.run(IBV_DEVINFO)
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
    dmabuf = read_dmabuf(ctx)
    present = peer_memory(ctx)
    rdma = Rdma(
        uverbs=uverbs,
        memlock_kib=kib,
        memlock_unlimited=unlimited,
        peermem=bool(present),
        gpudirect=gpudirect(present, dmabuf),
        peer_memory=present,
    )
    for h in hcas:
        if h.software:
            continue
        for p in h.ports:
            if not p.active:
                phys = f", {p.phys_state}" if p.phys_state != "unknown" else ""
                found.note("rdma.port-down", port=p.name, state=p.state, phys=phys)
    for w in rdma_warnings(hcas, rdma, known, gpus_present(ctx), dmabuf):
        found.warn(w)
    found.set("hcas", hcas)
    found.set("rdma", rdma)
