"""split (factor/nparts), fuse, reorder, tile: differential tests against NumPy.

Each test runs at a size the split factors divide (16), one they don't (13), and
with a symbolic size bound to several values (``workloads.SYMBOLIC_VALUES``).
"""
import pytest

import tdsl as td
from tests.workloads import check_sizes, conv2d, interpreter_runner, matmul, pipeline

SIZES = [pytest.param(16, id="divisible"), pytest.param(13, id="tail"),
         pytest.param("sym", id="symbolic")]


def mm(size):
    return matmul(M=size or 12, N=8, K=12, symbolic_m=size is None)


def mm_k(size):
    """matmul whose reduction extent is the size under test (M symbolic when size is None)."""
    return matmul(M=size or 6, N=5, K=size or 13, symbolic_m=size is None)


def pipe(size):
    return pipeline(H=size or 9, W=11, symbolic_h=size is None)


# ---- split --------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("factor", [1, 4, 5, 32])
def test_split_factor(size, factor):
    def sched(wl):
        s = wl.schedule()
        C = s[wl.main["C"]]
        io, ii = C.split(C.op.axis[0], factor=factor)
        assert (io.name, ii.name) == ("i.outer", "i.inner")
        assert C.leaf_iter_vars == [io, ii, C.op.axis[1], C.op.reduce_axis[0]]
        return s
    check_sizes(mm, sched, size)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("nparts", [1, 3, 4])
def test_split_nparts(size, nparts):
    def sched(wl):
        s = wl.schedule()
        C = s[wl.main["C"]]
        C.split(C.op.axis[0], nparts=nparts)
        return s
    check_sizes(pipe, sched, size)


@pytest.mark.parametrize("size", SIZES)
def test_split_reduction_axis_with_tail(size):
    def sched(wl):
        s = wl.schedule()
        C = s[wl.main["C"]]
        ko, ki = C.split(C.op.reduce_axis[0], factor=4)
        C.split(ko, nparts=2)
        return s
    check_sizes(mm, sched, size)
    check_sizes(lambda n: matmul(M=5, N=4, K=n or 13, symbolic_m=False), sched,
                size if size != "sym" else 11)


@pytest.mark.parametrize("size", SIZES)
def test_split_nested_and_of_inner(size):
    def sched(wl):
        s = wl.schedule()
        C = s[wl.main["C"]]
        io, ii = C.split(C.op.axis[0], factor=6)
        ioo, ioi = C.split(io, factor=2)
        iio, iii = C.split(ii, nparts=4)
        jo, ji = C.split(C.op.axis[1], factor=3)
        return s
    check_sizes(pipe, sched, size)


# ---- fuse ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", SIZES)
def test_fuse_spatial(size):
    def sched(wl):
        s = wl.schedule()
        C = s[wl.main["C"]]
        f = C.fuse(*C.op.axis)
        assert C.leaf_iter_vars == [f]
        return s
    check_sizes(pipe, sched, size)


@pytest.mark.parametrize("size", SIZES)
def test_fuse_then_split(size):
    """The usual GPU pattern: fuse everything, split by a block size that rarely divides."""
    def sched(wl):
        s = wl.schedule()
        C = s[wl.main["C"]]
        f = C.fuse(*C.op.axis)
        C.split(f, factor=8)
        return s
    check_sizes(pipe, sched, size)


@pytest.mark.parametrize("size", SIZES)
def test_split_then_fuse_across_axes(size):
    """Fuse the tail-carrying inner part of one split with the next axis."""
    def sched(wl):
        s = wl.schedule()
        C = s[wl.main["C"]]
        io, ii = C.split(C.op.axis[0], factor=4)
        C.fuse(ii, C.op.axis[1])
        return s
    check_sizes(mm, sched, size)


@pytest.mark.parametrize("size", SIZES)
def test_fuse_reduction_axes(size):
    def sched(wl):
        s = wl.schedule()
        Y = s[wl.main["Y"]]
        f = Y.fuse(*Y.op.reduce_axis)
        Y.split(f, factor=4)
        return s
    check_sizes(lambda h: conv2d(H=h or 6, W=4, symbolic_h=h is None), sched,
                {16: 8, 13: 7}.get(size, size))


