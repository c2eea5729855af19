"""Vector memory accesses (``float4``, ``float2`` ...) for VECTORIZED loops in kernels.

A ``For`` of kind VECTORIZED with constant extent W (2 or 4) whose body is one
``BufferStore``, possibly under ``if``s without ``else``, is rendered as vector
loads and one vector store when every access that depends on the lane is
provably a W-element vector:

* its flat index is ``base + lane`` (stride 1 in the loop variable; ``(q + lane)
  // c`` and ``(q + lane) % c`` with ``q`` a multiple of W and ``c`` a multiple of W
  are first rewritten to ``q // c`` and ``q % c + lane``, which is what a fused and
  split cooperative fetch produces);
* ``base`` is provably a multiple of W (the analyzer knows the enclosing loops'
  ranges and the buffer's strides), so the address is ``W * itemsize``-aligned given
  an aligned start of the array.  Shared arrays start 32-byte aligned; local arrays
  that are accessed this way are declared ``__align__``; global arrays the host
  allocates start 256-byte aligned (cuMemAlloc and the emulator).  The start of a
  user's array (a DLPack or ``__cuda_array_interface__`` view may begin anywhere) is
  tested once per launch in the kernel (a uniform branch), and the scalar loop runs
  where it is not aligned;
* a vector type exists for its dtype: float32 and int32 (2 or 4 lanes), float64 and
  int64 (2), float16 (``tdsl_half2``/``tdsl_half4``), bfloat16 (``tdsl_bf162``/``tdsl_bf164``).

A store whose index steps by a constant other than 1 per lane into a shared or local
array (a tile transposed on its way in: a run of a global row stored down a column) keeps
the vector loads and stores the lanes one by one (``VectorAccess.stride``).  Before the
indices are judged, the decomposition a fused loop leaves in a multi-dimensional index
(``t // 9 * 9 + t // 3 % 3 * 3 + t % 3``) is merged back (``merge_div_mod``).

Loads whose index does not depend on the lane are scalar loads; the arithmetic is
rendered lane by lane on the vectors' ``.x .y .z .w``.  Guards that do not depend
on the lane wrap the vector code.  A guard that does must be a conjunction of
comparisons linear in the lane (``base + lane < n``): the vector code then runs
where the comparison holds at its hardest lane, and the scalar loop elsewhere (a
tail).  A zero fill (``X[i] = if_then_else(c, v, 0)``: a fetch's out-of-domain elements,
padding) runs as the vector store of ``v`` where ``c`` holds at every lane, and the
scalar loop elsewhere.
Anything else (a lane-dependent load under a ``Select``, a gather, a
provably misaligned or unprovable base, a read of the stored buffer at another
address, a guard with a load ...) keeps the scalar rendering.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tdsl.dtype import DType
from tdsl.expr import (And, BufferLoad, Cast, Const, Expr, FloorDiv, FloorMod, GE, GT, LE, LT,
                       Select, Var)
from tdsl.stmt import Buffer, BufferStore, For, IfThenElse, StorageScope
from tdsl.visitor import children, free_vars, substitute, transform

#: (element dtype, lanes) -> the C vector type
VECTOR_TYPES = {
    (DType.FLOAT32, 2): "float2", (DType.FLOAT32, 4): "float4",
    (DType.INT32, 2): "int2", (DType.INT32, 4): "int4",
    (DType.FLOAT64, 2): "double2", (DType.INT64, 2): "longlong2",
    (DType.FLOAT16, 2): "tdsl_half2", (DType.FLOAT16, 4): "tdsl_half4",
    (DType.BFLOAT16, 2): "tdsl_bf162", (DType.BFLOAT16, 4): "tdsl_bf164",
}
LANES = "xyzw"
_INDEX = (DType.INT32, DType.INT64)


@dataclass
class VectorAccess:
    """One W-element access: ``buffer[base .. base + W)``."""

    buffer: Buffer
    base: Expr                                   # flat element offset of lane 0
    ctype: str                                   # float4 ...
    nodes: list = field(default_factory=list)    # the BufferLoad nodes it stands for
    name: str = ""                               # the C temporary (set when rendered)
    stride: int = 1                              # elements between lanes (a store only)


@dataclass
class VectorPlan:
    loop: For
    lane: Var
    width: int
    store: VectorAccess
    original_store: BufferStore
    value: Expr                                  # the stored value (lane-peeled)
    loads: list[VectorAccess]
    scalars: list[list[BufferLoad]]              # lane-invariant loads (each group: one value)
    invariant: list[Expr]                        # guard conjuncts free of the lane
    lane_guards: list[Expr]                      # guard conjuncts that depend on it
    worst: list[Expr]                            # ... at the lane hardest to satisfy
    runtime_align: list[tuple[Buffer, int]]      # user arrays: start checked at launch
    local_align: list[tuple[Buffer, int]]        # local arrays to declare __align__(n)

    def scalar_loop(self) -> For:
        """The loop that runs where the vector path does not (tails, misaligned
        arrays): the original store under the lane-dependent guards only."""
        from tdsl.visitor import replace_fields
        body: Any = self.original_store
        for cond in reversed(self.lane_guards):
            body = IfThenElse(cond, body)
        return replace_fields(self.loop, body=body)


class _Fail(Exception):
    pass


def plan_vector_loop(r: Any, loop: For) -> "VectorPlan | None":
    """The vector rendering of ``loop`` for kernel renderer ``r``, or None if some
    access is not provably a legal vector access (the scalar loop is rendered then)."""
    if not (isinstance(loop.min, Const) and int(loop.min.value) == 0 and
            isinstance(loop.extent, Const)):
        return None
    width = int(loop.extent.value)
    if width not in (2, 4) or loop.var.dtype not in _INDEX:
        return None
    conds: list[Expr] = []
    body: Any = loop.body
    while isinstance(body, IfThenElse) and body.else_case is None:
        conds.append(body.cond)
        body = body.then_case
    if not isinstance(body, BufferStore):
        return None
    ctype = VECTOR_TYPES.get((body.buffer.dtype, width))
    if ctype is None or body.value.dtype != body.buffer.dtype:
        return None
    r.bind_loop_range(loop.var, loop.min, loop.extent)
    try:
        return _Planner(r, loop, width).run(conds, body, ctype)
    except _Fail:
        return None


def _zero_fill(v: Expr) -> "Select | None":
    """``if_then_else(c, x, 0)`` (a fetch's zero fill outside the domain, or padding)."""
    if isinstance(v, Select) and isinstance(v.false_value, Const) and v.false_value.value == 0:
        return v
    return None


def _has_load(e: Any) -> bool:
    if isinstance(e, BufferLoad):
        return True
    return any(_has_load(c) for c in children(e))


def _is_true(e: Expr) -> bool:
    return isinstance(e, Const) and bool(e.value)


def _conjuncts(e: Expr) -> list[Expr]:
    if isinstance(e, And):
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]


