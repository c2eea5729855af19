"""The CUDA C the backend writes: its shape, and its semantics against the reference
interpreter (run under the CPU emulation harness)."""
from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

import tdsl as td
from tdsl.backends import cuda
from tdsl.backends.cuda import EmulationError
from tdsl.backends.cuda.cstyle import float_literal
from tdsl.dtype import DType
from tdsl.expr import Const, Min, SizeVar, Var
from tdsl.interpreter import run as interpret
from tdsl.stmt import (Barrier, Buffer, BufferStore, For, ForKind, IfThenElse, PrimFunc,
                       SeqStmt, ThreadTag)
from tdsl.visitor import post_order_visit

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None,
                               reason="g++ is not installed: the CUDA emulation harness needs it")


def bind1d(s, st, factor):
    o, i = s[st].split(st.op.axis[0], factor=factor)
    s[st].bind(o, td.thread_axis("blockIdx.x"))
    s[st].bind(i, td.thread_axis("threadIdx.x"))


def test_tiled_matmul_source_shape() -> None:
    from tests.backends.test_cuda_schedules import workload
    f = workload("tiled_matmul").module
    src = f.get_source()
    assert "#include" not in src  # NVRTC from PyPI has no headers to include
    (kernel,) = f.kernels
    head = src[src.index('extern "C"'):].splitlines()[0]
    assert head.startswith('extern "C" __global__ void __launch_bounds__(64) ')
    assert "const float* __restrict__ A" in head and "float* __restrict__ C" in head
    assert "long long n" in head
    body = kernel.source.splitlines()
    # shared arrays are hoisted to the top of the kernel, with constant sizes
    assert body[1].strip() == "__shared__ tdsl_shared<float, 256> A_shared;"
    assert body[2].strip() == "__shared__ tdsl_shared<float, 256> B_shared;"
    assert "float C_local[16];" in kernel.source
    assert "#pragma unroll" in kernel.source
    # one __syncthreads() per barrier the lowering placed, but the one between the
    # independent A and B fetches (merged by backends/cuda/barriers.py)
    barriers = []
    post_order_visit(f.func.body, lambda n: barriers.append(n) if isinstance(n, Barrier) else None)
    assert len(barriers) == 3 and kernel.source.count("__syncthreads();") == 2
    # hardware indices, no loops over them
    assert "= (long long)threadIdx.y;" in kernel.source
    # grid from the symbolic size, block from the constant thread extents
    a, b, c = (np.zeros((70, 64), "float32"), np.zeros((64, 70), "float32"),
               np.zeros((70, 70), "float32"))
    assert f.launch_config(a, b, c) == [(kernel.name, (3, 3, 1), (8, 8, 1))]


