"""The reference interpreter: runs a lowered ``PrimFunc`` on NumPy arrays, in place.

It *defines* the semantics of docs/ir.md (backends are tested against it), so it
is exact rather than fast: every buffer access is bounds-checked, integers wrap
at their width, float16/float32 round after every operation, ``Select`` is lazy,
allocations start filled with garbage (NaN for floats) so that reading
uninitialized memory shows up, and GPU kernels run thread by thread with real
barrier semantics.

How: each ``PrimFunc`` is translated once into Python source (loops become
``for`` loops, buffers flat Python lists indexed with ``buffer.effective_strides()``,
values NumPy scalars for floats and Python ints wrapped at the dtype width for
integers), compiled with ``exec`` and cached.  A GPU kernel (the subtree under an
outermost thread-bound loop) becomes a generator function that ``yield``s at each
``Barrier``; ``interpreter_runtime._launch`` runs its blocks one after another and, inside
a block, all threads round-robin from barrier to barrier.  ``interpreter_runtime.py`` holds
everything the generated code calls.
"""
from __future__ import annotations

import contextlib
import itertools
import linecache
import re
from collections import OrderedDict
from typing import Any, Callable, Sequence

import numpy as np

from .dtype import DType
from .errors import DTypeError, LoweringError, ShapeError
from .expr import (Add, And, BinaryOp, BufferLoad, Call, Cast, CmpOp, Const, Div, Expr,
                   FloorDiv, FloorMod, Intrinsic, Max, Min, Mul, Not, Or, Select, SizeVar,
                   Sub, Var)
from .printer import expr_to_str
from .stmt import (AllReduce, Allocate, ExternCall, Barrier, Buffer, BufferStore, Evaluate,
                   For, ForKind, IfThenElse, IntrinCall, LetStmt, PrimFunc, SeqStmt, Stmt,
                   StorageScope, ThreadTag)
from .visitor import post_order_visit, uses_var
from .deep import deep_recursion
from .interpreter_runtime import (_BIT_CODE, _FLOAT_INTRIN, _HW_INDEX, _INT_BOUNDS, _garbage,
                                  _make_wrap, _runtime_namespace)

__all__ = ["run"]

# CPython refuses more than 20 nested ``for`` blocks and 200 nested brackets in one
# function; deeper loop nests and expressions move into nested functions.
_MAX_LOOP_NEST = 16
_MAX_BRACKET_NEST = 60



def run(func: PrimFunc, *arrays: np.ndarray) -> None:
    """Execute ``func`` on ``arrays`` (one per parameter), writing outputs in place.

    Size variables are bound from the arrays' shapes (``func.bindings``); every
    parameter's dtype and shape is checked first (``DTypeError``/``ShapeError``
    naming the parameter and dimension).  Arrays may be non-contiguous.
    """
    _program(func)(arrays)


# ---- code generation -------------------------------------------------------------------------
def _fold_int(e: Expr) -> "int | None":
    """The value of an integer expression built from constants only, else None."""
    if isinstance(e, Const) and e.dtype.is_int:
        return e.value
    ops = {Add: lambda a, b: a + b, Sub: lambda a, b: a - b, Mul: lambda a, b: a * b}
    op = ops.get(type(e))
    if op is not None:
        a, b = _fold_int(e.a), _fold_int(e.b)
        if a is not None and b is not None:
            return op(a, b)
    return None


class _BufInfo:
    """Python names of a buffer's storage list, and the code of its dims and strides."""

    def __init__(self, data: str, shape: list[str], strides: list[str]):
        self.data = data
        self.shape = shape
        self.strides = strides


class _Kernel:
    """Code-generation state inside a GPU kernel: which thread loops set the launch."""

    def __init__(self, static_loops: set[int]):
        self.static_loops = static_loops


