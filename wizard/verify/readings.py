"""The InfiniBand facts each verification read, host -> facts: the per-host checks keep
them, the cluster check and its needs read them."""
from __future__ import annotations

import threading
import weakref
from typing import Dict

from .context import Ctx
from .parse import IbFacts

# What each verification read, host -> facts, for the cluster check. Kept beside the Ctx
# rather than in it: the per-host checks run in the pool's threads.
_READ: "weakref.WeakKeyDictionary[Ctx, Dict[str, IbFacts]]" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def read_facts(ctx: Ctx) -> Dict[str, IbFacts]:
    """The hosts whose facts were read in this verification, in the job's order."""
    with _LOCK:
        got = dict(_READ.get(ctx, {}))
    return {h: got[h] for h in ctx.names if h in got}


def keep(ctx: Ctx, host: str, facts: IbFacts) -> None:
    with _LOCK:
        _READ.setdefault(ctx, {})[host] = facts
