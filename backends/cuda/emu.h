// tdsl's CUDA emulation harness: runs unchanged CUDA C kernels on the CPU.
//
// The kernel source is compiled with g++ after this header.  Each block runs on one OS
// thread; its CUDA threads are ucontext fibers that switch back to a block scheduler at
// __syncthreads() (and, warp by warp, at warp-synchronous operations: __syncwarp and the
// WMMA shims), so blockIdx/threadIdx are per fiber and `__shared__` storage is per block.
//
// Every access to a tdsl_shared array goes through a proxy that keeps shadow state per
// element: who wrote it and who read it in the current barrier interval.  A location
// written by one thread and read or written by another between two barriers is reported
// as a race; so are out-of-bounds shared indices and reads of shared memory no thread of
// the block has written.  Global buffers reach the kernel as emu::Global pointers (the
// emulator's launcher wraps them) with shadow state per element for the launch: a location
// written by one block and read or written by another block of the same launch, or by two
// threads of a block between two barriers, is a race; an index outside the buffer is
// reported.  __syncwarp orders the lanes of a warp: a warp-collective operation (WMMA)
// touching what a lane of its warp touched with no __syncwarp between is a race.  Only the
// first problem of a launch is described (with a count).
#pragma once
#define TDSL_EMULATION 1

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <functional>
#include <source_location>
#include <string>
#include <type_traits>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __shared__ static
#define __constant__ static

struct uint3 { unsigned int x, y, z; };
struct dim3 { unsigned int x, y, z; };

