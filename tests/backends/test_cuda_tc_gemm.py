"""The tensor-core GEMM microkernel (backends/cuda/tc_gemm.py, tc_kernel.py): the default
of fp16/bf16 matmuls with fp32 accumulation on sm_80+, run under the CPU emulator (whose
ldmatrix / mma.sync / cp.async emulation is in emu_tc.h) against NumPy, and assembled by
NVRTC for sm_80 and sm_90."""
from __future__ import annotations

import shutil
from types import SimpleNamespace

import numpy as np
import pytest

import tdsl as td
from tdsl import ops
from tdsl.backends.cuda import EmulationError, SharedMemoryRaceError, nvrtc
from tdsl.errors import BuildError
from tests.workloads import half_dtype

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")
needs_nvrtc = pytest.mark.skipif(not nvrtc.is_available(),
                                 reason="NVRTC (cuda-python) is not installed")

def _rand(g, shape, dt):
    return (g.random(shape) - .5).astype(half_dtype(dt))


def _f32(x):
    return x.astype("float32")


def _build(args, target="cuda"):
    s = ops.schedule(args[-1], target)
    return td.build(s, list(args), target=target)


def _matmul(M, N, K, dt="float16"):
    A = td.placeholder((M, K), dt, name="A")
    B = td.placeholder((K, N), dt, name="B")
    return [A, B, ops.matmul(A, B, out_dtype="float32")]


@needs_gxx
@pytest.mark.parametrize("M,N,K,dt", [
    (128, 128, 128, "float16"),     # one whole tile, the 16-byte cp.async path
    (130, 72, 100, "float16"),      # tails everywhere; 200-byte rows: the element-wise fills
    (130, 72, 104, "bfloat16"),     # tails, aligned rows: cp.async + zero fill + partial chunks
])
def test_emulated_matmul_matches_numpy(M, N, K, dt):
    f = _build(_matmul(M, N, K, dt))
    assert "tdsl_tc_gemm<" in f.get_source()
    g = np.random.default_rng(M + K)
    a, b = _rand(g, (M, K), dt), _rand(g, (K, N), dt)
    c = np.full((M, N), np.nan, "float32")
    f.emulate(a, b, c)
    np.testing.assert_allclose(c, _f32(a) @ _f32(b), rtol=1e-5, atol=1e-5)


@needs_gxx
def test_symbolic_sizes_bound_to_several_values():
    M, N, K = td.var("M"), td.var("N"), td.var("K")
    f = _build(_matmul(M, N, K))
    g = np.random.default_rng(7)
    for m, n, k in [(1, 8, 8), (130, 72, 100), (64, 136, 48)]:
        a, b = _rand(g, (m, k), "float16"), _rand(g, (k, n), "float16")
        c = np.full((m, n), np.nan, "float32")
        f.emulate(a, b, c)
        np.testing.assert_allclose(c, _f32(a) @ _f32(b), rtol=1e-5, atol=1e-5)


@needs_gxx
def test_dense_bias_relu_epilogue_with_symbolic_rows():
    """``dense`` reads its weight as W[j, k] (the column layout: ldmatrix without .trans);
    bias and ReLU run on the accumulator registers."""
    M = td.var("M")
    X = td.placeholder((M, 72), "float16", name="X")
    W = td.placeholder((136, 72), "float16", name="W")
    bias = td.placeholder((136,), "float32", name="bias")
    f = _build([X, W, bias, ops.dense(X, W, bias, activation="relu", out_dtype="float32")])
    src = f.get_source()
    assert "tdsl_tc_gemm<false, false," in src and "fmaxf(tc_v" in src
    g = np.random.default_rng(3)
    w, b = _rand(g, (136, 72), "float16"), g.standard_normal(136).astype("float32")
    for m in (3, 130, 256):
        x = _rand(g, (m, 72), "float16")
        y = np.full((m, 136), np.nan, "float32")
        f.emulate(x, w, b, y)
        np.testing.assert_allclose(y, np.maximum(_f32(x) @ _f32(w).T + b, 0), rtol=1e-5, atol=1e-5)


