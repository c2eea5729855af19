"""td.extern (TVM's te.extern): stages computed by a packed function (td.register_func) or
a C function of the process, consumed by ordinary stages; interpreter and LLVM against
NumPy on random data."""
import ctypes
import subprocess

import numpy as np
import pytest

import tdsl as td
from tdsl.errors import BuildError, LoweringError, ScheduleError, TDSLError


def run_both(s, args, arrays):
    a1 = [a.copy() for a in arrays]
    td.interpreter.run(td.lower(s, args), *a1)
    a2 = [a.copy() for a in arrays]
    td.build(s, args, target="llvm")(*a2)
    return a1, a2


@td.register_func("tdsl.test.matmul", override=True)
def _matmul(a, b, c, trans_a, trans_b):
    c[...] = (a.T if trans_a else a) @ (b.T if trans_b else b)


@pytest.mark.parametrize("shape", [(5, 3, 7), (16, 9, 33)])
def test_packed_matmul_feeds_a_scheduled_consumer(shape):
    n, k, m = td.var("n"), td.var("k"), td.var("m")
    A = td.placeholder((n, k), name="A")
    B = td.placeholder((k, m), name="B")
    A2 = td.compute((n, k), lambda i, j: A[i, j] * 2.0, name="A2")
    C = td.extern((n, m), [A2, B], lambda ins, outs: td.call_packed(
        "tdsl.test.matmul", ins[0], ins[1], outs[0], False, False), name="C")
    D = td.compute((n, m), lambda i, j: C[i, j] + A[i, 0], name="D")
    s = td.create_schedule(D.op)
    jo, ji = s[D].split(D.op.axis[1], factor=8)
    s[D].vectorize(ji)
    s[D].parallel(D.op.axis[0])
    rng = np.random.default_rng(shape[0])
    a = rng.standard_normal(shape[:2]).astype("float32")
    b = rng.standard_normal(shape[1:]).astype("float32")
    want = (2 * a) @ b + a[:, :1]
    for out in run_both(s, [A, B, D], [a, b, np.empty((shape[0], shape[2]), "float32")]):
        np.testing.assert_allclose(out[2], want, rtol=1e-4, atol=1e-4)


def test_packed_scalars_and_two_outputs():
    seen = []

    def f(x, lo, hi, scale, n):
        seen.append((lo.dtype if hasattr(lo, "dtype") else type(lo), n))
        lo[...] = x * scale
        hi[...] = x + n

    td.register_func("tdsl.test.two", f, override=True)
    n = td.var("n")
    X = td.placeholder((n,), "float64", name="X")
    L, H = td.extern([(n,), (n,)], [X], lambda ins, outs: td.call_packed(
        "tdsl.test.two", ins[0], outs[0], outs[1], 0.5, outs[0].shape[0]), name="E")
    S = td.compute((n,), lambda i: L[i] + H[i], name="S")
    s = td.create_schedule(S.op)
    x = np.random.default_rng(1).standard_normal(13)
    for out in run_both(s, [X, S], [x, np.empty(13)]):
        np.testing.assert_allclose(out[1], x * 0.5 + x + 13)
    assert all(k == 13 for _, k in seen)


def test_packed_function_errors_reach_the_caller():
    def bad(x, y):
        raise ValueError("boom from the packed function")

    td.register_func("tdsl.test.bad", bad, override=True)
    X = td.placeholder((4,), name="X")
    Y = td.extern((4,), [X], lambda ins, outs: td.call_packed("tdsl.test.bad", ins[0], outs[0]))
    s = td.create_schedule(Y.op)
    f = td.build(s, [X, Y], target="llvm")
    with pytest.raises(ValueError, match="boom"):
        f(np.zeros(4, "float32"), np.zeros(4, "float32"))
    with pytest.raises(ValueError, match="boom"):
        td.interpreter.run(td.lower(s, [X, Y]), np.zeros(4, "float32"), np.zeros(4, "float32"))


C_SOURCE = """
#include <stdint.h>
void tdsl_test_axpy(const float *x, float *y, float a, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = a * x[i] + 1.0f;
}
"""