class _Codegen:
    """Translates one PrimFunc into the source of ``_prologue`` and ``_body``."""

    def __init__(self, func: PrimFunc):
        self.func = func
        self.lines: list[str] = []
        self.consts: dict[str, Any] = {}
        self.vars: dict[int, str] = {}
        self.bufs: dict[int, _BufInfo] = {}
        self.stored: set[int] = set()
        self.counter = itertools.count()
        self.kernel: "_Kernel | None" = None
        self.loop_depth = 0  # ``for`` blocks open in the function being generated
        self.pending: list[str] = []  # helper functions to define before the next line

    # ---- names -----------------------------------------------------------------------
    def fresh(self, prefix: str, name: str = "") -> str:
        return f"{prefix}{next(self.counter)}_{re.sub(r'[^0-9a-zA-Z_]', '_', name)}"

    def bind(self, var: Var) -> str:
        ident = self.vars[id(var)] = self.fresh("v", var.name)
        return ident

    def emit(self, depth: int, line: str) -> None:
        """Append a line (after any hoisted helper functions it calls)."""
        pending, self.pending = self.pending, []
        for helper in pending:
            self.lines.extend("    " * depth + h for h in helper.split("\n"))
        self.lines.append("    " * depth + line)

    # ---- expressions -------------------------------------------------------------------
    def expr(self, e: Expr) -> str:
        if not isinstance(e, Expr):
            raise LoweringError(f"{type(e).__name__} {e!r} where the IR needs an expression "
                                f"(wrap constants with tdsl.const)")
        for cls in type(e).__mro__:
            handler = _EXPR_GEN.get(cls)
            if handler is not None:
                code = handler(self, e)
                if code.count("(") > _MAX_BRACKET_NEST and _nesting(code) > _MAX_BRACKET_NEST:
                    name = f"_e{next(self.counter)}"  # called where the code was: still lazy
                    self.pending.append(f"def {name}():\n    return {code}")
                    code = f"{name}()"
                return code
        raise LoweringError(f"{type(e).__name__} ({expr_to_str(e)}) cannot appear in "
                            f"lowered IR")

    def var(self, v: Var) -> str:
        ident = self.vars.get(id(v))
        if ident is None:
            raise LoweringError(f"variable '{v.name}' is used outside the scope that binds it")
        return ident

    def const(self, e: Const) -> str:
        if e.dtype.is_bool:
            return repr(e.value)
        if e.dtype.is_int:
            return str(_make_wrap(e.dtype)(e.value))
        name = f"_c{len(self.consts)}"
        self.consts[name] = e.dtype.numpy.type(e.value)
        return name

    def wrap(self, code: str, dtype: DType) -> str:
        """``code`` (a Python int) wrapped to ``dtype``'s width (two's complement)."""
        lo, hi = _INT_BOUNDS[dtype]
        if dtype is DType.UINT8:
            return f"(({code}) & 255)"
        if dtype is DType.INT8:
            return f"((({code}) + 128 & 255) - 128)"
        return f"(_w if {lo} <= (_w := {code}) <= {hi} else _wrap_{dtype}(_w))"

    def binary(self, e: BinaryOp) -> str:
        if e.a.dtype != e.b.dtype and not (e.a.dtype.is_int and e.b.dtype.is_int):
            raise LoweringError(f"operands of {expr_to_str(e)} have dtypes {e.a.dtype} and "
                                f"{e.b.dtype}; a cast is missing")
        a, b, dt = self.expr(e.a), self.expr(e.b), e.dtype
        if isinstance(e, (Min, Max)):
            return f"{type(e).__name__.lower()}({a}, {b})"
        if isinstance(e, (And, Or)):  # both sides evaluated; only Select is lazy
            return f"({a} {'&' if isinstance(e, And) else '|'} {b})"
        if dt.is_float:
            if isinstance(e, FloorDiv):
                return f"_np.floor({a} / {b})"
            if isinstance(e, FloorMod):
                return f"_floor_mod({a}, {b})"
            return f"({a} {e.symbol} {b})"
        if isinstance(e, Div) or dt.is_bool:
            raise LoweringError(f"'{e.symbol}' on {dt} operands in {expr_to_str(e)}")
        nonzero = isinstance(e.b, Const) and _make_wrap(e.b.dtype)(int(e.b.value)) != 0
        if isinstance(e, FloorMod):
            return f"({a} % {b})" if nonzero else f"_int_floormod({a}, {b})"
        folded = _fold_int(e)
        if folded is not None:
            return str(_make_wrap(dt)(folded))
        if isinstance(e, FloorDiv) and not nonzero:
            return self.wrap(f"_int_floordiv({a}, {b})", dt)
        return self.wrap(f"{a} {e.symbol} {b}", dt)

    def compare(self, e: CmpOp) -> str:
        return f"({self.expr(e.a)} {e.symbol} {self.expr(e.b)})"

    def cast(self, e: Cast) -> str:
        src, dst, x = e.value.dtype, e.dtype, self.expr(e.value)
        if src == dst:
            return x
        if dst.is_bool:
            return f"bool({x} != 0)"
        if dst is DType.BFLOAT16 and not src.is_float:
            # an integer (a Python int, maybe beyond int64) rounds to float32 first, as the
            # backends convert it (ml_dtypes takes no int outside int64)
            return f"_T_bfloat16(_T_float32({x}))"
        if dst.is_float:
            return f"_T_{dst}({x})"
        if src.is_float:
            return f"_f2i_{dst}({x})"
        if src.is_bool:
            return f"int({x})"
        slo, shi = _INT_BOUNDS[src]
        dlo, dhi = _INT_BOUNDS[dst]
        return x if dlo <= slo and shi <= dhi else self.wrap(x, dst)

    def call(self, e: Call) -> str:
        args = ", ".join(self.expr(a) for a in e.args)
        if e.func is Intrinsic.ABS and e.dtype.is_int:
            return self.wrap(f"abs({args})", e.dtype)
        if e.func in _BIT_CODE:
            return self.wrap(_BIT_CODE[e.func].format(*(self.expr(a) for a in e.args)), e.dtype)
        if e.func is not Intrinsic.ISNAN and not e.dtype.is_float:
            raise LoweringError(f"{e.func} on {e.dtype} in {expr_to_str(e)}: needs floats")
        return f"{_FLOAT_INTRIN[e.func]}({args})"

    def select(self, e: Select) -> str:
        return f"({self.expr(e.true_value)} if {self.expr(e.cond)} else " \
               f"{self.expr(e.false_value)})"

    # ---- buffer access -------------------------------------------------------------------
    def buffer(self, b: Buffer) -> _BufInfo:
        info = self.bufs.get(id(b))
        if info is None:
            raise LoweringError(f"buffer '{b.name}' is accessed outside its Allocate (or is "
                                f"neither a parameter nor allocated)")
        return info

    def address(self, b: Buffer, indices: tuple) -> tuple[str, str]:
        """(bounds check, flat index) code for ``b[indices]``; the check binds temps."""
        info = self.buffer(b)
        if len(indices) != b.ndim:
            raise LoweringError(f"buffer '{b.name}' has {b.ndim} dimension(s) but is indexed "
                                f"with {len(indices)}")
        if not indices:
            return "True", "0"
        checks, terms = [], []
        for ix, dim, stride in zip(indices, info.shape, info.strides):
            if isinstance(ix, Expr) and not ix.dtype.is_int:
                raise LoweringError(f"buffer '{b.name}': index {expr_to_str(ix)} is {ix.dtype}")
            code = self.expr(ix)
            if code.isidentifier() or code.lstrip("-").isdigit():
                t = code  # a variable or literal needs no temporary
                checks.append(f"0 <= {t} < {dim}")
            else:
                t = f"_i{next(self.counter)}"
                checks.append(f"0 <= ({t} := {code}) < {dim}")
            terms.append(t if stride == "1" else f"{t} * {stride}")
        return " and ".join(checks), " + ".join(terms)

    def oob(self, b: Buffer, indices: tuple) -> str:
        info = self.buffer(b)
        idx = ", ".join(self.expr(i) for i in indices)
        return f"_oob({b.name!r}, ({idx}{',' if len(indices) == 1 else ''}), " \
               f"({', '.join(info.shape)}{',' if len(info.shape) == 1 else ''}))"

    def load(self, e: BufferLoad) -> str:
        check, flat = self.address(e.buffer, e.indices)
        data = self.buffer(e.buffer).data
        return f"{data}[{flat} if {check} else {self.oob(e.buffer, e.indices)}]"

    # ---- statements ----------------------------------------------------------------------
    def stmt(self, s: Stmt, depth: int) -> None:
        handler = _STMT_GEN.get(type(s))
        if handler is None:
            raise LoweringError(f"statement {type(s).__name__} cannot be interpreted")
        handler(self, s, depth)

    def store(self, s: BufferStore, depth: int) -> None:
        if s.value.dtype != s.buffer.dtype:
            raise LoweringError(f"store of a {s.value.dtype} value into {s.buffer.dtype} "
                                f"buffer '{s.buffer.name}'")
        check, flat = self.address(s.buffer, s.indices)
        self.stored.add(id(s.buffer))
        self.emit(depth, f"if not ({check}): {self.oob(s.buffer, s.indices)}")
        self.emit(depth, f"{self.buffer(s.buffer).data}[{flat}] = {self.expr(s.value)}")

    def seq(self, s: SeqStmt, depth: int) -> None:
        if not s.stmts:
            self.emit(depth, "pass")
        for x in s.stmts:
            self.stmt(x, depth)

    def if_then_else(self, s: IfThenElse, depth: int) -> None:
        self.emit(depth, f"if {self.expr(s.cond)}:")
        self.stmt(s.then_case, depth + 1)
        if s.else_case is not None:
            self.emit(depth, "else:")
            self.stmt(s.else_case, depth + 1)

    def let(self, s: LetStmt, depth: int) -> None:
        value = self.expr(s.value)
        with _Scope(self.vars, s.var):
            self.emit(depth, f"{self.bind(s.var)} = {value}")
            self.stmt(s.body, depth)

    def evaluate(self, s: Evaluate, depth: int) -> None:
        self.emit(depth, self.expr(s.value))

    def barrier(self, s: Barrier, depth: int) -> None:
        if self.kernel is None:
            raise LoweringError("sync_threads() (Barrier) outside a GPU kernel")
        self.emit(depth, f"yield {next(self.counter)}")

    def intrin_call(self, s: IntrinCall, depth: int) -> None:
        fallback = s.intrin.lower_fallback(s)
        if not isinstance(fallback, Stmt):
            raise LoweringError(f"{getattr(s.intrin, 'name', s.intrin)}.lower_fallback returned "
                                f"{type(fallback).__name__}, not a Stmt")
        if getattr(s.intrin, "warp_collective", False) and self.kernel is not None:
            # One call per warp: the warp's lanes compute one tile together, so only
            # lane 0 runs the declared computation.
            self.emit(depth, f"if _hw[{_HW_INDEX[ThreadTag.THREAD_X]}] % 32 == 0:")
            depth += 1
        self.stmt(fallback, depth)

    def extern_call(self, s: ExternCall, depth: int) -> None:
        """Whole buffers go to the function as NumPy arrays (copied out of and back into
        their storage lists); see ``tdsl.extern_op``."""
        if self.kernel is not None:
            raise LoweringError(f"call of '{s.func}' (an extern stage) inside a GPU kernel")
        parts = []
        for a in s.args:
            if isinstance(a, Buffer):
                info = self.buffer(a)
                self.consts[f"_D_{a.dtype}"] = a.dtype
                parts.append(f"({info.data}, ({', '.join(info.shape)},), "
                             f"({', '.join(info.strides)},), _D_{a.dtype})")
            else:
                parts.append(f"({self.expr(a)}, None, None, _D_{a.dtype})")
                self.consts[f"_D_{a.dtype}"] = a.dtype
        self.emit(depth, f"_extern_call({s.func!r}, {s.packed}, [{', '.join(parts)}])")

    def all_reduce(self, s: AllReduce, depth: int) -> None:
        """Each thread posts its share in a per-block table, waits at a barrier, then
        combines its group's shares in thread order; a second barrier keeps the table of
        the next all-reduce apart."""
        if self.kernel is None:
            raise LoweringError("all_reduce (a cross-thread reduction) outside a GPU kernel")
        red = s.combiner
        table = self.fresh("_ar")
        reduced = [_HW_INDEX[t] for t in s.tags]
        group = "(" + "".join(f"_hw[{i}], " for i in range(3, 6) if i not in reduced) + ")"
        rank = "(" + "".join(f"_hw[{i}], " for i in (5, 4, 3) if i in reduced) + ")"
        self.emit(depth, f"{table} = _allreduce_table(_shared, _seen, {next(self.counter)})")
        self.emit(depth, f"if {self.expr(s.cond)}:")
        vals = "".join(f"{self.expr(v)}, " for v in s.values)
        self.emit(depth + 1, f"{table}.setdefault({group}, {{}})[{rank}] = ({vals})")
        self.emit(depth, f"yield {next(self.counter)}")
        with contextlib.ExitStack() as stack:
            acc = []
            for v, ident in zip(red.lhs, red.identity):
                code = self.expr(ident)
                stack.enter_context(_Scope(self.vars, v))
                acc.append(self.bind(v))
                self.emit(depth, f"{acc[-1]} = {code}")
            shares = self.fresh("_sh")
            self.emit(depth, f"{shares} = {table}.get({group}, {{}})")
            self.emit(depth, f"for _r in sorted({shares}):")
            other = []
            for v in red.rhs:
                stack.enter_context(_Scope(self.vars, v))
                other.append(self.bind(v))
            self.emit(depth + 1, f"{''.join(o + ', ' for o in other)}= {shares}[_r]")
            new = "".join(f"{self.expr(e)}, " for e in red.result)
            self.emit(depth + 1, f"{''.join(a + ', ' for a in acc)}= ({new})")
            for buf, a in zip(s.results, acc):
                self.stored.add(id(buf))
                self.emit(depth, f"{self.buffer(buf).data}[0] = {a}")
        self.emit(depth, f"yield {next(self.counter)}")

    def allocate(self, s: Allocate, depth: int) -> None:
        b = s.buffer
        info = self.layout(b, depth)
        self.consts[f"_D_{b.dtype}"] = b.dtype
        size = _span_code(info)
        if self.kernel is not None and b.scope is not StorageScope.LOCAL:
            table = "_shared" if b.scope is StorageScope.SHARED else "_launch_mem"
            code = f"_kernel_alloc({table}, _seen, {next(self.counter)}, _D_{b.dtype}, {size})"
        else:
            code = f"_alloc(_D_{b.dtype}, {size})"
        self.emit(depth, f"{info.data} = {code}")
        self.bufs[id(b)] = info
        self.stmt(s.body, depth)
        del self.bufs[id(b)]

    def layout(self, b: Buffer, depth: int, data: str = "") -> _BufInfo:
        """Emit the dims/strides of ``b`` (constants inline) and name its storage."""
        data = data or self.fresh("b", b.name)
        dims = [self._dim_code(e, f"{data}_s{d}", depth) for d, e in enumerate(b.shape)]
        strides = [self._dim_code(e, f"{data}_t{d}", depth)
                   for d, e in enumerate(b.effective_strides())]
        return _BufInfo(data, dims, strides)

    def _dim_code(self, e: Expr, name: str, depth: int) -> str:
        value = _fold_int(e)
        if value is not None:
            return str(value)
        self.emit(depth, f"{name} = {self.expr(e)}")
        return name

    # ---- loops and kernels ---------------------------------------------------------------
    def loop(self, s: For, depth: int) -> None:
        if _hardware_tag(s) is not None:
            if self.kernel is None:
                self.launch(s, depth)
            else:
                self.thread_loop(s, depth)
            return
        if self.loop_depth >= _MAX_LOOP_NEST:
            self.nested_function(depth, lambda d: self.loop(s, d))
            return
        self.loop_depth += 1
        try:
            self.serial_loop(s, depth)
        finally:
            self.loop_depth -= 1

    def nested_function(self, depth: int, body: Callable[[int], None]) -> None:
        """Generate ``body`` inside a new nested function and call it (a generator in a
        kernel, so barriers inside still yield to the block scheduler)."""
        name = f"_f{next(self.counter)}"
        self.emit(depth, f"def {name}():")
        saved, self.loop_depth = self.loop_depth, 0
        try:
            body(depth + 1)
        finally:
            self.loop_depth = saved
        if self.kernel is not None:
            self.emit(depth + 1, "return")
            self.emit(depth + 1, "yield")
        self.emit(depth, f"yield from {name}()" if self.kernel is not None else f"{name}()")

    def serial_loop(self, s: For, depth: int) -> None:
        """A loop that really iterates (serial, parallel, vectorized, unrolled, vthread)."""
        lo, ext = self.expr(s.min), self.expr(s.extent)
        with _Scope(self.vars, s.var):
            v = self.bind(s.var)
            if _fold_int(s.min) == 0:
                self.emit(depth, f"for {v} in range({ext}):")
            else:
                t = f"_lo{next(self.counter)}"
                self.emit(depth, f"{t} = {lo}")
                self.emit(depth, f"for {v} in range({t}, {t} + {ext}):")
            self.stmt(s.body, depth + 1)

    def thread_loop(self, s: For, depth: int) -> None:
        """A thread-bound loop inside a kernel: its variable is the hardware index."""
        tag = _hardware_tag(s)
        hw = f"_hw[{_HW_INDEX[tag]}]"
        ext = self.expr(s.extent)
        if id(s) not in self.kernel.static_loops:  # extent known only here: check it
            ext = f"_thread_extent({tag.value!r}, {ext}, _dims[{_HW_INDEX[tag]}])"
        lo = self.expr(s.min)
        with _Scope(self.vars, s.var):
            self.emit(depth, f"if {hw} < {ext}:")
            self.emit(depth + 1, f"{self.bind(s.var)} = {lo} + {hw}")
            self.stmt(s.body, depth + 1)

    def launch(self, s: For, depth: int) -> None:
        """The outermost thread-bound loop: define the kernel generator and launch it."""
        static = _launch_loops(s)
        tags = {_hardware_tag(loop) for loop in static}
        for loop in _thread_loops(s):
            if _hardware_tag(loop) not in tags:
                raise LoweringError(f"thread tag {loop.thread_tag}: no loop binding it has an "
                                    f"extent known at kernel launch")
        name = f"_kernel{next(self.counter)}"
        self.emit(depth, f"def {name}(_hw, _dims, _shared, _launch_mem):")
        self.emit(depth + 1, "_seen = {}")
        self.kernel = _Kernel({id(loop) for loop in static})
        saved, self.loop_depth = self.loop_depth, 0
        try:
            self.thread_loop(s, depth + 1)
        finally:
            self.kernel, self.loop_depth = None, saved
        self.emit(depth + 1, "return")
        self.emit(depth + 1, "yield")
        pairs = "".join(f"({_hardware_tag(loop).value!r}, {self.expr(loop.extent)}), "
                        for loop in static)
        self.emit(depth, f"_launch({name}, ({pairs}))")

    # ---- the two generated functions ---------------------------------------------------------
    def prologue(self) -> None:
        """``_prologue(shapes, arrays)``: bind size vars (scalar sizes from ``arrays``), check
        shapes, return sizes and strides."""
        f = self.func
        from .runtime.args import SCALAR_VALUE
        self.emit(0, "def _prologue(_shapes, _arrays):")
        for v in f.size_vars:
            if v not in f.bindings:
                raise LoweringError(f"{f.name}: size variable '{v.name}' has no binding")
            p, d = f.bindings[v]
            if d == SCALAR_VALUE:    # the value of a scalar parameter (checked >= 1 already)
                self.emit(1, f"{self.bind(v)} = int(_arrays[{p}].reshape(-1)[0])")
                continue
            self.emit(1, f"{self.bind(v)} = _shapes[{p}][{d}]")
            if isinstance(v, SizeVar):
                self.emit(1, f"_check_size({self.var(v)}, {p}, {d})")
        for p, b in enumerate(f.params):
            for d, e in enumerate(b.shape):
                if not any(e is v and f.bindings[v] == (p, d) for v in f.size_vars):
                    self.emit(1, f"_check_dim({self.expr(e)}, _shapes[{p}][{d}], {p}, {d})")
        strides = ", ".join("(" + "".join(f"{self.expr(t)}, " for t in b.effective_strides())
                            + ")" for b in f.params)
        sizes = "".join(f"{self.var(v)}, " for v in f.size_vars)
        self.emit(1, f"return ({sizes}), ({strides}{',' if len(f.params) == 1 else ''})")

    def body(self) -> None:
        """``_body(*storage, *sizes)``: the function body over flat storage lists."""
        f = self.func
        names = [self.fresh("b", b.name) for b in f.params]
        args = names + [self.var(v) for v in f.size_vars]
        self.emit(0, f"def _body({', '.join(args)}):")
        for b, data in zip(f.params, names):
            self.bufs[id(b)] = self.layout(b, 1, data)
        self.stmt(f.body, 1)


