"""Scalar data types and their promotion rules."""
from __future__ import annotations

import enum

import numpy as np

from .errors import DTypeError


class DType(str, enum.Enum):
    """A scalar element type. Compares equal to its TVM/NumPy name (``"float32"``)."""

    BOOL = "bool"
    INT8 = "int8"
    UINT8 = "uint8"
    INT16 = "int16"
    UINT16 = "uint16"
    INT32 = "int32"
    UINT32 = "uint32"
    INT64 = "int64"
    UINT64 = "uint64"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    FLOAT32 = "float32"
    FLOAT64 = "float64"

    def __str__(self) -> str:  # "float32", not "DType.FLOAT32"
        return self.value

    @property
    def is_float(self) -> bool:
        return self in _FLOATS

    @property
    def is_int(self) -> bool:
        return self in _INTS

    @property
    def is_bool(self) -> bool:
        return self is DType.BOOL

    @property
    def is_signed(self) -> bool:
        return self in (DType.INT8, DType.INT16, DType.INT32, DType.INT64) or self.is_float

    @property
    def bits(self) -> int:
        return _BITS[self]

    @property
    def itemsize(self) -> int:
        return max(1, self.bits // 8)

    @property
    def numpy(self) -> np.dtype:
        """The NumPy dtype; bfloat16 is ``ml_dtypes.bfloat16`` (each operation on it computes
        in float32 and rounds to nearest even, as tdsl's backends do); imported here, so tdsl
        imports without ml_dtypes and only bfloat16 arrays need it."""
        if self is DType.BFLOAT16:
            try:
                import ml_dtypes
            except ImportError:
                raise DTypeError("bfloat16 arrays are ml_dtypes.bfloat16 NumPy arrays, and the "
                                 "ml_dtypes package is not installed (pip install ml_dtypes)"
                                 ) from None
            return np.dtype(ml_dtypes.bfloat16)
        return np.dtype(self.value)


_FLOATS = frozenset({DType.FLOAT16, DType.BFLOAT16, DType.FLOAT32, DType.FLOAT64})
_INTS = frozenset({DType.INT8, DType.UINT8, DType.INT16, DType.UINT16, DType.INT32,
                   DType.UINT32, DType.INT64, DType.UINT64})
_BITS = {
    DType.BOOL: 1, DType.INT8: 8, DType.UINT8: 8, DType.INT16: 16, DType.UINT16: 16,
    DType.INT32: 32, DType.UINT32: 32, DType.INT64: 64, DType.UINT64: 64,
    DType.FLOAT16: 16, DType.BFLOAT16: 16, DType.FLOAT32: 32, DType.FLOAT64: 64,
}

#: The dtype of loop variables, symbolic sizes and index arithmetic.
INDEX = DType.INT64


def as_dtype(value: "DType | str | np.dtype | type") -> DType:
    """Normalize a user-given dtype (``"float32"``, ``np.float32``, ``DType``) or raise."""
    if isinstance(value, DType):
        return value
    try:
        name = np.dtype(value).name if not isinstance(value, str) else value
        return DType(name)
    except (TypeError, ValueError):
        supported = ", ".join(d.value for d in DType)
        raise DTypeError(f"unsupported dtype {value!r}; tdsl supports {supported}") from None
