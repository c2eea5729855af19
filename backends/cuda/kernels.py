"""Splitting a lowered function into host code and kernels, with launch configurations.

A kernel is the subtree under an outermost thread-bound loop.  Everything outside
kernels becomes the host plan (``host.py``): global allocations, lets and
conditions on symbolic sizes, launches in order.  Each kernel gets its grid and
block sizes from its thread-bound loops, its parameters (the global buffers it
touches, then the symbolic sizes it uses), and the GPU legality checks:

* block and grid sizes per dimension where constant (``limits.py``; symbolic ones are
  checked on the host at launch),
* the most threads a block can have (its ``__launch_bounds__``),
* static shared memory within ``target.max_shared_memory_per_block``,
* local memory per thread within CUDA's 512 KiB,
* shared and local arrays of constant size,
* no stage left unbound (a loop nest on the host when the function has kernels).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from tdsl.arith import Analyzer
from tdsl.errors import BuildError
from tdsl.expr import BufferLoad, Const, Expr, Var
from tdsl.lowering.single_store import is_first_thread_loop
from tdsl.stmt import (Allocate, Barrier, Buffer, BufferStore, Evaluate, ExternCall, For, ForKind,
                       IfThenElse, IntrinCall, LetStmt, PrimFunc, SeqStmt, Stmt, StorageScope,
                       ThreadTag)
from tdsl.structural import structural_equal
from tdsl.target import GPUArch, Target
from tdsl.visitor import children, free_vars

from . import limits
from .accumulate import optimize_kernel
from .tc_attention import find_plan as find_attention_plan
from .tc_gemm import find_plan
from .host import (HostAlloc, HostIf, HostLaunch, HostLet, HostSeq, buffer_nbytes,
                   check_host_expr, host_eval)

_BLOCK_TAGS = (ThreadTag.BLOCK_X, ThreadTag.BLOCK_Y, ThreadTag.BLOCK_Z)
_THREAD_TAGS = (ThreadTag.THREAD_X, ThreadTag.THREAD_Y, ThreadTag.THREAD_Z)
#: Shared arrays are aligned to this many bytes (what WMMA loads need).
SHARED_ALIGN = 32


@dataclass
class KernelParam:
    """A kernel argument: a global buffer (pointer) or a symbolic size (``long long``)."""

    buffer: Optional[Buffer] = None
    var: Optional[Var] = None
    is_const: bool = False      # a buffer the kernel only reads
    name: str = ""              # the C name, set by the code generator
    c_decl: str = ""            # the C parameter type, set by the code generator
    min_align: int = 1          # bytes the pointer must be aligned to (WMMA: 32)
    user_array: bool = False    # an argument of the function (may start anywhere), not a
                                # buffer the host allocates (256-byte aligned)


@dataclass
class KernelInfo:
    name: str
    root: For
    params: list[KernelParam]
    grid: tuple[Expr, Expr, Expr]
    block: tuple[Expr, Expr, Expr]
    launch_extent: dict                      # ThreadTag -> Expr (the launch size of the tag)
    shared: list[Buffer]                     # hoisted __shared__ arrays, in order
    shared_bytes: int
    hoisted: list[Buffer] = field(default_factory=list)   # global allocations made inside
    source: str = ""                         # the __global__ function, set by codegen
    c_names: dict = field(default_factory=dict)  # C name -> IR name of shared arrays
    uses_barrier: bool = False
    local_bytes: int = 0                     # per-thread local arrays
    max_threads: int = 1024                  # most threads per block: __launch_bounds__
    gpu: Optional[GPUArch] = None            # the limits of the target's arch
    registers: Optional[int] = None          # per thread, read from the cubin at build
    device_code: str = ""                    # user CUDA C the kernel calls (td.extern)
    tc: Any = None                           # tc_gemm.TcPlan of a tensor-core GEMM kernel
    dynamic_shared_bytes: int = 0            # extern __shared__ bytes (the launch passes them)
    #: 16-byte vector loads of global arrays the code generator rendered (vectorize.py)
    vector_loads_16: int = 0

    @property
    def threads_per_block(self) -> "int | None":
        if all(isinstance(b, Const) for b in self.block):
            return int(self.block[0].value * self.block[1].value * self.block[2].value)
        return None


def const_span(buf: Buffer) -> "int | None":
    """Elements spanned by ``buf`` when its shape and strides are constants."""
    try:
        dims = [int(host_eval(d, {})) for d in buf.shape]
        strides = [int(host_eval(s, {})) for s in buf.effective_strides()]
    except (KeyError, BuildError):
        return None
    if any(d <= 0 for d in dims):
        return 0
    return 1 + sum((d - 1) * s for d, s in zip(dims, strides))


def is_kernel_root(s: Stmt) -> bool:
    return isinstance(s, For) and s.kind is ForKind.THREAD_BINDING and \
        s.thread_tag is not None and s.thread_tag is not ThreadTag.VTHREAD


# ---- walking ----------------------------------------------------------------------------------------
def walk(node: Any, fn: Any) -> None:
    """Pre-order visit of statements and expressions, IntrinCall regions included."""
    fn(node)
    if isinstance(node, IntrinCall):
        for r in node.inputs + node.outputs:
            for m in r.mins:
                walk(m, fn)
        return
    for c in children(node):
        walk(c, fn)


def _stage_names(s: Stmt) -> list[str]:
    names: list[str] = []

    def fn(n: Any) -> None:
        if isinstance(n, BufferStore) and n.buffer.name not in names:
            names.append(n.buffer.name)
        elif isinstance(n, IntrinCall):
            for r in n.outputs:
                if r.buffer.name not in names:
                    names.append(r.buffer.name)
    walk(s, fn)
    return names


# ---- the host side ------------------------------------------------------------------------------------
class _Splitter:
    def __init__(self, func: PrimFunc, target: Target):
        self.func = func
        self.target = target
        self.kernels: list[KernelInfo] = []
        self.base = _safe_name(func.name)
        self.n_roots = _count_kernels(func.body)

    def host(self, s: Stmt, scope: frozenset) -> Any:
        if isinstance(s, SeqStmt):
            return HostSeq([self.host(x, scope) for x in s.stmts])
        if isinstance(s, Allocate):
            if s.buffer.scope is not StorageScope.GLOBAL:
                raise BuildError(f"CUDA: '{s.buffer.name}' is allocated in {s.buffer.scope} memory "
                                 f"outside any kernel; {s.buffer.scope} buffers must be attached "
                                 f"(compute_at) inside a loop bound to blockIdx/threadIdx")
            nbytes = buffer_nbytes(s.buffer)
            check_host_expr(nbytes, scope, f"the size of '{s.buffer.name}'")
            return HostAlloc(s.buffer, nbytes, self.host(s.body, scope))
        if isinstance(s, LetStmt):
            check_host_expr(s.value, scope, f"the value of '{s.var.name}'")
            return HostLet(s.var, s.value, self.host(s.body, scope | {s.var}))
        if isinstance(s, IfThenElse):
            check_host_expr(s.cond, scope, "a condition outside every kernel")
            return HostIf(s.cond, self.host(s.then_case, scope),
                          None if s.else_case is None else self.host(s.else_case, scope))
        if is_kernel_root(s):
            return self.kernel(s, scope)
        if isinstance(s, ExternCall) and s.device is not None:
            return self.kernel(extern_launch(s), scope)
        if isinstance(s, Evaluate) and isinstance(s.value, Const):
            return HostSeq([])
        raise self.unbound(s)

    def unbound(self, s: Stmt) -> BuildError:
        if isinstance(s, ExternCall):
            if s.packed:
                return BuildError(f"CUDA: the extern stage calls the packed function "
                                  f"'{s.func}', a Python function on the host, which a CUDA "
                                  f"module cannot call (tdsl has no cuBLAS/cuDNN bindings); "
                                  f"build for 'llvm', or write the stage as a CUDA device "
                                  f"function: call_extern(dtype, name, ..., source=, grid=, "
                                  f"block=)")
            return BuildError(f"CUDA: the extern stage calls the C function '{s.func}', which "
                              f"runs on the host; for CUDA pass its device version: "
                              f"call_extern(dtype, '{s.func}', ..., source=<CUDA C defining "
                              f"__device__ void {s.func}(...)>, grid=<blocks>, block=<threads>)")
        if isinstance(s, For) and "scan" in s.annotations:
            return BuildError(f"CUDA: the scan stage '{s.annotations['scan']}' (td.scan) is "
                              f"unscheduled, so its steps run as serial loops outside every "
                              f"kernel; bind its spatial loops (s[scan].split(scan.op."
                              f"spatial_axis[0], ...), then bind to blockIdx.x/threadIdx.x, as "
                              f"for the update compute in TVM) so each GPU thread runs the "
                              f"recurrence of its points, or build for 'llvm'")
        stages = _stage_names(s)
        what = f"stage '{stages[0]}'" if len(stages) == 1 else \
            ("stages " + ", ".join(f"'{n}'" for n in stages)) if stages else "a statement"
        if isinstance(s, For):
            where = f"its loop '{s.var.name}' ({s.kind.value}) is not bound to a GPU axis"
        else:
            where = f"a {type(s).__name__} runs outside every thread-bound loop"
        if self.n_roots:
            why = (f"the function has {self.n_roots} GPU kernel(s) but {what} is left unbound: "
                   f"{where}")
        else:
            why = (f"{what} has no loop bound to blockIdx/threadIdx, so nothing runs on the GPU: "
                   f"{where}")
        return BuildError(f"CUDA: {why}. Bind its outer loops with s[{stages[0] if stages else 'X'}]"
                          f".bind(loop, td.thread_axis('blockIdx.x')) (and threadIdx.x for the "
                          f"inner ones), or compute_at it inside a bound loop of its consumer")

    # ---- one kernel ------------------------------------------------------------------------------
    def kernel(self, root: For, scope: frozenset) -> Any:
        idx = len(self.kernels)
        name = f"{self.base}_kernel" if self.n_roots == 1 else f"{self.base}_kernel{idx}"
        # a tensor-core GEMM (tc_gemm.py) or attention (tc_attention.py) body is kept as is
        tc = find_plan(root, name) or find_attention_plan(root, name)
        if tc is None:
            root = optimize_kernel(root)   # guards out of k loops, accumulators in registers
        info = analyze_kernel(root, name, scope, self.func, self.target)
        if tc is not None:
            info.tc = tc
            info.dynamic_shared_bytes = tc.smem_bytes
            limits.check_dynamic_shared_memory(name, info.shared_bytes + tc.smem_bytes,
                                               self.target.gpu)
        self.kernels.append(info)
        plan: Any = HostLaunch(info)
        for buf in reversed(info.hoisted):
            nbytes = buffer_nbytes(buf)
            check_host_expr(nbytes, scope, f"the size of '{buf.name}' (allocated in kernel "
                                           f"'{name}')")
            plan = HostAlloc(buf, nbytes, plan)
        return plan


def _count_kernels(s: Stmt) -> int:
    if is_kernel_root(s) or isinstance(s, ExternCall) and s.device is not None:
        return 1
    if isinstance(s, SeqStmt):
        return sum(_count_kernels(x) for x in s.stmts)
    if isinstance(s, (Allocate, LetStmt)):
        return _count_kernels(s.body)
    if isinstance(s, IfThenElse):
        return _count_kernels(s.then_case) + (_count_kernels(s.else_case) if s.else_case else 0)
    if isinstance(s, For):
        return _count_kernels(s.body)
    return 0


def _safe_name(name: str) -> str:
    import re
    out = re.sub(r"[^0-9a-zA-Z_]", "_", name) or "func"
    return out if not out[0].isdigit() else "f_" + out


def extern_launch(call: ExternCall) -> For:
    """The kernel of an extern call with CUDA device code: loops bound to the launch's
    block and thread axes (those of size other than 1) around the call."""
    sizes = list(zip(_BLOCK_TAGS + _THREAD_TAGS, call.device.grid + call.device.block))
    body: Stmt = call
    loops = [(t, e) for t, e in sizes if not (isinstance(e, Const) and e.value == 1)]
    for tag, extent in reversed(loops or [(ThreadTag.THREAD_X, Const(1, "int64"))]):
        body = For(Var(f"{call.func}.{tag.value}", "int64"), Const(0, "int64"), extent,
                   ForKind.THREAD_BINDING, body, thread_tag=tag)
    return body  # type: ignore[return-value]


def analyze_kernel(root: For, name: str, scope: frozenset, func: PrimFunc,
                   target: Target) -> KernelInfo:
    """The launch configuration, parameters and storage of the kernel under ``root``."""
    inner: set[Var] = set()
    thread_loops: list[For] = []
    allocs: list[Allocate] = []
    touched: list[Buffer] = []
    written: set[int] = set()
    device_code: list[str] = []
    uses_barrier = False

    def fn(n: Any) -> None:
        nonlocal uses_barrier
        if isinstance(n, (For, LetStmt)):
            inner.add(n.var)
        if is_kernel_root(n):
            thread_loops.append(n)
        elif isinstance(n, Allocate):
            allocs.append(n)
        elif isinstance(n, Barrier):
            uses_barrier = True
        if isinstance(n, (BufferLoad, BufferStore)):
            _add(touched, n.buffer)
            if isinstance(n, BufferStore):
                written.add(id(n.buffer))
        elif isinstance(n, IntrinCall):
            for r in n.inputs:
                _add(touched, r.buffer)
            for r in n.outputs:
                _add(touched, r.buffer)
                written.add(id(r.buffer))
        elif isinstance(n, ExternCall):   # a device function: it may write any buffer
            if n.device is not None and n.device.source not in device_code:
                device_code.append(n.device.source)
            for a in n.args:
                if isinstance(a, Buffer):
                    _add(touched, a)
                    written.add(id(a))
    walk(root, fn)

    # launch extents: per tag, a loop whose extent the host can compute
    # (a loop of extent 1 runs on the first index only: it sets the size of no axis that
    # another loop binds)
    launch: dict[ThreadTag, Expr] = {}
    for loop in sorted(thread_loops, key=is_first_thread_loop):
        if loop.thread_tag in launch:
            continue
        if not (free_vars(loop.extent) & inner):
            launch[loop.thread_tag] = loop.extent
    for loop in thread_loops:
        if loop.thread_tag not in launch:
            raise BuildError(f"CUDA kernel '{name}': every loop bound to {loop.thread_tag} "
                             f"(e.g. '{loop.var.name}', extent {loop.extent!r}) has an extent that "
                             f"depends on an enclosing loop, so the launch size is unknown; split "
                             f"by a constant factor before binding")
    one = Const(1, "int64")
    grid = tuple(launch.get(t, one) for t in _BLOCK_TAGS)
    block = tuple(launch.get(t, one) for t in _THREAD_TAGS)
    for e in grid + block:
        check_host_expr(e, scope | set(func.size_vars), f"a launch extent of kernel '{name}'")
    gpu = target.gpu
    limits.check_block_dims(name, _consts(block), gpu)
    limits.check_threads_per_block(name, _consts(block), gpu)
    limits.check_grid_dims(name, _consts(grid), gpu)
    ana = Analyzer()
    bound = limits.max_threads([ana.const_int_bound(b)[1] for b in block], gpu)

    # storage
    shared: list[Buffer] = []
    hoisted: list[Buffer] = []
    shared_bytes = local_bytes = 0
    for a in allocs:
        buf = a.buffer
        if buf.scope is StorageScope.GLOBAL:
            hoisted.append(buf)
            continue
        span = const_span(buf)
        if span is None:
            raise BuildError(f"CUDA kernel '{name}': {buf.scope} buffer '{buf.name}' has a "
                             f"symbolic shape {list(buf.shape)}; {buf.scope} arrays need constant "
                             f"sizes (split the loops it is attached in by constant factors)")
        if buf.scope is StorageScope.LOCAL:
            local_bytes += span * buf.dtype.itemsize
        if buf.scope is StorageScope.SHARED:
            shared.append(buf)
            nbytes = span * buf.dtype.itemsize
            shared_bytes += -(-nbytes // SHARED_ALIGN) * SHARED_ALIGN
    from .allreduce import find, scratch_bytes
    for red in find(root):   # the scratch arrays the code generator declares
        shared_bytes += -(-scratch_bytes(red, block, bound) // SHARED_ALIGN) * SHARED_ALIGN
        uses_barrier = True
    limits.check_shared_memory(name, shared_bytes, _detail(shared), gpu)
    limits.check_local_memory(name, local_bytes, _detail(
        [a.buffer for a in allocs if a.buffer.scope is StorageScope.LOCAL]), gpu)

    # parameters: global buffers it touches, then the sizes it uses
    params: list[KernelParam] = []
    globals_ = [b for b in touched if b.scope is StorageScope.GLOBAL]
    order = {id(b): i for i, b in enumerate(func.params)}
    globals_.sort(key=lambda b: (0, order[id(b)]) if id(b) in order else (1, 0))
    used_vars: set[Var] = set()
    for b in globals_:  # parameters, host allocations, and global buffers hoisted from here
        params.append(KernelParam(buffer=b, is_const=id(b) not in written,
                                  user_array=id(b) in order))
    for b in touched + [a.buffer for a in allocs]:
        for e in b.effective_strides():
            used_vars |= free_vars(e)

    def collect(n: Any) -> None:
        if isinstance(n, Var):
            used_vars.add(n)
        elif is_kernel_root(n) and same_extent(n.extent, launch[n.thread_tag]):
            # the launch size itself is not needed inside the kernel
            walk(n.min, collect)
            walk(n.body, collect)
            return
        elif isinstance(n, IntrinCall):
            walk(n, collect_flat)
            return
        for c in children(n):
            collect(c)

    def collect_flat(n: Any) -> None:
        if isinstance(n, Var):
            used_vars.add(n)
    collect(root)
    for tag, ext in launch.items():
        if any(lp.thread_tag is tag and not same_extent(lp.extent, ext) for lp in thread_loops):
            used_vars |= free_vars(ext)   # a guarded loop compares with the launch size
    outer = [v for v in used_vars if v not in inner]
    for v in outer:
        if v not in scope and v not in func.size_vars:
            raise BuildError(f"CUDA kernel '{name}': variable '{v.name}' is used but defined "
                             f"neither inside the kernel nor on the host")
    size_order = {id(v): i for i, v in enumerate(func.size_vars)}
    outer.sort(key=lambda v: (size_order.get(id(v), len(size_order)), v.name, v.seq))
    params.extend(KernelParam(var=v) for v in outer)
    return KernelInfo(name, root, params, grid, block, launch, shared, shared_bytes,  # type: ignore[arg-type]
                      hoisted, uses_barrier=uses_barrier, local_bytes=local_bytes,
                      max_threads=bound, gpu=gpu, device_code="\n".join(device_code))


def _consts(dims: tuple) -> list:
    return [int(d.value) if isinstance(d, Const) else None for d in dims]


def _detail(bufs: list) -> str:
    return ", ".join(f"'{b.name}' {const_span(b) * b.dtype.itemsize} B" for b in bufs)


def _add(lst: list, buf: Buffer) -> None:
    if not any(b is buf for b in lst):
        lst.append(buf)


def split_kernels(func: PrimFunc, target: Target) -> tuple[Any, list[KernelInfo]]:
    """The host plan of ``func`` and its kernels, with every GPU legality check done."""
    sp = _Splitter(func, target)
    plan = sp.host(func.body, frozenset(func.size_vars))
    if not sp.kernels:
        raise BuildError(f"CUDA: '{func.name}' has no loop bound to blockIdx/threadIdx, so "
                         f"nothing would run on the GPU; bind the outer loops of the output stage "
                         f"(s[C].bind(i, td.thread_axis('blockIdx.x')))")
    return plan, sp.kernels


def same_extent(a: Expr, b: Expr) -> bool:
    return a is b or structural_equal(a, b)
