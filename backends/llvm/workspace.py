"""Kernels' heap temporaries, kept between calls: a small process-wide block cache in LLVM IR.

A temporary too large for the stack (``codegen.STACK_LIMIT``) -- a packed filter, a padded
input, a materialized intermediate -- used to be ``aligned_alloc``-ed and freed on every
call.  glibc serves a block above its mmap threshold with a fresh ``mmap``, so each call
page-faults (and the kernel zeroes) the whole temporary again.  The threshold rises to the
size of a freed block only up to 32 MiB, and not at all where ``MALLOC_TRIM_THRESHOLD_`` or
``MALLOC_MMAP_THRESHOLD_`` is set -- as in every Dask worker (its nanny sets
``MALLOC_TRIM_THRESHOLD_=65536``): there a ResNet 3x3 512-channel convolution at 7 x 7 (a
9.4 MB packed filter) ran in 6.7 ms instead of 3.1.  TVM keeps such temporaries in a
workspace pool for the same reason.  Measured (``benchmarks/workspace_temporaries.py``, one
thread): a memory-bound kernel with a 64 MiB temporary 60.3 ms per call allocating, 14.6
kept; with Dask's setting, 4 MiB: 3.67 vs 0.58; ResNet-18 at batch 8 (compute-bound)
1037 vs 1013 ms, with Dask's setting 1106 vs 1022.

``tdsl_workspace_alloc(size)`` takes a parked block of at least ``size`` bytes (and at most
``FIT`` times as many, so a small temporary does not pin a huge block) from one of
``SLOTS`` slots, else allocates one; ``tdsl_workspace_free(p)`` parks the block in a free
slot, or in the next slot round-robin, freeing the block it displaces.  Lock-free
(compare-and-swap on the slots), so parallel bodies and concurrent calls may use it; at most
``SLOTS`` blocks stay parked, the most recently freed, shared by all kernels (a model's
layers reuse each other's).  Blocks are 64-byte aligned; a 64-byte header before the data
holds the block's capacity.

A kernel calls it through weak references (``kernel_allocator``): the JIT binds them to
this process's copy (``workspace_runtime``, linked once); an exported shared library
carries its own hidden copy (``embedded_object``), whose parked blocks are freed when the
library is unloaded; a kernel exported as a bare object, linked by a user without it, falls
back to ``aligned_alloc``/``free``, as every kernel linked with ``TDSL_WORKSPACE=off`` does.
"""
from __future__ import annotations

import ctypes
import functools
import os
import threading
from typing import Any

import llvmlite.ir as ir

I8P = ir.IntType(8).as_pointer()
I32 = ir.IntType(32)
I64 = ir.IntType(64)
VOID = ir.VoidType()

#: Blocks kept parked at most (process-wide, or per exported library).
SLOTS = 8
#: A parked block serves a request of at least 1/FIT of its capacity.
FIT = 4
HEADER = 64
ALLOC, FREE, RELEASE = "tdsl_workspace_alloc", "tdsl_workspace_free", "tdsl_workspace_release"
COUNTERS = ("tdsl_workspace_hits", "tdsl_workspace_misses")
#: ``TDSL_WORKSPACE=off``: kernels linked from then on allocate and free their temporaries
#: on every call (as a bare exported object does), keeping nothing between calls.
ENV = "TDSL_WORKSPACE"


def enabled() -> bool:
    """Whether kernels being linked get the process's cache (``ENV`` not off)."""
    return os.environ.get(ENV, "").strip().lower() not in ("0", "off", "no", "false")


def _counted_loop(fn: ir.Function, b: ir.IRBuilder, n: int, tag: str,
                  done: ir.Block) -> tuple[ir.IRBuilder, ir.Value, ir.Block]:
    """``for i in range(n)``: returns a builder in the body, ``i``, and the block the body
    branches to for the next iteration; after the last the loop goes to ``done``."""
    pre = b.block
    head = fn.append_basic_block(f"{tag}.head")
    body = fn.append_basic_block(f"{tag}.body")
    step = fn.append_basic_block(f"{tag}.next")
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64, name=f"{tag}.i")
    i.add_incoming(ir.Constant(I64, 0), pre)
    b.cbranch(b.icmp_unsigned("<", i, ir.Constant(I64, n)), body, done)
    b.position_at_end(step)
    nxt = b.add(i, ir.Constant(I64, 1))
    i.add_incoming(nxt, step)
    b.branch(head)
    b.position_at_end(body)
    return b, i, step


