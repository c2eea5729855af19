"""tdsl's native thread pool, written in LLVM IR and JIT-linked once per process.

``tdsl_pool_parallel(fn, data, n, flags)`` has ``GOMP_parallel``'s signature; the JIT binds
kernels' ``GOMP_parallel`` to it (``TDSL_PARALLEL_RUNTIME=gomp``: libgomp's instead).

Why not libgomp's fork-join: ``GOMP_parallel`` returns only when every thread of the team
has run, so one worker that is asleep (after an idle gap its spin budget is spent) or
waiting for a CPU (on a loaded machine) delays the whole call by its wake-up -- measured at
milliseconds to tens of milliseconds for a 2-thread kernel on a busy 2-CPU machine, whatever
the work.  Here the call never waits for a thread to be scheduled.  No Python, no GIL:

* between jobs a worker waits in three steps: a short ``pause`` spin (calls back to back),
  then a spin that yields the CPU (``sched_yield``) for up to ``spin_ns`` of wall time
  (``TDSL_POOL_SPIN_MS``, default 300 ms: ``tdsl.runtime.threads``), then a futex sleep
  on ``gen``.  The middle step is what keeps a call after an idle gap as fast as one in a
  loop: a worker woken from sleep is often placed on the CPU of the thread that woke it
  (schedulers that pack threads onto few CPUs -- virtual machines' especially -- do it
  every time), and there it only takes turns with the caller, so the call runs at one
  thread's speed.  A worker that is still running keeps its own CPU, and yielding gives
  that CPU to any other thread that wants it.  Intel's OpenMP (``KMP_BLOCKTIME``, 200 ms)
  and OpenBLAS (~0.1 s) wait the same way;
* a call publishes the job
  (``fn``, ``data``, ``want`` = n - 1 helper slots), sets ``active``, bumps ``gen`` and
  wakes up to n - 1 sleepers, then runs ``fn(data)`` itself;
* ``fn`` claims chunks of the loop from its closure until none is left
  (backends/llvm/parallel.py), so whoever runs it, whenever, shares the work;
* a worker registers in ``holders`` before it looks at ``active`` and takes a slot
  (``taken < want``, so no more than n threads ever work); the caller, done with the
  chunks, clears ``active`` and waits only for ``holders`` to drop to zero -- workers
  that are running a claimed chunk.  A worker that wakes later sees ``active`` clear and
  goes back to sleep: the call never waits for a thread to be scheduled.  (Both sides
  use sequentially consistent atomics: a worker that registered after the caller read
  ``holders == 0`` must see ``active == 0``.)
* one job at a time (``busy``); a concurrent second caller runs its loop alone.

Linux only (futex); elsewhere ``gomp_parallel_address`` falls back to libgomp.
"""
from __future__ import annotations

import ctypes
import functools
import os
import platform
import threading
from typing import Any

import llvmlite.ir as ir

from tdsl.runtime.threads import DEFAULT_POOL_SPIN_MS, pool_spin_ms_from_env

I8P = ir.IntType(8).as_pointer()
I32 = ir.IntType(32)
I64 = ir.IntType(64)
VOID = ir.VoidType()

_SYS_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}
#: The CPU's spin-wait hint: x86 ``pause``, AArch64 ``yield`` (hint #1).
_PAUSE = {"x86_64": ("llvm.x86.sse2.pause", None), "amd64": ("llvm.x86.sse2.pause", None),
          "aarch64": ("llvm.aarch64.hint", 1), "arm64": ("llvm.aarch64.hint", 1)}
FUTEX_WAIT_PRIVATE = 128
FUTEX_WAKE_PRIVATE = 129
CLOCK_MONOTONIC = 1

#: Spin iterations (with a CPU pause) before a worker starts its yielding spin, and before
#: the caller sleeps waiting for workers to finish their chunk.
WORKER_SPIN = 2000
CALLER_SPIN = 20000
#: Yields between two looks at the clock in the yielding spin.
YIELDS_PER_CLOCK = 8

STATE = ("gen", "active", "holders", "busy", "taken", "want", "workers")


