"""The fleet check's verdict on every instance's health (nodehealth.py's readings), each
finding naming its host and what on it (a GPU, a port), what it means and what to do.

Absolute rules, whatever the other instances say: a GPU with uncorrected ECC errors, pages
waiting to be retired, rows waiting to be remapped or a failed remap; an InfiniBand port
whose link went down; an nvidia-smi that is there and cannot read its GPUs (on every
instance alike too: a fleet whose GPUs nobody could read is not a healthy one). Relative ones, the instance against the fleet (the same image on the
same hardware): an error counter of its ports far above the fleet's median; fewer GPUs or
fewer active NVLinks than the others have. An instance whose health could not be read is
named as not read."""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Set, Tuple

from ..i18n import _
from .fleet import odd_hosts
from .nodehealth import IB_COUNTERS, GpuHealth, NodeHealth

FAR = 10  # a counter above this many times the fleet's median is far above it
FLOOR = 100  # ... and above the median by at least this much (a median of 0 is common)
KINDS = ("not-read", "gpus-unread", "ecc-uncorrected", "retired-pending", "remap-pending", "remap-failed",
         "link-downed", "ib-errors", "gpus-fewer", "nvlink-fewer")


@dataclass(frozen=True)
class Finding:
    host: str
    kind: str  # one of KINDS
    subject: str  # what on the host: 'GPU 3 (00000000:3B:00.0)', 'mlx5_0:1'; '' the host
    seen: str  # what was read, for the report's line
    meaning: str  # what it means and what to do


@dataclass(frozen=True)
class HealthVerdict:
    hosts: Tuple[str, ...]
    read: Dict[str, NodeHealth]
    findings: Tuple[Finding, ...]
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.findings

    def named(self) -> Dict[str, List[Finding]]:
        """host -> its findings, in the job's order."""
        out: Dict[str, List[Finding]] = {}
        for h in self.hosts:
            mine = [f for f in self.findings if f.host == h]
            if mine:
                out[h] = mine
        return out

    def to_dict(self) -> dict:
        out = asdict(self)
        out["ok"] = self.ok
        out["not_read"] = [f.host for f in self.findings if f.kind == "not-read"]
        return out


def judge(hosts: Tuple[str, ...], read: Dict[str, NodeHealth], not_read: Dict[str, str],
          seconds: float = 0.0) -> HealthVerdict:
    """read: host -> what its program printed, parsed; not_read: host -> why not (the
    command's last line)."""
    findings: List[Finding] = []
    for host in hosts:
        if host in not_read:
            findings.append(Finding(host, "not-read", "", not_read[host], _(
                "Its health could not be read over SSH (the job's user and port, as the "
                "pairs are measured): nothing is known of its GPUs and ports.")))
        elif host in read:
            findings += _absolute(host, read[host])
    findings += _counters_far_above(hosts, read)
    fewer = _gpus_fewer(hosts, read)
    # a GPU missing takes its NVLinks with it: named once, as the GPU
    findings += fewer + _nvlinks_fewer(hosts, read, {f.host for f in fewer})
    order = {h: i for i, h in enumerate(hosts)}
    return HealthVerdict(tuple(hosts), {h: read[h] for h in hosts if h in read},
                         tuple(sorted(findings, key=lambda f: order[f.host])), seconds)


def _absolute(host: str, node: NodeHealth) -> List[Finding]:
    out = [f for g in node.gpus for f in _gpu(host, g)]
    if node.gpu_error:
        out.append(Finding(host, "gpus-unread", "", _("nvidia-smi: {error}").format(
            error=node.gpu_error), _(
            "nvidia-smi is there but could not read the GPUs: the NVIDIA driver is not "
            "loaded or not the tool's version, a GPU fell off the bus, or the container was "
            "started without its GPUs. Nothing is known of their health; run nvidia-smi there, "
            "or ask the platform.")))
    for p in node.ports:
        n = p.counters.get("link_downed", 0)
        if n > 0:
            out.append(Finding(host, "link-downed", p.name, _(
                "{port}: link_downed {n}").format(port=p.name, n=n), _(
                "Port {port} lost its link {n} times since its counters were cleared: a "
                "flapping cable or switch port, which stalls or fails the jobs crossing it; "
                "ask the platform to check the cable and the switch port.").format(
                port=p.name, n=n)))
    return out


