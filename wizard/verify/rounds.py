"""Which pairs of instances the fleet check measures, in rounds of disjoint pairs: within a
round no instance is in two pairs, so every pair has its two instances' links to itself.

Up to ALL_PAIRS_UPTO instances every pair is measured (the circle method: N-1 rounds, N if
N is odd). Beyond, a ring (every instance with its two neighbours: 2 rounds, 3 if N is odd)
and SAMPLE_ROUNDS random pairings: the rounds are bounded whatever N is, and each instance
is in enough pairs for a slow one to stand out from its slow links."""
from __future__ import annotations

import random
from typing import List, Optional, Sequence, Set, Tuple

Pair = Tuple[str, str]
Round = Tuple[Pair, ...]

ALL_PAIRS_UPTO = 16
SAMPLE_ROUNDS = 4


def rounds(hosts: Sequence[str], seed: Optional[int] = None) -> List[Round]:
    """The rounds for hosts (distinct names): every pair when there are at most
    ALL_PAIRS_UPTO, else the ring and the sample (seed: the sample's, fixed by the names
    when None, so that one job's checks measure the same pairs)."""
    if len(hosts) <= ALL_PAIRS_UPTO:
        return every_pair(hosts)
    ring = matchings([(hosts[i], hosts[(i + 1) % len(hosts)]) for i in range(len(hosts))])
    rng = random.Random(seed if seed is not None else ",".join(hosts))
    seen: Set[frozenset] = {frozenset(p) for r in ring for p in r}
    sample: List[Round] = []
    for _ in range(SAMPLE_ROUNDS):
        order = list(hosts)
        rng.shuffle(order)
        pairs = [(a, b) for a, b in zip(order[::2], order[1::2])
                 if frozenset((a, b)) not in seen]
        seen.update(frozenset(p) for p in pairs)
        if pairs:
            sample.append(tuple(pairs))
    return ring + sample


def every_pair(hosts: Sequence[str]) -> List[Round]:
    """The circle method: one host stays, the others turn one place a round."""
    order: List[Optional[str]] = list(hosts)
    if len(order) % 2:
        order.append(None)  # the one paired with it rests this round
    n = len(order)
    out: List[Round] = []
    for _ in range(n - 1):
        pairs = tuple((a, b) for a, b in ((order[i], order[n - 1 - i]) for i in range(n // 2))
                      if a is not None and b is not None)
        if pairs:
            out.append(pairs)
        order = [order[0], order[-1], *order[1:-1]]
    return out


def matchings(pairs: Sequence[Pair]) -> List[Round]:
    """pairs split into rounds of disjoint pairs, each into the first round it fits."""
    out: List[List[Pair]] = []
    busy: List[Set[str]] = []
    for a, b in pairs:
        for r, used in zip(out, busy):
            if a not in used and b not in used:
                r.append((a, b))
                used.update((a, b))
                break
        else:
            out.append([(a, b)])
            busy.append({a, b})
    return [tuple(r) for r in out]