@pytest.fixture(scope="module")
def c_library(tmp_path_factory):
    d = tmp_path_factory.mktemp("clib")
    (d / "axpy.c").write_text(C_SOURCE)
    so = d / "libaxpy.so"
    try:
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(so), str(d / "axpy.c")],
                       check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no C compiler")
    return ctypes.CDLL(str(so), mode=ctypes.RTLD_GLOBAL)


@pytest.mark.parametrize("size", [1, 29])
def test_call_extern_c_function(c_library, size):
    n = td.var("n")
    X = td.placeholder((n,), name="X")
    Y = td.extern((n,), [X], lambda ins, outs: td.call_extern(
        "int32", "tdsl_test_axpy", ins[0].data, outs[0].data, td.const(3.0, "float32"),
        ins[0].shape[0]), name="Y")
    Z = td.compute((n,), lambda i: Y[i] * 2.0, name="Z")
    s = td.create_schedule(Z.op)
    x = np.random.default_rng(size).standard_normal(size).astype("float32")
    for out in run_both(s, [X, Z], [x, np.empty(size, "float32")]):
        np.testing.assert_allclose(out[1], (3 * x + 1) * 2, rtol=1e-6)


def test_extern_refusals():
    X = td.placeholder((8,), name="X")
    X1 = td.compute((8,), lambda i: X[i] + 1.0, name="X1")
    Y = td.extern((8,), [X1], lambda ins, outs: td.call_packed("tdsl.test.matmul", ins[0]),
                  name="Y")
    Z = td.compute((8,), lambda i: Y[i] * 2.0, name="Z")
    s = td.create_schedule(Z.op)
    with pytest.raises(ScheduleError, match="read by the extern stage"):
        s[X1].compute_inline()
    with pytest.raises(ScheduleError, match="extern stage"):
        s[Y].compute_at(s[Z], Z.op.axis[0])
    with pytest.raises(ScheduleError, match="extern stage"):
        s[Y].compute_inline()
    with pytest.raises(TDSLError, match="must return call_packed"):
        td.extern((8,), [X], lambda ins, outs: ins[0])
    with pytest.raises(TDSLError, match="not the tensor"):
        td.extern((8,), [X], lambda ins, outs: td.call_packed("f", X))
    with pytest.raises(TDSLError, match="no packed function"):
        td.get_global_func("tdsl.test.missing")
    with pytest.raises(TDSLError, match="already registered"):
        td.register_func("tdsl.test.matmul", _matmul)


def test_extern_is_refused_by_cuda():
    X = td.placeholder((64,), name="X")
    Y = td.extern((64,), [X], lambda ins, outs: td.call_packed("tdsl.test.matmul", ins[0]),
                  name="Y")
    Z = td.compute((64,), lambda i: Y[i] * 2.0, name="Z")
    s = td.create_schedule(Z.op)
    bx, tx = s[Z].split(Z.op.axis[0], factor=32)
    s[Z].bind(bx, td.thread_axis("blockIdx.x"))
    s[Z].bind(tx, td.thread_axis("threadIdx.x"))
    with pytest.raises(BuildError, match="extern"):
        td.build(s, [X, Z], target="cuda")


def test_export_library_refuses_packed_calls(tmp_path):
    X = td.placeholder((4,), name="X")
    Y = td.extern((4,), [X], lambda ins, outs: td.call_packed("tdsl.test.matmul", ins[0]),
                  name="Y")
    f = td.build(td.create_schedule(Y.op), [X, Y], target="llvm")
    with pytest.raises(BuildError, match="packed function"):
        f.export_library(str(tmp_path / "y.so"))


