"""Features of a candidate, read from its lowered loop IR: one row per store statement.

A program is described by the rows of its store statements (``BufferStore``), each
a fixed-length vector (``STORE_LEN``) of the store and the loops around it:

* computation: arithmetic operations by kind (``irutil.OP_KINDS``) times iterations;
  iterations, loop depth, the store's share of the program's work;
* loop annotations: vector lanes (and whether the vector loop is innermost),
  unrolled extent and loop count, parallel extent (and whether it is outermost),
  the largest unroll pragma, innermost / outermost extents, whether the store is
  a reduction update or an initialisation;
* the register-level kernel inside the innermost reduction loop (tile size,
  registers, whether it is unrolled / vectorized, arithmetic intensity);
* the straight-line body (FEATURE_VERSION 5): what the innermost loop that stays a
  loop runs once unrolled and vectorized loops (the schedule's or
  ``auto_unroll_max_step``'s) are flattened: its size in vector steps, the vector
  registers of its accumulators (fit in ``REGISTERS`` / spill), whether they stay in
  registers across that loop, loads per body, its trip count, register traffic;
* cache fit: iterations and bytes of the outermost loop level whose footprint fits
  in 32 KiB and in 1 MiB;
* per buffer access (the store, then the loads touching the most bytes; up to
  ``ACCESSES``): element size, scope, the stride along the innermost and the
  vectorized loop, and for each of the ``LEVELS`` innermost loop levels the bytes
  touched (cache lines x 64) and the reuse (iterations / distinct elements);
* analytic estimates (FEATURE_VERSION 6, ``analytic``): per store, the working vector
  lanes, loop overhead, register traffic and bytes from beyond L1 / L2 / the last level
  per operation, the estimated cycles per operation and what bounds them; per program
  (the same in every row), cycles per operation of the program and of its reduction
  updates, the updates' and the slowest store's share of the cycles;
* the program's allocations (count, bytes by scope, bytes allocated per run —
  an allocation inside a loop is made once per iteration), the bytes its copies into
  local buffers (packs, cache reads) write, per reduction update, and its code size
  (statements after unrolling).

Counts enter as ``log2(1 + x)``.  Nothing depends on names (of loops, buffers or
sketch knobs), so renaming leaves the features unchanged.

``extract_features`` packs the rows of ``MAX_STORES`` stores (reduction updates first,
then by work; zero padded; the first element of a used row is 1) into one fixed-length vector
(``FEATURE_LEN``), so records and candidate pools keep one vector per program;
``unpack`` gives the rows back.  The cost model sums a score per row (Ansor's
"pack-sum"): a program's cost is the sum of its statements' costs.
``FEATURE_VERSION`` changes whenever the layout does, so stored features of
another version are recomputed.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from tdsl.expr import BufferLoad, Const, Var
from tdsl.stmt import (Allocate, BufferStore, For, ForKind, IfThenElse, IntrinCall, LetStmt,
                       PrimFunc, SeqStmt, StorageScope)
from tdsl.visitor import post_order_visit, substitute

from .analytic import PROGRAM_EST_LEN, STORE_EST_LEN, program_estimate, store_estimate
from .irutil import OP_KINDS, count_ops, eval_int

FEATURE_VERSION = 6
ACCESSES = 4
LEVELS = 4
MAX_STORES = 10
CACHES = (32 * 1024, 1024 * 1024)
_ACCESS_LEN = 7 + 2 * LEVELS
_KERNEL_LEN = 10
_BODY_LEN = 11
#: Bytes of a vector register (AVX2); vector lanes and accumulators are counted in these.
REGISTER_BYTES = 32
#: Vector registers of the machine; more live accumulators than this spill.
REGISTERS = 16
_LOOP_LEN = 16
_ALLOC_LEN = 10
# v5 keeps v4's row length (LEVELS 6 -> 4 pays for the body and copy columns)
# v6 appends the analytic estimates (``analytic``): the store's, then the program's
STORE_LEN = 1 + len(OP_KINDS) + _LOOP_LEN + _KERNEL_LEN + _BODY_LEN + 2 * len(CACHES) + \
    ACCESSES * _ACCESS_LEN + _ALLOC_LEN + STORE_EST_LEN + PROGRAM_EST_LEN
FEATURE_LEN = MAX_STORES * STORE_LEN
#: the column of a packed vector holding the program's estimated cycles per operation (log2,
#: ``analytic.program_estimate``'s first column, in the first row): the cost model's prior
ESTIMATE_COLUMN = STORE_LEN - PROGRAM_EST_LEN


def _log(x: float) -> float:
    return math.log2(1.0 + max(0.0, float(x)))


class _Loop:
    __slots__ = ("var", "extent", "kind", "unroll_pragma")

    def __init__(self, var: Any, extent: int, kind: ForKind, unroll_pragma: int = 0):
        self.var = var
        self.extent = max(1, extent)
        self.kind = kind
        self.unroll_pragma = unroll_pragma


def _unroll_pragma(annotations: Mapping[str, Any]) -> int:
    """The largest integer value of a loop annotation about unrolling (0: none)."""
    best = 0
    for k, v in annotations.items():
        if "unroll" in str(k) and isinstance(v, (int, float)) and not isinstance(v, bool):
            best = max(best, int(v))
    return best


class _Extractor:
    def __init__(self, sizes: Mapping[str, int], bindings: Mapping[Var, int]):
        self.env: dict[Any, int] = {**{k: v for k, v in sizes.items()}, **bindings}
        self.loops: list[_Loop] = []
        self.lets: list[tuple[Var, Any]] = []
        self.stmts: list[tuple[float, bool, list[float]]] = []   # work, is update, row
        self.estimates: list[list[float]] = []   # per store: analytic columns
        self.costs: list[tuple[float, float, bool]] = []   # per store: cycles, ops, update
        self.allocs: list[tuple[int, StorageScope, int]] = []   # bytes, scope, times made
        self.copied = 0.0      # bytes the copies into local buffers (packs, caches) write
        self.updated = 0.0     # iterations of reduction updates
        self.code = 0.0        # straight-line statements after unrolling (code size)

    # ---- walk -----------------------------------------------------------------------------
    def visit(self, s: Any) -> None:
        if isinstance(s, SeqStmt):
            for x in s.stmts:
                self.visit(x)
        elif isinstance(s, For):
            ext = eval_int(self._sub(s.extent), self._base_env(), 1)
            self.loops.append(_Loop(s.var, ext, s.kind, _unroll_pragma(s.annotations)))
            self.visit(s.body)
            self.loops.pop()
        elif isinstance(s, IfThenElse):
            self.visit(s.then_case)
            if s.else_case is not None:
                self.visit(s.else_case)
        elif isinstance(s, LetStmt):
            self.lets.append((s.var, s.value))
            self.visit(s.body)
            self.lets.pop()
        elif isinstance(s, Allocate):
            b = s.buffer
            n = 1
            for d in b.shape:
                n *= max(1, eval_int(self._sub(d), self._base_env(), 1))
            times = math.prod(lp.extent for lp in self.loops)
            self.allocs.append((n * b.dtype.bits // 8, b.scope, times))
            self.visit(s.body)
        elif isinstance(s, BufferStore):
            self.statement(s)
        elif isinstance(s, IntrinCall):
            pass

    def _base_env(self) -> dict:
        env = dict(self.env)
        for lp in self.loops:
            env[lp.var] = 0
        return env

    def _sub(self, e: Any) -> Any:
        for var, value in reversed(self.lets):
            e = substitute(e, {var: value})
        return e

    # ---- one statement --------------------------------------------------------------------
    def statement(self, st: BufferStore) -> None:
        loops = list(self.loops)
        iters = math.prod(lp.extent for lp in loops)
        ops = count_ops(st.value)
        vec = math.prod(lp.extent for lp in loops if lp.kind is ForKind.VECTORIZED)
        unrolled = [lp for lp in loops if lp.kind is ForKind.UNROLLED]
        par_loops = [lp for lp in loops if lp.kind in (ForKind.PARALLEL, ForKind.THREAD_BINDING)]
        par = math.prod(lp.extent for lp in par_loops)
        loads: list[BufferLoad] = []
        post_order_visit(st.value, lambda n: loads.append(n) if isinstance(n, BufferLoad) else None)
        is_update = any(ld.buffer is st.buffer for ld in loads)
        is_init = not loads and isinstance(st.value, Const)
        accesses = [self.access(st.buffer, st.indices, True, loops)]
        accesses += sorted((self.access(ld.buffer, ld.indices, False, loops) for ld in loads),
                           key=lambda a: -a[0])
        inner = loops[-1] if loops else None
        outer = loops[0] if loops else None
        f: list[float] = [1.0]
        f += [_log(ops.get(k, 0) * iters) for k in OP_KINDS]
        f += [_log(iters), float(len(loops)), 0.0,   # work share: filled in by vector()
              _log(vec), float(inner is not None and inner.kind is ForKind.VECTORIZED),
              float(vec >= 8 and vec & (vec - 1) == 0),
              _log(math.prod(lp.extent for lp in unrolled)), float(len(unrolled)),
              _log(par), float(outer is not None and outer.kind is ForKind.PARALLEL),
              _log(max((lp.unroll_pragma for lp in loops), default=0)),
              _log(inner.extent if inner else 1), _log(outer.extent if outer else 1),
              float(is_update), float(is_init),
              float(st.buffer.scope is not StorageScope.GLOBAL)]
        nbytes = max(1, st.buffer.dtype.bits // 8)
        f += self.kernel(accesses, loops, nbytes)
        body, body_vectors = self.body(accesses, loops, is_update, nbytes)
        f += body
        f += self.cache_fit(accesses, loops)
        for a in accesses[:ACCESSES]:
            f += a[1]
        f += [0.0] * (ACCESSES - min(ACCESSES, len(accesses))) * _ACCESS_LEN
        work = iters * (1 + sum(ops.values()))
        if isinstance(st.value, BufferLoad) and st.buffer.scope is not StorageScope.GLOBAL:
            self.copied += iters * max(1, st.buffer.dtype.bits // 8)
        if is_update:
            self.updated += iters
        copies = 1
        for lp in loops:
            if lp.kind is ForKind.UNROLLED:
                copies *= lp.extent
            elif lp.kind is ForKind.VECTORIZED:
                copies *= math.ceil(lp.extent * max(1, st.buffer.dtype.bits // 8) / REGISTER_BYTES)
        self.code += copies
        self.stmts.append((work, is_update, f))
        est, cycles, est_work = store_estimate(
            [lp.extent for lp in loops], [lp.kind is ForKind.VECTORIZED for lp in loops],
            [lp.extent > 1 and lp.kind not in (ForKind.UNROLLED, ForKind.VECTORIZED)
             for lp in loops],
            [(a[2], a[4]) for a in accesses], float(sum(ops.values())), nbytes, body_vectors,
            REGISTER_BYTES)
        self.estimates.append(est)
        self.costs.append((cycles, est_work, is_update))

    def access(self, buf: Any, indices: Sequence[Any], is_store: bool, loops: list[_Loop]
               ) -> tuple[float, list[float], list[int], list[int], int]:
        """(total bytes, features, per-loop stride, per-loop extent, element bytes) of one
        access."""
        env0 = self._base_env()
        strides = [max(1, eval_int(self._sub(x), env0, 1)) for x in buf.effective_strides()]
        idx = [self._sub(i) for i in indices]

        def flat(env: dict) -> int:
            return sum(eval_int(i, env, 0) * s for i, s in zip(idx, strides))
        base = flat(env0)
        loop_strides = []
        for lp in loops:
            if lp.extent <= 1:
                loop_strides.append(0)
                continue
            env0[lp.var] = 1
            loop_strides.append(flat(env0) - base)
            env0[lp.var] = 0
        nbytes = max(1, buf.dtype.bits // 8)
        feats = [float(is_store), float(buf.scope is not StorageScope.GLOBAL), _log(nbytes)]
        inner_i = next((k for k in range(len(loops) - 1, -1, -1) if loops[k].extent > 1), None)
        vec_i = next((k for k, lp in enumerate(loops) if lp.kind is ForKind.VECTORIZED), None)
        s_in = abs(loop_strides[inner_i]) if inner_i is not None else 0
        s_vec = abs(loop_strides[vec_i]) if vec_i is not None else -1
        feats += [_log(s_in), float(s_vec == 1), float(s_vec == 0), _log(max(0, s_vec))]
        for level in range(1, LEVELS + 1):
            sub = list(zip(loops[-level:], loop_strides[-level:])) if len(loops) >= level else \
                list(zip(loops, loop_strides))
            b, reuse = _footprint(sub, nbytes)
            feats += [_log(b), _log(reuse)]
        b_all, _ = _footprint(list(zip(loops, loop_strides)), nbytes)
        return b_all, feats, loop_strides, [lp.extent for lp in loops], nbytes

    def kernel(self, accesses: list, loops: list[_Loop], nbytes: int) -> list[float]:
        """The register-level kernel: the loops inside the innermost reduction loop.

        A reduction loop is one the store's address does not move with.  What it
        encloses is the tile of accumulators; its size, whether it is fully
        unrolled/vectorized (so it can live in registers), and the arithmetic
        intensity (tile elements per element loaded per reduction step) matter most.
        """
        store_strides = accesses[0][2]
        red = [k for k, lp in enumerate(loops) if lp.extent > 1 and store_strides[k] == 0]
        if not red:
            return [0.0] * _KERNEL_LEN
        kr = red[-1]
        inner = loops[kr + 1:]
        tile = math.prod(lp.extent for lp in inner)
        lanes = math.prod(lp.extent for lp in inner if lp.kind is ForKind.VECTORIZED)
        per_reg = max(1, REGISTER_BYTES // nbytes)
        regs = tile / max(1, lanes) * max(1, math.ceil(lanes / per_reg))
        in_regs = all(lp.kind in (ForKind.UNROLLED, ForKind.VECTORIZED) or lp.extent == 1
                      for lp in inner)
        loaded = 0.0
        for a in accesses[1:]:
            st, ex = a[2][kr + 1:], a[3][kr + 1:]
            loaded += math.prod(e for e, s in zip(ex, st) if s != 0)
        intensity = tile / max(1.0, loaded)
        outer_red = red[-2] if len(red) > 1 else None
        kr_ext = loops[kr].extent
        return [_log(tile), _log(regs), float(in_regs), float(in_regs and regs <= REGISTERS - 2),
                _log(intensity), _log(kr_ext), float(loops[kr].kind is ForKind.UNROLLED),
                float(len(loops) - 1 - kr), _log(loops[outer_red].extent if outer_red is not None
                                                 else 1), float(lanes % per_reg == 0 and lanes > 0)]

    def body(self, accesses: list, loops: list[_Loop], is_update: bool, nbytes: int
             ) -> tuple[list[float], float]:
        """The straight-line body: what the innermost loop that stays a loop executes.

        Unrolled and vectorized loops (by a schedule or by ``auto_unroll_max_step``)
        become straight-line code; the innermost remaining loop runs that body.  Its
        size (code size), the vector registers its distinct store addresses need
        (accumulators: do they fit in the ``REGISTERS`` registers, or spill), whether
        they stay in registers across the loop (it is a reduction loop, the store
        does not move with it), the loads per body and the loop's trip count decide
        how close the kernel gets to peak.  Also returns the vector loads and stores of
        one body execution (``analytic.store_estimate``'s register traffic).
        """
        real = [k for k, lp in enumerate(loops) if lp.extent > 1 and
                lp.kind not in (ForKind.UNROLLED, ForKind.VECTORIZED)]
        kr = real[-1] if real else -1
        inner = loops[kr + 1:]
        body = math.prod(lp.extent for lp in inner)
        lanes = math.prod(lp.extent for lp in inner if lp.kind is ForKind.VECTORIZED)
        per_reg = max(1, REGISTER_BYTES // nbytes)

        def vectors(a: tuple) -> float:
            """Vector registers of the distinct addresses one access touches in the body."""
            n = 1
            for lp, s in zip(inner, a[2][kr + 1:]):
                if s != 0:
                    n *= lp.extent if lp.kind is not ForKind.VECTORIZED else \
                        math.ceil(lp.extent / per_reg)
            return float(n)
        acc = vectors(accesses[0])
        loads = sum(vectors(a) for a in accesses[1:])
        in_regs = float(is_update and kr >= 0 and accesses[0][2][kr] == 0)
        trip = loops[kr].extent if kr >= 0 else 1
        steps = body / max(1, lanes) * math.ceil(lanes / per_reg) if lanes else body
        traffic = loads + 2.0 * acc / (trip if in_regs else 1)
        return [_log(steps), _log(acc), float(is_update and acc > REGISTERS - 2),
                float(is_update and 4 <= acc <= REGISTERS - 2), in_regs,
                _log(loads), _log(steps / max(1.0, loads + (0.0 if in_regs else acc))),
                _log(trip), float(lanes > 0 and lanes % per_reg == 0),
                # register traffic per body step, the accumulators' load and store
                # amortised over the loop when they stay in registers
                traffic / max(1.0, steps), float(len(real))], traffic

    def cache_fit(self, accesses: list, loops: list[_Loop]) -> list[float]:
        out: list[float] = []
        for cap in CACHES:
            best_iters, best_bytes = 1, 0.0
            for level in range(1, len(loops) + 1):
                tot = 0.0
                for a in accesses:
                    st, ex = a[2][-level:], a[3][-level:]
                    tot += _footprint([(_Loop(None, e, ForKind.SERIAL), s)
                                       for e, s in zip(ex, st)], 4)[0]
                if tot > cap:
                    break
                best_iters = math.prod(lp.extent for lp in loops[-level:])
                best_bytes = tot
            out += [_log(best_iters), _log(best_bytes)]
        return out

    # ---- result ---------------------------------------------------------------------------
    def rows(self) -> np.ndarray:
        """One row per store: reduction updates first, then the rest, each heaviest first
        (ties: program order).  Updates first keeps the kernel in the first rows when a
        copy (a pack) outweighs it, so a column means the same store across programs."""
        order = sorted(range(len(self.stmts)),
                       key=lambda i: (not self.stmts[i][1], -self.stmts[i][0]))
        total = sum(w for w, _, _ in self.stmts) or 1.0
        local = sum(b for b, sc, _ in self.allocs if sc is not StorageScope.GLOBAL)
        glob = sum(b for b, sc, _ in self.allocs if sc is StorageScope.GLOBAL)
        made = sum(b * t for b, _, t in self.allocs)
        alloc = [float(len(self.allocs)), _log(local), _log(glob), _log(made),
                 _log(sum(t for _, _, t in self.allocs)), _log(self.copied),
                 _log(self.copied / max(1.0, self.updated)),
                 self.copied / max(1.0, self.updated), _log(self.code),
                 _log(self.code / max(1, len(self.stmts)))]
        program = program_estimate(self.costs)
        share_at = 1 + len(OP_KINDS) + 2
        out = np.zeros((len(order), STORE_LEN), dtype=np.float32)
        for r, i in enumerate(order):
            w, _, f = self.stmts[i]
            f = list(f)
            f[share_at] = w / total
            out[r] = f + alloc + self.estimates[i] + program
        return out


def _footprint(loops_strides: list, nbytes: int) -> tuple[float, float]:
    """(bytes in cache lines, reuse) of an access inside the given loops."""
    iters = 1
    affecting = []
    for lp, s in loops_strides:
        iters *= lp.extent
        if s != 0 and lp.extent > 1:
            affecting.append((lp.extent, abs(s)))
    if not affecting:
        return 64.0, float(iters)
    affecting.sort(key=lambda t: t[1])
    ext0, s0 = affecting[0]
    elems = math.prod(e for e, _ in affecting)
    lines = math.ceil(ext0 * min(s0 * nbytes, 64) / 64) * math.prod(e for e, _ in affecting[1:])
    return float(lines * 64), iters / max(1, elems)


def store_features(func: PrimFunc, sizes: "Mapping[str, int] | None" = None) -> np.ndarray:
    """The rows (``(n_stores, STORE_LEN)`` float32, reduction updates first, then by work) of a lowered function."""
    sizes = dict(sizes or {})
    bindings = {v: sizes[v.name] for v in func.size_vars if v.name in sizes}
    ex = _Extractor(sizes, bindings)
    ex.visit(func.body)
    return ex.rows()


def extract_features(func: PrimFunc, sizes: "Mapping[str, int] | None" = None) -> np.ndarray:
    """The feature vector (``FEATURE_LEN`` float32) of a lowered function: the rows of its
    first ``MAX_STORES`` stores, zero padded."""
    rows = store_features(func, sizes)[:MAX_STORES]
    v = np.zeros((MAX_STORES, STORE_LEN), dtype=np.float32)
    v[:len(rows)] = rows
    v = v.reshape(-1)
    assert v.shape == (FEATURE_LEN,), (v.shape, FEATURE_LEN)
    return v


def unpack(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The store rows of packed feature vectors ``X`` (n, FEATURE_LEN) and, per row, the
    index of its program in ``X`` (a program with no store keeps one zero row)."""
    X = np.asarray(X, dtype=np.float32)
    if X.ndim != 2 or X.shape[1] != FEATURE_LEN:
        from tdsl.errors import TuningError
        raise TuningError(f"features: expected vectors of length {FEATURE_LEN} (version "
                          f"{FEATURE_VERSION}), got shape {X.shape}")
    R = X.reshape(len(X), MAX_STORES, STORE_LEN)
    used = R[:, :, 0] > 0
    used[:, 0] = True
    prog, slot = np.nonzero(used)
    return R[prog, slot], prog
