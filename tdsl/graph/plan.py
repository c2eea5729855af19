"""Memory planning: where each tensor of a run lives, for one binding of the symbolic sizes.

Every Value has a *root*: a graph input (the caller's array), a constant (its array), a
graph output (a fresh array each call: the caller keeps it), or an intermediate buffer of
the plan.  A ``reshape`` alias shares its input's root (row-major buffers reshape for
free).  Intermediate buffers are reused by liveness: a buffer is free after the last step
that reads any value rooted in it, and a later step's output takes the smallest free
buffer that is large enough (best fit), else a new one.  A step's outputs are placed
before its inputs are freed, so a kernel never writes over what it reads.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from tdsl.expr import Expr, Var
from tdsl.runtime.shape_eval import eval_shape_expr

from .passes.fusion import Alias, Group

#: Buffers are aligned to this many bytes (a cache line; vector loads never straddle it).
ALIGN = 64


def concrete(shape: Sequence[Any], env: Mapping[Var, int]) -> tuple[int, ...]:
    """``shape`` with its symbolic sizes evaluated."""
    return tuple(int(eval_shape_expr(d, env)) if isinstance(d, Expr) else int(d) for d in shape)


@dataclass(frozen=True)
class Root:
    """Where a value's memory comes from: ("input", i), ("output", i), ("const", id),
    or ("buffer", i)."""

    kind: str
    index: int


@dataclass
class MemoryPlan:
    """The shapes and roots of one binding; ``buffers`` are the intermediates' arenas."""

    env: dict
    shapes: dict = field(default_factory=dict)      # value id -> concrete shape
    roots: dict = field(default_factory=dict)       # value id -> Root
    buffers: list = field(default_factory=list)     # np.uint8 arrays, ALIGN-aligned
    buffer_bytes: list = field(default_factory=list)
    peak_bytes: int = 0

    def view(self, v: Any, dtype: str) -> np.ndarray:
        """Value ``v``'s array in its intermediate buffer."""
        r = self.roots[id(v)]
        assert r.kind == "buffer"
        shape = self.shapes[id(v)]
        n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        return self.buffers[r.index][:n].view(dtype).reshape(shape)


def _nbytes(shape: tuple, dtype: str) -> int:
    return max(1, int(np.prod(shape, dtype=np.int64))) * np.dtype(dtype).itemsize


def _aligned(nbytes: int) -> np.ndarray:
    raw = np.empty(nbytes + ALIGN, dtype=np.uint8)
    off = (-raw.ctypes.data) % ALIGN
    return raw[off:off + nbytes]


def _step_io(step: Any) -> tuple[list, list]:
    if isinstance(step, Group):
        return list(step.inputs), [step.output]
    return list(step.node.inputs), list(step.node.outputs)


def make_plan(steps: Sequence[Any], inputs: Sequence[Any], outputs: Sequence[Any],
              env: Mapping[Var, int]) -> MemoryPlan:
    """Shapes and memory of every value for the sizes ``env``."""
    plan = MemoryPlan(dict(env))
    roots = plan.roots
    for i, v in enumerate(inputs):
        roots[id(v)] = Root("input", i)
        plan.shapes[id(v)] = concrete(v.shape, env)
    out_index = {}
    for i, v in enumerate(outputs):
        out_index.setdefault(id(v), i)
    # last step reading each root (aliases extend their root's life)
    last: dict[Root, int] = {}
    alias_root: dict[int, int] = {}          # alias value id -> source value id

    def root_key(v: Any) -> int:
        while id(v) in alias_root:
            v = alias_root[id(v)]
        return v

    for si, step in enumerate(steps):
        ins, outs = _step_io(step)
        for v in ins:
            if v.is_const:
                roots.setdefault(id(v), Root("const", id(v)))
                plan.shapes.setdefault(id(v), tuple(v.const.shape))
        if isinstance(step, Alias):
            alias_root[id(outs[0])] = ins[0]
    for v in outputs:
        if v.is_const:
            roots.setdefault(id(v), Root("const", id(v)))
            plan.shapes.setdefault(id(v), tuple(v.const.shape))
    free: list[tuple[int, int]] = []         # (capacity, buffer index)
    # liveness: reads per value, resolved through aliases, computed on the fly
    readers_last: dict[int, int] = {}
    for si, step in enumerate(steps):
        ins, _ = _step_io(step)
        for v in ins:
            readers_last[id(root_key(v))] = si
    produced = {id(v) for st in steps if not isinstance(st, Alias) for v in _step_io(st)[1]}
    for j, v in enumerate(outputs):
        src = root_key(v)
        if src is not v and id(src) in produced:
            out_index.setdefault(id(src), j)   # written straight into the output array
        readers_last[id(src)] = len(steps)   # else copied out after the last step
    values_of_buffer: dict[int, list] = {}
    for si, step in enumerate(steps):
        ins, outs = _step_io(step)
        for v in outs:
            plan.shapes[id(v)] = concrete(v.shape, env)
        if isinstance(step, Alias):
            src, dst = ins[0], outs[0]
            roots[id(dst)] = roots[id(src)]
            continue
        for v in outs:
            if id(v) in out_index:
                roots[id(v)] = Root("output", out_index[id(v)])
                continue
            need = _nbytes(plan.shapes[id(v)], v.dtype)
            fits = [f for f in free if f[0] >= need]
            if fits:
                cap, bi = min(fits)
                free.remove((cap, bi))
            else:
                bi = len(plan.buffer_bytes)
                plan.buffer_bytes.append(need)
            roots[id(v)] = Root("buffer", bi)
            values_of_buffer.setdefault(bi, []).append(v)
        # free the buffers whose last reader is this step (or that nothing reads)
        for v in ins + outs:
            r = roots.get(id(root_key(v)))
            if r is None or r.kind != "buffer":
                continue
            if readers_last.get(id(root_key(v)), -1) <= si and (r.index, si) not in last:
                last[(r.index, si)] = si
                if all(f[1] != r.index for f in free):
                    free.append((plan.buffer_bytes[r.index], r.index))
    plan.buffers = [_aligned(n) for n in plan.buffer_bytes]
    plan.peak_bytes = sum(plan.buffer_bytes)
    return plan