// CUDA's built-in vector types that generated vector loads and stores use, aligned as on a GPU
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) int2 { int x, y; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(16) double2 { double x, y; };
struct alignas(16) longlong2 { long long x, y; };

namespace emu {

enum State { RUNNABLE, AT_BARRIER, AT_WARP, DONE };

struct Fiber {
  ucontext_t ctx;
  State state;
  const void* site;
  bool syncwarp;  // waits at __syncwarp (orders its warp's lanes), not at a WMMA operation
};

constexpr int kNoActor = -1;
constexpr int kWarpActor = 1024;  // actor ids from here on stand for a whole warp

struct Shadow {
  uint64_t w_block;   // block serial of the last write (initialized-ness)
  uint32_t w_epoch;   // barrier interval of the last write
  uint32_t r_epoch;   // barrier interval of the reads below
  uint32_t w_wep, r_wep, o_wep;  // __syncwarp interval of the actor's warp at each access
  int16_t w_actor, r_actor, r_other;
  uint64_t a_block;   // block serial while a cp.async copy into it is in flight (else 0)
};

struct SharedBase;
struct AsyncCopy {       // a cp.async copy in flight (see async_issue)
  SharedBase* arr;
  long long i;           // first element
  int n;                 // elements
  int thread;
  int group;             // the thread's commit group it belongs to (commits before it)
  unsigned char bytes[16];
};
inline void (*tdsl_block_hook)() = nullptr;  // per-block state of later sections (shuffles)

struct Runtime {
  uint3 thread_idx{0, 0, 0}, block_idx{0, 0, 0};
  dim3 block_dim{1, 1, 1}, grid_dim{1, 1, 1};
  int cur = 0, nthreads = 0;
  bool collective = false;
  uint32_t epoch = 1;
  uint64_t block_serial = 1;
  std::vector<Fiber> fibers;
  ucontext_t sched;
  bool use_fibers = false, check = true, error = false, abort = false;
  int priority = 0;  // of the report kept: a race (2) replaces any other finding (1)
  char* stacks = nullptr;
  size_t mapped = 0, stack_bytes = 256 * 1024, mapped_stride = 0;
  const std::function<void()>* body = nullptr;
  long nerrors = 0;
  std::string report;
  std::vector<SharedBase*> shared;
  std::vector<uint32_t> warp_epoch;  // per warp of the block: its current __syncwarp interval
  uint32_t wep_counter = 1;
  bool reverse = false;               // visit blocks in reverse order
  uint32_t block_lin = 0;             // 1 + the linear index of the running block
  std::vector<struct GlobalRegion*> globals;  // this launch's global buffers
  std::vector<AsyncCopy> async;  // cp.async copies issued and not yet waited for
  std::vector<int> commits;      // per thread of the block: cp.async groups committed
};
inline Runtime rt;

inline int actor() { return rt.collective ? kWarpActor + rt.cur / 32 : rt.cur; }
inline int warp_of(int a) { return a >= kWarpActor ? a - kWarpActor : a / 32; }
inline uint32_t cur_wep() {
  size_t w = (size_t)(rt.cur / 32);
  return w < rt.warp_epoch.size() ? rt.warp_epoch[w] : 0;
}

// may actor ``a`` (whose warp was in __syncwarp interval ``a_wep`` then) and the current
// actor ``b`` touch one location in the same barrier interval?  Lanes of one warp (and the
// warp's collective operations) are ordered by a __syncwarp between them; nothing else is.
inline bool conflict(int a, uint32_t a_wep, int b) {
  if (a == b || a == kNoActor || b == kNoActor) return false;
  if (warp_of(a) != warp_of(b)) return true;
  return a_wep == cur_wep();
}

inline std::string where() {
  char buf[200];
  snprintf(buf, sizeof buf, "block=%u,%u,%u\nbdim=%u,%u,%u\ngrid=%u,%u,%u\nthread=%d\n",
           rt.block_idx.x, rt.block_idx.y, rt.block_idx.z, rt.block_dim.x, rt.block_dim.y,
           rt.block_dim.z, rt.grid_dim.x, rt.grid_dim.y, rt.grid_dim.z, actor());
  return buf;
}

// fatal findings (divergence, deadlock, trap) replace any earlier report
inline void fail(const char* kind, const std::string& text) {
  rt.nerrors++;
  if (rt.error && rt.priority >= 3) return;
  rt.error = true;
  rt.priority = 3;
  rt.report = std::string("kind=") + kind + "\n" + where() + "text=" + text + "\n";
}

struct SharedBase {
  unsigned line = 0;
  long long count = 0;
  size_t elem = 0;
  unsigned char* bytes = nullptr;
  Shadow* shadow = nullptr;

  void init(unsigned char* b, Shadow* s, long long n, size_t e, const std::source_location& loc) {
    bytes = b; shadow = s; count = n; elem = e; line = loc.line();
    memset(bytes, 0xff, n * e);  // uninitialized: NaN for floats, -1 for integers
    memset(shadow, 0, sizeof(Shadow) * n);
    rt.shared.push_back(this);
  }

  void report(const char* kind, long long i, const std::string& more) {
    rt.nerrors++;
    int priority = strcmp(kind, "race") == 0 ? 2 : 1;
    if (rt.error && priority <= rt.priority) return;
    rt.error = true;
    rt.priority = priority;
    char buf[96];
    snprintf(buf, sizeof buf, "line=%u\noffset=%lld\nsize=%lld\n", line, i, count);
    rt.report = std::string("kind=") + kind + "\n" + where() + buf + more;
  }

  bool in_bounds(long long i) {
    if (i >= 0 && i < count) return true;
    report("oob", i, "");
    return false;
  }

  void race(const char* what, long long i, int first, int second) {
    char buf[96];
    snprintf(buf, sizeof buf, "race=%s\nfirst=%d\nsecond=%d\n", what, first, second);
    report("race", i, buf);
  }

  void in_flight(long long i) {
    if (shadow[i].a_block == rt.block_serial)
      report("async", i, "");
  }

  void on_read(long long i) {
    if (!rt.check) return;
    Shadow& s = shadow[i];
    int a = actor();
    in_flight(i);
    if (s.w_block != rt.block_serial)
      report("uninit", i, "");
    else if (s.w_epoch == rt.epoch && conflict(s.w_actor, s.w_wep, a))
      race("read-after-write", i, s.w_actor, a);
    if (s.r_epoch != rt.epoch) {
      s.r_epoch = rt.epoch; s.r_actor = (int16_t)a; s.r_wep = cur_wep(); s.r_other = kNoActor;
    } else if (s.r_actor == a) {
      s.r_wep = cur_wep();
    } else {
      s.r_other = (int16_t)a; s.o_wep = cur_wep();
    }
  }

  void on_write(long long i) {
    if (!rt.check) return;
    Shadow& s = shadow[i];
    int a = actor();
    in_flight(i);
    if (s.w_block == rt.block_serial && s.w_epoch == rt.epoch &&
        conflict(s.w_actor, s.w_wep, a))
      race("write-after-write", i, s.w_actor, a);
    if (s.r_epoch == rt.epoch) {
      if (conflict(s.r_actor, s.r_wep, a)) race("write-after-read", i, s.r_actor, a);
      else if (conflict(s.r_other, s.o_wep, a)) race("write-after-read", i, s.r_other, a);
    }
    s.w_block = rt.block_serial; s.w_epoch = rt.epoch; s.w_actor = (int16_t)a;
    s.w_wep = cur_wep();
  }
};

template <typename T> struct SharedRef {
  SharedBase* arr;
  T* p;
  long long i;
  operator T() const { if (arr) arr->on_read(i); return *p; }
  SharedRef& operator=(const T& v) { if (arr) arr->on_write(i); *p = v; return *this; }
  SharedRef& operator=(const SharedRef& o) { T v = o; return *this = v; }
};

template <typename T> struct SharedPtr {
  SharedBase* arr;
  T* base;
  long long off;
  T read(long long j) const {
    long long i = off + j;
    if (!arr->in_bounds(i)) return T{};
    arr->on_read(i);
    return base[i];
  }
  void write(long long j, T v) const {
    long long i = off + j;
    if (!arr->in_bounds(i)) return;
    arr->on_write(i);
    base[i] = v;
  }
};


// ---- cp.async: a copy that reads global memory when issued and lands at the thread's wait ------
// On a GPU the shared destination is written at some time between the copy and the thread's
// cp.async wait, so: the copy counts as a write when issued (a race with other threads'
// accesses in that barrier interval) and again when it lands (at the wait); any access to the
// destination in between, by any thread, is reported (a missing or late wait); and a copy
// still in flight when its thread ends is reported.
inline void async_issue(SharedBase* arr, long long i, int n, const void* value) {
  if (!arr->in_bounds(i) || !arr->in_bounds(i + n - 1)) return;
  if ((int)rt.commits.size() != rt.nthreads) rt.commits.assign((size_t)rt.nthreads, 0);
  AsyncCopy c{arr, i, n, rt.cur, rt.commits[(size_t)rt.cur], {}};
  memcpy(c.bytes, value, (size_t)n * arr->elem);
  for (int j = 0; j < n; ++j) {
    arr->on_write(i + j);
    if (rt.check) arr->shadow[i + j].a_block = rt.block_serial;
  }
  rt.async.push_back(c);
}
// the thread's copies land, all of them (wait_all) or those of every committed group but the
// newest ``pending`` ones (cp.async.wait_group pending)
inline void async_land(int pending) {
  if ((int)rt.commits.size() != rt.nthreads) rt.commits.assign((size_t)rt.nthreads, 0);
  const int upto = pending < 0 ? 1 << 30 : rt.commits[(size_t)rt.cur] - pending;
  std::vector<AsyncCopy> keep;
  for (const AsyncCopy& c : rt.async) {
    if (c.thread != rt.cur || c.group >= upto) { keep.push_back(c); continue; }
    for (int j = 0; j < c.n; ++j) {
      c.arr->shadow[c.i + j].a_block = 0;
      c.arr->on_write(c.i + j);
    }
    memcpy(c.arr->bytes + (size_t)c.i * c.arr->elem, c.bytes, (size_t)c.n * c.arr->elem);
  }
  rt.async.swap(keep);
}
inline void async_wait_all() { async_land(-1); }
inline void async_wait_group(int pending) { async_land(pending); }
inline void async_commit() {
  if ((int)rt.commits.size() != rt.nthreads) rt.commits.assign((size_t)rt.nthreads, 0);
  rt.commits[(size_t)rt.cur]++;
}
inline void async_end_block() {
  if (rt.async.empty()) return;
  const AsyncCopy& c = rt.async.front();
  for (const AsyncCopy& x : rt.async)
    for (int j = 0; j < x.n; ++j) x.arr->shadow[x.i + j].a_block = 0;
  char buf[160];
  snprintf(buf, sizeof buf, "%zu cp.async copies (the first by thread %d, into shared memory "
           "declared at line %u) were never waited for (no cp.async wait before the block ended)",
           rt.async.size(), c.thread, c.arr->line);
  rt.async.clear();
  if (rt.error) { rt.nerrors++; return; }   // an access while in flight was seen first
  fail("async-end", buf);
}

// ---- global memory: buffers of a launch with shadow state per element -----------------------------
struct GAccess {          // one access of a launch: 0 block = none
  uint32_t block;         // 1 + linear block index
  uint32_t epoch;         // barrier interval (unique per block and interval)
  uint32_t wep;           // __syncwarp interval of the actor's warp
  int16_t actor;
};
struct GShadow { GAccess w, r, o; };

struct GlobalRegion {
  const char* name;
  unsigned char* base;
  long long nbytes;       // < 0: unknown (no bounds check)
  std::vector<GShadow> shadow;

  void report(const char* kind, long long byte_off, const std::string& more) {
    rt.nerrors++;
    int priority = strcmp(kind, "grace") == 0 ? 2 : 1;
    if (rt.error && priority <= rt.priority) return;
    rt.error = true;
    rt.priority = priority;
    char buf[200];
    snprintf(buf, sizeof buf, "gname=%s\nbyte=%lld\nnbytes=%lld\n", name, byte_off, nbytes);
    rt.report = std::string("kind=") + kind + "\n" + where() + buf + more;
  }
  bool in_bounds(long long byte_off, size_t size) {
    if (nbytes < 0 || (byte_off >= 0 && byte_off + (long long)size <= nbytes)) return true;
    report("goob", byte_off, "");
    return false;
  }
  static bool clash(const GAccess& p, int a) {
    if (p.block == 0) return false;
    if (p.block != rt.block_lin) return true;                 // another block, same launch
    return p.epoch == rt.epoch && conflict(p.actor, p.wep, a);  // same block, no barrier
  }
  void race(const char* what, long long byte_off, const GAccess& p, int a) {
    char buf[160];
    snprintf(buf, sizeof buf, "race=%s\nfirst=%d\nfirst_block=%u\nsecond=%d\nsecond_block=%u\n",
             what, p.actor, p.block - 1, a, rt.block_lin - 1);
    report("grace", byte_off, buf);
  }
  GShadow* cell(long long byte_off, size_t size) {
    if (!rt.check || shadow.empty()) return nullptr;
    long long e = byte_off / (long long)size;
    return e >= 0 && e < (long long)shadow.size() ? &shadow[e] : nullptr;
  }
  GAccess now(int a) { return GAccess{rt.block_lin, rt.epoch, cur_wep(), (int16_t)a}; }
  void on_read(long long byte_off, size_t size) {
    GShadow* s = cell(byte_off, size);
    if (!s) return;
    int a = actor();
    if (clash(s->w, a)) race("read-after-write", byte_off, s->w, a);
    if (s->r.block == 0 || (s->r.block == rt.block_lin && s->r.actor == a)) s->r = now(a);
    else s->o = now(a);
  }
  void on_write(long long byte_off, size_t size) {
    GShadow* s = cell(byte_off, size);
    if (!s) return;
    int a = actor();
    if (clash(s->w, a)) race("write-after-write", byte_off, s->w, a);
    else if (clash(s->r, a)) race("write-after-read", byte_off, s->r, a);
    else if (clash(s->o, a)) race("write-after-read", byte_off, s->o, a);
    s->w = now(a);
    s->r = s->o = GAccess{0, 0, 0, 0};
  }
};

// a global buffer's element, read and written through the shadow
template <typename T> struct GlobalRef {
  using V = std::remove_const_t<T>;
  GlobalRegion* g;
  T* p;
  long long off;  // bytes from the region's start
  operator V() const {
    if (!g->in_bounds(off, sizeof(T))) return V{};
    g->on_read(off, sizeof(T));
    return *p;
  }
  GlobalRef& operator=(const V& v) {
    static_assert(!std::is_const_v<T>, "store to a read-only buffer");
    if (!g->in_bounds(off, sizeof(T))) return *this;
    g->on_write(off, sizeof(T));
    *p = v;
    return *this;
  }
  GlobalRef& operator=(const GlobalRef& o) { V v = o; return *this = v; }
  // &X[i] for atomics: the element's address, bounds-checked; atomics are not races
  T* operator&() const {
    static V dummy;
    return g->in_bounds(off, sizeof(T)) ? p : &dummy;
  }
};

// what a kernel's global-buffer parameter is under emulation: a pointer with its region
template <typename T> struct Global {
  GlobalRegion* g;
  T* p;
  GlobalRef<T> operator[](long long i) const {
    return {g, p + i, (long long)((const unsigned char*)(p + i) - g->base)};
  }
  Global operator+(long long i) const { return {g, p + i}; }
  Global operator-(long long i) const { return {g, p - i}; }
  explicit operator unsigned long long() const { return (unsigned long long)(uintptr_t)p; }
  explicit operator uintptr_t() const requires (!std::is_same_v<uintptr_t, unsigned long long>)
  { return (uintptr_t)p; }
  std::remove_const_t<T> read(long long j) const { return (*this)[j]; }
  void write(long long j, std::remove_const_t<T> v) const { (*this)[j] = v; }
};

}  // namespace emu
// a buffer handed to a td.call_extern device function: the plain pointer (its accesses are
// neither bounds- nor race-checked)
template <typename T> inline T* tdsl_raw(const emu::Global<T>& g) { return g.p; }
template <typename T> inline T* tdsl_raw(T* p) { return p; }
namespace emu {

// the launcher's wrapping of argument ``ptr`` (``nbytes`` of memory from it, -1 unknown)
inline GlobalRegion* region(void* ptr, long long nbytes, const char* name) {
  for (GlobalRegion* g : rt.globals)
    if (g->base == (unsigned char*)ptr) return g;  // an array passed twice shares its shadow
  GlobalRegion* g = new GlobalRegion{name, (unsigned char*)ptr, nbytes, {}};
  rt.globals.push_back(g);
  return g;
}
template <typename T> inline Global<T> global(void* ptr, long long nbytes, const char* name) {
  GlobalRegion* g = region(ptr, nbytes, name);
  if (nbytes > 0 && g->shadow.empty()) g->shadow.resize((size_t)nbytes / sizeof(T) + 1);
  return {g, (T*)ptr};
}
inline void end_launch() {
  for (GlobalRegion* g : rt.globals) delete g;
  rt.globals.clear();
}

// ---- fibers and the block scheduler ------------------------------------------------------------
inline void wait(State st, const void* site, bool syncwarp = false) {
  if (!rt.use_fibers) {
    fail("internal", "a barrier ran in a launch without fibers (tdsl emulator bug)");
    return;
  }
  Fiber& f = rt.fibers[rt.cur];
  f.state = st;
  f.site = site;
  f.syncwarp = syncwarp;
  swapcontext(&f.ctx, &rt.sched);
}

inline void set_thread(int t) {
  rt.cur = t;
  unsigned bx = rt.block_dim.x, by = rt.block_dim.y;
  rt.thread_idx = {t % bx, (t / bx) % by, t / (bx * by)};
}

inline void fiber_main() {
  (*rt.body)();
  rt.fibers[rt.cur].state = DONE;
}

inline size_t stack_stride() { return rt.stack_bytes + (size_t)sysconf(_SC_PAGESIZE); }

inline bool map_stacks(int n) {
  size_t need = stack_stride() * (size_t)n;
  if (rt.mapped >= need && rt.mapped_stride == stack_stride()) return true;
  if (rt.stacks) munmap(rt.stacks, rt.mapped);
  void* p = mmap(nullptr, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) { rt.stacks = nullptr; rt.mapped = 0; return false; }
  rt.stacks = (char*)p;
  rt.mapped = need;
  rt.mapped_stride = stack_stride();
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  for (int t = 0; t < n; ++t) mprotect(rt.stacks + stack_stride() * t, page, PROT_NONE);  // guard
  return true;
}

inline void run_block() {
  const int n = rt.nthreads;
  rt.warp_epoch.assign((size_t)(n + 31) / 32, 0);
  for (auto& w : rt.warp_epoch) w = ++rt.wep_counter;
  if (!rt.use_fibers) {
    for (int t = 0; t < n && !rt.abort; ++t) { set_thread(t); (*rt.body)(); }
    return;
  }
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  for (int t = 0; t < n; ++t) {
    Fiber& f = rt.fibers[t];
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = rt.stacks + stack_stride() * t + page;
    f.ctx.uc_stack.ss_size = rt.stack_bytes;
    f.ctx.uc_link = &rt.sched;
    makecontext(&f.ctx, (void (*)())fiber_main, 0);
    f.state = RUNNABLE;
    f.site = nullptr;
  }
  for (;;) {
    for (int t = 0; t < n; ++t) {
      if (rt.fibers[t].state != RUNNABLE) continue;
      set_thread(t);
      swapcontext(&rt.sched, &rt.fibers[t].ctx);
      if (rt.abort) return;
    }
    int done = 0, at_bar = 0;
    for (int t = 0; t < n; ++t) {
      done += rt.fibers[t].state == DONE;
      at_bar += rt.fibers[t].state == AT_BARRIER;
    }
    if (done == n) return;
    bool released = false;
    for (int lo = 0; lo < n; lo += 32) {
      int hi = lo + 32 < n ? lo + 32 : n;
      bool any = false, all = true, sync = true;
      for (int t = lo; t < hi; ++t) {
        State s = rt.fibers[t].state;
        if (s == AT_WARP) { any = true; sync = sync && rt.fibers[t].syncwarp; }
        else if (s != DONE) all = false;
      }
      if (any && all) {
        for (int t = lo; t < hi; ++t)
          if (rt.fibers[t].state == AT_WARP) rt.fibers[t].state = RUNNABLE;
        if (sync) rt.warp_epoch[lo / 32] = ++rt.wep_counter;  // __syncwarp orders the lanes
        released = true;
      }
    }
    if (released) continue;
    if (at_bar > 0 && at_bar + done == n) {
      if (done > 0) {
        fail("divergent", std::to_string(done) + " thread(s) of the block finished while " +
                              std::to_string(at_bar) + " wait at __syncthreads(): a barrier " +
                              "not reached by all threads");
        rt.abort = true;
        return;
      }
      const void* site = rt.fibers[0].site;
      for (int t = 1; t < n; ++t) {
        if (rt.fibers[t].site != site) {
          fail("divergent", "threads of the block wait at different __syncthreads() calls "
                            "(thread 0 and thread " + std::to_string(t) + ")");
          rt.abort = true;
          return;
        }
      }
      rt.epoch++;
      for (int t = 0; t < n; ++t) rt.fibers[t].state = RUNNABLE;
      continue;
    }
    fail("deadlock", "some threads wait at __syncthreads() while others of their warp wait at a "
                     "warp-synchronous operation (__syncwarp / WMMA)");
    rt.abort = true;
    return;
  }
}

// dims: grid x, y, z, block x, y, z, fiber stack bytes.  flags: 1 = run threads as fibers,
// 2 = check races, 4 = visit the blocks in reverse order.
inline int launch(const long long* dims, int flags, char* msg, int msglen,
                  const std::function<void()>& body) {
  rt.grid_dim = {(unsigned)dims[0], (unsigned)dims[1], (unsigned)dims[2]};
  rt.block_dim = {(unsigned)dims[3], (unsigned)dims[4], (unsigned)dims[5]};
  rt.nthreads = (int)(dims[3] * dims[4] * dims[5]);
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  rt.stack_bytes = ((size_t)dims[6] + page - 1) / page * page;
  rt.use_fibers = flags & 1;
  rt.check = (flags & 2) != 0;
  rt.error = rt.abort = false;
  rt.priority = 0;
  rt.collective = false;
  rt.nerrors = 0;
  rt.report.clear();
  rt.body = &body;
  if (rt.use_fibers) {
    if (!map_stacks(rt.nthreads)) {
      snprintf(msg, msglen, "kind=internal\ntext=cannot map %d fiber stacks\n", rt.nthreads);
      end_launch();
      return 1;
    }
    rt.fibers.resize(rt.nthreads);
  }
  rt.reverse = (flags & 4) != 0;
  const unsigned long long nblocks =
      (unsigned long long)rt.grid_dim.x * rt.grid_dim.y * rt.grid_dim.z;
  for (unsigned long long b = 0; b < nblocks && !rt.abort; ++b) {
    unsigned long long lin = rt.reverse ? nblocks - 1 - b : b;
    unsigned bx = (unsigned)(lin % rt.grid_dim.x);
    unsigned by = (unsigned)(lin / rt.grid_dim.x % rt.grid_dim.y);
    unsigned bz = (unsigned)(lin / rt.grid_dim.x / rt.grid_dim.y);
    rt.block_idx = {bx, by, bz};
    rt.block_lin = (uint32_t)(lin + 1);
    rt.block_serial++;
    rt.epoch++;
    for (SharedBase* s : rt.shared) memset(s->bytes, 0xff, s->count * s->elem);
    if (tdsl_block_hook) tdsl_block_hook();
    rt.async.clear();
    rt.commits.assign((size_t)rt.nthreads, 0);
    run_block();
    async_end_block();
  }
  rt.body = nullptr;
  end_launch();
  if (!rt.error) return 0;
  std::string out = rt.report + "count=" + std::to_string(rt.nerrors) + "\n";
  snprintf(msg, msglen, "%s", out.c_str());
  return 1;
}

struct Collective {  // a warp-collective operation: its accesses belong to the warp
  Collective() { rt.collective = true; }
  ~Collective() { rt.collective = false; }
};

}  // namespace emu

#define threadIdx (::emu::rt.thread_idx)
#define blockIdx (::emu::rt.block_idx)
#define blockDim (::emu::rt.block_dim)
#define gridDim (::emu::rt.grid_dim)
#define warpSize 32

__attribute__((noinline)) inline void __syncthreads() {
  emu::wait(emu::AT_BARRIER, __builtin_return_address(0));
}
// A barrier is identified by its source line, not by its call's return address: the compiler
// may duplicate one call (jump threading a chain of thread-dependent ifs between barriers), and
// threads on the two copies would look divergent.
namespace emu {
__attribute__((noinline)) inline void sync_at(long line) {
  wait(AT_BARRIER, (const void*)(uintptr_t)line);
}
}  // namespace emu
#define __syncthreads() ::emu::sync_at(__LINE__)
__attribute__((noinline)) inline void __syncwarp(unsigned = 0xffffffffu) {
  emu::wait(emu::AT_WARP, __builtin_return_address(0), true);
}
inline void __threadfence() {}
inline void __threadfence_block() {}
inline void __trap() {
  emu::fail("trap", "__trap() executed: a thread-bound loop is longer than the launch extent of "
                    "its thread axis");
  emu::rt.abort = true;
  if (emu::rt.use_fibers) {
    emu::rt.fibers[emu::rt.cur].state = emu::DONE;
    swapcontext(&emu::rt.fibers[emu::rt.cur].ctx, &emu::rt.sched);
  }
}

// ---- warp shuffles: a lane posts its value, the warp meets (as at __syncwarp), each lane reads
// its source lane's post.  Posts alternate between two slots per lane (a lane released first
// may post its next shuffle, never the one after, before the others have read); a source lane outside the
// mask, past the block, or that did not post this round is reported.
namespace emu {
struct ShuffleSlots {
  std::vector<unsigned long long> value[2];
  std::vector<unsigned long long> round;  // shuffles posted by each lane
  void reset(int n) {
    for (auto& v : value) v.assign(n, 0);
    round.assign(n, 0);
  }
};
inline ShuffleSlots shfl;
inline void reset_shuffles() { shfl.reset(rt.nthreads); }
inline const bool shuffles_hooked = (tdsl_block_hook = reset_shuffles, true);

template <typename T> T shuffle(unsigned mask, T v, int src_lane, int width, const void* site) {
  static_assert(sizeof(T) <= sizeof(unsigned long long), "shuffle of a wider type");
  if (!rt.use_fibers) {
    fail("internal", "a warp shuffle ran in a launch without fibers (tdsl emulator bug)");
    return v;
  }
  const int me = rt.cur, base = me & ~31;
  if ((int)shfl.round.size() != rt.nthreads) shfl.reset(rt.nthreads);
  const unsigned long long r = shfl.round[me]++;
  unsigned long long bits = 0;
  memcpy(&bits, &v, sizeof(T));
  shfl.value[r & 1][me] = bits;
  if (!((mask >> (me & 31)) & 1u))
    fail("shuffle", "a lane outside the shuffle's mask called __shfl_*_sync");
  wait(AT_WARP, site);
  const int seg = (me & 31) & ~(width - 1);
  const int src = base + seg + (src_lane & (width - 1));
  if (src >= rt.nthreads || !((mask >> (src & 31)) & 1u) || (shfl.round[src] != r + 1 && shfl.round[src] != r + 2)) {
    fail("shuffle", "__shfl_*_sync reads lane " + std::to_string(src & 31) + " of its warp, "
                    "which is outside the mask or did not take part in this shuffle");
    return v;
  }
  T out;
  memcpy(&out, &shfl.value[r & 1][src], sizeof(T));
  return out;
}
}  // namespace emu

template <typename T>
__attribute__((noinline)) T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return emu::shuffle(mask, v, (emu::rt.cur & 31 & (width - 1)) ^ lane_mask, width,
                      __builtin_return_address(0));
}
template <typename T>
__attribute__((noinline)) T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  return emu::shuffle(mask, v, src_lane, width, __builtin_return_address(0));
}
template <typename T>
__attribute__((noinline)) T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = emu::rt.cur & 31 & (width - 1);
  const int src = lane + (int)delta < width ? lane + (int)delta : lane;
  return emu::shuffle(mask, v, src, width, __builtin_return_address(0));
}

