"""The CUDA C of the tensor-core GEMM microkernel (prelude helper "tc_gemm").

``tdsl_tc_gemm<BF16, BROW, BM, BN, WM, WN, ST, T>(A, B, smem, rows, K, a_off, b_off, col_ok,
epilogue)`` computes one block's BM x BN output tile, C = A (BM x K) . B (K x BN), fp32
accumulation, and hands every output to ``epilogue(row, col, value)`` (block-local row and
column; the caller's lambda holds the guards, the bias/activation/cast and the store).
The shapes are template arguments (``tdsl/ops/schedules/tc_config.py``: BN threads, i.e.
BN / 32 warps in a (BM / WM) x (BN / WN) grid; A and B tiles copied in 4 BM / BN and 4
chunk passes; the row-layout B swizzle needs BN >= 64).  Below, the default shape:

* 128 threads = 4 warps in a 2 x 2 grid, each warp 64 x 64 outputs: 4 x 8 m16n8k16 MMAs per
  16-deep k step, 128 fp32 accumulators per thread in registers.
* k tiles of 32: A tile 128 x 32, B tile 32 x 128 (row layout, ``B[k, n]``) or 128 x 32
  (column layout, ``B[n, k]``), in a 4-stage ring of dynamic shared memory (4 x 16 KiB =
  64 KiB: above the 48 KiB a block gets without the opt-in the launcher sets).  Each thread
  copies 4 + 4 chunks of 16 bytes per stage with ``cp.async.cg`` (L2 only, the tiles are
  reused from shared memory); one commit group per stage.
* Mainloop (latency-tolerant: no instruction waits on the one just before it): the
  fragments are double-buffered in registers (2 x (16 A + 16 B) per thread).  Before the
  loop, the first k step's fragments are loaded; then in each k tile, k step 0 issues the
  ``ldmatrix`` of step 1 and the copies of tile kt + 3 (into the stage read in tile kt - 1)
  before its 32 MMAs; k step 1 waits for tile kt + 1 (``cp.async.wait_group 2``), meets
  the block (``__syncthreads``: tile kt + 1 has landed for every thread, and every read of
  tile kt - 1's stage, the next one filled, is done), issues the ``ldmatrix`` of tile
  kt + 1's step 0, then its own MMAs.  So each ``ldmatrix`` has a whole k step of MMAs
  (32) to land in.  The k steps are unrolled; every ``ldmatrix`` address is a per-thread
  offset computed once (the XOR swizzle folded in: it depends on the lane only) plus a
  compile-time constant plus the stage's offset, on a 32-bit shared-window base; the
  copies of tiles whose chunks are all inside the matrix (and aligned) are 8 cp.async from
  pointers stepped by a constant per tile, the others go through the general loader.
  This loop replaced a first one (each k step's ldmatrix, then at once its MMAs) on every
  measured shape: H200, fp16 4096^3, 263 -> 398 TFLOP/s.
* Shared layout: 16-byte chunk ``c`` of row ``r`` of a 64-byte-row tile (A, column-layout B)
  is stored at chunk ``c ^ ((r >> 1) & 3)``; of a 256-byte-row tile (row-layout B) at
  ``c ^ (r & 7)``.  The 8 row addresses of each 8x8 matrix an ``ldmatrix`` reads then fall
  in 8 different 16-byte bank groups: no bank conflicts on the fragment loads.
* Fragments: ``ldmatrix.x4`` gives a 16x16 A fragment (a0..a3) and the B fragments of two
  n8 tiles (``.trans`` for the row layout), exactly the register layouts
  ``mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}`` takes.
* Tails and alignment: a chunk whose 8 elements are all inside the matrix is one cp.async
  when both operands and their row strides are 16-byte aligned (tested once per block);
  one wholly outside is zeroed in shared memory; anything else is filled element by
  element (plain loads, zero outside).  K need not be a multiple of 32 or of 8.

* Gathered B (a ``b_val(k, col)`` lambda as the last argument: the tensor-core conv2d's
  implicit im2col, ``tc_gemm.py``): B's tile keeps the row layout and its swizzle but is
  filled element by element with plain loads and stores, warp w taking k rows
  ``w * GR .. w * GR + GR - 1`` (GR = 8 for BN = 128) and lane l columns ``l + 32 j``: a
  warp reads 32 consecutive columns (pixels: coalesced where they are consecutive in the
  input), and the lambda's arithmetic on k (the tap's channel, row and column) is done once
  per row for the lane's BN / 32 columns.  Whole k tiles are filled unrolled (constant shared
  offsets), the k tail with a ``k < K`` guard; columns outside ``col_ok`` are zero.  With the
  128-column tile the main loop loads tile kt + ST - 1's values into registers (two per
  register) before tile kt's MMAs and stores them after, so their latency hides behind the
  MMAs (``PF``; measured: see the kernel).  A keeps its 16-byte ``cp.async`` copies.  Without the lambda (``tdsl_tc_no_gather``, the matmul
  path) this code is compiled out: the GEMM kernel is unchanged.

Device-only pieces are under ``#ifndef TDSL_EMULATION``; the emulator's ``emu_tc.h``
defines the same primitives with the documented fragment semantics.
"""
from __future__ import annotations

