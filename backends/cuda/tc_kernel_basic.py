"""The first mainloop of the tensor-core GEMM microkernel, kept for comparison
(``TcConfig(..., mainloop="basic")``, key suffix ``/basic``; ``benchmarks/cuda_tc_sweep.py
--variants`` times it beside the default).

``tdsl_tc_gemm_basic`` takes the arguments of ``tdsl_tc_gemm`` (``tc_kernel.py``) and uses
the same shared layout, loader and epilogue, but per k tile: wait for the stage, one
barrier, issue the next tile's copies, then for each 16-deep k step load every fragment of
the step and run its MMAs right after (each ``mma.sync`` waits on the ``ldmatrix`` just
issued), with the swizzled addresses recomputed per step and the global offsets
recomputed per chunk.  On an H200 (fp16 4096^3) it reached 263 TFLOP/s, a third of cuBLAS.
"""
from __future__ import annotations

KERNEL = r"""
template <bool BF16, bool BROW, int BM, int BN, int WM, int WN, int ST, typename T,
          typename PA, typename PB, typename PS, typename FA, typename FB, typename FC,
          typename FE>
__device__ __forceinline__ void tdsl_tc_gemm_basic(PA A, PB B, PS sm, long long rows, long long K,
                                             FA a_off, FB b_off, FC col_ok, FE epilogue) {
  // BN threads; BN / 32 warps in a (BM / WM) x (BN / WN) grid, each WM x WN outputs
  constexpr int BK = 32, A_ELEMS = BM * BK, STAGE = A_ELEMS + BK * BN;
  constexpr int PA_N = BM * 4 / BN, CB = BN / 8, MT = WM / 16, NT = WN / 8, NP = WN / 16;
  static_assert(CB >= 8 && PA_N >= 1 && (BM / WM) * (BN / WN) * 32 == BN, "tile shape");
  const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = (warp / (BN / WN)) * WM, wn = (warp % (BN / WN)) * WN;
  const long long a0 = a_off(0, 0), sa = a_off(1, 0) - a0;      // A: row stride
  const long long b0 = b_off(0, 0);
  const long long sb = BROW ? b_off(1, 0) - b0 : b_off(0, 1) - b0;  // B: k or column stride
  const bool vec = sa % 8 == 0 && sb % 8 == 0 &&
                   ((unsigned long long)(A + a0) & 15) == 0 &&
                   ((unsigned long long)(B + b0) & 15) == 0;
  // this thread's chunks: A rows (tid >> 2) + BN / 4 p, chunk tid & 3; B likewise (column
  // layout) or k rows tid / CB + 8 p, chunk tid % CB (row layout)
  bool a_in[PA_N], b_in[4];
  for (int p = 0; p < PA_N; ++p) a_in[p] = (tid >> 2) + BN / 4 * p < rows;
  for (int p = 0; p < 4; ++p) b_in[p] = BROW ? true : col_ok((tid >> 2) + BN / 4 * p);
  const int bc = BROW ? (tid % CB) * 8 : 0;
  const bool b_first = BROW ? col_ok(bc) : true, b_last = BROW ? col_ok(bc + 7) : true;
  auto load = [&](int stage, long long kt) {
    const long long k0 = kt * BK;
    const int base = stage * STAGE;
    for (int p = 0; p < PA_N; ++p) {
      const int r = (tid >> 2) + BN / 4 * p, c = tid & 3;
      const long long kc = k0 + c * 8;
      const bool in = a_in[p];
      tdsl_tc_chunk<T>(sm, base + r * 32 + ((c ^ ((r >> 1) & 3)) << 3), A,
                       a0 + r * sa + kc, vec, in && kc < K, in && kc + 7 < K,
                       [&](int e) { return in && kc + e < K; });
    }
    for (int p = 0; p < 4; ++p) {
      if (BROW) {
        const int r = tid / CB + 8 * p, c = tid % CB;
        const bool in = k0 + r < K;
        tdsl_tc_chunk<T>(sm, base + A_ELEMS + r * BN + ((c ^ (r & 7)) << 3), B,
                         b0 + (k0 + r) * sb + bc, vec, in && b_first, in && b_last,
                         [&](int e) { return in && col_ok(bc + e); });
      } else {
        const int r = (tid >> 2) + BN / 4 * p, c = tid & 3;
        const long long kc = k0 + c * 8;
        const bool in = b_in[p];
        tdsl_tc_chunk<T>(sm, base + A_ELEMS + r * 32 + ((c ^ ((r >> 1) & 3)) << 3), B,
                         b0 + r * sb + kc, vec, in && kc < K, in && kc + 7 < K,
                         [&](int e) { return in && kc + e < K; });
      }
    }
  };
  float acc[MT][NT][4];
  for (int i = 0; i < MT; ++i)
    for (int j = 0; j < NT; ++j)
      for (int v = 0; v < 4; ++v) acc[i][j][v] = 0.0f;
  const long long KT = (K + BK - 1) / BK;
  for (int s = 0; s < ST - 1; ++s) {
    if (s < KT) load(s, s);
    tdsl_tc_commit();
  }
  int rd = 0, wr = ST - 1;    // the stages read and filled in this iteration
  for (long long kt = 0; kt < KT; ++kt) {
    tdsl_tc_wait<ST - 2>();   // tile kt has landed (this thread's copies) ...
    __syncthreads();          // ... everyone's; and stage wr (read last iteration) is free
    if (kt + ST - 1 < KT) load(wr, kt + ST - 1);
    tdsl_tc_commit();
    const int base = rd * STAGE;
    rd = rd == ST - 1 ? 0 : rd + 1;
    wr = wr == ST - 1 ? 0 : wr + 1;
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      unsigned af[MT][4], bf[NT][2];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int r = wm + mt * 16 + (lane & 15), c = kk * 2 + (lane >> 4);
        tdsl_tc_ldsm_x4(af[mt], sm, base + r * 32 + ((c ^ ((r >> 1) & 3)) << 3));
      }
#pragma unroll
      for (int np = 0; np < NP; ++np) {
        unsigned t[4];
        if (BROW) {
          const int r = kk * 16 + (lane & 15), c = (wn + np * 16) / 8 + (lane >> 4);
          tdsl_tc_ldsm_x4_t(t, sm, base + A_ELEMS + r * BN + ((c ^ (r & 7)) << 3));
        } else {
          const int m = lane >> 3, n = wn + np * 16 + (lane & 7) + ((m >> 1) << 3);
          const int c = kk * 2 + (m & 1);
          tdsl_tc_ldsm_x4(t, sm, base + A_ELEMS + n * 32 + ((c ^ ((n >> 1) & 3)) << 3));
        }
        bf[2 * np][0] = t[0]; bf[2 * np][1] = t[1];
        bf[2 * np + 1][0] = t[2]; bf[2 * np + 1][1] = t[3];
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
          tdsl_tc_mma<BF16>(acc[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
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