class _Planner:
    def __init__(self, r: Any, loop: For, width: int):
        self.r = r
        self.ana = r.ana
        self.loop = loop
        self.lane = loop.var
        self.w = width
        self.runtime_align: list[tuple[Buffer, int]] = []
        self.local_align: list[tuple[Buffer, int]] = []

    # ---- index analysis -----------------------------------------------------------------
    def at(self, e: Expr, lane: int) -> Expr:
        return substitute(e, {self.lane: Const(lane, self.lane.dtype)})

    def is_zero(self, e: Expr) -> bool:
        e = self.ana.simplify(e)
        return isinstance(e, Const) and int(e.value) == 0

    def lane_as(self, dtype: DType) -> Expr:
        return self.lane if self.lane.dtype == dtype else Cast(self.lane, dtype)

    def multiple_of_width(self, e: Expr) -> bool:
        from .codegen import divisible
        if divisible(e, self.w, self.ana):
            return True
        try:
            return self.ana.can_prove(e % Const(self.w, e.dtype) == Const(0, e.dtype))
        except Exception:  # noqa: BLE001 - an expression the analyzer cannot take: unproven
            return False

    def unit_base(self, e: Expr) -> "Expr | None":
        """``b`` if ``e == b + lane`` with ``b`` free of the lane, else None."""
        if e.dtype not in _INDEX:
            return None
        base = self.ana.simplify(self.at(e, 0))
        return base if self.is_zero(e - base - self.lane_as(e.dtype)) else None

    def peel(self, e: Expr) -> Expr:
        """``(q + lane) // c`` -> ``q // c`` and ``(q + lane) % c`` -> ``q % c + lane``
        where W divides both q and c (exact for lane in [0, W))."""
        lane = self.lane

        def post(n: Any) -> Any:
            if not isinstance(n, (FloorDiv, FloorMod)) or not isinstance(n.b, Const) or \
                    n.dtype not in _INDEX:
                return None
            c = int(n.b.value)
            if c <= 0 or c % self.w or lane not in free_vars(n.a):
                return None
            q = self.unit_base(n.a)
            if q is None or not self.multiple_of_width(q):
                return None
            if isinstance(n, FloorDiv):
                return FloorDiv(q, n.b)
            return FloorMod(q, n.b) + self.lane_as(n.dtype)
        return transform(e, post=post)

    def strided_base(self, e: Expr) -> "tuple[Expr, int] | None":
        """``(b, k)`` if ``e == b + k * lane`` with ``b`` free of the lane, else None."""
        if e.dtype not in _INDEX:
            return None
        base = self.ana.simplify(self.at(e, 0))
        step = self.ana.simplify(self.at(e, 1) - base)
        if not isinstance(step, Const):
            return None
        k = Const(int(step.value), e.dtype)
        if not self.is_zero(e - base - k * self.lane_as(e.dtype)):
            return None
        return base, int(step.value)

    def offset(self, buf: Buffer, indices: tuple) -> Expr:
        off = self.r.flat_offset(buf, tuple(self.peel(ix) for ix in indices))
        return merge_div_mod(off, self.ana) if self.lane in free_vars(off) else off

    def strided_store(self, store: BufferStore) -> "VectorAccess | None":
        """The store as lane-by-lane stores ``stride`` elements apart (a shared or local
        tile transposed on its way in), or None."""
        if store.buffer.scope not in (StorageScope.SHARED, StorageScope.LOCAL):
            return None
        found = self.strided_base(self.offset(store.buffer, store.indices))
        if found is None or found[1] in (0, 1):
            return None
        return VectorAccess(store.buffer, found[0], "", stride=found[1])

    def access(self, buf: Buffer, indices: tuple, dtype: DType) -> "tuple[str, Expr]":
        """("invariant", offset) or ("vector", base) for an access; _Fail otherwise."""
        off = self.offset(buf, indices)
        if self.lane not in free_vars(off):
            return "invariant", off
        base = self.unit_base(off)
        if base is None or (dtype, self.w) not in VECTOR_TYPES:
            raise _Fail()
        if not self.multiple_of_width(base):
            raise _Fail()
        nbytes = self.w * dtype.itemsize
        if buf.scope is StorageScope.LOCAL:
            self.local_align.append((buf, nbytes))
        elif buf.scope is StorageScope.GLOBAL:
            for p in self.r.kernel.params:
                if p.buffer is buf and p.user_array:
                    self.runtime_align.append((buf, nbytes))
        elif buf.scope is not StorageScope.SHARED:
            raise _Fail()
        return "vector", base

    # ---- the loop ---------------------------------------------------------------------------
    def run(self, conds: list[Expr], store: BufferStore, ctype: str) -> VectorPlan:
        target = self.strided_store(store)
        if target is None:
            kind, store_base = self.access(store.buffer, store.indices, store.buffer.dtype)
            if kind != "vector":
                raise _Fail()   # every lane stores to one location
            target = VectorAccess(store.buffer, store_base, ctype)
        store_base = target.base
        invariant, lane_guards, worst = self.guards(conds)
        value = store.value
        fill = _zero_fill(value)
        if fill is not None:   # the vector path only where no lane is zero filled
            f_inv, _, f_worst = self.guards([fill.cond])
            worst = worst + f_inv + f_worst
            value = fill.true_value
        value = self.peel(value)
        loads: list[VectorAccess] = []
        scalars: list[list[BufferLoad]] = []

        def visit(e: Any, lazy: bool) -> None:
            if isinstance(e, BufferLoad):
                kind, off = self.access(e.buffer, e.indices, e.dtype)
                if e.buffer is store.buffer and not (target.stride == 1 and
                        kind == "vector" and self.ana.can_prove_equal(off, store_base)):
                    raise _Fail()   # the lanes would see each other's stores
                if kind == "invariant":
                    if not lazy:  # read once for all lanes
                        for group in scalars:
                            if group[0].buffer is e.buffer and group[0].dtype == e.dtype and \
                                    self.ana.can_prove_equal(
                                        self.r.flat_offset(e.buffer, group[0].indices), off):
                                group.append(e)
                                return
                        scalars.append([e])
                    return
                if lazy:
                    raise _Fail()   # a Select may guard this load for some lanes
                for acc in loads:
                    if acc.buffer is e.buffer and acc.ctype == VECTOR_TYPES[(e.dtype, self.w)] \
                            and self.ana.can_prove_equal(acc.base, off):
                        acc.nodes.append(e)
                        return
                loads.append(VectorAccess(e.buffer, off, VECTOR_TYPES[(e.dtype, self.w)], [e]))
                return
            if isinstance(e, Select):
                visit(e.cond, lazy)
                visit(e.true_value, True)
                visit(e.false_value, True)
                return
            for c in children(e):
                visit(c, lazy)
        visit(value, False)
        return VectorPlan(self.loop, self.lane, self.w, target, store, value, loads, scalars,
                          invariant,
                          lane_guards, worst, _unique(self.runtime_align),
                          _unique(self.local_align))

    def guards(self, conds: list[Expr]) -> tuple[list[Expr], list[Expr], list[Expr]]:
        invariant: list[Expr] = []
        lane_guards: list[Expr] = []
        worst: list[Expr] = []
        for cond in conds:
            if _has_load(cond):
                raise _Fail()   # keep the scalar order of evaluation
            for c in _conjuncts(self.peel(cond)):
                if self.lane not in free_vars(c):
                    invariant.append(self.ana.simplify(c))
                    continue
                if not isinstance(c, (LT, LE, GT, GE)) or c.a.dtype not in _INDEX:
                    raise _Fail()
                d = c.a - c.b
                d0 = self.ana.simplify(self.at(d, 0))
                slope = self.ana.simplify(self.at(d, 1) - d0)
                if not isinstance(slope, Const) or \
                        not self.is_zero(d - d0 - Const(int(slope.value), d.dtype) *
                                         self.lane_as(d.dtype)):
                    raise _Fail()   # not linear in the lane
                k = int(slope.value)
                if k == 0:
                    invariant.append(self.ana.simplify(self.at(c, 0)))
                    continue
                # a - b < 0 (or <= 0) hardest where a - b is largest; > and >= at its least
                upper = isinstance(c, (LT, LE))
                lane = self.w - 1 if (k > 0) == upper else 0
                lane_guards.append(c)
                worst.append(self.ana.simplify(self.at(c, lane)))
        invariant = [c for c in invariant if not _is_true(c)]
        worst = [c for c in worst if not _is_true(c)]
        if any(isinstance(c, Const) for c in invariant + worst):
            raise _Fail()   # provably false: the vector code would never run
        return invariant, lane_guards, worst