// ---- device functions kernels call -----------------------------------------------------------------
#define TDSL_EMU_MINMAX(T) \
  inline T min(T a, T b) { return a < b ? a : b; } \
  inline T max(T a, T b) { return a < b ? b : a; }
TDSL_EMU_MINMAX(int)
TDSL_EMU_MINMAX(unsigned int)
TDSL_EMU_MINMAX(long)
TDSL_EMU_MINMAX(unsigned long)
TDSL_EMU_MINMAX(long long)
TDSL_EMU_MINMAX(unsigned long long)
TDSL_EMU_MINMAX(float)
TDSL_EMU_MINMAX(double)
#undef TDSL_EMU_MINMAX

inline float __int_as_float(int x) { float f; memcpy(&f, &x, 4); return f; }
inline int __float_as_int(float x) { int i; memcpy(&i, &x, 4); return i; }
inline double __longlong_as_double(long long x) { double d; memcpy(&d, &x, 8); return d; }
inline long long __double_as_longlong(double x) { long long i; memcpy(&i, &x, 8); return i; }
inline float __fdividef(float a, float b) { return a / b; }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }

template <typename T> inline T atomicAdd(T* p, T v) { T o = *p; *p = o + v; return o; }
template <typename T> inline T atomicMax(T* p, T v) { T o = *p; *p = o < v ? v : o; return o; }
template <typename T> inline T atomicMin(T* p, T v) { T o = *p; *p = v < o ? v : o; return o; }
template <typename T> inline T atomicExch(T* p, T v) { T o = *p; *p = v; return o; }
template <typename T> inline T atomicCAS(T* p, T c, T v) { T o = *p; if (o == c) *p = v; return o; }

