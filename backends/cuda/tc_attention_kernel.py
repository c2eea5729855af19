"""The CUDA C of the tensor-core attention microkernel (prelude helper "tc_attention").

``tdsl_fa<BF16, D, CAUSAL, T, MASK, MT>(Q, K, V, M, smem, sq, sk, i0, scale, q_off, k_off,
v_off, m_off, store)`` computes one block of 64 query rows (``i0`` ..) of
``softmax(Q Kᵀ scale + mask) V`` for one (batch, head) in the FlashAttention-2 structure,
fp16/bf16 operands, fp32 accumulators and softmax statistics:

* 128 threads = 4 warps, warp ``w`` owns query rows ``16 w .. 16 w + 15`` of the block.
  The 64 x D query tile is copied to shared memory once (cp.async) and read into
  registers as ``D / 16`` m16n8k16 A fragments (``ldmatrix.x4``), kept for the whole loop.
* Key blocks of 64: the K and V tiles (64 x D each, row-major as in memory) sit in a
  2-stage ring of dynamic shared memory; tile ``kb + 1``'s copies (cp.async, one commit
  group) are in flight while tile ``kb`` is used.  A barrier after each block (after
  ``cp.async.wait_group 0``) shows the next tile to the block and keeps the next copies
  out of the stage still being read.
* S = Q Kᵀ: per 16-deep step of d, ``ldmatrix.x4`` of two 8-key n tiles of K (K is the
  "column" B operand: ``B[n, k]``), 8 MMAs per step: a warp's 16 x 64 scores in 32 fp32
  registers per thread (row ``g`` and ``g + 8`` of the warp, ``g = lane / 4``).
* Online softmax on the accumulator fragments: the scores are scaled, keys at or past
  ``sk`` (and, causal, past the query) set to -inf, the user mask applied (below), the
  row max is reduced over the 4
  lanes of a quad (``__shfl_xor_sync`` 1, 2); the running max ``m``, the thread's partial
  row sum ``l`` (summed over the quad once, at the end) and the output accumulators are
  rescaled by ``exp(m_old - m_new)``; a row that has seen only -inf keeps 0s.
* O += P V: the probabilities are rounded to fp16/bf16 pairs in registers and are, as
  they lie, the A fragments of the second product (the m16n8 C layout of two adjacent
  n tiles is the m16k16 A layout); V is the "row" B operand (``B[k, n]``):
  ``ldmatrix.x4.trans``.
* Causal: key blocks wholly after the block's last query are not visited.
* User mask (``MASK`` 1: additive, ``MT`` of T's type, converted to fp32 and added to the
  scaled score; 2: boolean, ``MT`` bool, -inf where False; 0: none, ``M`` / ``m_off``
  unused): element ``M[m_off(query, key)]`` (absolute indices; ``m_off`` is linear, so
  a row's base and the stride along keys -- 0 when broadcast, a small constant -- are
  taken once; within a key block a row's elements are int offsets from a row pointer:
  with 64-bit offsets ptxas kept ~40 more registers at d 64) is read
  straight from global memory per score fragment element, only for keys the tail and
  causality leave in and for rows below ``sq``.  Each element is read once per
  (batch, head), so a staged tile would buy no reuse: it would cost shared memory (8 KB
  a stage, fp16) and a barrier-ordered copy for the same one read.  A quad reads 8
  adjacent keys of one row per n tile and the 8 n tiles of a warp cover 64 adjacent keys
  of 8 rows, so the sectors one load instruction leaves half used are the next ones'
  (L1); a mask broadcast over batch or heads is re-read from L2.  A fully masked row
  (all -inf or all False) keeps its 0s: the output row is 0, as PyTorch's SDPA (CPU)
  gives and the SIMT schedule does.
* Epilogue: ``O / l`` (0 where ``l == 0``: a row that sees no key), handed to
  ``store(row, col, value)`` (block-local row, the caller's lambda holds the cast and the
  store) for rows below ``sq``.
* Shared layout: 16-byte chunk ``c`` of tile row ``r`` is stored at chunk ``c ^ (r & 7)``,
  so the 8 row addresses of every 8x8 matrix an ``ldmatrix`` reads fall in 8 different
  16-byte bank groups.
* Tails: rows past ``sq`` / ``sk`` are zero-filled in shared memory (their scores are
  masked, their outputs not stored); where Q, K or V or a row stride is not 16-byte
  aligned the tiles are filled element by element (``tdsl_tc_chunk``).

It uses the tensor-core GEMM's primitives (``tc_kernel.py``: cp.async, ldmatrix, mma.sync,
the chunk loader); under ``TDSL_EMULATION`` those come from ``emu_tc.h`` and the fp32 ->
16-bit pair packing below is plain C++.
"""
from __future__ import annotations