def _unique(pairs: list[tuple[Buffer, int]]) -> list[tuple[Buffer, int]]:
    out: dict[int, tuple[Buffer, int]] = {}
    for buf, n in pairs:
        have = out.get(id(buf))
        out[id(buf)] = (buf, max(n, have[1] if have else 0))
    return list(out.values())


def merge_div_mod(e: Expr, ana: Any) -> Expr:
    """``e`` (a sum of index terms) with the decomposition of a fused index merged back:
    ``k*c * (x // c) + k * (x % c)`` -> ``k * x`` and ``k*c * (x // c % m) + k * (x % c)``
    -> ``k * (x % (c*m))``.  A tile fetched along its fused axes reaches each of the
    buffer's dimensions through such a term (``t // 9 * 9 + t // 3 % 3 * 3 + t % 3`` for a
    (c, 3, 3) tile): merged, the index is linear in the fused one again."""
    terms = _terms(e)
    while True:
        found = _merge_pair(terms, ana)
        if found is None:
            break
        terms = found
    if not terms:
        return Const(0, e.dtype)
    out: "Expr | None" = None
    for k, atom in terms:
        t = Const(k, e.dtype) if atom is None else (atom if k == 1 else atom * Const(k, e.dtype))
        out = t if out is None else out + t
    assert out is not None
    return ana.simplify(out)


