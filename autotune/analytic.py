"""Analytic cost estimates of one store statement and of a program, as feature columns.

The per-store features of ``features`` describe a loop nest in absolute counts (bytes,
iterations, extents): a tree model learns thresholds on them that hold for the operators
and shapes it was trained on and transfer poorly to an operator it has not seen.  This
module estimates, from the same loop nest, what a roofline model of a CPU core would say
and expresses it *per operation of the statement* (so the estimate of a 3x3 convolution
and of a dense layer land on one scale):

* compute: operations over the vector lanes that really work (a vectorized loop narrower
  than a register, or one whose loads are strided, uses fewer lanes);
* loop overhead: the iterations of the loops that stay loops (one branch each) per operation;
* register traffic: vector loads and stores of the straight-line body per operation (the
  accumulators stay in registers across a reduction loop that does not move the store);
* data movement per cache level (``LEVEL_BYTES``): the bytes that come from beyond the
  level, from a footprint analysis (``level_traffic``): the lines of the loop just outside
  the inner loops whose footprint (all accesses, in cache lines) fits in the level are
  loaded once per iteration of the loops outside it;
* an estimated cycle count: the slowest of those over the level bandwidths
  (``LEVEL_BYTES_PER_CYCLE``) and compute, plus the loop overhead, per operation; and which
  of them bounds it.

The sizes and rates are those of a typical x86 core (AVX2): what matters for ranking
candidates of one task is how they move with the schedule, not their absolute values.
"""
from __future__ import annotations

import math
from typing import Sequence

#: cache capacities (bytes): L1d, L2 (per core), last level; past the last: DRAM
LEVEL_BYTES = (32 * 1024, 1024 * 1024, 16 * 1024 * 1024)
#: bytes per cycle a core moves from each level: L1, L2, LLC, DRAM
LEVEL_BYTES_PER_CYCLE = (64.0, 32.0, 16.0, 6.0)
#: vector arithmetic instructions a core issues per cycle (two FMA ports)
VECTOR_OPS_PER_CYCLE = 2.0
#: columns of one store's estimate (``store_estimate``)
STORE_EST_LEN = 12
#: columns of the program-level estimate (``program_estimate``)
PROGRAM_EST_LEN = 6
_LINE = 64


def _log(x: float) -> float:
    return math.log2(1.0 + max(0.0, float(x)))


def _lines_bytes(extents: Sequence[int], strides: Sequence[int], nbytes: int) -> float:
    """Bytes (whole cache lines) an access touches over loops of these extents and
    element strides (the ``features._footprint`` rule)."""
    moving = sorted(((e, abs(s)) for e, s in zip(extents, strides) if s != 0 and e > 1),
                    key=lambda t: t[1])
    if not moving:
        return float(_LINE)
    e0, s0 = moving[0]
    lines = math.ceil(e0 * min(s0 * nbytes, _LINE) / _LINE)
    for e, _ in moving[1:]:
        lines *= e
    return float(lines * _LINE)


def footprints(extents: Sequence[int], accesses: Sequence[tuple[Sequence[int], int]]
               ) -> list[float]:
    """Bytes (cache lines) all ``accesses`` touch over the ``k`` innermost loops, k = 0..n."""
    n = len(extents)
    return [sum(_lines_bytes(extents[n - k:], st[n - k:], nb) for st, nb in accesses)
            for k in range(n + 1)]


def level_traffic(extents: Sequence[int], accesses: Sequence[tuple[Sequence[int], int]],
                  capacity: int, fps: "Sequence[float] | None" = None) -> float:
    """Bytes a loop nest (``extents``, outermost first) loads from beyond a cache of
    ``capacity`` bytes.  With ``k`` the most inner loops whose footprint (all ``accesses``:
    per-loop element strides, element bytes) fits, the loop just outside them reuses what
    consecutive iterations share (a line the next column reads, data it does not move):
    the distinct lines of those ``k + 1`` loops are loaded once per iteration of the loops
    outside them (all of them once when the whole nest fits).  ``fps``: ``footprints`` of
    the nest, when known."""
    n = len(extents)
    fps = footprints(extents, accesses) if fps is None else fps
    k = 0
    while k < n and fps[k + 1] <= capacity:
        k += 1
    if k == n:
        return fps[n]
    return fps[k + 1] * math.prod(extents[:n - k - 1])


def store_estimate(extents: Sequence[int], vectorized: Sequence[bool], real: Sequence[bool],
                   accesses: Sequence[tuple[Sequence[int], int]], ops: float, nbytes: int,
                   body_vectors: float, register_bytes: int) -> tuple[list[float], float, float]:
    """(columns, estimated cycles, operations) of one store.

    ``extents``/``vectorized``/``real`` per loop (outermost first; ``real``: a loop that
    stays a loop, not unrolled or vectorized); ``accesses``: (per-loop element strides,
    element bytes), the store first; ``ops``: arithmetic operations per iteration;
    ``body_vectors``: vector loads and stores of the straight-line body per execution."""
    iters = math.prod(extents) if extents else 1
    work = iters * max(1.0, ops)
    per_reg = max(1, register_bytes // max(1, nbytes))
    vec = math.prod(e for e, v in zip(extents, vectorized) if v)
    vec_i = next((k for k, v in enumerate(vectorized) if v), None)
    if vec_i is None or vec <= 1:
        lanes = 1.0
    else:
        used = vec / (math.ceil(vec / per_reg) * per_reg)       # lanes of the last register
        strided = sum(1 for st, _ in accesses if abs(st[vec_i]) > 1)
        lanes = per_reg * used / (1.0 + strided)                # a gather: a lane at a time
    compute = work / lanes / VECTOR_OPS_PER_CYCLE
    kr = max((k for k, r in enumerate(real) if r), default=-1)
    trips = math.prod(extents[:kr + 1]) if kr >= 0 else 1     # body executions
    overhead = float(trips)
    regs = trips * body_vectors
    traffic = [regs * register_bytes]
    fps = footprints(extents, accesses)
    traffic += [level_traffic(extents, accesses, cap, fps) for cap in LEVEL_BYTES]
    times = [compute] + [b / bw for b, bw in zip(traffic, LEVEL_BYTES_PER_CYCLE)]
    cycles = max(times) + overhead
    bound = max(range(len(times)), key=lambda i: times[i])
    cols = [math.log2(lanes), _log(overhead / work * 64), _log(regs / work * 64)]
    cols += [_log(b / work) for b in traffic[1:]]
    cols += [math.log2(cycles / work), math.log2(max(times) / compute),
             float(bound), float(bound == 0), _log(trips), math.log2(work)]
    assert len(cols) == STORE_EST_LEN
    return cols, cycles, work


def program_estimate(stores: Sequence[tuple[float, float, bool]]) -> list[float]:
    """Program-level columns from each store's (cycles, operations, is a reduction update):
    cycles per operation of the whole program and per operation of its updates (copies and
    epilogues cost cycles, the updates are the work), the updates' share of the cycles, the
    slowest store's share, and the store count."""
    cyc = sum(c for c, _, _ in stores) or 1.0
    work = sum(w for _, w, _ in stores) or 1.0
    upd = [(c, w) for c, w, u in stores if u]
    upd_work = sum(w for _, w in upd) or work
    upd_cyc = sum(c for c, _ in upd)
    cols = [math.log2(cyc / work), math.log2(cyc / upd_work), upd_cyc / cyc,
            max((c for c, _, _ in stores), default=0.0) / cyc, math.log2(cyc),
            _log(len(stores))]
    assert len(cols) == PROGRAM_EST_LEN
    return cols
