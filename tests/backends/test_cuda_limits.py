"""The GPU's resource limits, checked without a GPU: at build where the figures are
constants (and from the cubin NVRTC assembles), on the host at launch where symbolic."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import tdsl as td
import tdsl.interpreter
from tdsl.errors import BuildError, LoweringError, ShapeError
from tdsl.target import gpu_arch

from tdsl.backends.cuda import cubin, limits, nvrtc

from .cuda_workloads import register_hungry

thread = td.thread_axis
needs_nvrtc = pytest.mark.skipif(not nvrtc.is_available(), reason="NVRTC is not installed")
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


def _symbolic_z():
    n = td.var("n")
    A = td.placeholder((n,), name="A")
    B = td.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = td.create_schedule(B.op)
    s[B].bind(B.op.axis[0], thread("threadIdx.z"))
    return td.build(s, [A, B], target="cuda")


def test_symbolic_block_z_over_64_is_refused_at_launch() -> None:
    f = _symbolic_z()
    a = np.arange(100, dtype="float32")
    with pytest.raises(ShapeError, match=r"blockDim\.z = 100 .* limit of 64"):
        f.launch_config(a, np.empty_like(a))
    assert f.launch_config(a[:64], a[:64].copy())[0][2] == (1, 1, 64)


@needs_gxx
def test_symbolic_block_z_over_64_is_refused_by_the_emulator_too() -> None:
    f = _symbolic_z()
    a = np.random.default_rng(0).random(100).astype("float32")
    with pytest.raises(ShapeError, match=r"blockDim\.z"):
        f.emulate(a, np.empty_like(a))


def test_launch_bounds_come_from_the_schedule_or_the_device_limit() -> None:
    f = _symbolic_z()   # z is at most 64: the kernel is compiled for 64 threads
    assert "__launch_bounds__(64) " in f.get_source()
    assert f.kernels[0].max_threads == 64
    m = td.var("m")
    A = td.placeholder((m,), name="A")
    B = td.compute((m,), lambda i: A[i] * 2.0, name="B")
    s = td.create_schedule(B.op)
    s[B].bind(B.op.axis[0], thread("threadIdx.x"))
    g = td.build(s, [A, B], target="cuda")
    assert "__launch_bounds__(1024) " in g.get_source()


def test_constant_grid_dimension_over_the_limit_is_refused_at_build() -> None:
    A = td.placeholder((70000, 32), name="A")
    B = td.compute((70000, 32), lambda i, j: A[i, j] + 1.0, name="B")
    s = td.create_schedule(B.op)
    s[B].bind(B.op.axis[0], thread("blockIdx.y"))
    s[B].bind(B.op.axis[1], thread("threadIdx.x"))
    with pytest.raises(BuildError, match=r"blockIdx\.y .* 70000, over CUDA's limit of 65535"):
        td.build(s, [A, B], target="cuda")


def test_local_memory_over_512_kib_per_thread_is_refused_at_build() -> None:
    L = 256 * 1024
    A = td.placeholder((L,), name="A")
    B = td.compute((64, L), lambda i, j: A[j] * i.astype("float32"), name="B")
    k = td.reduce_axis((0, L), name="k")
    C = td.compute((64,), lambda i: td.sum(B[i, k], axis=k), name="C")
    s = td.create_schedule(C.op)
    bo, bi = s[C].split(C.op.axis[0], factor=32)
    s[C].bind(bo, thread("blockIdx.x"))
    s[C].bind(bi, thread("threadIdx.x"))
    s[B].compute_at(s[C], bi)
    with pytest.raises(BuildError, match=r"10485\d\d bytes of local memory per thread .*'B'.* 524288"):
        td.build(s, [A, C], target="cuda -arch=sm_90")


def test_shared_memory_over_48_kib_names_the_arch_opt_in_limit() -> None:
    A = td.placeholder((64, 256), name="A")
    B = td.compute((64, 256), lambda i, j: A[i, j] * 2.0, name="B")
    s = td.create_schedule(B.op)
    AS = s.cache_read(A, "shared", [B])
    bo, bi = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(bo, thread("blockIdx.x"))
    s[B].bind(bi, thread("threadIdx.x"))
    s[AS].compute_at(s[B], bo)   # 64 x 256 floats: 64 KiB
    s[AS].bind(s[AS].op.axis[0], thread("threadIdx.x"))
    with pytest.raises(BuildError, match=r"65536 bytes of shared memory .* 49152 .* up to 232448"):
        td.build(s, [A, B], target="cuda -arch=sm_90")


def test_limits_are_data_per_arch() -> None:
    assert gpu_arch("sm_90").max_shared_bytes_optin == 227 * 1024
    assert gpu_arch("sm_80").max_shared_bytes_optin == 163 * 1024
    assert gpu_arch("sm_86").max_shared_bytes_optin == 99 * 1024
    assert gpu_arch("sm_90a").max_block_dim == (1024, 1024, 64)
    assert limits.max_threads([None, 1, 1], gpu_arch("sm_80")) == 1024
    assert limits.max_threads([32, 8, None], gpu_arch("sm_80")) == 1024
    assert limits.max_threads([32, 4, 2], gpu_arch("sm_80")) == 256
    with pytest.raises(BuildError, match="registers per thread.*98304"):
        limits.check_registers("k", 96, 1024, gpu_arch("sm_90"))


# ---- registers: the e4 repro ---------------------------------------------------------------------
@needs_nvrtc
def test_registers_fit_the_register_file_for_the_most_threads() -> None:
    s, args = register_hungry()
    f = td.build(s, args, target="cuda -arch=sm_90")
    k = f.kernels[0]
    assert "__launch_bounds__(1024) " in f.get_source()
    assert k.registers is not None and k.registers * k.max_threads <= 65536
    res = cubin.kernel_resources(f.cubin())
    assert res[k.name].registers == k.registers


@needs_nvrtc
def test_registers_over_the_register_file_are_refused_at_build() -> None:
    s, args = register_hungry()
    f = td.build(s, args, target="cuda -arch=sm_90")
    # the same kernel without __launch_bounds__: ptxas is free to use more than 64 registers
    source = f.get_source().replace("__launch_bounds__(1024) ", "")
    regs = cubin.kernel_resources(nvrtc.compile_cuda(source, "sm_90", "cubin"))[f.kernels[0].name]
    assert regs.registers > 64
    with pytest.raises(BuildError, match=rf"'{f.kernels[0].name}'.*{regs.registers} registers per "
                                         rf"thread.*1024 threads.*65536"):
        cubin.check_assembled(f.kernels, source, f.target)


@needs_nvrtc
def test_a_source_nvrtc_rejects_fails_at_build() -> None:
    from tdsl.backends.cuda.errors import NVRTCError
    from tdsl.backends.cuda.kernels import split_kernels
    s, args = register_hungry()
    f = td.build(s, args, target="cuda -arch=sm_90")
    _, kernels = split_kernels(f.func, f.target)
    with pytest.raises(NVRTCError, match="undefined"):
        cubin.check_assembled(kernels, f.get_source().replace(
            "const long long i_outer =", "const long long i_elsewhere =", 1), f.target)


# ---- tensorize of a cache_write(shared) stage: the e7 repro ------------------------------------------
def _wmma_shared_acc(N: int):
    from tdsl.backends import cuda
    K = 64
    A = td.placeholder((N, K), "float16", name="A")
    B = td.placeholder((K, N), "float16", name="B")
    k = td.reduce_axis((0, K), name="k")
    C = td.compute((N, N), lambda i, j: td.sum(A[i, k].astype("float32") * B[k, j].astype("float32"),
                                                axis=k), name="C")
    s = td.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    CS = s.cache_write(C, "shared")
    i, j = s[C].op.axis
    bi, ii = s[C].split(i, factor=32)
    bj, jj = s[C].split(j, factor=32)
    s[C].reorder(bi, bj, ii, jj)
    s[C].bind(bi, thread("blockIdx.y"))
    s[C].bind(bj, thread("blockIdx.x"))
    f_ = s[C].fuse(ii, jj)
    r, tx = s[C].split(f_, factor=32)
    r, ty = s[C].split(r, factor=2)
    _, tz = s[C].split(r, factor=2)
    s[C].bind(tx, thread("threadIdx.x"))
    s[C].bind(ty, thread("threadIdx.y"))
    s[C].bind(tz, thread("threadIdx.z"))
    s[CS].compute_at(s[C], bj)
    ci, cj = s[CS].op.axis
    cio, cii = s[CS].split(ci, factor=16)
    cjo, cji = s[CS].split(cj, factor=16)
    ko, ki = s[CS].split(s[CS].op.reduce_axis[0], factor=16)
    s[CS].reorder(cio, cjo, ko, cii, cji, ki)
    s[CS].bind(cio, thread("threadIdx.z"))
    s[CS].bind(cjo, thread("threadIdx.y"))
    for S in (AS, BS):
        s[S].compute_at(s[CS], ko)
        fused = s[S].fuse(*s[S].op.axis)
        rest, tx = s[S].split(fused, factor=32)
        rest, ty = s[S].split(rest, factor=2)
        _, tz = s[S].split(rest, factor=2)
        s[S].bind(tx, thread("threadIdx.x"))
        s[S].bind(ty, thread("threadIdx.y"))
        s[S].bind(tz, thread("threadIdx.z"))
    s[CS].tensorize(cii, cuda.wmma_intrin())
    return s, [A, B, C]


def test_tensorized_cache_stage_has_no_guard_over_replaced_loops() -> None:
    s, args = _wmma_shared_acc(64)
    f = td.build(s, args, target="cuda -arch=sm_90")   # assembles the source where NVRTC is
    src = f.get_source()
    assert "i_c_inner" not in src.split("tensorized")[1].split("wmma_a")[0]
    if nvrtc.is_available():
        assert f.kernels[0].registers is not None


@needs_gxx
def test_tensorized_cache_stage_emulates_correctly() -> None:
    N = 64
    s, args = _wmma_shared_acc(N)
    f = td.build(s, args, target="cuda -arch=sm_90")
    g = np.random.default_rng(0)
    a = (g.random((N, 64)) - .5).astype("float16")
    b = (g.random((64, N)) - .5).astype("float16")
    c = np.full((N, N), np.nan, "float32")
    # every lane of a warp zero-fills the warp's tile (the same value): not this test's subject
    f.emulate(a, b, c, check_races=False)
    np.testing.assert_allclose(c, a.astype("float32") @ b.astype("float32"), rtol=1e-3, atol=1e-3)


def test_tensorized_region_across_the_domain_edge_is_refused() -> None:
    s, args = _wmma_shared_acc(48)   # the 32x32 block tile crosses the edge at 48
    with pytest.raises(LoweringError, match=r"tensorize: stage 'C\.shared'.*cross the edge"):
        td.lower(s, args)


def test_lowering_refuses_a_variable_outside_its_scope() -> None:
    from tdsl.lowering.passes import check_scope
    from tdsl.stmt import IfThenElse, SeqStmt
    A = td.placeholder((16,), name="A")
    B = td.compute((16,), lambda i: A[i] + 1.0, name="B")
    s = td.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=4)
    f = td.lower(s, [A, B])
    inner = f.body.body
    body = SeqStmt([inner, IfThenElse(inner.var < 3, inner.body)])
    with pytest.raises(LoweringError, match=f"'{inner.var.name}' is used where no enclosing loop"):
        check_scope(body, set(f.size_vars) | {f.body.var}, "main")
    check_scope(f.body, set(f.size_vars), "main")


def test_cuda_codegen_refuses_a_loop_variable_after_its_loop() -> None:
    from tdsl.errors import InternalError
    from tdsl.stmt import For, IfThenElse, PrimFunc, SeqStmt
    A = td.placeholder((16,), name="A")
    B = td.compute((16,), lambda i: A[i] + 1.0, name="B")
    s = td.create_schedule(B.op)
    o, _ = s[B].split(B.op.axis[0], factor=4)
    s[B].bind(o, thread("blockIdx.x"))
    f = td.lower(s, [A, B])
    loop, inner = f.body, f.body.body
    body = SeqStmt([inner, IfThenElse(inner.var < 3, inner.body)])   # i.inner after its loop
    g = PrimFunc(f.name, f.params, For(loop.var, loop.min, loop.extent, loop.kind, body,
                                      loop.thread_tag), f.size_vars, f.bindings, f.attrs)
    with pytest.raises(InternalError, match="'i.inner' is used outside the scope"):
        td.build(g, target="cuda")
    a = np.random.default_rng(1).random(16).astype("float32")
    with pytest.raises(LoweringError, match="outside the scope"):
        tdsl.interpreter.run(PrimFunc(f.name, f.params, SeqStmt([inner, IfThenElse(
            inner.var < 3, inner.body)]), f.size_vars, f.bindings, f.attrs), a, np.empty_like(a))