// float16: storage as _Float16; arithmetic in the kernels converts to float and back
struct tdsl_half { _Float16 v; };
inline float tdsl_h2f(tdsl_half h) { return (float)h.v; }
inline tdsl_half tdsl_f2h(float f) { tdsl_half h; h.v = (_Float16)f; return h; }
inline tdsl_half tdsl_d2h(double d) { tdsl_half h; h.v = (_Float16)d; return h; }

// a block's shared array: per-block storage (a static local of the kernel), tracked accesses
template <typename T, int N> struct tdsl_shared : emu::SharedBase {
  alignas(32) T data[N];
  emu::Shadow sh[N];
  tdsl_shared(std::source_location loc = std::source_location::current()) {
    init((unsigned char*)data, sh, N, sizeof(T), loc);
  }
  emu::SharedRef<T> operator[](long long i) {
    if (!in_bounds(i)) { static T dummy; return {nullptr, &dummy, 0}; }
    return {this, &data[i], i};
  }
  emu::SharedPtr<T> ptr(long long i) { return {this, data, i}; }
};

// vector loads and stores (tdsl_vload<float4>(p) ...): the address must be a multiple of the
// vector's size, as on a GPU (which faults otherwise; here it is reported); a shared array's
// lanes go through the shadow tracking one by one, so races on any lane are seen
namespace emu {
inline void check_vector_align(const void* p, size_t align) {
  if (((uintptr_t)p & (align - 1)) == 0) return;
  char buf[128];
  snprintf(buf, sizeof buf, "misaligned vector access at %p (a multiple of %zu bytes is needed)",
           p, align);
  fail("misaligned", buf);
}
}  // namespace emu

