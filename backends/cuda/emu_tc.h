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
#include <algorithm>
#include <map>
#include <tuple>

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

// ---- shared-memory bank use of the tensor-core primitives (CUDAModule.emulate_bank_use) ----
// Judged from the addresses the kernel really computes, as backends/cuda/static/banks.py
// judges the IR's: 32 banks of 4-byte words; a phase (8 lanes of 16 bytes, or one 8 x 16-byte
// matrix of an ldmatrix) takes as many wavefronts as the most distinct words one bank holds.
// The accesses the IR walk cannot see: ldmatrix (kinds 0, 1: .trans), the 16-byte cp.async
// tile fills (kind 2) and the element-wise tile stores (kind 3: gathered tiles, tails), whose
// lanes are grouped into warp requests by each lane's count of calls at the call site (lanes
// of a warp issue a site's n-th call together).
struct BankUse {
  unsigned long long phases = 0, wavefronts = 0, worst = 0;
};
inline constexpr int kBankKinds = 4;
inline BankUse bank_use[kBankKinds];
// counting is off unless asked for (tdsl_emu_bank_use(out, 1)): plain emulation pays nothing
inline bool count_banks = false;

inline int phase_ways(const long long* bytes, int n, int width) {
  long long words[32 * 4];
  int nw = 0;
  for (int i = 0; i < n; ++i) {
    if (bytes[i] < 0) continue;
    for (long long w = bytes[i] / 4; w <= (bytes[i] + width - 1) / 4; ++w) words[nw++] = w;
  }
  int ways = 0;
  for (int b = 0; b < 32; ++b) {
    long long seen[32 * 4];
    int ns = 0;
    for (int i = 0; i < nw; ++i) {
      if (((words[i] % 32) + 32) % 32 != b) continue;
      bool dup = false;
      for (int j = 0; j < ns && !dup; ++j) dup = seen[j] == words[i];
      if (!dup) seen[ns++] = words[i];
    }
    ways = ns > ways ? ns : ways;
  }
  return ways;
}
inline void count_phase(int kind, const long long* bytes, int n, int width) {
  const int ways = phase_ways(bytes, n, width);
  if (!ways) return;
  BankUse& u = bank_use[kind];
  ++u.phases;
  u.wavefronts += (unsigned long long)ways;
  if ((unsigned long long)ways > u.worst) u.worst = (unsigned long long)ways;
}

// accesses of lanes issued one at a time, met into warp requests
struct OpenRequest {
  int kind = 0, width = 0;
  std::vector<long long> lanes;   // byte offsets, -1: no access (yet)
};
struct WarpRequests {
  uint64_t serial = 0;
  std::map<std::pair<const void*, int>, unsigned> calls;                 // (site, thread)
  std::map<std::tuple<const void*, int, unsigned>, OpenRequest> open;    // (site, warp, n)
};
inline WarpRequests warp_requests;

// a warp request's phases: 128 bytes each (8 lanes of 16 bytes, 16 of 8, 32 of 4 or less)
inline void close_request(const OpenRequest& q) {
  const int per = q.width > 8 ? 8 : q.width > 4 ? 16 : 32;
  for (int l = 0; l < 32; l += per) count_phase(q.kind, q.lanes.data() + l, per, q.width);
}
inline void flush_requests() {
  for (auto& kv : warp_requests.open) close_request(kv.second);
  warp_requests.open.clear();
  warp_requests.calls.clear();
}
inline void post_request(int kind, const void* site, long long byte, int width) {
  if (!count_banks) return;
  if (warp_requests.serial != rt.block_serial) {
    flush_requests();
    warp_requests.serial = rt.block_serial;
  }
  const int me = rt.cur, warp = me / 32;
  const unsigned n = warp_requests.calls[{site, me}]++;
  OpenRequest& q = warp_requests.open[{site, warp, n}];
  if (q.lanes.empty()) q = OpenRequest{kind, width, std::vector<long long>(32, -1)};
  q.lanes[me & 31] = byte;
  int posted = 0;
  for (long long b : q.lanes) posted += b >= 0;
  if (posted == std::min(32, rt.nthreads - warp * 32)) {
    close_request(q);
    warp_requests.open.erase({site, warp, n});
  }
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
  if (count_banks && lane == 0)        // one matrix (8 rows of 16 bytes) a phase
    for (int m = 0; m < 4; ++m) {
      long long rows[8];
      for (int i = 0; i < 8; ++i) rows[i] = addr(8 * m + i) * (long long)sizeof(T);
      count_phase(trans ? 1 : 0, rows, 8, 16);
    }
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
__attribute__((noinline)) void tdsl_tc_cp16(const emu::SharedPtr<T>& sm, int off,
                                            const emu::Global<S>& src) {
  emu::post_request(2, __builtin_return_address(0), (sm.off + off) * (long long)sizeof(T), 16);
  tdsl_cp_async<16>(emu::SharedPtr<T>{sm.arr, sm.base, sm.off + off}, src);
}
template <typename T> inline emu::SharedPtr<T> tdsl_tc_sbase(const emu::SharedPtr<T>& sm) {
  return sm;    // the device's 32-bit shared-window base; here the array itself
}
template <typename T> inline void tdsl_tc_zero16(const emu::SharedPtr<T>& sm, int off) {
  for (int e = 0; e < 16 / (int)sizeof(T); ++e) sm.write(off + e, T{});
}
template <typename T>
__attribute__((noinline)) void tdsl_tc_st(const emu::SharedPtr<T>& sm, int off, T v) {
  emu::post_request(3, __builtin_return_address(0), (sm.off + off) * (long long)sizeof(T),
                    (int)sizeof(T));
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

// the bank use counted since the last call (kind-major: phases, wavefronts, worst), then reset;
// counting goes on after the call while ``on`` is 1
extern "C" __attribute__((visibility("default"))) void tdsl_emu_bank_use(unsigned long long* out,
                                                                         int on) {
  emu::flush_requests();
  emu::count_banks = on != 0;
  for (int k = 0; k < emu::kBankKinds; ++k) {
    out[3 * k] = emu::bank_use[k].phases;
    out[3 * k + 1] = emu::bank_use[k].wavefronts;
    out[3 * k + 2] = emu::bank_use[k].worst;
    emu::bank_use[k] = emu::BankUse{};
  }
}