def test_fuse_single_loop_is_identity():
    wl = pipe(7)
    s = wl.schedule()
    C = s[wl.main["C"]]
    i = C.op.axis[0]
    assert C.fuse(i) is i
    wl.case(s).check_with(interpreter_runner)


# ---- reorder --------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", SIZES)
def test_reorder_reduction_outermost(size):
    def sched(wl):
        s = wl.schedule()
        C = s[wl.main["C"]]
        i, j = C.op.axis
        k, = C.op.reduce_axis
        C.reorder(k, j, i)
        assert C.leaf_iter_vars == [k, j, i]
        return s
    check_sizes(mm, sched, size)


@pytest.mark.parametrize("size", SIZES)
def test_reorder_split_parts(size):
    """inner before outer, and the reduction between spatial loops."""
    def sched(wl):
        s = wl.schedule()
        C = s[wl.main["C"]]
        io, ii = C.split(C.op.axis[0], factor=4)
        ko, ki = C.split(C.op.reduce_axis[0], factor=5)
        C.reorder(ii, ko, io, ki)
        assert C.leaf_iter_vars == [ii, ko, C.op.axis[1], io, ki]
        return s
    check_sizes(mm_k, sched, size)


@pytest.mark.parametrize("size", SIZES)
def test_reorder_subset_keeps_other_positions(size):
    def sched(wl):
        s = wl.schedule()
        Y = s[wl.main["Y"]]
        b, o, y, x = Y.op.axis
        rc, ry, rx = Y.op.reduce_axis
        Y.reorder(rx, o)
        assert Y.leaf_iter_vars == [b, rx, y, x, rc, ry, o]
        return s
    check_sizes(lambda h: conv2d(H=h or 5, W=4, symbolic_h=h is None), sched,
                {16: 8, 13: 7}.get(size, size))


# ---- tile -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("factors", [(4, 4), (8, 3), (5, 1)])
def test_tile(size, factors):
    def sched(wl):
        s = wl.schedule()
        C = s[wl.main["C"]]
        xo, yo, xi, yi = C.tile(*C.op.axis, x_factor=factors[0], y_factor=factors[1])
        assert C.leaf_iter_vars[:4] == [xo, yo, xi, yi]
        return s
    check_sizes(mm, sched, size)


@pytest.mark.parametrize("size", SIZES)
def test_tile_matmul_of_design_brief(size):
    """The DESIGN.md schedule (tile, split k, reorder, vectorize, parallel), at small sizes."""
    def sched(wl):
        s = wl.schedule()
        C = s[wl.main["C"]]
        i, j = C.op.axis
        io, jo, ii, ji = C.tile(i, j, x_factor=8, y_factor=4)
        ko, ki = C.split(C.op.reduce_axis[0], factor=4)
        C.reorder(io, jo, ko, ii, ki, ji)
        C.vectorize(ji)
        C.parallel(io)
        return s
    check_sizes(lambda m: matmul(M=m or 12, N=8, K=12, symbolic_m=m is None), sched, size)
    check_sizes(lambda m: matmul(M=m or 12, N=10, K=10, symbolic_m=m is None), sched, size)


def test_symbolic_split_of_symbolic_reduction():
    """A reduction over a symbolic extent, split with a tail."""
    n = td.var("n")
    A = td.placeholder((n, 3), name="A")
    k = td.reduce_axis((0, n), name="k")
    S = td.compute((3,), lambda j: td.sum(A[k, j] * A[k, j], axis=k), name="S")
    s = td.create_schedule(S.op)
    ko, ki = s[S].split(k, factor=4)
    s[S].reorder(ko, s[S].op.axis[0], ki)
    import numpy as np
    from tdsl.interpreter import run
    f = td.lower(s, [A, S])
    rng = np.random.default_rng(3)
    for v in (1, 4, 11, 21):
        a = rng.uniform(0.5, 1.5, (v, 3)).astype("float32")
        out = np.full(3, np.nan, "float32")
        run(f, a, out)
        np.testing.assert_allclose(out, (a.astype("float64") ** 2).sum(0), rtol=1e-5)
