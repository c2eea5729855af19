"""cache_read and cache_write in every scope: differential tests against NumPy."""
import numpy as np
import pytest

import tdsl as td
from tdsl.interpreter import run
from tests.workloads import check_sizes, interpreter_runner, matmul, pipeline, random_array

SIZES = [pytest.param(16, id="divisible"), pytest.param(13, id="tail"),
         pytest.param("sym", id="symbolic")]
SCOPES = ["global", "shared", "local"]


def mm(size):
    return matmul(M=size or 12, N=8, K=10, symbolic_m=size is None)


def pipe(size):
    return pipeline(H=size or 9, W=10, symbolic_h=size is None)


# ---- cache_read ------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("scope", SCOPES)
def test_cache_read_at_root(size, scope):
    def sched(wl):
        s = wl.schedule()
        AA = s.cache_read(wl.main["A"], scope, [wl.main["C"]])
        assert AA.name == f"A.{scope}" and s[AA].scope.value == scope
        return s
    check_sizes(mm, sched, size)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("scope", SCOPES)
def test_cache_read_attached(size, scope):
    """A tile of A and of B copied inside the k.outer loop of a tiled matmul."""
    def sched(wl):
        s = wl.schedule()
        C = wl.main["C"]
        AA = s.cache_read(wl.main["A"], scope, [C])
        BB = s.cache_read(wl.main["B"], scope, [C])
        i, j = s[C].op.axis
        io, jo, ii, ji = s[C].tile(i, j, 4, 3)
        ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=4)
        s[C].reorder(io, jo, ko, ii, ki, ji)
        s[AA].compute_at(s[C], ko)
        s[BB].compute_at(s[C], ko)
        return s
    check_sizes(mm, sched, size)
    wl = mm(16)
    f = str(td.lower(sched(wl), wl.args))
    assert f'A.{scope} = allocate((4, 4), "float32", scope="{scope}")' in f


@pytest.mark.parametrize("size", SIZES)
def test_cache_read_of_intermediate_with_two_readers(size):
    """Cache an intermediate stage (not an input) for both stages that read it."""
    def make(h):
        H = td.var("h") if h is None else h
        A = td.placeholder((H, 6), name="A")
        B = td.compute((H, 6), lambda i, j: A[i, j] + 2.0, name="B")
        C = td.compute((H, 6), lambda i, j: B[i, j] * 3.0, name="C")
        D = td.compute((H, 6), lambda i, j: B[i, (j + 1) % 6] - C[i, j], name="D")
        return A, B, C, D

    A, B, C, D = make(None if size == "sym" else size)
    s = td.create_schedule(D.op)
    BL = s.cache_read(B, "local", [C, D])
    io, ii = s[D].split(D.op.axis[0], factor=4)
    s[C].compute_at(s[D], io)
    s[BL].compute_at(s[D], io)
    f = td.lower(s, [A, D])
    rng = np.random.default_rng(0)
    for h in ((3, 16, 21) if size == "sym" else (size,)):
        a = random_array(rng, (h, 6))
        d = np.full((h, 6), np.nan, "float32")
        run(f, a, d)
        b = a + np.float32(2)
        np.testing.assert_allclose(d, np.roll(b, -1, axis=1) - b * 3, rtol=1e-6)


def test_cache_read_twice_same_tensor():
    """Two caches of one input, one per reader."""
    A = td.placeholder((9, 7), name="A")
    B = td.compute((9, 7), lambda i, j: A[i, j] * 2.0, name="B")
    C = td.compute((9, 7), lambda i, j: A[i, j] + B[i, j], name="C")
    s = td.create_schedule(C.op)
    A1 = s.cache_read(A, "local", [B])
    A2 = s.cache_read(A, "shared", [C])
    assert A1.name != A2.name
    s[B].compute_at(s[C], C.op.axis[0])
    s[A1].compute_at(s[B], B.op.axis[0])
    s[A2].compute_at(s[C], C.op.axis[1])
    a = random_array(np.random.default_rng(1), (9, 7))
    c = np.full((9, 7), np.nan, "float32")
    run(td.lower(s, [A, C]), a, c)
    np.testing.assert_allclose(c, a * 3, rtol=1e-6)


# ---- cache_write ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("scope", SCOPES)
def test_cache_write_at_root(size, scope):
    def sched(wl):
        s = wl.schedule()
        CL = s.cache_write(wl.main["C"], scope)
        assert CL.name == f"C.{scope}" and s[CL].scope.value == scope
        s[CL].split(s[CL].op.reduce_axis[0], factor=4)
        return s
    check_sizes(mm, sched, size)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("scope", SCOPES)
def test_cache_write_attached_tile(size, scope):
    """Accumulate a 4x4 tile in C.<scope>, then copy it to C (tails in both loops)."""
    def sched(wl):
        s = wl.schedule()
        C = wl.main["C"]
        CL = s.cache_write(C, scope)
        i, j = s[C].op.axis
        io, jo, ii, ji = s[C].tile(i, j, 4, 3)
        s[CL].compute_at(s[C], jo)
        ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=3)
        ic, jc = s[CL].op.axis
        s[CL].reorder(ko, ic, ki, jc)
        return s
    check_sizes(mm, sched, size)
    wl = mm(16)
    f = str(td.lower(sched(wl), wl.args))
    assert f'C.{scope} = allocate((4, 3), "float32", scope="{scope}")' in f


