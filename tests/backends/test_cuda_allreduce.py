"""Cross-thread reduction: a reduction loop bound to threadIdx (alone, or rfactor'ed).

Each schedule is checked three ways without a GPU: the reference interpreter and the
CPU emulation of the CUDA source against NumPy on random data (sizes that do and do
not divide the thread count, symbolic sizes), and NVRTC compiling the source for sm_80
and sm_90.  The three all-reduce shapes are covered: a warp butterfly (<= 32 lanes), warps
plus shared memory (a multiple of 32 lanes), and the shared-memory tree (anything else).
"""
from __future__ import annotations

import shutil
from typing import Any, Callable

import numpy as np
import pytest

import tdsl as td
from tdsl import interpreter, ops
from tdsl.backends.cuda import nvrtc
from tdsl.backends.cuda.errors import EmulationError
from tdsl.errors import BuildError, LoweringError, ScheduleError
from tdsl.stmt import AllReduce

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None,
                               reason="g++ is not installed: the CUDA emulation harness needs it")
pytestmark = needs_gxx


def thread(tag: str) -> Any:
    return td.thread_axis(tag)


def check(s: Any, args: list, arrays: list, reference: np.ndarray, rtol: float = 1e-5,
          atol: float = 1e-5) -> Any:
    """Interpreter and emulation of ``s`` match ``reference`` (the last array is the
    output, pre-filled with NaN); NVRTC compiles the source.  Returns the module."""
    func = td.lower(s, args)
    out = arrays[-1]
    for run in (lambda a: interpreter.run(func, *a), lambda a: mod.emulate(*a)):
        mod = td.build(s, args, target="cuda")
        got = [a.copy() for a in arrays]
        got[-1][...] = np.nan if out.dtype.kind == "f" else -7
        run(got)
        np.testing.assert_allclose(got[-1], reference, rtol=rtol, atol=atol)
    if nvrtc.is_available():
        for arch in ("sm_80", "sm_90"):
            nvrtc.compile_cuda(mod.get_source(), arch=arch)
    return mod


def row_sum(tag: str, factor: int, reducer: Any = td.sum) -> tuple:
    """Repro e2's schedule: the reduction split by ``factor``, the inner part bound to
    ``tag``, rows over blocks; rows symbolic."""
    n, N = td.var("n"), td.var("N")
    X = td.placeholder((n, N), name="X")
    k = td.reduce_axis((0, N), name="k")
    S = td.compute((n,), lambda i: reducer(X[i, k], axis=k), name="S")
    s = td.create_schedule(S.op)
    ko, ki = s[S].split(s[S].op.reduce_axis[0], factor=factor)
    (i,) = s[S].op.axis
    s[S].reorder(i, ko, ki)
    s[S].bind(i, thread("blockIdx.x"))
    s[S].bind(ki, thread(tag))
    return s, [X, S]


@pytest.mark.parametrize("tag,factor,cols,shape", [
    ("threadIdx.x", 32, 128, "warp"),    # e2 as filed
    ("threadIdx.x", 32, 100, "warp"),    # a tail in the reduction
    ("threadIdx.x", 8, 13, "warp"),
    ("threadIdx.x", 64, 200, "warps"),
    ("threadIdx.x", 256, 1000, "warps"),
    ("threadIdx.x", 24, 100, "tree"),    # not a power of two
    ("threadIdx.y", 32, 77, "warp"),     # threadIdx.x has extent 1: y runs along the lanes
])
def test_reduce_axis_bound_to_a_thread(no_disk_cache, tag: str, factor: int, cols: int,
                                       shape: str) -> None:
    s, args = row_sum(tag, factor)
    x = np.random.default_rng(factor + cols).standard_normal((5, cols)).astype("float32")
    mod = check(s, args, [x, np.empty(5, "float32")], x.sum(1), rtol=1e-4)
    src = mod.get_source()
    assert ("__shfl_xor_sync" in src) == (shape != "tree")
    assert ("red_buf" in src) == (shape != "warp")
    assert f"all-reduce (sum) over {tag}: {shape}" in src


