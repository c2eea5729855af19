"""td.extern on CUDA: ``call_extern(..., source=, grid=, block=)`` launches the user's
``__device__`` function on every thread of the given launch, between tdsl's own kernels.
Emulated against NumPy on random data; NVRTC compiles each source for sm_80 and sm_90.
Host-only calls (packed functions, C functions without device code) are refused clearly."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import tdsl as td
from tdsl.backends.cuda import nvrtc
from tdsl.errors import BuildError, TDSLError

pytestmark = pytest.mark.skipif(shutil.which("g++") is None,
                                reason="g++ is not installed: the CUDA emulation harness needs it")

AXPY = r"""
__device__ void my_axpy(const float* x, float* y, float a, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + 1.0f;
}
"""

# each block reverses its 64 elements through shared memory (needs the barrier)
REVERSE = r"""
__device__ void block_reverse(const int* x, int* y) {
  __shared__ int tile[64];
  int t = threadIdx.x;
  long long base = (long long)blockIdx.x * 64;
  tile[t] = x[base + t];
  __syncthreads();
  y[base + t] = tile[63 - t];
}
"""

TRANSPOSE = r"""
__device__ void transpose(const double* a, double* b, long long rows, long long cols) {
  long long r = (long long)blockIdx.y * blockDim.y + threadIdx.y;
  long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (r < rows && c < cols) b[c * rows + r] = a[r * cols + c];
}
"""


def bind1d(s, st, factor=64):
    o, i = s[st].split(st.op.axis[0], factor=factor)
    s[st].bind(o, td.thread_axis("blockIdx.x"))
    s[st].bind(i, td.thread_axis("threadIdx.x"))


def compiles(mod) -> None:
    if nvrtc.is_available():
        for arch in ("sm_80", "sm_90"):
            nvrtc.compile_cuda(mod.get_source(), arch=arch)


@pytest.mark.parametrize("size", [1000, 256])
def test_device_function_between_tdsl_kernels(size):
    n = td.var("n")
    X = td.placeholder((n,), name="X")
    W = td.compute((n,), lambda i: X[i] - 0.5, name="W")
    Y = td.extern((n,), [W], lambda ins, outs: td.call_extern(
        "float32", "my_axpy", ins[0], outs[0], 2.0, n, source=AXPY, grid=(n + 127) // 128,
        block=128), name="Y")
    Z = td.compute((n,), lambda i: Y[i] * 3.0, name="Z")
    s = td.create_schedule(Z.op)
    bind1d(s, W)
    bind1d(s, Z)
    mod = td.build(s, [X, Z], target="cuda")
    assert mod.get_source().count("__device__ void my_axpy(") == 1
    assert [k.block[0].value for k in mod.kernels] == [64, 128, 64]
    x = np.random.default_rng(size).standard_normal(size).astype("float32")
    z = np.full(size, np.nan, "float32")
    mod.emulate(x, z)
    np.testing.assert_allclose(z, (2 * (x - 0.5) + 1) * 3, rtol=1e-6, atol=1e-6)
    compiles(mod)


def test_device_function_with_shared_memory_and_barrier():
    n = 256
    X = td.placeholder((n,), "int32", name="X")
    Y = td.extern((n,), [X], lambda ins, outs: td.call_extern(
        "int32", "block_reverse", ins[0], outs[0], source=REVERSE, grid=n // 64, block=64),
        name="Y")
    s = td.create_schedule(Y.op)
    mod = td.build(s, [X, Y], target="cuda")
    x = np.random.default_rng(1).integers(-1000, 1000, n).astype("int32")
    y = np.zeros(n, "int32")
    mod.emulate(x, y)
    np.testing.assert_array_equal(y, x.reshape(-1, 64)[:, ::-1].ravel())
    compiles(mod)


def test_two_dimensional_launch():
    rows, cols = td.var("rows"), td.var("cols")
    A = td.placeholder((rows, cols), "float64", name="A")
    B = td.extern((cols, rows), [A], lambda ins, outs: td.call_extern(
        "float64", "transpose", ins[0], outs[0], rows, cols, source=TRANSPOSE,
        grid=((cols + 15) // 16, (rows + 7) // 8), block=(16, 8)), name="B")
    mod = td.build(td.create_schedule(B.op), [A, B], target="cuda")
    (k,) = mod.kernels
    assert (k.block[0].value, k.block[1].value) == (16, 8)
    a = np.random.default_rng(2).standard_normal((37, 21))
    b = np.zeros((21, 37))
    mod.emulate(a, b)
    np.testing.assert_array_equal(b, a.T)
    compiles(mod)


def test_host_calls_are_refused_clearly():
    n = 64
    X = td.placeholder((n,), name="X")
    P = td.extern((n,), [X], lambda ins, outs: td.call_packed("tdsl.test.copy", ins[0], outs[0]),
                  name="P")
    with pytest.raises(BuildError, match="packed function 'tdsl.test.copy'.*source="):
        td.build(td.create_schedule(P.op), [X, P], target="cuda")
    C = td.extern((n,), [X], lambda ins, outs: td.call_extern("float32", "cfun", ins[0], outs[0]),
                  name="C")
    with pytest.raises(BuildError, match=r"C function 'cfun'.*source=<CUDA C"):
        td.build(td.create_schedule(C.op), [X, C], target="cuda")


def test_device_code_arguments_are_checked():
    X = td.placeholder((8,), name="X")

    def ext(**kw):
        return td.extern((8,), [X], lambda ins, outs: td.call_extern(
            "float32", "my_axpy", ins[0], outs[0], 1.0, 8, **kw), name="E")
    with pytest.raises(TDSLError, match="together"):
        ext(source=AXPY, grid=1)
    with pytest.raises(TDSLError, match="does not define 'my_axpy'"):
        ext(source=REVERSE, grid=1, block=8)
    with pytest.raises(TDSLError, match="1 to 3 sizes"):
        ext(source=AXPY, grid=(1, 1, 1, 1), block=8)
    with pytest.raises(TDSLError, match="integers"):
        ext(source=AXPY, grid=1.5, block=8)