template <typename V, typename T> inline V tdsl_vload(const T* p) {
  static_assert(sizeof(V) % sizeof(T) == 0, "vector of T");
  emu::check_vector_align(p, alignof(V));
  V v;
  memcpy(&v, p, sizeof v);
  return v;
}
template <typename V, typename T> inline void tdsl_vstore(T* p, const V& v) {
  static_assert(sizeof(V) % sizeof(T) == 0, "vector of T");
  emu::check_vector_align(p, alignof(V));
  memcpy(p, &v, sizeof v);
}
template <typename V, typename T> inline V tdsl_vload(const emu::Global<T>& p) {
  using U = std::remove_const_t<T>;
  constexpr int n = sizeof(V) / sizeof(T);
  emu::check_vector_align(p.p, alignof(V));
  U lanes[n];
  for (int j = 0; j < n; ++j) lanes[j] = p.read(j);
  V v;
  memcpy(&v, lanes, sizeof v);
  return v;
}
template <typename V, typename T> inline void tdsl_vstore(const emu::Global<T>& p, const V& v) {
  constexpr int n = sizeof(V) / sizeof(T);
  emu::check_vector_align(p.p, alignof(V));
  T lanes[n];
  memcpy(lanes, &v, sizeof v);
  for (int j = 0; j < n; ++j) p.write(j, lanes[j]);
}
template <typename V, typename T> inline V tdsl_vload(const emu::SharedPtr<T>& p) {
  constexpr int n = sizeof(V) / sizeof(T);
  emu::check_vector_align(p.base + p.off, alignof(V));
  T lanes[n];
  for (int j = 0; j < n; ++j) lanes[j] = p.read(j);
  V v;
  memcpy(&v, lanes, sizeof v);
  return v;
}
template <typename V, typename T> inline void tdsl_vstore(const emu::SharedPtr<T>& p, const V& v) {
  constexpr int n = sizeof(V) / sizeof(T);
  emu::check_vector_align(p.base + p.off, alignof(V));
  T lanes[n];
  memcpy(lanes, &v, sizeof v);
  for (int j = 0; j < n; ++j) p.write(j, lanes[j]);
}

