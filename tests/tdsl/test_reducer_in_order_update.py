"""``comm_reducer(..., fupdate=)``: the in-order update of a reducer (an argmax's strict
"better" test, no index compare) is used only where the reduction loops visit the
points in the order of the reduction axes; reordered or fused reduction loops and
rfactor's merges of partial results use the full combiner.  Each case is checked
against NumPy on data full of ties, through LLVM and the interpreter."""
import numpy as np
import pytest

import tdsl as td
import tdsl.interpreter
from tdsl.errors import TDSLError
from tdsl.schedule.relations import reduce_loops_in_order
from tdsl.structural import structural_hash


def _argmax_reducer(with_update=True):
    def fcombine(x, y):
        take = (y[1] > x[1]) | ((y[1] == x[1]) & (y[0] < x[0]))
        return td.if_then_else(take, y[0], x[0]), td.if_then_else(take, y[1], x[1])

    def fupdate(x, y):
        # valid only in iteration order: a later element wins only if strictly better
        take = (y[1] > x[1]) | (x[0] == 2 ** 31 - 1)
        return td.if_then_else(take, y[0], x[0]), td.if_then_else(take, y[1], x[1])

    def fidentity(t0, t1):
        return td.const(2 ** 31 - 1, t0), td.min_value(t1)
    return td.comm_reducer(fcombine, fidentity, name="am",
                           fupdate=fupdate if with_update else None)


def _stage(rows=6, cols=40, reducer=None):
    am = reducer or _argmax_reducer()
    X = td.placeholder((rows, cols), "float32", name="X")
    k = td.reduce_axis((0, cols), name="k")
    idx, _ = td.compute((rows,), lambda i: am((k.var.astype("int32"), X[i, k]), axis=k),
                        name="AM")
    return X, idx


def _ties(rows, cols, seed=0):
    return np.random.default_rng(seed).integers(0, 3, (rows, cols)).astype("float32")


def _run(s, X, idx, a):
    exp = a.argmax(axis=1).astype("int32")
    out = np.full(exp.shape, 7, "int32")
    td.build(s, [X, idx], target="llvm")(a, out)
    np.testing.assert_array_equal(out, exp)
    out = np.full(exp.shape, 7, "int32")
    tdsl.interpreter.run(td.lower(s, [X, idx]), a, out)
    np.testing.assert_array_equal(out, exp)


def test_loops_in_order_use_the_update():
    X, idx = _stage()
    s = td.create_schedule(idx.op)
    ko, ki = s[idx].split(idx.op.reduce_axis[0], factor=8)
    s[idx].unroll(ki)
    assert reduce_loops_in_order(s[idx])
    text = str(td.lower(s, [X, idx]))
    assert "2147483647 ==" in text or "== 2147483647" in text, text
    _run(s, X, idx, _ties(6, 40))


def test_reordered_reduction_loops_use_the_full_combiner():
    """ko inside ki visits k = 0, 8, 16, ..., 1, 9, ...: a later visit may have a lower
    index, so a tie must compare indices (the update alone kept the first visited)."""
    X, idx = _stage()
    s = td.create_schedule(idx.op)
    ko, ki = s[idx].split(idx.op.reduce_axis[0], factor=8)
    s[idx].reorder(idx.op.axis[0], ki, ko)
    assert not reduce_loops_in_order(s[idx])
    _run(s, X, idx, _ties(6, 40))


def test_fused_reduction_loops_use_the_full_combiner():
    am = _argmax_reducer()
    X = td.placeholder((4, 6, 5), "float32", name="X")
    k0 = td.reduce_axis((0, 6), name="k0")
    k1 = td.reduce_axis((0, 5), name="k1")
    idx, _ = td.compute((4,), lambda i: am(((k0.var * 5 + k1.var).astype("int32"),
                                            X[i, k0, k1]), axis=[k0, k1]), name="AM")
    s = td.create_schedule(idx.op)
    s[idx].reorder(idx.op.axis[0], k1, k0)
    assert not reduce_loops_in_order(s[idx])
    a = _ties(4, 30, 3).reshape(4, 6, 5)
    exp = a.reshape(4, 30).argmax(axis=1).astype("int32")
    out = np.full(4, 7, "int32")
    td.build(s, [X, idx], target="llvm")(a, out)
    np.testing.assert_array_equal(out, exp)
    s2 = td.create_schedule(idx.op)
    s2[idx].fuse(k0, k1)
    assert not reduce_loops_in_order(s2[idx])


