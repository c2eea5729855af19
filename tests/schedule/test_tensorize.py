"""tensorize with decl_tensor_intrin: the replaced region computes what the stage declared.

The interpreter runs an ``IntrinCall`` through the intrinsic's declared computation
(``lower_fallback``), so these tests check that the regions handed to the intrinsic
(offsets, extents, which loads go where) are right.  Tensorized regions need factors
that divide; the loops outside them may have tails and symbolic extents.
"""
import numpy as np
import pytest

import tdsl as td
from tdsl.interpreter import run
from tdsl.stmt import IntrinCall
from tdsl.visitor import post_order_visit
from tests.workloads import random_array

SIZES = [pytest.param(16, id="divisible"), pytest.param(13, id="tail"),
         pytest.param("sym", id="symbolic")]
SYM_VALUES = (3, 16, 21)


def intrin_gemv(m, l):
    a = td.placeholder((l,), name="a")
    b = td.placeholder((m, l), name="b")
    k = td.reduce_axis((0, l), name="k")
    c = td.compute((m,), lambda i: td.sum(a[k] * b[i, k], axis=k), name="c")
    return td.decl_tensor_intrin(c.op, name="gemv")


def intrin_gemm(m, n, l):
    a = td.placeholder((m, l), name="a")
    b = td.placeholder((l, n), name="b")
    k = td.reduce_axis((0, l), name="k")
    c = td.compute((m, n), lambda i, j: td.sum(a[i, k] * b[k, j], axis=k), name="c")
    return td.decl_tensor_intrin(c.op, name=f"gemm{m}x{n}x{l}")


def intrin_vmuladd(w):
    x = td.placeholder((w,), name="x")
    y = td.placeholder((w,), name="y")
    z = td.compute((w,), lambda i: x[i] * y[i] + x[i], name="z")
    return td.decl_tensor_intrin(z.op, name="vmuladd")


def intrin_calls(f):
    calls = []
    post_order_visit(f.body, lambda n: calls.append(n) if isinstance(n, IntrinCall) else None)
    return calls


def values(size):
    return SYM_VALUES if size == "sym" else (size,)


