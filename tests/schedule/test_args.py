"""What ``args`` of lower/build may hold besides the tensors the computation reads."""
import numpy as np
import pytest

import tdsl as td
from tdsl import interpreter


def _both(s, args, arrays):
    outs = []
    for mode in ("interp", "llvm"):
        arrs = [a.copy() if isinstance(a, np.ndarray) else a for a in arrays]
        if mode == "interp":
            interpreter.run(td.lower(s, args), *arrs)
        else:
            td.build(s, args, target="llvm")(*arrs)
        outs.append(arrs)
    return outs


@pytest.mark.parametrize("n", [8, 13])
def test_unused_input_is_an_ignored_parameter(n):
    """An input placeholder passed in args but not read is accepted (as in TVM)."""
    m = td.var("m")
    A = td.placeholder((m,), name="A")
    U = td.placeholder((m, 3), "int32", name="U")
    C = td.compute((m,), lambda i: A[i] * 2.0, name="C")
    s = td.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    a = np.random.default_rng(n).uniform(-3, 3, n).astype("float32")
    u = np.arange(3 * n, dtype="int32").reshape(n, 3)
    for _, u_out, c in _both(s, [A, U, C], [a, u, np.full(n, np.nan, "float32")]):
        np.testing.assert_allclose(c, a * 2)
        np.testing.assert_array_equal(u_out, u)
    f = td.lower(s, [A, U, C])
    assert [b.name for b in f.params] == ["A", "U", "C"]
    for bad in (np.zeros((n, 4), "int32"), np.zeros((n, 3), "float32")):   # checked like any param
        with pytest.raises(td.TDSLError):
            interpreter.run(f, a, bad, np.zeros(n, "float32"))
        with pytest.raises(td.TDSLError):
            td.build(s, [A, U, C], target="llvm")(a, bad, np.zeros(n, "float32"))


def test_unused_input_twice_and_foreign_compute_are_refused():
    A = td.placeholder((8,), name="A")
    U = td.placeholder((8,), name="U")
    C = td.compute((8,), lambda i: A[i] * 2.0, name="C")
    D = td.compute((8,), lambda i: U[i] + 1.0, name="D")
    s = td.create_schedule(C.op)
    with pytest.raises(td.LoweringError, match="'U' appears twice"):
        td.lower(s, [A, U, U, C])
    with pytest.raises(td.LoweringError, match="'D' is not part of this schedule"):
        td.lower(s, [A, D, C])


@pytest.mark.parametrize("n", [8, 13])
def test_scalar_parameters(n):
    """td.var scalars in args (a float factor, an int offset) are passed as Python numbers
    to both the interpreter and the LLVM kernel."""
    m = td.var("m")
    alpha = td.var("alpha", "float32")
    off = td.var("off")
    A = td.placeholder((m + 4,), name="A")
    B = td.compute((m,), lambda i: A[i + off] * alpha + 1.0, name="B")
    s = td.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], factor=3)
    args = [A, alpha, off, B]
    a = np.random.default_rng(n).uniform(-3, 3, n + 4).astype("float32")
    for o, al in ((1, 2.5), (4, np.float32(-0.75)), (3, 1)):
        for _, _, _, b in _both(s, args, [a, al, o, np.full(n, np.nan, "float32")]):
            np.testing.assert_allclose(b, a[o:o + n] * np.float32(al) + 1, rtol=1e-6)
    f = td.lower(s, args)
    out = np.zeros(n, "float32")
    for bad, err in (("2.5", td.DTypeError), (None, td.DTypeError)):
        with pytest.raises(err, match="'alpha'"):
            interpreter.run(f, a, bad, 1, out)
        with pytest.raises(err, match="'alpha'"):
            td.build(s, args, target="llvm")(a, bad, 1, out)
    # a 1-element array holding the value is checked like the number (an int td.var is a
    # size: the compiler assumes >= 1)
    for bad, err in ((1.5, td.DTypeError), (0, td.ShapeError), (np.array([0]), td.ShapeError),
                     (np.array([2.5], "float32"), td.DTypeError)):
        with pytest.raises(err, match="'off'"):
            interpreter.run(f, a, 1.0, bad, out)
        with pytest.raises(err, match="'off'"):
            td.build(s, args, target="llvm")(a, 1.0, bad, out)


def test_scalar_parameter_errors():
    n = td.var("n")
    A = td.placeholder((n,), name="A")
    B = td.compute((n,), lambda i: A[i] * 2.0, name="B")
    s = td.create_schedule(B.op)
    # a size passed as a scalar too (as TVM allows): bound from the number, which the
    # dimension must then match
    g = td.lower(s, [A, n, B])
    a, b = np.arange(1, 5, dtype="float32"), np.zeros(4, "float32")
    interpreter.run(g, a, 4, b)
    np.testing.assert_allclose(b, a * 2)
    with pytest.raises(td.ShapeError, match="inconsistent value of size 'n'"):
        td.build(s, [A, n, B], target="llvm")(a, 3, b)
    x = td.var("x", "float32")
    with pytest.raises(td.LoweringError, match="scalar 'x' appears twice"):
        td.lower(s, [A, x, x, B])
    C = td.compute((n,), lambda i: A[i] * x, name="C")
    with pytest.raises(td.LoweringError, match="stage 'C' reads the scalar parameter 'x'"):
        td.lower(td.create_schedule(C.op), [A, C])
    f = td.lower(s, [A, x, B])             # unused scalar: fine
    b = np.zeros(5, "float32")
    interpreter.run(f, np.ones(5, "float32"), 3.0, b)
    np.testing.assert_allclose(b, 2.0)


def test_scalar_parameters_survive_exported_metadata():
    from tdsl.runtime.args import scalar_params
    from tdsl.runtime.meta import signature_from_json, signature_to_json
    A = td.placeholder((4,), name="A")
    x = td.var("x", "float32")
    B = td.compute((4,), lambda i: A[i] * x, name="B")
    f = td.lower(td.create_schedule(B.op), [A, x, B])
    assert scalar_params(f) == {1}
    assert scalar_params(signature_from_json(signature_to_json(f, "k"))) == {1}