class _Scope:
    """Binds a variable for the duration of a ``with`` block (restores shadowed names)."""

    def __init__(self, table: dict, var: Var):
        self.table, self.key = table, id(var)

    def __enter__(self) -> None:
        self.saved = self.table.get(self.key)

    def __exit__(self, *exc: Any) -> None:
        if self.saved is None:
            self.table.pop(self.key, None)
        else:
            self.table[self.key] = self.saved


def _nesting(code: str) -> int:
    """How deeply brackets nest in ``code``."""
    depth = deepest = 0
    for ch in code:
        if ch in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")]}":
            depth -= 1
    return deepest


def _span_code(info: _BufInfo) -> str:
    """Code for the number of elements a buffer's layout spans."""
    if not info.shape:
        return "1"
    if all(c.lstrip("-").isdigit() for c in info.shape + info.strides):
        dims, strides = [int(c) for c in info.shape], [int(c) for c in info.strides]
        if min(dims) <= 0:
            return "0"
        return str(1 + sum((d - 1) * t for d, t in zip(dims, strides)))
    terms = " + ".join(f"(max({s}, 1) - 1) * {t}" for s, t in zip(info.shape, info.strides))
    empty = " or ".join(f"{s} <= 0" for s in info.shape)
    return f"(0 if {empty} else 1 + {terms})"


