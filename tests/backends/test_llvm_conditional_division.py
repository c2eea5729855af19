"""A loop-invariant division by a variable under a branch of a serial loop.

LLVM 22's loop vectorizer computes such a division (``2 % n`` inside a lazy select or an
``if``) only when the vector's first lane takes the branch; the other lanes then read a
stale register (a pointer, here).  The code generator keeps those loops from LLVM's
vectorizer; these programs returned garbage before."""
from __future__ import annotations

import numpy as np
import pytest

from tdsl.backends.llvm import build
from tdsl.expr import Const, FloorDiv, FloorMod, Select, SizeVar
from tdsl.stmt import Buffer, IfThenElse

try:
    from .llvm_irbuild import U, load, loop, prim, store
except ImportError:
    from llvm_irbuild import U, load, loop, prim, store

pytestmark = pytest.mark.usefixtures("no_disk_cache")


def c64(v: int) -> Const:
    return Const(v, "int64")


def _buffers():
    n = SizeVar("n")
    return n, Buffer("A", [n], "int64"), Buffer("Out", [n], "int64")


def select_program():
    """``Out[i] = A[i] < 0 ? A[700 % n] : i``: the load's index is loop-invariant."""
    n, A, Out = _buffers()
    body = loop("i", n, lambda i: store(
        Out, Select(load(A, i) < c64(0), load(A, FloorMod(c64(700), n)), i), i))
    return prim("cond_div_select", [A, Out], body, [n])


def if_program():
    """``if A[i] < 0: Out[i] = (2 * n) // 3 + A[5 % n]`` (an ``if`` statement's arm)."""
    n, A, Out = _buffers()
    body = loop("i", n, lambda i: IfThenElse(
        load(A, i) < c64(0),
        store(Out, FloorDiv(n * c64(2), c64(3)) + load(A, FloorMod(c64(5), n)), i)))
    return prim("cond_div_if", [A, Out], body, [n])


def unrolled_program():
    """The division in a fully unrolled inner loop inside the branch: once unrolled, the
    outer loop is the innermost one LLVM vectorizes."""
    n, A, Out = _buffers()

    def body(i):
        def inner(j):
            return store(Out, load(Out, i) + load(A, FloorMod(c64(3) + j, n)), i)
        return IfThenElse(load(A, i) < c64(0), loop("j", 2, inner, U))
    return prim("cond_div_unrolled", [A, Out], loop("i", n, body), [n])


def _reference(name: str, a: np.ndarray, out: np.ndarray) -> np.ndarray:
    n = len(a)
    i = np.arange(n)
    neg = a < 0
    if name == "cond_div_select":
        return np.where(neg, a[700 % n], i)
    if name == "cond_div_if":
        return np.where(neg, (2 * n) // 3 + a[5 % n], out)
    return np.where(neg, out + a[3 % n] + a[4 % n], out)


@pytest.mark.parametrize("make", [select_program, if_program, unrolled_program])
@pytest.mark.parametrize("size", [1, 7, 8, 13, 64, 101])
def test_invariant_division_under_a_branch(make, size):
    func = make()
    mod = build(func)
    rng = np.random.default_rng(size)
    a = rng.integers(-1000, 1000, size).astype("int64")
    a[0] = 5      # the first lane of the first vector does not take the branch
    out = rng.integers(-9, 9, size).astype("int64")
    want = _reference(func.name, a, out)
    mod(a, out)
    np.testing.assert_array_equal(out, want)


def test_only_those_loops_lose_llvms_vectorizer():
    """The hint goes on the loops with a conditional division, not on every loop."""
    n, A, Out = _buffers()
    plain = prim("plain_div", [A, Out], loop("i", n, lambda i: store(
        Out, load(A, i) + FloorMod(c64(700), n), i)), [n])
    assert "llvm.loop.vectorize.enable" not in build(plain).get_source("ll")
    ir = build(select_program()).get_source("ll")
    assert '!"llvm.loop.vectorize.enable", i1 0' in ir