def _module(private: bool) -> ir.Module:
    m = ir.Module(name="tdsl_workspace")
    linkage = "internal" if private else ""
    slots_t = ir.ArrayType(I8P, SLOTS)
    slots = ir.GlobalVariable(m, slots_t, "tdsl_workspace_slots")
    slots.initializer = ir.Constant(slots_t, None)
    slots.align = 64
    slots.linkage = linkage
    counters = {}
    for name in ("tdsl_workspace_victim", *COUNTERS):
        g = ir.GlobalVariable(m, I64, name)
        g.initializer = ir.Constant(I64, 0)
        g.linkage = linkage
        counters[name] = g
    aligned_alloc = ir.Function(m, ir.FunctionType(I8P, [I64, I64]), "aligned_alloc")
    free = ir.Function(m, ir.FunctionType(VOID, [I8P]), "free")
    null = ir.Constant(I8P, None)
    zero32 = ir.Constant(I32, 0)

    def slot(b: ir.IRBuilder, i: ir.Value) -> ir.Value:
        return b.gep(slots, [zero32, i])

    def count(b: ir.IRBuilder, name: str) -> None:
        b.atomic_rmw("add", counters[name], ir.Constant(I64, 1), "monotonic")

    park = ir.Function(m, ir.FunctionType(VOID, [I8P]), FREE)   # its body: below
    park.attributes.add("nounwind")

    # tdsl_workspace_alloc(size) -> data pointer (64-byte aligned), or null.  A parked
    # block is taken (compare-and-swap) before its header is read: another thread may
    # take, give back and displace (free) a block it has not taken.
    fn = ir.Function(m, ir.FunctionType(I8P, [I64]), ALLOC)
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    want = b.and_(b.add(fn.args[0], ir.Constant(I64, HEADER - 1)), ir.Constant(I64, -HEADER))
    miss = fn.append_basic_block("miss")
    hit = fn.append_basic_block("hit")
    b, i, step = _counted_loop(fn, b, SLOTS, "look", miss)
    p = b.load_atomic(slot(b, i), "monotonic", 8)
    take = fn.append_basic_block("take")
    b.cbranch(b.icmp_unsigned("==", p, null), step, take)
    b.position_at_end(take)
    won = b.extract_value(b.cmpxchg(slot(b, i), p, null, "acquire", "monotonic"), 1)
    check = fn.append_basic_block("check")
    b.cbranch(won, check, step)
    b.position_at_end(check)
    cap = b.load(b.bitcast(p, I64.as_pointer()))
    fits = b.and_(b.icmp_unsigned(">=", cap, want),
                  b.icmp_unsigned("<=", cap, b.mul(want, ir.Constant(I64, FIT))))
    back = fn.append_basic_block("back")
    b.cbranch(fits, hit, back)
    b.position_at_end(back)                      # not this one: parked again
    b.call(park, [b.gep(p, [ir.Constant(I64, HEADER)])])
    b.branch(step)
    b.position_at_end(hit)
    count(b, "tdsl_workspace_hits")
    b.ret(b.gep(p, [ir.Constant(I64, HEADER)]))
    b.position_at_end(miss)
    raw = b.call(aligned_alloc, [ir.Constant(I64, HEADER), b.add(want, ir.Constant(I64, HEADER))])
    ok = fn.append_basic_block("ok")
    failed = fn.append_basic_block("failed")
    b.cbranch(b.icmp_unsigned("==", raw, null), failed, ok)
    b.position_at_end(failed)
    b.ret(null)
    b.position_at_end(ok)
    b.store(want, b.bitcast(raw, I64.as_pointer()))
    count(b, "tdsl_workspace_misses")
    b.ret(b.gep(raw, [ir.Constant(I64, HEADER)]))

    # tdsl_workspace_free(data): park the block, displacing (freeing) another when full
    fn = park
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    done = fn.append_basic_block("done")
    start = fn.append_basic_block("start")
    b.cbranch(b.icmp_unsigned("==", fn.args[0], null), done, start)
    b.position_at_end(done)
    b.ret_void()
    b.position_at_end(start)
    raw = b.gep(fn.args[0], [ir.Constant(I64, -HEADER)])
    full = fn.append_basic_block("full")
    b, i, step = _counted_loop(fn, b, SLOTS, "park", full)
    won = b.extract_value(b.cmpxchg(slot(b, i), null, raw, "release", "monotonic"), 1)
    b.cbranch(won, done, step)
    b.position_at_end(full)
    k = b.atomic_rmw("add", counters["tdsl_workspace_victim"], ir.Constant(I64, 1), "monotonic")
    old = b.atomic_rmw("xchg", slot(b, b.urem(k, ir.Constant(I64, SLOTS))), raw, "acq_rel")
    b.call(free, [old])
    b.ret_void()

    # tdsl_workspace_release(): free every parked block
    fn = ir.Function(m, ir.FunctionType(VOID, []), RELEASE)
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    end = fn.append_basic_block("end")
    b, i, step = _counted_loop(fn, b, SLOTS, "drop", end)
    b.call(free, [b.atomic_rmw("xchg", slot(b, i), null, "acquire")])
    b.branch(step)
    b.position_at_end(end)
    b.ret_void()
    return m


