"""CUDA device arrays as kernel arguments (``__cuda_array_interface__``).

``as_device_array(obj)`` describes a CuPy/PyTorch/Numba CUDA array (data pointer,
shape, dtype, strides, read-only flag) or returns None for anything else.  Its
``shadow()`` is a NumPy array header over the *device* address that is never
dereferenced: passing it to ``bind_arguments`` runs exactly the checks a host
array gets (dtype, rank, shape and symbolic sizes, contiguity, writability,
alignment, overlap of outputs with other arguments) without touching the data.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ..errors import DTypeError

#: DLPack's device type of CUDA memory.
_DLPACK_CUDA = (2, 13)  # kDLCUDA, kDLCUDAManaged


@dataclass(frozen=True)
class DeviceArray:
    obj: Any
    ptr: int
    shape: tuple[int, ...]
    typestr: str
    strides: Optional[tuple[int, ...]]   # bytes; None: C-contiguous
    readonly: bool

    def shadow(self) -> np.ndarray:
        """A NumPy view of the device address for argument checks only (never read it)."""
        holder = _Interface({"shape": self.shape, "typestr": self.typestr,
                             "data": (self.ptr or 1, self.readonly),
                             "strides": self.strides, "version": 3})
        return np.asarray(holder)


class _Interface:
    def __init__(self, iface: dict):
        self.__array_interface__ = iface


def as_device_array(obj: Any) -> "DeviceArray | None":
    """The description of a CUDA array argument, or None for host objects."""
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is None:
        dev = getattr(obj, "__dlpack_device__", None)
        if dev is not None:
            try:
                kind = int(dev()[0])
            except (TypeError, ValueError, IndexError):
                return None
            if kind in _DLPACK_CUDA:
                raise DTypeError(f"{type(obj).__name__} is a CUDA tensor without "
                                 f"__cuda_array_interface__; pass a CuPy array or PyTorch tensor "
                                 f"(both expose it), or a NumPy array")
        return None
    if cai.get("mask") is not None:
        raise DTypeError(f"{type(obj).__name__}: masked CUDA arrays are not supported")
    ptr, readonly = cai["data"]
    strides = cai.get("strides")
    return DeviceArray(obj, int(ptr or 0), tuple(int(s) for s in cai["shape"]), cai["typestr"],
                       None if strides is None else tuple(int(s) for s in strides),
                       bool(readonly))
