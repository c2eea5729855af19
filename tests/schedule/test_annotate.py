"""vectorize, unroll, parallel, pragma, storage_align: differential tests against NumPy,
plus a look at the printed loop kinds."""
import numpy as np
import pytest

import tdsl as td
from tdsl.interpreter import run
from tests.workloads import check_sizes, interpreter_runner, matmul, pipeline, random_array

SIZES = [pytest.param(16, id="divisible"), pytest.param(13, id="tail"),
         pytest.param("sym", id="symbolic")]


def mm(size):
    return matmul(M=size or 12, N=size or 12, K=7, symbolic_m=size is None)


def pipe(size):
    return pipeline(H=size or 9, W=size or 10, symbolic_h=size is None)


def lowered_text(wl, sched):
    return str(td.lower(sched(wl), wl.args))


# ---- vectorize -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", SIZES)
def test_vectorize_inner_of_split(size):
    def sched(wl):
        s = wl.schedule()
        C = s[wl.main["C"]]
        jo, ji = C.split(C.op.axis[1], factor=4)
        C.reorder(C.op.axis[0], jo, C.op.reduce_axis[0], ji)
        C.vectorize(ji)
        return s
    check_sizes(mm, sched, size)
    assert "for j.inner in vectorized(4):" in lowered_text(mm(13), sched)


@pytest.mark.parametrize("size", SIZES)
def test_vectorize_elementwise_with_inlined_producer(size):
    def sched(wl):
        s = wl.schedule()
        s[wl.main["B"]].compute_inline()
        C = s[wl.main["C"]]
        f = C.fuse(*C.op.axis)
        fo, fi = C.split(f, factor=8)
        C.vectorize(fi)
        return s
    check_sizes(pipe, sched, size)


def test_vectorize_whole_constant_axis():
    wl = pipeline(H=5, W=6)
    s = wl.schedule()
    C = s[wl.main["C"]]
    C.vectorize(C.op.axis[1])
    text = str(td.lower(s, wl.args))
    assert "in vectorized(6):" in text
    wl.case(s).check_with(interpreter_runner)


# ---- unroll ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", SIZES)
def test_unroll(size):
    def sched(wl):
        s = wl.schedule()
        C = s[wl.main["C"]]
        io, ii = C.split(C.op.axis[0], factor=4)
        ko, ki = C.split(C.op.reduce_axis[0], factor=2)
        C.unroll(ii)
        C.unroll(ki)
        return s
    check_sizes(mm, sched, size)
    assert "in unrolled(4):" in lowered_text(mm(16), sched)


# ---- parallel -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", SIZES)
def test_parallel(size):
    def sched(wl):
        s = wl.schedule()
        B, C = s[wl.main["B"]], s[wl.main["C"]]
        io, ii = C.split(C.op.axis[0], factor=3)
        C.parallel(io)
        B.compute_at(C, io)
        B.parallel(B.op.axis[1])
        return s
    check_sizes(pipe, sched, size)
    assert "for i.outer in parallel(" in lowered_text(pipe(16), sched)


@pytest.mark.parametrize("size", SIZES)
def test_parallel_vectorize_unroll_together(size):
    def sched(wl):
        s = wl.schedule()
        C = s[wl.main["C"]]
        io, jo, ii, ji = C.tile(*C.op.axis, 4, 4)
        k, = C.op.reduce_axis
        C.reorder(io, jo, k, ii, ji)
        C.parallel(io)
        C.unroll(ii)
        C.vectorize(ji)
        return s
    check_sizes(mm, sched, size)


# ---- pragma ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", SIZES)
def test_pragma_keeps_semantics_and_prints(size):
    def sched(wl):
        s = wl.schedule()
        C = s[wl.main["C"]]
        io, ii = C.split(C.op.axis[0], factor=4)
        C.pragma(io, "auto_unroll_max_step", 16)
        C.pragma(ii, "unroll_explicit")
        return s
    check_sizes(mm, sched, size)
    text = lowered_text(mm(16), sched)
    assert '"pragma_auto_unroll_max_step": 16' in text
    assert '"pragma_unroll_explicit": 1' in text