def _module(machine: str, entry: str = "tdsl_pool_parallel", private: bool = False
            ) -> ir.Module:
    """The pool's IR; ``entry`` names its GOMP_parallel-shaped entry point.  ``private``:
    the state and the worker get internal linkage (a copy embedded in an exported library
    is that library's own, invisible to the rest of the process)."""
    m = ir.Module(name="tdsl_threadpool")
    linkage = "internal" if private else ""
    g = {}
    for name in STATE:
        v = ir.GlobalVariable(m, I32, f"tdsl_pool_{name}")
        v.initializer = ir.Constant(I32, 0)
        v.align = 64
        v.linkage = linkage
        g[name] = v
    fn_t = ir.FunctionType(VOID, [I8P]).as_pointer()
    g_fn = ir.GlobalVariable(m, fn_t, "tdsl_pool_fn")
    g_fn.initializer = ir.Constant(fn_t, None)
    g_fn.linkage = linkage
    g_data = ir.GlobalVariable(m, I8P, "tdsl_pool_data")
    g_data.initializer = ir.Constant(I8P, None)
    g_data.linkage = linkage
    syscall = ir.Function(m, ir.FunctionType(I64, [I64], var_arg=True), "syscall")
    worker_t = ir.FunctionType(I8P, [I8P])
    pthread_create = ir.Function(m, ir.FunctionType(I32, [I64.as_pointer(), I8P,
                                                          worker_t.as_pointer(), I8P]),
                                 "pthread_create")
    pname, parg = _PAUSE[machine]
    pause_fn = ir.Function(m, ir.FunctionType(VOID, [] if parg is None else [I32]), pname)
    pause_args = [] if parg is None else [ir.Constant(I32, parg)]
    nr = ir.Constant(I64, _SYS_FUTEX[machine])
    null = ir.Constant(I8P, None)

    def futex(b: ir.IRBuilder, addr: ir.Value, op: int, val: ir.Value) -> None:
        b.call(syscall, [nr, b.ptrtoint(addr, I64), ir.Constant(I32, op), val, null, null,
                         ir.Constant(I32, 0)])

    g_spin = ir.GlobalVariable(m, I64, "tdsl_pool_spin_ns")
    g_spin.initializer = ir.Constant(I64, int(DEFAULT_POOL_SPIN_MS * 1e6))
    g_spin.align = 64
    g_spin.linkage = linkage
    g_sleeps = ir.GlobalVariable(m, I64, "tdsl_pool_sleeps")   # futex sleeps of workers
    g_sleeps.initializer = ir.Constant(I64, 0)
    g_sleeps.linkage = linkage
    timespec = ir.LiteralStructType([I64, I64])
    clock_gettime = ir.Function(m, ir.FunctionType(I32, [I32, timespec.as_pointer()]),
                                "clock_gettime")
    sched_yield = ir.Function(m, ir.FunctionType(I32, []), "sched_yield")

    def now_ns(b: ir.IRBuilder, ts: ir.Value) -> ir.Value:
        b.call(clock_gettime, [ir.Constant(I32, CLOCK_MONOTONIC), ts])
        sec = b.load(b.gep(ts, [ir.Constant(I32, 0), ir.Constant(I32, 0)]))
        nsec = b.load(b.gep(ts, [ir.Constant(I32, 0), ir.Constant(I32, 1)]))
        return b.add(b.mul(sec, ir.Constant(I64, 1_000_000_000)), nsec)

    def load(b: ir.IRBuilder, gv: ir.Value) -> ir.Value:
        return b.load_atomic(gv, "seq_cst", 4)

    def store(b: ir.IRBuilder, val: ir.Value, gv: ir.Value) -> None:
        b.store_atomic(val, gv, "seq_cst", 4)

    def spin_until_changed(b: ir.IRBuilder, f: ir.Function, gv: ir.Value, old: ir.Value,
                           spins: int, tag: str, sleep: "ir.Block | None" = None,
                           out: "ir.Block | None" = None) -> None:
        """Spin ``spins`` times while ``*gv == old``, then futex-wait once; returns (to the
        caller's loop) after a change or a wake-up.  Given ``sleep`` and ``out`` blocks, it
        branches to them instead (the caller emits both)."""
        head = f.append_basic_block(f"{tag}.spin")
        body = f.append_basic_block(f"{tag}.pause")
        own = sleep is None
        sleep = sleep or f.append_basic_block(f"{tag}.sleep")
        out = out or f.append_basic_block(f"{tag}.out")
        pre = b.block
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I32)
        i.add_incoming(ir.Constant(I32, 0), pre)
        same = b.icmp_unsigned("==", load(b, gv), old)
        more = b.icmp_unsigned("<", i, ir.Constant(I32, spins))
        b.cbranch(same, body, out)
        b.position_at_end(body)
        b.call(pause_fn, pause_args)
        nxt = b.add(i, ir.Constant(I32, 1))
        i.add_incoming(nxt, body)
        b.cbranch(more, head, sleep)
        if own:
            b.position_at_end(sleep)
            futex(b, gv, FUTEX_WAIT_PRIVATE, old)
            b.branch(out)
            b.position_at_end(out)

    def wait_for_job(b: ir.IRBuilder, f: ir.Function, gv: ir.Value, old: ir.Value,
                     ts: ir.Value, count: ir.Value) -> None:
        """While ``*gv == old``: a ``pause`` spin (``WORKER_SPIN``), a yielding spin until
        ``tdsl_pool_spin_ns`` have passed, then one futex wait; returns (to the caller's
        loop) after a change or a wake-up."""
        spin_until = f.append_basic_block("w.timed")
        yield_bb = f.append_basic_block("w.yield")
        clock_bb = f.append_basic_block("w.clock")
        sleep = f.append_basic_block("w.sleep")
        out = f.append_basic_block("w.out")
        spin_until_changed(b, f, gv, old, WORKER_SPIN, "w", sleep=spin_until, out=out)
        b.position_at_end(spin_until)
        start = now_ns(b, ts)
        b.store(ir.Constant(I32, 0), count)
        b.branch(yield_bb)
        b.position_at_end(yield_bb)
        b.call(sched_yield, [])
        k = b.add(b.load(count), ir.Constant(I32, 1))
        b.store(k, count)
        check = b.icmp_unsigned("==", b.urem(k, ir.Constant(I32, YIELDS_PER_CLOCK)),
                                ir.Constant(I32, 0))
        still = b.icmp_unsigned("==", load(b, gv), old)
        go_on = f.append_basic_block("w.still")
        b.cbranch(still, go_on, out)
        b.position_at_end(go_on)
        b.cbranch(check, clock_bb, yield_bb)
        b.position_at_end(clock_bb)
        late = b.icmp_signed(">=", b.sub(now_ns(b, ts), start),
                             b.load_atomic(g_spin, "monotonic", 8))
        b.cbranch(late, sleep, yield_bb)
        b.position_at_end(sleep)
        b.atomic_rmw("add", g_sleeps, ir.Constant(I64, 1), "monotonic")
        futex(b, gv, FUTEX_WAIT_PRIVATE, old)
        b.branch(out)
        b.position_at_end(out)

    # ---- the worker --------------------------------------------------------------------------
    worker = ir.Function(m, worker_t, "tdsl_pool_worker")
    worker.linkage = linkage
    b = ir.IRBuilder(worker.append_basic_block("entry"))
    ts = b.alloca(timespec)
    count = b.alloca(I32)
    seen = b.alloca(I32)
    b.store(b.trunc(b.ptrtoint(worker.args[0], I64), I32), seen)
    loop = worker.append_basic_block("loop")
    b.branch(loop)
    b.position_at_end(loop)
    s = b.load(seen)
    gen = load(b, g["gen"])
    new_bb = worker.append_basic_block("new")
    wait_bb = worker.append_basic_block("wait")
    b.cbranch(b.icmp_unsigned("==", gen, s), wait_bb, new_bb)
    b.position_at_end(wait_bb)
    wait_for_job(b, worker, g["gen"], s, ts, count)
    b.branch(loop)
    b.position_at_end(new_bb)
    b.store(gen, seen)
    b.atomic_rmw("add", g["holders"], ir.Constant(I32, 1), "seq_cst")
    active = load(b, g["active"])
    try_bb = worker.append_basic_block("try")
    run_bb = worker.append_basic_block("run")
    leave_bb = worker.append_basic_block("leave")
    b.cbranch(b.icmp_unsigned("!=", active, ir.Constant(I32, 0)), try_bb, leave_bb)
    b.position_at_end(try_bb)
    slot = b.atomic_rmw("add", g["taken"], ir.Constant(I32, 1), "seq_cst")
    b.cbranch(b.icmp_unsigned("<", slot, load(b, g["want"])), run_bb, leave_bb)
    b.position_at_end(run_bb)
    b.call(b.load(g_fn), [b.load(g_data)])
    b.branch(leave_bb)
    b.position_at_end(leave_bb)
    old = b.atomic_rmw("sub", g["holders"], ir.Constant(I32, 1), "seq_cst")
    wake_bb = worker.append_basic_block("wake")
    b.cbranch(b.icmp_unsigned("==", old, ir.Constant(I32, 1)), wake_bb, loop)
    b.position_at_end(wake_bb)
    futex(b, g["holders"], FUTEX_WAKE_PRIVATE, ir.Constant(I32, 1 << 30))
    b.branch(loop)

    # ---- the caller: GOMP_parallel's signature ----------------------------------------------------
    par = ir.Function(m, ir.FunctionType(VOID, [fn_t, I8P, I32, I32]), entry)
    fn, data, n = par.args[0], par.args[1], par.args[2]
    b = ir.IRBuilder(par.append_basic_block("entry"))
    tid = b.alloca(I64)
    alone = par.append_basic_block("alone")
    claim = par.append_basic_block("claim")
    b.cbranch(b.icmp_unsigned("<=", n, ir.Constant(I32, 1)), alone, claim)
    b.position_at_end(alone)
    b.call(fn, [data])
    b.ret_void()
    b.position_at_end(claim)
    pair = b.cmpxchg(g["busy"], ir.Constant(I32, 0), ir.Constant(I32, 1), "seq_cst", "seq_cst")
    got = b.extract_value(pair, 1)
    start = par.append_basic_block("start")
    b.cbranch(got, start, alone)
    b.position_at_end(start)
    helpers = b.sub(n, ir.Constant(I32, 1))
    gen0 = load(b, g["gen"])
    # start workers up to n - 1 (each begins having "seen" the current generation)
    grow = par.append_basic_block("grow")
    spawn = par.append_basic_block("spawn")
    publish = par.append_basic_block("publish")
    b.branch(grow)
    b.position_at_end(grow)
    w = load(b, g["workers"])
    b.cbranch(b.icmp_unsigned("<", w, helpers), spawn, publish)
    b.position_at_end(spawn)
    arg = b.inttoptr(b.zext(gen0, I64), I8P)
    rc = b.call(pthread_create, [tid, null, worker, arg])
    ok = b.icmp_unsigned("==", rc, ir.Constant(I32, 0))
    spawned = par.append_basic_block("spawned")
    b.cbranch(ok, spawned, publish)           # no more threads: run with those we have
    b.position_at_end(spawned)
    store(b, b.add(w, ir.Constant(I32, 1)), g["workers"])
    b.branch(grow)
    b.position_at_end(publish)
    b.store(fn, g_fn)
    b.store(data, g_data)
    store(b, ir.Constant(I32, 0), g["taken"])
    store(b, helpers, g["want"])
    store(b, ir.Constant(I32, 1), g["active"])
    b.atomic_rmw("add", g["gen"], ir.Constant(I32, 1), "seq_cst")
    futex(b, g["gen"], FUTEX_WAKE_PRIVATE, helpers)
    b.call(fn, [data])
    store(b, ir.Constant(I32, 0), g["active"])
    drain = par.append_basic_block("drain")
    idle = par.append_basic_block("idle")
    finish = par.append_basic_block("finish")
    b.branch(drain)
    b.position_at_end(drain)
    h = load(b, g["holders"])
    b.cbranch(b.icmp_unsigned("==", h, ir.Constant(I32, 0)), finish, idle)
    b.position_at_end(idle)
    spin_until_changed(b, par, g["holders"], h, CALLER_SPIN, "c")
    b.branch(drain)
    b.position_at_end(finish)
    store(b, ir.Constant(I32, 0), g["busy"])
    b.ret_void()
    return m


