"""CUDA C for the kernels of a lowered function (the C renderer, specialized).

Per kernel: an ``extern "C" __global__`` function whose parameters are the global
buffers it touches (``const`` and ``__restrict__`` where read-only) and the sizes
it uses; ``__shared__`` arrays hoisted to the top; thread-bound loops read the
hardware index (``blockIdx``/``threadIdx``), guarded only where the loop is shorter
than the launch; ``sync_threads()`` becomes ``__syncthreads()``; tensorized
regions use the intrinsic's "cuda" implementation or its declared computation.
"""
from __future__ import annotations

from contextlib import ExitStack, contextmanager
from functools import reduce
from typing import Any, Callable, Iterator

from tdsl.errors import BuildError, InternalError
from tdsl.expr import And, BufferLoad, Const, Expr, Var
from tdsl.stmt import (AllReduce, Allocate, Barrier, Buffer, BufferRegion, ExternCall, For,
                       ForKind, IfThenElse, IntrinCall, LetStmt, SeqStmt, Stmt, StorageScope,
                       ThreadTag)
from tdsl.dtype import DType
from tdsl.target import Target
from tdsl.visitor import post_order_visit

from . import barriers, pipeline, tc_attention, tc_gemm, wmma_acc
from .allreduce import AllReduceEmitter
from .cstyle import LAND, PRIMARY, CStyleRenderer, c_type, type_helper
from .kernels import KernelInfo, const_span, same_extent, walk
from .prelude import prelude
from .vectorize import LANES, VectorAccess, VectorPlan, plan_vector_loop


