"""TVM's TensorComputeOp (``te.compute`` whose lambda over the leading axes applies a tensor
intrinsic to slices) and the buffers of ``decl_tensor_intrin`` (``tir.decl_buffer``,
``binds=``, ``default_buffer_params``), as TVM's own tests write them: the region is
tensorized (an IntrinCall in the lowered code) and computes the intrinsic's declared
computation; interpreter and LLVM against NumPy on random data."""
import numpy as np
import pytest

import tvm
from tdsl.errors import LoweringError, ShapeError, TDSLError
from tdsl.compat.tvm.buffer import BufferError
from tvm import te

from .helpers import run_both


def _vadd(n, scope_binds=(), offset_factor=16, ir_builder=True):
    x = te.placeholder((n,), name="vx")
    y = te.placeholder((n,), name="vy")
    z = te.compute(x.shape, lambda i: x[i] + y[i], name="z")
    binds = {t: tvm.tir.decl_buffer(t.shape, t.dtype, name="W" + t.name, scope="local",
                                    offset_factor=offset_factor)
             for t, on in zip((x, y, z), scope_binds) if on}

    def intrin_func(ins, outs):
        call = tvm.tir.call_extern(outs[0].dtype, "vadd", ins[0].access_ptr("r"),
                                   ins[1].access_ptr("r"), outs[0].access_ptr("wr"))
        if not ir_builder:
            return call
        ib = tvm.tir.ir_builder.create()
        ib.emit(call)
        return ib.get()
    return te.decl_tensor_intrin(z.op, intrin_func, binds=binds,
                                 default_buffer_params={"offset_factor": offset_factor})


def _gemm_intrin(m, n, l):
    k = te.reduce_axis((0, l), name="k")
    x = te.placeholder((m, l), name="x")
    y = te.placeholder((n, l), name="y")
    z = te.compute((m, n), lambda i, j: te.sum(x[i][k] * y[j][k], axis=k), name="z")

    def intrin_func(ins, outs):
        xp, yp, zp = ins[0].access_ptr("r"), ins[1].access_ptr("r"), outs[0].access_ptr("w")
        return (tvm.tir.call_packed("gemv", xp, yp, zp, m, n, l),
                tvm.tir.call_packed("fill_zero", zp, m, n),
                tvm.tir.call_packed("gemv_add", xp, yp, zp, m, n, l))
    return te.decl_tensor_intrin(z.op, intrin_func, default_buffer_params={"offset_factor": n})


def _gemv_intrin(m, n, strides):
    w = te.placeholder((m, n), name="w")
    x = te.placeholder((n,), name="x")
    k = te.reduce_axis((0, n), name="k")
    z = te.compute((m,), lambda i: te.sum(w[i, k] * x[k], axis=k), name="z")
    Wb = tvm.tir.decl_buffer(w.shape, w.dtype, name="W", offset_factor=16, strides=strides)

    def intrin_func(ins, outs):
        ww, xx = ins
        return tvm.tir.call_packed("gemv", ww.access_ptr("r"), xx.access_ptr("r"),
                                   outs[0].access_ptr("w"), n,
                                   ww.strides[0] if ww.strides else n)
    return te.decl_tensor_intrin(z.op, intrin_func, binds={w: Wb},
                                 default_buffer_params={"data_alignment": 16,
                                                        "offset_factor": m})


def _rand(rng, shape):
    return rng.standard_normal([int(d) for d in shape]).astype("float32")


def _tensorized(s, args):
    return "tensorize(" in str(tvm.lower(s, args))


@pytest.mark.parametrize("rows", [3, 8])
def test_elementwise_intrinsic_on_row_slices(rng, rows):
    """TVM's test_tensor_compute1: C[i, 0:16] = vadd(A[i, 0:16], B[i, 0:16]); B is read at a
    column offset (B[i, 2:18]) with offset_factor 0, a symbolic row count bound to ``rows``."""
    vadd = _vadd(16, offset_factor=0)
    R = te.size_var("R")
    A = te.placeholder((R, 16), name="A")
    B = te.placeholder((R, 20), name="B")
    C = te.compute((R, 16), lambda i: vadd(A[i, 0:16], B[i, 2:18]), name="C")
    assert [iv.name for iv in C.op.axis][0] == "i" and len(C.op.axis) == 2
    s = te.create_schedule(C.op)
    assert _tensorized(s, [A, B, C])
    a, b = _rand(rng, (rows, 16)), _rand(rng, (rows, 20))
    for out in run_both(s, [A, B, C], [a, b, np.full((rows, 16), np.nan, "float32")]):
        np.testing.assert_allclose(out[2], a + b[:, 2:18], rtol=1e-6)


