"""Layout operators on "llvm" against NumPy."""
from __future__ import annotations

import numpy as np
import pytest

import tdsl as td
from tdsl import ops
from tdsl.errors import ShapeError

from .helpers import build, check, randn


@pytest.mark.parametrize("axes", [None, (1, 0, 2), (2, 0, 1), (0, 2, 1)])
def test_transpose_symbolic(axes):
    n = td.var("n")
    A = td.placeholder((n, 5, 18), name="A")
    f = build(ops.transpose(A, axes), [A])
    for size in (1, 7):
        a = randn(size, 5, 18)
        check(f, [a], np.transpose(a, axes))


@pytest.mark.parametrize("src,dst", [((4, 6), (24,)), ((4, 6), (3, 8)), ((2, 3, 4), (4, -1)),
                                     ((24,), (2, 3, 4)), ((5, 1, 7), (7, 5))])
def test_reshape(src, dst):
    A = td.placeholder(src, name="A")
    f = build(ops.reshape(A, dst), [A])
    a = randn(*src)
    check(f, [a], a.reshape(dst))


def test_reshape_flatten_symbolic():
    n = td.var("n")
    A = td.placeholder((n, 3, 5), name="A")
    outs = [ops.reshape(A, (-1, 15)), ops.flatten(A), ops.reshape(A, (n, 15)),
            ops.expand_dims(A, 1), ops.squeeze(ops.expand_dims(A, 3))]
    f = build(outs, [A])
    for size in (1, 4):
        a = randn(size, 3, 5)
        check(f, [a], [a.reshape(-1, 15), a.reshape(size, 15), a.reshape(size, 15),
                       a[:, None], a])


@pytest.mark.parametrize("before,after,value", [((1, 0), (2, 3), 0.0), ((0, 5), (0, 0), -1.5),
                                                ((3, 3), (3, 3), 2.0)])
def test_pad_symbolic(before, after, value):
    n, m = td.var("n"), td.var("m")
    A = td.placeholder((n, m), name="A")
    f = build(ops.pad(A, before, after, value), [A])
    for shape in ((1, 1), (4, 17), (9, 32)):
        a = randn(*shape)
        check(f, [a], np.pad(a, tuple(zip(before, after)), constant_values=value))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concatenate(axis):
    n = td.var("n")
    A = td.placeholder((n, 4, 3), name="A")
    B = td.placeholder((n, 4, 3), name="B")
    C = td.placeholder((n, 4, 3), name="C")
    f = build(ops.concatenate([A, B, C], axis=axis), [A, B, C])
    for size in (1, 5):
        arrs = [randn(size, 4, 3) for _ in range(3)]
        check(f, arrs, np.concatenate(arrs, axis=axis))


def test_concatenate_uneven_sizes():
    A = td.placeholder((3, 5), name="A")
    B = td.placeholder((3, 17), name="B")
    f = build(ops.concatenate([A, B], axis=1), [A, B])
    a, b = randn(3, 5), randn(3, 17)
    check(f, [a, b], np.concatenate([a, b], axis=1))


def test_layout_chain_fuses_into_one_nest():
    """transpose -> pad -> relu: one loop nest, no intermediate buffer."""
    A = td.placeholder((6, 10), name="A")
    out = ops.relu(ops.pad(ops.transpose(A), (1, 1), (1, 1)))
    s = ops.schedule(out)
    func = td.lower(s, [A, out])
    assert "allocate" not in func.script()
    f = td.build(s, [A, out])
    a = randn(6, 10)
    check(f, [a], np.maximum(np.pad(a.T, 1), 0))


def test_errors():
    A = td.placeholder((4, 6), name="A")
    with pytest.raises(ShapeError):
        ops.reshape(A, (5, 5))
    with pytest.raises(ShapeError):
        ops.transpose(A, (0, 0))
    with pytest.raises(ShapeError):
        ops.concatenate([A, td.placeholder((5, 5), name="B")], axis=1)
    with pytest.raises(ShapeError):
        ops.pad(A, (1,), (1,))
    with pytest.raises(ShapeError):
        ops.squeeze(A, 0)
