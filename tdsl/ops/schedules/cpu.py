"""What the default CPU schedules (``llvm.py``) share: the target's vector width and thread
count (``CPU``), and small helpers on stages and loops."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from types import MappingProxyType

from tdsl.dtype import DType
from tdsl.errors import TDSLError
from tdsl.schedule import Schedule, Stage
from tdsl.target import Target, cpu_facts
from tdsl.tensor import IterVar

from .._util import const_value


@dataclass(frozen=True)
class CPU:
    """What the schedules need to know of the target CPU."""

    vector_bits: int
    threads: int

    def lanes(self, dtype: DType) -> int:
        return max(1, self.vector_bits // max(8, dtype.bits))


@functools.lru_cache(maxsize=None)
def cpu_of(target: Target) -> CPU:
    """Vector width and thread count of ``target`` (``tdsl.target.cpu_facts``: the host's or
    ``-mcpu``/``-mattr``'s features; 256-bit vectors when LLVM is not installed)."""
    try:
        facts = cpu_facts(target)
    except (ImportError, RuntimeError, TDSLError):   # no LLVM: schedule for 256-bit vectors
        from tdsl.runtime.threads import default_num_threads
        return CPU(256, max(1, target.num_threads or default_num_threads()))
    return CPU(facts.vector_bits, facts.cores)


def _ext(iv: IterVar) -> "int | None":
    """The constant extent of a root axis (None if symbolic or a derived loop)."""
    return None if iv.dom is None else const_value(iv.dom.extent)


def _fuse(st: Stage, ivs: list) -> IterVar:
    return ivs[0] if len(ivs) == 1 else st.fuse(*ivs)


def _out_dtype(st: Stage) -> DType:
    return st.op.outputs[0].dtype


def _vector_split(st: Stage, iv: IterVar, lanes: int, extent: "int | None" = None
                  ) -> tuple[IterVar, IterVar]:
    """Split ``iv`` so that its inner loop has at most ``lanes`` iterations (a constant)."""
    e = _ext(iv) if extent is None else extent
    factor = lanes if e is None or e >= lanes else _pow2_floor(e) if e > 1 else 1
    return st.split(iv, factor=factor)


def _pow2_floor(x: int) -> int:
    p = 1
    while p * 2 <= x:
        p *= 2
    return p


def _total(st: Stage) -> "int | None":
    tot = 1
    for iv in st.op.axis:
        e = _ext(iv)
        if e is None:
            return None
        tot *= e
    return tot


#: Cost per output of a vector tile ``v`` registers wide (keyed by ``v`` relative to the
#: widest, in quarters: 4 is the widest), relative to the widest: fewer accumulators hide
#: less FMA latency and share fewer broadcasts; a half-register tile wastes half its lanes.
TILE_WIDTH_COST = MappingProxyType({0: 1.6, 1: 1.2, 2: 1.08, 4: 1.0})
#: A partial tile (an extent that is not a multiple of the tile's width) runs guarded: its
#: accumulators stay in memory and every FMA is masked; it costs about this many full tiles.
PARTIAL_TILE_COST = 3.0


def vector_tile(n: "int | None", lanes: int, max_vectors: int) -> int:
    """The width (elements) of a register tile along a vectorized axis of extent ``n``:
    ``v * lanes`` for ``v`` a power of two up to ``max_vectors`` (or half a register), the
    widest unless a narrower one leaves a smaller (or no) partial tile at the end of ``n``
    (``PARTIAL_TILE_COST``).  Widths are powers of two: 64x256x1000 ran 18x slower with
    3 x 16 lanes than with 4 (LLVM did not keep the 48-lane loop in registers)."""
    widths = [v * lanes for v in (8, 4, 2, 1) if v <= max_vectors]
    if n is None:
        return widths[0]
    if lanes >= 4:
        widths.append(lanes // 2)
    best: "tuple[float, int] | None" = None
    for w in widths:
        if n < w and w > lanes:
            continue
        full, part = divmod(n, w)
        key = 0 if w < lanes else max(1, 4 * w // (lanes * max_vectors))
        cost = (full + (PARTIAL_TILE_COST if part else 0.0)) * w / n * TILE_WIDTH_COST[key]
        if best is None or cost < best[0] - 1e-9:
            best = (cost, w)
    assert best is not None
    return best[1]


def accumulate_locally(s: Schedule, anchor: Stage, out: "Stage | None") -> tuple[Stage, Stage]:
    """(the stage that accumulates in registers, the stage that writes the result): a local
    cache of ``anchor`` written back by it, or, when an epilogue stage ``out`` writes the
    result, ``anchor`` itself moved to local scope."""
    if out is None:
        return s[s.cache_write(anchor.op.outputs[0], "local")], anchor
    anchor.set_scope("local")
    return anchor, out
