"""Lowering of attached stages: analyzer facts scoped to the loops they describe, loop
partitioning that re-infers the bounds of the stages attached inside each copy, distinct
loop variables for IterVars shared by two stages, inlined stages passed as arguments and
reduction inits that read attached stages.  Kernels run through the bounds-checking
interpreter and through LLVM on arrays followed by an unreadable page."""
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import tdsl as td
from tdsl.arith import Analyzer
from tdsl.errors import LoweringError
from tdsl.expr import Var
from tdsl.interpreter import run
from tdsl.tensor import Range
from tests.guard_pages import guarded_copy
from tests.workloads import random_array


def check_both(s, args, inputs, expected):
    """Run through the interpreter and LLVM (inputs and output before an unreadable page)."""
    out_shape = expected.shape
    got = np.full(out_shape, np.nan, "float32")
    run(td.lower(s, args), *[a.copy() for a in inputs], got)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    f = td.build(s, args, target="llvm")
    ins = [guarded_copy(a) for a in inputs]
    got = guarded_copy(np.full(out_shape, np.nan, "float32"))
    f(*ins, got)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


# ---- the analyzer's scoped facts --------------------------------------------------------------
def test_scoped_bind_forgets_the_range_on_exit():
    n, x = Var("n"), Var("x")
    ana = Analyzer()
    with ana.bind(x, Range(0, n - 4)):          # inside a loop of extent n - 4: n >= 5
        assert ana.can_prove(n >= 5)
    assert not ana.can_prove(n >= 5)
    assert not ana.can_prove(x >= 0)


def test_scoped_bind_restores_the_previous_binding():
    x = Var("x")
    ana = Analyzer()
    ana.bind(x, Range(0, 8))                     # unscoped: stays
    with ana.bind(x, Range(2, 3)):
        assert ana.can_prove(x >= 2) and ana.can_prove(x < 5)
    assert ana.can_prove(x < 8) and not ana.can_prove(x >= 2)
    with ana.bind(x, x * 0 + 3):                 # a value, scoped
        assert ana.can_prove(x == 3)
    assert not ana.can_prove(x == 3) and ana.can_prove(x < 8)