class KernelRenderer(CStyleRenderer):
    """Renders one kernel to its ``__global__`` function."""

    def __init__(self, kernel: KernelInfo, target: Target):
        super().__init__()
        self.kernel = kernel
        self.target = target
        self.wmma_functions: set[str] = set()
        self.thread_vars: set[Var] = set()     # values that differ between threads of a block
        self.divergent = 0                     # depth of thread-dependent conditions
        self.enclosing_tags: list[ThreadTag] = []
        self.align_flags: dict[tuple[str, int], str] = {}   # (pointer, bytes) -> flag name
        self.local_align: dict[int, int] = {}               # id(local buffer) -> bytes
        self.allreduce = AllReduceEmitter(self)
        self.wmma_acc: dict[int, str] = {}    # id(WMMA call) -> its register accumulator
        self.narrow = fits_int32(kernel)      # loop indices as 32-bit ints (see fits_int32)
        self.async_dst: frozenset = frozenset()   # ids of shared buffers filled by cp.async
        self.pipelined: dict[int, tuple] = {}     # id(loop body) -> its pipelined parts

    # ---- the function ----------------------------------------------------------------------
    def render(self) -> str:
        k = self.kernel
        params = []
        for p in k.params:
            if p.buffer is not None:
                p.name = self.names.bind(p.buffer, p.buffer.name)
                const = "const " if p.is_const else ""
                p.c_decl = f"{const}{c_type(p.buffer.dtype)}* __restrict__"
                self.use_type(p.buffer.dtype)
            else:
                p.name = self.names.bind(p.var, p.var.name)
                p.c_decl = "long long"
            params.append(f"{p.c_decl} {p.name}")
        # always: without it ptxas may give a thread more registers than a block of the
        # most threads the launch can have leaves it (threads_per_block == max_threads when
        # the block size is constant)
        blocks = min_blocks_per_sm(k)
        launch_bounds = f"__launch_bounds__({k.max_threads}{f', {blocks}' if blocks else ''}) "
        self.depth = 1
        for buf in k.shared:
            self.helpers.add("shared")
            self.use_type(buf.dtype)
            name = self.names.bind(buf, buf.name)
            k.c_names[name] = buf.name
            self.emit(f"__shared__ tdsl_shared<{c_type(buf.dtype)}, {const_span(buf)}> {name};")
        flags_at = len(self.lines)
        self.stmt(k.root)
        self.lines[flags_at:flags_at] = self.allreduce.decls + [
            f"  const bool {flag} = ((unsigned long long){ptr} & {nbytes - 1}) == 0;"
            f"  // vector accesses need {nbytes}-byte alignment"
            for (ptr, nbytes), flag in self.align_flags.items()]
        self.depth = 0
        body = "\n".join(self.lines)
        head = f'extern "C" __global__ void {launch_bounds}{k.name}({", ".join(params)}) {{'
        k.source = f"{head}\n{body}\n}}\n"
        return k.source

    def use_type(self, dtype: DType) -> None:
        """Record the prelude helper that defines ``dtype``'s C type (float16, bfloat16)."""
        helper = type_helper(dtype)
        if helper:
            self.helpers.add(helper)

    def stmt_handlers(self) -> dict[type, Callable[[Any], None]]:
        h = super().stmt_handlers()
        h.update({Allocate: self.allocate, Barrier: self.barrier, IntrinCall: self.intrin_call,
                  AllReduce: self.allreduce.emit, SeqStmt: self.seq, ExternCall: self.extern_call})
        return h

    def extern_call(self, s: ExternCall) -> None:
        """Every thread calls the user's ``__device__`` function (td.extern): a pointer per
        buffer (``tdsl_raw``: the plain pointer, also under emulation), a scalar per number."""
        if s.device is None:
            raise InternalError(f"CUDA codegen: extern call of '{s.func}' without device code")
        self.helpers.add("raw")
        args = [f"tdsl_raw({self.buffer_ref(a)})" if isinstance(a, Buffer) else self.expr(a)
                for a in s.args]
        self.emit(f"{s.func}({', '.join(args)});")

    def seq(self, s: SeqStmt) -> None:
        """Statements in order; a WMMA tile's zero-init followed by its k loop keeps the
        accumulator in registers (wmma_acc.py); barriers that order nothing are dropped
        (barriers.py); a double buffer's fills become cp.async copies on sm_80+
        (pipeline.py)."""
        if id(s) in self.pipelined:
            pipeline.render_body(self, s)
            return
        items = list(s.stmts)
        drop = barriers.redundant(items)
        if drop:
            self.emit(f"// {len(drop)} barrier(s) between independent fetches merged")
            items = [x for n, x in enumerate(items) if n not in drop]
        pipes = pipeline.plan(self, items)
        i = 0
        while i < len(items):
            if i in pipes:
                pipeline.render(self, items, pipes[i])
                i = pipes[i].loop + 1
                continue
            p = wmma_acc.plan(self, items[i], items[i + 1]) if i + 1 < len(items) else None
            if p is not None:
                wmma_acc.render(self, p)
                i += 2
                continue
            self.stmt(items[i])
            i += 1

    # ---- thread structure -----------------------------------------------------------------------
    def loop(self, s: For) -> None:
        if self.kernel.tc is not None and s is self.kernel.tc.loop:
            tc = self.kernel.tc                     # the tensor-core microkernel
            (tc_attention.render if isinstance(tc, tc_attention.FaPlan) else tc_gemm.render)(
                self, tc)
            return
        if s.kind is not ForKind.THREAD_BINDING or s.thread_tag is ThreadTag.VTHREAD:
            dep = self.depends_on_thread(s.min) or self.depends_on_thread(s.extent)
            if s.kind is ForKind.VECTORIZED and not dep:
                plan = plan_vector_loop(self, s)
                if plan is not None:
                    self.vector_loop(plan)
                    return
            if dep:
                self.thread_vars.add(s.var)
                self.divergent += 1
            try:
                self.serial_loop(s)
            finally:
                if dep:
                    self.divergent -= 1
            return
        tag = s.thread_tag
        assert tag is not None
        ity = "int" if self.narrow else "long long"
        hw = f"({ity}){'blockIdx' if tag.is_block else 'threadIdx'}.{tag.value[-1]}"
        launch = self.kernel.launch_extent[tag]
        guarded = not same_extent(s.extent, launch)
        value = hw if isinstance(s.min, Const) and s.min.value == 0 else \
            f"{self.operand(s.min, 4)} + {hw}"
        if tag.is_thread:
            self.thread_vars.add(s.var)
        self.bind_loop_range(s.var, s.min, s.extent)
        self.enclosing_tags.append(tag)
        try:
            with self.names.scoped(s.var, s.var.name) as name:
                if not guarded:
                    self.emit(f"const {ity} {name} = {value};  // {tag}")
                    self.stmt(s.body)
                    return
                ext = self.expr(s.extent)
                if not self.ana.can_prove(s.extent <= launch):
                    # a shorter loop is guarded below; a longer one would silently lose
                    # iterations
                    self.emit(f"if ({ext} > {self.expr(launch)}) __trap();")
                self.divergent += 1
                with self.block(f"if ({hw} < {ext})"):
                    self.emit(f"const {ity} {name} = {value};  // {tag}")
                    self.stmt(s.body)
                self.divergent -= 1
        finally:
            self.enclosing_tags.pop()

    def serial_loop(self, s: For) -> None:
        """A C loop; its index is an ``int`` in a kernel whose index arithmetic provably
        fits 32 bits (64-bit multiplies and adds are two instructions each on a GPU)."""
        at = len(self.lines)
        super().serial_loop(s)
        if self.narrow and s.var.dtype is DType.INT64:
            for n in range(at, min(at + 2, len(self.lines))):
                if "for (long long " in self.lines[n]:
                    self.lines[n] = self.lines[n].replace("for (long long ", "for (int ", 1)
                    break

    # ---- vector accesses (see vectorize.py) --------------------------------------------------
    def vector_loop(self, p: VectorPlan) -> None:
        self.helpers.add("vector")
        for acc in [p.store, *p.loads]:   # the 16-bit float types the vectors hold
            self.use_type(acc.buffer.dtype)
        for buf, nbytes in p.local_align:
            self.local_align[id(buf)] = max(self.local_align.get(id(buf), 0), nbytes)
        checks = [self.align_flag(buf, nbytes) for buf, nbytes in p.runtime_align]
        kind = f"{p.store.ctype} accesses" if p.store.stride == 1 else \
            f"{p.loads[0].ctype if p.loads else 'scalar'} loads, stores {p.store.stride} apart"
        self.emit(f"// vectorized '{p.lane.name}': {p.width} lanes, {kind}")
        self.kernel.vector_loads_16 += sum(
            1 for acc in p.loads if acc.buffer.scope in (None, StorageScope.GLOBAL) and
            p.width * acc.buffer.dtype.itemsize == 16)
        with ExitStack() as stack:
            if p.invariant:
                cond = reduce(And, p.invariant)
                stack.enter_context(self.block(f"if ({self.expr(cond)})"))
                stack.enter_context(self.ana.constraint(cond))
            checks += [self.operand(w, LAND) for w in p.worst]
            if not checks:
                with self._braces():
                    self.vector_body(p)
                return
            with self.block(f"if ({' && '.join(checks)})"):
                self.vector_body(p)
            with self.block("else"):  # a tail, or a user's array that starts misaligned
                # (plain stores there, not 4-byte cp.async: fewer live addresses, no spills)
                prev, self.async_dst = self.async_dst, frozenset()
                try:
                    self.serial_loop(p.scalar_loop())
                finally:
                    self.async_dst = prev

    @contextmanager
    def _braces(self) -> Iterator[None]:
        self.emit("{")
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            self.emit("}")

    def vector_pointer(self, acc: VectorAccess) -> str:
        off = self.expr(acc.base)
        name = self.buffer_ref(acc.buffer)
        if acc.buffer.scope is StorageScope.SHARED:
            return f"{name}.ptr({off})"
        return name if off == "0" else f"{name} + {off}"

    def vector_body(self, p: VectorPlan) -> None:
        if p.store.stride == 1 and id(p.store.buffer) in self.async_dst and \
                len(p.loads) == 1 and \
                p.value is p.loads[0].nodes[0] and p.loads[0].ctype == p.store.ctype and \
                p.loads[0].buffer.scope is StorageScope.GLOBAL and \
                p.width * p.store.buffer.dtype.itemsize in pipeline.ASYNC_SIZES:
            acc = p.loads[0]       # a plain copy into a double buffer: cp.async
            self.emit(f"tdsl_cp_async<{p.width * p.store.buffer.dtype.itemsize}>("
                      f"{self.vector_pointer(p.store)}, {self.vector_pointer(acc)});")
            return
        for acc in p.loads:
            acc.name = self.names.fresh(f"{acc.buffer.name}_v")
            self.emit(f"const {acc.ctype} {acc.name} = tdsl_vload<{acc.ctype}>("
                      f"{self.vector_pointer(acc)});")
        for acc in p.loads:
            if p.value is acc.nodes[0] and acc.ctype == p.store.ctype:  # a plain copy
                self.emit(f"tdsl_vstore({self.vector_pointer(p.store)}, {acc.name});")
                return
        scalar: dict[int, tuple[str, int]] = {}
        for group in p.scalars:
            name = self.names.fresh(f"{group[0].buffer.name}_s")
            self.emit(f"const {c_type(group[0].dtype)} {name} = {self.expr(group[0])};")
            scalar.update((id(node), (name, PRIMARY)) for node in group)
        strided = p.store.stride != 1       # a transposing copy: lanes stored one by one
        out = self.names.fresh(f"{p.store.buffer.name}_v")
        if not strided:
            self.emit(f"{p.store.ctype} {out};")
        for lane in range(p.width):
            self.overrides = {id(p.lane): (str(lane), PRIMARY), **scalar}
            for acc in p.loads:
                for node in acc.nodes:
                    self.overrides[id(node)] = (f"{acc.name}.{LANES[lane]}", PRIMARY)
            try:
                code = self.expr(p.value)
            finally:
                self.overrides = {}
            if strided:
                at = self.ana.simplify(p.store.base +
                                       Const(lane * p.store.stride, p.store.base.dtype))
                self.emit(f"{self.buffer_ref(p.store.buffer)}[{self.expr(at)}] = {code};")
            else:
                self.emit(f"{out}.{LANES[lane]} = {code};")
        if not strided:
            self.emit(f"tdsl_vstore({self.vector_pointer(p.store)}, {out});")

    def align_flag(self, buf: Any, nbytes: int) -> str:
        """A kernel-wide flag: the user's array ``buf`` starts ``nbytes``-aligned."""
        ptr = self.buffer_ref(buf)
        flag = self.align_flags.get((ptr, nbytes))
        if flag is None:
            flag = self.align_flags[(ptr, nbytes)] = self.names.fresh(f"{ptr}_aligned{nbytes}")
        return flag

    def depends_on_thread(self, e: Expr) -> bool:
        found = False

        def fn(n: Any) -> None:
            nonlocal found
            if isinstance(n, BufferLoad) or (isinstance(n, Var) and n in self.thread_vars):
                found = True
        walk(e, fn)
        return found

    def if_then_else(self, s: IfThenElse) -> None:
        dep = self.depends_on_thread(s.cond)
        self.divergent += dep
        try:
            super().if_then_else(s)
        finally:
            self.divergent -= dep

    def let(self, s: LetStmt) -> None:
        if self.depends_on_thread(s.value):
            self.thread_vars.add(s.var)
        super().let(s)

    def store(self, s: Any) -> None:
        """A store; a global element copied unchanged into a double buffer's shared array
        is a ``cp.async`` (pipeline.py) where the renderer is emitting its fill."""
        found = pipeline.async_source(s, self.async_dst) if self.async_dst else None
        if found is None:
            super().store(s)
            return
        v, cond = found
        dst = f"{self.buffer_ref(s.buffer)}.ptr({self.flat_index(s.buffer, s.indices)})"
        base = self.buffer_ref(v.buffer)
        if cond is None:
            off = self.flat_index(v.buffer, v.indices)
            src = base if off == "0" else f"{base} + {off}"
            self.emit(f"tdsl_cp_async<{s.buffer.dtype.itemsize}>({dst}, {src});")
            return
        # padding: a zero-filling copy; the address is the buffer's start where the
        # element lies outside it (no byte is read there)
        with self._braces():
            ok = self.names.fresh("in_bounds")
            self.emit(f"const bool {ok} = {self.expr(cond)};")
            with self.ana.constraint(cond):
                off = self.flat_index(v.buffer, v.indices)
            self.emit(f"tdsl_cp_async_zfill<{s.buffer.dtype.itemsize}>({dst}, {ok} ? {base} + "
                      f"{off} : {base}, {ok});")

    def barrier(self, s: Barrier) -> None:
        if self.divergent:
            raise BuildError(f"CUDA kernel '{self.kernel.name}': sync_threads() sits under a "
                             f"condition that differs between threads of a block (a guarded "
                             f"thread loop or a thread-dependent if); the threads that skip it "
                             f"would deadlock the others")
        self.emit("__syncthreads();")

    # ---- storage ---------------------------------------------------------------------------------
    def allocate(self, s: Allocate) -> None:
        buf = s.buffer
        if buf.scope is StorageScope.LOCAL:
            name = self.names.bind(buf, buf.name)
            self.use_type(buf.dtype)
            at = len(self.lines)
            self.emit(f"{c_type(buf.dtype)} {name}[{const_span(buf)}];")
            self.stmt(s.body)
            align = self.local_align.get(id(buf))
            if align:  # vector accesses need an aligned start
                decl = f"{c_type(buf.dtype)} {name}["
                self.lines[at] = self.lines[at].replace(decl, f"__align__({align}) {decl}", 1)
            return
        elif self.names.get(buf) is None:
            raise InternalError(f"CUDA codegen: {buf.scope} buffer '{buf.name}' was not hoisted")
        self.stmt(s.body)

    # ---- tensor intrinsics ------------------------------------------------------------------------
    def intrin_call(self, s: IntrinCall) -> None:
        impl = getattr(s.intrin, "impls", {}).get("cuda")
        name = getattr(s.intrin, "name", type(s.intrin).__name__)
        if impl is None:
            fallback = s.intrin.lower_fallback(s)
            if not isinstance(fallback, Stmt):
                raise BuildError(f"tensor intrinsic '{name}': lower_fallback returned "
                                 f"{type(fallback).__name__}, not a statement")
            self.emit(f"// tensorized '{name}': its declared computation (no CUDA implementation)")
            self.stmt(fallback)
            return
        self.emit(f"{{  // tensorized: {name}")
        self.depth += 1
        try:
            impl(s, IntrinContext(self, s))
        finally:
            self.depth -= 1
            self.emit("}")