def _hardware_tag(s: For) -> "ThreadTag | None":
    """The GPU index a loop binds (None for ordinary loops and virtual threads)."""
    if s.kind is not ForKind.THREAD_BINDING:
        return None
    try:
        tag = ThreadTag(s.thread_tag)
    except ValueError:
        raise LoweringError(f"loop '{s.var.name}' is THREAD_BINDING with thread tag "
                            f"{s.thread_tag!r}") from None
    return None if tag is ThreadTag.VTHREAD else tag


def _thread_loops(s: Stmt) -> list[For]:
    """The loops under ``s`` bound to a GPU block or thread index."""
    found: list[For] = []

    def fn(n: Any) -> None:
        if isinstance(n, For) and _hardware_tag(n) is not None:
            found.append(n)
    _walk_stmts(s, fn)
    return found


def _launch_loops(kernel: For) -> list[For]:
    """The kernel's thread loops whose extent uses no in-kernel variable (known at launch)."""
    inner: set = set()

    def collect(n: Any) -> None:
        if isinstance(n, (For, LetStmt)):
            inner.add(n.var)
    _walk_stmts(kernel, collect)
    return [loop for loop in _thread_loops(kernel) if not uses_var(loop.extent, inner)]


def _walk_stmts(s: Any, fn: Callable[[Any], None]) -> None:
    """Visit every statement (IntrinCall fallbacks are not expanded)."""
    post_order_visit(s, lambda n: fn(n) if isinstance(n, Stmt) else None)


