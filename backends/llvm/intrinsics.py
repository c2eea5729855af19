"""Math intrinsics: ``Call(Intrinsic, args)`` as LLVM intrinsics or libm calls.

- ``exp exp2 log log2 log10 sqrt sin cos pow floor ceil trunc abs`` become LLVM
  intrinsics (``llvm.exp.f32``...); ``round`` is ``llvm.roundeven`` (half to even,
  like ``np.rint``).
- ``exp`` of a float32 vector is computed inline (Cody-Waite reduction and a degree-6
  polynomial, Cephes' ``expf``: within 2 ulp of the true value, with exact handling of
  overflow, underflow to subnormals and zero, infinities and NaN) instead of one libm
  call per lane; scalar ``exp`` calls libm.
- ``tanh`` and ``erf`` call libm (``tanhf``/``erf``...); on vectors each lane calls it.
- ``sigmoid(x) = 1 / (1 + exp(-x))`` and ``rsqrt(x) = 1 / sqrt(x)`` are expanded into
  operations of the argument's dtype, so float16 rounds after each step as NumPy does.
- float16 transcendental functions are computed in float32 and rounded to float16
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

from .lltypes import const, value_type

if TYPE_CHECKING:
    from .codegen import CodeGen

_LLVM_UNARY = {
    Intrinsic.EXP: "exp", Intrinsic.EXP2: "exp2", Intrinsic.LOG: "log", Intrinsic.LOG2: "log2",
    Intrinsic.LOG10: "log10", Intrinsic.SQRT: "sqrt", Intrinsic.SIN: "sin",
    Intrinsic.COS: "cos", Intrinsic.FLOOR: "floor", Intrinsic.CEIL: "ceil",
    Intrinsic.TRUNC: "trunc", Intrinsic.ROUND: "roundeven",
}
_EXACT_IN_HALF = {Intrinsic.FLOOR, Intrinsic.CEIL, Intrinsic.TRUNC, Intrinsic.ROUND}
_LIBM = {Intrinsic.TANH: "tanh", Intrinsic.ERF: "erf"}


def type_suffix(t: ir.Type) -> str:
    """LLVM's overload suffix of a type: ``f32``, ``v16f32``, ``i64``..."""
    if isinstance(t, ir.VectorType):
        return f"v{t.count}{type_suffix(t.element)}"
    if isinstance(t, ir.HalfType):
        return "f16"
    if isinstance(t, ir.FloatType):
        return "f32"
    if isinstance(t, ir.DoubleType):
        return "f64"
    if isinstance(t, ir.IntType):
        return f"i{t.width}"
    raise BuildError(f"no LLVM intrinsic suffix for type {t}")


def call_llvm(cg: "CodeGen", name: str, args: list[ir.Value]) -> ir.Value:
    """Call the overloaded LLVM intrinsic ``llvm.<name>`` on ``args`` (all of one type)."""
    t = args[0].type
    fn = cg.declare(f"llvm.{name}.{type_suffix(t)}", t, [a.type for a in args])
    return cg.b.call(fn, args)


def _libm(cg: "CodeGen", base: str, x: ir.Value, dtype: DType) -> ir.Value:
    """A libm call (``tanhf`` for float32), lane by lane on vectors."""
    name = base + ("f" if dtype is DType.FLOAT32 else "")
    scalar_t = x.type.element if isinstance(x.type, ir.VectorType) else x.type
    fn = cg.declare(name, scalar_t, [scalar_t], nounwind=True)
    if not isinstance(x.type, ir.VectorType):
        return cg.b.call(fn, [x])
    out: ir.Value = ir.Constant(x.type, ir.Undefined)
    for k in range(x.type.count):
        idx = ir.Constant(ir.IntType(32), k)
        out = cg.b.insert_element(out, cg.b.call(fn, [cg.b.extract_element(x, idx)]), idx)
    return out