from tdsl.ops.schedules.tc_config import DEFAULT

#: The default tile shape (other shapes: ``tc_config.TcConfig``, template arguments).
BM, BN, STAGES, THREADS = DEFAULT.bm, DEFAULT.bn, DEFAULT.stages, DEFAULT.threads
#: Dynamic shared memory per block of the default shape.
SMEM_BYTES = DEFAULT.smem_bytes

PRIMITIVES = r"""
#ifndef TDSL_EMULATION
// ---- tensor-core GEMM primitives (sm_80+): cp.async, ldmatrix, mma.sync m16n8k16 ----
// the shared-window address of the array's start (one conversion, common to every use)
__device__ __forceinline__ unsigned tdsl_tc_saddr(const void* p) {
  unsigned s;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(s) : "l"(p));
  return s; }
template <typename T> __device__ __forceinline__ void tdsl_tc_cp16(T* sm, int off, const T* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
               :: "r"(tdsl_tc_saddr(sm) + 2u * off), "l"(src) : "memory"); }
template <typename T> __device__ __forceinline__ void tdsl_tc_zero16(T* sm, int off) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};"
               :: "r"(tdsl_tc_saddr(sm) + 2u * off), "r"(0) : "memory"); }
template <typename T> __device__ __forceinline__ void tdsl_tc_st(T* sm, int off, T v) {
  sm[off] = v; }
__device__ __forceinline__ void tdsl_tc_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void tdsl_tc_wait() {
  asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }
template <bool BF16> __device__ __forceinline__ void tdsl_tc_mma(float (&d)[4],
    const unsigned (&a)[4], unsigned b0, unsigned b1) {
  if (BF16)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// the 32-bit shared-window address of the array (tdsl_tc_sbase, computed once) and the
// copy and ldmatrix on it: address arithmetic stays 32-bit and a constant offset folds into
// the instruction (the general loader's tdsl_tc_chunk takes the array's pointer)
template <typename T> __device__ __forceinline__ unsigned tdsl_tc_sbase(T* p) {
  return tdsl_tc_saddr(p); }
template <typename T>
__device__ __forceinline__ void tdsl_tc_cp16(unsigned sm, int off, const T* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
               :: "r"(sm + 2u * off), "l"(src) : "memory"); }
__device__ __forceinline__ void tdsl_tc_ldsm_x4(unsigned (&r)[4], unsigned sm, int off) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(sm + 2u * off)); }
__device__ __forceinline__ void tdsl_tc_ldsm_x4_t(unsigned (&r)[4], unsigned sm, int off) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(sm + 2u * off)); }
#endif"""

