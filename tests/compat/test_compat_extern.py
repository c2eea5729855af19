"""te.extern through the compat layer, modeled on TVM's extern-op tutorial and
tests/python/te: a packed call (tvm.register_func gets NDArrays sharing the stage's
memory), contrib.cblas.matmul mapped to NumPy, a scalar parameter, and tir.call_extern."""
import ctypes
import subprocess

import numpy as np
import pytest

import tvm
import tvm.testing
from tvm import te


@pytest.mark.parametrize("sizes", [(8, 5, 3), (33, 16, 7)])
def test_cblas_matmul_plus_bias(rng, sizes):
    from tvm.contrib import cblas
    assert tvm.get_global_func("tvm.contrib.cblas.matmul", allow_missing=True)
    n, l, m = sizes
    bias = te.var("bias", dtype="float32")
    A = te.placeholder((n, l), name="A")
    B = te.placeholder((l, m), name="B")
    for C in (te.extern((n, m), [A, B], lambda ins, outs: tvm.tir.call_packed(
                  "tvm.contrib.cblas.matmul", ins[0], ins[1], outs[0], False, False), name="C"),
              cblas.matmul(A, B)):
        D = te.compute(C.shape, lambda i, j: C[i, j] + bias, name="D")
        s = te.create_schedule(D.op)
        f = tvm.build(s, [A, B, D, bias], "llvm")
        dev = tvm.cpu(0)
        a = tvm.nd.array(rng.uniform(size=(n, l)).astype("float32"), dev)
        b = tvm.nd.array(rng.uniform(size=(l, m)).astype("float32"), dev)
        d = tvm.nd.array(np.zeros((n, m), "float32"), dev)
        f(a, b, d, 2.5)
        tvm.testing.assert_allclose(d.numpy(), a.numpy() @ b.numpy() + 2.5, rtol=1e-5)


def test_transposed_cblas_matmul(rng):
    from tvm.contrib import cblas
    A = te.placeholder((6, 4), name="A")
    B = te.placeholder((9, 6), name="B")
    C = cblas.matmul(A, B, transa=True, transb=True)
    assert tuple(int(d.value) for d in C.shape) == (4, 9)
    s = te.create_schedule(C.op)
    f = tvm.build(s, [A, B, C], "llvm")
    a, b = rng.standard_normal((6, 4)).astype("float32"), rng.standard_normal((9, 6)).astype(
        "float32")
    c = tvm.nd.empty((4, 9), "float32")
    f(tvm.nd.array(a), tvm.nd.array(b), c)
    tvm.testing.assert_allclose(c.numpy(), a.T @ b.T, rtol=1e-5, atol=1e-5)


def test_register_func_python_callback_gets_ndarrays(rng):
    kinds = []

    @tvm.register_func("tdsl.compat.test.add_one", override=True)
    def add_one(x, y):
        kinds.append((type(x), type(y)))
        tvm.nd.array(x.numpy() + 1).copyto(y)

    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.extern(A.shape, [A], lambda ins, outs: tvm.tir.call_packed(
        "tdsl.compat.test.add_one", ins[0], outs[0]), name="B")
    s = te.create_schedule(B.op)
    f = tvm.build(s, [A, B], "llvm")
    a = tvm.nd.array(rng.uniform(size=(37,)).astype("float32"))
    b = tvm.nd.array(np.zeros(37, "float32"))
    f(a, b)
    tvm.testing.assert_allclose(b.numpy(), a.numpy() + 1, rtol=1e-6)
    assert kinds == [(tvm.nd.NDArray, tvm.nd.NDArray)]


def test_call_extern_c_function(rng, tmp_path):
    src = tmp_path / "scale.c"
    src.write_text("#include <stdint.h>\n"
                   "int32_t compat_scale(const double *x, double *y, int64_t n) {\n"
                   "  for (int64_t i = 0; i < n; ++i) y[i] = 4.0 * x[i];\n  return 0;\n}\n")
    so = tmp_path / "libscale.so"
    try:
        subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(src)], check=True,
                       capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no C compiler")
    ctypes.CDLL(str(so), mode=ctypes.RTLD_GLOBAL)
    n = te.var("n")
    X = te.placeholder((n,), "float64", name="X")
    Y = te.extern((n,), [X], lambda ins, outs: tvm.tir.call_extern(
        "int32", "compat_scale", ins[0].data, outs[0].access_ptr("w"), ins[0].shape[0]),
        name="Y")
    s = te.create_schedule(Y.op)
    f = tvm.build(s, [X, Y], "llvm")
    x = rng.standard_normal(21)
    y = tvm.nd.empty((21,), "float64")
    f(tvm.nd.array(x), y)
    tvm.testing.assert_allclose(y.numpy(), 4 * x)
