"""A widened loop's lane-varying access to a buffer on the kernel's stack is one scalar load
or store per lane, never a gather or scatter: a vector of pointers into an ``alloca``
counts, for LLVM, as the buffer escaping, and it then keeps every update of the buffer in
memory.  A convolution whose NCHW epilogue reads its accumulator tile transposed stored
the tile to the stack after every FMA of the reduction."""
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tdsl as td
from tdsl import ops


def _transpose_through_local(m, n, lanes, dtype="float32", shuffled=False):
    """``B = A.T + 1`` in a stack buffer written along its columns (a strided store), then
    ``C[j, i] = B[i, j] * 2`` (``B[(7 * i) % m, j]`` with ``shuffled``: a lane-varying index
    that is no ramp) read along them; both loops vectorized by ``lanes`` (masked where
    ``lanes`` does not divide ``m``)."""
    A = td.placeholder((n, m), dtype, name="A")
    B = td.compute((m, n), lambda i, j: A[j, i] + td.const(1, dtype), name="B")
    if shuffled:
        C = td.compute((n, m), lambda j, i: B[(i * 7) % m, j] * td.const(2, dtype), name="C")
    else:
        C = td.compute((n, m), lambda j, i: B[i, j] * td.const(2, dtype), name="C")
    s = td.create_schedule(C.op)
    s[B].set_scope("local")
    bi, bj = B.op.axis
    s[B].reorder(bj, bi)
    s[B].vectorize(s[B].split(bi, factor=lanes)[1])
    s[C].vectorize(s[C].split(C.op.axis[1], factor=lanes)[1])
    return td.build(s, [A, C], target="llvm")


@pytest.mark.parametrize("m", [16, 13])
def test_a_stack_buffer_is_neither_gathered_nor_scattered(m):
    f = _transpose_through_local(m, 6, 8)
    ll = f.get_source("ll")
    assert "masked.gather" not in ll and "masked.scatter" not in ll
    a = np.random.default_rng(m).standard_normal((6, m)).astype("float32")
    out = np.full((6, m), np.nan, "float32")
    f(a, out)
    np.testing.assert_array_equal(out, (a + 1) * 2)


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 40), n=st.integers(1, 9), lanes=st.sampled_from([4, 8, 16]),
       dtype=st.sampled_from(["float32", "float64", "int32"]), shuffled=st.booleans())
def test_stack_lanes_match_numpy(m, n, lanes, dtype, shuffled):
    f = _transpose_through_local(m, n, lanes, dtype, shuffled)
    rng = np.random.default_rng(m * 100 + n)
    a = (rng.standard_normal((n, m)) * 50).astype(dtype)
    out = np.zeros((n, m), dtype)
    f(a, out)
    b = a.T + 1
    rows = (np.arange(m) * 7) % m if shuffled else np.arange(m)
    np.testing.assert_array_equal(out, b[rows].T * 2)


def _blocks(ll: str) -> "list[str]":
    """The basic blocks of the optimized IR's functions (a label line starts each)."""
    return re.split(r"\n(?=[\w.\-\"]+:)", ll)


@pytest.mark.parametrize("size, cin, cout", [(56, 64, 32), (13, 9, 20)])
def test_a_convolutions_reduction_keeps_its_accumulators_in_registers(size, cin, cout):
    """NCHW output: the epilogue reads the ``width x channels`` accumulator tile along the
    columns.  In the optimized IR the reduction's block (its multiplies) stores nothing
    (56 x 56, 64 -> 32, each task padding its rows: stored on every tap before the fix)."""
    rng = np.random.default_rng(size)
    x = rng.standard_normal((1, cin, size, size)).astype("float32")
    w = rng.standard_normal((3, 3, cin, cout)).astype("float32")
    X = td.placeholder(x.shape, name="x")
    W = td.placeholder(w.shape, name="w")
    y = ops.relu(ops.conv2d(X, W, padding=1, kernel_layout="HWIO"))
    f = td.build(ops.schedule(y), [X, W, y])
    reductions = [b for b in _blocks(f.get_source("ll-opt")) if " fmul " in b]
    assert reductions
    for block in reductions:
        assert "store " not in block, block
    out = np.empty((1, cout, size, size), "float32")
    f(x, w, out)
    torch = pytest.importorskip("torch")
    ref = torch.relu(torch.nn.functional.conv2d(
        torch.from_numpy(x), torch.from_numpy(w.transpose(3, 2, 0, 1).copy()), padding=1))
    np.testing.assert_allclose(out, ref.numpy(), rtol=1e-4, atol=1e-4)
