"""Inline float32 math (exp log tanh erf sigmoid sin cos pow) and float64 math (exp log tanh
sigmoid sin cos erf) as LLVM IR, vector or scalar.

Why: LLVM lowers ``llvm.sin.v8f32``, ``tanhf``... to one libm call per lane, 10-50x
slower than straight-line vector code.  Each function here is range reduction plus a
polynomial, written with plain (non-fast-math) IEEE operations and explicit ``fma``, so
the result does not depend on the optimizer.  Maximum errors (ulp, measured over a dense
sweep of all float32 values by tests/backends/test_llvm_vecmath.py) are in
backends/llvm/README.md; special values (NaN, ±inf, ±0, subnormals, overflow and
underflow) give what NumPy's float32 loops give.

Methods and coefficients: ``exp`` is Cody-Waite reduction by ln 2 with Cephes' ``expf``
polynomial (S. Moshier, Cephes Math Library); the other polynomials are near-minimax fits
made by scripts/fit_vecmath.py (Lawson's algorithm against float64 NumPy/SciPy).

- ``log``: x = 2^k m with m in [√½, √2) (subnormals pre-scaled by 2^23); log1p(f) =
  f - f²/2 + f³P(f); plus k·ln 2 in two parts.
- ``tanh``: x + x³P(x²) for |x| < 0.625, else ±(1 - 2/(e^{2|x|} + 1)).
- ``erf``: x·P(x²) for |x| < 1 (and NaN), else ±(1 - exp(Q(|x|))) with Q ≈ log erfc
  (|x| ≤ 3.95; degree 6: the fit's error is ~0.02 ulp, float32 rounding dominates), exp
  without its overflow/underflow handling (Q's range needs none).
- ``sigmoid``: with e = exp(-|x|): 1/(1+e) for x ≥ 0, e/(1+e) below (no overflow, and
  accurate where sigmoid is subnormal).
- ``sin``/``cos``: j = round(|x|·2/π), r = |x| - j·π/2 in three parts (Cody-Waite with
  FMA), polynomials on [-π/4, π/4] chosen by j mod 4.  Lanes with |x| > 2^16 (or inf,
  NaN) take a rarely taken branch that calls libm ``sinf``/``cosf``.
- ``pow``: computed in float64 (log2 |x| by the atanh series, 2^t by Taylor series, each
  good to ~1e-13), then rounded: within 1 ulp.  C99/NumPy special cases are applied
  explicitly (``pow(x, ±0) = 1``, ``pow(1, y) = 1``, ``pow(-1, ±inf) = 1``, negative
  x with non-integer y is NaN, odd integer y keeps the sign of x, including -0.0).

float64 (the ``*64`` functions, ``emit_f64``): the same reductions with float64 constants
and Taylor polynomials; ``erf`` uses its Maclaurin series below 0.75 and mpmath Chebyshev
fits above (scripts/fit_vecmath64.py); methods and bounds (``MAX_ULP64``) in
backends/llvm/README.md.  float64 ``pow`` still calls libm.
"""
from __future__ import annotations

import math
import struct
from decimal import Decimal
from typing import TYPE_CHECKING, Callable, Sequence

import llvmlite.ir as ir

from tdsl.expr import Intrinsic

from .lltypes import type_suffix

if TYPE_CHECKING:
    from .codegen import CodeGen

F32, F64, I32, I64 = ir.FloatType(), ir.DoubleType(), ir.IntType(32), ir.IntType(64)

# Horner order (highest degree first); see scripts/fit_vecmath.py
EXP_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
         1.6666665459e-1, 5.0000001201e-1)
LOG_P = (-7.634501904e-02, 1.276158094e-01, -1.316018254e-01, 1.420175731e-01,
         -1.662335694e-01, 2.000122666e-01, -2.500081956e-01, 3.333333135e-01)
TANH_P = (2.142951358e-03, -8.177387528e-03, 2.170069888e-02, -5.394676328e-02,
          1.333320588e-01, -3.333333135e-01)
ERF_SMALL = (7.853827265e-05, -8.010184392e-04, 5.188326817e-03, -2.685381100e-02,
             1.128358543e-01, -3.761262596e-01, 1.128379107e+00)
ERF_LARGE = (1.863807120e-04, -1.519631478e-04, 2.465397585e-03, -1.071124990e-02,
             -9.438831210e-01, -5.352694035e+00, -7.806818008e+00)
SIN_P = (2.718025826e-06, -1.983930269e-04, 8.333329111e-03, -1.666666716e-01)
COS_P = (-2.720484531e-07, 2.479944851e-05, -1.388888340e-03, 4.166666791e-02)

#: documented maximum error in ulp of the float32 result (asserted, measured over a dense
#: sweep of float32 values, by tests/backends/test_llvm_vecmath.py; table in README.md)
MAX_ULP = {"exp": 1.5, "log": 2.0, "tanh": 2.0, "erf": 3.0, "sigmoid": 3.0, "sin": 2.0,
           "cos": 2.0, "pow": 1.0}

EXP_HI = 88.72283935546875        # above: exp overflows to inf
EXP_LO = -104.0                   # below: exp underflows to 0
SINCOS_LIMIT = 65536.0            # |x| above: libm (Cody-Waite reduction no longer exact)
MIN_NORMAL = 1.1754943508222875e-38


def _f32(v: Decimal) -> Decimal:
    """``v`` rounded to float32 (exactly, as a Decimal)."""
    return Decimal(struct.unpack("f", struct.pack("f", float(v)))[0])