# ---- facts of one stage leaking into another --------------------------------------------------
def test_empty_tail_of_attached_fused_stage_is_not_a_unit_loop():
    """D's j split into 4 parts over an extent of 2: C (attached, fused, unrolled) has an
    empty region in D's tail iterations; a fact "the loop runs" leaking out of a loop made
    the empty loop a unit loop whose index divided by zero."""
    M, N, K = 3, 2, 9
    A = td.placeholder((M, K), name="A")
    B = td.placeholder((K, N), name="B")
    k = td.reduce_axis((0, K), name="k")
    C = td.compute((M, N), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = td.compute((M, N), lambda i, j: C[i, j] + 1.0, name="D")
    s = td.create_schedule(D.op)
    i, j = D.op.axis
    jo, ji = s[D].split(j, nparts=4)
    s[D].split(i, factor=2)
    s[C].compute_at(s[D], ji)
    ci, cj = s[C].op.axis
    cjo, cji = s[C].split(cj, factor=2)
    s[C].fuse(ci, cjo)
    s[C].unroll(cji)
    s[D].vectorize(ji)
    rng = np.random.default_rng(1)
    a, b = random_array(rng, (M, K)), random_array(rng, (K, N))
    check_both(s, [A, B, D], [a, b], a @ b + 1)


# ---- loop partitioning and the stages attached inside it --------------------------------------
def test_partition_re_infers_grandchild_regions_nparts():
    """C's full-tile copy runs its nparts=3 split over extent 4 (inner extent 2), so P,
    attached inside C, needs a region of 2, not the 1 computed for the clamped extent 3."""
    M, N = 4, 3
    A = td.placeholder((M, N), name="A")
    P = td.compute((M, N), lambda i, j: A[i, j] * 2.0, name="P")
    C = td.compute((M, N), lambda i, j: P[i, j] + 1.0, name="C")
    D = td.compute((M, N), lambda i, j: C[i, j] * 3.0, name="D")
    s = td.create_schedule(D.op)
    s[D].split(D.op.axis[1], factor=4)
    s[C].compute_at(s[D], D.op.axis[0])
    ci, cj = s[C].op.axis
    cjo, cji = s[C].split(cj, nparts=3)
    s[P].compute_at(s[C], cji)
    s[C].unroll(ci)
    a = random_array(np.random.default_rng(2), (M, N))
    check_both(s, [A, D], [a], (a * 2 + 1) * 3)


def test_partition_partial_copy_keeps_grandchild_in_its_domain():
    """The partial-tile copy of C runs past C's domain (guarded); P, attached inside it,
    must still compute only inside P's domain (it read A out of bounds)."""
    M, N = 7, 5
    A = td.placeholder((M + 1, N + 1), name="A")
    P = td.compute((M + 1, N + 1), lambda i, j: A[i, j] * 2.0, name="P")
    C = td.compute((M, N), lambda i, j: P[i, j] + P[i, j + 1] * 0.5, name="C")
    D = td.compute((M, N), lambda i, j: C[i, j] * 3.0 - 1.0, name="D")
    s = td.create_schedule(D.op)
    io, ii = s[D].split(D.op.axis[0], factor=3)
    s[C].compute_at(s[D], io)
    s[P].compute_at(s[C], C.op.axis[0])
    s[C].unroll(C.op.axis[0])
    s[P].unroll(P.op.axis[1])
    a = random_array(np.random.default_rng(95), (M + 1, N + 1))
    p = a * 2
    check_both(s, [A, D], [a], (p[:M, :N] + p[:M, 1:] * 0.5) * 3 - 1)


def _split_choice():
    return st.one_of(st.none(), st.tuples(st.sampled_from(["factor", "nparts"]), st.integers(1, 5)))


@st.composite
def attach_chain(draw):
    """Sizes, and for each of C, Q, P (attached at D, C, Q): the splits of its two axes,
    the leaf of its host it is attached at, and which of its leaves are unrolled."""
    M, N = draw(st.integers(2, 9), label="M"), draw(st.integers(2, 9), label="N")
    d_splits = [draw(_split_choice(), label="D split") for _ in range(2)]
    stages = []
    for name in ("C", "Q", "P"):
        splits = [draw(_split_choice(), label=f"{name} split") for _ in range(2)]
        at = draw(st.integers(0, 3), label=f"{name} at")
        unroll = draw(st.lists(st.integers(0, 3), max_size=2), label=f"{name} unroll")
        stages.append((splits, at, unroll))
    depth = draw(st.integers(2, 3), label="attached depth")
    return M, N, d_splits, stages[:depth]


def _apply_splits(stage, splits):
    for iv, sp in zip(list(stage.op.axis), splits):
        if sp is not None:
            kind, v = sp
            stage.split(iv, **{kind: v})


@settings(max_examples=2 * settings.default.max_examples)
@given(case=attach_chain())
def test_random_partitioned_attach_chains_match_numpy(case):
    """Chains of compute_at three deep (Q inside C inside D, P inside Q) with factor/nparts
    splits and unrolled loops on the attached stages -- the full/partial-tile copies --
    compute what NumPy computes, in bounds, through the interpreter and LLVM."""
    M, N, d_splits, chain = case
    A = td.placeholder((M + 2, N + 1), name="A")
    P = td.compute((M + 2, N + 1), lambda i, j: A[i, j] * 2.0, name="P")
    Q = td.compute((M + 1, N), lambda i, j: P[i, j] + P[i + 1, j + 1] * 0.5, name="Q")
    C = td.compute((M, N), lambda i, j: Q[i, j] - Q[i + 1, j] * 0.25, name="C")
    D = td.compute((M, N), lambda i, j: C[i, j] * 3.0 - 1.0, name="D")
    s = td.create_schedule(D.op)
    _apply_splits(s[D], d_splits)
    host = s[D]
    for stage, (splits, at, unroll) in zip((s[C], s[Q], s[P]), chain):
        leaves = host.leaf_iter_vars
        stage.compute_at(host, leaves[at % len(leaves)])
        _apply_splits(stage, splits)
        own = stage.leaf_iter_vars
        for u in sorted({u % len(own) for u in unroll}):
            stage.unroll(own[u])
        host = stage
    try:
        td.lower(s, [A, D])
    except LoweringError as e:
        assume("non-constant extent" not in str(e))   # unroll of a clamped-only loop
        raise
    a = random_array(np.random.default_rng(M * 10 + N), (M + 2, N + 1))
    p = a * 2
    q = p[:M + 1, :N] + p[1:M + 2, 1:N + 1] * 0.5
    c = q[:M] - q[1:M + 1] * 0.25
    check_both(s, [A, D], [a], c * 3 - 1)


# ---- one IterVar object in two stages ---------------------------------------------------------
def test_shared_reduce_axis_gets_distinct_loop_variables():
    M, K = 4, 5
    A = td.placeholder((M, K, K), name="A")
    k = td.reduce_axis((0, K), name="k")
    D = td.compute((M, K), lambda i, j: td.sum(A[i, j, k], axis=k), name="D")
    C = td.compute((M,), lambda i: td.sum(D[i, k] * (k + 1).astype("float32"), axis=k), name="C")
    s = td.create_schedule(C.op)
    s[D].compute_at(s[C], s[C].op.reduce_axis[0])
    func = td.lower(s, [A, C])
    loops = []
    from tdsl.stmt import For
    from tdsl.visitor import post_order_visit
    post_order_visit(func.body, lambda n: loops.append(n.var) if isinstance(n, For) else None)
    assert len(set(loops)) == len(loops), func.script()
    a = random_array(np.random.default_rng(3), (M, K, K))
    check_both(s, [A, C], [a], (a.sum(2) * (np.arange(K) + 1)).sum(1))


# ---- inlined arguments, reduction inits ---------------------------------------------------------
def test_inlined_stage_passed_as_argument_is_written():
    A = td.placeholder((8,), name="A")
    B = td.compute((8,), lambda i: A[i] * 2.0, name="B")
    C = td.compute((8,), lambda i: B[i] + 1.0, name="C")
    s = td.create_schedule(C.op)
    s[B].compute_inline()
    a = random_array(np.random.default_rng(4), (8,))
    text = str(td.lower(s, [A, B, C]))
    assert "B[i] = A[i] * 2.0" in text and "B[i_1]" not in text, text   # C reads A, not B
    for mode in ("interp", "llvm"):
        b, c = np.full(8, -7, "float32"), np.full(8, np.nan, "float32")
        if mode == "interp":
            run(td.lower(s, [A, B, C]), a.copy(), b, c)
        else:
            td.build(s, [A, B, C], target="llvm")(a.copy(), b, c)
        np.testing.assert_allclose(b, a * 2, rtol=1e-6)
        np.testing.assert_allclose(c, a * 2 + 1, rtol=1e-6)


def test_init_reading_stage_attached_inside_reduction_is_refused():
    M, K = 5, 7
    A = td.placeholder((M, K), name="A")
    X = td.placeholder((M,), name="X")
    B = td.compute((M,), lambda i: X[i] * 10.0, name="B")
    k = td.reduce_axis((0, K), name="k")
    C = td.compute((M,), lambda i: td.sum(A[i, k], axis=k, init=B[i]), name="C")
    s = td.create_schedule(C.op)
    s[B].compute_at(s[C], k)
    with pytest.raises(LoweringError, match=r"'B'.*'k'.*'C'.*init"):
        td.lower(s, [A, X, C])
    s[B].compute_at(s[C], C.op.axis[0])         # outside the reduction loop: fine
    rng = np.random.default_rng(5)
    a, x = random_array(rng, (M, K)), random_array(rng, (M,))
    check_both(s, [A, X, C], [a, x], a.sum(1) + x * 10)


# ---- an argument stage attached with compute_at (TVM's schedule_primitives tutorial) ----------
@pytest.mark.parametrize("m", [1, 7, 16])
def test_argument_stage_attached_with_compute_at_writes_the_argument(rng, m):
    n = td.var("m")
    A = td.placeholder((n,), name="A")
    B = td.compute((n,), lambda i: A[i] + 1.0, name="B")
    C = td.compute((n,), lambda i: B[i] * 2.0, name="C")
    s = td.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    a = random_array(rng, (m,))
    f = td.lower(s, [A, B, C])
    for runner in (lambda *x: run(f, *x), td.build(s, [A, B, C], target="llvm")):
        b, c = np.full(m, np.nan, "float32"), np.full(m, np.nan, "float32")
        runner(a, b, c)
        np.testing.assert_allclose(b, a + 1, rtol=1e-6)
        np.testing.assert_allclose(c, (a + 1) * 2, rtol=1e-6)


def test_argument_stencil_stage_attached_in_a_partitioned_tile(rng):
    """The region each tile needs (one row of halo, tails at 13 = 3*4 + 1), unrolled so the
    nest is partitioned: every element of the argument B is still written, with its value."""
    N = 13
    A = td.placeholder((N + 1, N), name="A")
    B = td.compute((N + 1, N), lambda i, j: A[i, j] * 3.0, name="B")
    C = td.compute((N, N), lambda i, j: B[i, j] + B[i + 1, j], name="C")
    s = td.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 4)
    s[B].compute_at(s[C], jo)
    s[B].unroll(s[B].op.axis[1])
    a = random_array(rng, (N + 1, N))
    f = td.lower(s, [A, B, C])
    for runner in (lambda *x: run(f, *x), td.build(s, [A, B, C], target="llvm")):
        b = guarded_copy(np.full((N + 1, N), np.nan, "float32"))
        c = guarded_copy(np.full((N, N), np.nan, "float32"))
        runner(guarded_copy(a), b, c)
        np.testing.assert_allclose(b, a * 3, rtol=1e-6)
        np.testing.assert_allclose(c, a[:-1] * 3 + a[1:] * 3, rtol=1e-6)