@pytest.mark.parametrize("split", [2, 3])
def test_reduction_intrinsic_with_an_outer_reduce_axis(rng, split):
    """TVM's test_tensor_compute2: C[i, j] (a 16x8 block) sums a gemm intrinsic over the
    blocks k of A and B; the outer loop is then split by a factor that does and does not
    divide it."""
    M, N, L, f1, f2, fk = 80, 48, 24, 16, 8, 4
    gemm = _gemm_intrin(f1, f2, fk)
    assert gemm.body is not None and gemm.reduce_init is not None
    assert gemm.reduce_update is not None
    A = te.placeholder((M // f1, L // fk, f1, fk), name="A")
    B = te.placeholder((N // f2, L // fk, f2, fk), name="B")
    k = te.reduce_axis((0, L // fk), name="k")
    C = te.compute((M // f1, N // f2, f1, f2),
                   lambda i, j: gemm(A[i, k, 0:f1, 0:fk], B[j, k, 0:f2, 0:fk], reduce_axis=k),
                   name="C")
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=split)
    s[C].parallel(io)
    assert _tensorized(s, [A, B, C])
    a, b = _rand(rng, A.shape), _rand(rng, B.shape)
    want = np.einsum("ikxl,jkyl->ijxy", a, b)
    for out in run_both(s, [A, B, C], [a, b, np.full(want.shape, np.nan, "float32")]):
        np.testing.assert_allclose(out[2], want, rtol=1e-4, atol=1e-4)


def test_gemv_with_a_strided_buffer_split_reorder_and_tile(rng):
    """TVM's test_schedule_tensor_compute1 at sizes whose reads stay in bounds: the gemv's
    weight buffer has a symbolic row stride (any stride); the loops outside the intrinsic are
    split, reordered and tiled."""
    f = 16
    N, M, L = 4 * f, 40, 2 * f
    gemv = _gemv_intrin(f, f, [te.var("ldw"), 1])
    A = te.placeholder((N // f, L // f, f, f), name="A")
    B = te.placeholder((M, L // f, f), name="B")
    k = te.reduce_axis((0, L // f), name="k")
    C = te.compute((N // f, M, f),
                   lambda i, j: gemv(A[i, k, 0:f, 0:f], B[j, k, 0:f], reduce_axis=k), name="C")
    s = te.create_schedule(C.op)
    ai, aj, ax = s[C].op.axis
    aio, aii = s[C].split(ai, 2)
    s[C].reorder(aio, aj, aii)
    s[C].tile(aio, aj, 2, 3)
    assert _tensorized(s, [A, B, C])
    a, b = _rand(rng, A.shape), _rand(rng, B.shape)
    want = np.einsum("ikxl,jkl->ijx", a, b)
    for out in run_both(s, [A, B, C], [a, b, np.full(want.shape, np.nan, "float32")]):
        np.testing.assert_allclose(out[2], want, rtol=1e-4, atol=1e-4)


def test_local_buffers_through_cache_read_and_cache_write(rng):
    """TVM's test_schedule_tensor_compute2: every intrinsic buffer is bound in scope 'local',
    so the operands are cached there; without the caches the scopes do not match."""
    A = te.placeholder((64, 16), name="A")
    B = te.placeholder((64, 16), name="B")
    vadd = _vadd(16, scope_binds=(True, True, True))
    C = te.compute((64, 16), lambda i: vadd(A[i, 0:16], B[i, 0:16]), name="C")
    s = te.create_schedule(C.op)
    with pytest.raises(LoweringError, match=r"buffer 'Wvx' is declared in scope 'local'"):
        tvm.lower(s, [A, B, C])
    s.cache_read(A, "local", C)
    s.cache_read(B, "local", C)
    s.cache_write(C, "local")
    s = s.normalize()
    a, b = _rand(rng, (64, 16)), _rand(rng, (64, 16))
    for out in run_both(s, [A, B, C], [a, b, np.full((64, 16), np.nan, "float32")]):
        np.testing.assert_allclose(out[2], a + b, rtol=1e-6)


def test_producer_computed_at_the_outer_loop(rng):
    """TVM's test_schedule_tensor_compute3: Bi computed at C's row loop feeds the intrinsic."""
    A = te.placeholder((64, 16), name="A")
    B = te.placeholder((64, 16), name="B")
    Bi = te.compute((64, 16), lambda i, j: B[i, j] + 5, name="Bi")
    vadd = _vadd(16, ir_builder=False)
    C = te.compute((64, 16), lambda i: vadd(A[i, 0:16], Bi[i, 0:16]), name="C")
    s = te.create_schedule(C.op)
    s[Bi].compute_at(s[C], C.op.axis[0])
    a, b = _rand(rng, (64, 16)), _rand(rng, (64, 16))
    for out in run_both(s, [A, B, C], [a, b, np.full((64, 16), np.nan, "float32")]):
        np.testing.assert_allclose(out[2], a + b + 5, rtol=1e-6)


def test_buffer_declarations_the_region_does_not_fit_are_refused():
    """Compact buffers (no strides=) over a region with longer rows, a constant stride that
    is not the region's, and an offset_factor the region's start breaks."""
    B = te.placeholder((3, 4, 16), name="B")
    k = te.reduce_axis((0, 4), name="k")
    for strides, why, cols in ((None, "compact strides", 16), ([32, 1], "its strides", 32)):
        gemv = _gemv_intrin(8, 16, strides)
        A = te.placeholder((5, 4, 8, cols), name="A")     # rows of 16 (compact) or 32
        C = te.compute((5, 3, 8), lambda i, j: gemv(A[i, k, 0:8, 0:16], B[j, k, 0:16],
                                                   reduce_axis=k), name="C")
        assert tvm.lower(te.create_schedule(C.op), [A, B, C])
        X = te.placeholder((5, 4, 8, 20), name="X")
        C = te.compute((5, 3, 8), lambda i, j: gemv(X[i, k, 0:8, 2:18], B[j, k, 0:16],
                                                   reduce_axis=k), name="C")
        with pytest.raises(LoweringError, match=f"buffer 'W' declares {why}.*stride 20"):
            tvm.lower(te.create_schedule(C.op), [X, B, C])
    vadd = _vadd(16, offset_factor=16)
    P = te.placeholder((6, 20), name="P")
    C = te.compute((6, 16), lambda i: vadd(P[i, 0:16], P[i, 4:20]), name="C")
    with pytest.raises(LoweringError, match=r"offset_factor=16 .* starts at element"):
        tvm.lower(te.create_schedule(C.op), [P, C])


def test_bad_applications_are_shape_errors():
    vadd = _vadd(16)
    gemm = _gemm_intrin(4, 4, 4)
    A = te.placeholder((4, 32), name="A")
    k = te.reduce_axis((0, 2), name="k")
    with pytest.raises(ShapeError, match=r"slice A\[i, 0:8\] has extents \[8\]"):
        te.compute((4, 16), lambda i: vadd(A[i, 0:8], A[i, 0:16]))
    with pytest.raises(ShapeError, match=r"computes a \[16\] block but the shape leaves \[32\]"):
        te.compute((4, 32), lambda i: vadd(A[i, 0:16], A[i, 0:16]))
    with pytest.raises(ShapeError, match="not a reduction, so reduce_axis"):
        te.compute((4, 16), lambda i: vadd(A[i, 0:16], A[i, 0:16], reduce_axis=k))
    with pytest.raises(ShapeError, match="takes 2 input"):
        te.compute((4, 16), lambda i: vadd(A[i, 0:16]))
    with pytest.raises(ShapeError, match="arguments are slices of tensors"):
        te.compute((4, 4), lambda i: gemm(A[i, 0], A[i, 1], reduce_axis=k))
    with pytest.raises(ShapeError, match="not a value to compute with"):
        te.compute((4, 16), lambda i, j: vadd(A[i, 0:16], A[i, 0:16]))
    with pytest.raises(ShapeError, match="step 2"):
        A[0, 0:32:2]


def test_decl_buffer_fields_and_refusals():
    n = te.var("n")
    b = tvm.tir.decl_buffer((n, 8), "float32", name="b", strides=[te.var("s"), 1],
                            offset_factor=4)
    assert b.shape[1].value == 8 and b.strides[1].value == 1 and b.offset_factor == 4
    assert b.data is b and b.access_ptr("r") is b and isinstance(b, te.schedule.Buffer)
    with pytest.raises(BufferError, match="2 strides for 1 dimension"):
        tvm.tir.decl_buffer((8,), strides=[1, 1])
    with pytest.raises(BufferError, match="shape holds 'x'"):
        tvm.tir.decl_buffer(("x",))
    with pytest.raises(BufferError, match="data="):
        tvm.tir.decl_buffer((8,), data=b)
    with pytest.raises(BufferError, match="'for_range' is not supported"):
        tvm.tir.ir_builder.create().for_range(0, 4)
    x = te.placeholder((8,), name="x")
    z = te.compute((8,), lambda i: x[i] * 2.0, name="z")
    with pytest.raises(BufferError, match=r"has shape \[4\] but tensor 'x' has \[8\]"):
        te.decl_tensor_intrin(z.op, binds={x: tvm.tir.decl_buffer((4,), name="bx")})
    with pytest.raises(BufferError, match="not an input or output"):
        te.decl_tensor_intrin(z.op, binds={te.placeholder((8,)): tvm.tir.decl_buffer((8,))})
    intrin = te.decl_tensor_intrin(z.op, lambda ins, outs: tvm.tir.call_packed("f", ins[0]))
    assert intrin.reduce_init is None and intrin.body is not None
    assert [bb.shape[0].value for bb in intrin.buffers] == [8, 8]


def test_binds_of_lower_and_build(rng):
    """A bound buffer that describes the compact argument is accepted; strides, an offset
    or another scope are refused naming the buffer and the tensor."""
    A = te.placeholder((6, 5), name="A")
    C = te.compute((6, 5), lambda i, j: A[i, j] * 3.0, name="C")
    s = te.create_schedule(C.op)
    ok = {A: tvm.tir.decl_buffer((6, 5), "float32", "Ab"),
          C: tvm.tir.decl_buffer((6, 5), "float32", "Cb", strides=[5, 1])}
    f = tvm.build(s, [A, C], binds=ok)
    a = _rand(rng, (6, 5))
    c = np.full((6, 5), np.nan, "float32")
    f(a, c)
    np.testing.assert_allclose(c, a * 3, rtol=1e-6)
    assert tvm.lower(s, [A, C], binds=ok)
    for buf, why in ((tvm.tir.decl_buffer((6, 5), strides=[te.var("s"), 1], name="Ab"),
                      "has strides"),
                     (tvm.tir.decl_buffer((6, 5), offset_factor=4, name="Ab"), "element offset"),
                     (tvm.tir.decl_buffer((6, 5), scope="local", name="Ab"), "scope 'local'"),
                     (tvm.tir.decl_buffer((6, 5), "int32", name="Ab"), "is int32")):
        for fn in (tvm.build, tvm.lower):
            with pytest.raises(TDSLError, match=f"buffer 'Ab'.*{why}"):
                fn(s, [A, C], binds={A: buf})


@pytest.mark.parametrize("block,rows", [(8, 3), (16, 2)])
def test_intrinsic_over_sizes_applied_with_the_sizes_fixed_by_the_slices(rng, block, rows):
    """An intrinsic declared over ``te.var`` sizes: the compute's inner extent and the
    slices fix them (one declaration, two block sizes); sizes left open are refused."""
    n, l = te.var("n"), te.var("l")
    x = te.placeholder((n, l), name="x")
    y = te.placeholder((l,), name="y")
    r = te.reduce_axis((0, l), name="r")
    z = te.compute((n,), lambda i: te.sum(x[i, r] * y[r], axis=r), name="z")
    gemv = te.decl_tensor_intrin(z.op, name="gemv")
    R = te.size_var("R")
    A = te.placeholder((R, block, 12), name="A")
    V = te.placeholder((12,), name="V")
    C = te.compute((R, block), lambda i: gemv(A[i, 0:block, 0:12], V[0:12]), name="C")
    s = te.create_schedule(C.op)
    assert _tensorized(s, [A, V, C])
    a, v = _rand(rng, (rows, block, 12)), _rand(rng, (12,))
    for out in run_both(s, [A, V, C], [a, v, np.full((rows, block), np.nan, "float32")]):
        np.testing.assert_allclose(out[2], a @ v, rtol=1e-5, atol=1e-5)
    with pytest.raises(ShapeError, match="would be both 12 and 6"):
        te.compute((R, block), lambda i: gemv(A[i, 0:block, 0:12], V[0:6]), name="C")
