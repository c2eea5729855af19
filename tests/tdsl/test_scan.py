"""td.scan (TVM's te.scan): recurrences over the first axis, lowered to sequential loops,
checked against NumPy on random data through the interpreter and LLVM."""
import numpy as np
import pytest

import tdsl as td
from tdsl.errors import ScheduleError, TDSLError


def run_both(s, args, arrays):
    a1 = [a.copy() for a in arrays]
    td.interpreter.run(td.lower(s, args), *a1)
    a2 = [a.copy() for a in arrays]
    td.build(s, args, target="llvm")(*a2)
    return a1, a2


def cumsum_scan():
    m, n = td.var("m"), td.var("n")
    X = td.placeholder((m, n), name="X")
    state = td.placeholder((m, n), name="state")
    init = td.compute((1, n), lambda _, i: X[0, i], name="init")
    update = td.compute((m, n), lambda t, i: state[t - 1, i] + X[t, i], name="update")
    return X, td.scan(init, update, state, inputs=[X])


@pytest.mark.parametrize("shape", [(1, 3), (9, 5), (40, 17)])
def test_cumsum_symbolic_sizes(shape):
    X, S = cumsum_scan()
    s = td.create_schedule(S.op)
    x = np.random.default_rng(shape[0]).standard_normal(shape).astype("float32")
    y = np.full(shape, np.nan, "float32")
    for out in run_both(s, [X, S], [x, y]):
        np.testing.assert_allclose(out[1], np.cumsum(x, axis=0), rtol=1e-5, atol=1e-5)


def test_scan_feeds_a_scheduled_consumer_and_reads_a_computed_input():
    m, n = td.var("m"), td.var("n")
    X = td.placeholder((m, n), name="X")
    Y = td.compute((m, n), lambda t, i: X[t, i] * 2.0, name="Y")
    state = td.placeholder((m, n), name="state")
    init = td.compute((2, n), lambda t, i: Y[t, i], name="init")
    # a stage between the update and the state runs inside each step
    prev = td.compute((m, n), lambda t, i: state[t - 1, i] * 0.5 + state[t - 2, i], name="prev")
    update = td.compute((m, n), lambda t, i: prev[t, i] + Y[t, i], name="update")
    S = td.scan(init, update, state)
    Z = td.compute((m, n), lambda t, i: S[t, i] + 1.0, name="Z")
    s = td.create_schedule(Z.op)
    io, ii = s[Z].split(Z.op.axis[1], factor=4)
    s[Z].vectorize(ii)
    s[Y].parallel(Y.op.axis[0])
    x = np.random.default_rng(3).standard_normal((23, 7)).astype("float32")
    want = np.empty_like(x)
    want[:2] = 2 * x[:2]
    for t in range(2, 23):
        want[t] = want[t - 1] * 0.5 + want[t - 2] + 2 * x[t]
    z = np.empty_like(x)
    for out in run_both(s, [X, Z], [x, z]):
        np.testing.assert_allclose(out[1], want + 1, rtol=1e-4, atol=1e-4)


def test_two_states():
    n = td.var("n")
    state_a = td.placeholder((n, 3), name="sa")
    state_b = td.placeholder((n, 3), name="sb")
    X = td.placeholder((n, 3), name="X")
    ia = td.compute((1, 3), lambda _, j: X[0, j], name="ia")
    ib = td.compute((1, 3), lambda _, j: td.const(1.0, "float32"), name="ib")
    ua = td.compute((n, 3), lambda t, j: state_a[t - 1, j] + X[t, j], name="ua")
    ub = td.compute((n, 3), lambda t, j: state_b[t - 1, j] * X[t, j], name="ub")
    A, B = td.scan([ia, ib], [ua, ub], [state_a, state_b], name="both")
    s = td.create_schedule([A.op])
    x = np.random.default_rng(4).uniform(0.5, 1.5, (11, 3)).astype("float32")
    a, b = np.empty_like(x), np.empty_like(x)
    wb = np.cumprod(x, axis=0)
    wb[0] = 1.0
    wb[1:] = np.cumprod(x[1:], axis=0)
    for out in run_both(s, [X, A, B], [x, a, b]):
        np.testing.assert_allclose(out[1], np.cumsum(x, axis=0), rtol=1e-5)
        np.testing.assert_allclose(out[2], wb, rtol=1e-5)