_EXPR_GEN: dict[type, Callable[[_Codegen, Any], str]] = {
    Var: _Codegen.var, Const: _Codegen.const, Cast: _Codegen.cast, CmpOp: _Codegen.compare,
    BinaryOp: _Codegen.binary, Not: lambda g, e: f"(not {g.expr(e.a)})",
    Select: _Codegen.select, Call: _Codegen.call, BufferLoad: _Codegen.load,
}
_STMT_GEN: dict[type, Callable[[_Codegen, Any, int], None]] = {
    For: _Codegen.loop, SeqStmt: _Codegen.seq, IfThenElse: _Codegen.if_then_else,
    BufferStore: _Codegen.store, Allocate: _Codegen.allocate, LetStmt: _Codegen.let,
    Barrier: _Codegen.barrier, Evaluate: _Codegen.evaluate, IntrinCall: _Codegen.intrin_call,
    AllReduce: _Codegen.all_reduce, ExternCall: _Codegen.extern_call,
}


# ---- compiled programs -------------------------------------------------------------------------
class _Program:
    """A PrimFunc compiled to Python: marshals arrays, runs, writes outputs back."""

    def __init__(self, func: PrimFunc):
        self.func = func
        self.body_ref = func.body
        gen = _Codegen(func)
        gen.prologue()
        gen.body()
        self.stored = [id(b) in gen.stored for b in func.params]
        self.source = "\n".join(gen.lines) + "\n"
        ns = _runtime_namespace()
        ns.update(gen.consts)
        ns["_check_size"] = self._check_size
        ns["_check_dim"] = self._check_dim
        filename = f"<tdsl.interpreter:{func.name}:{id(self):x}>"
        linecache.cache[filename] = (len(self.source), None, self.source.splitlines(True),
                                     filename)
        exec(compile(self.source, filename, "exec"), ns)
        self.prologue_fn, self.body_fn = ns["_prologue"], ns["_body"]

    def _check_size(self, value: int, p: int, d: int) -> None:
        if value < 1:
            b = self.func.params[p]
            raise ShapeError(f"{self.func.name}: parameter '{b.name}' dimension {d} binds "
                             f"'{expr_to_str(b.shape[d])}' to {value}; sizes must be >= 1")

    def _check_dim(self, expected: int, got: int, p: int, d: int) -> None:
        if expected != got:
            b = self.func.params[p]
            raise ShapeError(f"{self.func.name}: parameter '{b.name}' dimension {d} must be "
                             f"{expr_to_str(b.shape[d])} = {expected}, got {got}")

    def _check_arrays(self, arrays: Sequence[Any]) -> None:
        f = self.func
        if len(arrays) != len(f.params):
            names = ", ".join(b.name for b in f.params)
            raise ShapeError(f"{f.name} takes {len(f.params)} arrays ({names}), "
                             f"got {len(arrays)}")
        for p, (b, a) in enumerate(zip(f.params, arrays)):
            if not isinstance(a, np.ndarray):
                raise DTypeError(f"{f.name}: argument {p} ('{b.name}') must be a numpy.ndarray, "
                                 f"got {type(a).__name__}")
            if a.dtype != b.dtype.numpy:
                raise DTypeError(f"{f.name}: parameter '{b.name}' has dtype {b.dtype}, "
                                 f"got an array of {a.dtype}")
            if a.ndim != b.ndim:
                raise ShapeError(f"{f.name}: parameter '{b.name}' has {b.ndim} dimension(s) "
                                 f"{_shape_text(b)}, got an array of shape {a.shape}")

    def __call__(self, arrays: Sequence[np.ndarray]) -> None:
        from .runtime.args import scalars_as_arrays
        from .runtime.read_checks import READ_CHECKS_ATTR, run_read_checks
        arrays = scalars_as_arrays(self.func, arrays)
        self._check_arrays(arrays)
        sizes, strides = self.prologue_fn(tuple(a.shape for a in arrays), arrays)
        checks = self.func.attrs.get(READ_CHECKS_ATTR)
        if checks:   # reads whose range depends on the sizes (lowering/read_bounds.py)
            run_read_checks(checks, dict(zip(self.func.size_vars, sizes)))
        views = [_FlatView(b, a, st) for b, a, st in zip(self.func.params, arrays, strides)]
        with np.errstate(all="ignore"):
            self.body_fn(*[v.data for v in views], *sizes)
        for view, array, stored in zip(views, arrays, self.stored):
            if stored:
                view.write_back(array)


