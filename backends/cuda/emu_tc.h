// tdsl CUDA emulation harness, part 2 (appended to emu.h by emulator.py): the tensor-core
// GEMM primitives of tc_kernel.py -- cp.async with commit groups, ldmatrix (x4, .trans) and
// mma.sync m16n8k16 (f16/bf16 -> f32) -- with the register layouts the PTX ISA documents:
//
//   lane = 4 g + t (g = lane / 4, t = lane % 4)
//   ldmatrix .x4: lanes 8 m .. 8 m + 7 give the row addresses of matrix m; register m of a
//     lane holds row g, columns 2t, 2t+1 of matrix m (.trans: rows 2t, 2t+1 of column g)
//   mma A (16x16, row): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
//   mma B (16x8, col):  b0 = (k 2t..2t+1, n g), b1 = (k 2t+8..2t+9, n g)
//   mma C/D (16x8 f32): c0, c1 = (g, 2t), (g, 2t+1); c2, c3 = (g+8, 2t), (g+8, 2t+1)
//
// ldmatrix and mma are warp-collective: every lane posts its operand (row address or
// registers), the warp meets (as at a WMMA operation), then each lane computes its own
// result from the posts.  ldmatrix reads shared memory as its warp (race-tracked like WMMA).
namespace emu {
struct WarpPosts {
  static constexpr int kBytes = 64;
  uint64_t serial = 0;
  int n = 0;
  std::vector<unsigned char> slot[2];
  std::vector<unsigned long long> round;
};
inline WarpPosts posts;

// post ``n`` bytes, meet the warp, return the base of the warp's posts of this round
inline const unsigned char* warp_post(const void* v, size_t n, const void* site) {
  if (!rt.use_fibers) {
    fail("internal", "a warp-collective operation ran in a launch without fibers (tdsl "
                     "emulator bug)");
    return nullptr;
  }
  if (posts.serial != rt.block_serial || posts.n != rt.nthreads) {
    posts.serial = rt.block_serial;
    posts.n = rt.nthreads;
    for (auto& s : posts.slot) s.assign((size_t)rt.nthreads * WarpPosts::kBytes, 0);
    posts.round.assign((size_t)rt.nthreads, 0);
  }
  const int me = rt.cur, base = me & ~31;
  const unsigned long long r = posts.round[me]++;
  memcpy(&posts.slot[r & 1][(size_t)me * WarpPosts::kBytes], v, n);
  wait(AT_WARP, site);
  for (int l = base; l < base + 32; ++l)
    if (l >= rt.nthreads || (posts.round[l] != r + 1 && posts.round[l] != r + 2)) {
      fail("collective", "ldmatrix/mma.sync: lane " + std::to_string(l & 31) + " of the warp "
                         "did not take part (they are warp-collective: all 32 lanes)");
      return nullptr;
    }
  return &posts.slot[r & 1][(size_t)base * WarpPosts::kBytes];
}

template <typename T> inline unsigned bits16(T v) {
  static_assert(sizeof(T) == 2, "16-bit element");
  unsigned short b;
  memcpy(&b, &v, 2);
  return b;
}
inline float half_bits_to_float(unsigned b) {
  _Float16 h;
  unsigned short s = (unsigned short)b;
  memcpy(&h, &s, 2);
  return (float)h;
}
inline float bf16_bits_to_float(unsigned b) {
  unsigned u = b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

template <typename T>
inline void ldsm_x4(unsigned (&r)[4], const SharedPtr<T>& sm, int off, bool trans,
                    const void* site) {
  long long mine = sm.off + off;
  if (mine % 8 != 0) fail("misaligned", "ldmatrix row address is not 16-byte aligned");
  const unsigned char* all = warp_post(&mine, sizeof mine, site);
  if (!all) return;
  auto addr = [&](int l) {
    long long a;
    memcpy(&a, all + (size_t)l * WarpPosts::kBytes, sizeof a);
    return a;
  };
  SharedPtr<T> at{sm.arr, sm.base, 0};
  Collective c;
  const int lane = rt.cur & 31, g = lane >> 2, t = lane & 3;
  for (int m = 0; m < 4; ++m) {
    T lo, hi;
    if (!trans) {
      const long long a = addr(8 * m + g);
      lo = at.read(a + 2 * t);
      hi = at.read(a + 2 * t + 1);
    } else {
      lo = at.read(addr(8 * m + 2 * t) + g);
      hi = at.read(addr(8 * m + 2 * t + 1) + g);
    }
    r[m] = bits16(lo) | (bits16(hi) << 16);
  }
}

template <bool BF16>
inline void mma_m16n8k16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1,
                         const void* site) {
  unsigned mine[6] = {a[0], a[1], a[2], a[3], b0, b1};
  const unsigned char* all = warp_post(mine, sizeof mine, site);
  if (!all) return;
  auto reg = [&](int l, int i) {
    unsigned v;
    memcpy(&v, all + (size_t)l * WarpPosts::kBytes + 4 * i, 4);
    return v;
  };
  auto elem = [&](unsigned v, int half) {
    const unsigned b = half ? v >> 16 : v & 0xffffu;
    return BF16 ? bf16_bits_to_float(b) : half_bits_to_float(b);
  };
  const int lane = rt.cur & 31, g = lane >> 2, t = lane & 3;
  for (int h = 0; h < 2; ++h)        // rows g, g + 8
    for (int cc = 0; cc < 2; ++cc) { // columns 2t, 2t + 1
      const int col = 2 * t + cc;
      float s = d[2 * h + cc];
      for (int k = 0; k < 16; ++k) {
        const float x = elem(reg(4 * g + (k & 7) / 2, (k >> 3) * 2 + h), k & 1);
        const float y = elem(reg(4 * col + (k & 7) / 2, 4 + (k >> 3)), k & 1);
        s += x * y;
      }
      d[2 * h + cc] = s;
    }
}
}  // namespace emu

template <typename T, typename S>
inline void tdsl_tc_cp16(const emu::SharedPtr<T>& sm, int off, const emu::Global<S>& src) {
  tdsl_cp_async<16>(emu::SharedPtr<T>{sm.arr, sm.base, sm.off + off}, src);
}
template <typename T> inline emu::SharedPtr<T> tdsl_tc_sbase(const emu::SharedPtr<T>& sm) {
  return sm;    // the device's 32-bit shared-window base; here the array itself
}
template <typename T> inline void tdsl_tc_zero16(const emu::SharedPtr<T>& sm, int off) {
  for (int e = 0; e < 16 / (int)sizeof(T); ++e) sm.write(off + e, T{});
}
template <typename T> inline void tdsl_tc_st(const emu::SharedPtr<T>& sm, int off, T v) {
  sm.write(off, v);
}
inline void tdsl_tc_commit() { emu::async_commit(); }
template <int N> inline void tdsl_tc_wait() { emu::async_wait_group(N); }
template <typename T>
__attribute__((noinline)) void tdsl_tc_ldsm_x4(unsigned (&r)[4], const emu::SharedPtr<T>& sm,
                                               int off) {
  emu::ldsm_x4(r, sm, off, false, __builtin_return_address(0));
}
template <typename T>
__attribute__((noinline)) void tdsl_tc_ldsm_x4_t(unsigned (&r)[4], const emu::SharedPtr<T>& sm,
                                                 int off) {
  emu::ldsm_x4(r, sm, off, true, __builtin_return_address(0));
}
template <bool BF16>
__attribute__((noinline)) void tdsl_tc_mma(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                           unsigned b1) {
  emu::mma_m16n8k16<BF16>(d, a, b0, b1, __builtin_return_address(0));
}
