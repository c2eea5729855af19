"""Shared-memory bank conflicts of a warp request.

Shared memory has 32 banks of 4-byte words (word ``w`` is in bank ``w % 32``); a request
is served in one wavefront unless lanes touch *different* words of one bank, which the
hardware serializes: a request's cost is the most distinct words any bank holds ("ways";
1 is conflict free, lanes reading one word share it).  Accesses wider than 4 bytes per
lane are split into phases of 128 bytes: 16 lanes of 8 bytes, or 8 lanes of 16 bytes,
each judged on its own (the ways of the request are its worst phase's).
"""
from __future__ import annotations

from typing import Sequence

from .lanes import LaneAccess

BANKS = 32
WORD = 4


def conflict_ways(request: Sequence[LaneAccess]) -> int:
    """The most distinct words in one bank within a phase of ``request`` (0: no lane)."""
    active = [a for a in request if a is not None]
    if not active:
        return 0
    width = max(w for _, w in active)
    per_phase = 32 if width <= 4 else 16 if width <= 8 else 8
    ways = 0
    for start in range(0, len(request), per_phase):
        banks: dict[int, set[int]] = {}
        for a in request[start:start + per_phase]:
            if a is None:
                continue
            addr, size = a
            for word in range(addr // WORD, (addr + size - 1) // WORD + 1):
                banks.setdefault(word % BANKS, set()).add(word)
        if banks:
            ways = max(ways, max(len(s) for s in banks.values()))
    return ways