def _terms(e: Expr, k: int = 1) -> list[tuple[int, "Expr | None"]]:
    """``e`` as (coefficient, atom) terms (atom None: a constant)."""
    from tdsl.expr import Add, Mul, Sub
    if isinstance(e, Add):
        return _terms(e.a, k) + _terms(e.b, k)
    if isinstance(e, Sub):
        return _terms(e.a, k) + _terms(e.b, -k)
    if isinstance(e, Mul) and isinstance(e.b, Const):
        return _terms(e.a, k * int(e.b.value))
    if isinstance(e, Mul) and isinstance(e.a, Const):
        return _terms(e.b, k * int(e.a.value))
    if isinstance(e, Const):
        return [(k * int(e.value), None)]
    return [(k, e)]


def _merge_pair(terms: list, ana: Any) -> "list | None":
    """``terms`` with one pair merged (``merge_div_mod``), or None if none merges."""
    for j, (k2, b) in enumerate(terms):
        if not (isinstance(b, FloorMod) and isinstance(b.b, Const)) or int(b.b.value) <= 0:
            continue
        c = int(b.b.value)
        for i, (k1, a) in enumerate(terms):
            if i == j or k1 != k2 * c:
                continue
            rest = [t for n, t in enumerate(terms) if n not in (i, j)]
            if isinstance(a, FloorDiv) and isinstance(a.b, Const) and int(a.b.value) == c and \
                    ana.can_prove_equal(a.a, b.a):
                return rest + _terms(b.a, k2)
            if isinstance(a, FloorMod) and isinstance(a.b, Const) and int(a.b.value) > 0 and \
                    isinstance(a.a, FloorDiv) and isinstance(a.a.b, Const) and \
                    int(a.a.b.value) == c and ana.can_prove_equal(a.a.a, b.a):
                m = int(a.b.value) * c
                return rest + [(k2, FloorMod(b.a, Const(m, b.dtype)))]
    return None