def _gpu(host: str, g: GpuHealth) -> List[Finding]:
    out = []
    if g.ecc_uncorrected:
        out.append(Finding(host, "ecc-uncorrected", g.name, _(
            "{gpu}: {n} uncorrected ECC errors since the driver loaded").format(
            gpu=g.name, n=g.ecc_uncorrected), _(
            "The memory of {gpu} returned data it could not correct: jobs on it crash or "
            "compute wrong results. Drain the node and reset the GPU (or reboot); if the "
            "errors come back, ask the platform to replace it.").format(gpu=g.name)))
    if g.retired_pending:
        out.append(Finding(host, "retired-pending", g.name, _(
            "{gpu}: memory pages wait to be retired").format(gpu=g.name), _(
            "Pages of {gpu} with ECC errors are retired only when the driver reloads: reset "
            "the GPU or reboot the node before the next job.").format(gpu=g.name)))
    if g.remap_failed:
        out.append(Finding(host, "remap-failed", g.name, _(
            "{gpu}: row remapping failed").format(gpu=g.name), _(
            "{gpu} has no spare memory rows left for its failing ones: ask the platform to "
            "replace the GPU.").format(gpu=g.name)))
    elif g.remap_pending:
        out.append(Finding(host, "remap-pending", g.name, _(
            "{gpu}: memory rows wait to be remapped").format(gpu=g.name), _(
            "Rows of {gpu} with errors are remapped only when the GPU resets: reset it "
            "(nvidia-smi -r) or reboot the node before the next job.").format(gpu=g.name)))
    return out


def _counters_far_above(hosts: Tuple[str, ...], read: Dict[str, NodeHealth]) -> List[Finding]:
    """Each counter (but link_downed, judged by itself) summed over a host's ports, held to
    the median of the hosts that have it; the port with the most of it named."""
    out = []
    for counter in IB_COUNTERS[1:]:
        totals = {h: sum(p.counters[counter] for p in read[h].ports if counter in p.counters)
                  for h in hosts if h in read
                  and any(counter in p.counters for p in read[h].ports)}
        if len(totals) < 3:
            continue  # two hosts: neither is far above their median
        median = statistics.median(totals.values())
        for host, total in totals.items():
            if total > FAR * median and total - median >= FLOOR:
                worst = max((p for p in read[host].ports if counter in p.counters),
                            key=lambda p: p.counters[counter])
                out.append(Finding(host, "ib-errors", worst.name, _(
                    "{port}: {counter} {n}, the fleet's median {median:g}").format(
                    port=worst.name, counter=counter, n=total, median=median), _(
                    "{counter} of its ports is far above the other instances': a degraded "
                    "cable, transceiver or switch port slows or breaks the transfers crossing "
                    "it; ask the platform to check {port}.").format(
                    counter=counter, port=worst.name)))
    return out


def fewer_than_usual(values: Dict[str, int]) -> Tuple[int, Dict[str, int]]:
    """(what the hosts should have, the hosts with less): the value most hosts have, or,
    with none most common, the highest (a GPU or a link lost, never one gained)."""
    if not values:
        return 0, {}
    usual, _odd = odd_hosts(values)
    ref = usual if usual is not None else max(values.values())
    return ref, {h: v for h, v in values.items() if v < ref}


def _gpus_fewer(hosts: Tuple[str, ...], read: Dict[str, NodeHealth]) -> List[Finding]:
    """Among the hosts whose GPUs were read (one whose nvidia-smi failed is named as such,
    and its 0 would be no count to hold the others to)."""
    usual, fewer = fewer_than_usual({h: len(read[h].gpus) for h in hosts
                                     if h in read and not read[h].gpu_error})
    out = []
    for host, n in fewer.items():
        seen = _("{n} GPUs, the others {usual}").format(n=n, usual=usual)
        if not read[host].smi:
            seen += " " + _("(no nvidia-smi)")
        out.append(Finding(host, "gpus-fewer", "", seen, _(
            "GPUs missing: one fell off the bus (XID 79), its driver is not loaded, or the "
            "container was given fewer; a job with ranks on every GPU fails there. Ask the "
            "platform.")))
    return out


def _nvlinks_fewer(hosts: Tuple[str, ...], read: Dict[str, NodeHealth],
                   named: Set[str]) -> List[Finding]:
    have = {h: read[h].nvlinks_active for h in hosts if h in read and not read[h].gpu_error}
    if not any(read[h].nvlink for h in have):
        return []  # no instance reports NVLink: nothing to compare
    usual, fewer = fewer_than_usual(have)
    out = []
    for host, n in fewer.items():
        if host in named:
            continue
        down = ", ".join(f"GPU {g.gpu} {g.active}/{g.active + g.inactive}"
                         for g in read[host].nvlink if g.inactive or not g.active)
        seen = _("{n} NVLinks active, the others {usual}").format(n=n, usual=usual)
        out.append(Finding(host, "nvlink-fewer", "", seen + (f" ({down})" if down else ""), _(
            "NVLinks down: traffic between its GPUs goes the slower way (PCIe) or NCCL "
            "fails; ask the platform (a GPU reset, the fabric manager, or a repair).")))
    return out


def summary(v: HealthVerdict) -> Optional[str]:
    """What every instance has alike, from the first one read ('8 GPUs, 144 NVLinks active,
    2 InfiniBand ports'); None when none was read."""
    first = next((v.read[h] for h in v.hosts if h in v.read), None)
    if first is None:
        return None
    parts = []
    if first.gpus:
        parts.append(_("{n} GPUs").format(n=len(first.gpus)))
    if first.nvlink:
        parts.append(_("{n} NVLinks active").format(n=first.nvlinks_active))
    if first.ports:
        parts.append(_("{n} InfiniBand ports").format(n=len(first.ports)))
    return ", ".join(parts) or _("no GPU and no InfiniBand port")
