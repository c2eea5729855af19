"""Lane-varying loads that are no stride-1 ramp as first written: a small constant stride
(a stride-2 convolution's input) is one contiguous masked load and a shuffle, not a gather,
and never reads past the last lane's element nor a masked-off lane's; a fused loop's
``f // W, f % W`` in consecutive dimensions flattens back to a ramp (a contiguous load)."""
import numpy as np
import pytest

import tdsl as td
from tests.guard_pages import guarded_copy


def _strided(stride, n, lanes, dtype="float32", offset=0):
    """B[i] = A[stride * i + offset] * 2, i in [0, n), vectorized by ``lanes`` (a guarded
    tail when ``lanes`` does not divide ``n``)."""
    A = td.placeholder((stride * (n - 1) + 1 + offset,), dtype, name="A")
    B = td.compute((n,), lambda i: A[stride * i + offset] * 2, name="B")
    s = td.create_schedule(B.op)
    o, v = s[B].split(B.op.axis[0], factor=lanes)
    s[B].vectorize(v)
    return td.build(s, [A, B], target="llvm")


@pytest.mark.parametrize("stride", [2, 3, 4])
@pytest.mark.parametrize("n, lanes", [(64, 16), (37, 16), (13, 8), (5, 8)])
def test_strided_load_matches_numpy_at_the_end_of_an_array(stride, n, lanes):
    rng = np.random.default_rng(stride * 100 + n)
    for offset in (0, 1):
        f = _strided(stride, n, lanes, offset=offset)
        a = rng.standard_normal(stride * (n - 1) + 1 + offset).astype("float32")
        # the last lane's element is the array's last one: a read past it faults
        out = np.full(n, 7, "float32")
        f(guarded_copy(a), out)
        np.testing.assert_array_equal(out, a[offset::stride][:n] * 2)


@pytest.mark.parametrize("stride", [2, 4])
def test_small_strides_are_not_gathers(stride):
    ll = _strided(stride, 64, 16).get_source("ll")
    assert "masked.gather" not in ll
    assert "shufflevector" in ll


def test_large_strides_stay_gathers():
    """A stride past ``MAX_DEINTERLEAVE`` would load mostly unused elements: a gather."""
    from tdsl.backends.llvm.vectorize import MAX_DEINTERLEAVE
    f = _strided(MAX_DEINTERLEAVE + 3, 40, 16)
    assert "masked.gather" in f.get_source("ll")
    a = np.random.default_rng(0).standard_normal((MAX_DEINTERLEAVE + 3) * 39 + 1)
    a = a.astype("float32")
    out = np.zeros(40, "float32")
    f(a, out)
    np.testing.assert_array_equal(out, a[::MAX_DEINTERLEAVE + 3] * 2)


def test_strided_int8_and_float64_loads():
    rng = np.random.default_rng(3)
    for dtype, lanes in (("int8", 32), ("float64", 8)):
        f = _strided(2, 45, lanes, dtype)
        a = (rng.standard_normal(89) * 20).astype(dtype)
        out = np.zeros(45, dtype)
        f(guarded_copy(a), out)
        np.testing.assert_array_equal(out, (a[::2] * 2).astype(dtype))


@pytest.mark.parametrize("H, W", [(7, 7), (3, 5), (4, 4)])
def test_fused_div_mod_index_is_a_contiguous_load(H, W):
    """``Y[c, f] = X[c, f // W, f % W]`` (a reshape), vectorized along ``f``: the load is
    a ramp again once simplified, a contiguous (masked) load."""
    X = td.placeholder((6, H, W), name="X")
    Y = td.compute((6, H * W), lambda c, f: X[c, f // W, f % W] + 1, name="Y")
    s = td.create_schedule(Y.op)
    fo, fi = s[Y].split(Y.op.axis[1], factor=8)
    s[Y].vectorize(fi)
    mod = td.build(s, [X, Y], target="llvm")
    assert "masked.gather" not in mod.get_source("ll")
    x = np.random.default_rng(H * W).standard_normal((6, H, W)).astype("float32")
    out = np.zeros((6, H * W), "float32")
    mod(guarded_copy(x), out)
    np.testing.assert_array_equal(out, x.reshape(6, H * W) + 1)
