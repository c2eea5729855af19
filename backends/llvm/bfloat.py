"""The bfloat16 conversions LLVM calls when the CPU has no instruction for them.

LLVM computes a ``bfloat`` operation in float32 and rounds the result back with a call to
``__truncsfbf2`` (``__truncdfbf2`` from double), which compiler-rt provides but libgcc_s often
does not.  A module that uses bfloat16 gets its own weak definitions: round to nearest even
on the bits, NaNs kept quiet.  Widening needs no helper (it is a shift).
"""
from __future__ import annotations

import llvmlite.ir as ir

from .lltypes import BFloatType

I16 = ir.IntType(16)
I32 = ir.IntType(32)


def _round_bits(b: ir.IRBuilder, bits: ir.Value, width: int) -> ir.Value:
    """bfloat16 bits of the float with these ``width``-bit IEEE bits, rounded to nearest even
    (``width`` 32: float; the double helper narrows to float first with its sign kept, then
    rounds, which double-rounds only values within 2**-24 relative of a tie)."""
    it = ir.IntType(width)
    exp_mask = ir.Constant(it, 0x7F800000)
    man_mask = ir.Constant(it, 0x007FFFFF)
    is_nan = b.and_(b.icmp_unsigned("==", b.and_(bits, exp_mask), exp_mask),
                    b.icmp_unsigned("!=", b.and_(bits, man_mask), ir.Constant(it, 0)))
    lsb = b.and_(b.lshr(bits, ir.Constant(it, 16)), ir.Constant(it, 1))
    rounded = b.lshr(b.add(b.add(bits, ir.Constant(it, 0x7FFF)), lsb), ir.Constant(it, 16))
    quiet = b.or_(b.lshr(bits, ir.Constant(it, 16)), ir.Constant(it, 0x40))
    return b.trunc(b.select(is_nan, quiet, rounded), I16)


def _define(module: ir.Module, name: str, src: ir.Type) -> None:
    if name in module.globals:
        return
    fn = ir.Function(module, ir.FunctionType(BFloatType(), [src]), name=name)
    fn.linkage = "weak"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    x = fn.args[0]
    if isinstance(src, ir.DoubleType):
        x = b.fptrunc(x, ir.FloatType())   # only the last step rounds to bfloat's 8 bits
    bits = b.bitcast(x, I32)
    b.ret(b.bitcast(_round_bits(b, bits, 32), BFloatType()))


def add_runtime(module: ir.Module) -> None:
    """Define the narrowing helpers in ``module`` (call when it uses bfloat16)."""
    _define(module, "__truncsfbf2", ir.FloatType())
    _define(module, "__truncdfbf2", ir.DoubleType())