@needs_gxx
def test_bf16_batch_matmul_and_fp16_cast_epilogue():
    P = td.placeholder((3, 40, 48), "bfloat16", name="P")
    Q = td.placeholder((3, 48, 24), "bfloat16", name="Q")
    f = _build([P, Q, ops.batch_matmul(P, Q, out_dtype="float32")])
    assert "tdsl_tc_gemm<true, true," in f.get_source()
    g = np.random.default_rng(5)
    p, q = _rand(g, (3, 40, 48), "bfloat16"), _rand(g, (3, 48, 24), "bfloat16")
    r = np.full((3, 40, 24), np.nan, "float32")
    f.emulate(p, q, r)
    np.testing.assert_allclose(r, _f32(p) @ _f32(q), rtol=1e-5, atol=1e-5)

    A, B, C = _matmul(64, 40, 32)
    H = ops.cast(C, "float16")
    f = _build([A, B, H])
    assert "tdsl_f2h(tc_v)" in f.get_source()
    a, b = _rand(g, (64, 32), "float16"), _rand(g, (32, 40), "float16")
    h = np.full((64, 40), np.nan, "float16")
    f.emulate(a, b, h)
    np.testing.assert_array_equal(h, (_f32(a) @ _f32(b)).astype("float16"))


@needs_gxx
@pytest.mark.parametrize("drop", ["__syncthreads();", "tdsl_tc_wait<ST - 2>();"])
def test_emulator_checks_the_pipeline(drop):
    """The emulation tracks the pipeline: without the per-tile barrier a warp reads a stage
    another warp's copies are filling; without the wait a copy is read before it lands.
    The per-tile one is the last in the source (the mainloop has a first one before its
    loop, for the first tile)."""
    f = _build(_matmul(64, 64, 256))
    src = f.get_source()
    assert src.count(drop) == 2
    g = np.random.default_rng(0)
    a, b = _rand(g, (64, 256), "float16"), _rand(g, (256, 64), "float16")
    c = np.zeros((64, 64), "float32")
    f.emulate(a, b, c)     # the kernel as generated is clean
    head, tail = src.rsplit(drop, 1)
    # a race; or, without the wait, a read of the thread's own copy still in flight
    err = SharedMemoryRaceError if "sync" in drop else EmulationError
    with pytest.raises(err, match="tc_smem_arr.*(ldmatrix|cp.async)"):
        f.emulate(a, b, c, source=head + tail)


def test_other_archs_and_dtypes_keep_their_schedules():
    """sm_75 keeps the WMMA tiles; fp32 matmuls keep the SIMT tiles on sm_80."""
    for target in ("cuda -arch=sm_75", "cuda -arch=sm_70"):
        src = _build(_matmul(64, 64, 64), target).get_source()
        assert "tdsl_wmma_mma" in src and "tdsl_tc_gemm" not in src
    A = td.placeholder((64, 64), name="A")
    B = td.placeholder((64, 64), name="B")
    assert "tdsl_tc_gemm" not in _build([A, B, ops.matmul(A, B)]).get_source()


def test_the_pragma_on_another_body_is_refused():
    A = td.placeholder((256, 128), "float16", name="A")
    B = td.compute((256, 128), lambda i, j: A[i, j] * 2, name="B")
    s = td.create_schedule(B.op)
    i, j = B.op.axis
    io, ii = s[B].split(i, factor=128)
    s[B].reorder(io, j, ii)
    s[B].bind(io, td.thread_axis("blockIdx.x"))
    s[B].bind(j, td.thread_axis("threadIdx.x"))
    s[B].pragma(ii, "tdsl_tc_gemm", 1)
    with pytest.raises(BuildError, match="tdsl_tc_gemm.*k loop"):
        td.build(s, [A, B], target="cuda")


