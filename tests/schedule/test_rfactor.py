"""rfactor: partial reductions as a new stage, with every reducer kind; against NumPy."""
import numpy as np
import pytest

import tdsl as td
from tdsl.interpreter import run
from tests.workloads import check_sizes, matmul, random_array

SIZES = [pytest.param(16, id="divisible"), pytest.param(13, id="tail"),
         pytest.param("sym", id="symbolic")]
SYM_VALUES = (3, 16, 21)


def row_reduce(reducer, size, rows=3):
    """S[r] = reducer(A[r, k]) over k < size (size symbolic when None)."""
    n = td.var("n") if size is None else size
    A = td.placeholder((rows, n), name="A")
    k = td.reduce_axis((0, n), name="k")
    S = td.compute((rows,), lambda r: reducer(A[r, k], axis=k), name="S")
    return A, S


def run_rows(s, A, S, size, ref, rows=3):
    f = td.lower(s, [A, S])
    rng = np.random.default_rng(11)
    for n in (SYM_VALUES if size == "sym" else (size,)):
        a = random_array(rng, (rows, n))
        out = np.full(rows, np.nan, "float32")
        run(f, a, out)
        np.testing.assert_allclose(out, ref(a.astype(np.float64)), rtol=1e-5, atol=1e-6)
    return f


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("part", ["inner", "outer"])
@pytest.mark.parametrize("reducer,ref", [(td.sum, lambda a: a.sum(1)), (td.max, lambda a: a.max(1)),
                                         (td.min, lambda a: a.min(1))],
                         ids=["sum", "max", "min"])
def test_rfactor_split_reduction(size, part, reducer, ref):
    A, S = row_reduce(reducer, None if size == "sym" else size)
    s = td.create_schedule(S.op)
    ko, ki = s[S].split(S.op.reduce_axis[0], factor=4)
    SF = s.rfactor(S, ki if part == "inner" else ko)
    assert SF.name == "S.rf" and len(SF.shape) == 2
    run_rows(s, A, S, size, ref)


@pytest.mark.parametrize("size", SIZES)
def test_rfactor_factor_axis_and_vectorize(size):
    """factor_axis=1 puts the partial-sum axis last, where it can be vectorized."""
    A, S = row_reduce(td.sum, None if size == "sym" else size)
    s = td.create_schedule(S.op)
    ko, ki = s[S].split(S.op.reduce_axis[0], factor=4)
    SF = s.rfactor(S, ki, factor_axis=1)
    r, v = s[SF].op.axis
    assert v.name == "k.inner.v"
    ko2, = s[SF].op.reduce_axis
    s[SF].reorder(r, ko2, v)
    s[SF].vectorize(v)
    s[SF].compute_at(s[S], S.op.axis[0])
    f = run_rows(s, A, S, size, lambda a: a.sum(1))
    assert "vectorized(4)" in str(f)


@pytest.mark.parametrize("size", SIZES)
def test_rfactor_matmul_k(size):
    def sched(wl):
        s = wl.schedule()
        C = wl.main["C"]
        ko, ki = s[C].split(s[C].op.reduce_axis[0], nparts=3)
        CF = s.rfactor(C, ko)
        s[CF].compute_at(s[C], s[C].op.axis[1])
        return s
    check_sizes(lambda m: matmul(M=m or 5, N=4, K=m or 11, symbolic_m=m is None), sched, size)


def cross_thread_schedule(size, scope):
    """rfactor, then bind the factored axis to threadIdx.x: each thread one partial sum,
    the partial sums in ``scope``, combined after the threads are done."""
    A, S = row_reduce(td.sum, None if size == "sym" else size)
    s = td.create_schedule(S.op)
    ko, ki = s[S].split(S.op.reduce_axis[0], factor=8)
    SF = s.rfactor(S, ki)
    s[SF].set_scope(scope)
    s[S].bind(S.op.axis[0], td.thread_axis("blockIdx.x"))
    s[SF].compute_at(s[S], S.op.axis[0])
    s[SF].bind(s[SF].op.axis[0], td.thread_axis("threadIdx.x"))
    return s, A, S


@pytest.mark.parametrize("size", SIZES)
def test_rfactor_cross_thread_reduction(size):
    s, A, S = cross_thread_schedule(size, "shared")
    f = run_rows(s, A, S, size, lambda a: a.sum(1))
    text = str(f)
    # the partial sums are written by 8 threads and read by each: a barrier in between
    assert text.index("sync_threads()", text.index("S.rf[k.inner.v, 0] = S.rf")) < text.index("S[r] = 0.0")


def test_rfactor_cross_thread_global_scope_is_synchronized_or_refused():
    s, A, S = cross_thread_schedule(13, "global")
    try:
        text = str(td.lower(s, [A, S]))
    except td.TDSLError:
        return                      # refusing the racy schedule is fine too
    writes = text.index("S.rf[k.inner.v, r_1] = S.rf")
    assert "sync_threads()" in text[writes:text.index("S[r] = 0.0")]