def test_reduced_axis_across_lanes_of_other_rows(no_disk_cache) -> None:
    """Rows on threadIdx.x, the reduction on threadIdx.y: a group's threads are not
    consecutive lanes, so the shared-memory tree combines them."""
    n, N = td.var("n"), td.var("N")
    X = td.placeholder((n, N), name="X")
    k = td.reduce_axis((0, N), name="k")
    S = td.compute((n,), lambda i: td.sum(X[i, k], axis=k), name="S")
    s = td.create_schedule(S.op)
    io, ii = s[S].split(s[S].op.axis[0], factor=4)
    ko, ki = s[S].split(k, factor=8)
    s[S].reorder(io, ii, ki, ko)
    s[S].bind(io, thread("blockIdx.x"))
    s[S].bind(ii, thread("threadIdx.x"))
    s[S].bind(ki, thread("threadIdx.y"))
    x = np.random.default_rng(5).standard_normal((7, 45)).astype("float32")
    mod = check(s, [X, S], [x, np.empty(7, "float32")], x.sum(1), rtol=1e-4)
    assert "over threadIdx.y: tree" in mod.get_source()


@pytest.mark.parametrize("reducer,ref", [(td.max, np.max), (td.min, np.min)])
@pytest.mark.parametrize("factor", [32, 64, 24])
def test_max_min(no_disk_cache, reducer: Any, ref: Callable, factor: int) -> None:
    s, args = row_sum("threadIdx.x", factor, reducer)
    x = np.random.default_rng(factor).standard_normal((3, 150)).astype("float32")
    check(s, args, [x, np.empty(3, "float32")], ref(x, axis=1))


def _argmax_reducer() -> Any:
    def fcombine(x: tuple, y: tuple) -> tuple:
        take = (y[1] > x[1]) | ((y[1] == x[1]) & (y[0] < x[0]))
        return td.if_then_else(take, y[0], x[0]), td.if_then_else(take, y[1], x[1])
    return td.comm_reducer(fcombine, lambda t0, t1: (td.const(-1, t0), td.min_value(t1)),
                           name="argmax")


@pytest.mark.parametrize("factor", [32, 64, 24])
def test_tuple_reducer_argmax(no_disk_cache, factor: int) -> None:
    """A (index, value) combiner: both values travel through shuffles / shared memory."""
    argmax = _argmax_reducer()
    n = td.var("n")
    X = td.placeholder((n, 90), name="X")
    k = td.reduce_axis((0, 90), name="k")
    idx, val = td.compute((n,), lambda i: argmax((k.var.astype("int64"), X[i, k]), axis=k),
                          name="AM")
    s = td.create_schedule(idx.op)
    ko, ki = s[idx].split(s[idx].op.reduce_axis[0], factor=factor)
    s[idx].bind(s[idx].op.axis[0], thread("blockIdx.x"))
    s[idx].bind(ki, thread("threadIdx.x"))
    x = np.random.default_rng(factor).standard_normal((4, 90)).astype("float32")
    x[2, 7] = x[2, 61] = 9.0   # a tie: the first index wins
    check(s, [X, idx], [x, np.empty(4, "int64")], x.argmax(1))


def test_two_reduced_axes(no_disk_cache) -> None:
    """Both reduction loops bound (threadIdx.y and threadIdx.x): one group per block."""
    n = td.var("n")
    X = td.placeholder((n, 6, 20), name="X")
    a = td.reduce_axis((0, 6), name="a")
    b = td.reduce_axis((0, 20), name="b")
    S = td.compute((n,), lambda i: td.sum(X[i, a, b], axis=[a, b]), name="S")
    s = td.create_schedule(S.op)
    s[S].bind(s[S].op.axis[0], thread("blockIdx.x"))
    s[S].bind(a, thread("threadIdx.y"))
    s[S].bind(b, thread("threadIdx.x"))
    x = np.random.default_rng(3).standard_normal((3, 6, 20)).astype("float32")
    mod = check(s, [X, S], [x, np.empty(3, "float32")], x.sum((1, 2)), rtol=1e-4)
    assert "over threadIdx.y, threadIdx.x: tree" in mod.get_source()