def _shape_text(b: Buffer) -> str:
    return "(" + ", ".join(expr_to_str(d) for d in b.shape) + ")"


class _FlatView:
    """A parameter's elements as a flat Python list laid out with the buffer's strides."""

    def __init__(self, buffer: Buffer, array: np.ndarray, strides: Sequence[int]):
        self.dtype = buffer.dtype
        self.shape = array.shape
        self.strides = tuple(int(s) for s in strides)
        if array.size == 0:
            span = 0
        else:
            span = 1 + sum((n - 1) * s for n, s in zip(self.shape, self.strides))
        flat = np.full(span, _garbage(self.dtype), dtype=self.dtype.numpy)
        if span:
            self._strided(flat)[...] = array
        self.data = list(flat) if self.dtype.is_float else flat.tolist()

    def _strided(self, flat: np.ndarray) -> np.ndarray:
        item = flat.itemsize
        return np.lib.stride_tricks.as_strided(flat, self.shape,
                                               [s * item for s in self.strides])

    def write_back(self, array: np.ndarray) -> None:
        if self.data:
            array[...] = self._strided(np.array(self.data, dtype=self.dtype.numpy))


_CACHE: "OrderedDict[int, _Program]" = OrderedDict()
_CACHE_SIZE = 256


@deep_recursion
def _program(func: PrimFunc) -> _Program:
    """The compiled program of ``func`` (an LRU cache keyed by identity)."""
    prog = _CACHE.get(id(func))
    if prog is not None and prog.func is func and prog.body_ref is func.body:
        _CACHE.move_to_end(id(func))
        return prog
    prog = _CACHE[id(func)] = _Program(func)
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return prog
