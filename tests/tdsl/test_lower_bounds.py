"""Lowering: bound inference, tail handling and symbolic simplification, checked on the
printed IR and by running it; plus regression tests for bugs the differential suite found."""
import numpy as np
import pytest

import tdsl as td
from tdsl.interpreter import run
from tests.workloads import conv2d, random_array


def lowered(s, args):
    return str(td.lower(s, args))


def elementwise(n):
    A = td.placeholder((n, 6), name="A")
    B = td.compute((n, 6), lambda i, j: A[i, j] + 1.0, name="B")
    return A, B


# ---- tails ------------------------------------------------------------------------------------------
def test_divisible_split_has_no_guard():
    A, B = elementwise(16)
    s = td.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=4)
    text = lowered(s, [A, B])
    assert "for i.outer in range(4):" in text and "for i.inner in range(4):" in text
    assert "if " not in text and "min(" not in text


def test_non_divisible_split_tightens_the_inner_loop():
    A, B = elementwise(13)
    s = td.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=4)
    text = lowered(s, [A, B])
    assert "for i.outer in range(4):" in text
    assert "if " not in text      # the tail is a shorter inner loop, not a guard
    a = random_array(np.random.default_rng(0), (13, 6))
    b = np.full((13, 6), np.nan, "float32")
    run(td.lower(s, [A, B]), a, b)
    np.testing.assert_array_equal(b, a + 1)


def test_symbolic_split_extent_is_a_ceil_division():
    n = td.var("n")
    A, B = elementwise(n)
    s = td.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=4)
    text = lowered(s, [A, B])
    assert "for i.outer in range((n + 3) // 4):" in text
    assert "for i.inner in range(min(4, n - i.outer * 4)):" in text


def test_split_by_the_whole_extent_drops_the_unit_loop():
    A, B = elementwise(8)
    s = td.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=8)
    text = lowered(s, [A, B])
    assert "i.outer" not in text and "for i.inner in range(8):" in text


# ---- bounds of attached stages ------------------------------------------------------------------------
def test_compute_at_region_is_the_tile_even_with_symbolic_size():
    n = td.var("n")
    A = td.placeholder((n, 20), name="A")
    B = td.compute((n, 20), lambda i, j: A[i, j] * 2.0, name="B")
    C = td.compute((n, 20), lambda i, j: B[i, j] + 1.0, name="C")
    s = td.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[B].compute_at(s[C], io)
    text = lowered(s, [A, C])
    assert 'B = allocate((4, 20), "float32", scope="global")' in text


def test_halo_region_of_a_stencil():
    """C[i] = B[i] + B[i + 2]: B's tile under a split of 4 is 6 long."""
    A = td.placeholder((18,), name="A")
    B = td.compute((18,), lambda i: A[i] * 3.0, name="B")
    C = td.compute((16,), lambda i: B[i] + B[i + 2], name="C")
    s = td.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[B].compute_at(s[C], io)
    text = lowered(s, [A, C])
    assert 'B = allocate((6,), "float32", scope="global")' in text
    a = random_array(np.random.default_rng(1), (18,))
    c = np.full(16, np.nan, "float32")
    run(td.lower(s, [A, C]), a, c)
    np.testing.assert_allclose(c, 3 * a[:16] + 3 * a[2:], rtol=1e-6)


def test_parameter_shapes_are_simplified():
    """conv2d with a symbolic height: the output's height h + 2 - 3 + 1 prints as h."""
    wl = conv2d(CI=1, H=5, W=4, CO=1, symbolic_h=True)
    text = lowered(wl.schedule(), wl.args)
    assert 'Y: Buffer[(1, 1, h, 4), "float32"]' in text
    assert 'X: Buffer[(1, 1, h, 4), "float32"]' in text


