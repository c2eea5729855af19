"""``tvm.nd``: ``array``, ``empty`` and ``NDArray``."""
from __future__ import annotations

from typing import Any

import numpy as np

from .runtime import Device, NDArray, cpu


def array(arr: Any, device: "Device | None" = None) -> NDArray:
    """An ``NDArray`` holding a copy of ``arr`` (a NumPy array or another NDArray)."""
    data = arr.numpy() if isinstance(arr, NDArray) else np.array(arr)
    return NDArray(data, device if device is not None else cpu(0))


def empty(shape: Any, dtype: str = "float32", device: "Device | None" = None) -> NDArray:
    """An uninitialized ``NDArray``."""
    return NDArray(np.empty(tuple(int(s) for s in shape), dtype=dtype),
                   device if device is not None else cpu(0))


__all__ = ["array", "empty", "NDArray"]