def test_pragma_moves_to_outer_when_split():
    wl = pipe(12)
    s = wl.schedule()
    C = s[wl.main["C"]]
    i = C.op.axis[0]
    C.pragma(i, "my_hint", 3)
    io, ii = C.split(i, factor=5)
    assert C.attr(io).pragmas == {"my_hint": 3}
    assert '"pragma_my_hint": 3' in str(td.lower(s, wl.args))


def test_annotate_is_pragma():
    wl = pipe(6)
    s = wl.schedule()
    C = s[wl.main["C"]]
    C.annotate(C.op.axis[0], "hint", 2)
    assert C.attr(C.op.axis[0]).pragmas == {"hint": 2}


# ---- storage_align ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("factor,offset", [(8, 1), (4, 0), (16, 3)])
def test_storage_align(size, factor, offset):
    def sched(wl):
        s = wl.schedule()
        B, C = s[wl.main["B"]], s[wl.main["C"]]
        B.storage_align(B.op.axis[0], factor, offset)
        io, ii = C.split(C.op.axis[0], factor=4)
        B.compute_at(C, io)
        return s
    check_sizes(pipe, sched, size)
    wl = pipe(13)           # B's tile is 4 x 13: its row stride is padded to k*factor + offset
    text = lowered_text(wl, sched)
    stride = next(s for s in range(13, 64) if s % factor == offset)
    assert f'B = allocate((4, 13), "float32", scope="global", strides=({stride}, 1))' in text


# ---- align_region --------------------------------------------------------------------------------
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("factor,offset,span", [(8, 1, None), (4, 0, (8, 4)), (16, 3, (4, 1))])
def test_align_region(size, factor, offset, span):
    """B's region per 3-column tile of C is widened to start at k*factor + offset and span
    k*m + r columns: the values stay right (outside a GPU kernel the region is then clamped
    to the domain) at sizes that do and don't divide; the start is rounded down."""

    def sched(wl):
        s = wl.schedule()
        B, C = s[wl.main["B"]], s[wl.main["C"]]
        jo, _ = C.split(C.op.axis[1], factor=3)
        B.compute_at(C, jo)
        B.align_region(B.op.axis[1], factor, offset, *(span or ()))
        return s
    check_sizes(pipe, sched, size)
    assert f"// {factor} * {factor}" in lowered_text(pipe(13), sched)


@pytest.mark.parametrize("factor,offset,span", [(0, 0, None), (8, 8, None), (8, 1, (4, 4))])
def test_align_region_refuses_bad_arguments(factor, offset, span):
    wl = pipe(13)
    s = wl.schedule()
    B = s[wl.main["B"]]
    with pytest.raises(td.ScheduleError, match="align_region: stage 'B'"):
        B.align_region(B.op.axis[1], factor, offset, *(span or ()))


def test_storage_align_shared_cache():
    """The classic use: pad the rows of a shared tile (3-D stage, middle axis aligned)."""
    A = td.placeholder((3, 5, 6), name="A")
    B = td.compute((3, 5, 6), lambda b, i, j: A[b, i, j] * A[b, i, j], name="B")
    s = td.create_schedule(B.op)
    AS = s.cache_read(A, "shared", [B])
    s[AS].storage_align(s[AS].op.axis[1], 8, 2)
    s[AS].storage_align(s[AS].op.axis[0], 64, 0)
    s[AS].compute_at(s[B], B.op.axis[0])
    f = td.lower(s, [A, B])
    assert 'strides=(64, 10, 1)' in str(f)
    a = random_array(np.random.default_rng(4), (3, 5, 6))
    b = np.full((3, 5, 6), np.nan, "float32")
    run(f, a, b)
    np.testing.assert_allclose(b, a * a, rtol=1e-6)
