"""Lowered loop IR → LLVM IR (llvmlite.ir): functions, statements, memory, loops.

The generated function has the C ABI

    void <name>(T0* noalias p0, T1* noalias p1, ..., int64_t size_var0, ...)

with one pointer per parameter buffer (element type; bool is one byte) and one
int64 per symbolic size, in ``func.size_vars`` order.

Floating-point flags: by default float32/float64 operations carry only
``contract`` (so ``a*b + c`` may become an FMA; NaN, infinities and signed zeros
keep IEEE semantics and nothing is reassociated); float16 operations carry none,
so each rounds to float16 like NumPy.  A PrimFunc with ``attrs["fast_math"] =
True`` gets ``fast`` (reassociation, no NaN/inf) on float32/float64 operations.

Memory: ``Allocate`` of constant size up to ``STACK_LIMIT`` bytes is a 64-byte
aligned ``alloca`` in the entry block of the enclosing function (the kernel, or the
outlined body of a parallel loop, so each thread has its own); a larger or symbolic
one is taken from the workspace cache (``workspace.py``: kept between calls, so a call does
not page-fault a fresh block) and given back after its body.  ``shared`` scope has no
meaning on a CPU: it is treated as ``local`` (storage private to each iteration of
the enclosing parallel loop).  THREAD_BINDING loops and ``Barrier`` are GPU-only
and raise ``BuildError``.
"""
from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import llvmlite.ir as ir

from tdsl.dtype import DType
from tdsl.errors import BuildError
from tdsl.expr import Const, Var
from tdsl.visitor import post_order_visit
from tdsl.stmt import (Allocate, Barrier, Buffer, BufferStore, Evaluate, For, ForKind,
                       ExternCall, IfThenElse, IntrinCall, LetStmt, PrimFunc, SeqStmt, Stmt)

from . import bfloat, cabi, externs, parallel, vectorize, workspace
from .exprs import ExprEmitter
from .lanes import UNIFORM, VECTOR, VVal, is_zero, uniform
from .speculate import speculatable_loads
from .lltypes import (I1, I8, I32, I64, VOID, StringAttributes, const, loop_metadata,
                      mem_type)
from .machine import MachineSpec, data_layout

#: Largest constant-size allocation placed on the stack (bytes).
STACK_LIMIT = 128 * 1024
#: Nesting depth up to which lane-dependent ifs get an all-lanes/no-lane fast path.
MAX_LANE_SPLITS = 2
#: Largest UNROLLED extent unrolled by the code generator (beyond: LLVM metadata).
UNROLL_LIMIT = 512


def c_identifier(name: str) -> str:
    """``name`` made a valid C identifier."""
    s = re.sub(r"\W", "_", name)
    if not s or s[0].isdigit():
        s = "f_" + s
    return s


C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto "
    "if inline int long register restrict return short signed sizeof static struct switch "
    "typedef union unsigned void volatile while bool true false class new delete this "
    "template namespace operator private public protected virtual".split())
_RESERVED = {"main", "aligned_alloc", "free", "malloc", "memcpy", "memset", "memmove"} | C_KEYWORDS


def entry_symbol(name: str) -> str:
    """The kernel's symbol: ``name`` as a C identifier, with ``_kernel`` appended when it
    would clash with a symbol of the C runtime (a kernel named ``pow`` must not
    replace libm's ``pow``, which the generated code itself may call)."""
    s = c_identifier(name)
    if s in _RESERVED or s.startswith(("GOMP_", "omp_", "__")) or _process_has(s):
        s += "_kernel"
    return s


def _process_has(symbol: str) -> bool:
    try:
        return hasattr(ctypes.CDLL(None), symbol)
    except OSError:
        return False


