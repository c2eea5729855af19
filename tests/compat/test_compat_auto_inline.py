"""TVM's ``te.schedule.AutoInlineElemWise`` / ``AutoInlineBroadcast`` / ``AutoInlineInjective``
and ``Schedule.normalize()``: which stages get inlined, and the built functions checked
against NumPy on random data at symbolic sizes bound to several values."""
import numpy as np
import pytest

import tvm
from tvm import te

from tdsl.errors import ScheduleError, TDSLError

from .helpers import run_both

SIZES = [(5, 7), (8, 16), (13, 3)]


def _graph():
    """T1 = A*B (elementwise), T2 = T1 + C[i] (a broadcast: injective, not elementwise),
    R = sum over k in [1, n) of T2 (a reduction), D = R + 1 (the output)."""
    m, n = te.var("m"), te.var("n")
    A = te.placeholder((m, n), name="A")
    B = te.placeholder((m, n), name="B")
    C = te.placeholder((m,), name="C")
    T1 = te.compute((m, n), lambda i, j: A(i, j) * B(i, j), name="T1")
    T2 = te.compute((m, n), lambda i, j: T1(i, j) + C(i), name="T2")
    k = te.reduce_axis((1, n), "k")
    R = te.compute((m,), lambda i: te.sum(T2[i, k], axis=k), name="R")
    D = te.compute((m,), lambda i: R[i] + 1.0, name="D")
    return (A, B, C, D), (T1, T2, R)


def _inlined(s, tensors):
    return [s[t].attach_type.value == "inline" for t in tensors]


def _check(rng, s, args, sizes):
    m, n = sizes
    a, b = rng.standard_normal((2, m, n)).astype("float32")
    c = rng.standard_normal(m).astype("float32")
    want = (a * b + c[:, None])[:, 1:].sum(axis=1) + 1
    for out in run_both(s, list(args), [a, b, c, np.zeros(m, "float32")]):
        np.testing.assert_allclose(out[3], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize("helper,expect", [
    ("AutoInlineElemWise", [True, False, False]),
    ("AutoInlineBroadcast", [True, True, False]),
    ("AutoInlineInjective", [True, True, False]),
])
def test_auto_inline_picks_the_stages_tvm_does(rng, sizes, helper, expect):
    args, inner = _graph()
    s = te.create_schedule(args[-1].op)
    assert _inlined(s, inner) == [False, False, False]
    getattr(te.schedule, helper)(s)
    assert _inlined(s, inner) == expect
    assert not _inlined(s, [args[-1]])[0]        # the output stays
    _check(rng, s, args, sizes)


def test_auto_inline_leaves_scheduled_stages_alone(rng):
    args, (T1, T2, R) = _graph()
    D = args[-1]
    s = te.create_schedule(D.op)
    s[T1].split(T1.op.axis[1], factor=4)            # scheduled: TVM leaves it
    s[T2].compute_at(s[R], R.op.axis[0])            # attached: left alone too
    te.schedule.AutoInlineInjective(s)
    assert _inlined(s, [T1, T2, R]) == [False, False, False]
    for sizes in SIZES:
        _check(rng, s, args, sizes)


def test_auto_inline_leaves_a_stage_read_by_an_extern(rng):
    n = 9
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")

    @tvm.register_func("tdsl.compat.test.auto_inline_copy", override=True)
    def copy(x, y):
        tvm.nd.array(x.numpy() + 1).copyto(y)

    C = te.extern((n,), [B], lambda ins, outs: tvm.tir.call_packed(
        "tdsl.compat.test.auto_inline_copy", ins[0], outs[0]), name="C")
    D = te.compute((n,), lambda i: C[i] - 3.0, name="D")
    s = te.create_schedule(D.op)
    te.schedule.AutoInlineElemWise(s)
    assert _inlined(s, [B]) == [False]
    a = rng.standard_normal(n).astype("float32")
    d = np.zeros(n, "float32")
    tvm.build(s, [A, D], "llvm")(a, d)
    np.testing.assert_allclose(d, a * 2 + 1 - 3, rtol=1e-6)


def test_auto_inline_refuses_what_is_not_a_schedule():
    args, _ = _graph()
    with pytest.raises(ScheduleError, match="AutoInlineElemWise: .*expected a te.Schedule, got "
                                            "ComputeOp") as e:
        te.schedule.AutoInlineElemWise(args[-1].op)
    assert isinstance(e.value, TDSLError) and isinstance(e.value, RuntimeError)


@pytest.mark.parametrize("sizes", SIZES)
def test_normalize_is_the_schedule_lowering_rebases(rng, sizes):
    """After inline, compute_at and a split that does not divide, with a reduce axis that
    starts at 1: ``s.normalize()`` is ``s`` and lowers to the same, correct function."""
    args, (T1, T2, R) = _graph()
    D = args[-1]
    s = te.create_schedule(D.op)
    s[T1].compute_inline()
    xo, xi = s[D].split(D.op.axis[0], factor=3)
    s[R].compute_at(s[D], xo)
    before = str(tvm.lower(s, list(args)))
    sn = s.normalize()
    assert sn is s and str(tvm.lower(sn, list(args))) == before
    _check(rng, sn, args, sizes)
