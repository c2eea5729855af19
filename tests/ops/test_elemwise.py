"""Elementwise and broadcasting operators on "llvm" against NumPy: constant shapes, symbolic
shapes bound to several sizes (tails of the 16-lane vectors included), broadcasting."""
from __future__ import annotations

import numpy as np
import pytest

import tdsl as td
from tdsl import ops
from tdsl.errors import DTypeError, ShapeError

from .helpers import build, check, erf, randint, randn, torch

SYM_SIZES = [(1, 1), (3, 17), (8, 16), (5, 33)]

BINARY = [
    ("add", ops.add, np.add),
    ("subtract", ops.subtract, np.subtract),
    ("multiply", ops.multiply, np.multiply),
    ("divide", ops.divide, np.divide),
    ("maximum", ops.maximum, np.maximum),
    ("minimum", ops.minimum, np.minimum),
    ("power", ops.power, lambda a, b: np.power(np.abs(a), b)),
]


@pytest.mark.parametrize("name,op,ref", BINARY, ids=[b[0] for b in BINARY])
def test_binary_broadcast_symbolic(name, op, ref):
    n, m = td.var("n"), td.var("m")
    A = td.placeholder((n, m), name="A")
    B = td.placeholder((m,), name="B")
    if name == "power":
        Aabs = ops.abs(A)
        out = op(Aabs, B)
    else:
        out = op(A, B)
    f = build(out, [A, B])
    for r, c in SYM_SIZES:
        a, b = randn(r, c), randn(c)
        if name == "divide":
            b = np.where(np.abs(b) < 0.1, 0.5, b).astype("float32")
        check(f, [a, b], ref(a, b), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape_a,shape_b", [((4, 1, 5), (3, 1)), ((1,), (2, 3, 17)),
                                             ((6, 33), (6, 1)), ((2, 3, 4, 5), (3, 1, 5))])
def test_broadcast_constant_shapes(shape_a, shape_b):
    A = td.placeholder(shape_a, name="A")
    B = td.placeholder(shape_b, name="B")
    f = build(ops.multiply(ops.add(A, B), B), [A, B])
    a, b = randn(*shape_a), randn(*shape_b)
    check(f, [a, b], (a + b) * b)


