"""Which NVIDIA GPUs, which driver, which CUDA does the driver support?

`nvidia-smi --query-gpu=...` lists the GPUs; the plain `nvidia-smi` table's header gives the
CUDA version. Without nvidia-smi (or without commands), /proc/driver/nvidia tells the driver
version and, per GPU, its model.
"""
from __future__ import annotations

import io
import re
from dataclasses import replace
from typing import List, Optional, Tuple

from ..facts import Gpu
from ..inputs import ascii_int
from .base import Context, Found
from .commands import GPU_QUERY, GPU_TABLE


def _int(text: str) -> Optional[int]:
    m = re.match(r"\s*([0-9]{1,18})", text or "")
    return int(m.group(1)) if m else None


def parse_nvidia_smi_csv(text: str) -> Tuple[Gpu, ...]:
    """'0, NVIDIA H100 80GB HBM3, 81559, 590.48.01' lines -> GPUs ('[N/A]' -> unknown)."""
    gpus: List[Gpu] = []
    import csv  # only with GPUs: detect imports gpu.py on every machine

    for row in csv.reader(io.StringIO(text), skipinitialspace=True):
        index = ascii_int(row[0]) if len(row) >= 2 else None  # '²'.isdigit() is True
        if index is None:
            continue
        row = [c.strip() for c in row] + ["", ""]
        driver = row[3] if not row[3].startswith("[") else ""
        gpus.append(Gpu(index=index, name=row[1], memory_mib=_int(row[2]), driver=driver))
    return tuple(gpus)


def parse_nvidia_smi_cuda(text: str) -> str:
    """'... Driver Version: 590.48.01      CUDA Version: 13.1 ...' -> '13.1'."""
    m = re.search(r"CUDA Version\s*:\s*([0-9][0-9.]*)", text)
    return m.group(1) if m else ""


def parse_nvidia_smi_driver(text: str) -> str:
    m = re.search(r"Driver Version\s*:\s*([0-9][0-9.]*)", text)
    return m.group(1) if m else ""


def parse_proc_driver_version(text: str) -> str:
    """/proc/driver/nvidia/version -> '535.104.05'."""
    m = re.search(r"NVRM version:.*?\s(\d+\.\d+(?:\.\d+)?)\s", text + " ")
    return m.group(1) if m else ""


def parse_proc_gpu_information(text: str) -> Tuple[str, Optional[int]]:
    """/proc/driver/nvidia/gpus/<bus>/information -> (model, device minor)."""
    model = re.search(r"^Model:\s*(.+?)\s*$", text, flags=re.MULTILINE)
    minor = re.search(r"^Device Minor:\s*([0-9]{1,18})", text, flags=re.MULTILINE)
    return (model.group(1) if model else "unknown", int(minor.group(1)) if minor else None)


def gpus_from_proc(ctx: Context) -> Tuple[Gpu, ...]:
    driver = parse_proc_driver_version(ctx.read("proc/driver/nvidia/version") or "")
    gpus = []
    for i, bus in enumerate(ctx.listdir("proc/driver/nvidia/gpus")):
        model, minor = parse_proc_gpu_information(
            ctx.read(f"proc/driver/nvidia/gpus/{bus}/information") or ""
        )
        gpus.append(Gpu(index=minor if minor is not None else i, name=model, driver=driver))
    return tuple(sorted(gpus, key=lambda g: g.index))


def _device_evidence(ctx: Context) -> bool:
    return bool(ctx.glob("dev/nvidia[0-9]*")) or bool(ctx.listdir("proc/driver/nvidia/gpus"))


def probe(ctx: Context, found: Found) -> None:
    if ctx.run_commands:
        res = ctx.run(GPU_QUERY)
        if res is not None and res.ok:
            gpus = parse_nvidia_smi_csv(res.stdout)
            if gpus:
                table = ctx.run(GPU_TABLE)
                cuda = parse_nvidia_smi_cuda(table.stdout) if table is not None and table.ok else ""
                if not cuda:
                    found.note("gpu.cuda-unknown")
                proc_driver = parse_proc_driver_version(ctx.read("proc/driver/nvidia/version") or "")
                gpus = tuple(replace(g, cuda=cuda, driver=g.driver or proc_driver) for g in gpus)
            found.set("gpus", gpus)
            return
        if res is not None:  # installed but failing: typically no --gpus / driver mismatch
            if _device_evidence(ctx):
                found.warn("gpu.smi-failed-present", output=res.first_line())
            else:
                found.note("gpu.smi-failed", output=res.first_line())
            found.set("gpus", ())
            return
    gpus = gpus_from_proc(ctx)
    if gpus:
        found.note("gpu.from-proc" if ctx.run_commands else "gpu.from-proc-no-commands")
    elif ctx.run_commands:
        found.note("gpu.none")
    found.set("gpus", gpus)