// cp.async (sm_80+): see emu::async_issue
template <int B, typename T, typename S>
inline void tdsl_cp_async(const emu::SharedPtr<T>& dst, const emu::Global<S>& src) {
  static_assert(std::is_same_v<std::remove_const_t<S>, T> && B % sizeof(T) == 0 && B <= 16,
                "cp.async of B bytes of T");
  constexpr int n = B / sizeof(T);
  emu::check_vector_align(dst.base + dst.off, B);
  emu::check_vector_align(src.p, B);
  T lanes[n];
  for (int j = 0; j < n; ++j) lanes[j] = src.read(j);
  emu::async_issue(dst.arr, dst.off, n, lanes);
}
template <int B, typename T, typename S>
inline void tdsl_cp_async_zfill(const emu::SharedPtr<T>& dst, const emu::Global<S>& src, bool valid) {
  if (valid) { tdsl_cp_async<B>(dst, src); return; }
  static_assert(std::is_same_v<std::remove_const_t<S>, T> && B % sizeof(T) == 0 && B <= 16,
                "cp.async of B bytes of T");
  emu::check_vector_align(dst.base + dst.off, B);
  unsigned char zeros[16] = {};
  emu::async_issue(dst.arr, dst.off, B / sizeof(T), zeros);   // no global read
}
inline void tdsl_cp_async_commit() { emu::async_commit(); }
inline void tdsl_cp_async_wait_all() { emu::async_wait_all(); }

