"""One instance's health as the fleet check reads it (programs/health.sh, read-only): each
InfiniBand port's error counters from sysfs, and where nvidia-smi is there each GPU's
uncorrected ECC errors, pages waiting to be retired, rows waiting to be remapped or that
could not be, and each GPU's NVLinks, active or not. Parsed into dataclasses here; judged
across the instances by healthjudge.py."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from .parse import digits
from .shipped import program

HEALTH = "health.sh"
TAG = "HPCWIZARD-HEALTH"
# the error counters read, in the order the report names them
IB_COUNTERS = ("link_downed", "link_error_recovery", "symbol_error", "port_rcv_errors",
               "local_link_integrity_errors", "excessive_buffer_overrun_errors",
               "port_xmit_discards")


def script() -> str:
    """health.sh as one line, as fleet.script() makes ib_facts.sh one: comments left out,
    its lines (whole commands each) joined by '; '."""
    return "; ".join(line.strip() for line in program(HEALTH).splitlines()
                     if line.strip() and not line.lstrip().startswith("#"))


@dataclass(frozen=True)
class IbPortCounters:
    hca: str
    port: str
    counters: Dict[str, int] = field(default_factory=dict)  # counter -> value, those present

    @property
    def name(self) -> str:
        return f"{self.hca}:{self.port}"

    @property
    def software(self) -> bool:
        """rxe and siw: RDMA emulated over Ethernet, no cable of their own to judge."""
        return self.hca.startswith(("rxe", "siw"))


@dataclass(frozen=True)
class GpuHealth:
    index: str
    bus_id: str
    ecc_uncorrected: Optional[int]  # volatile: since the driver loaded; None: not reported
    retired_pending: Optional[bool]  # pages waiting to be retired (before Ampere)
    remap_pending: Optional[bool]  # rows waiting to be remapped (Ampere and later)
    remap_failed: Optional[bool]

    @property
    def name(self) -> str:
        return f"GPU {self.index} ({self.bus_id})" if self.bus_id else f"GPU {self.index}"


@dataclass(frozen=True)
class NvlinkGpu:
    gpu: str  # the index nvidia-smi nvlink names it by
    active: int  # links with a speed
    inactive: int  # links listed as <inactive>


@dataclass(frozen=True)
class NodeHealth:
    ib: Tuple[IbPortCounters, ...]
    smi: bool  # nvidia-smi is on PATH
    gpus: Tuple[GpuHealth, ...]
    gpu_error: str  # what nvidia-smi said when its query failed ("" when it did not)
    nvlink: Tuple[NvlinkGpu, ...]
    complete: bool  # the program's last line came: nothing was cut off

    @property
    def ports(self) -> Tuple[IbPortCounters, ...]:
        """The hardware ports: those the job's traffic crosses a cable on."""
        return tuple(p for p in self.ib if not p.software)

    @property
    def nvlinks_active(self) -> int:
        return sum(g.active for g in self.nvlink)


_UNKNOWN = ("[n/a]", "n/a", "[not supported]", "not supported", "[unknown error]", "")


def _count(value: str) -> Optional[int]:
    """'0', '12' -> the count; '[N/A]', '[Not Supported]' -> None (unknown, never 0)."""
    v = value.strip()
    return int(v) if digits(v) else None


def _yes(value: str) -> Optional[bool]:
    v = value.strip().lower()
    if v in _UNKNOWN:
        return None
    return {"yes": True, "no": False, "1": True, "0": False}.get(v)


_GPU_LINE = re.compile(r"^GPU (\d+):")
_LINK_LINE = re.compile(r"^\s*Link (\d+):\s*(.*)$")


def parse_nvlink(lines: List[str]) -> Tuple[NvlinkGpu, ...]:
    """`nvidia-smi nvlink -s` -> each GPU's links: 'Link 0: 26.562 GB/s' active,
    'Link 3: <inactive>' not; NVML's 'Unable to retrieve NVLink information as all links
    are inActive' under a GPU: none active. A GPU with no link line at all (no NVLink on
    it) is left out."""
    seen: Dict[str, List[int]] = {}
    gpu = ""
    for line in lines:
        m = _GPU_LINE.match(line)
        if m:
            gpu = m.group(1)
            continue
        if not gpu:
            continue
        m = _LINK_LINE.match(line)
        if m:
            counts = seen.setdefault(gpu, [0, 0])
            counts[0 if "GB/s" in m.group(2) else 1] += 1
        elif "all links are inactive" in line.lower():
            seen.setdefault(gpu, [0, 0])
    return tuple(NvlinkGpu(g, a, i) for g, (a, i) in seen.items())


def _gpus(fields: List[str], rows: List[str]) -> Tuple[GpuHealth, ...]:
    out = []
    for row in rows:
        values = dict(zip(fields, (v.strip() for v in row.split(","))))
        if not digits(values.get("index", "")):
            continue  # not a row of the query (a warning nvidia-smi mixed in)
        out.append(GpuHealth(
            values["index"], values.get("pci.bus_id", ""),
            _count(values.get("ecc.errors.uncorrected.volatile.total", "")),
            _yes(values.get("retired_pages.pending", "")),
            _yes(values.get("remapped_rows.pending", "")),
            _yes(values.get("remapped_rows.failure", ""))))
    return tuple(out)


def parse_health(text: str) -> NodeHealth:
    """health.sh's HPCWIZARD-HEALTH lines -> NodeHealth; other lines are not facts."""
    ports: Dict[Tuple[str, str], Dict[str, int]] = {}
    fields: List[str] = []
    rows: List[str] = []
    errors: List[str] = []
    nvlink: List[str] = []
    smi, complete = True, False
    for line in text.splitlines():
        parts = line.rstrip("\r").split("\t")
        if parts[0] != TAG or len(parts) < 2:
            continue
        kind, rest = parts[1], parts[2:]
        if kind == "ib" and len(rest) == 4 and digits(rest[3].strip()):
            hca, port, counter, value = rest
            ports.setdefault((hca, port), {})[counter] = int(value)
        elif kind == "gpu-fields" and rest:
            fields = [f.strip() for f in rest[0].split(",")]
        elif kind == "gpu" and rest:
            rows.append(rest[0])
        elif kind == "gpu-error" and rest:
            errors.append(rest[0].strip())
        elif kind == "gpu-tool" and rest == ["absent"]:
            smi = False
        elif kind == "nvlink" and rest:
            nvlink.append(rest[0])
        elif kind == "end":
            complete = True
    return NodeHealth(
        tuple(IbPortCounters(h, p, c) for (h, p), c in ports.items()), smi,
        _gpus(fields, rows), next((e for e in errors if e), ""), parse_nvlink(nvlink),
        complete)
