"""Expression code generation (a mixin of ``CodeGen``).

Implements the semantics of docs/ir.md for every expression node, on scalars and
on vectors alike (see ``lanes.VVal``):

- integers wrap at their width (plain ``add``/``sub``/``mul``, no ``nsw``);
- ``//`` and ``%`` are floor division and modulo.  Division by zero gives 0 and
  ``INT_MIN // -1`` wraps (NumPy's results) instead of trapping;
- ``//`` of floats is ``floor(a / b)`` and ``%`` is ``a - floor(a / b) * b``;
- float → int casts truncate toward zero and saturate at the target dtype's range
  (``llvm.fptosi.sat``/``fptoui.sat``, never LLVM poison; NaN gives 0); a 16-bit
  float source widens to float first (half ↔ bfloat too: LLVM has no direct cast);
  number → bool is ``!= 0`` (NaN is true);
- comparisons of floats are ordered, except ``!=`` (true when either is NaN);
- ``Select`` evaluates only the chosen branch when a branch loads memory, and so
  do ``And``/``Or`` for their right operand (branches, or lane masks in vectors).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator

import llvmlite.ir as ir

from tdsl.dtype import DType
from tdsl.errors import BuildError
from tdsl.expr import (EQ, GE, GT, LE, LT, NE, Add, And, BinaryOp, BufferLoad, Call, Cast,
                       CmpOp, Const, Div, Expr, FloorDiv, FloorMod, Max, Min, Mul, Not, Or,
                       Select, Sub, Var)
from tdsl.visitor import children

from .intrinsics import call_llvm, emit_math, fcmp
from .lanes import RAMP, UNIFORM, VECTOR, VVal, is_zero, materialize, splat, uniform
from .lltypes import I32, I64, const, value_type, wrap_int

_CMP = {EQ: "==", NE: "!=", LT: "<", LE: "<=", GT: ">", GE: ">="}
_FOLD: dict[type, Callable[[int, int], int]] = {
    Add: lambda a, b: a + b, Sub: lambda a, b: a - b, Mul: lambda a, b: a * b,
    FloorDiv: lambda a, b: a // b if b else 0, FloorMod: lambda a, b: a % b if b else 0,
    Min: min, Max: max,
}


class ExprEmitter:
    """Mixin: ``expr(e) -> VVal`` for every expression node of the lowered IR."""

    # provided by CodeGen
    b: ir.IRBuilder
    st: Any
    _speculatable: "set[int]"

    # ---- entry points ------------------------------------------------------------------
    def expr(self, e: Expr) -> VVal:
        method = _DISPATCH.get(type(e))
        if method is None:
            for klass, m in _DISPATCH.items():
                if isinstance(e, klass):
                    method = m
                    break
            else:
                raise BuildError(f"the LLVM backend cannot compile a {type(e).__name__} node; "
                                 f"only lowered IR (tdsl.lower) reaches code generation")
        return method(self, e)

    def scalar(self, e: Expr) -> ir.Value:
        """The value of ``e``, which must not depend on the vector lane."""
        v = self.expr(e)
        if v.kind != UNIFORM:
            raise BuildError("internal: a lane-dependent value where a scalar is needed")
        return v.value

    def vec(self, v: VVal) -> ir.Value:
        """``v`` as a vector of the current lane count."""
        return materialize(self.b, v, self.st.lanes)

    def regs(self, vals: list[VVal]) -> tuple[list[ir.Value], int]:
        """Operands in registers: all scalars if every value is uniform, else vectors."""
        if all(v.kind == UNIFORM for v in vals):
            return [v.value for v in vals], 1
        return [self.vec(v) for v in vals], self.st.lanes

    def fbin(self, op: str, x: ir.Value, y: ir.Value, dtype: DType,
             exact: bool = False) -> ir.Value:
        """A float binary op with the function's fast-math flags (none for the 16-bit
        floats, which round after each operation, none where ``exact``)."""
        flags = () if exact or dtype in (DType.FLOAT16, DType.BFLOAT16) else self.fastmath
        return getattr(self.b, op)(x, y, flags=flags)

    # ---- leaves ----------------------------------------------------------------------------
    def _const(self, e: Const) -> VVal:
        return uniform(const(e.dtype, e.value), e.value if not e.dtype.is_float else None)

    def _var(self, e: Var) -> VVal:
        try:
            return self.st.vars[e]
        except KeyError:
            raise BuildError(f"variable '{e.name}' is used outside the scope that defines it "
                             f"(not a loop, let or size variable in scope)") from None

    # ---- arithmetic ------------------------------------------------------------------------
    def _binary(self, e: BinaryOp) -> VVal:
        op, dt = type(e), e.dtype
        if op is Div and not dt.is_float:
            raise BuildError(f"'/' on {dt} operands reached code generation; use '//'")
        a, b = self.expr(e.a), self.expr(e.b)
        if dt.is_int and a.const is not None and b.const is not None and op in _FOLD:
            value = wrap_int(_FOLD[op](a.const, b.const), dt)
            return uniform(const(dt, value), value)
        if dt.is_int:
            simple = self._int_identity(op, a, b)
            if simple is not None:
                return simple
            if a.kind != VECTOR and b.kind != VECTOR and (a.kind == RAMP or b.kind == RAMP):
                ramp = self._ramp_arith(op, dt, a, b)
                if ramp is not None:
                    return ramp
        (x, y), lanes = self.regs([a, b])
        return VVal(UNIFORM if lanes == 1 else VECTOR,
                    self.arith(op, dt, x, y, lanes, b.const))

    def _int_identity(self, op: type, a: VVal, b: VVal) -> "VVal | None":
        if op in (Add, Sub) and b.const == 0:
            return a
        if op is Add and a.const == 0:
            return b
        if op is Mul:
            if b.const == 1:
                return a
            if a.const == 1:
                return b
        if op is FloorDiv and b.const == 1:
            return a
        return None

    def _ramp_arith(self, op: type, dt: DType, a: VVal, b: VVal) -> "VVal | None":
        """Affine arithmetic that keeps ramps symbolic (both operands non-vector)."""
        if op in (Add, Sub):
            if is_zero(b.value):
                base = a.value
            elif op is Add and is_zero(a.value):
                base = b.value
            else:
                base = self.arith(op, dt, a.value, b.value, 1, None)
            stride = a.stride + (b.stride if op is Add else -b.stride)
            return VVal(RAMP, base, stride) if stride else uniform(base)
        if op is Mul:
            ramp, other = (a, b) if a.kind == RAMP else (b, a)
            if other.const is None:
                return None
            base = self.arith(Mul, dt, ramp.value, other.value, 1, other.const)
            stride = ramp.stride * other.const
            return VVal(RAMP, base, stride) if stride else uniform(base)
        return None

    def arith(self, op: type, dt: DType, x: ir.Value, y: ir.Value, lanes: int,
              y_const: Any = None) -> ir.Value:
        """``x <op> y`` on registers of dtype ``dt`` (scalars or vectors of ``lanes``)."""
        b = self.b
        if dt.is_float:
            if op is Add:
                return self.fbin("fadd", x, y, dt)
            if op is Sub:
                return self.fbin("fsub", x, y, dt)
            if op is Mul:
                return self.fbin("fmul", x, y, dt)
            if op is Div:
                return self.fbin("fdiv", x, y, dt)
            if op is FloorDiv:
                return call_llvm(self, "floor", [self.fbin("fdiv", x, y, dt, exact=True)])
            if op is FloorMod:
                q = call_llvm(self, "floor", [self.fbin("fdiv", x, y, dt, exact=True)])
                return self.fbin("fsub", x, self.fbin("fmul", q, y, dt, exact=True), dt,
                                 exact=True)
            if op is Min:
                return b.select(fcmp(self, "<", x, y, dt, lanes), x, y)
            if op is Max:
                return b.select(fcmp(self, ">", x, y, dt, lanes), x, y)
        elif dt.is_int:
            if op is Add:
                return b.add(x, y)
            if op is Sub:
                return b.sub(x, y)
            if op is Mul:
                return b.mul(x, y)
            if op is FloorDiv:
                return self._int_floordiv(dt, x, y, lanes, y_const, want_mod=False)
            if op is FloorMod:
                return self._int_floordiv(dt, x, y, lanes, y_const, want_mod=True)
            if op in (Min, Max):
                cmp = b.icmp_signed if dt.is_signed else b.icmp_unsigned
                return b.select(cmp("<" if op is Min else ">", x, y), x, y)
        raise BuildError(f"operator {op.__name__} is not defined on {dt}")

    @contextmanager
    def conditional(self) -> Iterator[None]:
        """Code emitted inside is reached only on some iterations (a branch's arm)."""
        self.st.branch_depth += 1
        try:
            yield
        finally:
            self.st.branch_depth -= 1

    def note_conditional_division(self) -> None:
        """A scalar division by a variable is being emitted: every enclosing loop whose
        body reaches it only through a branch is kept from LLVM's loop vectorizer (see
        ``CodeGen.counted_loop``).  Outer loops count too: full unrolling of an inner loop
        makes them innermost before the vectorizer runs."""
        depth = self.st.branch_depth
        for frame in self.st.loop_frames:
            if frame[0] < depth:
                frame[1] = True

    def _int_floordiv(self, dt: DType, x: ir.Value, y: ir.Value, lanes: int, y_const: Any,
                      want_mod: bool) -> ir.Value:
        """Floor division / modulo of integers, safe for a zero or -1 divisor."""
        b = self.b
        zero = const(dt, 0, lanes)
        if not dt.is_signed:
            if y_const is not None and y_const != 0:
                return b.urem(x, y) if want_mod else b.udiv(x, y)
            if lanes == 1:
                self.note_conditional_division()
            is0 = b.icmp_unsigned("==", y, zero)
            ys = b.select(is0, const(dt, 1, lanes), y)
            r = b.urem(x, ys) if want_mod else b.udiv(x, ys)
            return b.select(is0, zero, r)
        if y_const is not None:
            if y_const == 0:
                return zero
            if y_const == -1:
                return zero if want_mod else b.sub(zero, x)
            q, r = b.sdiv(x, y), b.srem(x, y)
            fix = b.icmp_signed("<" if y_const > 0 else ">", r, zero)
            if want_mod:
                return b.select(fix, b.add(r, y), r)
            return b.sub(q, b.zext(fix, q.type))
        if lanes == 1:
            self.note_conditional_division()
        is0 = b.icmp_signed("==", y, zero)
        ism1 = b.icmp_signed("==", y, const(dt, -1, lanes))
        ys = b.select(b.or_(is0, ism1), const(dt, 1, lanes), y)
        q, r = b.sdiv(x, ys), b.srem(x, ys)
        fix = b.and_(b.icmp_signed("!=", r, zero),
                     b.icmp_signed("<", b.xor(r, ys), zero))
        if want_mod:
            out = b.select(fix, b.add(r, ys), r)
            return b.select(b.or_(is0, ism1), zero, out)
        out = b.sub(q, b.zext(fix, q.type))
        out = b.select(ism1, b.sub(zero, x), out)
        return b.select(is0, zero, out)

    # ---- comparisons and logic -----------------------------------------------------------
    def _compare(self, e: CmpOp) -> VVal:
        dt = e.a.dtype
        a, b = self.expr(e.a), self.expr(e.b)
        if dt is DType.INT64 and {a.kind, b.kind} == {RAMP, UNIFORM}:
            ramp = a if a.kind == RAMP else b
            if ramp.stride == 1:
                return self._ramp_compare(type(e), a, b)
        (x, y), lanes = self.regs([a, b])
        sym = _CMP[type(e)]
        b = self.b
        if dt.is_float:
            r = fcmp(self, sym, x, y, dt, lanes)
        elif dt.is_signed:
            r = b.icmp_signed(sym, x, y)
        else:
            r = b.icmp_unsigned(sym, x, y)
        return VVal(UNIFORM if lanes == 1 else VECTOR, r)

    def _ramp_compare(self, op: type, a: VVal, b: VVal) -> VVal:
        """``ramp <op> u`` (or ``u <op> ramp``) for a stride-1 int64 ramp as one compare of
        the lane numbers ``<0..L-1>`` against ``clamp(u - base, -1, L)`` in 32 bits (the
        index arithmetic ``base + lane`` and ``u - base`` are assumed not to overflow int64,
        as for any loop index)."""
        b_ = self.b
        lanes = self.st.lanes
        swapped = a.kind != RAMP
        ramp, other = (b, a) if swapped else (a, b)
        d = b_.sub(other.value, ramp.value)
        d = b_.select(b_.icmp_signed("<", d, ir.Constant(I64, -1)), ir.Constant(I64, -1), d)
        d = b_.select(b_.icmp_signed(">", d, ir.Constant(I64, lanes)), ir.Constant(I64, lanes), d)
        lane_ids = ir.Constant(ir.VectorType(I32, lanes), list(range(lanes)))
        sym = _CMP[op]
        if swapped:  # u <op> lane  ==  lane <flipped op> u
            sym = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}.get(sym, sym)
        bound = splat(b_, b_.trunc(d, I32), lanes)
        return VVal(VECTOR, b_.icmp_signed(sym, lane_ids, bound))

    def _not(self, e: Not) -> VVal:
        (x,), lanes = self.regs([self.expr(e.a)])
        return VVal(UNIFORM if lanes == 1 else VECTOR, self.b.xor(x, const(DType.BOOL, 1, lanes)))

    def _logic(self, e: BinaryOp) -> VVal:
        is_and = isinstance(e, And)
        a = self.expr(e.a)
        if self.has_load(e.b):
            if a.kind == UNIFORM:
                t, f = (e.b, None) if is_and else (None, e.b)
                return self._branch_select(a.value, t, f, DType.BOOL)
            cond = a.value
            rhs = self._under_mask(cond if is_and else self.b.not_(cond), lambda: self.expr(e.b))
            x, y = cond, self.vec(rhs)
        else:
            (x, y), _ = self.regs([a, self.expr(e.b)])
        r = self.b.and_(x, y) if is_and else self.b.or_(x, y)
        return VVal(UNIFORM if isinstance(r.type, ir.IntType) else VECTOR, r)

    # ---- select -------------------------------------------------------------------------------
    def _select(self, e: Select) -> VVal:
        if isinstance(e.cond, Const):
            return self.expr(e.true_value if e.cond.value else e.false_value)
        cond = self.expr(e.cond)
        lazy = self.has_load(e.true_value) or self.has_load(e.false_value)
        if lazy and cond.kind == UNIFORM:
            return self._branch_select(cond.value, e.true_value, e.false_value, e.dtype)
        if lazy:
            c = cond.value
            t = self._under_mask(c, lambda: self.expr(e.true_value))
            f = self._under_mask(self.b.not_(c), lambda: self.expr(e.false_value))
            return VVal(VECTOR, self.b.select(c, self.vec(t), self.vec(f)))
        t, f = self.expr(e.true_value), self.expr(e.false_value)
        if cond.kind == UNIFORM:
            (x, y), lanes = self.regs([t, f])
            return VVal(UNIFORM if lanes == 1 else VECTOR, self.b.select(cond.value, x, y))
        return VVal(VECTOR, self.b.select(cond.value, self.vec(t), self.vec(f)))

    def _branch_select(self, cond: ir.Value, t_expr: "Expr | None", f_expr: "Expr | None",
                       dtype: DType) -> VVal:
        """``t if cond else f`` with branches and a phi; a ``None`` branch is the
        constant ``cond`` takes there (short-circuit ``And``/``Or``)."""
        b = self.b
        then_bb = b.append_basic_block("sel.then")
        else_bb = b.append_basic_block("sel.else")
        merge_bb = b.append_basic_block("sel.end")
        b.cbranch(cond, then_bb, else_bb)
        arms = []
        for bb, ex, cval in ((then_bb, t_expr, True), (else_bb, f_expr, False)):
            b.position_at_end(bb)
            with self.conditional():
                v = uniform(const(DType.BOOL, cval)) if ex is None else self.expr(ex)
            arms.append((v, b.block))
        vector = any(v.kind != UNIFORM for v, _ in arms)
        incoming = []
        for v, end in arms:
            b.position_at_end(end)
            incoming.append((self.vec(v) if vector else v.value, b.block))
            b.branch(merge_bb)
        b.position_at_end(merge_bb)
        phi = b.phi(incoming[0][0].type)
        for value, block in incoming:
            phi.add_incoming(value, block)
        return VVal(VECTOR if vector else UNIFORM, phi)

    # ---- casts ----------------------------------------------------------------------------------
    def _cast(self, e: Cast) -> VVal:
        src, dst = e.value.dtype, e.dtype
        v = self.expr(e.value)
        if src == dst:
            return v
        if v.const is not None and src.is_int and dst.is_int:
            value = wrap_int(v.const, dst)
            return uniform(const(dst, value), value)
        if v.kind == RAMP and src.is_int and dst.is_int and not dst.is_bool \
                and dst.bits <= src.bits:
            # a narrowed ramp is a ramp (lanes wrap at the width either way): an int32
            # index of an int64 loop stays affine, one splat of the narrowed base
            return VVal(RAMP, self.convert(v.value, src, dst, 1), v.stride)
        (x,), lanes = self.regs([v])
        return VVal(UNIFORM if lanes == 1 else VECTOR, self.convert(x, src, dst, lanes))

    def convert(self, x: ir.Value, src: DType, dst: DType, lanes: int) -> ir.Value:
        """Convert registers of dtype ``src`` to ``dst`` (see the module docstring)."""
        b = self.b
        if src == dst:
            return x
        t = value_type(dst, lanes)
        if dst.is_bool:
            zero = const(src, 0, lanes)
            return (fcmp(self, "!=", x, zero, src, lanes) if src.is_float
                    else b.icmp_unsigned("!=", x, zero))
        if src.is_bool:
            return b.uitofp(x, t) if dst.is_float else b.zext(x, t)
        if src.is_int and dst.is_int:
            if dst.bits < src.bits:
                return b.trunc(x, t)
            if dst.bits > src.bits:
                return b.sext(x, t) if src.is_signed else b.zext(x, t)
            return x  # int8 <-> uint8: same bits
        if src.is_int:
            return b.sitofp(x, t) if src.is_signed else b.uitofp(x, t)
        if src.bits == 16 and (dst.bits == 16 or not dst.is_float):
            # half <-> bfloat have one width but no LLVM cast between them; both widen to
            # float exactly, which also spares the saturating conversions a 16-bit source
            x, src = b.fpext(x, value_type(DType.FLOAT32, lanes)), DType.FLOAT32
            if src == dst:
                return x
        if dst.is_float:
            return b.fpext(x, t) if dst.bits > src.bits else b.fptrunc(x, t)
        # float -> int: truncate toward zero, saturating at dst's range (docs/ir.md): NaN
        # gives 0, +-inf and values past the range the nearest end (never LLVM poison)
        name = "fptosi.sat" if dst.is_signed else "fptoui.sat"
        from .intrinsics import type_suffix
        fn = self.declare(f"llvm.{name}.{type_suffix(t)}.{type_suffix(x.type)}", t, [x.type])
        return b.call(fn, [x])

    # ---- calls and loads ------------------------------------------------------------------------
    def _call(self, e: Call) -> VVal:
        vals = [self.expr(a) for a in e.args]
        regs, lanes = self.regs(vals)
        r = emit_math(self, e.func, e.args[0].dtype, regs, lanes)
        return VVal(UNIFORM if lanes == 1 else VECTOR, r)

    def _load(self, e: BufferLoad) -> VVal:
        return self.load(e.buffer, e.indices)

    # ---- helpers ---------------------------------------------------------------------------------
    def has_load(self, e: Expr) -> bool:
        """True if evaluating ``e`` reads memory that may be out of bounds (so it must not
        run speculatively); loads proven in bounds (``speculate.py``) don't count."""
        key = id(e)
        cached = self._load_cache.get(key)
        if cached is None:
            cached = (isinstance(e, BufferLoad) and key not in self._speculatable) or \
                any(self.has_load(c) for c in children(e))
            self._load_cache[key] = cached
            self._keep.append(e)
        return cached

    def _under_mask(self, cond: ir.Value, fn: Callable[[], VVal]) -> VVal:
        """Evaluate ``fn`` with the lane mask narrowed by ``cond``."""
        old = self.st.mask
        self.st.mask = cond if old is None else self.b.and_(old, cond)
        try:
            return fn()
        finally:
            self.st.mask = old


_DISPATCH: dict[type, Callable[[ExprEmitter, Any], VVal]] = {
    Const: ExprEmitter._const, Var: ExprEmitter._var, Cast: ExprEmitter._cast,
    Add: ExprEmitter._binary, Sub: ExprEmitter._binary, Mul: ExprEmitter._binary,
    Div: ExprEmitter._binary, FloorDiv: ExprEmitter._binary, FloorMod: ExprEmitter._binary,
    Min: ExprEmitter._binary, Max: ExprEmitter._binary,
    EQ: ExprEmitter._compare, NE: ExprEmitter._compare, LT: ExprEmitter._compare,
    LE: ExprEmitter._compare, GT: ExprEmitter._compare, GE: ExprEmitter._compare,
    And: ExprEmitter._logic, Or: ExprEmitter._logic, Not: ExprEmitter._not,
    Select: ExprEmitter._select, Call: ExprEmitter._call, BufferLoad: ExprEmitter._load,
}
