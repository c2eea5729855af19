"""The feature extractor of FEATURE_VERSION 3 (tdsl before the pack-sum rows), kept for
``eval_cost_model.py``'s old-vs-new comparison.

Features of a candidate, read from its lowered loop IR (one fixed-length vector).

Per store statement (with the loops around it):

* work: iterations, arithmetic operations by kind (``irutil.OP_KINDS``) times
  iterations, loop depth, the product of vectorized / unrolled / parallel extents;
* per buffer access (the store, then the loads with the most bytes; up to
  ``ACCESSES``): element size, scope, the stride seen along the innermost and the
  vectorized loop, and for each of the ``LEVELS`` innermost loop levels the bytes
  touched (cache lines × 64) and the reuse (iterations / distinct elements);
* cache fit: iterations and bytes of the outermost loop level whose footprint
  fits in 32 KiB and in 1 MiB.

The ``STATEMENTS`` heaviest statements fill fixed slots (zero padded), followed
by global features (allocations by scope, statement count, total work).  Counts
enter as ``log2(1 + x)``.  ``FEATURE_VERSION`` changes whenever the layout does,
so stored features of another version are recomputed.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from tdsl.expr import BufferLoad, Var
from tdsl.stmt import (Allocate, BufferStore, For, ForKind, IfThenElse, IntrinCall, LetStmt,
                       PrimFunc, SeqStmt, StorageScope)
from tdsl.visitor import post_order_visit, substitute

from tdsl.autotune.irutil import OP_KINDS, count_ops, eval_int

FEATURE_VERSION = 3
ACCESSES = 4
LEVELS = 6
STATEMENTS = 3
CACHES = (32 * 1024, 1024 * 1024)
_ACCESS_LEN = 7 + 2 * LEVELS
_KERNEL_LEN = 10
_STMT_LEN = len(OP_KINDS) + 9 + _KERNEL_LEN + 2 * len(CACHES) + ACCESSES * _ACCESS_LEN
_GLOBAL_LEN = 8
FEATURE_LEN = STATEMENTS * _STMT_LEN + _GLOBAL_LEN


def _log(x: float) -> float:
    return math.log2(1.0 + max(0.0, float(x)))


class _Loop:
    __slots__ = ("var", "extent", "kind")

    def __init__(self, var: Var, extent: int, kind: ForKind):
        self.var = var
        self.extent = max(1, extent)
        self.kind = kind


class _Extractor:
    def __init__(self, sizes: Mapping[str, int], bindings: Mapping[Var, int]):
        self.env: dict[Any, int] = {**{k: v for k, v in sizes.items()}, **bindings}
        self.loops: list[_Loop] = []
        self.lets: list[tuple[Var, Any]] = []
        self.stmts: list[tuple[float, list[float]]] = []
        self.allocs: list[tuple[int, StorageScope]] = []

    # ---- walk -----------------------------------------------------------------------------
    def visit(self, s: Any) -> None:
        if isinstance(s, SeqStmt):
            for x in s.stmts:
                self.visit(x)
        elif isinstance(s, For):
            ext = eval_int(self._sub(s.extent), self._base_env(), 1)
            self.loops.append(_Loop(s.var, ext, s.kind))
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
            self.allocs.append((n * b.dtype.bits // 8, b.scope))
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
        unr = math.prod(lp.extent for lp in loops if lp.kind is ForKind.UNROLLED)
        par = math.prod(lp.extent for lp in loops if lp.kind in (ForKind.PARALLEL,
                                                                  ForKind.THREAD_BINDING))
        loads: list[BufferLoad] = []
        post_order_visit(st.value, lambda n: loads.append(n) if isinstance(n, BufferLoad) else None)
        is_update = any(ld.buffer is st.buffer for ld in loads)
        accesses = [self.access(st.buffer, st.indices, True, loops)]
        accesses += sorted((self.access(ld.buffer, ld.indices, False, loops) for ld in loads),
                           key=lambda a: -a[0])
        inner = loops[-1] if loops else None
        f: list[float] = [_log(ops.get(k, 0) * iters) for k in OP_KINDS]
        f += [_log(iters), float(len(loops)), _log(vec), _log(unr), _log(par),
              _log(inner.extent if inner else 1), float(is_update),
              float(inner is not None and inner.kind is ForKind.VECTORIZED),
              float(vec >= 8 and vec & (vec - 1) == 0)]
        f += self.kernel(accesses, loops)
        f += self.cache_fit(accesses, loops)
        for a in accesses[:ACCESSES]:
            f += a[1]
        f += [0.0] * (ACCESSES - min(ACCESSES, len(accesses))) * _ACCESS_LEN
        work = iters * (1 + sum(ops.values()))
        self.stmts.append((work, f))

    def access(self, buf: Any, indices: Sequence[Any], is_store: bool, loops: list[_Loop]
               ) -> tuple[float, list[float], list[int], list[int]]:
        """(total bytes, features, per-loop stride, per-loop extent) of one access."""
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
        total = 0.0
        for level in range(1, LEVELS + 1):
            sub = list(zip(loops[-level:], loop_strides[-level:])) if len(loops) >= level else \
                list(zip(loops, loop_strides))
            b, reuse = _footprint(sub, nbytes)
            feats += [_log(b), _log(reuse)]
        b_all, _ = _footprint(list(zip(loops, loop_strides)), nbytes)
        total = b_all
        return total, feats, loop_strides, [lp.extent for lp in loops]

    def kernel(self, accesses: list, loops: list[_Loop]) -> list[float]:
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
        regs = tile / max(1, lanes) * max(1, math.ceil(lanes / 16))
        in_regs = all(lp.kind in (ForKind.UNROLLED, ForKind.VECTORIZED) or lp.extent == 1
                      for lp in inner)
        loaded = 0.0
        for a in accesses[1:]:
            st, ex = a[2][kr + 1:], a[3][kr + 1:]
            loaded += math.prod(e for e, s in zip(ex, st) if s != 0)
        intensity = tile / max(1.0, loaded)
        outer_red = red[-2] if len(red) > 1 else None
        kr_ext = loops[kr].extent
        return [_log(tile), _log(regs), float(in_regs), float(in_regs and regs <= 28),
                _log(intensity), _log(kr_ext), float(loops[kr].kind is ForKind.UNROLLED),
                float(len(loops) - 1 - kr), _log(loops[outer_red].extent if outer_red is not None
                                                 else 1), float(lanes % 16 == 0 and lanes > 0)]

    def cache_fit(self, accesses: list, loops: list[_Loop]) -> list[float]:
        out: list[float] = []
        for cap in CACHES:
            best_iters, best_bytes = 1, 0.0
            for level in range(1, len(loops) + 1):
                tot = 0.0
                for a in accesses:
                    st, ex = a[2][-level:], a[3][-level:]
                    nb = 4
                    tot += _footprint([(_Loop(None, e, ForKind.SERIAL), s) for e, s in zip(ex, st)],
                                      nb)[0]
                if tot > cap:
                    break
                best_iters = math.prod(lp.extent for lp in loops[-level:])
                best_bytes = tot
            out += [_log(best_iters), _log(best_bytes)]
        return out

    # ---- result ---------------------------------------------------------------------------
    def vector(self) -> np.ndarray:
        stmts = sorted(self.stmts, key=lambda s: -s[0])
        v: list[float] = []
        # counts are relative to the heaviest statement's work: within a task the scale is
        # the same for every candidate, and without it a model transfers across sizes
        ref = _log(stmts[0][0]) if stmts else 0.0
        scaled = len(OP_KINDS) + 1
        for _, f in stmts[:STATEMENTS]:
            v += [x - ref if x else 0.0 for x in f[:scaled]] + f[scaled:]
        v += [0.0] * (STATEMENTS - min(STATEMENTS, len(stmts))) * _STMT_LEN
        loc = sum(b for b, sc in self.allocs if sc is not StorageScope.GLOBAL)
        glob = sum(b for b, sc in self.allocs if sc is StorageScope.GLOBAL)
        total_work = sum(w for w, _ in stmts)
        main = stmts[0][0] if stmts else 0.0
        v += [float(len(self.allocs)), _log(loc), _log(glob),
              _log(max((b for b, _ in self.allocs), default=0)), float(len(stmts)),
              _log(total_work) - ref, main / total_work if total_work else 0.0,
              _log(sum(1 for _ in stmts))]
        return np.asarray(v, dtype=np.float32)


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


def extract_features(func: PrimFunc, sizes: "Mapping[str, int] | None" = None) -> np.ndarray:
    """The feature vector (``FEATURE_LEN`` float32) of a lowered function."""
    sizes = dict(sizes or {})
    bindings = {v: sizes[v.name] for v in func.size_vars if v.name in sizes}
    ex = _Extractor(sizes, bindings)
    ex.visit(func.body)
    v = ex.vector()
    assert v.shape == (FEATURE_LEN,), (v.shape, FEATURE_LEN)
    return v