def test_structural_hash_tells_extern_calls_and_scans_apart():
    from tdsl.structural import structural_equal

    def ext(fname):
        X = td.placeholder((8,), name="X")
        return td.extern((8,), [X], lambda ins, outs: td.call_packed(fname, ins[0], outs[0]))

    assert structural_equal(ext("f"), ext("f"))
    assert not structural_equal(ext("f"), ext("g"))

    def cum(scale):
        n = td.var("n")
        X = td.placeholder((n, 3), name="X")
        st = td.placeholder((n, 3), name="st")
        return td.scan(td.compute((1, 3), lambda _, i: X[0, i]),
                       td.compute((n, 3), lambda t, i: st[t - 1, i] * scale + X[t, i]), st)

    assert structural_equal(cum(1.0), cum(1.0))
    assert not structural_equal(cum(1.0), cum(2.0))


@pytest.mark.parametrize("n", [64, 67])
def test_default_operator_schedules_skip_opaque_stages(n):
    import tdsl.ops as ops
    A = td.placeholder((n, n), name="A")
    B = td.placeholder((n, n), name="B")
    C = td.extern((n, n), [A, B], lambda ins, outs: td.call_packed(
        "tdsl.test.matmul", ins[0], ins[1], outs[0], False, False), name="C")
    D = td.compute((n, n), lambda i, j: td.exp(C[i, j] * 0.01), name="D")
    m = td.var("m")
    X = td.placeholder((m, n), name="X")
    st = td.placeholder((m, n), name="st")
    S = td.scan(td.compute((1, n), lambda _, i: X[0, i]),
                td.compute((m, n), lambda t, i: st[t - 1, i] + X[t, i]), st)
    k = td.reduce_axis((0, n), name="k")
    R = td.compute((m,), lambda t: td.sum(S[t, k], axis=k), name="R")
    rng = np.random.default_rng(n)
    a, b = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
    x = rng.random((9, n), dtype=np.float32)
    d, r = np.empty((n, n), np.float32), np.empty(9, np.float32)
    td.build(ops.schedule([D], "llvm"), [A, B, D], target="llvm")(a, b, d)
    td.build(ops.schedule([R], "llvm"), [X, R], target="llvm")(x, r)
    np.testing.assert_allclose(d, np.exp(a @ b * 0.01), rtol=1e-5)
    np.testing.assert_allclose(r, np.cumsum(x, 0).sum(1), rtol=1e-5)
    ops.schedule([R], "cuda")   # schedules the other stages, leaves the scan alone


def test_sketch_space_keeps_extern_and_its_inputs_at_root():
    import random
    from tdsl.autotune.sketch import SketchSource
    n = 32
    A = td.placeholder((n, n), name="A")
    B = td.placeholder((n, n), name="B")
    A2 = td.compute((n, n), lambda i, j: A[i, j] + 1.0, name="A2")
    C = td.extern((n, n), [A2, B], lambda ins, outs: td.call_packed(
        "tdsl.test.matmul", ins[0], ins[1], outs[0], False, False), name="C")
    k = td.reduce_axis((0, n), name="k")
    D = td.compute((n, n), lambda i, j: td.sum(C[i, k] * B[k, j], axis=k), name="D")
    src = SketchSource([D], td.Target("llvm"), {})
    rng = random.Random(0)
    gen = np.random.default_rng(0)
    a, b = gen.random((n, n), dtype=np.float32), gen.random((n, n), dtype=np.float32)
    for _ in range(4):
        point = [rng.randrange(len(knob.entities)) for knob in src.space.knobs.values()]
        d = np.empty((n, n), np.float32)
        td.build(src.schedule(point), [A, B, D], target="llvm")(a, b, d)
        np.testing.assert_allclose(d, ((a + 1) @ b) @ b, rtol=1e-4)


def test_extern_refuses_a_storage_aligned_input():
    X = td.placeholder((8, 8), name="X")
    X1 = td.compute((8, 8), lambda i, j: X[i, j] + 1.0, name="X1")
    Y = td.extern((8, 8), [X1], lambda ins, outs: td.call_packed("tdsl.test.matmul", ins[0]),
                  name="Y")
    s = td.create_schedule(Y.op)
    s[X1].storage_align(X1.op.axis[0], 16, 1)
    with pytest.raises(LoweringError, match="storage_align"):
        td.lower(s, [X, Y])