def test_scalars_and_int_ops():
    n = td.var("n")
    A = td.placeholder((n,), "int32", name="A")
    B = td.placeholder((n,), "int32", name="B")
    outs = [ops.floor_divide(A, B), ops.mod(A, B), ops.add(A, 3), ops.multiply(2, A)]
    f = build(outs, [A, B])
    for size in (1, 19, 64):
        a = randint(-50, 50, size)
        b = (randint(1, 9, size) * np.where(randint(0, 2, size) > 0, 1, -1)).astype("int32")
        check(f, [a, b], [a // b, a % b, a + 3, 2 * a])


def test_comparisons_where_logical():
    n = td.var("n")
    A = td.placeholder((n, 5), name="A")
    B = td.placeholder((5,), name="B")
    gt = ops.greater(A, B)
    outs = [gt, ops.less_equal(A, B), ops.equal(A, A), ops.where(gt, A, 0.0),
            ops.logical_and(gt, ops.not_equal(A, B)), ops.logical_not(gt)]
    f = build(outs, [A, B])
    for rows in (1, 7):
        a, b = randn(rows, 5), randn(5)
        g = a > b
        check(f, [a, b], [g, a <= b, np.ones_like(g), np.where(g, a, 0).astype("float32"),
                          g & (a != b), ~g])


UNARY = [
    ("negative", ops.negative, lambda x: -x),
    ("abs", ops.abs, np.abs),
    ("exp", ops.exp, np.exp),
    ("log", lambda x: ops.log(ops.abs(x)), lambda x: np.log(np.abs(x))),
    ("sqrt", lambda x: ops.sqrt(ops.abs(x)), lambda x: np.sqrt(np.abs(x))),
    ("rsqrt", lambda x: ops.rsqrt(ops.abs(x)), lambda x: 1 / np.sqrt(np.abs(x))),
    ("tanh", ops.tanh, np.tanh),
    ("sigmoid", ops.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    ("erf", ops.erf, lambda x: erf(x).astype("float32")),
    ("floor", ops.floor, np.floor),
    ("ceil", ops.ceil, np.ceil),
    ("round", ops.round, np.rint),
    ("relu", ops.relu, lambda x: np.maximum(x, 0)),
    ("leaky_relu", ops.leaky_relu, lambda x: np.where(x > 0, x, 0.01 * x)),
    ("gelu", ops.gelu, lambda x: (x * 0.5 * (1 + erf(x / np.sqrt(2))))),
    ("gelu_tanh", lambda x: ops.gelu(x, approximate="tanh"),
     lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))),
    ("silu", ops.silu, lambda x: x / (1 + np.exp(-x))),
    ("clip", lambda x: ops.clip(x, -0.5, 0.75), lambda x: np.clip(x, -0.5, 0.75)),
    ("sin", ops.sin, np.sin),
    ("cos", ops.cos, np.cos),
]


@pytest.mark.parametrize("name,op,ref", UNARY, ids=[u[0] for u in UNARY])
def test_unary(name, op, ref):
    n = td.var("n")
    A = td.placeholder((n, 19), name="A")
    f = build(op(A), [A])
    for rows in (1, 6):
        a = randn(rows, 19) * 3
        if name in ("log", "rsqrt"):
            a = np.where(np.abs(a) < 0.05, 1.0, a).astype("float32")
        check(f, [a], ref(a).astype("float32"), rtol=2e-5, atol=2e-6)


def test_cast_and_dtypes():
    n = td.var("n")
    A = td.placeholder((n,), "float32", name="A")
    I = td.placeholder((n,), "int8", name="I")
    outs = [ops.cast(A, "int32"), ops.cast(I, "float32"), ops.add(ops.cast(I, "int32"), 1000),
            ops.cast(A, "float16")]
    f = build(outs, [A, I])
    a = randn(37) * 100
    i = randint(-128, 128, 37, dtype="int8")
    check(f, [a, i], [a.astype("int32"), i.astype("float32"), i.astype("int32") + 1000,
                      a.astype("float16")], rtol=1e-3)


def test_float64_and_broadcast_to():
    n = td.var("n")
    A = td.placeholder((n, 1), "float64", name="A")
    out = ops.broadcast_to(A, (n, 21))
    f = build(ops.exp(out), [A])
    a = np.random.default_rng(1).standard_normal((4, 1))
    check(f, [a], np.exp(np.broadcast_to(a, (4, 21))), rtol=1e-12)


@pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
def test_activations_match_torch():
    n = td.var("n")
    A = td.placeholder((n, 40), name="A")
    outs = [ops.gelu(A), ops.gelu(A, approximate="tanh"), ops.silu(A), ops.sigmoid(A)]
    f = build(outs, [A])
    a = randn(9, 40) * 4
    t = torch.from_numpy(a)
    F = torch.nn.functional
    check(f, [a], [F.gelu(t).numpy(), F.gelu(t, approximate="tanh").numpy(), F.silu(t).numpy(),
                   torch.sigmoid(t).numpy()], rtol=1e-5, atol=1e-6)


def test_errors():
    A = td.placeholder((4, 5), name="A")
    B = td.placeholder((3,), name="B")
    with pytest.raises(ShapeError, match="cannot broadcast"):
        ops.add(A, B)
    I = td.placeholder((4, 5), "int32", name="I")
    with pytest.raises(DTypeError):
        ops.add(A, I)
    with pytest.raises(DTypeError):
        ops.gelu(I)
    n, m = td.var("n"), td.var("m")
    with pytest.raises(ShapeError):
        ops.add(td.placeholder((n,), name="X"), td.placeholder((m,), name="Y"))
    with pytest.raises(ValueError, match="activation"):
        ops.dense(A, td.placeholder((6, 5), name="W"), activation="swish")