@pytest.mark.parametrize("size", SIZES)
def test_tensorize_gemv(size):
    """C[i, j] = sum_k A[i, k] * B[j, k], the j.inner x k nest replaced by a 4-row gemv."""
    n = td.var("n") if size == "sym" else size
    L, M = 12, 16
    A = td.placeholder((n, L), name="A")
    B = td.placeholder((M, L), name="B")
    k = td.reduce_axis((0, L), name="k")
    C = td.compute((n, M), lambda i, j: td.sum(A[i, k] * B[j, k], axis=k), name="C")
    s = td.create_schedule(C.op)
    x, y = C.op.axis
    yo, yi = s[C].split(y, factor=4)
    s[C].reorder(x, yo, yi, k)
    s[C].tensorize(yi, intrin_gemv(4, L))
    f = td.lower(s, [A, B, C])
    assert len(intrin_calls(f)) == 1
    rng = np.random.default_rng(0)
    for v in values(size):
        a, b = random_array(rng, (v, L)), random_array(rng, (M, L))
        c = np.full((v, M), np.nan, "float32")
        run(f, a, b, c)
        np.testing.assert_allclose(c, a.astype(np.float64) @ b.T.astype(np.float64), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("size", SIZES)
def test_tensorize_gemm_microkernel(size):
    """A batched matmul whose 4x4x4 inner block is an intrinsic.  The tiled axes must be
    multiples of 4, so the tail and symbolic sizes go to the batch axis outside."""
    bsz = td.var("b") if size == "sym" else size
    A = td.placeholder((bsz, 8, 12), name="A")
    B = td.placeholder((12, 8), name="B")
    k = td.reduce_axis((0, 12), name="k")
    C = td.compute((bsz, 8, 8), lambda q, i, j: td.sum(A[q, i, k] * B[k, j], axis=k), name="C")
    s = td.create_schedule(C.op)
    q, i, j = C.op.axis
    io, jo, ii, ji = s[C].tile(i, j, 4, 4)
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(q, io, jo, ko, ii, ji, ki)
    s[C].tensorize(ii, intrin_gemm(4, 4, 4))
    f = td.lower(s, [A, B, C])
    rng = np.random.default_rng(1)
    for v in values(size):
        a, b = random_array(rng, (v, 8, 12)), random_array(rng, (12, 8))
        c = np.full((v, 8, 8), np.nan, "float32")
        run(f, a, b, c)
        np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("size", SIZES)
def test_tensorize_elementwise(size):
    """A non-reduction intrinsic over the inner 4 columns; rows symbolic/tailed."""
    n = td.var("n") if size == "sym" else size
    X = td.placeholder((n, 8), name="X")
    Y = td.placeholder((n, 8), name="Y")
    Z = td.compute((n, 8), lambda r, c: X[r, c] * Y[r, c] + X[r, c], name="Z")
    s = td.create_schedule(Z.op)
    r, c = Z.op.axis
    ro, ri = s[Z].split(r, factor=3)
    co, ci = s[Z].split(c, factor=4)
    s[Z].tensorize(ci, intrin_vmuladd(4))
    f = td.lower(s, [X, Y, Z])
    assert len(intrin_calls(f)) == 1
    rng = np.random.default_rng(2)
    for v in values(size):
        x, y = random_array(rng, (v, 8)), random_array(rng, (v, 8))
        z = np.full((v, 8), np.nan, "float32")
        run(f, x, y, z)
        np.testing.assert_allclose(z, x * y + x, rtol=1e-6)


def test_tensorize_whole_axis_without_split():
    """The intrinsic covers a whole (unsplit) axis of constant extent."""
    A = td.placeholder((5, 6), name="A")
    B = td.placeholder((4, 6), name="B")
    k = td.reduce_axis((0, 6), name="k")
    C = td.compute((5, 4), lambda i, j: td.sum(A[i, k] * B[j, k], axis=k), name="C")
    s = td.create_schedule(C.op)
    s[C].tensorize(C.op.axis[1], intrin_gemv(4, 6))
    rng = np.random.default_rng(3)
    a, b = random_array(rng, (5, 6)), random_array(rng, (4, 6))
    c = np.full((5, 4), np.nan, "float32")
    run(td.lower(s, [A, B, C]), a, b, c)
    np.testing.assert_allclose(c, a @ b.T, rtol=1e-5, atol=1e-5)


def test_tensorize_region_offsets_printed():
    """The IntrinCall names the tile of each buffer it touches."""
    A = td.placeholder((8, 12), name="A")
    B = td.placeholder((16, 12), name="B")
    k = td.reduce_axis((0, 12), name="k")
    C = td.compute((8, 16), lambda i, j: td.sum(A[i, k] * B[j, k], axis=k), name="C")
    s = td.create_schedule(C.op)
    x, y = C.op.axis
    yo, yi = s[C].split(y, factor=4)
    s[C].reorder(x, yo, yi, k)
    s[C].tensorize(yi, intrin_gemv(4, 12))
    text = str(td.lower(s, [A, B, C]))
    assert ('tensorize("gemv", outputs=[C[i:i + 1, j.outer * 4:j.outer * 4 + 4]], '
            'inputs=[A[i:i + 1, 0:12], B[j.outer * 4:j.outer * 4 + 4, 0:12]]') in text


def _outer_product_intrin(name, **kw):
    a = td.placeholder((4, 1), "float32", name="a")
    b = td.placeholder((1, 16), "float32", name="b")
    r = td.reduce_axis((0, 1), name="r")
    c = td.compute((4, 16), lambda i, j: td.sum(a[i, r] * b[r, j], axis=r), name="c")
    return td.decl_tensor_intrin(c.op, name=name, **kw)


def _matmul_attached_tile(intrin, n=32):
    A = td.placeholder((n, 8), "float32", name="A")
    B = td.placeholder((8, n), "float32", name="B")
    k = td.reduce_axis((0, 8), name="k")
    C = td.compute((n, n), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = td.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(*s[C].op.axis, 4, 16)
    s[CL].compute_at(s[C], jo)
    xc, yc = s[CL].op.axis
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=1)
    s[CL].reorder(ko, xc, yc, ki)
    s[CL].tensorize(xc, intrin)
    return s, [A, B, C]


def test_tensorize_a_stage_attached_with_compute_at():
    """The loops of an attached stage run over its region (4 x 16), not the declared shape:
    the extents are checked when lowering knows the region."""
    s, args = _matmul_attached_tile(_outer_product_intrin("outer"))
    rng = np.random.default_rng(0)
    a, b = rng.random((32, 8), dtype=np.float32), rng.random((8, 32), dtype=np.float32)
    for runner in (lambda *x: run(td.lower(s, args), *x), td.build(s, args, target="llvm")):
        c = np.full((32, 32), np.nan, "float32")
        runner(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_tensorize_attached_region_of_the_wrong_size_is_refused_at_lowering():
    s, args = _matmul_attached_tile(_outer_product_intrin("outer"), n=30)   # 30 % 16 != 0
    with pytest.raises(td.TDSLError, match=r"tensorize: stage 'C.local', loop '[ij].c' runs over .* but the intrinsic"):
        td.lower(s, args)


def test_llvm_uses_the_intrinsic_implementation_for_its_target():
    """impls["llvm"](call) -> Stmt is what the LLVM backend compiles (here: the declared
    computation with a recognizable constant folded in, to see that it was used)."""
    from tdsl.stmt import BufferStore
    from tdsl.visitor import transform
    calls = []

    def llvm_impl(call):
        calls.append(call)
        stmt = intrin.lower_fallback(call)
        return transform(stmt, post=lambda n: BufferStore(n.buffer, n.value * 2.0, n.indices)
                         if isinstance(n, BufferStore) else None)
    intrin = _outer_product_intrin("outer2", impls={"llvm": llvm_impl})
    s, args = _matmul_attached_tile(intrin)
    rng = np.random.default_rng(1)
    a, b = rng.random((32, 8), dtype=np.float32), rng.random((8, 32), dtype=np.float32)
    c = np.empty((32, 32), "float32")
    td.build(s, args, target="llvm")(a, b, c)
    assert calls
    assert not np.allclose(c, a @ b)      # the implementation (not the fallback) ran
    ref = np.empty_like(c)
    run(td.lower(s, args), a, b, ref)     # the interpreter runs the declared computation
    np.testing.assert_allclose(ref, a @ b, rtol=1e-5)


def test_unit_outer_loop_above_a_tensorized_region():
    """Splitting by the whole extent leaves an outer loop of extent 1, which lowering
    removes: its variable must also leave the intrinsic call's regions."""
    a = td.placeholder((4, 2), "float32", name="a")
    b = td.placeholder((2, 16), "float32", name="b")
    r = td.reduce_axis((0, 2), name="r")
    c = td.compute((4, 16), lambda i, j: td.sum(a[i, r] * b[r, j], axis=r), name="c")
    intrin = td.decl_tensor_intrin(c.op, name="mm")
    A = td.placeholder((4, 2), "float32", name="A")
    B = td.placeholder((2, 16), "float32", name="B")
    k = td.reduce_axis((0, 2), name="k")
    C = td.compute((4, 16), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = td.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[C].tensorize(ii, intrin)
    rng = np.random.default_rng(2)
    x, y = rng.random((4, 2), dtype=np.float32), rng.random((2, 16), dtype=np.float32)
    z = np.empty((4, 16), "float32")
    td.build(s, [A, B, C], target="llvm")(x, y, z)
    np.testing.assert_allclose(z, x @ y, rtol=1e-5)
