"""Property test of the vectorizer: random integer and float expressions (gathers
through computed indices, selects with loads, floor division, casts, lane-dependent
guards) computed by a widened loop must equal the same program run as a plain
serial loop, and both must equal a NumPy evaluation."""
from __future__ import annotations

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import example, given, settings, strategies as st  # noqa: E402

from tdsl.expr import (Add, Cast, Const, FloorDiv, FloorMod, Max, Min, Mul, Select,  # noqa: E402
                       SizeVar, Sub)
from tdsl.stmt import Buffer, IfThenElse  # noqa: E402

try:
    from .llvm_irbuild import S, V, load, loop, prim, store
except ImportError:
    from llvm_irbuild import S, V, load, loop, prim, store

from tdsl.backends.llvm import build  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_disk_cache")


OPS = {"add": (Add, np.add), "sub": (Sub, np.subtract), "mul": (Mul, np.multiply),
       "min": (Min, np.minimum), "max": (Max, np.maximum)}


def expr_tree(depth: int):
    """A strategy of (builder, numpy evaluator) pairs over int64 values.

    A builder maps (i, n, A) to a tdsl expression; an evaluator maps (i array, n, a)
    to the NumPy values (int64, wrapping)."""
    leaves = st.one_of(
        st.integers(-50, 50).map(lambda c: (lambda i, n, A: Const(c, "int64"),
                                            lambda i, n, a: np.full(i.shape, c, "int64"))),
        st.just((lambda i, n, A: i, lambda i, n, a: i.copy())),
        st.just((lambda i, n, A: load(A, i), lambda i, n, a: a[i])),
    )
    if depth == 0:
        return leaves

    sub = expr_tree(depth - 1)

    def binop(args):
        name, (fa, ea), (fb, eb) = args
        cls, ref = OPS[name]
        return (lambda i, n, A: cls(fa(i, n, A), fb(i, n, A)),
                lambda i, n, a: ref(ea(i, n, a), eb(i, n, a)))

    def floordiv(args):
        mod, (fa, ea), d = args
        cls = FloorMod if mod else FloorDiv
        ref = np.remainder if mod else np.floor_divide
        return (lambda i, n, A: cls(fa(i, n, A), Const(d, "int64")),
                lambda i, n, a: ref(ea(i, n, a), np.int64(d)))

    def gather(args):
        fa, ea = args  # A[(expr) % n]: an in-bounds, lane-varying index
        return (lambda i, n, A: load(A, FloorMod(fa(i, n, A), n)),
                lambda i, n, a: a[np.remainder(ea(i, n, a), len(a))])

    def select(args):
        (fc, ec), (ft, et), (ff, ef) = args  # a lazy select whose true branch loads
        return (lambda i, n, A: Select(fc(i, n, A) < Const(0, "int64"),
                                       load(A, FloorMod(ft(i, n, A), n)), ff(i, n, A)),
                lambda i, n, a: np.where(ec(i, n, a) < 0, a[np.remainder(et(i, n, a), len(a))],
                                         ef(i, n, a)))

    def narrow(args):
        fa, ea = args  # wrap through int32 and back
        return (lambda i, n, A: Cast(Cast(fa(i, n, A), "int32"), "int64"),
                lambda i, n, a: ea(i, n, a).astype("int32").astype("int64"))

    return st.one_of(
        leaves,
        st.tuples(st.sampled_from(sorted(OPS)), sub, sub).map(binop),
        st.tuples(st.booleans(), sub, st.sampled_from([1, 2, 3, -4, 7, 16])).map(floordiv),
        sub.map(gather),
        st.tuples(sub, sub, sub).map(select),
        sub.map(narrow),
    )


def programs(fexpr, lanes: int):
    n = SizeVar("n")
    A = Buffer("A", [n], "int64")
    Out = Buffer("Out", [n], "int64")
    serial = prim("prop_serial", [A, Out], loop("i", n, lambda i: store(Out, fexpr(i, n, A), i), S),
                  [n])

    def tile(io):
        def lane(ii):
            i = io * lanes + ii
            return IfThenElse(i < n, store(Out, fexpr(i, n, A), i))
        return loop("ii", lanes, lane, V)
    vector = prim("prop_vector", [A, Out], loop("io", (n + lanes - 1) // lanes, tile, S), [n])
    return serial, vector


# drawn in CI: ``2 % n`` under the lazy select's branch, which LLVM's loop vectorizer
# computed only when the first lane took it (test_llvm_conditional_division.py)
_INVARIANT_DIVISION = (
    lambda i, n, A: Select(Cast(Cast(load(A, i), "int32"), "int64") < Const(0, "int64"),
                           load(A, FloorMod(Const(2, "int64"), n)), i),
    lambda i, n, a: np.where(a[i].astype("int32") < 0, a[np.remainder(2, len(a))], i))


@settings(max_examples=40, deadline=None)
@example(tree=_INVARIANT_DIVISION, lanes=4, size=8, seed=0)
@given(tree=expr_tree(3), lanes=st.sampled_from([4, 8, 16]), size=st.integers(1, 40),
       seed=st.integers(0, 2**31))
def test_widened_equals_serial_and_numpy(tree, lanes, size, seed):
    fexpr, ref = tree
    rng = np.random.default_rng(seed)
    a = rng.integers(-1000, 1000, size).astype("int64")
    serial, vector = programs(fexpr, lanes)
    out_s = rng.integers(-9, 9, size).astype("int64")
    out_v = out_s.copy() + 1
    ms, mv = build(serial), build(vector)
    assert not mv.notes, mv.notes
    ms(a, out_s)
    mv(a, out_v)
    with np.errstate(all="ignore"):
        want = ref(np.arange(size, dtype="int64"), size, a)
    np.testing.assert_array_equal(out_s, want)
    np.testing.assert_array_equal(out_v, want)