def test_rfactor_argmax():
    """A two-value reducer rfactored: partial (index, value) pairs, then combined."""
    n = td.var("n")
    A = td.placeholder((n,), name="A")
    argmax = td.comm_reducer(
        lambda x, y: (td.if_then_else(x[1] >= y[1], x[0], y[0]), td.maximum(x[1], y[1])),
        lambda t0, t1: (td.const(-1, t0), td.min_value(t1)), name="argmax")
    k = td.reduce_axis((0, n), name="k")
    I, V = td.compute((1,), lambda i: argmax((k.var, A[k]), axis=k), name="am")
    s = td.create_schedule(I.op)
    ko, ki = s[I].split(k, factor=4)
    IF, VF = s.rfactor(I, ki)
    f = td.lower(s, [A, I, V])
    rng = np.random.default_rng(2)
    for v in (1, 7, 16, 21):
        a = (rng.permutation(np.arange(1, v + 1)) * rng.choice([-1, 1])).astype("float32")
        iv = np.full(1, -5, "int64")
        vv = np.full(1, np.nan, "float32")
        run(f, a, iv, vv)
        assert iv[0] == a.argmax() and vv[0] == a.max()


def test_rfactor_of_the_only_reduce_axis_cannot_be_inlined_but_computes_at_root(rng):
    """rfactor over the only reduce axis leaves a stage whose body is a reduction with no
    axis; inlining it is refused (found by the schedule fuzzer: it reached the backend as a
    Reduce inside an expression), and at root it computes the right answer."""
    A = td.placeholder((3, 5), name="A")
    W = td.placeholder((5, 4), name="W")
    k = td.reduce_axis((0, 5), name="k")
    B = td.compute((3, 4), lambda i, j: td.sum(A[i, k] * W[k, j], axis=k), name="B")
    s = td.create_schedule(B.op)
    RF = s.rfactor(B, B.op.reduce_axis[0], factor_axis=0)
    with pytest.raises(td.ScheduleError, match=r"compute_inline: stage '.*': a reduction cannot "
                                               r"be inlined"):
        s[RF].compute_inline()
    a, w = random_array(rng, (3, 5)), random_array(rng, (5, 4))
    b = np.full((3, 4), np.nan, "float32")
    run(td.lower(s, [A, W, B]), a, w, b)
    np.testing.assert_allclose(b, a @ w, rtol=1e-5)
    b[:] = np.nan
    td.build(s, [A, W, B], target="llvm")(a, w, b)
    np.testing.assert_allclose(b, a @ w, rtol=1e-5)


def test_rfactor_blocked_layout_matches_numpy():
    """``block_axis``/``block_lanes``/``block_at``: the partial results of a (rows x cols)
    sum over k stored as (k slices, cols / 4, rows, 4) (the axis split, its inner part
    last, its outer part moved first); the merge reads them back: same sums."""
    A = td.placeholder((5, 8, 13), name="A")
    k = td.reduce_axis((0, 13), name="k")
    S = td.compute((5, 8), lambda r, c: td.sum(A[r, c, k], axis=k), name="S")
    s = td.create_schedule(S.op)
    ko, _ = s[S].split(k, nparts=3)
    SF = s.rfactor(S, ko, factor_axis=0, block_axis=1, block_lanes=4, block_at=0)
    assert [int(d.value) for d in SF.shape] == [3, 2, 5, 4]
    assert [a.name for a in s[SF].op.axis][1:] == ["c.o", "r", "c.i"]
    f = td.lower(s, [A, S])
    a = random_array(np.random.default_rng(5), (5, 8, 13))
    out = np.full((5, 8), np.nan, "float32")
    run(f, a, out)
    np.testing.assert_allclose(out, a.astype(np.float64).sum(2), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kw,why", [
    ({"block_axis": 1, "block_lanes": 3, "block_at": 0}, "3 lanes divide"),
    ({"block_axis": 1, "block_lanes": 4}, "given together"),
    ({"block_axis": 2, "block_lanes": 4, "block_at": 0}, "must be in"),
    ({"block_axis": 1, "block_lanes": 4, "block_at": True}, "given together as ints"),
])
def test_rfactor_blocked_layout_refuses_bad_arguments(kw, why):
    A = td.placeholder((5, 8, 13), name="A")
    k = td.reduce_axis((0, 13), name="k")
    S = td.compute((5, 8), lambda r, c: td.sum(A[r, c, k], axis=k), name="S")
    s = td.create_schedule(S.op)
    ko, _ = s[S].split(k, nparts=3)
    with pytest.raises(td.ScheduleError, match=why):
        s.rfactor(S, ko, **kw)
    assert len(s.stages) == 2                # nothing changed
