"""bind to GPU thread axes (blockIdx/threadIdx), shared-memory caches with cooperative
fetching, local accumulators: run by the interpreter thread by thread, against NumPy."""
import numpy as np
import pytest

import tdsl as td
from tdsl.interpreter import run
from tests.workloads import check_sizes, interpreter_runner, matmul, pipeline, random_array

SIZES = [pytest.param(16, id="divisible"), pytest.param(13, id="tail"),
         pytest.param("sym", id="symbolic")]


def pipe(size):
    return pipeline(H=size or 9, W=6, symbolic_h=size is None)


@pytest.mark.parametrize("size", SIZES)
def test_bind_fused_elementwise(size):
    def sched(wl):
        s = wl.schedule()
        s[wl.main["B"]].compute_inline()
        C = s[wl.main["C"]]
        f = C.fuse(*C.op.axis)
        bx, tx = C.split(f, factor=16)
        C.bind(bx, td.thread_axis("blockIdx.x"))
        C.bind(tx, td.thread_axis("threadIdx.x"))
        return s
    check_sizes(pipe, sched, size)


@pytest.mark.parametrize("size", SIZES)
def test_bind_2d_grid_and_block(size):
    def sched(wl):
        s = wl.schedule()
        s[wl.main["B"]].compute_inline()
        C = s[wl.main["C"]]
        i, j = C.op.axis
        by, bx, ty, tx = C.tile(i, j, 4, 4)
        C.bind(by, td.thread_axis("blockIdx.y"))
        C.bind(bx, td.thread_axis("blockIdx.x"))
        C.bind(ty, td.thread_axis("threadIdx.y"))
        C.bind(tx, td.thread_axis("threadIdx.x"))
        return s
    check_sizes(pipe, sched, size)


@pytest.mark.parametrize("size", SIZES)
def test_bind_with_attached_producer_per_thread(size):
    """B computed by each thread inside its own iteration (local scope)."""
    def sched(wl):
        s = wl.schedule()
        B, C = wl.main["B"], wl.main["C"]
        s[B].set_scope("local")
        i, j = s[C].op.axis
        bx, tx = s[C].split(i, factor=4)
        s[C].bind(bx, td.thread_axis("blockIdx.x"))
        s[C].bind(tx, td.thread_axis("threadIdx.x"))
        s[B].compute_at(s[C], tx)
        return s
    check_sizes(pipe, sched, size)


def shared_matmul_schedule(wl, tile=4, kf=4):
    """The classic GPU matmul: 2-D blocks, shared tiles of A and B fetched cooperatively
    by all the block's threads, a local accumulator per thread."""
    s = wl.schedule()
    A, B, C = wl.main["A"], wl.main["B"], wl.main["C"]
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    bx, tx = s[C].split(i, factor=tile)
    by, ty = s[C].split(j, factor=tile)
    s[C].reorder(bx, by, tx, ty)
    s[C].bind(bx, td.thread_axis("blockIdx.x"))
    s[C].bind(by, td.thread_axis("blockIdx.y"))
    s[C].bind(tx, td.thread_axis("threadIdx.x"))
    s[C].bind(ty, td.thread_axis("threadIdx.y"))
    s[CL].compute_at(s[C], ty)
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=kf)
    for T in (AS, BS):
        s[T].compute_at(s[CL], ko)
        f = s[T].fuse(*s[T].op.axis)
        fo, fi = s[T].split(f, factor=tile)
        s[T].bind(fi, td.thread_axis("threadIdx.y"))
        fo2, fo1 = s[T].split(fo, factor=tile)
        s[T].bind(fo1, td.thread_axis("threadIdx.x"))
    return s


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("K", [8, 10])
def test_shared_memory_matmul_cooperative_fetch(size, K):
    def mm(m):
        return matmul(M=m or 12, N=9, K=K, symbolic_m=m is None)
    check_sizes(mm, shared_matmul_schedule, size, values=(3, 9, 13))
    wl = mm(13)
    text = str(td.lower(shared_matmul_schedule(wl), wl.args))
    assert 'scope="shared"' in text and "sync_threads()" in text
    assert 'thread_binding(4, "threadIdx.x")' in text


def vthread_matmul_schedule(wl, nv=2, tile=2):
    """opt_conv_cuda's shape: one virtual thread per tiled axis of C (two or three on one
    stage, bound before the reorder), shared and local caches attached inside."""
    s = wl.schedule()
    A, B, C = wl.main["A"], wl.main["B"], wl.main["C"]
    AS = s.cache_read(A, "shared", [C])
    AL = s.cache_read(AS, "local", [C])
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    bi, i = s[C].split(i, factor=nv * tile)
    vi, i = s[C].split(i, nparts=nv)
    ti, i = s[C].split(i, nparts=tile)
    vj, j = s[C].split(j, nparts=nv)
    tj, j = s[C].split(j, nparts=tile)
    s[C].bind(bi, td.thread_axis("blockIdx.x"))
    s[C].bind(vi, td.thread_axis("vthread", name="vi"))
    s[C].bind(vj, td.thread_axis("vthread", name="vj"))
    s[C].reorder(bi, vi, vj, ti, tj, i, j)
    s[C].bind(ti, td.thread_axis("threadIdx.y"))
    s[C].bind(tj, td.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], tj)
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=4)
    s[AS].compute_at(s[CL], ko)
    s[AL].compute_at(s[CL], ki)
    return s


