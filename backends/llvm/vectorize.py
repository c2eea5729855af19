"""Widening VECTORIZED loops into LLVM vector code.

A ``For(kind=VECTORIZED)`` of constant extent L is not emitted as a loop: its body
is generated once with the loop variable as the ramp ``<min, min+1, ..., min+L-1>``
(see ``lanes.VVal``).  Loads and stores whose flattened index is a ramp of stride 1
become contiguous vector loads/stores (aligned to the element size: NumPy only
guarantees that); other lane-dependent indices become gathers/scatters; an
``IfThenElse`` or ``Select`` whose condition depends on the lane narrows a lane
mask, under which loads and stores are masked (``llvm.masked.*``), so a tail guard
never touches memory out of bounds.

Widening executes the body statement by statement for all lanes at once, which is
only correct when the iterations do not communicate through memory.
``widen_blocker`` checks a sufficient condition (every buffer the body stores is
accessed only at one index expression, affine in the loop variable with a nonzero
constant coefficient, so each lane owns its elements) and the structural limits
(no parallel loop, allocation or lane-dependent inner loop bound inside).  A body
with inner serial loops (outer-loop vectorization, e.g. a reduction per lane) is
widened too: the inner loop runs once with vector values, provided its bounds are
lane-invariant and each stored index either ignores the inner loops or has one
dimension owned by the lane (``C[i, j]`` with ``i`` the lane, ``j`` inner).  When it
finds a blocker, the loop is emitted as a scalar loop carrying
``llvm.loop.vectorize.enable`` so that LLVM's own vectorizer may still try: a
vectorized loop is never miscompiled.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

import llvmlite.ir as ir

from tdsl.errors import InternalError
from tdsl.expr import Add, BufferLoad, Cast, Const, Expr, Mul, Sub, Var
from tdsl.stmt import (Allocate, Barrier, Buffer, BufferStore, Evaluate, For, ForKind,
                       IfThenElse, IntrinCall, LetStmt, SeqStmt, Stmt)
from tdsl.visitor import children, post_order_visit, substitute, uses_var

from .intrinsics import type_suffix
from .lanes import RAMP, UNIFORM, VECTOR, VVal, materialize, uniform, vector_gep
from .lltypes import I1, I32, mem_type

if TYPE_CHECKING:
    from .codegen import CodeGen

#: Widest vectorized loop generated as one vector; wider ones fall back to a loop.
MAX_LANES = 64


# ---- legality --------------------------------------------------------------------------------
def expr_equal(a: Any, b: Any) -> bool:
    """Structural equality of two expressions (variables by identity)."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, Var):
        return False
    if isinstance(a, Const):
        return a.value == b.value and a.dtype == b.dtype
    if getattr(a, "dtype", None) != getattr(b, "dtype", None):
        return False
    for extra in ("func", "buffer"):
        if getattr(a, extra, None) is not getattr(b, extra, None) and \
                getattr(a, extra, None) != getattr(b, extra, None):
            return False
    ca, cb = list(children(a)), list(children(b))
    return len(ca) == len(cb) and all(expr_equal(x, y) for x, y in zip(ca, cb))


def const_int(e: Expr) -> "int | None":
    """The value of an integer expression built from constants only, else None."""
    if isinstance(e, Const):
        return int(e.value) if not e.dtype.is_float else None
    if isinstance(e, (Add, Sub, Mul)):
        a, b = const_int(e.a), const_int(e.b)
        if a is None or b is None:
            return None
        return a + b if isinstance(e, Add) else a - b if isinstance(e, Sub) else a * b
    if isinstance(e, Cast) and e.dtype.is_int:
        return const_int(e.value)
    return None