#: Query rows per block, keys per K/V tile, threads per block.
BQ, BKV, THREADS = 64, 64, 128
#: Head sizes the kernel takes.
HEAD_SIZES = (64, 128)


def smem_bytes(d: int) -> int:
    """Dynamic shared memory of one block: the Q tile and 2 stages of K and V tiles."""
    return (BQ * d + 2 * 2 * BKV * d) * 2


PACK = r"""
// two fp32 values rounded to one register of two fp16 / bf16 (lo in the low half): the
// A-fragment form of a probability pair
template <bool BF16> __device__ __forceinline__ unsigned tdsl_fa_pack(float lo, float hi) {
#ifndef TDSL_EMULATION
  unsigned r;
  if (BF16) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  else asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#else
  if (BF16) return emu::bits16(tdsl_f2bf(lo)) | (emu::bits16(tdsl_f2bf(hi)) << 16);
  return emu::bits16(tdsl_f2h(lo)) | (emu::bits16(tdsl_f2h(hi)) << 16);
#endif
}"""

KERNEL = r"""
// the swizzled shared offset of 16-byte chunk c of tile row r (rows of D elements)
template <int D> __device__ __forceinline__ int tdsl_fa_sw(int r, int c) {
  return r * D + ((c ^ (r & 7)) << 3); }
// rows [r0, r0 + 64) of a (rows x D) matrix into the tile at shared offset st.  A thread
// copies chunk c = tid % (D / 8) of rows rt + RP p (rt = tid / (D / 8), RP = 128 / (D / 8),
// a multiple of the swizzle period: shared offset sw_t + RP D p); gt: the element offset of
// its chunk at row 0; rows at or past n zero-filled.  A tile wholly inside the matrix,
// aligned (vec): plain cp.async, else the general chunk loader.
template <typename T, int D, int CH, typename PS, typename SB, typename PG>
__device__ __forceinline__ void tdsl_fa_tile(PS smp, SB sm, int st, int sw_t, PG G,
                                             long long gt, long long stride, long long r0,
                                             long long n, int rt, bool vec) {
  constexpr int RP = 128 / (D / 8);
  if (vec && r0 + 64 <= n) {
#pragma unroll
    for (int p = 0; p < CH; ++p)
      tdsl_tc_cp16(sm, st + sw_t + p * RP * D, G + (gt + (r0 + p * RP) * stride));
    return;
  }
  for (int p = 0; p < CH; ++p) {
    const bool in = r0 + rt + p * RP < n;
    tdsl_tc_chunk<T>(smp, st + sw_t + p * RP * D, G, gt + (r0 + p * RP) * stride, vec, in, in,
                     [&](int) { return in; });
  }
}
// a user mask element as the term added to a scaled score
__device__ __forceinline__ float tdsl_fa_mval(tdsl_half x) { return tdsl_h2f(x); }
__device__ __forceinline__ float tdsl_fa_mval(tdsl_bf16 x) { return tdsl_bf2f(x); }
__device__ __forceinline__ float tdsl_fa_mval(bool x) {
  return x ? 0.0f : __int_as_float((int)0xff800000u); }
template <bool BF16, int D, bool CAUSAL, typename T, int MASK, typename MT, typename PQ,
          typename PK, typename PV, typename PM, typename PS, typename FQ, typename FK,
          typename FV, typename FM, typename FS>
__device__ __forceinline__ void tdsl_fa(PQ Q, PK K, PV V, PM M, PS smp, long long sq,
                                        long long sk, long long i0, float scale, FQ q_off,
                                        FK k_off, FV v_off, FM m_off, FS store) {
  constexpr int BQ = 64, BKV = 64, CR = D / 8, KD = D / 16, NT = BKV / 8, DT = D / 8;
  constexpr int TILE = BKV * D, QCH = BQ * CR / 128, KCH = BKV * CR / 128;
  constexpr int KS0 = BQ * D;              // K stage s at KS0 + 2 s TILE, V at + TILE
  static_assert(D == 64 || D == 128, "head size");
  const float NEG_INF = __int_as_float((int)0xff800000u);
  const auto sm = tdsl_tc_sbase(smp);
  const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const long long q0 = q_off(0, 0), k0 = k_off(0, 0), v0 = v_off(0, 0);
  const long long sqs = q_off(1, 0) - q0, sks = k_off(1, 0) - k0, svs = v_off(1, 0) - v0;
  const bool vec = sqs % 8 == 0 && sks % 8 == 0 && svs % 8 == 0 &&
                   ((unsigned long long)(Q + q0) & 15) == 0 &&
                   ((unsigned long long)(K + k0) & 15) == 0 &&
                   ((unsigned long long)(V + v0) & 15) == 0;
  auto sw = [](int r, int c) { return tdsl_fa_sw<D>(r, c); };
  const int rt = tid / CR, ct = tid % CR, sw_t = sw(rt, ct);
  const long long gq = q0 + rt * sqs + ct * 8, gk = k0 + rt * sks + ct * 8,
                  gv = v0 + rt * svs + ct * 8;
  const long long rows_q = sq - i0;
  long long nkb = (sk + BKV - 1) / BKV;
  if (CAUSAL) {
    const long long last = (rows_q < BQ ? sq : i0 + BQ) - 1;   // the block's last query
    const long long need = last / BKV + 1;
    nkb = need < nkb ? need : nkb;
  }
  tdsl_fa_tile<T, D, QCH>(smp, sm, 0, sw_t, Q, gq, sqs, i0, sq, rt, vec);
  if (nkb > 0) {
    tdsl_fa_tile<T, D, KCH>(smp, sm, KS0, sw_t, K, gk, sks, 0, sk, rt, vec);
    tdsl_fa_tile<T, D, KCH>(smp, sm, KS0 + TILE, sw_t, V, gv, svs, 0, sk, rt, vec);
  }
  tdsl_tc_commit();
  tdsl_tc_wait<0>();
  __syncthreads();
  // the warp's Q fragments (A, 16 x 16 per d step), kept in registers
  unsigned qf[KD][4];
#pragma unroll
  for (int kk = 0; kk < KD; ++kk)
    tdsl_tc_ldsm_x4(qf[kk], sm, sw(warp * 16 + (lane & 15), kk * 2 + (lane >> 4)));
  float o[DT][4];
#pragma unroll
  for (int j = 0; j < DT; ++j)
#pragma unroll
    for (int v = 0; v < 4; ++v) o[j][v] = 0.0f;
  float mrow[2] = {NEG_INF, NEG_INF}, lrow[2] = {0.0f, 0.0f};
  const long long qrow[2] = {i0 + warp * 16 + g, i0 + warp * 16 + g + 8};
  // the mask: the offsets of this thread's two rows at key 0; the stride along keys, a
  // constant under 2^24 (tc_attention.py checks), so a key block's offsets are ints
  long long mrow0[2] = {0, 0};
  int mks = 0;
  if (MASK) {
    const long long m0 = m_off(0, 0), mqs = m_off(1, 0) - m0;
    mks = (int)(m_off(0, 1) - m0);
#pragma unroll
    for (int h = 0; h < 2; ++h) mrow0[h] = m0 + qrow[h] * mqs;
  }
  // per-lane ldmatrix offsets: K (column B: n = key, k = d) and V (row B, .trans)
  const int km = lane >> 3, kn = (lane & 7) + ((km >> 1) << 3), vr = lane & 15;
#pragma unroll 1
  for (long long kb = 0; kb < nkb; ++kb) {
    const int st = KS0 + (int)(kb & 1) * 2 * TILE;
    if (kb + 1 < nkb) {
      const int nx = KS0 + (int)((kb + 1) & 1) * 2 * TILE;
      tdsl_fa_tile<T, D, KCH>(smp, sm, nx, sw_t, K, gk, sks, (kb + 1) * BKV, sk, rt,
                              vec);
      tdsl_fa_tile<T, D, KCH>(smp, sm, nx + TILE, sw_t, V, gv, svs, (kb + 1) * BKV, sk, rt,
                              vec);
    }
    tdsl_tc_commit();
    float s[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int v = 0; v < 4; ++v) s[j][v] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KD; ++kk)
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        unsigned b[4];
        tdsl_tc_ldsm_x4(b, sm, st + sw(np * 16 + kn, kk * 2 + (km & 1)));
        tdsl_tc_mma<BF16>(s[2 * np], qf[kk], b[0], b[1]);
        tdsl_tc_mma<BF16>(s[2 * np + 1], qf[kk], b[2], b[3]);
      }
    // scale and mask; the block's row max over the quad
    // keys (block-local) at or past lim[h] are masked for row half h
    const long long j0 = kb * BKV;
    const auto mp0 = M + (mrow0[0] + j0 * mks), mp1 = M + (mrow0[1] + j0 * mks);
    int lim[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      long long l = sk - j0 < BKV ? sk - j0 : BKV;
      if (CAUSAL && qrow[h] - j0 + 1 < l) l = qrow[h] - j0 + 1;
      if (MASK && qrow[h] >= sq) l = 0;      // (no mask element for a row past sq)
      lim[h] = (int)(l < 0 ? 0 : l);
    }
    float bm[2] = {NEG_INF, NEG_INF};
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const int c = j * 8 + 2 * t4 + (v & 1);
        float x = c < lim[v >> 1] ? s[j][v] * scale : NEG_INF;
        if (MASK && c < lim[v >> 1])
          x += tdsl_fa_mval((MT)(v >> 1 ? mp1 : mp0)[c * mks]);
        s[j][v] = x;
        bm[v >> 1] = fmaxf(bm[v >> 1], x);
      }
    float alpha[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      bm[h] = fmaxf(bm[h], __shfl_xor_sync(0xffffffffu, bm[h], 1));
      bm[h] = fmaxf(bm[h], __shfl_xor_sync(0xffffffffu, bm[h], 2));
      const float mn = fmaxf(mrow[h], bm[h]);
      const float mu = mn == NEG_INF ? 0.0f : mn;    // a row with no key yet: all 0s
      alpha[h] = __expf(mrow[h] - mu);
      mrow[h] = mn;
      bm[h] = mu;
    }
    float ls[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const float p = __expf(s[j][v] - bm[v >> 1]);
        s[j][v] = p;
        ls[v >> 1] += p;
      }
#pragma unroll
    for (int h = 0; h < 2; ++h) lrow[h] = lrow[h] * alpha[h] + ls[h];
#pragma unroll
    for (int j = 0; j < DT; ++j)
#pragma unroll
      for (int v = 0; v < 4; ++v) o[j][v] *= alpha[v >> 1];
    // O += P V, 16 keys a step: P's A fragment from two score n tiles
#pragma unroll
    for (int ks = 0; ks < BKV / 16; ++ks) {
      unsigned pa[4];
      pa[0] = tdsl_fa_pack<BF16>(s[2 * ks][0], s[2 * ks][1]);
      pa[1] = tdsl_fa_pack<BF16>(s[2 * ks][2], s[2 * ks][3]);
      pa[2] = tdsl_fa_pack<BF16>(s[2 * ks + 1][0], s[2 * ks + 1][1]);
      pa[3] = tdsl_fa_pack<BF16>(s[2 * ks + 1][2], s[2 * ks + 1][3]);
#pragma unroll
      for (int np = 0; np < DT / 2; ++np) {
        unsigned b[4];
        tdsl_tc_ldsm_x4_t(b, sm, st + TILE + sw(ks * 16 + vr, np * 2 + (lane >> 4)));
        tdsl_tc_mma<BF16>(o[2 * np], pa, b[0], b[1]);
        tdsl_tc_mma<BF16>(o[2 * np + 1], pa, b[2], b[3]);
      }
    }
    tdsl_tc_wait<0>();      // tile kb + 1 has landed (this thread's copies) ...
    __syncthreads();        // ... everyone's; and every read of tile kb's stage is done
  }
  // the row sums over the quad; O / l (0 for a row that saw no key)
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    lrow[h] += __shfl_xor_sync(0xffffffffu, lrow[h], 1);
    lrow[h] += __shfl_xor_sync(0xffffffffu, lrow[h], 2);
    lrow[h] = lrow[h] == 0.0f ? 0.0f : 1.0f / lrow[h];
  }
#pragma unroll
  for (int j = 0; j < DT; ++j)
#pragma unroll
    for (int v = 0; v < 4; ++v) {
      const int r = warp * 16 + g + 8 * (v >> 1);
      if (r < rows_q) store(r, j * 8 + 2 * t4 + (v & 1), o[j][v] * lrow[v >> 1]);
    }
}"""


def helper() -> str:
    """The prelude text of the "tc_attention" helper (after the "tc_gemm" one, whose
    primitives it uses)."""
    return "\n".join(["// ---- tensor-core attention microkernel (tc_attention_kernel.py) ----",
                      PACK, KERNEL])