@pytest.mark.parametrize("size", SIZES)
def test_two_vthreads_on_one_stage(size):
    def mm(m):
        return matmul(M=m or 12, N=9, K=10, symbolic_m=m is None)
    check_sizes(mm, vthread_matmul_schedule, size, values=(3, 9, 13))


def test_three_vthreads_and_a_hardware_index_twice():
    A = td.placeholder((8, 6, 4), name="A")
    C = td.compute((8, 6, 4), lambda i, j, k: A[i, j, k] * 2.0, name="C")
    s = td.create_schedule(C.op)
    outer = []
    for ax in C.op.axis:
        vo, vi = s[C].split(ax, nparts=2)
        s[C].bind(vo, td.thread_axis("vthread"))
        outer.append(vi)
    s[C].bind(outer[0], td.thread_axis("threadIdx.x"))
    a = random_array(np.random.default_rng(5), (8, 6, 4))
    c = np.full((8, 6, 4), np.nan, "float32")
    run(td.lower(s, [A, C]), a, c)
    np.testing.assert_allclose(c, a * 2)
    with pytest.raises(td.ScheduleError, match="threadIdx.x is already bound"):
        s[C].bind(outer[1], td.thread_axis("threadIdx.x"))


def test_bind_same_tag_in_two_kernels():
    """Two root stages, each its own kernel, both bound to threadIdx.x (with other extents)."""
    n = td.var("n")
    A = td.placeholder((n,), name="A")
    B = td.compute((n,), lambda i: A[i] + 1.0, name="B")
    C = td.compute((n,), lambda i: B[i] * 2.0, name="C")
    s = td.create_schedule(C.op)
    for T, f in ((B, 4), (C, 8)):
        o, i = s[T].split(T.op.axis[0], factor=f)
        s[T].bind(o, td.thread_axis("blockIdx.x"))
        s[T].bind(i, td.thread_axis("threadIdx.x"))
    fn = td.lower(s, [A, C])
    rng = np.random.default_rng(0)
    for v in (3, 8, 21):
        a = random_array(rng, (v,))
        c = np.full(v, np.nan, "float32")
        run(fn, a, c)
        np.testing.assert_allclose(c, (a + 1) * 2, rtol=1e-6)


@pytest.mark.parametrize("size", [pytest.param(16, id="divisible"), pytest.param(13, id="tail")])
def test_double_buffer_shared_tile(size):
    """double_buffer on a shared cache: same results (it only overlaps loads)."""
    def sched(wl):
        s = shared_matmul_schedule(wl, tile=4, kf=2)
        for st in s.stages:
            if st.name in ("A.shared", "B.shared"):
                st.double_buffer()
        return s
    check_sizes(lambda m: matmul(M=m, N=8, K=10), sched, size)


def test_cooperative_global_stage_in_kernel_is_synchronized_or_refused():
    wl = pipeline(H=4, W=5)
    s = wl.schedule()
    B, C = s[wl.main["B"]], s[wl.main["C"]]
    by, bx, ty, tx = C.tile(*C.op.axis, 4, 3)
    C.bind(by, td.thread_axis("blockIdx.y"))
    C.bind(bx, td.thread_axis("blockIdx.x"))
    C.bind(ty, td.thread_axis("threadIdx.y"))
    C.bind(tx, td.thread_axis("threadIdx.x"))
    B.set_scope("global")
    B.compute_at(C, bx)
    fo, fi = B.split(B.fuse(*B.op.axis), factor=3)
    B.bind(fi, td.thread_axis("threadIdx.x"))
    fo2, fo1 = B.split(fo, factor=4)
    B.bind(fo1, td.thread_axis("threadIdx.y"))
    try:
        td.lower(s, wl.args)
    except td.TDSLError:
        return                      # refusing is fine
    wl.case(s).check_with(interpreter_runner)


@pytest.mark.parametrize("scope", [None, "shared"])
def test_cooperative_shared_stage_in_kernel(scope):
    """The same schedule with B in shared memory (or scope inferred) is synchronized."""
    wl = pipeline(H=4, W=5)
    s = wl.schedule()
    B, C = s[wl.main["B"]], s[wl.main["C"]]
    by, bx, ty, tx = C.tile(*C.op.axis, 4, 3)
    C.bind(by, td.thread_axis("blockIdx.y"))
    C.bind(bx, td.thread_axis("blockIdx.x"))
    C.bind(ty, td.thread_axis("threadIdx.y"))
    C.bind(tx, td.thread_axis("threadIdx.x"))
    if scope:
        B.set_scope(scope)
    B.compute_at(C, bx)
    fo, fi = B.split(B.fuse(*B.op.axis), factor=3)
    B.bind(fi, td.thread_axis("threadIdx.x"))
    fo2, fo1 = B.split(fo, factor=4)
    B.bind(fo1, td.thread_axis("threadIdx.y"))
    assert 'scope="shared"' in str(td.lower(s, wl.args))
    wl.case(s).check_with(interpreter_runner)
