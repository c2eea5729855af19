"""TVM scripts that build for CUDA, on a machine without a GPU: the builds work (scan,
bfloat16, extern with device code), ``tvm.cuda(0).exist`` is False, calling the module
runs the kernels on tdsl's CPU emulator with one notice (``EmulatedCUDAWarning``), as does
``Module.emulate`` explicitly."""
import shutil

import ml_dtypes
import numpy as np
import pytest

import tvm
import tvm.testing
from tvm import te

from tdsl.backends import cuda
from tdsl.errors import TDSLError

pytestmark = pytest.mark.skipif(shutil.which("g++") is None,
                                reason="g++ is not installed: the CUDA emulation harness needs it")


def _scan_like_the_tutorial():
    m, n = te.var("m"), te.var("n")
    X = te.placeholder((m, n), name="X")
    s_state = te.placeholder((m, n))
    s_init = te.compute((1, n), lambda _, i: X[0, i])
    s_update = te.compute((m, n), lambda t, i: s_state[t - 1, i] + X[t, i])
    s_scan = te.scan(s_init, s_update, s_state, inputs=[X])
    s = te.create_schedule(s_scan.op)
    bx, tx = te.thread_axis("blockIdx.x"), te.thread_axis("threadIdx.x")
    for part in (s_init, s_update):
        xo, xi = s[part].split(part.op.axis[1], factor=128)
        s[part].bind(xo, bx)
        s[part].bind(xi, tx)
    return s, X, s_scan


@pytest.mark.parametrize("shape", [(10, 300), (4, 128)])
def test_scan_builds_for_cuda_and_emulates(rng, shape):
    s, X, s_scan = _scan_like_the_tutorial()
    assert "thread_binding" in str(tvm.lower(s, [X, s_scan], simple_mode=True))
    f = tvm.build(s, [X, s_scan], "cuda", name="myscan")
    assert "__global__" in f.imported_modules[0].get_source()
    a_np = rng.uniform(size=shape).astype("float32")
    a = tvm.nd.array(a_np, tvm.cuda(0))
    b = tvm.nd.array(np.zeros(shape, "float32"), tvm.cuda(0))
    f.emulate(a, b)
    tvm.testing.assert_allclose(b.numpy(), np.cumsum(a_np, axis=0), rtol=1e-5)


@pytest.mark.skipif(cuda.has_device(), reason="a CUDA device is present")
def test_calling_a_cuda_module_without_a_device_emulates_with_one_notice(rng):
    """TVM scripts call the module and time it on tvm.cuda(0): without a GPU both run on the
    emulator, and one EmulatedCUDAWarning says that results are emulated and timings
    meaningless (Python's default filter shows it once however many calls there are)."""
    import warnings
    s, X, s_scan = _scan_like_the_tutorial()
    f = tvm.build(s, [X, s_scan], "cuda")
    assert tvm.cuda(0).exist is False
    a_np = rng.standard_normal((5, 130)).astype("float32")
    a = tvm.nd.array(a_np, tvm.cuda(0))
    b = tvm.nd.array(np.zeros((5, 130), "float32"), tvm.cuda(0))
    with pytest.warns(tvm.runtime.EmulatedCUDAWarning,
                      match=r"tvm.cuda\(0\): no CUDA device.*CPU emulator.*results are "
                            r"emulated and timings are meaningless"):
        f(a, b)
    tvm.testing.assert_allclose(b.numpy(), np.cumsum(a_np, axis=0), rtol=1e-5)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        for _ in range(3):
            f(a, b)
        res = f.time_evaluator(f.entry_name, tvm.cuda(0), number=1, repeat=2)(a, b)
        with pytest.raises(TDSLError, match="inconsistent value of size"):   # checks still run
            f(a, tvm.nd.array(np.zeros((5, 129), "float32"), tvm.cuda(0)))
    assert len(res.results) == 2 and res.mean == sum(res.results) / 2
    notices = [w for w in seen if issubclass(w.category, tvm.runtime.EmulatedCUDAWarning)]
    assert len(notices) == 1, [str(w.message) for w in seen]


def test_bfloat16_elementwise_on_cuda(rng):
    n = te.var("n")
    A = te.placeholder((n,), "bfloat16", name="A")
    B = te.compute((n,), lambda i: A[i] * A[i] + tvm.tir.const(1.5, "bfloat16"), name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.x"))
    f = tvm.build(s, [A, B], "cuda")
    a = rng.standard_normal(100).astype(ml_dtypes.bfloat16)
    b = tvm.nd.empty((100,), "bfloat16", tvm.cuda(0))
    f.emulate(tvm.nd.array(a, tvm.cuda(0)), b)
    want = a * a + ml_dtypes.bfloat16(1.5)
    np.testing.assert_array_equal(b.numpy().view(np.uint16), want.view(np.uint16))


def test_extern_with_device_code(rng):
    src = """
__device__ void scale2(const float* x, float* y, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i];
}"""
    n = 300
    A = te.placeholder((n,), name="A")
    B = te.extern((n,), [A], lambda ins, outs: tvm.tir.call_extern(
        "float32", "scale2", ins[0], outs[0], n, source=src, grid=(n + 127) // 128, block=128),
        name="B")
    f = tvm.build(te.create_schedule(B.op), [A, B], "cuda")
    a = rng.standard_normal(n).astype("float32")
    b = tvm.nd.array(np.zeros(n, "float32"), tvm.cuda(0))
    f.emulate(tvm.nd.array(a, tvm.cuda(0)), b)
    tvm.testing.assert_allclose(b.numpy(), 2 * a)