def test_launcher_opts_in_above_48_kib():
    from tdsl.backends.cuda.driver import Driver
    calls = []
    attr = SimpleNamespace(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES=8)
    cu = SimpleNamespace(CUfunction_attribute=attr,
                         cuFuncSetAttribute=lambda *a: calls.append(a) or (0,))
    drv = SimpleNamespace(cu=cu, check=lambda result, what: result)
    Driver._opt_in_shared(drv, "fn", SimpleNamespace(name="k", dynamic_shared_bytes=65536))
    Driver._opt_in_shared(drv, "fn", SimpleNamespace(name="k", dynamic_shared_bytes=0))
    assert calls == [("fn", 8, 65536)]
    f = _build(_matmul(256, 256, 256))
    (k,) = f.kernels
    assert k.dynamic_shared_bytes == 64 * 1024


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_assembles_to_ldmatrix_mma_cp_async_without_spills(arch, dt):
    from tdsl.backends.cuda.cubin import ptxas_report
    M = td.var("M")
    X = td.placeholder((M, 4096), dt, name="X")
    W = td.placeholder((4096, 4096), dt, name="W")
    bias = td.placeholder((4096,), "float32", name="bias")
    for args in (_matmul(4096, 4096, 4096, dt),
                 [X, W, bias, ops.dense(X, W, bias, activation="relu", out_dtype="float32")]):
        f = _build(args, f"cuda -arch={arch}")
        ptx = f.ptx(arch)
        kind = "bf16.bf16" if dt == "bfloat16" else "f16.f16"
        assert f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.f32" in ptx
        assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
        assert "cp.async.cg.shared.global" in ptx and "cp.async.wait_group 2" in ptx
        (rep,) = ptxas_report(f.get_source(), arch).values()
        assert rep.spill_stores == 0 and rep.spill_loads == 0 and rep.frame_bytes == 0, rep
        assert rep.registers <= 255, rep      # two blocks of 128 threads per SM


@needs_nvrtc
def test_fragments_are_loaded_one_k_step_ahead():
    """The mainloop double-buffers the fragments: the first k step's are loaded before the
    loop, then each step loads the next one's (one more set of ldmatrix than the two k
    steps of a tile: 3 x (4 A + 4 B) for the 64 x 64 warp tile, where loading each step's
    own would be 2 x 8).  Both B layouts."""
    X = td.placeholder((256, 4096), "float16", name="X")
    W = td.placeholder((4096, 4096), "float16", name="W")
    for args in (_matmul(256, 4096, 4096), [X, W, ops.dense(X, W, out_dtype="float32")]):
        ptx = _build(args, "cuda -arch=sm_80").ptx("sm_80")
        assert ptx.count("ldmatrix.sync.aligned") == 24
        assert ptx.count("mma.sync.aligned") == 64


def _hand_scheduled(row_index, pragma=1):
    """A hand-written fp16 GEMM ``C[i, j] = sum_k A[row_index(i), k] * B[k, j]`` given the
    loop nest the default schedule makes (cuda_tc.py) by hand, pragma (value) included."""
    A = td.placeholder((256, 64), "float16", name="A")
    B = td.placeholder((64, 128), "float16", name="B")
    k = td.reduce_axis((0, 64), name="k")
    C = td.compute((128, 128), lambda i, j: td.sum(
        A[row_index(i), k].astype("float32") * B[k, j].astype("float32"), axis=k), name="C")
    s = td.create_schedule(C.op)
    acc = s[s.cache_write(C, "local")]
    i, j = C.op.axis
    bi, ii = s[C].split(i, factor=128)
    bj, jj = s[C].split(j, factor=128)
    s[C].reorder(bi, bj, jj, ii)
    s[C].bind(bi, td.thread_axis("blockIdx.y"))
    s[C].bind(bj, td.thread_axis("blockIdx.x"))
    s[C].bind(jj, td.thread_axis("threadIdx.x"))
    acc.compute_at(s[C], ii)
    s[C].pragma(ii, "tdsl_tc_gemm", pragma)
    return s, [A, B, C]