def emit_math(cg: "CodeGen", func: Intrinsic, dtype: DType, args: list[ir.Value],
              lanes: int) -> ir.Value:
    """The value of ``func(*args)`` (args already in registers, scalar or vector)."""
    b = cg.b
    x = args[0]
    if func is Intrinsic.ISNAN:
        return b.fcmp_unordered("uno", x, x)
    if func is Intrinsic.ABS:
        if dtype.is_float:
            return call_llvm(cg, "fabs", [x])
        if not dtype.is_signed:
            return x
        zero = const(dtype, 0, lanes)
        return b.select(b.icmp_signed("<", x, zero), b.sub(zero, x), x)
    if not dtype.is_float:
        raise BuildError(f"{func}: needs a float argument, got {dtype}")
    if func is Intrinsic.RSQRT:
        root = emit_math(cg, Intrinsic.SQRT, dtype, [x], lanes)
        return cg.fbin("fdiv", const(dtype, 1.0, lanes), root, dtype)
    if func is Intrinsic.SIGMOID:
        neg = b.fneg(x)
        e = emit_math(cg, Intrinsic.EXP, dtype, [neg], lanes)
        one = const(dtype, 1.0, lanes)
        return cg.fbin("fdiv", one, cg.fbin("fadd", one, e, dtype), dtype)
    if dtype is DType.FLOAT16 and func not in _EXACT_IN_HALF:
        wide = value_type(DType.FLOAT32, lanes)
        r = emit_math(cg, func, DType.FLOAT32, [b.fpext(a, wide) for a in args], lanes)
        return b.fptrunc(r, x.type)
    if func is Intrinsic.EXP and dtype is DType.FLOAT32 and lanes > 1:
        return exp_f32_vector(cg, x, lanes)
    if func in _LLVM_UNARY:
        return call_llvm(cg, _LLVM_UNARY[func], [x])
    if func is Intrinsic.POW:
        return call_llvm(cg, "pow", [x, args[1]])
    if func in _LIBM:
        return _libm(cg, _LIBM[func], x, dtype)
    raise BuildError(f"the LLVM backend has no implementation of intrinsic '{func}'")


_EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
             1.6666665459e-1, 5.0000001201e-1)


def exp_f32_vector(cg: "CodeGen", x: ir.Value, lanes: int) -> ir.Value:
    """``exp(x)`` for a float32 vector, inline (see the module docstring)."""
    b = cg.b
    f32, i32 = ir.FloatType(), ir.IntType(32)
    vf, vi = ir.VectorType(f32, lanes), ir.VectorType(i32, lanes)

    def c(v: float) -> ir.Constant:
        return ir.Constant(vf, [ir.Constant(f32, v)] * lanes)

    def ci(v: int) -> ir.Constant:
        return ir.Constant(vi, [ir.Constant(i32, v)] * lanes)

    def fma(p: ir.Value, q: ir.Value, r: ir.Value) -> ir.Value:
        return call_llvm(cg, "fma", [p, q, r])
    # clamp to the range where the result is neither 0 nor inf (NaN passes through)
    xc = b.select(b.fcmp_ordered(">", x, c(88.7228394)), c(88.7228394), x)
    xc = b.select(b.fcmp_ordered("<", xc, c(-104.0)), c(-104.0), xc)
    n = call_llvm(cg, "roundeven", [b.fmul(xc, c(1.44269504088896341))])
    r = fma(n, c(-0.693359375), xc)
    r = fma(n, c(2.12194440e-4), r)
    p = c(_EXP_POLY[0])
    for coeff in _EXP_POLY[1:]:
        p = fma(p, r, c(coeff))
    r2 = b.fmul(r, r)
    y = fma(p, r2, b.fadd(r, c(1.0)))
    # y * 2^n in two steps, so that subnormal results and n = 128 are exact
    ni = b.fptosi(n, vi)
    n1 = b.ashr(ni, ci(1))
    n2 = b.sub(ni, n1)
    s1 = b.bitcast(b.shl(b.add(n1, ci(127)), ci(23)), vf)
    s2 = b.bitcast(b.shl(b.add(n2, ci(127)), ci(23)), vf)
    y = b.fmul(b.fmul(y, s1), s2)
    y = b.select(b.fcmp_ordered(">", x, c(88.7228394)), c(float("inf")), y)
    return b.select(b.fcmp_ordered("<", x, c(-104.0)), c(0.0), y)
