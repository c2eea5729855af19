"""Shared helpers of the graph tests."""
import numpy as np
import torch


def close(actual, expected, tol=1e-4):
    """Max error relative to the expected output's scale (MODEL.md's measure)."""
    if isinstance(expected, torch.Tensor):
        expected = expected.detach().numpy()
    expected = np.asarray(expected, dtype=np.float64)
    actual = np.asarray(actual)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    scale = max(1.0, float(np.abs(expected).max()))
    err = float(np.abs(actual.astype(np.float64) - expected).max())
    assert err <= tol * scale, f"max error {err} (scale {scale})"


def rand(rng, *shape, lo=None, hi=None):
    if lo is not None:
        return rng.uniform(lo, hi, shape).astype(np.float32)
    return rng.standard_normal(shape).astype(np.float32)


def t(a):
    return torch.from_numpy(np.asarray(a))


def bn_params(rng, c):
    """Non-trivial batch-norm statistics: gamma, beta, mean, var."""
    return (rand(rng, c, lo=0.5, hi=1.5), rand(rng, c), rand(rng, c),
            rand(rng, c, lo=0.3, hi=2.0))