def test_rfactor_merges_use_the_full_combiner_and_partials_keep_the_update():
    """Lane partials see their elements in order (update); the merge of lanes does not
    (lane 1 may hold index 1 and lane 0 index 8 with the same value)."""
    X, idx = _stage(6, 64)
    s = td.create_schedule(idx.op)
    ko, ki = s[idx].split(idx.op.reduce_axis[0], factor=8)
    rf = s.rfactor(idx, ki, factor_axis=1)[0]
    assert s[rf].op.body[0].combiner.update is not None
    assert s[idx].op.body[0].combiner.update is None
    s[rf].vectorize(s[rf].op.axis[-1])
    a = _ties(6, 64, 1)
    a[:, 1] = a[:, 8] = 5.0                     # a tie across lanes 1 and 0
    _run(s, X, idx, a)


def test_rfactor_after_a_reorder_gives_partials_the_full_combiner():
    X, idx = _stage(6, 64)
    s = td.create_schedule(idx.op)
    ko, ki = s[idx].split(idx.op.reduce_axis[0], factor=16)
    kio, kii = s[idx].split(ki, factor=8)
    s[idx].reorder(idx.op.axis[0], kio, ko, kii)       # kio outside ko: out of order
    rf = s.rfactor(idx, kii, factor_axis=1)[0]
    assert s[rf].op.body[0].combiner.update is None
    _run(s, X, idx, _ties(6, 64, 2))


def test_the_update_is_part_of_a_reducers_identity_and_is_checked():
    with_u = _stage(reducer=_argmax_reducer(True))[1].op.body[0]
    without = _stage(reducer=_argmax_reducer(False))[1].op.body[0]
    same = _stage(reducer=_argmax_reducer(True))[1].op.body[0]
    assert structural_hash(with_u) != structural_hash(without)
    assert structural_hash(with_u) == structural_hash(same)
    a = with_u.combiner
    assert a.unordered().update is None and a.unordered().result == a.result
    bad = td.comm_reducer(lambda x, y: x + y, lambda t: td.const(0, t), name="bad",
                          fupdate=lambda x, y: (x, y))
    k = td.reduce_axis((0, 4), name="k")
    X = td.placeholder((4,), "float32", name="X")
    with pytest.raises(TDSLError, match="fupdate"):
        td.compute((1,), lambda i: bad(X[k], axis=k), name="S")


def test_a_reduction_with_init_uses_the_full_combiner():
    """``init=`` starts the accumulator at a value of the user's, not the identity the
    update's contract starts from."""
    am = _argmax_reducer()
    X = td.placeholder((4, 16), "float32", name="X")
    k = td.reduce_axis((0, 16), name="k")
    idx, _ = td.compute((4,), lambda i: am((k.var.astype("int32"), X[i, k]), axis=k,
                                           init=(td.const(100, "int32"), td.const(1.0, "float32"))),
                        name="AM")
    s = td.create_schedule(idx.op)
    a = _ties(4, 16, 4)          # values 0, 1, 2: elements tie with the init's 1.0 and,
    a[0] = 1.0                   # having lower indices than its 100, win those ties
    a[1] = 0.0
    exp = np.where(a.max(axis=1) >= 1.0, a.argmax(axis=1), 100).astype("int32")
    for run in (lambda out: td.build(s, [X, idx], target="llvm")(a, out),
                lambda out: tdsl.interpreter.run(td.lower(s, [X, idx]), a, out)):
        out = np.full(4, 7, "int32")
        run(out)
        np.testing.assert_array_equal(out, exp)
