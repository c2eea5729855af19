"""``tvm.testing``: NumPy-backed assertions and target helpers."""
from __future__ import annotations

from typing import Any

import numpy as np

from .runtime import NDArray, enabled


def _np(x: Any) -> Any:
    return x.numpy() if isinstance(x, NDArray) else x


def assert_allclose(actual: Any, desired: Any, rtol: float = 1e-7, atol: float = 1e-7) -> None:
    """``np.testing.assert_allclose`` with TVM's defaults (``rtol=atol=1e-7``); takes
    NDArrays or NumPy arrays, and checks shapes first."""
    actual, desired = np.asanyarray(_np(actual)), np.asanyarray(_np(desired))
    np.testing.assert_allclose(actual.shape, desired.shape)
    np.testing.assert_allclose(actual, desired, rtol=rtol, atol=atol, verbose=True)


def device_enabled(target: str) -> bool:
    return enabled(target)


def enabled_targets() -> list:
    from .runtime import device
    return [(t, device(t)) for t in ("llvm", "cuda") if enabled(t)]


def requires_cuda(func: Any) -> Any:
    """A pytest mark skipping the test when no CUDA device is present."""
    import pytest
    return pytest.mark.skipif(not enabled("cuda"), reason="needs a CUDA device")(func)


def requires_llvm(func: Any) -> Any:
    return func


requires_gpu = requires_cuda
__all__ = ["assert_allclose", "device_enabled", "enabled_targets", "requires_cuda",
           "requires_gpu", "requires_llvm"]