@functools.lru_cache(maxsize=4)
def embedded_pool_object(spec: Any) -> bytes:
    """The pool as an object file for an exported library (``export.py``).

    Its ``GOMP_parallel`` is hidden, so the library's kernels call it and nothing else in
    the process is used or replaced.  It runs the library's own copy of the pool (no
    libgomp, and none of its wake-up waits: see the module docstring) unless the library
    was told another runtime with ``tdsl_set_parallel_runtime(fn)`` (``RUNTIME_SETTER``):
    ``load_module`` passes the process's pool, so a tdsl process runs one pool, and a
    loaded library never has threads of its own running its code -- it can be closed
    (``dlclose``) as soon as nothing uses it.  A forked child needs no reset: the caller
    runs every chunk no helper claims."""
    from .machine import emit_object, optimize, parse
    machine = spec.triple.split("-")[0].lower()
    if machine not in _SYS_FUTEX:
        raise NotImplementedError(f"no native thread pool for {machine}")
    text = str(_embedded_module(machine))
    text = text.replace('define void @"GOMP_parallel"', 'define hidden void @"GOMP_parallel"')
    mod = parse(text)
    optimize(mod, spec)
    return emit_object(mod, spec)


#: The function an exported parallel library exports to take another ``GOMP_parallel``.
RUNTIME_SETTER = "tdsl_set_parallel_runtime"