def kernel_allocator(module: ir.Module) -> tuple[ir.Function, ir.Function]:
    """A kernel module's ``(alloc(size), free(p))`` for heap temporaries: the workspace
    runtime through weak references where one is linked, else ``aligned_alloc``/``free``
    (internal functions, made once per module; LLVM inlines them)."""
    existing = module.globals.get("tdsl_kernel_alloc")
    if existing is not None:
        return existing, module.get_global("tdsl_kernel_free")
    ws_alloc = ir.Function(module, ir.FunctionType(I8P, [I64]), ALLOC)
    ws_alloc.linkage = "extern_weak"
    ws_free = ir.Function(module, ir.FunctionType(VOID, [I8P]), FREE)
    ws_free.linkage = "extern_weak"
    aligned_alloc = module.globals.get("aligned_alloc") or \
        ir.Function(module, ir.FunctionType(I8P, [I64, I64]), "aligned_alloc")
    free = module.globals.get("free") or ir.Function(module, ir.FunctionType(VOID, [I8P]), "free")

    def dispatch(name: str, ret: ir.Type, arg: ir.Type, weak: ir.Function,
                 fallback: Any) -> ir.Function:
        fn = ir.Function(module, ir.FunctionType(ret, [arg]), name)
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        linked = fn.append_basic_block("linked")
        alone = fn.append_basic_block("alone")
        b.cbranch(b.icmp_unsigned("!=", weak, ir.Constant(weak.type, None)), linked, alone)
        b.position_at_end(linked)
        r = b.call(weak, [fn.args[0]])
        b.ret_void() if ret is VOID else b.ret(r)
        b.position_at_end(alone)
        r = fallback(b, fn.args[0])
        b.ret_void() if ret is VOID else b.ret(r)
        return fn

    return (dispatch("tdsl_kernel_alloc", I8P, I64, ws_alloc,
                     lambda b, n: b.call(aligned_alloc, [ir.Constant(I64, HEADER), n])),
            dispatch("tdsl_kernel_free", VOID, I8P, ws_free, lambda b, p: b.call(free, [p])))


class WorkspaceRuntime:
    """The JIT-linked cache of this process: its entry points and counters."""

    def __init__(self, library: Any):
        self.library = library
        self.symbols = {ALLOC: library[ALLOC], FREE: library[FREE]}
        self._release = library.function(RELEASE, ctypes.CFUNCTYPE(None))

    def stats(self) -> dict[str, int]:
        """Requests served by a parked block (hits) and by a new allocation (misses)."""
        return {name.rsplit("_", 1)[1]: ctypes.c_int64.from_address(self.library[name]).value
                for name in COUNTERS}

    def parked_bytes(self) -> int:
        """Bytes held by parked blocks (their capacities; the headers not counted)."""
        base = self.library["tdsl_workspace_slots"]
        total = 0
        for k in range(SLOTS):
            p = ctypes.c_void_p.from_address(base + 8 * k).value
            if p:
                total += ctypes.c_int64.from_address(p).value
        return total

    def release(self) -> None:
        """Free every parked block (a kernel running now keeps the blocks it holds)."""
        self._release()


_lock = threading.Lock()


@functools.lru_cache(maxsize=1)
def workspace_runtime() -> WorkspaceRuntime:
    """Build and link this process's workspace cache (once)."""
    from . import jit
    from .machine import emit_object, host_info, machine_spec, optimize, parse
    from tdsl.target import as_target
    with _lock:
        spec = machine_spec(as_target("llvm"))
        mod = parse(str(_module(private=False)))
        mod.triple = host_info()[0]
        optimize(mod, spec)
        exports = [ALLOC, FREE, RELEASE, "tdsl_workspace_slots", *COUNTERS]
        lib = jit.link(emit_object(mod, spec), exports, needs_gomp=False).keep_forever()
    return WorkspaceRuntime(lib)


@functools.lru_cache(maxsize=4)
def embedded_object(spec: Any) -> bytes:
    """The cache as an object file for an exported shared library: its entry points hidden
    (the library's kernels use its own copy), its parked blocks freed when the library is
    unloaded (a destructor)."""
    from .machine import emit_object, optimize, parse
    m = _module(private=True)
    for name in (ALLOC, FREE):   # the kernels' weak references resolve to these
        m.get_global(name).linkage = "hidden"   # (the visibility, printed where linkage goes)
    release = m.get_global(RELEASE)
    release.linkage = "internal"
    entry_t = ir.LiteralStructType([I32, ir.FunctionType(VOID, []).as_pointer(), I8P])
    dtors = ir.GlobalVariable(m, ir.ArrayType(entry_t, 1), "llvm.global_dtors")
    dtors.linkage = "appending"
    dtors.initializer = ir.Constant(ir.ArrayType(entry_t, 1), [
        ir.Constant(entry_t, [ir.Constant(I32, 65535), release, ir.Constant(I8P, None)])])
    mod = parse(str(m))
    optimize(mod, spec)
    return emit_object(mod, spec)


def release_workspace() -> None:
    """Free the temporaries tdsl's kernels keep between calls in this process (at most
    ``SLOTS`` blocks, the most recently used; they are kept to spare each call the page
    faults of a fresh allocation).  Kernels running now keep what they hold."""
    if workspace_runtime.cache_info().currsize:
        workspace_runtime().release()