// ---- WMMA m16n16k16 (f16 x f16 + f32): fragments hold the whole tile in every lane -----------------
struct tdsl_wmma_a { float v[256]; };
struct tdsl_wmma_b { float v[256]; };
struct tdsl_wmma_acc { float v[256]; };

namespace emu {
inline float ld(const tdsl_half* p, long long i) { return tdsl_h2f(p[i]); }
inline float ld(const float* p, long long i) { return p[i]; }
inline float ld(const SharedPtr<tdsl_half>& p, long long i) { return tdsl_h2f(p.read(i)); }
inline float ld(const SharedPtr<float>& p, long long i) { return p.read(i); }
inline void st(float* p, long long i, float v) { p[i] = v; }
inline void st(const SharedPtr<float>& p, long long i, float v) { p.write(i, v); }
inline float ld(const Global<const tdsl_half>& p, long long i) { return tdsl_h2f(p.read(i)); }
inline float ld(const Global<tdsl_half>& p, long long i) { return tdsl_h2f(p.read(i)); }
inline float ld(const Global<const float>& p, long long i) { return p.read(i); }
inline float ld(const Global<float>& p, long long i) { return p.read(i); }
inline void st(const Global<float>& p, long long i, float v) { p.write(i, v); }

__attribute__((noinline)) inline void warp_op() { wait(AT_WARP, __builtin_return_address(0)); }

// element (r, c) of a 16x16 tile at p: row-major p[r * ld + c], column-major p[c * ld + r]
template <typename F, typename P> inline void load_tile(F& f, const P& p, unsigned ldm, bool row) {
  warp_op();
  Collective c;
  for (int r = 0; r < 16; ++r)
    for (int k = 0; k < 16; ++k)
      f.v[r * 16 + k] = ld(p, row ? (long long)r * ldm + k : (long long)k * ldm + r);
}
template <typename P> inline void store_tile(const P& p, const tdsl_wmma_acc& f, unsigned ldm,
                                             bool row) {
  warp_op();
  Collective c;
  for (int r = 0; r < 16; ++r)
    for (int k = 0; k < 16; ++k)
      st(p, row ? (long long)r * ldm + k : (long long)k * ldm + r, f.v[r * 16 + k]);
}
inline void mma(tdsl_wmma_acc& d, const tdsl_wmma_a& a, const tdsl_wmma_b& b,
                const tdsl_wmma_acc& c) {
  float out[256];
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 16; ++n) {
      float acc = c.v[r * 16 + n];
      for (int k = 0; k < 16; ++k) acc += a.v[r * 16 + k] * b.v[k * 16 + n];
      out[r * 16 + n] = acc;
    }
  memcpy(d.v, out, sizeof out);
}
}  // namespace emu

