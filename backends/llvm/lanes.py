"""Values of the expression generator: uniform scalars, ramps, and vectors.

Inside a widened (vectorized) loop every expression has one value per lane.  Most
index arithmetic stays *affine* in the loop variable, so the generator keeps it
symbolic as a ``RAMP`` (``base + stride * lane``) for as long as it can: a load at
a ramp of stride 1 is one contiguous vector load.  Values that do not depend on the
lane stay ``UNIFORM`` scalars.  Outside widened loops everything is uniform.
"""
from __future__ import annotations

from typing import Any

import llvmlite.ir as ir
from llvmlite.ir import instructions as _ins

from .lltypes import I32, I64

UNIFORM, RAMP, VECTOR = 0, 1, 2


class VVal:
    """A value of ``lanes`` lanes.

    ``UNIFORM``: ``value`` is a scalar shared by every lane (``const`` holds its
    Python value when it is a compile-time constant).  ``RAMP``: lane ``k`` is
    ``value + stride * k`` (integers only, wrapping at the width).  ``VECTOR``:
    ``value`` is an LLVM vector.
    """

    __slots__ = ("kind", "value", "stride", "const")

    def __init__(self, kind: int, value: ir.Value, stride: int = 0, const: Any = None):
        self.kind = kind
        self.value = value
        self.stride = stride
        self.const = const

    @property
    def is_uniform(self) -> bool:
        return self.kind == UNIFORM

    def __repr__(self) -> str:
        return f"VVal({['uniform', 'ramp', 'vector'][self.kind]}, {self.value}, {self.stride})"


def uniform(value: ir.Value, const: Any = None) -> VVal:
    return VVal(UNIFORM, value, 0, const)


def splat(builder: ir.IRBuilder, value: ir.Value, lanes: int) -> ir.Value:
    """A vector with ``value`` in every lane."""
    vt = ir.VectorType(value.type, lanes)
    if isinstance(value, ir.Constant):
        if is_zero(value):
            return ir.Constant(vt, None)
        return ir.Constant(vt, [value] * lanes)
    # zeroinitializer operands print far shorter than <N x undef> (llvmlite is slow)
    one = builder.insert_element(ir.Constant(vt, None), value, ir.Constant(I32, 0))
    return builder.shuffle_vector(one, ir.Constant(vt, None),
                                  ir.Constant(ir.VectorType(I32, lanes), None))


def is_zero(value: Any) -> bool:
    """True for a scalar integer or float constant equal to zero."""
    return isinstance(value, ir.Constant) and isinstance(value.constant, (int, float)) \
        and value.constant == 0


def lane_offsets(itype: ir.IntType, stride: int, lanes: int, start: int = 0) -> ir.Constant:
    """The constant vector ``<start, start+stride, start+2*stride, ...>`` (wrapped to
    ``itype``)."""
    mask = (1 << itype.width) - 1
    return ir.Constant(ir.VectorType(itype, lanes),
                       [(start + k * stride) & mask for k in range(lanes)])


def materialize(builder: ir.IRBuilder, v: VVal, lanes: int) -> ir.Value:
    """``v`` as an LLVM vector of ``lanes`` lanes.

    A ramp whose base is ``x + c`` (c a constant) is ``splat(x) + <c, c+s, ...>``: the
    ramps of an unrolled loop (``ko*32 + 8``, ``ko*32 + 16``, ...) then share one splat and
    cost one vector add each (LLVM does not move the constant out of the splat itself)."""
    if v.kind == VECTOR:
        return v.value
    if v.kind != RAMP:
        return splat(builder, v.value, lanes)
    base, offset = _constant_offset(builder, v.value)
    vec = splat(builder, base, lanes)
    offsets = lane_offsets(v.value.type, v.stride, lanes, offset)
    return vec if is_zero_vector(offsets) else builder.add(vec, offsets)


def _constant_offset(builder: ir.IRBuilder, value: ir.Value) -> tuple[ir.Value, int]:
    """``(x, c)`` with ``value == x + c`` (integers, wrapping): constants are taken out of
    ``add`` (either operand, recursively), ``sub`` of a constant and ``trunc``; what is
    left is rebuilt (the same values in every copy, so LLVM merges them)."""
    if isinstance(value, ir.Constant) and isinstance(value.constant, int):
        return ir.Constant(value.type, 0), value.constant
    if not isinstance(value, _ins.Instruction):
        return value, 0
    ops = value.operands
    if value.opname == "trunc":
        inner, c = _constant_offset(builder, ops[0])
        return (value, 0) if c == 0 else (builder.trunc(inner, value.type), c)
    if value.opname == "add" and len(ops) == 2:
        (xa, ca), (xb, cb) = (_constant_offset(builder, o) for o in ops)
        if ca == 0 and cb == 0:
            return value, 0
        if is_zero(xa):
            return xb, ca + cb
        if is_zero(xb):
            return xa, ca + cb
        return builder.add(xa, xb), ca + cb
    if value.opname == "sub" and len(ops) == 2 and isinstance(ops[1], ir.Constant) \
            and isinstance(ops[1].constant, int):
        x, c = _constant_offset(builder, ops[0])
        return x, c - ops[1].constant
    return value, 0


def is_zero_vector(value: ir.Constant) -> bool:
    return all(c == 0 for c in value.constant)


class _VectorGEP(_ins.Instruction):
    """``getelementptr T, T* base, <N x i64> idx`` (llvmlite's GEP refuses vector indices)."""

    def __init__(self, parent: Any, ptr: ir.Value, index: ir.Value, name: str = ""):
        super().__init__(parent, ir.VectorType(ptr.type, index.type.count), "getelementptr",
                         [ptr, index], name=name)

    def descr(self, buf: list) -> None:
        ptr, idx = self.operands
        buf.append(f"getelementptr {ptr.type.pointee}, {ptr.type} {ptr.get_reference()}, "
                   f"{idx.type} {idx.get_reference()}\n")


def vector_gep(builder: ir.IRBuilder, ptr: ir.Value, index: ir.Value) -> ir.Value:
    """A vector of pointers ``ptr + index[k]`` (``index`` an ``<N x i64>``)."""
    instr = _VectorGEP(builder.block, ptr, index)
    builder._insert(instr)
    return instr


def index64(builder: ir.IRBuilder, value: ir.Value) -> ir.Value:
    """Sign-extend an integer index (scalar or vector) to 64 bits."""
    t = value.type
    width = t.element.width if isinstance(t, ir.VectorType) else t.width
    if width == 64:
        return value
    target = ir.VectorType(I64, t.count) if isinstance(t, ir.VectorType) else I64
    return builder.sext(value, target)
