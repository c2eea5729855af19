"""Ramps in vectorized loops: a ramp narrowed to a smaller integer stays a ramp (one
scalar truncation, not a vector one), and the ramps ``b + c, b + c + 1, ...`` of an
unrolled loop share one splat of ``b`` (their constants go into the lane offsets).  An
argmax's index vector cost four instructions per vector before (splat, or, per copy)."""
import numpy as np

import tdsl as td


def _index_kernel(dtype):
    n = 40
    C = td.compute((n, 32), lambda i, j: (i * 32 + j).astype(dtype), name="C")
    s = td.create_schedule(C.op)
    i, j = C.op.axis
    jo, ji = s[C].split(j, factor=8)
    s[C].unroll(jo)
    s[C].vectorize(ji)
    return td.build(s, [C], target="llvm"), n


def test_unrolled_ramps_share_one_splat_and_narrow_as_scalars():
    f, n = _index_kernel("int32")
    ll = f.get_source("ll")
    assert "trunc <" not in ll, ll
    # one splat per row (of the base i*32); the four copies add constant vectors
    asm = f.get_source("asm")
    body = asm[asm.index("default_function:"):asm.index(".Lfunc_end0")]
    splats = [ln for ln in body.splitlines() if "broadcast" in ln or "pshufd" in ln]
    assert len(splats) <= 1, body
    out = np.full((n, 32), -1, "int32")
    f(out)
    np.testing.assert_array_equal(out, np.arange(n * 32, dtype="int32").reshape(n, 32))


def test_ramp_offsets_wrap_like_the_scalar_expression():
    """Constants folded into the lane offsets wrap at the narrowed width as the scalar
    arithmetic does."""
    n = td.var("n")
    A = td.placeholder((n,), "int64", name="A")
    B = td.compute((n,), lambda i: (A[0] + i + (2 ** 32 - 3)).astype("int32"), name="B")
    s = td.create_schedule(B.op)
    o, v = s[B].split(B.op.axis[0], factor=8)
    s[B].vectorize(v)
    f = td.build(s, [A, B], target="llvm")
    a = np.array([5] + [0] * 19, "int64")
    out = np.zeros(20, "int32")
    f(a, out)
    exp = (a[0] + np.arange(20, dtype="int64") + (2 ** 32 - 3)).astype("int32")
    np.testing.assert_array_equal(out, exp)
    for dt in ("int8", "int16"):
        f, n2 = _index_kernel(dt)
        out = np.zeros((n2, 32), dt)
        f(out)
        np.testing.assert_array_equal(out, np.arange(n2 * 32).astype(dt).reshape(n2, 32))
