"""What an NCCL_DEBUG=INFO log says about the network NCCL chose between instances: IB or
sockets, and over IB whether its connections use GPUDirect RDMA (the NIC reads and writes
GPU memory) or go through host memory. A pure function of text, for NCCL 2.18 to 2.27's
wording (and the older 'Ring 00 :' and the IB plugins' lines), tested on published logs
(tests/fixtures/logs/nccl-transport/).

The verdict comes from the connection lines, which NCCL prints at INFO with its default
subsystems (INIT): `Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA`. The lines
about the HCAs (`GPU Direct RDMA Disabled for HCA 0 'mlx5_0'`) and the GPU-to-NIC distance
are NCCL_NET's, printed only with NCCL_DEBUG_SUBSYS naming NET (or ALL): they say why, when
they are there."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

# `[send] via NET/<network>/<dev>[(<proxy rank>)][/GDRDMA[(PCI)]][/Shared]`; the network is
# the plugin's name, which may hold spaces ('NCCL RDMA Plugin v9', 'AWS Libfabric').
_CONNECTION = re.compile(r"\[(?:send|receive)\] via NET/(?P<net>[^/\n]+?)/\d+(?:\(\d+\))?"
                         r"(?P<gdr>/GDRDMA)?")
# 'host:pid:tid [cudaDev] NCCL INFO': torchrun or mpirun may put their own prefix before it.
_HOST = re.compile(r"([\w.<>-]*):\d+:\d+ \[\d+\] NCCL ")
_USING_NETWORK = re.compile(r"Using network (\S+)")
_IB_USING = re.compile(r"NET/IB ?: Using ((?:\s*\[\d+\]\S+)+)")
_HCA_GDR = re.compile(r"GPU Direct RDMA (?:\((?:nvidia-peermem|DMABUF)\) )?"
                      r"(?P<state>Enabled|Disabled|enabled) for HCA \d+ '(?P<hca>[^'\s]+)")
_TOO_FAR = re.compile(r"GPU Direct RDMA Disabled for GPU \S+ / HCA \S+ \(distance \d+ > \d+\)")
_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)")


@dataclass(frozen=True)
class NcclTransport:
    net: str = ""  # "ib" | "socket" | "" (the log does not say)
    # over IB: True when every host with network connections has one via GDRDMA (the send
    # side may read through host memory by NCCL's choice, NCCL_NET_GDR_READ); False when
    # some host has none; None when no network connection line was logged (or sockets)
    gdr: Optional[bool] = None
    hcas: Tuple[str, ...] = ()  # as 'NET/IB : Using' names them: 'mlx5_0:1/IB'
    hosts_without_gdr: Tuple[str, ...] = ()  # the log's host names, when some host has GDR
    # the log's host names that chose sockets: net is "socket" when any host did, even when
    # the others chose IB (one container without /dev/infiniband, the rest with it)
    socket_hosts: Tuple[str, ...] = ()
    ib_hosts: Tuple[str, ...] = ()  # and those that chose IB (both: the hosts disagree)
    gdr_disabled_hcas: Tuple[str, ...] = ()  # 'GPU Direct RDMA Disabled for HCA n NAME'
    gdr_enabled_hcas: Tuple[str, ...] = ()
    too_far: bool = False  # NCCL kept GDR off: the GPU is too far from the NIC on PCIe
    dmabuf_gpu: bool = False  # 'DMA-BUF is available on GPU device n': the GPU can export
    version: str = ""  # 'NCCL version 2.20.5+cuda12.4' -> '2.20.5'

    @property
    def version_tuple(self) -> Tuple[int, ...]:
        return tuple(int(x) for x in self.version.split(".")) if self.version else ()


def _unique(items) -> Tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def _is_socket(name: str) -> bool:
    return name.lower().startswith("socket")


def nccl_transport(text: str) -> NcclTransport:
    """The network NCCL chose and, over IB, whether it used GPUDirect RDMA (NcclTransport)."""
    host_gdr: Dict[str, bool] = {}
    networks = []
    on_sockets: Dict[str, None] = {}  # the hosts that chose sockets, in the log's order
    on_ib: Dict[str, None] = {}
    for line in text.splitlines():
        h = _HOST.search(line)
        host = h.group(1) if h else ""
        using = _USING_NETWORK.search(line)
        if using:
            networks.append(using.group(1))
            (on_sockets if _is_socket(using.group(1)) else on_ib)[host] = None
        m = _CONNECTION.search(line)
        if not m:
            continue
        name = m.group("net").strip()
        networks.append(name)
        if _is_socket(name):
            on_sockets[host] = None
            continue
        on_ib[host] = None
        host_gdr[host] = host_gdr.get(host, False) or bool(m.group("gdr"))
    if networks:
        # one host on sockets is the job's speed: its peers' IB does not make up for it
        net = "socket" if on_sockets else "ib"
    elif _IB_USING.search(text) or re.search(r"NET/IB ?: GPU Direct RDMA", text):
        net = "ib"
    else:
        net = ""
    hcas = _unique(d for m in _IB_USING.finditer(text)
                   for d in re.findall(r"\[\d+\](\S+)", m.group(1)))
    states = [(m.group("hca"), m.group("state").lower()) for m in _HCA_GDR.finditer(text)]
    gdr: Optional[bool] = None
    without: Tuple[str, ...] = ()
    disabled = _unique(h for h, s in states if s == "disabled")
    enabled = _unique(h for h, s in states if s == "enabled")
    if net == "ib" and host_gdr:
        gdr = all(host_gdr.values())
        if any(host_gdr.values()):
            without = tuple(sorted(h for h, used in host_gdr.items() if h and not used))
    elif net == "ib" and disabled and not enabled:
        gdr = False  # no connection logged, but no HCA NCCL could use it on
    version = _VERSION.search(text)
    return NcclTransport(
        net=net, gdr=gdr, hcas=hcas, hosts_without_gdr=without,
        socket_hosts=tuple(h for h in on_sockets if h),
        ib_hosts=tuple(h for h in on_ib if h and h not in on_sockets),
        gdr_disabled_hcas=disabled, gdr_enabled_hcas=enabled,
        too_far=bool(_TOO_FAR.search(text)),
        dmabuf_gpu="DMA-BUF is available on GPU device" in text,
        version=version.group(1) if version else "")