def tutorial_schedule() -> tuple:
    """TVM v0.19's reduction tutorial, "Cross Thread Reduction", as written there."""
    te = td
    n = te.var("n")
    m = te.var("m")
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), "k")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=16)
    BF = s.rfactor(B, ki)
    xo, xi = s[B].split(s[B].op.axis[0], factor=32)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.y"))
    tx = te.thread_axis("threadIdx.x")
    s[B].bind(s[B].op.reduce_axis[0], tx)
    s[BF].compute_at(s[B], s[B].op.reduce_axis[0])
    s[B].set_store_predicate(tx.var.equal(0))
    return s, [A, B]


@pytest.mark.parametrize("rows,cols", [(128, 128), (37, 50), (1, 3)])
def test_tvm_reduction_tutorial(no_disk_cache, rows: int, cols: int) -> None:
    s, args = tutorial_schedule()
    a = np.random.default_rng(rows).uniform(size=(rows, cols)).astype("float32")
    mod = check(s, args, [a, np.empty(rows, "float32")], a.sum(1), rtol=1e-4)
    src = mod.get_source()
    assert "__shfl_xor_sync" in src and "__syncthreads" not in src  # 16 lanes: one warp
    assert src.count("threadIdx.x == 0") + src.count("k_inner_v == 0") >= 1


def test_tutorial_trace_replays(no_disk_cache) -> None:
    """set_store_predicate is recorded in the trace and replays to the same function."""
    from tdsl.schedule.trace import Trace
    s, args = tutorial_schedule()
    fresh = td.create_schedule(args[1].op)
    s2 = Trace.from_json(s.trace.to_json()).apply(fresh)
    assert td.lower(s2, args).script() == td.lower(s, args).script()


def test_store_predicate_on_a_plain_stage(no_disk_cache) -> None:
    """Outside reductions the predicate guards the store (TVM's semantics)."""
    n = td.var("n")
    A = td.placeholder((n, 8), name="A")
    B = td.compute((n, 8), lambda i, j: A[i, j] * 2.0, name="B")
    s = td.create_schedule(B.op)
    i, j = s[B].op.axis
    s[B].bind(i, thread("blockIdx.x"))
    tx = thread("threadIdx.x")
    s[B].bind(j, tx)
    s[B].set_store_predicate(tx.var.equal(3))
    a = np.random.default_rng(0).standard_normal((5, 8)).astype("float32")
    out = np.full((5, 8), -1.0, "float32")
    interpreter.run(td.lower(s, [A, B]), a, out)
    expect = np.full((5, 8), -1.0, "float32")
    expect[:, 3] = a[:, 3] * 2
    np.testing.assert_array_equal(out, expect)


# ---- default schedules of tdsl.ops -------------------------------------------------------------------
def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


OPS = [
    ("softmax", ops.softmax, _softmax, (9, 100)),
    ("softmax_3d", ops.softmax, _softmax, (2, 5, 70)),
    ("log_softmax", ops.log_softmax, lambda x: np.log(_softmax(x)), (6, 33)),
    ("layernorm", ops.layernorm, lambda x: (x - x.mean(-1, keepdims=True))
     / np.sqrt(x.var(-1, keepdims=True) + 1e-5), (7, 129)),
    ("rmsnorm", ops.rmsnorm, lambda x: x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5), (5, 64)),
    ("sum", lambda X: ops.sum(X, axis=1), lambda x: x.sum(1), (6, 300)),
    ("max", lambda X: ops.max(X, axis=1), lambda x: x.max(1), (6, 300)),
    ("mean", lambda X: ops.mean(X, axis=1), lambda x: x.mean(1), (6, 300)),
    ("argmax", lambda X: ops.argmax(X, axis=1), lambda x: x.argmax(1), (6, 300)),
]


