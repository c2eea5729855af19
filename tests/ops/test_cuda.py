"""The default CUDA schedules: every operator lowers and builds to CUDA C (NVRTC is not
needed for the source); a few also run under the CPU emulation harness against NumPy."""
from __future__ import annotations

import numpy as np
import pytest

import tdsl as td
from tdsl import ops

from . import helpers as H
from .helpers import randn


def _cuda_ok() -> bool:
    try:
        import tdsl.backends.cuda  # noqa: F401
        return True
    except Exception:
        return False


pytestmark = pytest.mark.skipif(not _cuda_ok(), reason="tdsl.backends.cuda is unavailable")

n, m = td.var("n"), td.var("m")


def _cases():
    X = td.placeholder((n, m), name="X")
    V = td.placeholder((m,), name="V")
    A = td.placeholder((n, 24), name="A")
    B = td.placeholder((24, 40), name="B")
    W = td.placeholder((40, 24), name="W")
    D = td.placeholder((1, 4, 9, 9), name="D")
    K = td.placeholder((8, 4, 3, 3), name="K")
    Kd = td.placeholder((4, 1, 3, 3), name="Kd")
    Dh = td.placeholder((1, 9, 9, 4), name="Dh")
    Kh = td.placeholder((3, 3, 4, 8), name="Kh")
    T = td.placeholder((2, n, 24), name="T")
    return {
        "elementwise": ([X, V], ops.gelu(ops.add(X, V))),
        "where": ([X, V], ops.where(ops.greater(X, V), X, 0.0)),
        "transpose": ([X], ops.transpose(X)),
        "pad_concat": ([X], ops.concatenate([ops.pad(X, (1, 0), (0, 2)), ops.pad(X, (1, 0), (0, 2))], 1)),
        "reshape": ([A], ops.reshape(A, (-1, 8))),
        "sum": ([X], ops.sum(X, axis=1)),
        "mean0": ([X], ops.mean(X, axis=0)),
        "argmax": ([X], ops.argmax(X, axis=1)),
        "matmul": ([A, B], ops.matmul(A, B)),
        "dense_relu": ([A, W, td.placeholder((40,), name="b")], None),
        "batch_matmul": ([T, td.placeholder((2, 24, 16), name="U")], None),
        "conv2d_nchw": ([D, K], ops.conv2d(D, K, padding=1)),
        "conv2d_depthwise": ([D, Kd], ops.conv2d(D, Kd, padding=1, groups=4)),
        "conv2d_nhwc": ([Dh, Kh], ops.conv2d(Dh, Kh, stride=2, padding=1, layout="NHWC")),
        "max_pool": ([D], ops.max_pool2d(D, 3, 2, 1)),
        "avg_pool": ([D], ops.avg_pool2d(D, 2)),
        "softmax": ([X], ops.softmax(X)),
        "log_softmax": ([X], ops.log_softmax(X, axis=0)),
        "layernorm": ([X, V, V], None),
        "rmsnorm": ([X, V], ops.rmsnorm(X, V)),
    }


def _out(name, ins, out):
    if out is not None:
        return out
    if name == "dense_relu":
        return ops.dense(*ins, activation="relu")
    if name == "batch_matmul":
        return ops.batch_matmul(*ins)
    if name == "layernorm":
        return ops.layernorm(ins[0], ins[1], ins[2])
    raise KeyError(name)


CASES = sorted(_cases())


@pytest.mark.parametrize("name", CASES)
def test_builds_to_cuda_source(name):
    ins, out = _cases()[name]
    out = _out(name, ins, out)
    s = ops.schedule(out, "cuda")
    mod = td.build(s, list(dict.fromkeys(ins)) + [out], target="cuda")
    src = mod.get_source()
    assert "__global__" in src and "blockIdx.x" in src and "threadIdx.x" in src


def test_emulated_against_numpy():
    """dense + relu (one kernel), softmax, a padded conv2d: run by the CPU emulator."""
    A = td.placeholder((n, 24), name="A")
    W = td.placeholder((40, 24), name="W")
    b = td.placeholder((40,), name="b")
    y = ops.dense(A, W, b, activation="relu")
    mod = td.build(ops.schedule(y, "cuda"), [A, W, b, y], target="cuda")
    a, w, bb = randn(5, 24), randn(40, 24), randn(40)
    out = np.zeros((5, 40), "float32")
    mod.emulate(a, w, bb, out)
    np.testing.assert_allclose(out, np.maximum(a @ w.T + bb, 0), rtol=1e-4, atol=1e-4)

    X = td.placeholder((n, m), name="X")
    sm = ops.softmax(X)
    mod = td.build(ops.schedule(sm, "cuda"), [X, sm], target="cuda")
    x = randn(3, 70)
    out = np.zeros_like(x)
    mod.emulate(x, out)
    np.testing.assert_allclose(out, H.softmax(x, -1), rtol=1e-5, atol=1e-6)

    D = td.placeholder((1, 3, 7, 6), name="D")
    K = td.placeholder((5, 3, 3, 3), name="K")
    c = ops.conv2d(D, K, stride=2, padding=1)
    mod = td.build(ops.schedule(c, "cuda"), [D, K, c], target="cuda")
    d, k = randn(1, 3, 7, 6), randn(5, 3, 3, 3)
    out = np.zeros((1, 5, 4, 3), "float32")
    mod.emulate(d, k, out)
    np.testing.assert_allclose(out, H.conv2d_nchw(d, k, (2, 2), (1, 1, 1, 1)), rtol=1e-4, atol=1e-4)