def linear_coeff(e: Expr, var: Var) -> "int | None":
    """``c`` if ``e == c * var + (terms free of var)`` with a constant ``c``, else None."""
    if not uses_var(e, {var}):
        return 0
    if e is var:
        return 1
    if isinstance(e, (Add, Sub)):
        a, b = linear_coeff(e.a, var), linear_coeff(e.b, var)
        if a is None or b is None:
            return None
        return a + b if isinstance(e, Add) else a - b
    if isinstance(e, Mul):
        ka, kb = const_int(e.a), const_int(e.b)
        if kb is not None:
            a = linear_coeff(e.a, var)
            return None if a is None else a * kb
        if ka is not None:
            b = linear_coeff(e.b, var)
            return None if b is None else b * ka
        return None
    if isinstance(e, Cast) and e.dtype.is_int and e.value.dtype.is_int \
            and e.dtype.bits >= e.value.dtype.bits:
        return linear_coeff(e.value, var)
    return None


def flat_index(buffer: Buffer, indices: Iterable[Expr]) -> Expr:
    """The element offset ``sum(index_k * stride_k)`` as an expression."""
    total: "Expr | None" = None
    for idx, stride in zip(indices, buffer.effective_strides()):
        if idx.dtype != "int64":
            idx = Cast(idx, "int64")
        if stride.dtype != "int64":
            stride = Cast(stride, "int64")
        term = idx if const_int(stride) == 1 else Mul(idx, stride)
        total = term if total is None else Add(total, term)
    return total if total is not None else Const(0, "int64")


def widen_blocker(loop: For) -> "str | None":
    """Why ``loop`` cannot be widened into vector code, or None if it can."""
    lanes = const_int(loop.extent)
    if lanes is None:
        return "its extent is not a constant"
    if lanes > MAX_LANES:
        return f"its extent {lanes} is above {MAX_LANES} lanes"
    lane_vars: set[Var] = {loop.var}
    inner_vars: set[Var] = set()          # loops inside the widened one, and lets of them
    lets: dict[Var, Expr] = {}
    accesses: dict[Buffer, list[tuple[tuple[Expr, ...], bool]]] = {}
    problem: list[str] = []

    def note_loads(e: Any) -> None:
        def visit(n: Any) -> None:
            if isinstance(n, BufferLoad):
                accesses.setdefault(n.buffer, []).append((n.indices, False))
        post_order_visit(e, visit)

    def walk(s: Stmt) -> None:
        if problem:
            return
        if isinstance(s, SeqStmt):
            for x in s.stmts:
                walk(x)
        elif isinstance(s, For):
            if s.kind in (ForKind.PARALLEL, ForKind.THREAD_BINDING):
                problem.append(f"it contains a {s.kind} loop")
            elif uses_var(s.min, lane_vars) or uses_var(s.extent, lane_vars):
                problem.append(f"the bounds of inner loop '{s.var.name}' depend on the lane")
            else:
                note_loads(s.min)
                note_loads(s.extent)
                inner_vars.add(s.var)
                walk(s.body)
        elif isinstance(s, LetStmt):
            note_loads(s.value)
            if uses_var(s.value, lane_vars):
                lane_vars.add(s.var)
            if uses_var(s.value, inner_vars):
                inner_vars.add(s.var)
            lets[s.var] = s.value
            walk(s.body)
        elif isinstance(s, IfThenElse):
            note_loads(s.cond)
            walk(s.then_case)
            if s.else_case is not None:
                walk(s.else_case)
        elif isinstance(s, BufferStore):
            note_loads(s.value)
            for i in s.indices:
                note_loads(i)
            accesses.setdefault(s.buffer, []).append((s.indices, True))
        elif isinstance(s, Evaluate):
            note_loads(s.value)
        elif isinstance(s, Allocate):
            problem.append(f"it allocates '{s.buffer.name}' inside the loop")
        elif isinstance(s, (Barrier, IntrinCall)):
            problem.append(f"it contains a {type(s).__name__}")
        else:
            problem.append(f"it contains a {type(s).__name__}")

    walk(loop.body)
    if problem:
        return problem[0]
    for buf, acc in accesses.items():
        stores = [ix for ix, is_store in acc if is_store]
        if not stores:
            continue
        first = stores[0]
        for ix, _ in acc:
            if len(ix) != len(first) or not all(expr_equal(a, b) for a, b in zip(ix, first)):
                return (f"buffer '{buf.name}' is stored and also accessed at another index, "
                        f"so lanes may depend on each other")
        flat = _expand_lets(flat_index(buf, first), lets)
        coeff = linear_coeff(flat, loop.var)
        if not coeff:
            return (f"the store to '{buf.name}' is not at an index affine in "
                    f"'{loop.var.name}' with a nonzero constant stride")
        if uses_var(flat, inner_vars) and not _lane_owned_dim(first, lets, loop.var, inner_vars):
            return (f"the store to '{buf.name}' moves with an inner loop, so two lanes may "
                    f"reach one element in different inner iterations")
    return None