@needs_gxx
def test_scalar_semantics_match_the_interpreter() -> None:
    """Floor division/modulo of negatives, int8 wrap-around, float16 rounding after each
    operation, float modulo, casts, select, math functions."""
    n = td.var("n")
    A = td.placeholder((n,), "float32", name="A")
    B = td.placeholder((n,), "float16", name="B")
    Iv = td.placeholder((n,), "int32", name="I")
    J = td.placeholder((n,), "int8", name="J")
    L = td.placeholder((n,), "int64", name="L")
    outs = [
        td.compute((n,), lambda i: td.sigmoid(A[i]) * B[i].astype("float32") +
                   td.if_then_else(Iv[i] > 0, 1.0, -1.0), name="C"),
        td.compute((n,), lambda i: B[i] * B[i] + td.exp(B[i]) - td.maximum(B[i], B[i] * B[i]),
                   name="D"),
        td.compute((n,), lambda i: Iv[i] // 7 + Iv[i] % 5 + td.max(Iv[i], -3) + td.abs(Iv[i]) +
                   td.min(Iv[i], 3), name="E"),
        td.compute((n,), lambda i: J[i] * J[i] + J[i] // 3 - (J[i] + 100) + J[i] % -3, name="F"),
        td.compute((n,), lambda i: td.floor(A[i] * 3.0) + A[i] % 0.5 + A[i] // 0.25 +
                   td.round(A[i] * 4.0) + td.power(td.abs(A[i]), 1.5) + td.rsqrt(td.abs(A[i]) + 1.0),
                   name="G"),
        td.compute((n,), lambda i: (A[i] * 1000.0).astype("int32") + (A[i] > 0).astype("int32") +
                   td.if_then_else(td.isnan(A[i]), 7, 0), name="H"),
        td.compute((n,), lambda i: L[i] // -3 + L[i] % 1000000007 + (L[i] * 3).astype("int32")
                   .astype("int64"), name="K"),
        td.compute((n,), lambda i: (A[i].astype("float64") * 1e300).astype("float16").astype("float64") +
                   td.tanh(A[i].astype("float64")), name="P"),
    ]
    s = td.create_schedule([t.op for t in outs])
    for t in outs:
        bind1d(s, t, 64)
    args = [A, B, Iv, J, L] + outs
    f = td.build(s, args, target="cuda")
    g = np.random.default_rng(7)
    m = 300
    ins = [g.standard_normal(m).astype("float32"), g.standard_normal(m).astype("float16"),
           g.integers(-100, 100, m).astype("int32"), g.integers(-128, 127, m).astype("int8"),
           g.integers(-2**40, 2**40, m).astype("int64")]
    ins[0][:3] = [0.0, -0.5, 2.5]
    got = [np.empty(m, t.dtype.value) for t in outs]
    want = [np.empty(m, t.dtype.value) for t in outs]
    f.emulate(*ins, *got)
    interpret(td.lower(s, args), *ins, *want)
    for t, x, y in zip(outs, got, want):
        if t.dtype.is_float and t.name in ("C", "G", "P"):
            np.testing.assert_allclose(x, y, rtol=2e-6, atol=1e-6, err_msg=t.name)
        else:
            np.testing.assert_array_equal(x, y, err_msg=t.name)


@needs_gxx
def test_multi_kernel_with_host_allocated_intermediate() -> None:
    n = td.var("n")
    A = td.placeholder((n, 64), name="A")
    B = td.compute((n, 64), lambda i, j: A[i, j] * 2.0, name="B")
    D = td.compute((n, 64), lambda i, j: B[i, j] + 1.0, name="D")
    s = td.create_schedule(D.op)
    for st in (B, D):
        i, j = s[st].op.axis
        s[st].bind(i, td.thread_axis("blockIdx.x"))
        s[st].bind(j, td.thread_axis("threadIdx.x"))
    f = td.build(s, [A, D], target="cuda")
    assert f.kernel_names == ["default_function_kernel0", "default_function_kernel1"]
    k0, k1 = f.kernels
    assert "float* __restrict__ B" in k0.source.splitlines()[0]
    assert "const float* __restrict__ B" in k1.source.splitlines()[0]
    assert "long long n" not in k0.source  # the grid size stays on the host
    a = np.random.default_rng(0).random((5, 64)).astype("float32")
    d = np.empty_like(a)
    f.emulate(a, d)
    np.testing.assert_allclose(d, a * 2 + 1, rtol=1e-6)
    assert f.launch_config(a, d) == [(k0.name, (5, 1, 1), (64, 1, 1)),
                                     (k1.name, (5, 1, 1), (64, 1, 1))]


@needs_gxx
def test_global_buffer_allocated_inside_a_kernel_is_hoisted_to_the_host() -> None:
    n = td.var("n")
    A = td.placeholder((n, 64), name="A")
    B = td.compute((n, 64), lambda i, j: A[i, j] * 2.0, name="B")
    D = td.compute((n, 64), lambda i, j: B[i, j] + 1.0, name="D")
    s = td.create_schedule(D.op)
    i, j = s[D].op.axis
    s[D].bind(i, td.thread_axis("blockIdx.x"))
    s[D].bind(j, td.thread_axis("threadIdx.x"))
    s[B].set_scope("global")      # unset, a stage attached in a kernel is local/shared
    s[B].compute_at(s[D], i)
    s[B].bind(s[B].op.axis[1], td.thread_axis("threadIdx.x"))  # one element per thread
    f = td.build(s, [A, D], target="cuda")
    (k,) = f.kernels
    assert [b.name for b in k.hoisted] == ["B"]
    a = np.random.default_rng(1).random((3, 64)).astype("float32")
    d = np.empty_like(a)
    # a global stage under the block loop covers every block's rows (its bound is relaxed
    # over blockIdx, as in TVM): every block writes all of B, a cross-block race
    with pytest.raises(cuda.GlobalMemoryRaceError, match="another block"):
        f.emulate(a, d)
    f.emulate(a, d, check_races=False)
    np.testing.assert_allclose(d, a * 2 + 1, rtol=1e-6)


@needs_gxx
def test_let_bound_values_in_a_kernel() -> None:
    """An argmax reduction (two outputs, combined through let-bound temporaries)."""
    m = td.var("m")
    A = td.placeholder((m, 10), name="A")
    am = td.comm_reducer(lambda x, y: (td.if_then_else(x[1] >= y[1], x[0], y[0]),
                                       td.maximum(x[1], y[1])),
                         lambda t0, t1: (td.const(-1, t0), td.min_value(t1)), name="argmax")
    k = td.reduce_axis((0, 10), name="k")
    I, V = td.compute((m,), lambda i: am((k.var, A[i, k]), axis=k), name="am")
    s = td.create_schedule(I.op)
    bind1d(s, I, 4)
    f = td.build(s, [A, I, V], target="cuda")
    assert re.search(r"const float am_v1\w* = ", f.get_source())
    a = np.random.default_rng(3).random((9, 10)).astype("float32")
    iv, vv = np.empty(9, "int64"), np.empty(9, "float32")
    f.emulate(a, iv, vv)
    np.testing.assert_array_equal(iv, a.argmax(1))
    np.testing.assert_array_equal(vv, a.max(1))


def _guarded_kernel() -> PrimFunc:
    """A hand-written kernel whose second threadIdx.x loop is shorter than the launch (a
    guard) and has an extent the compiler cannot bound (a __trap() check)."""
    n = SizeVar("n")
    A = Buffer("A", (n,), "float32")
    bx, t1, t2 = Var("bx"), Var("t1"), Var("t2")
    zero = Const(0, "int64")
    idx = bx * 32 + t1
    first = For(t1, zero, Const(32, "int64"), ForKind.THREAD_BINDING,
                IfThenElse(idx < n, BufferStore(A, Const(1.0, "float32"), [idx])),
                ThreadTag.THREAD_X)
    rest = Min(Const(32, "int64"), n - bx * 32)
    second = For(t2, zero, n - bx * 32, ForKind.THREAD_BINDING,
                 IfThenElse(t2 < rest, BufferStore(A, Const(2.0, "float32"), [bx * 32 + t2])),
                 ThreadTag.THREAD_X)
    body = For(bx, zero, (n + 31) // 32, ForKind.THREAD_BINDING, SeqStmt([first, second]),
               ThreadTag.BLOCK_X)
    return PrimFunc("guarded", [A], body, [n], {n: (0, 0)})


@needs_gxx
def test_thread_loop_shorter_than_the_launch_is_guarded() -> None:
    f = cuda.build(_guarded_kernel(), "cuda")
    src = f.get_source()
    assert "if ((long long)threadIdx.x < n - bx * 32)" in src
    assert "__trap();" in src
    a = np.zeros(20, "float32")
    f.emulate(a)  # one block: 20 < 32, so the second loop covers every element
    np.testing.assert_array_equal(a, np.full(20, 2.0, "float32"))
    with pytest.raises(EmulationError, match="__trap"):
        f.emulate(np.zeros(40, "float32"))  # block 0: extent 40 > 32 threads launched


def test_float_literals_round_trip() -> None:
    assert float_literal(0.1, DType.FLOAT32) == "0.1f"
    assert float_literal(3.0, DType.FLOAT32) == "3.0f"
    assert float_literal(1e20, DType.FLOAT32) == "1e+20f"
    assert float_literal(float("inf"), DType.FLOAT32) == "__int_as_float(0x7f800000)"
    assert float_literal(float("-inf"), DType.FLOAT64) == \
        "__longlong_as_double(0xfff0000000000000LL)"
    assert float_literal(0.1, DType.FLOAT64) == "0.1"
    assert float_literal(0.5, DType.FLOAT16) == "tdsl_f2h(0.5f)"
    for v in (0.1, 1 / 3, 6.02e23, -2.5e-30):
        assert np.float32(float_literal(v, DType.FLOAT32)[:-1]) == np.float32(v)


def test_index_arithmetic_uses_plain_division_when_provably_non_negative() -> None:
    from tests.backends.test_cuda_schedules import workload
    src = workload("tiled_matmul").module.get_source()
    assert "tdsl_floordiv" not in src and "/ 32" in src and "% 32" in src
    assert "tdsl_shared" in src and "TDSL_FLOORDIV" not in src  # only the helpers used


def test_unscoped_stage_attached_in_a_kernel_is_per_thread() -> None:
    """Attached under threadIdx with no scope set, a stage is local (as TVM infers),
    so each thread computes only its own element instead of the whole region."""
    n = td.var("n")
    A = td.placeholder((n, 64), name="A")
    B = td.compute((n, 64), lambda i, j: A[i, j] * 2.0, name="B")
    D = td.compute((n, 64), lambda i, j: B[i, j] + 1.0, name="D")
    s = td.create_schedule(D.op)
    i, j = s[D].op.axis
    s[D].bind(i, td.thread_axis("blockIdx.x"))
    s[D].bind(j, td.thread_axis("threadIdx.x"))
    s[B].compute_at(s[D], j)
    func = td.lower(s, [A, D])
    text = func.script()
    assert 'scope="local"' in text and "allocate((1, 1)" in text, text
    f = td.build(s, [A, D], target="cuda")
    a = np.random.default_rng(2).random((5, 64)).astype("float32")
    d = np.empty_like(a)
    f.emulate(a, d)
    np.testing.assert_allclose(d, a * 2 + 1, rtol=1e-6)


def test_barrier_planner_keeps_barriers_that_order_something() -> None:
    """barriers.redundant: the middle barrier of sync; X; sync; Y; sync goes only when X
    and Y touch no common shared/global buffer with a write."""
    from tdsl.backends.cuda import barriers
    from tdsl.expr import BufferLoad
    S = Buffer("S", (4,), "float32", scope="shared")
    T = Buffer("T", (4,), "float32", scope="shared")
    G = Buffer("G", (4,), "float32")
    zero = Const(0, "int64")
    put = lambda buf, v: BufferStore(buf, v, [zero])            # noqa: E731
    get = lambda buf: BufferLoad(buf, [zero])                    # noqa: E731
    one = Const(1.0, "float32")
    independent = [Barrier(), put(S, one), Barrier(), put(T, one), Barrier()]
    assert barriers.redundant(independent) == {2}
    raw = [Barrier(), put(S, one), Barrier(), put(G, get(S)), Barrier()]
    war = [Barrier(), put(G, get(S)), Barrier(), put(S, one), Barrier()]
    through_global = [Barrier(), put(G, one), Barrier(), put(S, get(G)), Barrier()]
    for items in (raw, war, through_global):
        assert barriers.redundant(items) == set()
    # merged segments: the third fetch conflicts with the first, so its barrier stays
    chain = [Barrier(), put(S, one), Barrier(), put(T, one), Barrier(), put(G, get(S)),
             Barrier()]
    assert barriers.redundant(chain) == {2}
