"""tdsl dtypes as LLVM types, constants, and small llvmlite.ir helpers."""
from __future__ import annotations

from typing import Any, Mapping

import llvmlite.ir as ir
from llvmlite.ir.values import FunctionAttributes

from tdsl.dtype import DType

class BFloatType(ir.types._BaseFloatType):
    """LLVM's ``bfloat`` (llvmlite has no class for it): 16 bits, float32's exponent range.
    LLVM computes each operation on it in float32 and rounds to nearest even, as
    ``ml_dtypes.bfloat16`` does."""

    null = "0.0"
    intrinsic_name = "bf16"

    def __str__(self) -> str:
        return "bfloat"

    def format_constant(self, value: float) -> str:
        import ml_dtypes
        import numpy as np
        # the exact value as a double in hex, which LLVM accepts when bfloat holds it exactly
        exact = float(np.array(value, dtype=np.float32).astype(ml_dtypes.bfloat16)
                      .astype(np.float64))
        return "0x" + np.array(exact, dtype=">f8").tobytes().hex().upper()


BFloatType._create_instance()

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
VOID = ir.VoidType()
I8P = I8.as_pointer()

_SCALAR = {
    DType.BOOL: I1, DType.INT8: I8, DType.UINT8: I8, DType.INT16: ir.IntType(16),
    DType.UINT16: ir.IntType(16), DType.INT32: I32, DType.UINT32: I32, DType.INT64: I64,
    DType.UINT64: I64,
    DType.FLOAT16: ir.HalfType(), DType.BFLOAT16: BFloatType(), DType.FLOAT32: ir.FloatType(), DType.FLOAT64: ir.DoubleType(),
}


def scalar_type(dtype: DType) -> ir.Type:
    """The register type of ``dtype`` (bool is ``i1``)."""
    return _SCALAR[dtype]


def mem_type(dtype: DType) -> ir.Type:
    """The in-memory element type of ``dtype`` (bool is stored as one byte, 0 or 1)."""
    return I8 if dtype is DType.BOOL else _SCALAR[dtype]


def value_type(dtype: DType, lanes: int) -> ir.Type:
    t = _SCALAR[dtype]
    return t if lanes == 1 else ir.VectorType(t, lanes)


def const(dtype: DType, value: Any, lanes: int = 1) -> ir.Constant:
    """A constant of ``dtype`` (integers wrap to the width; a splat when lanes > 1)."""
    t = _SCALAR[dtype]
    if dtype.is_bool:
        v: Any = int(bool(value))
    elif dtype.is_int:
        v = wrap_int(int(value), dtype)
    else:
        v = float(value)
    c = ir.Constant(t, v)
    if lanes == 1:
        return c
    return ir.Constant(ir.VectorType(t, lanes), [c] * lanes)


def wrap_int(value: int, dtype: DType) -> int:
    """Two's complement wraparound of ``value`` to ``dtype`` (unsigned stays >= 0)."""
    bits = dtype.bits
    value &= (1 << bits) - 1
    if dtype.is_signed and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


class StringAttributes(FunctionAttributes):
    """Function attributes that also print key/value string attributes
    (``"prefer-vector-width"="512"``), which llvmlite's own set refuses."""

    def __init__(self, strings: "Mapping[str, str] | None" = None):
        super().__init__()
        self.strings = dict(strings or {})

    def __len__(self) -> int:
        return super().__len__() + len(self.strings)

    def __bool__(self) -> bool:
        return len(self) > 0

    def _to_list(self, ret_type: Any) -> list[str]:
        return super()._to_list(ret_type) + [f'"{k}"="{v}"' for k, v in self.strings.items()]


def loop_metadata(module: ir.Module, *hints: tuple[str, Any]) -> Any:
    """A self-referential ``!llvm.loop`` node carrying ``hints`` such as
    ``("llvm.loop.vectorize.enable", True)`` or ``("llvm.loop.unroll.full", None)``."""
    ops = []
    for name, value in hints:
        items: list[Any] = [ir.MetaDataString(module, name)]
        if isinstance(value, bool):
            items.append(ir.Constant(I1, int(value)))
        elif isinstance(value, int):
            items.append(ir.Constant(I32, value))
        ops.append(module.add_metadata(items))
    count = getattr(module, "_tdsl_loop_ids", 0)
    module._tdsl_loop_ids = count + 1   # a unique placeholder keeps llvmlite from sharing nodes
    node = module.add_metadata([ir.MetaDataString(module, f"tdsl.loop.{count}")] + ops)
    node.operands = (node,) + tuple(ops)
    return node


def type_suffix(t: ir.Type) -> str:
    """LLVM's overload suffix of a type: ``f32``, ``v16f32``, ``i64``..."""
    if isinstance(t, ir.VectorType):
        return f"v{t.count}{type_suffix(t.element)}"
    if isinstance(t, ir.HalfType):
        return "f16"
    if isinstance(t, BFloatType):
        return "bf16"
    if isinstance(t, ir.FloatType):
        return "f32"
    if isinstance(t, ir.DoubleType):
        return "f64"
    if isinstance(t, ir.IntType):
        return f"i{t.width}"
    from tdsl.errors import BuildError
    raise BuildError(f"no LLVM intrinsic suffix for type {t}")