def test_scan_stage_cannot_be_attached_or_inlined():
    m, n = td.var("m"), td.var("n")
    X = td.placeholder((m, n), name="X")
    Y = td.compute((m, n), lambda t, i: X[t, i] + 1.0, name="Y")
    state = td.placeholder((m, n), name="state")
    S = td.scan(td.compute((1, n), lambda _, i: Y[0, i], name="init"),
                td.compute((m, n), lambda t, i: state[t - 1, i] + Y[t, i], name="update"),
                state)
    Z = td.compute((m, n), lambda t, i: S[t, i] * 2.0, name="Z")
    s = td.create_schedule(Z.op)
    with pytest.raises(ScheduleError, match="scan stage"):
        s[S].compute_at(s[Z], Z.op.axis[0])
    with pytest.raises(ScheduleError, match="scan stage"):
        s[S].compute_inline()
    with pytest.raises(ScheduleError, match="read by the scan stage"):
        s[Y].compute_inline()
    with pytest.raises(ScheduleError):
        s[S].split(S.op.axis[0], factor=2)


def test_scan_rejects_bad_arguments():
    n = td.var("n")
    state = td.placeholder((n, 4), name="state")
    X = td.placeholder((n, 4), name="X")
    init = td.compute((1, 4), lambda _, j: X[0, j], name="init")
    k = td.reduce_axis((0, 4), name="k")
    red = td.compute((n, 4), lambda t, j: td.sum(state[t - 1, k], axis=k), name="red")
    with pytest.raises(TDSLError, match="reduction"):
        td.scan(init, red, state)
    with pytest.raises(TDSLError, match="placeholder"):
        td.scan(init, init, init)
    with pytest.raises(TDSLError, match="one tensor per state"):
        td.scan([init], [init, init], [state])


def test_cuda_refuses_an_unscheduled_scan_clearly():
    X, S = cumsum_scan()
    Z = td.compute(S.shape, lambda i, j: S[i, j] * 2.0, name="Z")
    s = td.create_schedule(Z.op)
    s[Z].bind(Z.op.axis[0], td.thread_axis("blockIdx.x"))
    from tdsl.errors import BuildError
    with pytest.raises(BuildError, match="scan stage .scan.*bind its spatial loops"):
        td.build(s, [X, Z], target="cuda")


@pytest.mark.parametrize("shape", [(6, 64), (13, 37)])
def test_scheduled_spatial_loops_run_the_scan_inside(shape):
    """Splitting and parallelizing the spatial axis puts the scan loop inside it (each point
    its own recurrence); sizes that do and don't divide the split factor."""
    X, S = cumsum_scan()
    s = td.create_schedule(S.op)
    xo, xi = s[S].split(S.op.spatial_axis[0], factor=16)
    s[S].parallel(xo)
    text = str(td.lower(s, [X, S]))
    assert text.index("parallel") < text.index("scan.t")   # the scan loop is innermost
    x = np.random.default_rng(shape[1]).standard_normal(shape).astype("float32")
    for out in run_both(s, [X, S], [x, np.full(shape, np.nan, "float32")]):
        np.testing.assert_allclose(out[1], np.cumsum(x, axis=0), rtol=1e-5, atol=1e-5)


