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


def check_numerical_grads(function: Any, input_values: Any, grad_values: Any,
                          function_value: Any = None, delta: float = 1e-3, atol: float = 1e-2,
                          rtol: float = 0.1) -> None:
    """Check ``grad_values`` against central finite differences of ``function`` (a scalar
    function of ``input_values``, a list or a dict of arrays), element by element (in
    float64): the distance between the two gradients must be at most
    ``atol * sqrt(size) + rtol * |numerical gradient|`` (norms over each input's elements;
    float32 forward functions make single elements noisy)."""
    named = isinstance(input_values, dict)
    names = list(input_values) if named else list(range(len(input_values)))
    values = {n: np.array(_np(input_values[n]), dtype=np.float64) for n in names}
    grads = grad_values if isinstance(grad_values, dict) else dict(zip(names, grad_values))

    def call(vals: dict) -> float:
        args = {n: v.astype(np.asarray(_np(input_values[n])).dtype) for n, v in vals.items()}
        return float(function(**args) if named else function(*[args[n] for n in names]))

    for n in names:
        if n not in grads:
            continue
        grad = np.asarray(_np(grads[n]), dtype=np.float64)
        if grad.shape != values[n].shape:
            raise AssertionError(f"check_numerical_grads: gradient of input {n!r} has shape "
                                 f"{grad.shape}, the input {values[n].shape}")
        numeric = np.zeros_like(grad)
        flat = values[n].reshape(-1)
        for k in range(flat.size):
            old = flat[k]
            flat[k] = old + delta
            up = call(values)
            flat[k] = old - delta
            down = call(values)
            flat[k] = old
            numeric.reshape(-1)[k] = (up - down) / (2 * delta)
        dist = float(np.sqrt(np.sum((grad - numeric) ** 2)))
        norm = float(np.sqrt(np.sum(numeric ** 2)))
        if not (np.isfinite(dist) and np.isfinite(norm)):
            raise AssertionError(f"check_numerical_grads: input {n!r}: NaN or infinity "
                                 f"(analytical {grad}, numerical {numeric})")
        if dist > atol * np.sqrt(grad.size) + rtol * norm:
            bad = np.abs(grad - numeric) > atol + rtol * np.abs(numeric)
            k = int(np.argmax(bad.reshape(-1)))
            raise AssertionError(f"check_numerical_grads: input {n!r}: distance {dist:.4g} > "
                                 f"{atol} * sqrt({grad.size}) + {rtol} * {norm:.4g}; "
                                 f"{int(bad.sum())} of {bad.size} elements differ, e.g. element "
                                 f"{k}: analytical {grad.reshape(-1)[k]}, numerical "
                                 f"{numeric.reshape(-1)[k]}")


__all__ = ["check_numerical_grads", "assert_allclose", "device_enabled", "enabled_targets",
           "requires_cuda", "requires_gpu", "requires_llvm"]
