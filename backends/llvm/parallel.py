"""PARALLEL loops: outlined and run through ``GOMP_parallel``'s calling convention.

A parallel loop is outlined into two internal functions:

- ``<entry>__parK_body(T* noalias buf..., captured scalars..., begin, end)`` runs the
  loop body for iterations ``[begin, end)``; its pointer parameters keep ``noalias``
  so LLVM optimizes the body as well as the kernel itself;
- ``<entry>__parK(i8* closure)`` is what each thread runs: it unpacks the closure
  struct (buffers, captured variables, loop min, extent, chunk size and a claim
  counter) and claims chunks of iterations with an atomic add until none is left,
  calling the body on each.  Any number of threads may run it, at any time: a thread
  that starts late (asleep after an idle gap, or waiting for a CPU on a loaded machine)
  finds its share already done by the others instead of delaying them.

The kernel fills the closure on its stack and calls ``GOMP_parallel(launch,
closure, nthreads, 0)``, where ``nthreads`` is the module global
``<entry>__num_threads`` capped by the extent (0 lets the runtime decide; 1 calls the
launcher directly, with no runtime overhead).  In a Python process the JIT binds
``GOMP_parallel`` to tdsl's pool (``tdsl/runtime/pool.py``), which returns as soon as
the chunks are done; an exported library carries its own copy of that pool
(``threadpool.embedded_pool_object``).  The Python module writes the
thread count before each call; a C caller can use ``<entry>_set_num_threads(n)``.
Parallel loops nested in a parallel body run serially.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import llvmlite.ir as ir

from tdsl.expr import BufferLoad, Var
from tdsl.stmt import Allocate, Buffer, BufferStore, For
from tdsl.visitor import post_order_visit

from .lanes import uniform
from .lltypes import I8P, I32, VOID, scalar_type

if TYPE_CHECKING:
    from .codegen import CodeGen


#: Chunks of a parallel loop per thread: a thread that starts late (asleep after an idle
#: gap, or waiting for a CPU) leaves its share to the others, a chunk at a time, and the
#: last chunk is what the caller may wait for.  Measured on a 2-CPU VM, 512^3 matmul on 2
#: threads: median 2.01 ms with 4 chunks per thread, 1.58 ms with 16 (libgomp 1.73 ms).
CHUNKS_PER_THREAD = 16


def thread_count_symbol(entry: str) -> str:
    return f"{entry}__num_threads"


def thread_setter_symbol(entry: str) -> str:
    return f"{entry}_set_num_threads"


def _uses(loop: For) -> tuple[list[Var], list[Buffer]]:
    """Variables and buffers referenced in ``loop``, in first-use order (deterministic)."""
    vars_: dict[Var, None] = {}
    bufs: dict[Buffer, None] = {}

    def note_buffer(buf: Buffer) -> None:
        if buf not in bufs:
            bufs[buf] = None
            for e in (*buf.shape, *buf.effective_strides()):
                post_order_visit(e, visit)

    def visit(n: Any) -> None:
        if isinstance(n, Var):
            vars_.setdefault(n, None)
        elif isinstance(n, (BufferLoad, BufferStore, Allocate)):
            note_buffer(n.buffer)
    post_order_visit(loop, visit)
    return list(vars_), list(bufs)


def _global_thread_count(cg: "CodeGen") -> ir.GlobalVariable:
    name = thread_count_symbol(cg.entry_name)
    gv = cg.module.globals.get(name)
    if gv is None:
        gv = ir.GlobalVariable(cg.module, I32, name)
        gv.initializer = ir.Constant(I32, 0)
        gv.align = 4
    return gv


def emit_thread_count_setter(cg: "CodeGen") -> None:
    """``void <entry>_set_num_threads(int32 n)`` (0: the OpenMP default)."""
    gv = _global_thread_count(cg)
    fn = ir.Function(cg.module, ir.FunctionType(VOID, [I32]), thread_setter_symbol(cg.entry_name))
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    b.store(fn.args[0], gv)
    b.ret_void()


def emit_parallel(cg: "CodeGen", loop: For) -> None:
    """Outline ``loop`` and run it on the OpenMP thread pool."""
    cg.uses_parallel = True
    parent = cg.st
    used_vars, used_bufs = _uses(loop)
    cap_vars = [v for v in used_vars if v in parent.vars and v is not loop.var]
    cap_bufs = [b for b in used_bufs if b in parent.buffers]
    vt = scalar_type(loop.var.dtype)
    lo = cg.convert_index(cg.scalar(loop.min), loop.min.dtype, loop.var.dtype)
    ext = cg.convert_index(cg.scalar(loop.extent), loop.extent.dtype, loop.var.dtype)
    ptr_types = [parent.buffers[b].type for b in cap_bufs]
    var_types = [parent.vars[v].value.type for v in cap_vars]
    k = cg._outlined
    cg._outlined += 1
    base = f"{cg.entry_name}__par{k}"

    # the body: iterations [begin, end)
    body_fn = cg.new_function(base + "_body", ptr_types + var_types + [vt, vt], internal=True)
    for a in body_fn.args[:len(cap_bufs)]:
        a.add_attribute("noalias")
    cg.st = cg.begin_function(body_fn, in_parallel=True)
    try:
        for a, buf in zip(body_fn.args, cap_bufs):
            cg.st.buffers[buf] = a
        for a, v in zip(body_fn.args[len(cap_bufs):], cap_vars):
            cg.st.vars[v] = uniform(a, parent.vars[v].const)
        begin, end = body_fn.args[-2], body_fn.args[-1]
        cg.counted_loop(loop.var, begin, end, lambda: cg.stmt(loop.body))
        cg.b.ret_void()
    finally:
        cg.st = parent

    # the per-thread launcher: unpack the closure, claim chunks until none is left
    closure_t = ir.LiteralStructType(ptr_types + var_types + [vt, vt, vt, vt])
    launch = cg.new_function(base, [I8P], internal=True)
    launch.attributes.add("noinline")  # one copy of the body, not one per call path
    lb = ir.IRBuilder(launch.append_basic_block("entry"))
    cptr = lb.bitcast(launch.args[0], closure_t.as_pointer())
    nfields = len(closure_t.elements)
    fields = [lb.load(lb.gep(cptr, [ir.Constant(I32, 0), ir.Constant(I32, i)]))
              for i in range(nfields - 1)]
    counter = lb.gep(cptr, [ir.Constant(I32, 0), ir.Constant(I32, nfields - 1)])
    c_lo, c_ext, c_chunk = fields[-3], fields[-2], fields[-1]
    claim = lb.append_basic_block("claim")
    work = lb.append_basic_block("work")
    done = lb.append_basic_block("done")
    lb.branch(claim)
    lb.position_at_end(claim)
    index = lb.atomic_rmw("add", counter, ir.Constant(vt, 1), "monotonic")
    start = lb.mul(index, c_chunk)
    lb.cbranch(lb.icmp_signed("<", start, c_ext), work, done)
    lb.position_at_end(work)
    stop = lb.add(start, c_chunk)
    stop = lb.select(lb.icmp_signed("<", stop, c_ext), stop, c_ext)
    lb.call(body_fn, fields[:-3] + [lb.add(c_lo, start), lb.add(c_lo, stop)])
    lb.branch(claim)
    lb.position_at_end(done)
    lb.ret_void()

    # the call site: fill the closure, pick the thread count, launch
    b = cg.b
    eb = ir.IRBuilder(parent.entry)
    eb.position_at_start(parent.entry)
    closure = eb.alloca(closure_t, name=f"closure{k}")
    values = [parent.buffers[x] for x in cap_bufs] + [parent.vars[v].value for v in cap_vars]
    run_bb = b.append_basic_block(f"par{k}.run")
    one_bb = b.append_basic_block(f"par{k}.one")
    many_bb = b.append_basic_block(f"par{k}.many")
    end_bb = b.append_basic_block(f"par{k}.end")
    b.cbranch(b.icmp_signed(">", ext, ir.Constant(vt, 0)), run_bb, end_bb)
    b.position_at_end(run_bb)
    req = _int_to(b, b.load(_global_thread_count(cg)), vt)
    capped = b.select(b.icmp_signed("<", ext, req), ext, req)
    nthreads = b.select(b.icmp_signed("<=", req, ir.Constant(vt, 0)), ir.Constant(vt, 0), capped)
    # chunks of ceil(ext / (CHUNKS_PER_THREAD * threads)) iterations (8 threads assumed
    # when the count is left to the runtime)
    per = b.select(b.icmp_signed("<=", nthreads, ir.Constant(vt, 0)), ir.Constant(vt, 8), nthreads)
    pieces = b.mul(per, ir.Constant(vt, CHUNKS_PER_THREAD))
    chunk = b.sdiv(b.sub(b.add(ext, pieces), ir.Constant(vt, 1)), pieces)
    for i, val in enumerate(values + [lo, ext, chunk, ir.Constant(vt, 0)]):
        b.store(val, b.gep(closure, [ir.Constant(I32, 0), ir.Constant(I32, i)]))
    nthreads = _int_to(b, nthreads, I32)
    data = b.bitcast(closure, I8P)
    b.cbranch(b.icmp_signed("==", nthreads, ir.Constant(I32, 1)), one_bb, many_bb)
    b.position_at_end(one_bb)
    b.call(launch, [data])
    b.branch(end_bb)
    b.position_at_end(many_bb)
    gomp = cg.declare("GOMP_parallel", VOID,
                      [ir.FunctionType(VOID, [I8P]).as_pointer(), I8P, I32, I32])
    b.call(gomp, [launch, data, nthreads, ir.Constant(I32, 0)])
    b.branch(end_bb)
    b.position_at_end(end_bb)


def _int_to(b: ir.IRBuilder, x: ir.Value, t: ir.IntType) -> ir.Value:
    if x.type.width == t.width:
        return x
    return b.sext(x, t) if t.width > x.type.width else b.trunc(x, t)
