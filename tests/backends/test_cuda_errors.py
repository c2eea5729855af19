"""Illegal GPU schedules are refused at build time with errors that say what and where;
running without a GPU says so clearly (and nothing crashes at import or build)."""
from __future__ import annotations

import numpy as np
import pytest

import tdsl as td
from tdsl.backends import cuda
from tdsl.backends.cuda import NoCUDADeviceError, driver
from tdsl.errors import BuildError, LoweringError, ScheduleError, TDSLError
from tdsl.expr import Const, SizeVar, Var
from tdsl.stmt import (Allocate, Barrier, Buffer, BufferStore, For, ForKind, IfThenElse,
                       PrimFunc, ThreadTag)


def two_stage(n=None):
    n = n if n is not None else td.var("n")
    A = td.placeholder((n, 64), name="A")
    B = td.compute((n, 64), lambda i, j: A[i, j] * 2.0, name="B")
    D = td.compute((n, 64), lambda i, j: B[i, j] + 1.0, name="D")
    return A, B, D


def bind2(s, st, outer, inner):
    s[st].bind(outer, td.thread_axis("blockIdx.x"))
    s[st].bind(inner, td.thread_axis("threadIdx.x"))


def test_unbound_stage_is_named() -> None:
    A, B, D = two_stage()
    s = td.create_schedule(D.op)
    bind2(s, D, *s[D].op.axis)
    with pytest.raises(BuildError, match=r"stage 'B' is left unbound: its loop 'i'"):
        td.build(s, [A, D], target="cuda")


def test_nothing_bound() -> None:
    A, B, D = two_stage()
    s = td.create_schedule(D.op)
    with pytest.raises(BuildError, match="no loop bound to blockIdx/threadIdx"):
        td.build(s, [A, D], target="cuda")


def test_too_many_threads_per_block() -> None:
    A, B, D = two_stage()
    s = td.create_schedule(D.op)
    s[B].compute_inline()
    i, j = s[D].op.axis
    io, ii = s[D].split(i, factor=32)
    s[D].bind(io, td.thread_axis("blockIdx.x"))
    s[D].bind(ii, td.thread_axis("threadIdx.y"))
    s[D].bind(j, td.thread_axis("threadIdx.x"))
    with pytest.raises(BuildError, match=r"64x32x1 = 2048 threads per block, over the limit of 1024"):
        td.build(s, [A, D], target="cuda")


def test_thread_z_limit() -> None:
    A = td.placeholder((4, 128), name="A")
    C = td.compute((4, 128), lambda i, j: A[i, j] + 1.0, name="C")
    s = td.create_schedule(C.op)
    i, j = s[C].op.axis
    s[C].bind(i, td.thread_axis("blockIdx.x"))
    s[C].bind(j, td.thread_axis("threadIdx.z"))
    with pytest.raises(BuildError, match=r"threadIdx.z is bound to a loop of extent 128, over "
                                         r"CUDA's limit of 64"):
        td.build(s, [A, C], target="cuda")


def test_shared_memory_over_the_limit() -> None:
    M = td.placeholder((256, 256), name="M")
    k = td.reduce_axis((0, 256), name="k")
    R = td.compute((256,), lambda i: td.sum(M[i, k], axis=k), name="R")
    s = td.create_schedule(R.op)
    MS = s.cache_read(M, "shared", [R])
    io, ii = s[R].split(R.op.axis[0], factor=64)
    bind2(s, R, io, ii)
    s[MS].compute_at(s[R], io)
    _, fi = s[MS].split(s[MS].fuse(*s[MS].op.axis), factor=64)
    s[MS].bind(fi, td.thread_axis("threadIdx.x"))
    with pytest.raises(BuildError, match=r"65536 bytes of shared memory \('M.shared' 65536 B\), "
                                         r"over the 49152 bytes"):
        td.build(s, [M, R], target="cuda")