def _lane_owned_dim(indices: Iterable[Expr], lets: dict[Var, Expr], lane: Var,
                    inner_vars: set[Var]) -> bool:
    """True if some index is ``c*lane + (terms uniform in the widened body)`` with ``c != 0``:
    then distinct lanes touch distinct elements whatever the inner loops do (outer-loop
    vectorization: lane ``i`` runs the inner loops over its own row ``C[i, :]``)."""
    for idx in indices:
        e = _expand_lets(idx, lets)
        if not uses_var(e, inner_vars) and linear_coeff(e, lane):
            return True
    return False


def _expand_lets(e: Expr, lets: dict[Var, Expr]) -> Expr:
    for _ in range(len(lets) + 1):
        if not uses_var(e, set(lets)):
            break
        e = substitute(e, lets)
    return e


# ---- vector memory access ------------------------------------------------------------------
def _all_true(lanes: int) -> ir.Constant:
    return ir.Constant(ir.VectorType(I1, lanes), [1] * lanes)


def _any_lane(cg: "CodeGen", mask: ir.Value) -> ir.Value:
    fn = cg.declare(f"llvm.vector.reduce.or.{type_suffix(mask.type)}", I1, [mask.type])
    return cg.b.call(fn, [mask])


def load_lanes(cg: "CodeGen", buffer: Buffer, base: ir.Value, flat: VVal) -> VVal:
    """Load ``buffer`` at a lane-varying (or uniform, under a mask) flat index."""
    b, lanes, mask = cg.b, cg.st.lanes, cg.st.mask
    dt = buffer.dtype
    et = mem_type(dt)
    align = dt.itemsize
    if flat.kind == UNIFORM:
        ptr = b.gep(base, [flat.value])
        if mask is not None:  # load only if some lane is active; else read a dummy slot
            ptr = b.select(_any_lane(cg, mask), ptr, cg.safe_slot(et))
        raw = b.load(ptr, align=align)
        return uniform(cg.from_memory(raw, dt, 1))
    vt = ir.VectorType(et, lanes)
    zero = ir.Constant(vt, None)
    if flat.kind == RAMP and flat.stride == 1:
        vptr = b.bitcast(b.gep(base, [flat.value]), vt.as_pointer())
        if mask is None:
            raw = b.load(vptr, align=align)
        else:
            fn = cg.declare(f"llvm.masked.load.{type_suffix(vt)}.p0", vt,
                            [vptr.type, I32, mask.type, vt])
            raw = b.call(fn, [vptr, ir.Constant(I32, align), mask, zero])
    elif flat.kind == RAMP and 2 <= flat.stride <= MAX_DEINTERLEAVE:
        raw = _strided_load(cg, base, flat, vt, align)
    elif buffer in cg.st.stack_buffers:
        raw = _stack_lanes_load(cg, base, flat, vt, align)
    else:
        ptrs = vector_gep(b, base, materialize(b, flat, lanes))
        m = mask if mask is not None else _all_true(lanes)
        fn = cg.declare(f"llvm.masked.gather.{type_suffix(vt)}.v{lanes}p0", vt,
                        [ptrs.type, I32, m.type, vt])
        raw = b.call(fn, [ptrs, ir.Constant(I32, align), m, zero])
    return VVal(VECTOR, cg.from_memory(raw, dt, lanes))


