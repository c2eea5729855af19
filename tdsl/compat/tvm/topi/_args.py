"""Argument forms TVM's operators accept: strides/dilations as an int or a pair, padding
as an int, a pair, four ints or ``"SAME"``/``"VALID"`` (``topi.nn.utils.get_pad_tuple``)."""
from __future__ import annotations

from typing import Any

from tdsl.errors import ShapeError


def pair(v: Any, what: str, op: str = "topi") -> tuple[int, int]:
    """``(h, w)`` from an int or a pair of ints."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v, v
    if isinstance(v, (tuple, list)) and len(v) == 2 and all(isinstance(x, int) for x in v):
        return int(v[0]), int(v[1])
    raise ShapeError(f"{op}: {what} must be an int or a pair of ints, got {v!r}")


def pad4(padding: Any, kh: int, kw: int, op: str = "topi") -> tuple[int, int, int, int]:
    """``(top, left, bottom, right)`` for a window of ``kh`` x ``kw`` (dilated) elements."""
    if isinstance(padding, str):
        if padding.upper() == "VALID":
            return 0, 0, 0, 0
        if padding.upper() == "SAME":
            return (kh - 1) // 2, (kw - 1) // 2, kh // 2, kw // 2
        raise ShapeError(f"{op}: padding must be 'SAME', 'VALID' or ints, got {padding!r}")
    if isinstance(padding, int) and not isinstance(padding, bool):
        p = [padding] * 4
    elif isinstance(padding, (tuple, list)) and len(padding) in (2, 4) \
            and all(isinstance(x, int) for x in padding):
        p = [int(x) for x in padding]
        p = p * 2 if len(p) == 2 else p
    else:
        raise ShapeError(f"{op}: padding must be an int, a pair or four ints, got {padding!r}")
    if min(p) < 0:
        raise ShapeError(f"{op}: padding must be non-negative, got {padding!r}")
    return p[0], p[1], p[2], p[3]
