"""TVM's test_dependent_output_shape: an output of shape ``(m, n // x)`` with the size ``x``
in the argument list is bound from the number passed at call time (LLVM, the interpreter,
a CUDA build emulated on the CPU); ``tvm.nd.array`` of a 0-d array stays 0-d."""
import shutil

import numpy as np
import pytest

import tdsl.interpreter
import tvm
from tvm import te

from tdsl.errors import ShapeError


def _dependent(scale: bool = True):
    n, m, x = te.size_var("n"), te.size_var("m"), te.size_var("x")
    A = te.placeholder((n, m), name="A")
    B = te.compute((m, n // x),
                   lambda i, j: A[i, j] * x.astype("float32") if scale else A[i, j], name="B")
    return A, B, x


def _expected(a, xv):
    m, n = a.shape[1], a.shape[0]
    return a[:m, :n // xv] * xv


@pytest.mark.parametrize("shape,xv", [((8, 8), 2), ((9, 7), 2), ((9, 9), 4), ((5, 5), 1)])
def test_size_bound_from_a_scalar_argument(rng, shape, xv):
    A, B, x = _dependent()
    s = te.create_schedule(B.op)
    jo, ji = s[B].split(B.op.axis[1], factor=3)
    f = tvm.build(s, [A, B, x])
    a = rng.standard_normal(shape).astype("float32")
    out_shape = (shape[1], shape[0] // xv)
    b = np.full(out_shape, np.nan, "float32")
    f(a, b, xv)
    np.testing.assert_allclose(b, _expected(a, xv), rtol=1e-6)
    b2 = np.full(out_shape, np.nan, "float32")
    tdsl.interpreter.run(tvm.lower(s, [A, B, x]), a, b2, xv)
    np.testing.assert_allclose(b2, _expected(a, xv), rtol=1e-6)


def test_one_module_called_with_several_scalar_values(rng):
    A, B, x = _dependent(scale=False)
    f = tvm.build(te.create_schedule(B.op), [A, B, x])
    a = rng.standard_normal((12, 6)).astype("float32")
    for xv in (2, 3, 5, 12):
        b = tvm.nd.array(np.zeros((6, 12 // xv), "float32"))
        f(tvm.nd.array(a), b, xv)
        np.testing.assert_allclose(b.numpy(), a[:6, :12 // xv])


def test_output_shape_checked_against_the_scalar_value(rng):
    A, B, x = _dependent(scale=False)
    f = tvm.build(te.create_schedule(B.op), [A, B, x])
    a = rng.standard_normal((8, 8)).astype("float32")
    with pytest.raises(ShapeError, match=r"expected n//x = 4 \(.*x = 2 from the scalar 'x'"):
        f(a, np.zeros((8, 3), "float32"), 2)
    with pytest.raises(ShapeError, match="td.var"):
        f(a, np.zeros((8, 3), "float32"), 0)


def test_size_left_out_names_the_scalar_as_a_fix():
    A, B, x = _dependent(scale=False)
    with pytest.raises(ShapeError, match=r"'x' itself \(a scalar\)"):
        tvm.build(te.create_schedule(B.op), [A, B])


def test_scalar_that_is_also_a_dimension_is_checked_against_it(rng):
    n, x = te.size_var("n"), te.size_var("x")
    A = te.placeholder((n, x), name="A")
    B = te.compute((n, x), lambda i, j: A[i, j] + 1.0, name="B")
    f = tvm.build(te.create_schedule(B.op), [A, B, x])
    a = rng.standard_normal((3, 5)).astype("float32")
    b = np.zeros((3, 5), "float32")
    f(a, b, 5)
    np.testing.assert_allclose(b, a + 1)
    with pytest.raises(ShapeError, match="inconsistent value of size 'x'.*the scalar 'x' = 4"):
        f(a, b, 4)


@pytest.mark.skipif(shutil.which("g++") is None, reason="CUDA emulation needs g++")
def test_dependent_shape_cuda_build_emulated(rng):
    A, B, x = _dependent()
    s = te.create_schedule(B.op)
    fused = s[B].fuse(*B.op.axis)
    bx, tx = s[B].split(fused, factor=32)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    f = tvm.build(s, [A, B, x], "cuda")
    a = rng.standard_normal((10, 9)).astype("float32")
    b = np.zeros((9, 3), "float32")
    f.emulate(a, b, 3)
    np.testing.assert_allclose(b, _expected(a, 3), rtol=1e-6)


def test_nd_array_of_a_0d_array_is_0d():
    v = tvm.nd.array(np.array(1.5))
    assert v.shape == () and v.ndim == 0
    assert v.numpy() == np.float32(1.5) or float(v.numpy()) == 1.5
    assert tvm.nd.array(np.array([1.5])).shape == (1,)


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                    reason="export_library links with the system C compiler")
def test_scalar_size_survives_export_and_load(rng, tmp_path):
    A, B, x = _dependent()
    f = tvm.build(te.create_schedule(B.op), [A, B, x])
    path = str(tmp_path / "dep.so")
    f.export_library(path)
    g = tvm.runtime.load_module(path)
    a = rng.standard_normal((9, 9)).astype("float32")
    b = np.zeros((9, 3), "float32")
    g(a, b, 3)
    np.testing.assert_allclose(b, _expected(a, 3), rtol=1e-6)
    with pytest.raises(ShapeError, match="from the scalar 'x'"):
        g(a, b, 2)