def test_update_and_init_are_views_of_the_scan_stage():
    """TVM schedules a scan through s[init] and s[update]: the same split and binding on
    both apply once; a compute inlined into the update accepts compute_at as a no-op."""
    m, n = td.var("m"), td.var("n")
    X = td.placeholder((m, n), name="X")
    state = td.placeholder((m, n), name="state")
    init = td.compute((1, n), lambda _, i: X[0, i], name="init")
    s1 = td.compute((m, n), lambda t, i: state[t - 1, i] * 0.5, name="s1")
    s2 = td.compute((m, n), lambda t, i: s1[t, i] + X[t, i], name="s2")
    S = td.scan(init, s2, state)
    s = td.create_schedule(S.op)
    a = s[init].split(init.op.axis[1], factor=8)
    b = s[s2].split(s2.op.axis[1], factor=8)
    assert a == b and s[S].leaf_iter_vars == list(a)
    s[s1].compute_at(s[s2], b[0])
    s[s2].parallel(b[0])
    s[init].parallel(a[0])
    with pytest.raises(ScheduleError, match="split differently"):
        s[s2].split(s2.op.axis[1], factor=4)
    with pytest.raises(ScheduleError, match="scan axis"):
        s[s2].split(s2.op.axis[0], factor=2)
    with pytest.raises(ScheduleError, match="scan axis"):
        s[S].split(S.op.scan_axis, factor=2)
    with pytest.raises(ScheduleError, match="computed inside each step"):
        s[s1].split(s1.op.axis[1], factor=2)
    with pytest.raises(ScheduleError, match="vectorize"):
        s[S].vectorize(b[1])
    x = np.random.default_rng(5).standard_normal((9, 20)).astype("float32")
    want = np.empty_like(x)
    want[0] = x[0]
    for t in range(1, 9):
        want[t] = want[t - 1] * 0.5 + x[t]
    for out in run_both(s, [X, S], [x, np.empty_like(x)]):
        np.testing.assert_allclose(out[1], want, rtol=1e-5, atol=1e-5)


def test_scan_reading_other_points_cannot_be_scheduled():
    """An update reading the state at another spatial point needs every step finished
    for all points first: its loops cannot be scheduled (it still runs unscheduled)."""
    m, n = td.var("m"), td.var("n")
    X = td.placeholder((m, n), name="X")
    state = td.placeholder((m, n), name="state")
    update = td.compute((m, n), lambda t, i: state[t - 1, i] + state[t - 1, 0] + X[t, i],
                        name="update")
    init = td.compute((1, n), lambda _, i: X[0, i], name="init")
    S = td.scan(init, update, state)
    s = td.create_schedule(S.op)
    with pytest.raises(ScheduleError, match=r"reads state\[t - 1, 0\]|another spatial point"):
        s[S].split(S.op.spatial_axis[0], factor=4)
    with pytest.raises(ScheduleError, match="another spatial point"):
        s[update].bind(update.op.axis[1], td.thread_axis("threadIdx.x"))
    assert not s[S].is_scheduled()
    x = np.random.default_rng(6).standard_normal((5, 7)).astype("float32")
    want = np.empty_like(x)
    want[0] = x[0]
    for t in range(1, 5):
        want[t] = want[t - 1] + want[t - 1, 0] + x[t]
    for out in run_both(s, [X, S], [x, np.empty_like(x)]):
        np.testing.assert_allclose(out[1], want, rtol=1e-5, atol=1e-5)