@needs_gxx
def test_hand_scheduled_gemm_with_an_offset_row():
    s, args = _hand_scheduled(lambda i: i + 100)
    f = td.build(s, args, target="cuda")
    g = np.random.default_rng(11)
    a, b = _rand(g, (256, 64), "float16"), _rand(g, (64, 128), "float16")
    c = np.full((128, 128), np.nan, "float32")
    f.emulate(a, b, c)
    np.testing.assert_allclose(c, _f32(a[100:228]) @ _f32(b), rtol=1e-5, atol=1e-5)


def test_a_gather_along_the_rows_is_refused():
    s, args = _hand_scheduled(lambda i: i // 2)
    with pytest.raises(BuildError, match="tdsl_tc_gemm.*not affine"):
        td.build(s, args, target="cuda")


def test_the_removed_basic_mainloop_is_refused_with_the_reason():
    """A pragma, tuning record or config naming the removed first mainloop ("/basic") is a
    BuildError / ScheduleError saying it was removed and what to write instead."""
    from tdsl.errors import ScheduleError
    from tdsl.ops.schedules import cuda_gemm, cuda_tc
    from tdsl.ops.schedules.tc_config import TcConfig
    s, args = _hand_scheduled(lambda i: i, pragma="128x128x32/w64x64/s4/basic")
    with pytest.raises(BuildError, match=r"s4/basic.*'basic'.*removed.*drop mainloop"):
        td.build(s, args, target="cuda")
    A, B, C = _matmul(64, 64, 64)
    sch = td.create_schedule(C.op)
    st = sch[C.op]
    with pytest.raises(ScheduleError, match=r"tensor-core tile .*/s4/basic.*removed"):
        cuda_tc.schedule_tc(sch, st, None, cuda_gemm._pack_of(sch, st), TcConfig(mainloop="basic"))


needs_gpu = pytest.mark.skipif(not __import__("tdsl.backends.cuda", fromlist=["x"]).has_device(),
                               reason="needs a CUDA GPU (sm_80+)")


@needs_gpu
@pytest.mark.parametrize("M,N,K,dt", [(130, 72, 100, "float16"), (1000, 520, 264, "bfloat16"),
                                      (512, 512, 512, "float16")])
def test_gpu_matches_numpy(M, N, K, dt):
    """On the device: 64 KiB of dynamic shared memory (the launcher's opt-in), both the
    element-wise and the cp.async fills."""
    f = _build(_matmul(M, N, K, dt))
    g = np.random.default_rng(M)
    a, b = _rand(g, (M, K), dt), _rand(g, (K, N), dt)
    c = np.full((M, N), np.nan, "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, _f32(a) @ _f32(b), rtol=1e-4, atol=1e-4)


@needs_gxx
def test_transposed_epilogue():
    """An epilogue that permutes the product's axes (``relu(transpose(A @ B))``): the
    microkernel's rows and columns are the product's, the stores go where the epilogue says."""
    A, B, C = _matmul(72, 40, 24)
    R = ops.relu(ops.transpose(C))
    f = _build([A, B, R])
    assert "tdsl_tc_gemm<" in f.get_source()
    g = np.random.default_rng(2)
    a, b = _rand(g, (72, 24), "float16"), _rand(g, (24, 40), "float16")
    r = np.full((40, 72), np.nan, "float32")
    f.emulate(a, b, r)
    np.testing.assert_allclose(r, np.maximum(_f32(a) @ _f32(b), 0).T, rtol=1e-5, atol=1e-5)


_LAYOUT_BODY = r'''
  auto D = T_matmul;
  // warp 0: D0 = A (16x16, row-major) . B (16x8, B[k * 8 + n]) from fragments built by the
  // PTX ISA's m16n8k16 register layouts; D1 = the same from ldmatrix.x4 (A) and
  // ldmatrix.x4.trans (B) of the tiles in shared memory
  __shared__ tdsl_shared<tdsl_half, 16 * 16 + 16 * 8> sm;
  auto sp = sm.ptr(0);
  if (threadIdx.x >= 32) return;
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  auto pack = [&](tdsl_half lo, tdsl_half hi) {
    unsigned short l, h;
    memcpy(&l, &lo, 2); memcpy(&h, &hi, 2);
    return (unsigned)l | ((unsigned)h << 16); };
  unsigned a[4] = {pack(A[g * 16 + 2 * t], A[g * 16 + 2 * t + 1]),
                   pack(A[(g + 8) * 16 + 2 * t], A[(g + 8) * 16 + 2 * t + 1]),
                   pack(A[g * 16 + 2 * t + 8], A[g * 16 + 2 * t + 9]),
                   pack(A[(g + 8) * 16 + 2 * t + 8], A[(g + 8) * 16 + 2 * t + 9])};
  unsigned b0 = pack(B[(2 * t) * 8 + g], B[(2 * t + 1) * 8 + g]);
  unsigned b1 = pack(B[(2 * t + 8) * 8 + g], B[(2 * t + 9) * 8 + g]);
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  tdsl_tc_mma<false>(d, a, b0, b1);
  D[g * 8 + 2 * t] = d[0]; D[g * 8 + 2 * t + 1] = d[1];
  D[(g + 8) * 8 + 2 * t] = d[2]; D[(g + 8) * 8 + 2 * t + 1] = d[3];
  for (int e = lane; e < 256; e += 32) tdsl_tc_st(sp, e, (tdsl_half)A[e]);
  for (int e = lane; e < 128; e += 32) tdsl_tc_st(sp, 256 + e, (tdsl_half)B[e]);
  __syncwarp();
  unsigned la[4], lb[4];
  const auto sb = tdsl_tc_sbase(sp);                              // as the microkernel does
  tdsl_tc_ldsm_x4(la, sb, (lane % 16) * 16 + (lane / 16) * 8);   // rows of A, two k halves
  tdsl_tc_ldsm_x4_t(lb, sb, 256 + (lane % 16) * 8);               // k rows of B (x2, twice)
  float e[4] = {0.f, 0.f, 0.f, 0.f};
  tdsl_tc_mma<false>(e, la, lb[0], lb[1]);
  D[128 + g * 8 + 2 * t] = e[0]; D[128 + g * 8 + 2 * t + 1] = e[1];
  D[128 + (g + 8) * 8 + 2 * t] = e[2]; D[128 + (g + 8) * 8 + 2 * t + 1] = e[3];
}
'''


@needs_gxx
def test_emulated_fragment_layouts_follow_the_ptx_isa():
    """The emulated mma.sync and ldmatrix against fragments built from the documented
    m16n8k16 layouts (a matmul through both could agree with NumPy with two compensating
    layout errors; this pins each one)."""
    f = _build(_matmul(128, 128, 128))
    src = f.get_source()
    head = src.index('extern "C" __global__')
    src = src[:src.index("\n", head) + 1] + _LAYOUT_BODY
    g = np.random.default_rng(4)
    a = np.zeros((128, 128), "float16")
    b = np.zeros((128, 128), "float16")
    a.flat[:256] = _rand(g, 256, "float16")
    b.flat[:128] = _rand(g, 128, "float16")
    d = np.full((128, 128), np.nan, "float32")
    f.emulate(a, b, d, source=src)
    want = _f32(a.flat[:256].reshape(16, 16)) @ _f32(b.flat[:128].reshape(16, 8))
    np.testing.assert_allclose(d.flat[:128].reshape(16, 8), want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(d.flat[128:256].reshape(16, 8), want, rtol=1e-6, atol=1e-6)


# ---- the candidate shapes of the next GPU run (benchmarks/cuda_tc_sweep.py --variants) --------
def _sweep():
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
    import cuda_tc_sweep
    return cuda_tc_sweep


def _variants():
    """The sweep's non-default variants (checked shapes of ``CONFIGS``)."""
    from tdsl.ops.schedules.tc_config import CONFIGS, DEFAULT
    variants = _sweep().VARIANTS
    assert variants[0] == DEFAULT and all(c in CONFIGS and c.error() is None for c in variants)
    return variants[1:]


@needs_gxx
@pytest.mark.parametrize("M,N,K", [(256, 256, 64), (130, 264, 72)])
def test_sweep_variants_match_numpy_under_the_emulator(M, N, K, monkeypatch):
    """Each variant at a size its tiles divide and at one they do not (row, column and k
    tails: 128 x 256 blocks leave a second column block 8 columns wide); a matmul (B row
    layout), and at the odd size also a bf16 dense with bias on an 8-warp shape (B column
    layout, its copy loop over 256 threads)."""
    from tdsl.ops.schedules import cuda_tc
    g = np.random.default_rng(M)
    for cfg in _variants():
        monkeypatch.setattr(cuda_tc.schedule_tc, "__defaults__", (cfg,))
        f = _build(_matmul(M, N, K))
        assert f"tdsl_tc_gemm<false, true, {cfg.bm}, {cfg.bn}, {cfg.wm}, {cfg.wn}, " \
               f"{cfg.stages}," in f.get_source()
        a, b = _rand(g, (M, K), "float16"), _rand(g, (K, N), "float16")
        c = np.full((M, N), np.nan, "float32")
        f.emulate(a, b, c)
        np.testing.assert_allclose(c, _f32(a) @ _f32(b), rtol=1e-5, atol=1e-5)
    if M % 128 == 0:
        return
    cfg = next(c for c in reversed(_variants()) if c.threads == 256)
    monkeypatch.setattr(cuda_tc.schedule_tc, "__defaults__", (cfg,))
    X = td.placeholder((M, K), "bfloat16", name="X")
    W = td.placeholder((N, K), "bfloat16", name="W")
    bias = td.placeholder((N,), "float32", name="bias")
    f = _build([X, W, bias, ops.dense(X, W, bias, out_dtype="float32")])
    assert f"tdsl_tc_gemm<true, false, {cfg.bm}, {cfg.bn}," in f.get_source()
    x, w = _rand(g, (M, K), "bfloat16"), _rand(g, (N, K), "bfloat16")
    bv = g.standard_normal(N).astype("float32")
    y = np.full((M, N), np.nan, "float32")
    f.emulate(x, w, bv, y)
    np.testing.assert_allclose(y, _f32(x) @ _f32(w).T + bv, rtol=1e-5, atol=1e-5)


@needs_nvrtc
def test_sweep_variants_assemble_without_spills_and_report_their_shared_memory():
    """sm_80 and sm_90 at 4096^3: no spill, at most 255 registers, at least the default's 8
    warps per SM; the static report counts the tiles' dynamic shared memory per block (it
    counted static shared memory only, so blocks per SM ignored the tiles), and a row of
    the sweep's --build-only table."""
    from tdsl.backends.cuda.static import analyze, occupancy
    sweep = _sweep()
    for cfg in _variants():
        for arch in ("sm_80", "sm_90"):
            f = sweep.build(4096, "float16", cfg, arch)
            (ks,) = analyze(f, arch)
            assert ks.spill_bytes == ks.frame_bytes == 0 and ks.registers <= 255, (cfg, ks)
            assert ks.threads == cfg.threads and ks.shared_bytes == cfg.smem_bytes, (cfg, ks)
            for a, occ in ks.occupancy.items():
                assert occ == occupancy(a, ks.registers, cfg.smem_bytes, cfg.threads)
                assert occ.warps_per_sm >= 8, (cfg, a, occ)
            row = sweep.static_row(cfg, f, arch)
            assert row.split()[:4] == [cfg.key(), arch, str(ks.registers), "0"], row
