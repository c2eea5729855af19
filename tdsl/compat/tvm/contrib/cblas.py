"""``tvm.contrib.cblas``: ``matmul`` as an extern stage whose packed function
``tvm.contrib.cblas.matmul`` is NumPy's matrix product (registered on import)."""
from __future__ import annotations

from typing import Any

import numpy as np

import tdsl

NAME = "tvm.contrib.cblas.matmul"


def _numpy_matmul(a: np.ndarray, b: np.ndarray, c: np.ndarray, transa: Any = False,
                  transb: Any = False) -> None:
    c[...] = (a.T if transa else a) @ (b.T if transb else b)


if tdsl.get_global_func(NAME, allow_missing=True) is None:
    tdsl.register_func(NAME, _numpy_matmul)


def matmul(lhs: Any, rhs: Any, transa: bool = False, transb: bool = False,
           **kwargs: Any) -> Any:
    """``lhs @ rhs`` (either transposed) computed by the packed function."""
    n = lhs.shape[1] if transa else lhs.shape[0]
    m = rhs.shape[0] if transb else rhs.shape[1]
    return tdsl.extern((n, m), [lhs, rhs], lambda ins, outs: tdsl.call_packed(
        NAME, ins[0], ins[1], outs[0], transa, transb), name="C", **kwargs)