def test_states_that_read_each_other_advance_together():
    """Each step stores row t of every state before any state's row t + 1: states whose
    updates read each other's previous rows (unscheduled, and scheduled point by point)."""
    n = td.var("n")
    X = td.placeholder((n, 4), name="X")
    sa = td.placeholder((n, 4), name="sa")
    sb = td.placeholder((n, 4), name="sb")
    ia = td.compute((1, 4), lambda _, j: X[0, j], name="ia")
    ib = td.compute((1, 4), lambda _, j: td.const(1.0, "float32"), name="ib")
    ua = td.compute((n, 4), lambda t, j: sa[t - 1, j] * 0.5 + sb[t - 1, j] + X[t, j], name="ua")
    ub = td.compute((n, 4), lambda t, j: sb[t - 1, j] - sa[t - 1, j] * 0.25, name="ub")
    x = np.random.default_rng(9).standard_normal((8, 4)).astype("float32")
    wa, wb = np.empty_like(x), np.empty_like(x)
    wa[0], wb[0] = x[0], 1.0
    for t in range(1, 8):
        wa[t] = wa[t - 1] * 0.5 + wb[t - 1] + x[t]
        wb[t] = wb[t - 1] - wa[t - 1] * 0.25
    for scheduled in (False, True):
        A, B = td.scan([ia, ib], [ua, ub], [sa, sb], name="both")
        s = td.create_schedule(A.op)
        if scheduled:
            s[A].parallel(A.op.spatial_axis[0])
        for out in run_both(s, [X, A, B], [x, np.empty_like(x), np.empty_like(x)]):
            np.testing.assert_allclose(out[1], wa, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(out[2], wb, rtol=1e-5, atol=1e-5)


def test_scheduled_scan_trace_replays():
    """The view's primitives are recorded on the scan stage, so the trace replays."""
    from tdsl.schedule.trace import Trace
    X, S = cumsum_scan()
    init, update = S.op.init_ops[0], S.op.update_ops[0]
    s = td.create_schedule(S.op)
    for part in (init, update):
        xo, xi = s[part].split(part.axis[1], factor=4)
        s[part].parallel(xo)
    X2, S2 = cumsum_scan()
    s2 = Trace.from_json(s.trace.to_json()).apply(td.create_schedule(S2.op))
    assert str(td.lower(s2, [X2, S2])) == str(td.lower(s, [X, S]))
    x = np.random.default_rng(11).standard_normal((5, 10)).astype("float32")
    for out in run_both(s2, [X2, S2], [x, np.empty_like(x)]):
        np.testing.assert_allclose(out[1], np.cumsum(x, axis=0), rtol=1e-5, atol=1e-5)


def test_nothing_attaches_inside_a_scan_stage():
    """A scan's loops exist once scheduled, but it reads whole tensors: compute_at into
    them is refused (no bound inference of a region it does not have)."""
    m, n = td.var("m"), td.var("n")
    X = td.placeholder((m, n), name="X")
    Y = td.compute((m, n), lambda t, i: X[t, i] * 2.0, name="Y")
    state = td.placeholder((m, n), name="state")
    S = td.scan(td.compute((1, n), lambda _, i: Y[0, i], name="init"),
                td.compute((m, n), lambda t, i: state[t - 1, i] + Y[t, i], name="update"), state)
    s = td.create_schedule(S.op)
    xo, _ = s[S].split(S.op.spatial_axis[0], factor=4)
    with pytest.raises(ScheduleError, match="scan stage 'scan' reads whole tensors"):
        s[Y].compute_at(s[S], xo)
    x = np.random.default_rng(12).standard_normal((5, 10)).astype("float32")
    for out in run_both(s, [X, S], [x, np.empty_like(x)]):
        np.testing.assert_allclose(out[1], np.cumsum(2 * x, axis=0), rtol=1e-5, atol=1e-5)


def test_cache_read_and_write_refuse_a_scan_clearly():
    X, S = cumsum_scan()
    s = td.create_schedule(S.op)
    with pytest.raises(ScheduleError, match="reader 'scan' is a scan stage"):
        s.cache_read(X, "shared", [S])
    with pytest.raises(ScheduleError, match="a scan stage cannot be cache-written"):
        s.cache_write(S, "local")


def test_a_predicate_on_a_scan_that_cannot_run_point_by_point_fails_at_lowering():
    """set_store_predicate schedules the stage without a loop primitive: lowering still
    refuses the point-by-point order for an update reading other points."""
    from tdsl.errors import LoweringError
    m, n = td.var("m"), td.var("n")
    X = td.placeholder((m, n), name="X")
    state = td.placeholder((m, n), name="state")
    S = td.scan(td.compute((1, n), lambda _, i: X[0, i], name="init"),
                td.compute((m, n), lambda t, i: state[t - 1, i] + state[t - 1, 0] + X[t, i],
                           name="update"), state)
    s = td.create_schedule(S.op)
    s[S].set_store_predicate(td.thread_axis("threadIdx.x").var == 0)
    with pytest.raises(LoweringError, match="another spatial point"):
        td.lower(s, [X, S])