# ---- regressions ---------------------------------------------------------------------------------------
def test_regression_loop_extent_facts_do_not_leak_to_sibling_guards():
    """A loop ``for j in range(1 - f)`` implies ``f < 1`` only inside it; the simplifier used
    to keep that fact and drop the sibling guard ``if f < 1`` (an out-of-bounds store)."""
    A = td.placeholder((1, 1), name="A")
    B = td.compute((1, 1), lambda i, j: A[i, j] + 1.0, name="B")
    C = td.compute((1, 1), lambda i, j: B[i, j] * 2.0, name="C")
    s = td.create_schedule(C.op)
    jo, ji = s[C].split(C.op.axis[1], factor=2)
    f = s[C].fuse(jo, ji)
    s[B].compute_at(s[C], f)
    func = td.lower(s, [A, C])
    assert "if j.outer.j.inner.fused < 1:" in str(func)
    a = random_array(np.random.default_rng(2), (1, 1))
    c = np.full((1, 1), np.nan, "float32")
    run(func, a, c)
    np.testing.assert_allclose(c, (a + 1) * 2, rtol=1e-6)


def test_regression_attached_extents_do_not_leak_into_tail_bounds():
    """Bound inference bound B's loop (extent min(1, 2 - fused), possibly 0) as [0, extent),
    which made C's tail extent min(1, 2 - fused) simplify to 1 (an out-of-bounds read)."""
    A = td.placeholder((1, 2), name="A")
    B = td.compute((1, 2), lambda i, j: A[i, j] * 2.0, name="B")
    C = td.compute((1, 2), lambda i, j: B[i, j] + 1.0, name="C")
    s = td.create_schedule(C.op)
    i, j = C.op.axis
    jo, ji = s[C].split(j, nparts=2)
    joo, joi = s[C].split(jo, nparts=3)
    f = s[C].fuse(i, joo)
    s[B].compute_at(s[C], f)
    func = td.lower(s, [A, C])
    a = random_array(np.random.default_rng(3), (1, 2))
    c = np.full((1, 2), np.nan, "float32")
    run(func, a, c)
    np.testing.assert_allclose(c, 2 * a + 1, rtol=1e-6)


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_regression_cache_write_at_fused_loop_with_nparts_tail(n):
    A = td.placeholder((n, 1), name="A")
    B = td.placeholder((1, 2), name="B")
    k = td.reduce_axis((0, 1), name="k")
    C = td.compute((n, 2), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = td.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    io, ii = s[C].split(C.op.axis[0], nparts=2)
    f = s[C].fuse(io, ii, C.op.axis[1])
    s[CL].compute_at(s[C], f)
    rng = np.random.default_rng(n)
    a, b = random_array(rng, (n, 1)), random_array(rng, (1, 2))
    c = np.full((n, 2), np.nan, "float32")
    run(td.lower(s, [A, B, C]), a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-6)


def test_regression_print_schedule():
    """print(s) lowered through a module path that did not exist (tdsl.lower)."""
    A, B = elementwise(4)
    s = td.create_schedule(B.op)
    assert str(s).startswith("@tdsl.prim_func\ndef main(A: Buffer[(4, 6)")
    assert s._repr_html_().startswith("<")


def test_regression_storage_align_is_callable():
    """Stage.storage_align (the method) was shadowed by a dict attribute of the same name."""
    A = td.placeholder((6, 5), name="A")
    B = td.compute((6, 5), lambda i, j: A[i, j] + 1.0, name="B")
    C = td.compute((6, 5), lambda i, j: B[i, j] * 2.0, name="C")
    s = td.create_schedule(C.op)
    s[B].storage_align(B.op.axis[0], 4, 3)
    assert "strides=(7, 1)" in lowered(s, [A, C])


@pytest.mark.parametrize("h", [1, 2, 4])
def test_regression_fused_loops_of_empty_attached_region(h):
    """In C's tail iterations B's attached region is empty with negative extents on both
    axes; fusing B's loops multiplied them into a positive trip count (out-of-bounds)."""
    n = td.var("h")
    A = td.placeholder((n, 1), name="A")
    B = td.compute((n, 1), lambda i, j: A[i, j] * 2.0, name="B")
    C = td.compute((n, 1), lambda i, j: B[i, j] + 1.0, name="C")
    s = td.create_schedule(C.op)
    i, j = C.op.axis
    io, ii = s[C].split(i, nparts=1)
    ioo, ioi = s[C].split(io, nparts=3)
    jo, ji = s[C].split(j, nparts=3)
    f = s[C].fuse(ioi, ii, jo)
    s[B].fuse(*B.op.axis)
    s[B].compute_at(s[C], f)
    a = random_array(np.random.default_rng(h), (h, 1))
    c = np.full((h, 1), np.nan, "float32")
    run(td.lower(s, [A, C]), a, c)
    np.testing.assert_allclose(c, 2 * a + 1, rtol=1e-6)


def test_multi_output_stage_with_one_output_as_argument():
    """An argmax-style reducer builds with only its index output passed: the value output
    becomes a scratch allocation."""
    import numpy as np
    from tdsl.interpreter import run
    n = td.var("n")
    X = td.placeholder((n, 7), name="X")
    k = td.reduce_axis((0, 7), name="k")

    def comb(x, y):
        take = y[1] > x[1]
        return td.if_then_else(take, y[0], x[0]), td.if_then_else(take, y[1], x[1])
    am = td.comm_reducer(comb, lambda t0, t1: (td.const(-1, t0), td.min_value(t1)), name="argmax")
    I, V = td.compute((n,), lambda i: am((k.var, X[i, k]), axis=k), name="AM")
    s = td.create_schedule(I.op)
    x = np.random.default_rng(3).standard_normal((5, 7)).astype("float32")
    out = np.full(5, -7, "int64")
    run(td.lower(s, [X, I]), x, out)
    np.testing.assert_array_equal(out, x.argmax(axis=1))
    out2 = np.full(5, -7, "int64")
    td.build(s, [X, I], target="llvm")(x, out2)
    np.testing.assert_array_equal(out2, x.argmax(axis=1))


@pytest.mark.parametrize("symbolic", [True, False], ids=["symbolic", "constant"])
@pytest.mark.parametrize("sizes", [(8, 32), (7, 30), (1, 1), (13, 17), (17, 48)])
def test_register_tile_over_clamped_regions_is_partitioned(sizes, symbolic):
    """A register tile (unrolled x vectorized) attached over sizes that its tiles may not
    divide gets a full-tile copy with constant extents and a guarded copy for the partial
    tile, and both compute the right thing, interpreted (every access bounds-checked) and
    compiled.  (Regression: the guarded copy once lost its guards for constant sizes.)"""
    from tdsl.stmt import ForKind, IfThenElse
    from tdsl.visitor import post_order_visit
    N, M = sizes
    n, m, K = (td.var("n"), td.var("m"), 24) if symbolic else (N, M, 24)
    A = td.placeholder((n, K), name="A")
    B = td.placeholder((K, m), name="B")
    k = td.reduce_axis((0, K), name="k")
    C = td.compute((n, m), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = td.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(*s[C].op.axis, 4, 16)
    s[CL].compute_at(s[C], jo)
    xc, yc = s[CL].op.axis
    s[CL].reorder(s[CL].op.reduce_axis[0], xc, yc)
    s[CL].unroll(xc)
    s[CL].vectorize(yc)
    func = td.lower(s, [A, B, C])
    branches = []
    post_order_visit(func.body, lambda x: branches.append(x) if isinstance(x, IfThenElse)
                     and x.else_case is not None else None)
    clamped = symbolic or (N > 4 and N % 4) or (M > 16 and M % 16)
    assert bool(branches) == bool(clamped), func.script()
    if not clamped:
        return                                  # the regions are constant: nothing to split
    loops = []
    post_order_visit(branches[0].then_case, lambda x: loops.append(x)
                     if getattr(x, "kind", None) in (ForKind.UNROLLED, ForKind.VECTORIZED) else None)
    assert loops and all(isinstance(f.extent, td.expr.Const) for f in loops)
    rng = np.random.default_rng(N * 100 + M)
    a = random_array(rng, (N, K))
    b = random_array(rng, (K, M))
    c = np.full((N, M), np.nan, "float32")
    run(func, a, b, c)                       # bounds-checked on every access
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    from tests.guard_pages import guarded_copy
    ga, gb, gc = guarded_copy(a), guarded_copy(b), guarded_copy(np.full((N, M), np.nan, "float32"))
    td.build(s, [A, B, C], target="llvm")(ga, gb, gc)   # reading past an array crashes
    np.testing.assert_allclose(gc, a @ b, rtol=1e-5, atol=1e-5)
