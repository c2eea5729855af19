"""Argument checking before native code runs: every bad call raises a TDSLError."""
from __future__ import annotations

import numpy as np
import pytest

from tdsl.errors import DTypeError, ShapeError, TDSLError
from tdsl.expr import Const, SizeVar
from tdsl.runtime import bind_arguments
from tdsl.stmt import Buffer, SeqStmt

try:
    from .llvm_irbuild import load, loop, prim, store
except ImportError:
    from llvm_irbuild import load, loop, prim, store

from tdsl.backends.llvm import build

RNG = np.random.default_rng(3)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TDSL_CACHE_DIR", str(tmp_path / "cache"))


def rowsum_func():
    """Out[i] = sum_j A[i, j] + B[j]; A is (n, m), B is (m,), Out is (n,), W is (2*n,)."""
    n, m = SizeVar("n"), SizeVar("m")
    A = Buffer("A", [n, m], "float32")
    B = Buffer("B", [m], "float32")
    Out = Buffer("Out", [n], "float32")
    W = Buffer("W", [2 * n], "float32")
    body = loop("i", n, lambda i: loop("j", m, lambda j: store(
        Out, load(Out, i) + load(A, i, j) + load(B, j), i)))
    wbody = loop("i", 2 * n, lambda i: store(W, Const(1.0, "float32"), i))
    return prim("rowsum", [A, B, Out, W], SeqStmt([body, wbody]), [n, m])


@pytest.fixture(scope="module")
def mod():
    return build(rowsum_func())


def good(n=5, m=7):
    return [RNG.standard_normal((n, m)).astype("float32"), RNG.standard_normal(m).astype("float32"),
            RNG.standard_normal(n).astype("float32"), RNG.standard_normal(2 * n).astype("float32")]


def test_good_call_and_symbolic_sizes_from_several_shapes(mod):
    a, b, out, w = good()
    want = out + (a + b).sum(axis=1)
    mod(a, b, out, w)
    np.testing.assert_allclose(out, want, rtol=1e-5)
    np.testing.assert_array_equal(w, np.ones(10, "float32"))
    arrs, sizes = bind_arguments(mod.func, good(3, 4))
    assert sorted(sizes.values()) == [3, 4]


@pytest.mark.parametrize("count", [0, 3, 5])
def test_wrong_argument_count(mod, count):
    args = (good() + good())[:count]
    with pytest.raises(ShapeError, match="too (few|many) arguments"):
        mod(*args)


def test_wrong_dtype(mod):
    a, b, out, w = good()
    with pytest.raises(DTypeError, match="float64"):
        mod(a.astype("float64"), b, out, w)
    with pytest.raises(DTypeError):
        mod(a.astype(">f4"), b, out, w)  # byte-swapped


def test_not_an_array(mod):
    a, b, out, w = good()
    with pytest.raises(DTypeError, match="NumPy array"):
        mod(a.tolist(), b, out, w)


def test_wrong_ndim(mod):
    a, b, out, w = good()
    with pytest.raises(ShapeError, match="dimension"):
        mod(a.ravel(), b, out, w)


def test_inconsistent_size_var_names_both_args(mod):
    a, b, out, w = good()
    with pytest.raises(ShapeError, match=r"'m'.*A\.shape\[1\] = 7.*B\.shape\[0\] = 6"):
        mod(a, b[:6].copy(), out, w)


def test_shape_expression_checked(mod):
    a, b, out, w = good()
    with pytest.raises(ShapeError, match=r"2\*n = 10"):
        mod(a, b, out, np.zeros(9, "float32"))


def test_zero_size_dimension(mod):
    a, b, out, w = good()
    with pytest.raises(ShapeError, match="size 0"):
        mod(a[:0], b, out[:0], w[:0])


def test_non_contiguous(mod):
    a, b, out, w = good(5, 14)
    with pytest.raises(ShapeError, match="ascontiguousarray"):
        mod(a[:, ::2], b[:7].copy(), out, w)


def test_misaligned(mod):
    a, b, out, w = good()
    raw = np.zeros(b.nbytes + 1, np.uint8)
    mis = np.frombuffer(raw.data, dtype="float32", count=b.size, offset=1)
    assert mis.ctypes.data % 4
    with pytest.raises(ShapeError, match="aligned"):
        mod(a, mis, out, w)


def test_read_only_output(mod):
    a, b, out, w = good()
    out.flags.writeable = False
    with pytest.raises(ShapeError, match="read-only"):
        mod(a, b, out, w)
    a.flags.writeable = False  # a read-only input is fine
    out.flags.writeable = True
    mod(a, b, out, w)


def test_output_overlapping_input(mod):
    a, b, out, w = good()
    with pytest.raises(ShapeError, match="overlaps"):
        mod(a, b, w[:5], w)


class DLPackOnly:
    """An object exposing only the DLPack protocol (like a PyTorch CPU tensor)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_dlpack_arguments(mod):
    a, b, out, w = good()
    want = out + (a + b).sum(axis=1)
    mod(DLPackOnly(a), DLPackOnly(b), DLPackOnly(out), DLPackOnly(w))
    np.testing.assert_allclose(out, want, rtol=1e-5)


def test_torch_tensors_when_installed(mod):
    torch = pytest.importorskip("torch")
    a, b, out, w = (torch.from_numpy(x) for x in good())
    want = out + (a + b).sum(dim=1)
    mod(a, b, out, w)
    assert torch.allclose(out, want, rtol=1e-5)


def test_every_error_is_a_tdsl_error():
    assert issubclass(ShapeError, TDSLError) and issubclass(DTypeError, TDSLError)
