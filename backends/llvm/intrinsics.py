"""Math intrinsics: ``Call(Intrinsic, args)`` as inline code, LLVM intrinsics or libm calls.

The dispatcher; the inline float32 math lives in ``vecmath.py``.

- float32 ``exp log tanh erf sigmoid sin cos pow`` (vector and scalar) are computed
  inline (``vecmath``: range reduction + polynomials, errors documented in README.md)
  instead of one libm call per lane.  ``PrimFunc.attrs["fast_math_intrinsics"] = False``
  opts out: libm (through LLVM intrinsics) for every one of them.
- Otherwise ``exp exp2 log log2 log10 sqrt sin cos pow floor ceil trunc abs`` become LLVM
  intrinsics (``llvm.exp.f64``...); ``round`` is ``llvm.roundeven`` (half to even, like
  ``np.rint``); ``tanh`` and ``erf`` call libm (``tanh``/``erff``...).  On vectors, those
  that are not instructions become one libm call per lane, and ``module.notes`` says so.
- float64 ``sigmoid(x) = 1 / (1 + exp(-x))`` (and float16's, and float32's when opted out)
  and ``rsqrt(x) = 1 / sqrt(x)`` are expanded into operations of the argument's dtype, so
  float16 rounds after each step as NumPy does.
- float16 and bfloat16 transcendental functions are computed in float32 and rounded back
  (what NumPy's float16 loops do); floor/ceil/trunc/round/abs are exact in float16.
- ``isnan`` is ``fcmp uno``; ``abs`` of a signed integer wraps (``abs(-128) == -128``
  for int8) and is the identity on uint8.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import llvmlite.ir as ir

from tdsl.dtype import DType
from tdsl.errors import BuildError
from tdsl.expr import Intrinsic

from . import vecmath
from .lltypes import const, type_suffix, value_type

if TYPE_CHECKING:
    from .codegen import CodeGen

_LLVM_UNARY = {
    Intrinsic.EXP: "exp", Intrinsic.EXP2: "exp2", Intrinsic.LOG: "log", Intrinsic.LOG2: "log2",
    Intrinsic.LOG10: "log10", Intrinsic.SQRT: "sqrt", Intrinsic.SIN: "sin",
    Intrinsic.COS: "cos", Intrinsic.FLOOR: "floor", Intrinsic.CEIL: "ceil",
    Intrinsic.TRUNC: "trunc", Intrinsic.ROUND: "roundeven",
}
_EXACT_IN_HALF = {Intrinsic.FLOOR, Intrinsic.CEIL, Intrinsic.TRUNC, Intrinsic.ROUND}
#: LLVM intrinsics that are instructions (not libm calls) on vectors
_INSTRUCTIONS = {Intrinsic.SQRT, Intrinsic.FLOOR, Intrinsic.CEIL, Intrinsic.TRUNC,
                 Intrinsic.ROUND}
_LIBM = {Intrinsic.TANH: "tanh", Intrinsic.ERF: "erf"}


_BIT_OPS = {Intrinsic.BITWISE_AND, Intrinsic.BITWISE_OR, Intrinsic.BITWISE_XOR,
            Intrinsic.BITWISE_NOT, Intrinsic.SHIFT_LEFT, Intrinsic.SHIFT_RIGHT}


def _bit_op(cg: "CodeGen", func: Intrinsic, dtype: DType, args: list[ir.Value],
            lanes: int) -> ir.Value:
    """Integer bit operations: ``and or xor``, ``not`` as ``xor -1``, ``shl``, and ``ashr``
    (signed) or ``lshr`` (unsigned)."""
    b = cg.b
    x = args[0]
    if func is Intrinsic.BITWISE_NOT:
        return b.xor(x, const(dtype, -1 if dtype.is_signed else (1 << dtype.bits) - 1, lanes))
    y = args[1]
    if func is Intrinsic.BITWISE_AND:
        return b.and_(x, y)
    if func is Intrinsic.BITWISE_OR:
        return b.or_(x, y)
    if func is Intrinsic.BITWISE_XOR:
        return b.xor(x, y)
    if func is Intrinsic.SHIFT_LEFT:
        return b.shl(x, y)
    return b.ashr(x, y) if dtype.is_signed else b.lshr(x, y)


def call_llvm(cg: "CodeGen", name: str, args: list[ir.Value]) -> ir.Value:
    """Call the overloaded LLVM intrinsic ``llvm.<name>`` on ``args`` (all of one type)."""
    t = args[0].type
    fn = cg.declare(f"llvm.{name}.{type_suffix(t)}", t, [a.type for a in args])
    return cg.b.call(fn, args)


def fcmp(cg: "CodeGen", sym: str, x: ir.Value, y: ir.Value, dtype: DType,
         lanes: int) -> ir.Value:
    """``x <sym> y`` on floats of ``dtype`` (``"!="`` and ``"uno"`` unordered, the others
    ordered).  16-bit floats are widened to float32 (exact) behind an arithmetic fence:
    LLVM 22's x86 backend aborts in instruction selection ("Cannot select X86ISD::CMPP
    v16f32") on a 16-lane bfloat compare beside a saturating conversion, and without the
    fence InstCombine narrows a compare of widened values back to bfloat."""
    if dtype in (DType.FLOAT16, DType.BFLOAT16):
        t = value_type(DType.FLOAT32, lanes)
        wide = [call_llvm(cg, "arithmetic.fence", [cg.b.fpext(v, t)]) for v in
                ((x,) if y is x else (x, y))]
        x, y = wide[0], wide[-1]
    if sym in ("!=", "uno"):
        return cg.b.fcmp_unordered(sym, x, y)
    return cg.b.fcmp_ordered(sym, x, y)


def _scalarized_note(cg: "CodeGen", func: Intrinsic, dtype: DType) -> None:
    """Record in ``module.notes`` that a vectorized loop calls libm once per lane."""
    loop, stage = cg.st.vector_loop or "?", cg.st.store_name or "?"
    note = (f"{func.value} ({dtype}) in vectorized loop '{loop}' of stage '{stage}': "
            f"one libm call per lane")
    if note not in cg.notes:
        cg.notes.append(note)


def inline_math_enabled(cg: "CodeGen") -> bool:
    """False when the function opted out of inline math (``fast_math_intrinsics``)."""
    return bool(cg.func.attrs.get("fast_math_intrinsics", True))


def emit_math(cg: "CodeGen", func: Intrinsic, dtype: DType, args: list[ir.Value],
              lanes: int) -> ir.Value:
    """The value of ``func(*args)`` (args already in registers, scalar or vector)."""
    b = cg.b
    x = args[0]
    if func is Intrinsic.ISNAN:
        return fcmp(cg, "uno", x, x, dtype, lanes)
    if func is Intrinsic.ABS:
        if dtype.is_float:
            return call_llvm(cg, "fabs", [x])
        if not dtype.is_signed:
            return x
        zero = const(dtype, 0, lanes)
        return b.select(b.icmp_signed("<", x, zero), b.sub(zero, x), x)
    if func in _BIT_OPS:
        return _bit_op(cg, func, dtype, args, lanes)
    if not dtype.is_float:
        raise BuildError(f"{func}: needs a float argument, got {dtype}")
    if func is Intrinsic.RSQRT:
        root = emit_math(cg, Intrinsic.SQRT, dtype, [x], lanes)
        return cg.fbin("fdiv", const(dtype, 1.0, lanes), root, dtype)
    inline = inline_math_enabled(cg)
    if dtype is DType.FLOAT32 and inline and func in vecmath.INLINE_F32:
        return vecmath.emit_f32(cg, func, args, lanes)
    if dtype is DType.FLOAT64 and inline and func in vecmath.INLINE_F64:
        return vecmath.emit_f64(cg, func, args, lanes)
    if func is Intrinsic.SIGMOID:
        neg = b.fneg(x)
        e = emit_math(cg, Intrinsic.EXP, dtype, [neg], lanes)
        one = const(dtype, 1.0, lanes)
        return cg.fbin("fdiv", one, cg.fbin("fadd", one, e, dtype), dtype)
    if dtype in (DType.FLOAT16, DType.BFLOAT16) and func not in _EXACT_IN_HALF:
        wide = value_type(DType.FLOAT32, lanes)
        r = emit_math(cg, func, DType.FLOAT32, [b.fpext(a, wide) for a in args], lanes)
        return b.fptrunc(r, x.type)
    if lanes > 1 and func not in _INSTRUCTIONS:
        _scalarized_note(cg, func, dtype)
    if func in _LLVM_UNARY:
        return call_llvm(cg, _LLVM_UNARY[func], [x])
    if func is Intrinsic.POW:
        return call_llvm(cg, "pow", [x, args[1]])
    if func in _LIBM:
        return vecmath.libm_lanes(cg, _LIBM[func] + ("f" if dtype is DType.FLOAT32 else ""),
                                  [x])
    raise BuildError(f"the LLVM backend has no implementation of intrinsic '{func}'")