def test_thread_axis_extent_mismatch() -> None:
    A, B, D = two_stage()
    s = td.create_schedule(D.op)
    i, j = s[D].op.axis
    jo, ji = s[D].split(j, factor=32)
    bind2(s, D, i, ji)
    s[B].compute_at(s[D], i)
    s[B].set_scope("shared")
    s[B].bind(s[B].op.axis[1], td.thread_axis("threadIdx.x"))
    with pytest.raises(LoweringError, match="threadIdx.x is bound to loop .* extent 64 and to "
                                            "loop .* extent 32"):
        td.build(s, [A, D], target="cuda")


def test_reduction_across_blocks_is_refused() -> None:
    """A reduction loop bound to threadIdx is a cross-thread reduction (tests in
    test_cuda_allreduce.py); bound to blockIdx it would need a second launch: refused."""
    n = td.var("n")
    A = td.placeholder((n, 64), name="A")
    k = td.reduce_axis((0, 64), name="k")
    C = td.compute((n,), lambda i: td.sum(A[i, k], axis=k), name="C")
    s = td.create_schedule(C.op)
    s[C].bind(s[C].op.axis[0], td.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match="reduction loop 'k' to blockIdx.x: blocks cannot "
                                            "combine partial results.*rfactor"):
        s[C].bind(k, td.thread_axis("blockIdx.x"))


def _kernel(body_fn):
    """A hand-written PrimFunc: one block loop and one threadIdx.x loop of 32 around body."""
    n = SizeVar("n")
    A = Buffer("A", (n,), "float32")
    bx, tx = Var("bx"), Var("tx")
    body = body_fn(A, bx, tx, n)
    loop = For(bx, Const(0, "int64"), (n + 31) // 32, ForKind.THREAD_BINDING,
               For(tx, Const(0, "int64"), Const(32, "int64"), ForKind.THREAD_BINDING, body,
                   ThreadTag.THREAD_X), ThreadTag.BLOCK_X)
    return PrimFunc("hand", [A], loop, [n], {n: (0, 0)})


def test_barrier_under_thread_dependent_condition() -> None:
    f = _kernel(lambda A, bx, tx, n: IfThenElse(tx < 16, Barrier()))
    with pytest.raises(BuildError, match="sync_threads\\(\\) sits under a condition that differs "
                                         "between threads"):
        cuda.build(f, "cuda")


def test_shared_buffer_of_symbolic_size() -> None:
    def body(A, bx, tx, n):
        S = Buffer("S", (n,), "float32", scope="shared")
        return Allocate(S, BufferStore(S, Const(0.0, "float32"), [tx]))
    with pytest.raises(BuildError, match="shared buffer 'S' has a symbolic shape"):
        cuda.build(_kernel(body), "cuda")


def test_shared_buffer_outside_kernels() -> None:
    n = SizeVar("n")
    A = Buffer("A", (n,), "float32")
    S = Buffer("S", (4,), "float32", scope="shared")
    f = PrimFunc("hand", [A], Allocate(S, BufferStore(S, Const(0.0, "float32"),
                                                      [Const(0, "int64")])), [n], {n: (0, 0)})
    with pytest.raises(BuildError, match="allocated in shared memory outside any kernel"):
        cuda.build(f, "cuda")


def test_wrong_target_and_format() -> None:
    A, B, D = two_stage()
    s = td.create_schedule(D.op)
    for st in (B, D):
        bind2(s, st, *s[st].op.axis)
    f = td.lower(s, [A, D])
    with pytest.raises(BuildError, match="not a CUDA target"):
        cuda.build(f, "llvm")
    m = cuda.build(f, "cuda -arch=sm_90")
    assert "sm_90" in m.get_source().splitlines()[0]
    with pytest.raises(BuildError, match="unknown format"):
        m.get_source("sass")


