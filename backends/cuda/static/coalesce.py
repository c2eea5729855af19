"""Global-memory transactions of a warp request (coalescing).

Global memory moves 32-byte sectors.  A request costs the sectors its lanes' bytes fall
in; the fewest it could cost is the bytes it needs (their union) over 32.  The ratio of
the two is 1 for a coalesced request (consecutive lanes, consecutive addresses, or one
address for all), up to 8 for 4-byte lanes that each land in a sector of their own
(a column walk).  Buffers are taken to start on a 256-byte boundary (what the host
allocates and what PyTorch/NumPy arrays usually have).
"""
from __future__ import annotations

from typing import Sequence

from .lanes import LaneAccess

SECTOR = 32


def sectors(request: Sequence[LaneAccess]) -> tuple[int, int]:
    """(sectors touched, the fewest that hold the bytes requested) of ``request``."""
    touched: set[int] = set()
    spans = []
    for a in request:
        if a is None:
            continue
        addr, size = a
        touched.update(range(addr // SECTOR, (addr + size - 1) // SECTOR + 1))
        spans.append((addr, addr + size))
    spans.sort()
    needed, end = 0, None
    for lo, hi in spans:             # the union's size
        if end is None or lo >= end:
            needed += hi - lo
            end = hi
        elif hi > end:
            needed += hi - end
            end = hi
    return len(touched), -(-needed // SECTOR)