class IntrinContext:
    """What a tensor intrinsic's "cuda" implementation may use to emit its code.

    The implementation is called as ``impl(call, ctx)`` and emits statements with
    ``ctx.emit``; ``ctx.pointer(region)`` and ``ctx.matrix_layout(region, ...)`` give
    the region's address and leading dimension.
    """

    def __init__(self, renderer: KernelRenderer, call: IntrinCall):
        self.r = renderer
        self.call = call

    @property
    def kernel(self) -> KernelInfo:
        return self.r.kernel

    def emit(self, line: str) -> None:
        self.r.emit(line)

    def fresh(self, hint: str) -> str:
        return self.r.names.fresh(hint)

    def use(self, helper: str, functions: "set[str] | None" = None) -> None:
        self.r.helpers.add(helper)
        if functions:
            self.r.wmma_functions |= functions

    def expr(self, e: Expr) -> str:
        return self.r.expr(e)

    def offset(self, region: BufferRegion) -> Expr:
        return self.r.flat_offset(region.buffer, region.mins)

    def pointer(self, region: BufferRegion) -> str:
        """A C expression of a pointer to the region's first element."""
        buf = region.buffer
        off = self.r.expr(self.offset(region))
        name = self.r.buffer_ref(buf)
        if buf.scope is StorageScope.SHARED:
            return f"{name}.ptr({off})"
        return name if off == "0" else f"{name} + {off}"

    def stride(self, region: BufferRegion, axis: int) -> "Expr | None":
        """The buffer stride (elements) along the intrinsic's tensor dimension ``axis``."""
        strides = region.buffer.effective_strides()
        for d, a in enumerate(region.axes):
            if a == axis:
                return strides[d]
        return None

    def enclosing_thread_tags(self) -> list[ThreadTag]:
        return list(self.r.enclosing_tags)

    def require_align(self, region: BufferRegion, nbytes: int, why: str) -> None:
        """Refuse a region whose start cannot be proven ``nbytes``-aligned; record the need
        on the kernel parameter (checked at launch) for global buffers."""
        item = region.buffer.dtype.itemsize
        off = self.offset(region)
        if not divisible(off, max(1, nbytes // item), self.r.ana):
            raise BuildError(f"{why}: the region of '{region.buffer.name}' starts at element "
                             f"offset {off!r}, which is not provably a multiple of "
                             f"{nbytes // item} ({nbytes} bytes)")
        for p in self.kernel.params:
            if p.buffer is region.buffer:
                p.min_align = max(p.min_align, nbytes)
        if region.buffer.scope is StorageScope.LOCAL:
            raise BuildError(f"{why}: '{region.buffer.name}' is a per-thread (local) buffer; "
                             f"use a shared or global one")


def min_blocks_per_sm(kernel: KernelInfo) -> int:
    """The ``pragma(loop, "min_blocks_per_sm", n)`` of the kernel's loops (0: none): the
    second ``__launch_bounds__`` argument, so ptxas budgets registers for n resident
    blocks."""
    found = 0

    def fn(n: Any) -> None:
        nonlocal found
        if isinstance(n, For):
            v = n.annotations.get("pragma_min_blocks_per_sm")
            if v is not None:
                found = max(found, int(getattr(v, "value", v)))
    post_order_visit(kernel.root, fn)
    return found


#: Index arithmetic is 32-bit where every buffer has fewer elements than this (a margin
#: below 2^31 for the intermediate terms of an index).
INT32_ELEMENTS = 1 << 30


def fits_int32(kernel: KernelInfo) -> bool:
    """True if the kernel's index arithmetic provably fits ``int``: no symbolic sizes
    (every parameter a buffer of constant shape, every buffer fewer than 2^30 elements)
    and every loop of constant bounds; then every loop and thread index and every index
    expression built from them and constant strides is below 2^31 in magnitude."""
    if any(p.buffer is None for p in kernel.params):
        return False
    for p in kernel.params:
        total = 1
        for d in p.buffer.shape:
            if not isinstance(d, Const):
                return False
            total *= int(d.value)
        if total >= INT32_ELEMENTS:
            return False
    ok = True

    def fn(n: Any) -> None:
        nonlocal ok
        if isinstance(n, For) and not (isinstance(n.min, Const) and isinstance(n.extent, Const)
                                       and abs(int(n.min.value)) + int(n.extent.value)
                                       < INT32_ELEMENTS):
            ok = False
        if isinstance(n, LetStmt) and n.var.dtype is DType.INT64:
            ok = False                    # a let may hold anything: keep 64-bit
    post_order_visit(kernel.root, fn)
    return ok


def divisible(e: Expr, k: int, ana: Any) -> bool:
    """True if integer expression ``e`` is provably a multiple of ``k``."""
    from tdsl.expr import Add, Mul, Sub
    if k == 1:
        return True
    e = ana.simplify(e)
    if isinstance(e, Const):
        return int(e.value) % k == 0
    if isinstance(e, (Add, Sub)):
        return divisible(e.a, k, ana) and divisible(e.b, k, ana)
    if isinstance(e, Mul):
        for a, b in ((e.a, e.b), (e.b, e.a)):
            if isinstance(a, Const) and int(a.value) % k == 0:
                return True
            if isinstance(a, Const) and int(a.value) != 0:
                import math
                g = math.gcd(int(a.value), k)
                if divisible(b, k // g, ana):
                    return True
        return divisible(e.a, k, ana) or divisible(e.b, k, ana)
    return False


def generate(kernels: list[KernelInfo], target: Target) -> str:
    """The full CUDA C source: prelude, then every kernel in launch order."""
    helpers: set[str] = set()
    wmma: set[str] = set()
    bodies = []
    for k in kernels:
        r = KernelRenderer(k, target)
        bodies.append(r.render())
        helpers |= r.helpers
        wmma |= r.wmma_functions
    user = []   # the device functions extern stages call, once each, before the kernels
    for k in kernels:
        if k.device_code and k.device_code not in user:
            user.append(k.device_code)
    head = prelude(str(target), helpers, wmma)
    if user:
        head += "\n// ---- device functions given to td.call_extern ----\n" + "\n".join(user) + "\n"
    return head + "\n" + "\n".join(bodies)