def test_wmma_needs_whole_warps() -> None:
    """Tensorized loops under threadIdx.x would make every lane compute its own tile."""
    N = 32
    A = td.placeholder((N, N), "float16", name="A")
    B = td.placeholder((N, N), "float16", name="B")
    k = td.reduce_axis((0, N), name="k")
    C = td.compute((N, N), lambda i, j: td.sum(A[i, k].astype("float32") *
                                                 B[k, j].astype("float32"), axis=k), name="C")
    s = td.create_schedule(C.op)
    i, j = s[C].op.axis
    io, ii = s[C].split(i, factor=16)
    jo, ji = s[C].split(j, factor=16)
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=16)
    s[C].reorder(io, jo, ko, ii, ji, ki)
    s[C].bind(io, td.thread_axis("blockIdx.x"))
    s[C].bind(jo, td.thread_axis("threadIdx.x"))
    s[C].tensorize(ii, cuda.wmma_intrin())
    with pytest.raises(BuildError, match="wmma: the tensorized loops sit under a loop bound to "
                                         "threadIdx.x"):
        td.build(s, [A, B, C], target="cuda")
    s = td.create_schedule(C.op)
    i, j = s[C].op.axis
    io, ii = s[C].split(i, factor=16)
    jo, ji = s[C].split(j, factor=16)
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=16)
    s[C].reorder(io, jo, ko, ii, ji, ki)
    s[C].bind(io, td.thread_axis("blockIdx.x"))
    s[C].bind(jo, td.thread_axis("threadIdx.y"))
    s[C].tensorize(ii, cuda.wmma_intrin())
    with pytest.raises(BuildError, match="needs exactly 32"):
        td.build(s, [A, B, C], target="cuda")


def _built():
    n = td.var("n")
    A = td.placeholder((n,), name="A")
    C = td.compute((n,), lambda i: A[i] + 1.0, name="C")
    s = td.create_schedule(C.op)
    bind2(s, C, *s[C].split(C.op.axis[0], factor=64))
    return td.build(s, [A, C], target="cuda")


@pytest.mark.skipif(driver.device_status()[0], reason="a CUDA device is present here")
def test_running_without_a_device_is_a_clear_error() -> None:
    f = _built()  # building never needs a GPU
    a = np.ones(10, "float32")
    with pytest.raises(NoCUDADeviceError, match="no CUDA device found") as info:
        f(a, np.empty_like(a))
    assert isinstance(info.value, TDSLError)
    with pytest.raises(NoCUDADeviceError):
        f.time_evaluator(number=1)(a, np.empty_like(a))
    assert not cuda.has_device()


def test_import_and_build_never_touch_the_driver() -> None:
    import subprocess
    import sys
    code = ("import sys\n"
            "def libcuda(): return sys.platform == 'linux' and 'libcuda' in open('/proc/self/maps').read()\n"
            "try:\n"
            "    from cuda.bindings import nvrtc\n"
            "except ImportError:\n"
            "    pass\n"
            "by_bindings = libcuda()\n"
            "import tdsl as td, tdsl.backends.cuda as c\n"
            "n = td.var('n'); A = td.placeholder((n,), name='A')\n"
            "C = td.compute((n,), lambda i: A[i] * 2.0, name='C')\n"
            "s = td.create_schedule(C.op); o, i = s[C].split(C.op.axis[0], factor=32)\n"
            "s[C].bind(o, td.thread_axis('blockIdx.x')); s[C].bind(i, td.thread_axis('threadIdx.x'))\n"
            "f = td.build(s, [A, C], target='cuda'); f.get_source()\n"
            "print(any(m.endswith('backends.cuda.driver') for m in sys.modules),\n"
            "      libcuda() and not by_bindings)\n")
    # building runs NVRTC where it is installed, but never tdsl's driver module, nor loads the
    # driver library libcuda (cuda-bindings 13's NVRTC module maps libcuda where one is
    # installed, on a GPU machine: that is the bindings' import, not tdsl's doing)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"], out.stdout