@pytest.mark.parametrize("name,op,ref,shape", OPS, ids=[o[0] for o in OPS])
def test_ops_defaults_reduce_across_a_warp(no_disk_cache, name: str, op: Callable, ref: Callable,
                                           shape: tuple) -> None:
    """One kernel, 32 lanes per row (threadIdx.x) and several rows per block; the row's
    reductions combine across the warp (shuffles, no serial per-thread row loop)."""
    X = td.placeholder(shape, name="X")
    Y = op(X)
    s = ops.schedule(Y, target="cuda")
    x = np.random.default_rng(len(name)).standard_normal(shape).astype("float32")
    y = np.empty(tuple(int(d) for d in Y.shape), Y.dtype.numpy)
    mod = check(s, [X, Y], [x, y], ref(x), rtol=1e-4, atol=1e-5)
    assert len(mod.kernels) == 1
    assert [int(b.value) for b in mod.kernels[0].block] == [32, 4, 1]
    src = mod.get_source()
    assert "__shfl_xor_sync" in src and "red_buf" not in src


def test_ops_long_rows_use_a_block_per_row(no_disk_cache) -> None:
    X = td.placeholder((3, 4096), name="X")
    Y = ops.softmax(X)
    s = ops.schedule(Y, target="cuda")
    mod = td.build(s, [X, Y], target="cuda")
    assert [int(b.value) for b in mod.kernels[0].block] == [256, 1, 1]
    assert "warps" in mod.get_source()
    x = np.random.default_rng(0).standard_normal((3, 4096)).astype("float32")
    y = np.full_like(x, np.nan)
    mod.emulate(x, y)
    np.testing.assert_allclose(y, _softmax(x), rtol=1e-4, atol=1e-7)


def test_column_sums_keep_a_thread_per_output(no_disk_cache) -> None:
    """A reduction along the outer axis: lanes of a warp read adjacent columns instead."""
    X = td.placeholder((300, 6), name="X")
    Y = ops.sum(X, axis=0)
    mod = td.build(ops.schedule(Y, target="cuda"), [X, Y], target="cuda")
    assert not any(isinstance(n, AllReduce) for n in _stmts(td.lower(ops.schedule(Y, target="cuda"),
                                                                    [X, Y]).body))
    x = np.random.default_rng(0).standard_normal((300, 6)).astype("float32")
    y = np.empty(6, "float32")
    mod.emulate(x, y)
    np.testing.assert_allclose(y, x.sum(0), rtol=1e-4)


def _stmts(node: Any) -> list:
    from tdsl.visitor import post_order_visit
    out: list = []
    post_order_visit(node, out.append)
    return out


# ---- refusals ---------------------------------------------------------------------------------------
def _unbound_row_sum() -> tuple:
    n = td.var("n")
    X = td.placeholder((n, 64), name="X")
    k = td.reduce_axis((0, 64), name="k")
    S = td.compute((n,), lambda i: td.sum(X[i, k], axis=k), name="S")
    return td.create_schedule(S.op), X, S, k


@pytest.mark.parametrize("tag,why", [("blockIdx.x", "blocks cannot combine partial results"),
                                     ("blockIdx.y", "blocks cannot combine partial results"),
                                     ("vthread", "a virtual thread runs serially")])
def test_bind_refuses_block_and_virtual_thread(tag: str, why: str) -> None:
    s, X, S, k = _unbound_row_sum()
    with pytest.raises(ScheduleError, match=f"bind: stage 'S', loop 'k': cannot bind reduction "
                                            f"loop 'k' to {tag}: {why}"):
        s[S].bind(k, thread(tag))


def test_cpu_build_refuses() -> None:
    s, X, S, k = _unbound_row_sum()
    s[S].bind(s[S].op.axis[0], thread("blockIdx.x"))
    s[S].bind(k, thread("threadIdx.x"))
    with pytest.raises(BuildError, match=r"a reduction across GPU threads \(sum over threadIdx.x"):
        td.build(s, [X, S], target="llvm")


def test_reduction_with_init_refused() -> None:
    n = td.var("n")
    X = td.placeholder((n, 64), name="X")
    k = td.reduce_axis((0, 64), name="k")
    S = td.compute((n,), lambda i: td.sum(X[i, k], axis=k, init=1.0), name="S")
    s = td.create_schedule(S.op)
    with pytest.raises(ScheduleError, match="init= cannot be reduced across threads"):
        s[S].bind(k, thread("threadIdx.x"))