#: Largest constant stride of a lane-varying load that is read as one contiguous (masked)
#: load of ``stride x lanes`` elements and a shuffle that keeps every ``stride``-th one,
#: rather than a gather.  A gather of 16 floats costs about as much as 16 scalar loads on
#: Zen 4; a depthwise 3x3 convolution with stride 2 (96 x 112 x 112, AVX-512, one thread)
#: ran 3x faster with the contiguous load and shuffle.
MAX_DEINTERLEAVE = 4


def _strided_load(cg: "CodeGen", base: ir.Value, flat: VVal, vt: ir.VectorType,
                  align: int) -> ir.Value:
    """Lanes ``base[flat.value + stride * k]``: one load of the ``stride * lanes`` elements
    from the first lane's, masked so that nothing past the last lane's element is read (nor
    any element of a lane the current mask turns off), then every ``stride``-th element."""
    b, lanes, mask = cg.b, cg.st.lanes, cg.st.mask
    s = flat.stride
    wide = ir.VectorType(vt.element, s * lanes)
    if mask is None:
        wmask = ir.Constant(ir.VectorType(I1, s * lanes),
                            [1 if j % s == 0 or j < s * (lanes - 1) else 0
                             for j in range(s * lanes)])
    else:     # element j of lane j // s: read when that lane is on and j is its element
        off = ir.Constant(ir.VectorType(I1, lanes), None)
        wmask = b.shuffle_vector(mask, off, ir.Constant(
            ir.VectorType(I32, s * lanes),
            [j // s if j % s == 0 else lanes for j in range(s * lanes)]))
    vptr = b.bitcast(b.gep(base, [flat.value]), wide.as_pointer())
    fn = cg.declare(f"llvm.masked.load.{type_suffix(wide)}.p0", wide,
                    [vptr.type, I32, wmask.type, wide])
    raw = b.call(fn, [vptr, ir.Constant(I32, align), wmask, ir.Constant(wide, None)])
    return b.shuffle_vector(raw, ir.Constant(wide, None), ir.Constant(
        ir.VectorType(I32, lanes), [s * k for k in range(lanes)]))


# A gather or scatter on a buffer of the function's stack (a vector of pointers into its
# ``alloca``) counts, for LLVM, as the buffer's address escaping: it then keeps every update
# of the buffer in memory, even in loops that never gather.  A convolution's accumulator
# tile, read transposed by its NCHW epilogue, was stored to the stack after every FMA of the
# reduction (8 stores per 8 FMAs); ResNet-18's 3x3 64 -> 64 at 56 x 56, batch 8, ran 1.8x
# slower for it (AVX2, one thread).  Those lanes are read and written one at a time instead.
def _lane_pointers(cg: "CodeGen", base: ir.Value, flat: VVal, et: ir.Type,
                   sink: bool) -> "list[ir.Value]":
    """Each lane's element pointer; a lane the current mask turns off points at a private
    slot (``safe_slot``) instead."""
    b, lanes, mask = cg.b, cg.st.lanes, cg.st.mask
    index = materialize(b, flat, lanes)
    ptrs = []
    for k in range(lanes):
        lane = ir.Constant(I32, k)
        ptr = b.gep(base, [b.extract_element(index, lane)])
        if mask is not None:
            ptr = b.select(b.extract_element(mask, lane), ptr, cg.safe_slot(et, sink))
        ptrs.append(ptr)
    return ptrs


def _stack_lanes_load(cg: "CodeGen", base: ir.Value, flat: VVal, vt: ir.VectorType,
                      align: int) -> ir.Value:
    """A gather from a stack buffer as one scalar load per lane (lanes the mask turns off
    read zero)."""
    b = cg.b
    raw = ir.Constant(vt, None)
    for k, ptr in enumerate(_lane_pointers(cg, base, flat, vt.element, sink=False)):
        raw = b.insert_element(raw, b.load(ptr, align=align), ir.Constant(I32, k))
    if cg.st.mask is not None:
        raw = b.select(cg.st.mask, raw, ir.Constant(vt, None))
    return raw


def _stack_lanes_store(cg: "CodeGen", base: ir.Value, flat: VVal, data: ir.Value,
                       align: ir.Constant) -> None:
    """A scatter to a stack buffer as one scalar store per lane (lanes the mask turns off
    write a private slot)."""
    b = cg.b
    for k, ptr in enumerate(_lane_pointers(cg, base, flat, data.type.element, sink=True)):
        b.store(b.extract_element(data, ir.Constant(I32, k)), ptr, align=align.constant)


def store_lanes(cg: "CodeGen", buffer: Buffer, base: ir.Value, flat: VVal, value: VVal) -> None:
    """Store a vector at a lane-varying flat index (masked by the current lane mask)."""
    b, lanes, mask = cg.b, cg.st.lanes, cg.st.mask
    dt = buffer.dtype
    if flat.kind == UNIFORM:
        raise InternalError(f"store to '{buffer.name}' at a lane-independent index inside a "
                            f"widened loop (widen_blocker should have refused it)")
    vt = ir.VectorType(mem_type(dt), lanes)
    data = cg.to_memory(materialize(b, value, lanes), dt, lanes)
    align = ir.Constant(I32, dt.itemsize)
    if flat.kind == RAMP and flat.stride == 1:
        vptr = b.bitcast(b.gep(base, [flat.value]), vt.as_pointer())
        if mask is None:
            b.store(data, vptr, align=dt.itemsize)
        else:
            fn = cg.declare(f"llvm.masked.store.{type_suffix(vt)}.p0", ir.VoidType(),
                            [vt, vptr.type, I32, mask.type])
            b.call(fn, [data, vptr, align, mask])
        return
    if buffer in cg.st.stack_buffers:
        _stack_lanes_store(cg, base, flat, data, align)
        return
    ptrs = vector_gep(b, base, materialize(b, flat, lanes))
    m = mask if mask is not None else _all_true(lanes)
    fn = cg.declare(f"llvm.masked.scatter.{type_suffix(vt)}.v{lanes}p0", ir.VoidType(),
                    [vt, ptrs.type, I32, m.type])
    b.call(fn, [data, ptrs, align, m])


def emit_vectorized(cg: "CodeGen", loop: For) -> None:
    """Emit a VECTORIZED loop: widened when legal, else a hinted scalar loop."""
    st = cg.st
    if st.lanes > 1:
        # already inside a widened loop: the inner one iterates (its bounds are uniform)
        cg.serial_loop(loop)
        return
    why = widen_blocker(loop)
    lanes = const_int(loop.extent)
    if why is not None or lanes is None or lanes < 2:
        if why is not None:
            cg.notes.append(f"loop '{loop.var.name}' not widened: {why}")
        # LLVM's loop vectorizer handles innermost loops only: hinting an outer loop would
        # just print "loop not vectorized" warnings
        from .codegen import _has_inner_loop
        cg.serial_loop(loop, hints=None if _has_inner_loop(loop.body) else
                       [("llvm.loop.vectorize.enable", True)])
        return
    lo = cg.convert_index(cg.scalar(loop.min), loop.min.dtype, loop.var.dtype)
    saved = st.vars.get(loop.var)
    st.lanes, st.mask, st.vector_loop = lanes, None, loop.var.name
    st.vars[loop.var] = VVal(RAMP, lo, 1)
    try:
        cg.stmt(loop.body)
    finally:
        st.lanes, st.mask, st.vector_loop = 1, None, ""
        if saved is None:
            st.vars.pop(loop.var, None)
        else:
            st.vars[loop.var] = saved