CHUNK = r"""
// the B operand of a GEMM whose B tile is copied from global memory (no gather lambda)
template <typename T> struct tdsl_tc_no_gather {
  __device__ __forceinline__ T operator()(long long, long long) const { return T{}; } };
template <typename F> struct tdsl_tc_gathers { enum { value = 1 }; };
template <typename T> struct tdsl_tc_gathers<tdsl_tc_no_gather<T>> { enum { value = 0 }; };
// one 16-byte chunk (8 elements) of a tile: first/last: its first/last element is inside
// the matrix; ok(e): element e is
template <typename T, typename PS, typename PG, typename F>
__device__ __forceinline__ void tdsl_tc_chunk(PS sm, int soff, PG g, long long goff, bool vec,
                                              bool first, bool last, F ok) {
  if (vec && last) { tdsl_tc_cp16(sm, soff, g + goff); return; }
  if (!first) { tdsl_tc_zero16(sm, soff); return; }
  for (int e = 0; e < 8; ++e) tdsl_tc_st(sm, soff + e, ok(e) ? (T)g[goff + e] : T{});
}"""

KERNEL = r"""
template <bool BF16, bool BROW, int BM, int BN, int WM, int WN, int ST, typename T,
          typename PA, typename PB, typename PS, typename FA, typename FB, typename FC,
          typename FE, typename FG = tdsl_tc_no_gather<T>>
__device__ __forceinline__ void tdsl_tc_gemm(PA A, PB B, PS smp, long long rows, long long K,
                                             FA a_off, FB b_off, FC col_ok, FE epilogue,
                                             FG b_val = FG()) {
  // BN threads; BN / 32 warps in a (BM / WM) x (BN / WN) grid, each WM x WN outputs.
  // GB (a b_val lambda given): B's tile (row layout) is gathered element by element,
  // b_val(k, col) its value at k and the block-local column (gather_tile below)
  constexpr bool GB = tdsl_tc_gathers<FG>::value != 0;
  static_assert(!GB || BROW, "a gathered B tile has the row layout");
  constexpr int BK = 32, KS = BK / 16, A_ELEMS = BM * BK, STAGE = A_ELEMS + BK * BN;
  constexpr int PA_N = BM * 4 / BN, CB = BN / 8, MT = WM / 16, NT = WN / 8, NP = WN / 16;
  constexpr int NB = BROW ? (NP < 4 ? NP : 4) : KS, LAST = (ST - 1) * STAGE;
  static_assert(CB >= 8 && PA_N >= 1 && (BM / WM) * (BN / WN) * 32 == BN, "tile shape");
  static_assert(KS % 2 == 0, "the fragment double buffer alternates within a k tile");
  const auto sm = tdsl_tc_sbase(smp);
  const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = (warp / (BN / WN)) * WM, wn = (warp % (BN / WN)) * WN;
  const long long a0 = a_off(0, 0), sa = a_off(1, 0) - a0;      // A: row stride
  const long long b0 = b_off(0, 0);
  const long long sb = BROW ? b_off(1, 0) - b0 : b_off(0, 1) - b0;  // B: k or column stride
  const bool vec = sa % 8 == 0 && (GB || sb % 8 == 0) &&
                   ((unsigned long long)(A + a0) & 15) == 0 &&
                   (GB || ((unsigned long long)(B + b0) & 15) == 0);
  // this thread's chunks: A rows (tid >> 2) + BN / 4 p, chunk tid & 3; B likewise (column
  // layout) or k rows tid / CB + 8 p, chunk tid % CB (row layout).  Their swizzle does not
  // depend on p (BN / 4 and 8 are multiples of the swizzle period), so chunk p of a stage
  // is at the thread's offset sa_w / sb_w plus a constant.
  const int bc = BROW ? (tid % CB) * 8 : 0;
  const bool b_first = BROW && !GB ? col_ok(bc) : true;
  const bool b_last = BROW && !GB ? col_ok(bc + 7) : true;
  bool fast = vec && b_first && b_last;
#pragma unroll
  for (int p = 0; p < PA_N; ++p) fast = fast && (tid >> 2) + BN / 4 * p < rows;
  if (!BROW) {
#pragma unroll
    for (int p = 0; p < 4; ++p) fast = fast && col_ok((tid >> 2) + BN / 4 * p);
  }
  // the k tiles whose copies are all whole aligned chunks inside the matrix: PA_N + 4
  // cp.async from pointers stepped by a constant per tile; the others (tails, misalignment)
  // go through the general loader below
  const int KT = (int)((K + BK - 1) / BK), KFAST = fast ? (int)(K / BK) : 0;
  const int r0 = tid >> 2, c0 = tid & 3;
  const int sa_w = r0 * 32 + ((c0 ^ ((r0 >> 1) & 3)) << 3);
  const int sb_w = BROW ? A_ELEMS + (tid / CB) * BN + (((tid % CB) ^ ((tid / CB) & 7)) << 3)
                        : A_ELEMS + sa_w;
  PA ga = A + (a0 + r0 * sa + c0 * 8);
  PB gb = BROW ? B + (b0 + (tid / CB) * sb + bc) : B + (b0 + r0 * sb + c0 * 8);
  const long long ra = BN / 4 * sa, rb = BROW ? 8 * sb : BN / 4 * sb;
  // the gathered B tile: warp w fills k rows w GR .. w GR + GR - 1, lane l columns l + 32 j
  // of each (a warp reads 32 consecutive columns; the k row is the warp's, so b_val's
  // arithmetic on k is shared by the lane's BN / 32 columns); element (r, c) at
  // r BN + (c ^ 8 (r % 8)) (the row layout's swizzle: chunk c / 8 at chunk c / 8 ^ r % 8);
  // zero past K and the columns
  constexpr int GR = GB ? BK * 32 / BN : 1, GC = BN / 32;
  bool g_in[GC];
#pragma unroll
  for (int j = 0; j < GC; ++j) g_in[j] = GB && col_ok(lane + 32 * j);
  // PF: gathered values travel through registers: the main loop fetches tile kt + ST - 1
  // (gather_fetch) before tile kt's MMAs and stores them (gather_put) after, so the loads'
  // latency is hidden behind the MMAs instead of stalling the warp before them.  Measured on
  // an H200 (fp16 3x3 64->64 conv): the 128-column tile at batch 8 0.066 -> 0.058 ms, but the
  // 64-column tile of batch 1 at 56^2 0.025 -> 0.051 ms (at 14^2, 256 channels: 0.241 ->
  // 0.198), so only the 128-column tile prefetches until a profile says why
  constexpr bool PF = GB && BN >= 128;
  // (two 16-bit values to a register: the 128-column tile then stays under 255 registers)
  static_assert(sizeof(T) == 2 && GC % 2 == 0, "gathered values are packed in pairs");
  unsigned gv[GR][GC / 2];
  auto gather_fetch = [&](int kt, bool whole) {
    const long long k0 = (long long)kt * BK;
#pragma unroll
    for (int i = 0; i < GR; ++i) {
      const int r = warp * GR + i;
      const bool in = whole || k0 + r < K;
#pragma unroll
      for (int j = 0; j < GC; ++j) {
        const T v = in && g_in[j] ? (T)b_val(k0 + r, lane + 32 * j) : T{};
        unsigned short u;
        memcpy(&u, &v, 2);
        gv[i][j / 2] = j % 2 ? gv[i][j / 2] | (unsigned)u << 16 : (unsigned)u;
      }
    }
  };
  auto gather_put = [&](int st) {
#pragma unroll
    for (int i = 0; i < GR; ++i) {
      const int r = warp * GR + i;
#pragma unroll
      for (int j = 0; j < GC; ++j) {
        const int c = lane + 32 * j;
        const unsigned short u = (unsigned short)(gv[i][j / 2] >> (16 * (j % 2)));
        T v;
        memcpy(&v, &u, 2);
        tdsl_tc_st(smp, st + A_ELEMS + r * BN + (c ^ ((r & 7) << 3)), v);
      }
    }
  };
  auto gather_tile = [&](int st, int kt, bool whole) {   // at once (the prologue; !PF)
    const long long k0 = (long long)kt * BK;
#pragma unroll 8            // the swizzle's period: constant offsets, fewer registers live
    for (int i = 0; i < GR; ++i) {
      const int r = warp * GR + i;
      const bool in = whole || k0 + r < K;
#pragma unroll
      for (int j = 0; j < GC; ++j) {
        const int c = lane + 32 * j;
        tdsl_tc_st(smp, st + A_ELEMS + r * BN + (c ^ ((r & 7) << 3)),
                   in && g_in[j] ? (T)b_val(k0 + r, c) : T{});
      }
    }
  };
  auto load_fast = [&](int st, int kt, bool gather) {
#pragma unroll
    for (int p = 0; p < PA_N; ++p) tdsl_tc_cp16(sm, st + sa_w + p * (BN / 4 * 32), ga + p * ra);
    if (GB) {
      if (gather) gather_tile(st, kt, true);      // a whole k tile: no k guard
    } else {
#pragma unroll
      for (int p = 0; p < 4; ++p)
        tdsl_tc_cp16(sm, st + sb_w + p * (BROW ? 8 * BN : BN / 4 * 32), gb + p * rb);
    }
    ga = ga + BK;
    gb = gb + (BROW ? BK * sb : BK);
  };
  auto load_any = [&](int st, int kt, bool gather) {
    const long long k0 = (long long)kt * BK;
    for (int p = 0; p < PA_N; ++p) {
      const int r = r0 + BN / 4 * p;
      const long long kc = k0 + c0 * 8;
      const bool in = r < rows;
      tdsl_tc_chunk<T>(smp, st + sa_w + p * (BN / 4 * 32), A, a0 + r * sa + kc, vec,
                       in && kc < K, in && kc + 7 < K, [&](int e) { return in && kc + e < K; });
    }
    if (GB) {
      if (gather) gather_tile(st, kt, false);
      return;
    }
    for (int p = 0; p < 4; ++p) {
      if (BROW) {
        const int r = tid / CB + 8 * p;
        const bool in = k0 + r < K;
        tdsl_tc_chunk<T>(smp, st + sb_w + p * 8 * BN, B, b0 + (k0 + r) * sb + bc, vec,
                         in && b_first, in && b_last, [&](int e) { return in && col_ok(bc + e); });
      } else {
        const int r = r0 + BN / 4 * p;
        const long long kc = k0 + c0 * 8;
        const bool in = col_ok(r);
        tdsl_tc_chunk<T>(smp, st + sb_w + p * (BN / 4 * 32), B, b0 + r * sb + kc, vec,
                         in && kc < K, in && kc + 7 < K, [&](int e) { return in && kc + e < K; });
      }
    }
  };
  // gather = false: B's gathered values are left to gather_fetch / gather_put
  auto load = [&](int st, int kt, bool gather) {
    if (kt < KFAST) load_fast(st, kt, gather); else load_any(st, kt, gather);
  };
  // per-thread ldmatrix offsets within a stage, the swizzle folded in: A fragment (mt, kk)
  // at a_ld[kk] + 512 mt; B (np, kk) at b_ld[np % 4] + 16 BN kk + 64 (np / 4) (row layout)
  // or b_ld[kk] + 512 np (column layout)
  int a_ld[KS], b_ld[NB];
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
    const int r = wm + (lane & 15), c = kk * 2 + (lane >> 4);
    a_ld[kk] = r * 32 + ((c ^ ((r >> 1) & 3)) << 3);
  }
#pragma unroll
  for (int j = 0; j < NB; ++j) {
    if (BROW) {
      const int r = lane & 15, c = (wn + j * 16) / 8 + (lane >> 4);
      b_ld[j] = A_ELEMS + r * BN + ((c ^ (r & 7)) << 3);
    } else {
      const int m = lane >> 3, n = wn + (lane & 7) + ((m >> 1) << 3), c = j * 2 + (m & 1);
      b_ld[j] = A_ELEMS + n * 32 + ((c ^ ((n >> 1) & 3)) << 3);
    }
  }
  // fragments, double-buffered: buffer kk % 2 feeds k step kk while the other is loaded
  unsigned af[2][MT][4], bq[2][NP][4];    // bq[.][np]: B of n tiles 2 np (0, 1), 2 np + 1 (2, 3)
  auto frags = [&](int buf, int st, int kk) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) tdsl_tc_ldsm_x4(af[buf][mt], sm, st + a_ld[kk] + mt * 512);
#pragma unroll
    for (int np = 0; np < NP; ++np) {
      if (BROW)
        tdsl_tc_ldsm_x4_t(bq[buf][np], sm, st + b_ld[np % NB] + kk * 16 * BN + np / 4 * 64);
      else
        tdsl_tc_ldsm_x4(bq[buf][np], sm, st + b_ld[kk] + np * 512);
    }
  };
  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int v = 0; v < 4; ++v) acc[i][j][v] = 0.0f;
  for (int s = 0; s < ST - 1; ++s) {
    if (s < KT) load(s * STAGE, s, true);
    tdsl_tc_commit();
  }
  tdsl_tc_wait<ST - 2>();     // tile 0 has landed (this thread's copies) ...
  __syncthreads();            // ... everyone's
  int rd = 0, wr = LAST;      // the offsets of the stages read and filled
  int put = 0;                // the stage the fetched gather values go to
  if (KT > 0) frags(0, rd, 0);
#pragma unroll 1            // one k tile's code (a known K unrolled it, and ptxas then spilled)
  for (int kt = 0; kt < KT; ++kt) {
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
      if (kk == KS - 1) {
        // the gathered tile fetched at step 0 goes to its stage before the barrier below,
        // after which tile kt + 1 -- at ST = 2 that very stage -- is read
        if (PF && kt + ST - 1 < KT) gather_put(put);
        tdsl_tc_wait<ST - 2>();   // tile kt + 1 has landed (this thread's copies) ...
        __syncthreads();          // ... everyone's; and every read of tile kt - 1's stage
        rd = rd == LAST ? 0 : rd + STAGE;   // (the next one filled) is done
      }
      // the next k step's fragments (at the last step: the next tile's first) ...
      if (kk < KS - 1 || kt + 1 < KT) frags((kk + 1) % 2, rd, (kk + 1) % KS);
      if (kk == 0) {
        if (kt + ST - 1 < KT) {
          load(wr, kt + ST - 1, !PF);
          if (PF) gather_fetch(kt + ST - 1, kt + ST - 1 < KFAST);
          put = wr;
        }
        tdsl_tc_commit();
        wr = wr == LAST ? 0 : wr + STAGE;
      }
      // ... are in flight while this step's MMAs run
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
          tdsl_tc_mma<BF16>(acc[mt][nt], af[kk % 2][mt], bq[kk % 2][nt / 2][2 * (nt % 2)],
                            bq[kk % 2][nt / 2][2 * (nt % 2) + 1]);
    }
  }
  tdsl_tc_wait<0>();
  // accumulator (mt, nt, v): row wm + 16 mt + lane / 4 + 8 (v / 2), column wn + 8 nt +
  // 2 (lane % 4) + v % 2 (the m16n8 C fragment)
  const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const int r = wm + mt * 16 + g + 8 * (v >> 1), c = wn + nt * 8 + 2 * t4 + (v & 1);
        if (r < rows) epilogue(r, c, acc[mt][nt][v]);
      }
}"""


def helper() -> str:
    """The prelude text of the "tc_gemm" helper: primitives, chunk loader, microkernel."""
    return "\n".join(["// ---- tensor-core GEMM microkernel (tc_kernel.py) ----" + PRIMITIVES,
                      CHUNK, KERNEL])
