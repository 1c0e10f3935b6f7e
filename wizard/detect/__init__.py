"""How do we learn what this machine is? `detect()` starts the programs it asks first, then
runs small probes in turn while those run (core, commands).

    from hpcwizard.detect import detect
    facts = detect()                       # this machine, commands included
    facts = detect("/mnt/image")           # a tree: files only, commands skipped (noted)

Importing this package is cheap: stdlib only, no textual, no requests, never torch.
The summary text lives in `hpcwizard.detect.summary` (format_summary).
"""
from __future__ import annotations

from .core import PROBES, Probe, detect

__all__ = ["detect", "PROBES", "Probe"]
