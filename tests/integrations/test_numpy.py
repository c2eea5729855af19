"""tdsl.integrations.numpy: argument roles, output shapes, calling with inputs only."""
import numpy as np
import pytest

import tdsl as td
from tdsl.integrations import numpy as tnp


@pytest.fixture(scope="module")
def linear():
    n, m, k = td.var("n"), td.var("m"), td.var("k")
    X = td.placeholder((n, k), "float32", name="X")
    W = td.placeholder((m, k), "float32", name="W")
    r = td.reduce_axis((0, k), name="r")
    Y = td.compute((n, m), lambda i, j: td.sum(X[i, r] * W[j, r], axis=r), name="Y")
    return td.build(td.create_schedule(Y.op), [X, W, Y], name="linear")


@pytest.fixture(scope="module")
def two_outputs():
    """Outputs first and last in the argument list, one shaped by an expression (2*n)."""
    n = td.var("n")
    A = td.placeholder((n,), "float64", name="A")
    S = td.compute((n,), lambda i: A[i] + 1.0, name="S")
    D = td.compute((2 * n,), lambda i: A[i // 2] * 2.0, name="D")
    s = td.create_schedule([S.op, D.op])
    return td.build(s, [S, A, D], name="two")


def test_signature_lists_roles_shapes_and_dtypes(linear):
    sig = tnp.signature(linear)
    assert [(p.name, p.role, p.shape, p.dtype) for p in sig] == [
        ("X", "input", ("n", "k"), "float32"),
        ("W", "input", ("m", "k"), "float32"),
        ("Y", "output", ("n", "m"), "float32")]
    assert str(sig[2]) == "2: Y [output] (n, m) float32"


def test_call_allocates_the_output(linear):
    rng = np.random.default_rng(0)
    x = rng.random((7, 5), dtype=np.float32)
    w = rng.random((3, 5), dtype=np.float32)
    y = tnp.call(linear, x, w)
    assert y.shape == (7, 3) and y.dtype == np.float32
    np.testing.assert_allclose(y, x @ w.T, rtol=1e-5)


def test_several_outputs_anywhere_in_the_argument_list(two_outputs):
    a = np.arange(3, dtype="float64")
    assert tnp.output_shapes(two_outputs, [(3,)]) == [(3,), (6,)]
    s, d = tnp.call(two_outputs, a)
    np.testing.assert_array_equal(s, a + 1)
    np.testing.assert_array_equal(d, np.repeat(a, 2) * 2)


def test_allocating_wrapper_also_accepts_every_argument(linear):
    lin = tnp.allocating(linear)
    x = np.ones((2, 4), "float32")
    w = np.ones((3, 4), "float32")
    np.testing.assert_array_equal(lin(x, w), np.full((2, 3), 4, "float32"))
    y = np.zeros((2, 3), "float32")
    assert lin(x, w, y) is None
    np.testing.assert_array_equal(y, np.full((2, 3), 4, "float32"))
    assert "Y [output]" in lin.__doc__


def test_wrong_inputs_are_refused_before_running(linear):
    x = np.ones((2, 4), "float32")
    with pytest.raises(td.ShapeError, match="2 input"):
        tnp.call(linear, x)
    with pytest.raises(td.ShapeError, match="dimension"):
        tnp.call(linear, x, np.ones(4, "float32"))
    with pytest.raises(td.ShapeError, match="'k'"):
        tnp.call(linear, x, np.ones((3, 5), "float32"))
    with pytest.raises(td.DTypeError):
        tnp.call(linear, x.astype("float64"), np.ones((3, 4), "float32"))


def test_size_known_only_from_an_output_cannot_be_allocated():
    n = td.var("n")
    B = td.placeholder((n,), "float32", name="B")
    C = td.compute((n,), lambda i: B[i] * 2.0, name="C")
    f = td.build(td.create_schedule(C.op), [C, B], name="out_first")
    # n is bound from the output C (the first argument) in the kernel, but B gives it too
    np.testing.assert_array_equal(tnp.call(f, np.ones(3, "float32")), np.full(3, 2, "float32"))
    m = td.var("m")
    P = td.placeholder((3,), "float32", name="P")
    Q = td.compute((m,), lambda i: P[0] * 1.0, name="Q")
    g = td.build(td.create_schedule(Q.op), [P, Q], name="only_out")
    with pytest.raises(td.ShapeError, match="'m'"):
        tnp.call(g, np.ones(3, "float32"))


def test_not_a_module_is_a_type_error():
    with pytest.raises(TypeError, match="built tdsl module"):
        tnp.signature(object())