def _pio2_parts() -> tuple[float, float, float]:
    """π/2 as three float32 values (Cody-Waite): p1 + p2 + p3 = π/2 to ~2^-72."""
    pio2 = Decimal("1.57079632679489661923132169163975144209858469968755291")
    p1 = _f32(pio2)
    p2 = _f32(pio2 - p1)
    p3 = _f32(pio2 - p1 - p2)
    return float(p1), float(p2), float(p3)


PIO2_PARTS = _pio2_parts()


class _Ops:
    """Typed constants and IEEE operations on one shape: a scalar or ``<lanes x T>``."""

    def __init__(self, cg: "CodeGen", lanes: int):
        self.cg, self.b, self.lanes = cg, cg.b, lanes

    def ty(self, elem: ir.Type) -> ir.Type:
        return elem if self.lanes == 1 else ir.VectorType(elem, self.lanes)

    def k(self, v: float, elem: ir.Type = F32) -> ir.Constant:
        c = ir.Constant(elem, v)
        return c if self.lanes == 1 else ir.Constant(self.ty(elem), [c] * self.lanes)

    def call(self, name: str, args: Sequence[ir.Value]) -> ir.Value:
        t = args[0].type
        fn = self.cg.declare(f"llvm.{name}.{type_suffix(t)}", t, [a.type for a in args])
        return self.b.call(fn, list(args))

    def fma(self, a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
        return self.call("fma", [a, b, c])

    def horner(self, coeffs: Sequence[float], u: ir.Value, elem: ir.Type = F32) -> ir.Value:
        p: ir.Value = self.k(coeffs[0], elem)
        for c in coeffs[1:]:
            p = self.fma(p, u, self.k(c, elem))
        return p

    def sel(self, cond: ir.Value, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.b.select(cond, a, b)

    def lt(self, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.b.fcmp_ordered("<", a, b)

    def eq(self, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.b.fcmp_ordered("==", a, b)

    def isnan(self, a: ir.Value) -> ir.Value:
        return self.b.fcmp_unordered("uno", a, a)

    def clamp(self, x: ir.Value, lo: float, hi: float) -> ir.Value:
        """``x`` limited to [lo, hi]; NaN becomes ``lo`` (so no poison downstream)."""
        t = x.type.element if isinstance(x.type, ir.VectorType) else x.type
        return self.call("minnum", [self.call("maxnum", [x, self.k(lo, t)]), self.k(hi, t)])

    def bits(self, x: ir.Value, elem: ir.Type = I32) -> ir.Value:
        return self.b.bitcast(x, self.ty(elem))

    def floats(self, i: ir.Value, elem: ir.Type = F32) -> ir.Value:
        return self.b.bitcast(i, self.ty(elem))


def libm_lanes(cg: "CodeGen", name: str, args: Sequence[ir.Value]) -> ir.Value:
    """A libm call (``name`` as spelled in C), one call per lane on vectors."""
    t = args[0].type
    scalar_t = t.element if isinstance(t, ir.VectorType) else t
    fn = cg.declare(name, scalar_t, [scalar_t] * len(args), nounwind=True)
    if not isinstance(t, ir.VectorType):
        return cg.b.call(fn, list(args))
    out: ir.Value = ir.Constant(t, ir.Undefined)
    for lane in range(t.count):
        idx = ir.Constant(I32, lane)
        r = cg.b.call(fn, [cg.b.extract_element(a, idx) for a in args])
        out = cg.b.insert_element(out, r, idx)
    return out


# ---- the functions (x: float32 scalar or vector) -----------------------------------------------
def exp(o: _Ops, x: ir.Value) -> ir.Value:
    b = o.b
    xc = o.clamp(x, EXP_LO, EXP_HI)
    n = o.call("roundeven", [b.fmul(xc, o.k(1.44269504088896341))])
    r = o.fma(n, o.k(-0.693359375), xc)
    r = o.fma(n, o.k(2.12194440e-4), r)
    p = o.horner(EXP_P, r)
    y = o.fma(p, b.fmul(r, r), b.fadd(r, o.k(1.0)))
    # y * 2^n in two steps, so that subnormal results and n = 128 are exact
    ni = b.fptosi(n, o.ty(I32))
    n1 = b.ashr(ni, o.k(1, I32))
    n2 = b.sub(ni, n1)
    s1 = o.floats(b.shl(b.add(n1, o.k(127, I32)), o.k(23, I32)))
    s2 = o.floats(b.shl(b.add(n2, o.k(127, I32)), o.k(23, I32)))
    y = b.fmul(b.fmul(y, s1), s2)
    y = o.sel(o.lt(o.k(EXP_HI), x), o.k(math.inf), y)
    y = o.sel(o.lt(x, o.k(EXP_LO)), o.k(0.0), y)
    return o.sel(o.isnan(x), x, y)


def log(o: _Ops, x: ir.Value) -> ir.Value:
    b = o.b
    sub = o.lt(x, o.k(MIN_NORMAL))
    xs = o.sel(sub, b.fmul(x, o.k(8388608.0)), x)
    ix = b.add(o.bits(xs), o.k(0x3F800000 - 0x3F3504F3, I32))
    k = b.sub(b.ashr(ix, o.k(23, I32)), o.sel(sub, o.k(127 + 23, I32), o.k(127, I32)))
    m = o.floats(b.add(b.and_(ix, o.k(0x007FFFFF, I32)), o.k(0x3F3504F3, I32)))
    f = b.fsub(m, o.k(1.0))
    kf = b.sitofp(k, o.ty(F32))
    f2 = b.fmul(f, f)
    t = o.fma(o.horner(LOG_P, f), b.fmul(f2, f), b.fmul(f2, o.k(-0.5)))
    t = o.fma(kf, o.k(-2.12194440e-4), t)
    y = b.fadd(o.fma(kf, o.k(0.693359375), f), t)
    y = o.sel(o.eq(x, o.k(math.inf)), x, y)
    y = o.sel(o.lt(x, o.k(0.0)), o.k(math.nan), y)
    y = o.sel(o.eq(x, o.k(0.0)), o.k(-math.inf), y)
    return o.sel(o.isnan(x), x, y)


def tanh(o: _Ops, x: ir.Value) -> ir.Value:
    b = o.b
    ax = o.call("fabs", [x])
    x2 = b.fmul(x, x)
    small = o.fma(b.fmul(x2, x), o.horner(TANH_P, x2), x)
    e = exp(o, b.fmul(o.clamp(ax, 0.0, 9.5), o.k(2.0)))
    large = b.fsub(o.k(1.0), b.fdiv(o.k(2.0), b.fadd(e, o.k(1.0))))
    y = o.call("copysign", [o.sel(o.lt(ax, o.k(0.625)), small, large), x])  # also -0.0
    return o.sel(o.isnan(x), x, y)


def _exp_in_range(o: _Ops, x: ir.Value) -> ir.Value:
    """``exp(x)`` for -87 <= x <= 88 (not NaN): ``exp`` without the clamps and selects for
    overflow, underflow and NaN, and with one scaling step (2^n is a normal float)."""
    b = o.b
    n = o.call("roundeven", [b.fmul(x, o.k(1.44269504088896341))])
    r = o.fma(n, o.k(-0.693359375), x)
    r = o.fma(n, o.k(2.12194440e-4), r)
    y = o.fma(o.horner(EXP_P, r), b.fmul(r, r), b.fadd(r, o.k(1.0)))
    scale = o.floats(b.shl(b.add(b.fptosi(n, o.ty(I32)), o.k(127, I32)), o.k(23, I32)))
    return b.fmul(y, scale)


def erf(o: _Ops, x: ir.Value) -> ir.Value:
    b = o.b
    ax = o.call("fabs", [x])
    small = b.fmul(x, o.horner(ERF_SMALL, b.fmul(x, x)))     # also ±0 and NaN
    t = b.fsub(o.clamp(ax, 1.0, 3.95), o.k(2.5))
    # Q(t) is in [-17.6, -1.8]: exp needs no overflow or underflow handling
    large = b.fsub(o.k(1.0), _exp_in_range(o, o.horner(ERF_LARGE, t)))
    return o.sel(b.fcmp_unordered("<", ax, o.k(1.0)), small, o.call("copysign", [large, x]))


def sigmoid(o: _Ops, x: ir.Value) -> ir.Value:
    b = o.b
    e = exp(o, b.fneg(o.call("fabs", [x])))
    num = o.sel(o.lt(x, o.k(0.0)), e, o.k(1.0))
    return b.fdiv(num, b.fadd(o.k(1.0), e))


def _libm_where(o: _Ops, big: ir.Value, fast: ir.Value, name: str, x: ir.Value) -> ir.Value:
    """``fast``, with the lanes where ``big`` holds replaced by libm's ``name(x)``: libm is
    called on a branch taken only when some lane needs it (rare lanes: huge, inf, NaN)."""
    b, cg = o.b, o.cg
    if o.lanes == 1:
        any_big = big
    else:
        fn = cg.declare(f"llvm.vector.reduce.or.{type_suffix(big.type)}", ir.IntType(1),
                        [big.type])
        any_big = b.call(fn, [big])
    before = b.block
    with b.if_then(any_big, likely=False):
        merged = o.sel(big, libm_lanes(cg, name, [x]), fast)
        slow_end = b.block
    phi = b.phi(fast.type)
    phi.add_incoming(fast, before)
    phi.add_incoming(merged, slow_end)
    return phi


def _sincos(o: _Ops, x: ir.Value, cosine: bool) -> ir.Value:
    b = o.b
    ax = o.call("fabs", [x])
    big = b.fcmp_unordered(">", ax, o.k(SINCOS_LIMIT))       # also NaN
    axc = o.sel(big, o.k(0.0), ax)
    j = o.call("roundeven", [b.fmul(axc, o.k(2 / math.pi))])
    p1, p2, p3 = PIO2_PARTS
    r = o.fma(j, o.k(-p1), axc)
    r = o.fma(j, o.k(-p2), r)
    r = o.fma(j, o.k(-p3), r)
    q = b.fptosi(j, o.ty(I32))
    if cosine:
        q = b.add(q, o.k(1, I32))
    r2 = b.fmul(r, r)
    s = o.fma(b.fmul(r2, r), o.horner(SIN_P, r2), r)
    c = o.fma(b.fmul(r2, r2), o.horner(COS_P, r2), o.fma(r2, o.k(-0.5), o.k(1.0)))
    one = o.k(1, I32)
    y = o.sel(b.icmp_signed("!=", b.and_(q, one), o.k(0, I32)), c, s)
    flip = b.shl(b.and_(q, o.k(2, I32)), o.k(30, I32))
    if not cosine:
        flip = b.xor(flip, b.and_(o.bits(x), o.k(-0x80000000, I32)))
    fast = o.floats(b.xor(o.bits(y), flip))
    # rare lanes (|x| > limit, inf, NaN): libm, on a branch
    return _libm_where(o, big, fast, "cosf" if cosine else "sinf", x)


def sin(o: _Ops, x: ir.Value) -> ir.Value:
    return _sincos(o, x, cosine=False)


def cos(o: _Ops, x: ir.Value) -> ir.Value:
    return _sincos(o, x, cosine=True)




_LN2 = math.log(2.0)


def pow(o: _Ops, x: ir.Value, y: ir.Value) -> ir.Value:  # noqa: A001 (the intrinsic's name)
    b = o.b
    xd, yd = b.fpext(x, o.ty(F64)), b.fpext(y, o.ty(F64))
    ax = o.call("fabs", [xd])
    # log2|x| = e + log2(m), m in [sqrt(1/2), sqrt(2)); float32 inputs are normal doubles
    ix = b.add(o.bits(ax, I64), o.k(0x3FF0000000000000 - 0x3FE6A09E667F3BCD, I64))
    e = b.sub(b.ashr(ix, o.k(52, I64)), o.k(1023, I64))
    m = o.floats(b.add(b.and_(ix, o.k(0x000FFFFFFFFFFFFF, I64)),
                       o.k(0x3FE6A09E667F3BCD, I64)), F64)
    f = b.fsub(m, o.k(1.0, F64))
    s = b.fdiv(f, b.fadd(f, o.k(2.0, F64)))
    z = b.fmul(s, s)
    series = o.horner([2.0 / (2 * k + 1) for k in range(8, -1, -1)], z, F64)  # 2 atanh(s)/s
    lg = o.fma(b.fmul(s, series), o.k(1 / _LN2, F64), b.sitofp(e, o.ty(F64)))
    lg = o.sel(o.eq(ax, o.k(0.0, F64)), o.k(-math.inf, F64), lg)
    lg = o.sel(o.eq(ax, o.k(math.inf, F64)), o.k(math.inf, F64), lg)
    t = o.clamp(b.fmul(yd, lg), -400.0, 400.0)
    n = o.call("roundeven", [t])
    r = b.fmul(b.fsub(t, n), o.k(_LN2, F64))
    p = o.horner([1.0 / math.factorial(k) for k in range(12, -1, -1)], r, F64)
    scale = o.floats(b.shl(b.add(b.fptosi(n, o.ty(I64)), o.k(1023, I64)), o.k(52, I64)), F64)
    res = b.fptrunc(b.fmul(p, scale), o.ty(F32))
    # signs and special cases (C99 Annex F, what NumPy's powf gives)
    ay = o.call("fabs", [y])
    is_int = o.eq(o.call("trunc", [y]), y)
    small_y = o.lt(ay, o.k(16777216.0))
    yi = b.fptosi(o.sel(small_y, y, o.k(0.0)), o.ty(I32))
    odd = b.and_(b.and_(is_int, small_y),
                 b.icmp_signed("!=", b.and_(yi, o.k(1, I32)), o.k(0, I32)))
    sign = b.and_(o.bits(x), o.k(-0x80000000, I32))
    res = o.floats(b.xor(o.bits(res), o.sel(odd, sign, o.k(0, I32))))
    neg_finite = b.and_(o.lt(x, o.k(0.0)), o.lt(o.k(-math.inf), x))
    res = o.sel(b.and_(neg_finite, b.not_(is_int)), o.k(math.nan), res)
    res = o.sel(b.or_(o.isnan(x), o.isnan(y)), b.fadd(x, y), res)
    one = b.or_(b.or_(o.eq(y, o.k(0.0)), o.eq(x, o.k(1.0))),
                b.and_(o.eq(x, o.k(-1.0)), o.eq(ay, o.k(math.inf))))
    return o.sel(one, o.k(1.0), res)


_UNARY: dict[Intrinsic, Callable[[_Ops, ir.Value], ir.Value]] = {
    Intrinsic.EXP: exp, Intrinsic.LOG: log, Intrinsic.TANH: tanh, Intrinsic.ERF: erf,
    Intrinsic.SIGMOID: sigmoid, Intrinsic.SIN: sin, Intrinsic.COS: cos,
}
#: the intrinsics computed inline for float32 (and float16, through float32)
INLINE_F32 = frozenset(_UNARY) | {Intrinsic.POW}


def emit_f32(cg: "CodeGen", func: Intrinsic, args: Sequence[ir.Value], lanes: int) -> ir.Value:
    """``func(*args)`` on float32 registers (scalars or ``lanes``-wide vectors), inline."""
    o = _Ops(cg, lanes)
    if func is Intrinsic.POW:
        return pow(o, args[0], args[1])
    return _UNARY[func](o, args[0])


# ---- float64 ------------------------------------------------------------------------------------
# Polynomials are Taylor series, long enough that truncation is below 2^-60 on the reduced
# range (a few more terms than minimax fits would need, no fitted coefficients).
EXP64_HI = 709.782712893384        # above: exp overflows to inf
EXP64_LO = -745.2                  # below: exp underflows to 0
LN2_HI64 = 6.93147180369123816490e-01   # ln 2 with 32 trailing zero bits: k·LN2_HI64 exact
LN2_LO64 = 1.90821492927058770002e-10
MIN_NORMAL64 = 2.2250738585072014e-308
SINCOS_LIMIT64 = 1048576.0         # |x| above: libm (three-part π/2 no longer exact enough)
EXP64_P = tuple(1.0 / math.factorial(k) for k in range(13, 1, -1))        # r^13/13! .. r^2/2!
EXPM1_64_P = EXP64_P
LOG64_P = tuple(2.0 / (2 * k + 1) for k in range(11, 0, -1))              # 2/23 .. 2/3
SIN64_P = tuple((-1) ** k / math.factorial(2 * k + 1) for k in range(9, 0, -1))
COS64_P = tuple((-1) ** k / math.factorial(2 * k) for k in range(10, 1, -1))

# erf: |x| < 0.75: x·P(x²), P the Maclaurin series of erf(x)/x (exact terms, to x^32);
# 0.75 <= |x| < 6: a polynomial in |x| - mid on each of two intervals, its coefficients
# chosen per lane (selects); tables made by scripts/fit_vecmath64.py (mpmath Chebyshev fits,
# absolute error <= 1.1e-17)
ERF64_SMALL_LIMIT = 0.75
ERF64_ONE = 5.9                    # from here on erf rounds to ±1 (erfc(5.9) < 2^-55)
ERF64_BREAKS = (2.5,)
ERF64_MIDS = (1.625, 4.25)
ERF64_LARGE: tuple[tuple[float, ...], ...] = (
    # [0.75, 2.5): fit error 1.9e-17
    (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -2.2638918211780826e-09, -4.142753245313723e-09, 4.130180609100514e-08, 3.752592456054657e-09, -4.3801557196334426e-07, 6.694210364458097e-07, 2.8269606001507706e-06, -1.0612790840741204e-05, -4.270564050352481e-06, 8.797167756421235e-05, -0.00012566373469958454, -0.00035597962103005987, 0.0014106850409574515, -0.0005765253659099117, -0.006184261516204219, 0.014414781124951816, -0.002134924840568093, -0.049718863158790455, 0.11484061964670796, -0.13076742091158639, 0.08047225902251116, 0.9784437332399837),
    # [2.5, 6.0): fit error 2.3e-18
    (4.924601368332397e-16, -1.9324197946092224e-15, -8.40579352012644e-15, 5.843196866657561e-14, -5.846752544903134e-14, -4.2808162454300953e-13, 2.1254328928690963e-12, -4.782232249991337e-12, -4.1297381332190545e-13, 5.317317205609724e-11, -2.391302287058602e-10, 5.693576624820312e-10, -4.063151561826317e-10, -3.026728777481261e-09, 1.712710909864154e-08, -5.59071600816911e-08, 1.3776545177410025e-07, -2.7506323706676617e-07, 4.570062870285432e-07, -6.37832177648968e-07, 7.477251904757582e-07, -7.309200486992338e-07, 5.872461828351411e-07, -3.7879526551507926e-07, 1.8901925965959995e-07, -6.861197348434726e-08, 1.6143993720598705e-08, 0.9999999981494259),
)


def _dd_const(v: str) -> tuple[float, float]:
    """``v`` (a decimal string) as hi + lo float64s."""
    from decimal import localcontext
    with localcontext() as ctx:
        ctx.prec = 50
        d = Decimal(v)
        hi = float(d)
        return hi, float(d - Decimal(hi))


def _erf64_maclaurin(terms: int = 17) -> tuple[float, ...]:
    """Coefficients (highest first) of erf(x)/x = 2/√π Σ (-1)^n x^(2n) / (n! (2n+1))."""
    from decimal import localcontext
    with localcontext() as ctx:
        ctx.prec = 40
        two_over_sqrt_pi = 2 / Decimal("3.141592653589793238462643383279502884197").sqrt()
        return tuple(float(two_over_sqrt_pi * (-1) ** n / (math.factorial(n) * (2 * n + 1)))
                     for n in range(terms - 1, -1, -1))


ERF64_SMALL = _erf64_maclaurin()
#: 2/√π as hi + lo: erf(x) = x·hi + x·(lo + x²·P₁(x²)) rounds once where x is tiny
ERF64_C0 = _dd_const("1.128379167095512573896158903121545171688101258657997713688")

#: documented maximum error in ulp of the float64 result (asserted by
#: tests/backends/test_llvm_vecmath64.py against mpmath; table in README.md)
MAX_ULP64 = {"exp": 1.5, "log": 1.0, "tanh": 2.5, "sigmoid": 2.5, "sin": 2.0, "cos": 2.0,
             "erf": 1.5, "pow": 1.5}


def _pio2_parts64() -> tuple[float, float, float]:
    """π/2 as three float64 values with 20 trailing zero bits in the first two (so that
    j·p1 and j·p2 are exact for j < 2^20)."""
    pio2 = Decimal("1.57079632679489661923132169163975144209858469968755291")

    def chop(v: Decimal) -> Decimal:
        bits = struct.unpack("<Q", struct.pack("<d", float(v)))[0] & ~((1 << 21) - 1)
        return Decimal(struct.unpack("<d", struct.pack("<Q", bits))[0])
    p1 = chop(pio2)
    p2 = chop(pio2 - p1)
    p3 = Decimal(float(pio2 - p1 - p2))
    return float(p1), float(p2), float(p3)


PIO2_PARTS64 = _pio2_parts64()


def _scale2_64(o: _Ops, y: ir.Value, n: ir.Value) -> ir.Value:
    """``y · 2^n`` (n: float64 integral, |n| <= 1100) in two steps, so subnormal results
    and n = 1024 are exact."""
    b = o.b
    ni = b.fptosi(n, o.ty(I64))
    n1 = b.ashr(ni, o.k(1, I64))
    n2 = b.sub(ni, n1)
    s1 = o.floats(b.shl(b.add(n1, o.k(1023, I64)), o.k(52, I64)), F64)
    s2 = o.floats(b.shl(b.add(n2, o.k(1023, I64)), o.k(52, I64)), F64)
    return b.fmul(b.fmul(y, s1), s2)


def _reduce_ln2_64(o: _Ops, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(n, r): x = n·ln 2 + r, |r| <= ln2/2 (x clamped to the finite exp range)."""
    b = o.b
    n = o.call("roundeven", [b.fmul(x, o.k(1.4426950408889634, F64))])
    r = o.fma(n, o.k(-LN2_HI64, F64), x)
    r = o.fma(n, o.k(-LN2_LO64, F64), r)
    return n, r


def exp64(o: _Ops, x: ir.Value) -> ir.Value:
    b = o.b
    xc = o.clamp(x, -746.0, 710.0)
    n, r = _reduce_ln2_64(o, xc)
    p = o.horner(EXP64_P, r, F64)
    y = o.fma(p, b.fmul(r, r), b.fadd(r, o.k(1.0, F64)))
    y = _scale2_64(o, y, n)
    y = o.sel(o.lt(o.k(EXP64_HI, F64), x), o.k(math.inf, F64), y)
    y = o.sel(o.lt(x, o.k(EXP64_LO, F64)), o.k(0.0, F64), y)
    return o.sel(o.isnan(x), x, y)


def _expm1_64(o: _Ops, x: ir.Value) -> ir.Value:
    """e^x - 1 for 0 <= x <= 40 (tanh's argument): 2^n·(p + 1) - 1 = 2^n·p + (2^n - 1)."""
    b = o.b
    n, r = _reduce_ln2_64(o, x)
    p = o.fma(o.horner(EXPM1_64_P, r, F64), b.fmul(r, r), r)            # e^r - 1
    two_n = _scale2_64(o, o.k(1.0, F64), n)
    return o.fma(two_n, p, b.fsub(two_n, o.k(1.0, F64)))


def log64(o: _Ops, x: ir.Value) -> ir.Value:
    b = o.b
    sub = o.lt(x, o.k(MIN_NORMAL64, F64))
    xs = o.sel(sub, b.fmul(x, o.k(18014398509481984.0, F64)), x)        # 2^54
    ix = b.add(o.bits(xs, I64), o.k(0x3FF0000000000000 - 0x3FE6A09E667F3BCD, I64))
    k = b.sub(b.ashr(ix, o.k(52, I64)), o.sel(sub, o.k(1023 + 54, I64), o.k(1023, I64)))
    m = o.floats(b.add(b.and_(ix, o.k(0x000FFFFFFFFFFFFF, I64)),
                       o.k(0x3FE6A09E667F3BCD, I64)), F64)
    f = b.fsub(m, o.k(1.0, F64))                     # exact (Sterbenz), in [√½-1, √2-1)
    # log(1+f) = f - f²/2 + s·(f²/2 + R), s = f/(2+f), R = 2s²/3 + 2s⁴/5 + ... (fdlibm)
    s = b.fdiv(f, b.fadd(f, o.k(2.0, F64)))
    z = b.fmul(s, s)
    rr = b.fmul(z, o.horner(LOG64_P, z, F64))
    hfsq = b.fmul(b.fmul(f, f), o.k(0.5, F64))
    kf = b.sitofp(k, o.ty(F64))
    lo = o.fma(s, b.fadd(hfsq, rr), o.fma(kf, o.k(LN2_LO64, F64), b.fneg(hfsq)))
    y = o.fma(kf, o.k(LN2_HI64, F64), b.fadd(f, lo))
    y = o.sel(o.eq(x, o.k(math.inf, F64)), x, y)
    y = o.sel(o.lt(x, o.k(0.0, F64)), o.k(math.nan, F64), y)
    y = o.sel(o.eq(x, o.k(0.0, F64)), o.k(-math.inf, F64), y)
    return o.sel(o.isnan(x), x, y)


def tanh64(o: _Ops, x: ir.Value) -> ir.Value:
    b = o.b
    ax = o.call("fabs", [x])
    em = _expm1_64(o, b.fmul(o.clamp(ax, 0.0, 20.0), o.k(2.0, F64)))
    y = b.fdiv(em, b.fadd(em, o.k(2.0, F64)))        # tanh|x| = (e^2|x| - 1)/(e^2|x| + 1)
    y = o.sel(o.lt(ax, o.k(2.0 ** -28, F64)), ax, y)
    y = o.call("copysign", [y, x])                   # also -0.0
    return o.sel(o.isnan(x), x, y)


def sigmoid64(o: _Ops, x: ir.Value) -> ir.Value:
    b = o.b
    e = exp64(o, b.fneg(o.call("fabs", [x])))
    num = o.sel(o.lt(x, o.k(0.0, F64)), e, o.k(1.0, F64))
    return b.fdiv(num, b.fadd(o.k(1.0, F64), e))


def _sincos64(o: _Ops, x: ir.Value, cosine: bool) -> ir.Value:
    b = o.b
    ax = o.call("fabs", [x])
    big = b.fcmp_unordered(">", ax, o.k(SINCOS_LIMIT64, F64))        # also NaN
    axc = o.sel(big, o.k(0.0, F64), ax)
    j = o.call("roundeven", [b.fmul(axc, o.k(2 / math.pi, F64))])
    p1, p2, p3 = PIO2_PARTS64
    r = o.fma(j, o.k(-p1, F64), axc)
    r = o.fma(j, o.k(-p2, F64), r)
    r = o.fma(j, o.k(-p3, F64), r)
    q = b.fptosi(j, o.ty(I64))
    if cosine:
        q = b.add(q, o.k(1, I64))
    r2 = b.fmul(r, r)
    s = o.fma(b.fmul(r2, r), o.horner(SIN64_P, r2, F64), r)
    c = o.fma(b.fmul(r2, r2), o.horner(COS64_P, r2, F64),
              o.fma(r2, o.k(-0.5, F64), o.k(1.0, F64)))
    y = o.sel(b.icmp_signed("!=", b.and_(q, o.k(1, I64)), o.k(0, I64)), c, s)
    flip = b.shl(b.and_(q, o.k(2, I64)), o.k(62, I64))
    if not cosine:
        flip = b.xor(flip, b.and_(o.bits(x, I64), o.k(-0x8000000000000000, I64)))
    fast = o.floats(b.xor(o.bits(y, I64), flip), F64)
    return _libm_where(o, big, fast, "cos" if cosine else "sin", x)


def erf64(o: _Ops, x: ir.Value) -> ir.Value:
    b = o.b
    ax = o.call("fabs", [x])
    x2 = b.fmul(x, x)
    q = o.fma(o.horner(ERF64_SMALL[:-1], x2, F64), x2, o.k(ERF64_C0[1], F64))
    small = o.fma(x, o.k(ERF64_C0[0], F64), b.fmul(x, q))              # also ±0 and NaN
    axc = o.clamp(ax, ERF64_SMALL_LIMIT, 6.0)
    ge = [b.fcmp_ordered(">=", axc, o.k(v, F64)) for v in ERF64_BREAKS]

    def pick(values: Sequence[float]) -> ir.Value:
        """The value of each lane's interval."""
        v = o.k(values[0], F64)
        for cond, w in zip(ge, values[1:]):
            v = o.sel(cond, o.k(w, F64), v)
        return v
    t = b.fsub(axc, pick(ERF64_MIDS))
    p = pick([c[0] for c in ERF64_LARGE])
    for k in range(1, len(ERF64_LARGE[0])):
        p = o.fma(p, t, pick([c[k] for c in ERF64_LARGE]))
    p = o.sel(o.lt(ax, o.k(ERF64_ONE, F64)), p, o.k(1.0, F64))
    large = o.call("copysign", [p, x])
    return o.sel(b.fcmp_unordered("<", ax, o.k(ERF64_SMALL_LIMIT, F64)), small, large)


INV_LN2_DD = _dd_const("1.442695040888963407359924681001892137426645954152985934")
LN2_DD = _dd_const("0.6931471805599452862268275847670772560102009773254394531")
TWO_THIRDS_DD = _dd_const("0.6666666666666666666666666666666666666666666666666667")
#: log(1+f) = 2s + 2s³/3 + s⁵·R(s²), R(z) = 2/5 + 2z/7 + ... (s = f/(2+f), z <= 0.0295)
POW64_LOG_R = tuple(2.0 / (2 * k + 5) for k in range(11, -1, -1))


def _log2_dd(o: _Ops, ax: ir.Value) -> tuple[ir.Value, ir.Value]:
    """log2(ax) as hi + lo (about 2^-100 relative), for finite ax > 0 (subnormals too)."""
    b = o.b
    sub = o.lt(ax, o.k(MIN_NORMAL64, F64))
    xs = o.sel(sub, b.fmul(ax, o.k(18014398509481984.0, F64)), ax)      # 2^54
    ix = b.add(o.bits(xs, I64), o.k(0x3FF0000000000000 - 0x3FE6A09E667F3BCD, I64))
    k = b.sub(b.ashr(ix, o.k(52, I64)), o.sel(sub, o.k(1023 + 54, I64), o.k(1023, I64)))
    m = o.floats(b.add(b.and_(ix, o.k(0x000FFFFFFFFFFFFF, I64)),
                       o.k(0x3FE6A09E667F3BCD, I64)), F64)
    f = b.fsub(m, o.k(1.0, F64))                                       # exact
    two = o.k(2.0, F64)
    d = b.fadd(f, two)
    d_lo = b.fadd(b.fsub(two, d), f)                                   # exact: 2 + f = d + d_lo
    s = b.fdiv(f, d)
    s_lo = b.fdiv(b.fsub(o.fma(b.fneg(s), d, f), b.fmul(s, d_lo)), d)  # f/(2+f) = s + s_lo
    z = b.fmul(s, s)
    z_lo = o.fma(s, s, b.fneg(z))
    s3 = b.fmul(z, s)
    s3_lo = b.fadd(b.fadd(o.fma(z, s, b.fneg(s3)), b.fmul(z_lo, s)),
                   b.fmul(b.fmul(z, s_lo), o.k(3.0, F64)))
    c_hi, c_lo = TWO_THIRDS_DD
    t3 = b.fmul(s3, o.k(c_hi, F64))                                    # 2s³/3, double-double
    t3_lo = b.fadd(b.fadd(o.fma(s3, o.k(c_hi, F64), b.fneg(t3)), b.fmul(s3, o.k(c_lo, F64))),
                   b.fmul(s3_lo, o.k(c_hi, F64)))
    tail = b.fmul(b.fmul(s3, z), o.horner(POW64_LOG_R, z, F64))
    s2 = b.fmul(s, two)
    h = b.fadd(s2, t3)
    h_lo = b.fadd(b.fsub(s2, h), t3)                                   # |2s| >= |t3|: exact
    lo = b.fadd(b.fadd(h_lo, tail), b.fadd(b.fmul(s_lo, two), t3_lo))
    i_hi, i_lo = INV_LN2_DD                                            # (h + lo) / ln 2
    l1 = b.fmul(h, o.k(i_hi, F64))
    l1_lo = b.fadd(o.fma(h, o.k(i_hi, F64), b.fneg(l1)),
                   o.fma(h, o.k(i_lo, F64), b.fmul(lo, o.k(i_hi, F64))))
    kf = b.sitofp(k, o.ty(F64))                                        # + k: two-sum
    sm = b.fadd(kf, l1)
    bv = b.fsub(sm, kf)
    sm_lo = b.fadd(b.fadd(b.fsub(kf, b.fsub(sm, bv)), b.fsub(l1, bv)), l1_lo)
    return sm, sm_lo


def pow64(o: _Ops, x: ir.Value, y: ir.Value) -> ir.Value:
    """x^y = 2^(y·log2|x|), the product in double-double (|y·log2|x|| up to 1075 needs
    ~2^-63 relative), then the C99/NumPy special cases as for float32 ``pow``."""
    b = o.b
    ax = o.call("fabs", [x])
    lg, lg_lo = _log2_dd(o, ax)
    zero, inf = o.eq(ax, o.k(0.0, F64)), o.eq(ax, o.k(math.inf, F64))
    lg = o.sel(zero, o.k(-math.inf, F64), o.sel(inf, o.k(math.inf, F64), lg))
    t0 = b.fmul(y, lg)
    t0_lo = o.fma(y, lg_lo, o.fma(y, lg, b.fneg(t0)))
    ok = b.fcmp_ordered("<", o.call("fabs", [t0]), o.k(1100.0, F64))     # finite, in range
    t = b.fadd(t0, t0_lo)                        # renormalized (lg_lo holds s⁵R: ~1e-4)
    tl = o.sel(ok, b.fadd(b.fsub(t0, t), t0_lo), o.k(0.0, F64))
    # out of range (also x = 0 or inf, whose lg_lo is meaningless): 2^±1100 = inf or 0
    tc = o.sel(ok, t, o.sel(o.lt(o.k(0.0, F64), t0), o.k(1100.0, F64), o.k(-1100.0, F64)))
    n = o.call("roundeven", [tc])
    r = b.fadd(b.fsub(tc, n), tl)                                       # tc - n exact
    l_hi, l_lo = LN2_DD
    u = b.fmul(r, o.k(l_hi, F64))
    u_lo = o.fma(r, o.k(l_lo, F64), o.fma(r, o.k(l_hi, F64), b.fneg(u)))
    q = o.fma(o.horner(EXP64_P, u, F64), b.fmul(u, u), u)              # e^u - 1
    e = b.fadd(q, o.fma(u_lo, q, u_lo))                                 # e^(u + u_lo) - 1
    res = _scale2_64(o, b.fadd(o.k(1.0, F64), e), n)
    # signs and special cases (C99 Annex F, what NumPy's pow gives)
    ay = o.call("fabs", [y])
    is_int = o.eq(o.call("trunc", [y]), y)
    small_y = o.lt(ay, o.k(9007199254740992.0, F64))                    # 2^53
    yi = b.fptosi(o.sel(small_y, y, o.k(0.0, F64)), o.ty(I64))
    odd = b.and_(b.and_(is_int, small_y),
                 b.icmp_signed("!=", b.and_(yi, o.k(1, I64)), o.k(0, I64)))
    sign = b.and_(o.bits(x, I64), o.k(-0x8000000000000000, I64))
    res = o.floats(b.xor(o.bits(res, I64), o.sel(odd, sign, o.k(0, I64))), F64)
    neg_finite = b.and_(o.lt(x, o.k(0.0, F64)), o.lt(o.k(-math.inf, F64), x))
    res = o.sel(b.and_(neg_finite, b.not_(is_int)), o.k(math.nan, F64), res)
    res = o.sel(b.or_(o.isnan(x), o.isnan(y)), b.fadd(x, y), res)
    one = b.or_(b.or_(o.eq(y, o.k(0.0, F64)), o.eq(x, o.k(1.0, F64))),
                b.and_(o.eq(x, o.k(-1.0, F64)), o.eq(ay, o.k(math.inf, F64))))
    return o.sel(one, o.k(1.0, F64), res)


_UNARY64: dict[Intrinsic, Callable[[_Ops, ir.Value], ir.Value]] = {
    Intrinsic.EXP: exp64, Intrinsic.LOG: log64, Intrinsic.TANH: tanh64,
    Intrinsic.SIGMOID: sigmoid64, Intrinsic.ERF: erf64,
    Intrinsic.SIN: lambda o, x: _sincos64(o, x, False),
    Intrinsic.COS: lambda o, x: _sincos64(o, x, True),
}
#: the intrinsics computed inline for float64
INLINE_F64 = frozenset(_UNARY64) | {Intrinsic.POW}


def emit_f64(cg: "CodeGen", func: Intrinsic, args: Sequence[ir.Value], lanes: int) -> ir.Value:
    """``func(*args)`` on float64 registers (scalars or ``lanes``-wide vectors), inline."""
    if func is Intrinsic.POW:
        return pow64(_Ops(cg, lanes), args[0], args[1])
    return _UNARY64[func](_Ops(cg, lanes), args[0])