def _embedded_module(machine: str) -> ir.Module:
    """The private pool, plus ``GOMP_parallel`` (the hook's runtime when set, else the
    pool) and ``RUNTIME_SETTER``."""
    m = _module(machine, entry="tdsl_embedded_pool", private=True)
    pool = m.get_global("tdsl_embedded_pool")
    pool.linkage = "internal"
    par_t = pool.function_type
    hook = ir.GlobalVariable(m, par_t.as_pointer(), "tdsl_parallel_hook")
    hook.linkage = "internal"
    hook.initializer = ir.Constant(par_t.as_pointer(), None)
    gomp = ir.Function(m, par_t, "GOMP_parallel")
    b = ir.IRBuilder(gomp.append_basic_block("entry"))
    target = b.load_atomic(hook, "monotonic", 8)
    other = gomp.append_basic_block("other")
    own = gomp.append_basic_block("own")
    b.cbranch(b.icmp_unsigned("!=", target, ir.Constant(par_t.as_pointer(), None)), other, own)
    b.position_at_end(other)
    b.call(target, gomp.args)
    b.ret_void()
    b.position_at_end(own)
    b.call(pool, gomp.args)
    b.ret_void()
    setter = ir.Function(m, ir.FunctionType(VOID, [I8P]), RUNTIME_SETTER)
    b = ir.IRBuilder(setter.append_basic_block("entry"))
    b.store_atomic(b.bitcast(setter.args[0], par_t.as_pointer()), hook, "monotonic", 8)
    b.ret_void()
    return m