def test_store_predicate_refusals() -> None:
    s, X, S, k = _unbound_row_sum()
    with pytest.raises(ScheduleError, match="set_store_predicate: stage 'S': unsupported predicate"):
        s[S].set_store_predicate(S.op.axis[0].var < 3)
    s[S].bind(s[S].op.axis[0], thread("blockIdx.x"))
    s[S].set_store_predicate(thread("threadIdx.y").var.equal(0))
    with pytest.raises(LoweringError, match="store predicate uses threadIdx.y, but no loop"):
        td.lower(s, [X, S])


def test_reduce_loop_shorter_than_the_launch_refused() -> None:
    """A stage in the same kernel launching more threads would leave some of them outside
    the all-reduce (a deadlock on a GPU): refused at build."""
    n = td.var("n")
    X = td.placeholder((n, 64), name="X")
    T = td.compute((n, 64), lambda i, j: X[i, j] + 1.0, name="T")
    k = td.reduce_axis((0, 64), name="k")
    S = td.compute((n,), lambda i: td.sum(T[i, k], axis=k), name="S")
    s = td.create_schedule(S.op)
    _, ki = s[S].split(k, factor=32)
    s[S].bind(s[S].op.axis[0], thread("blockIdx.x"))
    s[S].bind(ki, thread("threadIdx.x"))
    s[T].compute_at(s[S], s[S].op.axis[0])
    s[T].bind(s[T].op.axis[1], thread("threadIdx.x"))
    with pytest.raises((LoweringError, BuildError), match="threadIdx.x"):
        td.build(s, [X, S], target="cuda")


def test_emulator_checks_shuffle_masks(no_disk_cache) -> None:
    """A shuffle that reads a lane outside its mask is reported, not silently wrong."""
    s, args = row_sum("threadIdx.x", 32)
    mod = td.build(s, args, target="cuda")
    bad = mod.get_source().replace("0xffffffffu", "0x0000ffffu")
    x = np.random.default_rng(0).standard_normal((2, 64)).astype("float32")
    with pytest.raises(EmulationError, match="outside the (shuffle's )?mask"):
        mod.emulate(x, np.empty(2, "float32"), source=bad)


def _wrap_all_reduce(func: Any, wrap: Callable[[AllReduce], Any]) -> Any:
    from tdsl.stmt import PrimFunc
    from tdsl.visitor import transform
    body = transform(func.body, pre=lambda n: wrap(n) if isinstance(n, AllReduce) else None)
    return PrimFunc(func.name, func.params, body, func.size_vars, func.bindings, func.attrs)


def test_divergent_all_reduce_refused() -> None:
    """Under a thread-dependent condition some threads would skip the collective: the CUDA
    build refuses it (as it refuses a divergent barrier) and the interpreter reports it."""
    from tdsl.expr import Var
    from tdsl.stmt import IfThenElse
    s, args = row_sum("threadIdx.x", 32)
    func = td.lower(s, args)
    loops = [n for n in _stmts(func.body) if getattr(n, "thread_tag", None) is not None
             and n.thread_tag.value == "threadIdx.x"]
    tx: Var = loops[0].var
    bad = _wrap_all_reduce(func, lambda r: IfThenElse(tx < 16, r))
    with pytest.raises(BuildError, match="cross-thread reduction .* under a condition that "
                                         "differs between threads"):
        td.build(bad, target="cuda")
    x = np.random.default_rng(0).standard_normal((2, 64)).astype("float32")
    with pytest.raises(LoweringError, match="barrier not reached by all threads"):
        interpreter.run(bad, x, np.empty(2, "float32"))


def test_trivial_store_predicate_replays() -> None:
    s, X, S, k = _unbound_row_sum()
    s[S].set_store_predicate(True)
    from tdsl.schedule.trace import Trace
    s2 = Trace.from_json(s.trace.to_json()).apply(td.create_schedule(S.op))
    assert s2[S].store_predicate == ()