@dataclass
class FuncState:
    """Per-function code generation state (the kernel, or an outlined parallel body)."""

    fn: ir.Function
    builder: ir.IRBuilder
    entry: ir.Block
    vars: dict = field(default_factory=dict)
    buffers: dict = field(default_factory=dict)
    in_parallel: bool = False
    lanes: int = 1
    mask: Any = None
    slots: dict = field(default_factory=dict)
    #: buffers this function allocated on its stack (``alloca``): a widened loop reads and
    #: writes their lanes one at a time, never through a vector of pointers
    #: (``vectorize._stack_lanes_load`` and ``_stack_lanes_store``)
    stack_buffers: set = field(default_factory=set)
    vector_loop: str = ""    # the widened loop being generated (for notes)
    store_name: str = ""     # the buffer whose stored value is being generated (for notes)
    #: how many branches (``if`` arms, lazy select operands) enclose the code being emitted
    branch_depth: int = 0
    #: the enclosing counted loops, innermost last: [branch depth at the loop's start,
    #: whether a scalar division by a variable was emitted under a branch inside it]
    loop_frames: list = field(default_factory=list)


class CodeGen(ExprEmitter):
    """Generates one LLVM module for one PrimFunc."""

    def __init__(self, func: PrimFunc, spec: MachineSpec, parallel_runtime: bool = True):
        self.func = func
        self.spec = spec
        self.entry_name = entry_symbol(func.name)
        self.module = ir.Module(name=self.entry_name)
        self.module.triple = spec.triple
        self.module.data_layout = data_layout(spec)
        self.fastmath: tuple[str, ...] = ("fast",) if func.attrs.get("fast_math") else ("contract",)
        self.fn_attrs = {"prefer-vector-width": "512", "min-legal-vector-width": "512"} \
            if spec.has_avx512 else {}
        self.parallel_runtime = parallel_runtime
        self.uses_parallel = False
        self.uses_workspace = False   # heap temporaries (the workspace cache's references)
        self.notes: list[str] = []
        self._load_cache: dict[int, bool] = {}
        #: loads proven in bounds: a lazy operand holding only those runs eagerly
        self._speculatable = speculatable_loads(func)
        self._keep: list[Any] = []
        self._outlined = 0
        self._lane_splits = 0
        self.st: FuncState

    # ---- module and function setup -------------------------------------------------------
    @property
    def b(self) -> ir.IRBuilder:
        return self.st.builder

    def new_function(self, name: str, arg_types: list[ir.Type], internal: bool,
                     ret: ir.Type = VOID) -> ir.Function:
        fn = ir.Function(self.module, ir.FunctionType(ret, arg_types), name)
        fn.attributes = StringAttributes(self.fn_attrs)
        fn.attributes.add("nounwind")
        if internal:
            fn.linkage = "internal"
        return fn

    def declare(self, name: str, ret: ir.Type, args: list[ir.Type],
                nounwind: bool = False) -> ir.Function:
        """The declaration of an external function or intrinsic (made once)."""
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, args), name)
            if nounwind:
                fn.attributes.add("nounwind")
        return fn

    def begin_function(self, fn: ir.Function, in_parallel: bool) -> FuncState:
        entry = fn.append_basic_block("entry")
        body = fn.append_basic_block("body")
        ir.IRBuilder(entry).branch(body)
        st = FuncState(fn, ir.IRBuilder(body), entry, in_parallel=in_parallel)
        return st

    def generate(self) -> ir.Module:
        """Build the module: the kernel function (and outlined parallel bodies)."""
        f = self.func
        ptr_types = [mem_type(p.dtype).as_pointer() for p in f.params]
        fn = self.new_function(self.entry_name, ptr_types + [I64] * len(f.size_vars),
                               internal=False, ret=I32)
        for a, p in zip(fn.args, f.params):
            a.name = c_identifier(p.name)
            a.add_attribute("noalias")
        self.st = self.begin_function(fn, in_parallel=False)
        for a, p in zip(fn.args, f.params):
            self.st.buffers[p] = a
        for a, v in zip(fn.args[len(f.params):], f.size_vars):
            a.name = c_identifier(v.name)
            self.st.vars[v] = uniform(self.convert_index(a, DType.INT64, v.dtype))
        cabi.emit_argument_checks(self, fn)
        self.stmt(f.body)
        self.b.ret(ir.Constant(I32, cabi.STATUS_OK))
        if self.uses_parallel:
            parallel.emit_thread_count_setter(self)
        cabi.embed_signature(self)
        return self.module

    # ---- statements -------------------------------------------------------------------------
    def stmt(self, s: Stmt) -> None:
        method = _STMTS.get(type(s))
        if method is None:
            raise BuildError(f"the LLVM backend cannot compile a {type(s).__name__} statement")
        method(self, s)

    def _seq(self, s: SeqStmt) -> None:
        for x in s.stmts:
            self.stmt(x)

    def _evaluate(self, s: Evaluate) -> None:
        self.expr(s.value)

    def _let(self, s: LetStmt) -> None:
        value = self.expr(s.value)
        vars_ = self.st.vars
        saved = vars_.get(s.var)
        vars_[s.var] = value
        try:
            self.stmt(s.body)
        finally:
            if saved is None:
                vars_.pop(s.var, None)
            else:
                vars_[s.var] = saved

    def _if(self, s: IfThenElse) -> None:
        if isinstance(s.cond, Const):
            branch = s.then_case if s.cond.value else s.else_case
            if branch is not None:
                self.stmt(branch)
            return
        cond = self.expr(s.cond)
        if cond.kind != UNIFORM:
            self._lane_if(s, cond.value)
            return
        b = self.b
        then_bb = b.append_basic_block("if.then")
        end_bb = b.append_basic_block("if.end")
        else_bb = b.append_basic_block("if.else") if s.else_case is not None else end_bb
        b.cbranch(cond.value, then_bb, else_bb)
        b.position_at_end(then_bb)
        with self.conditional():
            self.stmt(s.then_case)
        b.branch(end_bb)
        if s.else_case is not None:
            b.position_at_end(else_bb)
            with self.conditional():
                self.stmt(s.else_case)
            b.branch(end_bb)
        b.position_at_end(end_bb)

    def _lane_if(self, s: IfThenElse, c: ir.Value) -> None:
        """An ``if`` whose condition differs between lanes.

        Outside any mask (typically a tail guard) the generated code tests the lanes
        first: all true runs the then-branch with plain vector memory operations, none
        true runs the else-branch (or nothing) likewise, and only a mixed vector runs
        both branches under masks (masked stores are slow on several CPUs)."""
        def masked() -> None:
            self._under_mask(c, lambda: self._run(s.then_case))
            if s.else_case is not None:
                self._under_mask(self.b.not_(c), lambda: self._run(s.else_case))
        if self.st.mask is not None or self._lane_splits >= MAX_LANE_SPLITS:
            masked()
            return
        self._lane_splits += 1
        try:
            self._split_lanes(s, c, masked)
        finally:
            self._lane_splits -= 1

    def _split_lanes(self, s: IfThenElse, c: ir.Value, masked: Callable[[], None]) -> None:
        b = self.b
        ty = c.type
        any_fn = self.declare(f"llvm.vector.reduce.or.v{ty.count}i1", I1, [ty])
        all_fn = self.declare(f"llvm.vector.reduce.and.v{ty.count}i1", I1, [ty])
        full_bb = b.append_basic_block("lanes.all")
        test_bb = b.append_basic_block("lanes.test")
        mixed_bb = b.append_basic_block("lanes.mixed")
        end_bb = b.append_basic_block("lanes.end")
        b.cbranch(b.call(all_fn, [c]), full_bb, test_bb)
        b.position_at_end(full_bb)
        with self.conditional():
            self.stmt(s.then_case)
        b.branch(end_bb)
        b.position_at_end(test_bb)
        some = b.call(any_fn, [c])
        if s.else_case is None:
            b.cbranch(some, mixed_bb, end_bb)
        else:
            none_bb = b.append_basic_block("lanes.none")
            b.cbranch(some, mixed_bb, none_bb)
            b.position_at_end(none_bb)
            with self.conditional():
                self.stmt(s.else_case)
            b.branch(end_bb)
        b.position_at_end(mixed_bb)
        with self.conditional():
            masked()
        b.branch(end_bb)
        b.position_at_end(end_bb)

    def _run(self, s: Stmt) -> VVal:
        self.stmt(s)
        return uniform(const(DType.BOOL, True))

    def _store(self, s: BufferStore) -> None:
        buf = s.buffer
        if len(s.indices) != buf.ndim:
            raise BuildError(f"store to '{buf.name}' has {len(s.indices)} indices for "
                             f"{buf.ndim} dimensions")
        base = self.buffer_ptr(buf)
        self.st.store_name = buf.name
        value = self.expr(s.value)
        flat = self.lane_index(buf, s.indices)
        if self.st.lanes == 1:
            self.b.store(self.to_memory(value.value, buf.dtype, 1),
                         self.b.gep(base, [flat.value]), align=buf.dtype.itemsize)
            return
        vectorize.store_lanes(self, buf, base, flat, value)

    def _barrier(self, s: Barrier) -> None:
        raise BuildError("Barrier (__syncthreads) in an LLVM (CPU) build: bind() and "
                         "shared-memory synchronization are for GPU targets; build for 'cuda'")

    def _intrin_call(self, s: IntrinCall) -> None:
        lower = getattr(s.intrin, "lower_fallback", None)
        if lower is None:
            raise BuildError(f"tensor intrinsic {s.intrin!r} has no fallback implementation "
                             f"for the LLVM backend")
        self.stmt(lower(s))

    # ---- memory ---------------------------------------------------------------------------------
    def buffer_ptr(self, buf: Buffer) -> ir.Value:
        try:
            return self.st.buffers[buf]
        except KeyError:
            raise BuildError(f"buffer '{buf.name}' is used but is neither a parameter nor "
                             f"allocated in an enclosing scope") from None

    def load(self, buf: Buffer, indices: tuple) -> VVal:
        if len(indices) != buf.ndim:
            raise BuildError(f"load from '{buf.name}' has {len(indices)} indices for "
                             f"{buf.ndim} dimensions")
        base = self.buffer_ptr(buf)
        flat = self.lane_index(buf, indices)
        if self.st.lanes == 1:
            raw = self.b.load(self.b.gep(base, [flat.value]), align=buf.dtype.itemsize)
            return uniform(self.from_memory(raw, buf.dtype, 1))
        return vectorize.load_lanes(self, buf, base, flat)

    def lane_index(self, buf: Buffer, indices: tuple) -> VVal:
        """The flat element index of ``buf[indices]``.  In a widened loop, an index that is
        no ramp as written is simplified once more: a fused loop's ``f // W`` and ``f % W``
        in consecutive dimensions of extent W flatten back to ``f``, a contiguous access
        rather than a gather."""
        e = vectorize.flat_index(buf, indices)
        flat = self.expr(e)
        if self.st.lanes > 1 and flat.kind == VECTOR:
            from tdsl.arith import Analyzer
            simple = Analyzer().simplify(e)
            if simple is not e:
                again = self.expr(simple)
                if again.kind != VECTOR:
                    return again
        return flat

    def from_memory(self, raw: ir.Value, dtype: DType, lanes: int) -> ir.Value:
        if dtype is DType.BOOL:
            return self.b.icmp_unsigned("!=", raw, ir.Constant(raw.type, None))
        return raw

    def to_memory(self, value: ir.Value, dtype: DType, lanes: int) -> ir.Value:
        if dtype is DType.BOOL:
            t = I8 if lanes == 1 else ir.VectorType(I8, lanes)
            return self.b.zext(value, t)
        return value

    def safe_slot(self, et: ir.Type, sink: bool = False) -> ir.Value:
        """A private stack slot to read from when no lane is active (zero), or with
        ``sink`` one that an inactive lane's store writes to (never read)."""
        key = ("sink " if sink else "") + str(et)
        slot = self.st.slots.get(key)
        if slot is None:
            eb = ir.IRBuilder(self.st.entry)
            eb.position_at_start(self.st.entry)
            slot = eb.alloca(et, name="sink" if sink else "dummy")
            eb.store(ir.Constant(et, None), slot)
            self.st.slots[key] = slot
        return slot

    def _allocate(self, s: Allocate) -> None:
        buf = s.buffer
        et = mem_type(buf.dtype)
        span = self._extent_elems(buf)
        b = self.b
        nbytes = span * buf.dtype.itemsize if isinstance(span, int) else None
        if nbytes is not None and nbytes <= STACK_LIMIT:
            eb = ir.IRBuilder(self.st.entry)
            eb.position_at_start(self.st.entry)
            arr = eb.alloca(ir.ArrayType(et, max(span, 1)), name=c_identifier(buf.name))
            arr.align = 64
            ptr = eb.bitcast(arr, et.as_pointer())
            self.st.stack_buffers.add(buf)
            self._with_buffer(buf, ptr, s.body)
            return
        size = ir.Constant(I64, nbytes) if nbytes is not None else \
            b.mul(span, ir.Constant(I64, buf.dtype.itemsize))
        size = b.and_(b.add(size, ir.Constant(I64, 63)), ir.Constant(I64, -64))
        alloc, free = workspace.kernel_allocator(self.module)
        self.uses_workspace = True
        raw = b.call(alloc, [size])
        self._with_buffer(buf, b.bitcast(raw, et.as_pointer()), s.body)
        self.b.call(free, [raw])

    def _with_buffer(self, buf: Buffer, ptr: ir.Value, body: Stmt) -> None:
        saved = self.st.buffers.get(buf)
        self.st.buffers[buf] = ptr
        try:
            self.stmt(body)
        finally:
            if saved is None:
                self.st.buffers.pop(buf, None)
            else:
                self.st.buffers[buf] = saved

    def _extent_elems(self, buf: Buffer) -> "int | ir.Value":
        """Elements spanned by ``buf``: ``1 + sum((shape_k - 1) * stride_k)``."""
        shape, strides = buf.shape, buf.effective_strides()
        consts = [vectorize.const_int(x) for x in (*shape, *strides)]
        if all(c is not None for c in consts):
            n = len(shape)
            return 1 + sum((consts[k] - 1) * consts[n + k] for k in range(n))
        total: ir.Value = ir.Constant(I64, 1)
        b = self.b
        for ext, stride in zip(shape, strides):
            e = self.convert_index(self.scalar(ext), ext.dtype, DType.INT64)
            st = self.convert_index(self.scalar(stride), stride.dtype, DType.INT64)
            total = b.add(total, b.mul(b.sub(e, ir.Constant(I64, 1)), st))
        return total

    def convert_index(self, x: ir.Value, src: DType, dst: DType) -> ir.Value:
        return self.convert(x, src, dst, 1)

    # ---- loops ------------------------------------------------------------------------------------
    def _for(self, s: For) -> None:
        kind = s.kind
        if kind is ForKind.THREAD_BINDING:
            raise BuildError(f"loop '{s.var.name}' is bound to {s.thread_tag}: bind() is for GPU "
                             f"targets; build for 'cuda' or remove the binding for 'llvm'")
        if kind is ForKind.VECTORIZED:
            vectorize.emit_vectorized(self, s)
        elif kind is ForKind.UNROLLED:
            self._unrolled(s)
        elif kind is ForKind.PARALLEL and not self.st.in_parallel and self.st.lanes == 1 \
                and self.parallel_runtime:
            parallel.emit_parallel(self, s)
        else:
            self.serial_loop(s)

    def _unrolled(self, s: For) -> None:
        ext = vectorize.const_int(s.extent)
        explicit = s.annotations.get("pragma_unroll_explicit", 1)
        if ext is None or ext > UNROLL_LIMIT or not explicit:
            self.serial_loop(s, hints=[("llvm.loop.unroll.full", None)])
            return
        lo = self.expr(s.min)
        vars_ = self.st.vars
        saved = vars_.get(s.var)
        try:
            for k in range(ext):
                if lo.const is not None:
                    value = lo.const + k
                    vars_[s.var] = uniform(const(s.var.dtype, value), value)
                else:
                    base = self.convert_index(lo.value, s.min.dtype, s.var.dtype)
                    vars_[s.var] = uniform(self.b.add(base, const(s.var.dtype, k)))
                self.stmt(s.body)
        finally:
            if saved is None:
                vars_.pop(s.var, None)
            else:
                vars_[s.var] = saved

    def serial_loop(self, s: For, hints: "list[tuple[str, Any]] | None" = None) -> None:
        """``for var in [min, min+extent)`` as a counted loop (bounds must be uniform)."""
        lo = self.convert_index(self.scalar(s.min), s.min.dtype, s.var.dtype)
        ext = self.convert_index(self.scalar(s.extent), s.extent.dtype, s.var.dtype)
        hi = ext if is_zero(lo) else self.b.add(lo, ext)
        if hints is None and _has_inner_loop(s.body):
            # LLVM's full unrolling of a loop around other loops copies whole loop
            # nests: slow to compile, rarely faster (a schedule says unroll() if wanted)
            hints = [("llvm.loop.unroll.disable", None)]
        self.counted_loop(s.var, lo, hi, lambda: self.stmt(s.body), hints)

    def counted_loop(self, var: Var, lo: ir.Value, hi: ir.Value, body: Callable[[], None],
                     hints: "list[tuple[str, Any]] | None" = None) -> None:
        """Emit ``for var in [lo, hi)`` with ``body()`` generating the loop body."""
        b = self.b
        pre = b.block
        head = b.append_basic_block(f"{var.name}.head")
        body_bb = b.append_basic_block(f"{var.name}.body")
        exit_bb = b.append_basic_block(f"{var.name}.end")
        b.branch(head)
        b.position_at_end(head)
        iv = b.phi(lo.type, name=var.name)
        iv.add_incoming(lo, pre)
        b.cbranch(b.icmp_signed("<", iv, hi), body_bb, exit_bb)
        b.position_at_end(body_bb)
        vars_ = self.st.vars
        saved = vars_.get(var)
        vars_[var] = uniform(iv)
        frame = [self.st.branch_depth, False]
        self.st.loop_frames.append(frame)
        try:
            body()
        finally:
            self.st.loop_frames.pop()
            if saved is None:
                vars_.pop(var, None)
            else:
                vars_[var] = saved
        if frame[1]:
            # LLVM 22's loop vectorizer computes a loop-invariant division under a branch
            # only when the vector's first lane takes the branch, and the other lanes read
            # a stale register (a wrong answer, found by the vectorizer property test)
            hints = [h for h in hints or () if h[0] != "llvm.loop.vectorize.enable"]
            hints.append(("llvm.loop.vectorize.enable", False))
        nxt = b.add(iv, ir.Constant(lo.type, 1), flags=("nsw",))
        iv.add_incoming(nxt, b.block)
        br = b.branch(head)
        if hints:
            br.set_metadata("llvm.loop", loop_metadata(self.module, *hints))
        b.position_at_end(exit_bb)