def embedded_pool_supported(spec: Any) -> bool:
    """Whether ``embedded_pool_object`` can serve ``spec`` (Linux on x86-64 or AArch64)."""
    return "linux" in spec.triple and spec.triple.split("-")[0].lower() in _SYS_FUTEX


class NativePool:
    """The JIT-linked pool: its entry point's address, its state (for fork resets) and how
    long its idle workers spin before they sleep."""

    def __init__(self, library: Any):
        self.library = library
        self.parallel = library["tdsl_pool_parallel"]
        self._spin_ns = ctypes.c_int64.from_address(library["tdsl_pool_spin_ns"])

    @property
    def sleeps(self) -> int:
        """How many times a worker went to sleep (futex) since the pool started."""
        return ctypes.c_int64.from_address(self.library["tdsl_pool_sleeps"]).value

    @property
    def spin_ms(self) -> float:
        """Milliseconds an idle worker keeps yielding before it sleeps."""
        return self._spin_ns.value / 1e6

    @spin_ms.setter
    def spin_ms(self, ms: float) -> None:
        # Workers read it at each look at the clock: lowering it puts spinning ones to sleep.
        self._spin_ns.value = int(max(0.0, float(ms)) * 1e6)

    def reset_after_fork(self) -> None:
        """In a forked child no worker exists: forget them (and any job of the parent)."""
        for name in STATE:
            ctypes.c_int32.from_address(self.library[f"tdsl_pool_{name}"]).value = 0


_lock = threading.Lock()


@functools.lru_cache(maxsize=1)
def native_pool() -> "NativePool | None":
    """Build and link the pool (once per process), or None where it is not supported."""
    machine = platform.machine().lower()
    if platform.system() != "Linux" or machine not in _SYS_FUTEX:
        return None
    from . import jit
    from .machine import emit_object, host_info, optimize, parse
    from .machine import machine_spec
    from tdsl.target import as_target
    with _lock:
        spec = machine_spec(as_target("llvm"))
        mod = parse(str(_module(machine)))
        mod.triple = host_info()[0]
        optimize(mod, spec)
        obj = emit_object(mod, spec)
        exports = ["tdsl_pool_parallel", "tdsl_pool_spin_ns", "tdsl_pool_sleeps"] + [
            f"tdsl_pool_{s}" for s in STATE]
        lib = jit.link(obj, exports, needs_gomp=False).keep_forever()   # workers run its code
    pool = NativePool(lib)
    pool.spin_ms = pool_spin_ms_from_env()
    return pool



#: ``TDSL_PARALLEL_RUNTIME=gomp`` links kernels against libgomp's fork-join instead.
ENV_VAR = "TDSL_PARALLEL_RUNTIME"


def parallel_runtime() -> "NativePool | None":
    """What kernels' ``GOMP_parallel`` binds to in this process: tdsl's pool, or None for
    libgomp's (``TDSL_PARALLEL_RUNTIME=gomp``, or a platform without the pool)."""
    if os.environ.get(ENV_VAR, "").strip().lower() == "gomp":
        return None
    return native_pool()


def parallel_runtime_address() -> "int | None":
    """The address of ``parallel_runtime()``'s entry point (None: libgomp's)."""
    pool = parallel_runtime()
    return None if pool is None else pool.parallel


def _reset_in_child() -> None:
    if native_pool.cache_info().currsize:
        pool = native_pool()
        if pool is not None:
            pool.reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_in_child)