def test_tensorize_under_a_cross_thread_reduction_refused() -> None:
    a = td.placeholder((16,), name="a")
    b = td.placeholder((4, 16), name="b")
    kk = td.reduce_axis((0, 16), name="kk")
    c = td.compute((4,), lambda i: td.sum(a[kk] * b[i, kk], axis=kk), name="c")
    gemv = td.decl_tensor_intrin(c.op, name="gemv")
    A = td.placeholder((64,), name="A")
    B = td.placeholder((8, 64), name="B")
    k = td.reduce_axis((0, 64), name="k")
    C = td.compute((8,), lambda i: td.sum(A[k] * B[i, k], axis=k), name="C")
    s = td.create_schedule(C.op)
    io, ii = s[C].split(s[C].op.axis[0], factor=4)
    ko, ki = s[C].split(k, factor=16)
    s[C].reorder(io, ko, ii, ki)
    s[C].bind(io, thread("blockIdx.x"))
    s[C].bind(ko, thread("threadIdx.x"))
    s[C].tensorize(ii, gemv)
    with pytest.raises(LoweringError, match="bound to a thread axis cannot be combined with "
                                            "tensorize"):
        td.lower(s, [A, B, C])


@pytest.mark.parametrize("seed", range(6))
def test_random_cross_thread_schedules(no_disk_cache, seed: int) -> None:
    """Random factor, thread axis, sizes, reducer and a where= condition."""
    rng = np.random.default_rng(seed)
    factor = int(rng.choice([4, 8, 12, 16, 32, 48, 64, 128]))
    tag = str(rng.choice(["threadIdx.x", "threadIdx.y", "threadIdx.z"]))
    reducer, ref = [(td.sum, np.sum), (td.max, np.max), (td.min, np.min)][seed % 3]
    rows, cols = int(rng.integers(1, 6)), int(rng.integers(1, 300))
    n, N = td.var("n"), td.var("N")
    X = td.placeholder((n, N), name="X")
    k = td.reduce_axis((0, N), name="k")
    S = td.compute((n,), lambda i: reducer(X[i, k], axis=k, where=X[i, k] > -1.0), name="S")
    s = td.create_schedule(S.op)
    ko, ki = s[S].split(k, factor=factor)
    s[S].bind(s[S].op.axis[0], thread("blockIdx.x"))
    s[S].bind(ki, thread(tag))
    x = rng.standard_normal((rows, cols)).astype("float32")
    masked = np.where(x > -1.0, x, {np.sum: 0.0, np.max: -np.inf, np.min: np.inf}[ref])
    expect = ref(masked, axis=1).astype("float32")
    check(s, [X, S], [x, np.empty(rows, "float32")], expect, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows,cols", [(3, 50), (2, 300)])
def test_where_with_the_whole_reduction_on_threads(no_disk_cache, rows: int, cols: int) -> None:
    """No serial share: the where= condition (a load) joins the all-reduce's condition and
    is evaluated only for rows in bounds."""
    n, N = td.var("n"), td.var("N")
    X = td.placeholder((n, N), name="X")
    k = td.reduce_axis((0, N), name="k")
    S = td.compute((n,), lambda i: td.sum(X[i, k], axis=k, where=X[i, k] > 0.0), name="S")
    s = td.create_schedule(S.op)
    io, ii = s[S].split(s[S].op.axis[0], factor=2)   # a row tail when rows is odd
    s[S].bind(io, thread("blockIdx.x"))
    s[S].bind(ii, thread("threadIdx.y"))
    s[S].bind(k, thread("threadIdx.x"))
    x = np.random.default_rng(cols).standard_normal((rows, cols)).astype("float32")
    check(s, [X, S], [x, np.empty(rows, "float32")], np.where(x > 0, x, 0).sum(1), rtol=1e-4,
          atol=1e-5)


@pytest.mark.parametrize("op,ref", [(ops.softmax, _softmax),
                                    (ops.layernorm, lambda x: (x - x.mean(-1, keepdims=True))
                                     / np.sqrt(x.var(-1, keepdims=True) + 1e-5))])
def test_ops_defaults_symbolic_sizes(no_disk_cache, op: Callable, ref: Callable) -> None:
    n, m = td.var("n"), td.var("m")
    X = td.placeholder((n, m), name="X")
    Y = op(X)
    s = ops.schedule(Y, target="cuda")
    for shape in ((5, 37), (1, 200)):
        x = np.random.default_rng(shape[1]).standard_normal(shape).astype("float32")
        check(s, [X, Y], [x, np.empty(shape, "float32")], ref(x), rtol=1e-4, atol=1e-5)


# ---- one thread stores each global element -------------------------------------------------------------
def _first_thread_loops(node: Any) -> list:
    """The loops of extent 1 bound to threadIdx.x under ``node`` (a PrimFunc or a Stmt)."""
    from tdsl.lowering.single_store import is_first_thread_loop
    from tdsl.stmt import PrimFunc
    return [n for n in _stmts(node.body if isinstance(node, PrimFunc) else node)
            if is_first_thread_loop(n) and n.thread_tag.value == "threadIdx.x"]


@pytest.mark.parametrize("rows,cols", [(8, 64), (7, 45)])
def test_value_computed_from_a_row_reduction_stored_once(no_disk_cache, rows: int, cols: int) -> None:
    """Y[i] = S[i] * 2 + 1 with S reduced across threadIdx.x inside Y's kernel: Y has no
    loop bound to threadIdx.x, so every lane would store the same Y[i] (a write-write race
    the emulator reports); lowering runs that store on lane 0 only."""
    n, N = td.var("n"), td.var("N")
    X = td.placeholder((n, N), name="X")
    k = td.reduce_axis((0, N), name="k")
    S = td.compute((n,), lambda i: td.sum(X[i, k], axis=k), name="S")
    Y = td.compute((n,), lambda i: S[i] * 2.0 + 1.0, name="Y")
    s = td.create_schedule(Y.op)
    yo, yi = s[Y].split(Y.op.axis[0], factor=4)
    s[Y].bind(yo, thread("blockIdx.x"))
    s[Y].bind(yi, thread("threadIdx.y"))
    s[S].compute_at(s[Y], yi)
    s[S].bind(S.op.axis[0], thread("threadIdx.y"))
    _, ki = s[S].split(S.op.reduce_axis[0], factor=32)
    s[S].bind(ki, thread("threadIdx.x"))
    x = np.random.default_rng(rows * cols).standard_normal((rows, cols)).astype("float32")
    check(s, [X, Y], [x, np.empty(rows, "float32")], x.sum(1) * 2 + 1, rtol=1e-4, atol=1e-5)
    assert len(_first_thread_loops(td.lower(s, [X, Y]))) == 1


def test_store_of_all_bound_reduction_predicated_on_every_reduced_axis() -> None:
    """Both reduced axes bound: the result is stored where a == 0 and b == 0 (the two
    conditions are equal up to renaming, but not the same condition)."""
    n = td.var("n")
    X = td.placeholder((n, 6, 20), name="X")
    a = td.reduce_axis((0, 6), name="a")
    b = td.reduce_axis((0, 20), name="b")
    S = td.compute((n,), lambda i: td.sum(X[i, a, b], axis=[a, b]), name="S")
    s = td.create_schedule(S.op)
    s[S].bind(s[S].op.axis[0], thread("blockIdx.x"))
    s[S].bind(a, thread("threadIdx.y"))
    s[S].bind(b, thread("threadIdx.x"))
    assert "if a == 0 and b == 0:" in td.lower(s, [X, S]).script()


def _kernel(body_fn: Callable) -> Any:
    """A hand-built kernel: 32 threads along threadIdx.x in one block, and a part that no
    thread loop encloses (``body_fn(out, tmp, x_loop)``)."""
    from tdsl.expr import BufferLoad, Const, Var
    from tdsl.stmt import Buffer, BufferStore, For, ForKind, PrimFunc, ThreadTag
    out = Buffer("out", (32,), "float32")
    tmp = Buffer("tmp", (1,), "float32")
    bx, tx = Var("bx"), Var("tx")
    zero = [Const(0, "int64")]
    x_loop = For(tx, Const(0, "int64"), Const(32, "int64"), ForKind.THREAD_BINDING,
                 BufferStore(out, BufferLoad(tmp, zero) + 1.0, [tx]), thread_tag=ThreadTag.THREAD_X)
    first = BufferStore(tmp, Const(2.0, "float32"), zero)
    body = For(bx, Const(0, "int64"), Const(1, "int64"), ForKind.THREAD_BINDING,
               body_fn(first, x_loop), thread_tag=ThreadTag.BLOCK_X)
    return PrimFunc("k", [tmp, out], body, [], {}, {})


def test_store_read_by_other_threads_without_a_barrier_not_predicated() -> None:
    """Storing on one thread only is right where the others read the value behind a
    barrier; without one they would read it before it is written, so all keep storing."""
    from tdsl.lowering.single_store import predicate_redundant_stores
    from tdsl.stmt import Barrier, BufferStore, SeqStmt
    bare = _kernel(lambda first, loop: SeqStmt([first, loop]))
    assert _first_thread_loops(predicate_redundant_stores(bare.body)) == []
    synced = _kernel(lambda first, loop: SeqStmt([first, Barrier(), loop]))
    (loop,) = _first_thread_loops(predicate_redundant_stores(synced.body))
    assert isinstance(loop.body, BufferStore)


def test_first_thread_loop_runs_on_index_zero(no_disk_cache) -> None:
    """A loop of extent 1 bound to threadIdx.x beside one of extent 32: the launch has 32
    threads and its body runs on thread 0 only (interpreter and emulation agree)."""
    from tdsl.lowering.single_store import predicate_redundant_stores
    from tdsl.stmt import Barrier, PrimFunc, SeqStmt
    f = _kernel(lambda first, loop: SeqStmt([first, Barrier(), loop]))
    f = PrimFunc(f.name, f.params, predicate_redundant_stores(f.body), f.size_vars, f.bindings,
                 f.attrs)
    tmp, out = np.full(1, np.nan, "float32"), np.full(32, np.nan, "float32")
    interpreter.run(f, tmp, out)
    np.testing.assert_array_equal(out, np.full(32, 3.0, "float32"))
    mod = td.build(f, target="cuda")
    assert [int(b.value) for b in mod.kernels[0].block] == [32, 1, 1]
    tmp, out = np.full(1, np.nan, "float32"), np.full(32, np.nan, "float32")
    mod.emulate(tmp, out)
    np.testing.assert_array_equal(out, np.full(32, 3.0, "float32"))


def test_store_read_by_other_blocks_stays_on_every_block() -> None:
    """A barrier orders the threads of a block, not blocks: a store outside the blockIdx.x
    loop, read by every block behind a barrier, runs on thread 0 of every block."""
    from tdsl.expr import BufferLoad, Const, Var
    from tdsl.lowering.single_store import is_first_thread_loop, predicate_redundant_stores
    from tdsl.stmt import Barrier, Buffer, BufferStore, For, ForKind, SeqStmt, ThreadTag
    out, tmp = Buffer("out", (64,), "float32"), Buffer("tmp", (1,), "float32")
    ty, bx, tx = Var("ty"), Var("bx"), Var("tx")
    zero, c = [Const(0, "int64")], (lambda v: Const(v, "int64"))
    store = BufferStore(out, BufferLoad(tmp, zero) + 1.0, [bx * 32 + tx])
    blocks = For(bx, c(0), c(2), ForKind.THREAD_BINDING,
                 For(tx, c(0), c(32), ForKind.THREAD_BINDING, store, thread_tag=ThreadTag.THREAD_X),
                 thread_tag=ThreadTag.BLOCK_X)
    body = SeqStmt([BufferStore(tmp, Const(2.0, "float32"), zero), Barrier(), blocks])
    root = For(ty, c(0), c(1), ForKind.THREAD_BINDING, body, thread_tag=ThreadTag.THREAD_Y)
    got = predicate_redundant_stores(root)
    wrapped = [n.thread_tag.value for n in _stmts(got.body) if is_first_thread_loop(n)]
    assert wrapped == ["threadIdx.x"]