#define TDSL_EMU_WMMA(layout, row)                                                               \
  template <typename P> inline void tdsl_wmma_load_a_##layout(tdsl_wmma_a& f, P p, unsigned l) { \
    emu::load_tile(f, p, l, row); }                                                              \
  template <typename P> inline void tdsl_wmma_load_b_##layout(tdsl_wmma_b& f, P p, unsigned l) { \
    emu::load_tile(f, p, l, row); }                                                              \
  template <typename P>                                                                          \
  inline void tdsl_wmma_load_acc_##layout(tdsl_wmma_acc& f, P p, unsigned l) {                   \
    emu::load_tile(f, p, l, row); }                                                              \
  template <typename P>                                                                          \
  inline void tdsl_wmma_store_acc_##layout(P p, const tdsl_wmma_acc& f, unsigned l) {            \
    emu::store_tile(p, f, l, row); }
TDSL_EMU_WMMA(row, true)
TDSL_EMU_WMMA(col, false)
#undef TDSL_EMU_WMMA

// a fragment is the warp's: filling it writes no memory, so it needs no ordering
inline void tdsl_wmma_fill_acc(tdsl_wmma_acc& f, float v) {
  for (int i = 0; i < 256; ++i) f.v[i] = v;
}

#define TDSL_EMU_MMA(al, bl)                                                               \
  inline void tdsl_wmma_mma_##al##_##bl(tdsl_wmma_acc& d, const tdsl_wmma_a& a,           \
                                        const tdsl_wmma_b& b, const tdsl_wmma_acc& c) { \
    emu::mma(d, a, b, c); }
TDSL_EMU_MMA(row, row)
TDSL_EMU_MMA(row, col)
TDSL_EMU_MMA(col, row)
TDSL_EMU_MMA(col, col)
#undef TDSL_EMU_MMA