def _has_inner_loop(s: Stmt) -> bool:
    """True if ``s`` contains a loop that stays a loop (not a widened vector loop)."""
    found = False

    def visit(n: Any) -> None:
        nonlocal found
        if isinstance(n, For) and n.kind is not ForKind.VECTORIZED:
            found = True
    post_order_visit(s, visit)
    return found


_STMTS: dict[type, Callable[[CodeGen, Any], None]] = {
    SeqStmt: CodeGen._seq, Evaluate: CodeGen._evaluate, LetStmt: CodeGen._let,
    IfThenElse: CodeGen._if, BufferStore: CodeGen._store, Allocate: CodeGen._allocate,
    For: CodeGen._for, Barrier: CodeGen._barrier, IntrinCall: CodeGen._intrin_call,
    ExternCall: lambda cg, s: externs.emit(cg, s),
}


def generate(func: PrimFunc, spec: MachineSpec,
             parallel_runtime: bool = True) -> tuple[ir.Module, CodeGen]:
    """LLVM IR for ``func`` (the module, and the generator with its notes)."""
    cg = CodeGen(func, spec, parallel_runtime)
    module = cg.generate()
    if "bfloat" in str(module):   # a bfloat16 operation may call the narrowing helpers
        bfloat.add_runtime(module)
    return module, cg