@pytest.mark.parametrize("size", SIZES)
def test_cache_write_elementwise(size):
    def sched(wl):
        s = wl.schedule()
        C = wl.main["C"]
        CL = s.cache_write(C, "local")
        io, ii = s[C].split(s[C].op.axis[0], factor=4)
        s[CL].compute_at(s[C], io)
        s[wl.main["B"]].compute_inline()
        return s
    check_sizes(pipe, sched, size)


def test_cache_write_and_cache_read_together():
    """cache_write(C) then cache_read(A) for the cache stage, nested attachment."""
    wl = mm(13)
    s = wl.schedule()
    C = wl.main["C"]
    CL = s.cache_write(C, "local")
    AA = s.cache_read(wl.main["A"], "global", [CL])
    io, jo, ii, ji = s[C].tile(*s[C].op.axis, 4, 4)
    s[CL].compute_at(s[C], jo)
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=3)
    s[AA].compute_at(s[CL], ko)
    wl.case(s).check_with(interpreter_runner)


def test_cache_write_multi_output_argmax():
    """A two-output (argmax) reduction written through a local cache."""
    n = td.var("n")
    A = td.placeholder((n, 9), name="A")
    argmax = td.comm_reducer(
        lambda x, y: (td.if_then_else(x[1] >= y[1], x[0], y[0]), td.maximum(x[1], y[1])),
        lambda t0, t1: (td.const(-1, t0), td.min_value(t1)), name="argmax")
    k = td.reduce_axis((0, 9), name="k")
    I, V = td.compute((n,), lambda i: argmax((k.var, A[i, k]), axis=k), name="am")
    s = td.create_schedule(I.op)
    IL, VL = s.cache_write([I, V], "local")
    io, ii = s[I].split(I.op.axis[0], factor=4)
    s[IL].compute_at(s[I], io)
    f = td.lower(s, [A, I, V])
    rng = np.random.default_rng(5)
    for v in (2, 8, 11):
        a = random_array(rng, (v, 9))
        iv = np.full(v, -7, "int64")
        vv = np.full(v, np.nan, "float32")
        run(f, a, iv, vv)
        np.testing.assert_array_equal(iv, a.argmax(axis=1))
        np.testing.assert_array_equal(vv, a.max(axis=1))


# ---- cache_write on a stage already scheduled (regression: was refused) -----------------------------
def llvm_runner(sch, args, arrays):
    td.build(sch, args, target="llvm")(*arrays)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("runner", [interpreter_runner, llvm_runner], ids=["interp", "llvm"])
def test_cache_write_after_split_reorder_and_annotations(size, runner):
    """The cache stage takes over the split/reordered/vectorized loops (the handles the
    caller holds keep working); C becomes a plain copy nest that can be scheduled anew."""
    def sched(wl):
        s = wl.schedule()
        C = wl.main["C"]
        i, j = s[C].op.axis
        k = s[C].op.reduce_axis[0]
        io, ii = s[C].split(i, factor=4)
        ko, ki = s[C].split(k, factor=3)
        s[C].reorder(io, ko, ii, ki, j)
        s[C].vectorize(j)
        CL = s.cache_write(C, "local")
        assert s[CL].leaf_iter_vars == [io, ko, ii, ki, j]
        assert [v.name for v in s[C].leaf_iter_vars] == ["i", "j"]
        s[CL].unroll(ki)                          # old handles now address the cache stage
        co, ci = s[C].split(s[C].op.axis[0], factor=4)
        s[CL].compute_at(s[C], co)
        return s
    check_sizes(mm, sched, size, runner=runner)


@pytest.mark.parametrize("runner", [interpreter_runner, llvm_runner], ids=["interp", "llvm"])
def test_cache_write_moves_stages_attached_to_the_cached_stage(runner):
    """A producer attached inside C's loops follows the computation into C.local."""
    def sched(wl):
        s = wl.schedule()
        C, B = wl.main["C"], wl.main["B"]
        io, ii = s[C].split(s[C].op.axis[0], factor=4)
        s[B].compute_at(s[C], io)
        CL = s.cache_write(C, "global")
        assert s[B].attach_stage is s[CL] and s[B].attach_ivar is io
        return s
    for size in (9, 12):
        check_sizes(pipe, sched, size, runner=runner)


def test_cache_write_of_an_attached_stage_is_refused_unchanged():
    wl = pipe(9)
    s = wl.schedule()
    C, B = wl.main["C"], wl.main["B"]
    s[B].compute_at(s[C], s[C].op.axis[0])
    n = len(s.stages)
    with pytest.raises(td.ScheduleError, match=r"cache_write: stage 'B'.*before compute_at"):
        s.cache_write(B, "local")
    assert len(s.stages) == n and len(s.trace) == 1


def test_cache_write_after_split_replays_from_its_trace():
    from tdsl.schedule import Trace
    from tdsl.structural import structural_equal
    wl = mm(13)
    s = wl.schedule()
    C = wl.main["C"]
    io, ii = s[C].split(s[C].op.axis[0], factor=4)
    CL = s.cache_write(C, "local")
    s[CL].compute_at(s[C], s[C].op.axis[0])
    s2 = Trace.from_json(s.trace.to_json()).apply(wl.schedule())
    assert structural_equal(td.lower(s, wl.args), td.lower(s2, wl.args))
