"""PARALLEL loops on the OpenMP runtime (libgomp's ``GOMP_parallel``).

A parallel loop is outlined into two internal functions:

- ``<entry>__parK_body(T* noalias buf..., captured scalars..., begin, end)`` runs the
  loop body for iterations ``[begin, end)``; its pointer parameters keep ``noalias``
  so LLVM optimizes the body as well as the kernel itself;
- ``<entry>__parK(i8* closure)`` is what each OpenMP thread runs: it unpacks the
  closure struct (buffers, captured variables, loop min and extent), takes the
  thread's static chunk of iterations (``ceil(extent / nthreads)`` each) and calls
  the body.

The kernel fills the closure on its stack and calls ``GOMP_parallel(launch,
closure, nthreads, 0)``, where ``nthreads`` is the module global
``<entry>__num_threads`` capped by the extent (0 lets libgomp decide; 1 calls the
launcher directly, with no runtime overhead).  The Python module writes that global
before each call; a C caller can use ``<entry>_set_num_threads(n)``.  Parallel
loops nested in a parallel body run serially.
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

    # the per-thread launcher: unpack the closure, take a static chunk
    closure_t = ir.LiteralStructType(ptr_types + var_types + [vt, vt])
    launch = cg.new_function(base, [I8P], internal=True)
    launch.attributes.add("noinline")  # one copy of the body, not one per call path
    lb = ir.IRBuilder(launch.append_basic_block("entry"))
    cptr = lb.bitcast(launch.args[0], closure_t.as_pointer())
    fields = [lb.load(lb.gep(cptr, [ir.Constant(I32, 0), ir.Constant(I32, i)]))
              for i in range(len(closure_t.elements))]
    c_lo, c_ext = fields[-2], fields[-1]
    tid = lb.call(cg.declare("omp_get_thread_num", I32, []), [])
    nth = lb.call(cg.declare("omp_get_num_threads", I32, []), [])
    tid, nth = _int_to(lb, tid, vt), _int_to(lb, nth, vt)
    one = ir.Constant(vt, 1)
    chunk = lb.sdiv(lb.sub(lb.add(c_ext, nth), one), nth)
    start = lb.mul(tid, chunk)
    stop = lb.add(start, chunk)
    stop = lb.select(lb.icmp_signed("<", stop, c_ext), stop, c_ext)
    work = lb.append_basic_block("work")
    done = lb.append_basic_block("done")
    lb.cbranch(lb.icmp_signed("<", start, stop), work, done)
    lb.position_at_end(work)
    lb.call(body_fn, fields[:-2] + [lb.add(c_lo, start), lb.add(c_lo, stop)])
    lb.branch(done)
    lb.position_at_end(done)
    lb.ret_void()

    # the call site: fill the closure, pick the thread count, launch
    b = cg.b
    eb = ir.IRBuilder(parent.entry)
    eb.position_at_start(parent.entry)
    closure = eb.alloca(closure_t, name=f"closure{k}")
    values = [parent.buffers[x] for x in cap_bufs] + [parent.vars[v].value for v in cap_vars]
    for i, val in enumerate(values + [lo, ext]):
        b.store(val, b.gep(closure, [ir.Constant(I32, 0), ir.Constant(I32, i)]))
    run_bb = b.append_basic_block(f"par{k}.run")
    one_bb = b.append_basic_block(f"par{k}.one")
    many_bb = b.append_basic_block(f"par{k}.many")
    end_bb = b.append_basic_block(f"par{k}.end")
    b.cbranch(b.icmp_signed(">", ext, ir.Constant(vt, 0)), run_bb, end_bb)
    b.position_at_end(run_bb)
    req = _int_to(b, b.load(_global_thread_count(cg)), vt)
    capped = b.select(b.icmp_signed("<", ext, req), ext, req)
    nthreads = b.select(b.icmp_signed("<=", req, ir.Constant(vt, 0)), ir.Constant(vt, 0), capped)
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
