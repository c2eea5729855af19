"""A C-style renderer of lowered IR: expressions and plain statements as C source.

Backend-neutral C: loops, conditionals, lets, stores and loads over flattened
buffers, with the semantics of docs/ir.md (floor division, lazy ``Select``,
float16 rounding after every operation, two's complement wrap of narrow integers).
The CUDA renderer (``codegen.py``) specializes thread loops, barriers, storage
scopes and tensor intrinsics.

Expressions render with C precedence, so the output carries only the parentheses
it needs.  Helpers the code calls (``tdsl_floordiv``, ``tdsl_h2f`` ...) are
recorded in ``self.helpers`` for the prelude.
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import numpy as np

from tdsl.arith import Analyzer
from tdsl.dtype import DType
from tdsl.errors import BuildError, InternalError
from tdsl.expr import (Add, And, BufferLoad, Call, Cast, CmpOp, Const, Div, EQ, Expr, FloorDiv,
                       FloorMod, GE, GT, Intrinsic, LE, LT, Max, Min, Mul, NE, Not, Or, Select,
                       Sub, Var)
from tdsl.stmt import (Buffer, BufferStore, Evaluate, For, ForKind, IfThenElse, LetStmt, SeqStmt,
                       Stmt)
from tdsl.tensor import Range

#: integer types C promotes to int: results are cast back to them
_NARROW_INTS = (DType.INT8, DType.UINT8, DType.INT16, DType.UINT16)

#: C operators of the integer bit intrinsics (operands are parenthesized)
_BIT_SYMBOLS = {Intrinsic.BITWISE_AND: "&", Intrinsic.BITWISE_OR: "|", Intrinsic.BITWISE_XOR: "^",
                Intrinsic.BITWISE_NOT: "~", Intrinsic.SHIFT_LEFT: "<<", Intrinsic.SHIFT_RIGHT: ">>"}

#: 16-bit floats: stored as 16 bits, computed in float, rounded back after every operation.
#: dtype -> (prelude helper, to float, from float, from double)
_HALF_FLOATS = {
    DType.FLOAT16: ("half", "tdsl_h2f", "tdsl_f2h", "tdsl_d2h"),
    DType.BFLOAT16: ("bf16", "tdsl_bf2f", "tdsl_f2bf", "tdsl_d2bf"),
}

# C operator precedence (smaller binds tighter)
PRIMARY, UNARY, MUL, ADD, REL, EQUAL, LAND, LOR, COND = 1, 2, 3, 4, 6, 7, 11, 12, 13

C_TYPES = {
    DType.BOOL: "bool", DType.INT8: "signed char", DType.UINT8: "unsigned char",
    DType.INT32: "int", DType.INT64: "long long", DType.FLOAT16: "tdsl_half",
    DType.BFLOAT16: "tdsl_bf16",
    DType.INT16: "short", DType.UINT16: "unsigned short", DType.UINT32: "unsigned int",
    DType.UINT64: "unsigned long long",
    DType.FLOAT32: "float", DType.FLOAT64: "double",
}

_RESERVED = frozenset("""
    auto break case char const continue default do double else enum extern float for goto if
    inline int long register restrict return short signed sizeof static struct switch typedef
    union unsigned void volatile while bool true false class namespace new delete this template
    typename operator private public protected friend virtual asm main min max abs threadIdx
    blockIdx blockDim gridDim warpSize float2 float4 int2 int4 half dim3 uint3 isnan
    double2 longlong2 float3 int3 double4 longlong4 uintptr_t
""".split())

_INT_SUFFIX_LIMIT = 2 ** 31


class NameTable:
    """Unique C identifiers for IR variables and buffers (keyed by object identity)."""

    def __init__(self) -> None:
        self.used: set[str] = set(_RESERVED)
        self.by_id: dict[int, str] = {}
        self._keep: list[Any] = []

    def fresh(self, hint: str) -> str:
        base = re.sub(r"[^0-9a-zA-Z_]", "_", hint) or "v"
        if base[0].isdigit():
            base = "v_" + base
        if base.startswith("__") or base.startswith("tdsl_"):
            base = "v" + base
        name, k = base, 0
        while name in self.used:
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        return name

    def bind(self, obj: Any, hint: str) -> str:
        name = self.fresh(hint)
        self.by_id[id(obj)] = name
        self._keep.append(obj)
        return name

    def get(self, obj: Any) -> "str | None":
        return self.by_id.get(id(obj))

    @contextmanager
    def scoped(self, obj: Any, hint: str) -> Iterator[str]:
        """Bind ``obj`` for the duration of the block: a loop or let variable has its C name
        only inside the C scope that declares it, so a use after it is refused here rather
        than by the C compiler (or, worse, compiled against a sibling's declaration)."""
        name = self.bind(obj, hint)
        try:
            yield name
        finally:
            if self.by_id.get(id(obj)) == name:
                del self.by_id[id(obj)]


def c_type(dtype: DType) -> str:
    try:
        return C_TYPES[dtype]
    except KeyError:
        raise BuildError(f"the CUDA backend does not support {dtype} yet; build for 'llvm' "
                         f"(or cast to float16/float32 before the kernel)") from None


def type_helper(dtype: DType) -> "str | None":
    """The prelude helper that defines ``dtype``'s C type (16-bit floats), if any."""
    conv = _HALF_FLOATS.get(dtype)
    return conv[0] if conv else None


def float_literal(value: float, dtype: DType) -> str:
    """A C literal of ``value`` that reads back exactly in ``dtype``."""
    if dtype is DType.BFLOAT16:   # its bits (no conversion at run time)
        bits = int(np.array(np.float32(value)).astype(dtype.numpy).view(np.uint16))
        return f"tdsl_bf16{{{bits:#06x}}}"
    if dtype in _HALF_FLOATS:
        return f"{_HALF_FLOATS[dtype][2]}({float_literal(value, DType.FLOAT32)})"
    if np.isnan(value):
        return "__int_as_float(0x7fffffff)" if dtype is DType.FLOAT32 else \
            "__longlong_as_double(0x7ff8000000000000LL)"
    if np.isinf(value):
        if dtype is DType.FLOAT32:
            return "__int_as_float(0x7f800000)" if value > 0 else "__int_as_float(0xff800000)"
        return ("__longlong_as_double(0x7ff0000000000000LL)" if value > 0 else
                "__longlong_as_double(0xfff0000000000000LL)")
    text = str(np.float32(value)) if dtype is DType.FLOAT32 else repr(float(value))
    if not any(c in text for c in ".eE"):
        text += ".0"
    return text + ("f" if dtype is DType.FLOAT32 else "")


class CStyleRenderer:
    """Renders lowered expressions and statements to C; subclasses add scopes and threads."""

    def __init__(self, names: "NameTable | None" = None, ana: "Analyzer | None" = None):
        self.names = names or NameTable()
        self.ana = ana or Analyzer()
        self.lines: list[str] = []
        self.depth = 0
        self.helpers: set[str] = set()
        # C text (and precedence) that replaces particular expression nodes, by identity:
        # the vector renderer maps a lane's loads and its loop variable this way
        self.overrides: dict[int, tuple[str, int]] = {}

    # ---- output ------------------------------------------------------------------------------
    def emit(self, line: str) -> None:
        self.lines.append("  " * self.depth + line if line else "")

    @contextmanager
    def block(self, header: str) -> Iterator[None]:
        self.emit(header + " {")
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            self.emit("}")

    # ---- variables ------------------------------------------------------------------------------
    def var_name(self, v: Var) -> str:
        name = self.names.get(v)
        if name is None:
            raise InternalError(f"CUDA codegen: variable '{v.name}' is used outside the scope "
                                f"that defines it")
        return name

    def bind_loop_range(self, v: Var, lo: Expr, extent: Expr) -> None:
        """Tell the analyzer the range of a loop variable (for index simplification)."""
        try:
            self.ana.bind(v, Range(lo, extent))
        except Exception:  # noqa: BLE001 - a range we cannot express only costs simplification
            pass

    # ---- expressions ------------------------------------------------------------------------------
    def expr(self, e: Expr) -> str:
        return self._expr(e)[0]

    def operand(self, e: Expr, limit: int) -> str:
        """``e`` rendered to bind at least as tightly as precedence ``limit``."""
        code, prec = self._expr(e)
        return code if prec <= limit else f"({code})"

    def _expr(self, e: Expr) -> tuple[str, int]:
        if self.overrides:
            hit = self.overrides.get(id(e))
            if hit is not None:
                return hit
        for cls in type(e).__mro__:
            handler = _EXPR_HANDLERS.get(cls)
            if handler is not None:
                return handler(self, e)
        raise BuildError(f"CUDA codegen: expression {type(e).__name__} ({e!r}) cannot appear in "
                         f"lowered IR")

    def _var(self, e: Var) -> tuple[str, int]:
        return self.var_name(e), PRIMARY

    def _const(self, e: Const) -> tuple[str, int]:
        dt = e.dtype
        if dt.is_bool:
            return ("true" if e.value else "false"), PRIMARY
        if dt.is_float:
            code = float_literal(e.value, dt)
            return code, (UNARY if code.startswith("-") else PRIMARY)
        v = int(e.value)
        if dt is DType.INT64:
            code = f"{v}LL" if abs(v) >= _INT_SUFFIX_LIMIT - 1 else str(v)
        elif dt is DType.INT32:
            code = str(v) if v != -_INT_SUFFIX_LIMIT else "(-2147483647 - 1)"
        else:
            code = f"({c_type(dt)}){v}"
            return code, UNARY
        return code, (UNARY if v < 0 else PRIMARY)

    # float16 and bfloat16 values compute in float and round back after each operation
    def as_float(self, e: Expr) -> str:
        conv = _HALF_FLOATS.get(e.dtype)
        if conv is not None:
            self.helpers.add(conv[0])
            return f"{conv[1]}({self.expr(e)})"
        return self.expr(e)

    def half_result(self, code: str, dtype: DType = DType.FLOAT16) -> tuple[str, int]:
        """``code`` (a float) rounded to the 16-bit float ``dtype``."""
        helper, _, from_float, _ = _HALF_FLOATS[dtype]
        self.helpers.add(helper)
        return f"{from_float}({code})", PRIMARY

    def _cast(self, e: Cast) -> tuple[str, int]:
        src, dst = e.value.dtype, e.dtype
        if src == dst:
            return self._expr(e.value)
        if dst.is_bool:
            zero = float_literal(0.0, DType.FLOAT32 if src in _HALF_FLOATS else src) \
                if src.is_float else "0"
            val = self.as_float(e.value) if src in _HALF_FLOATS else self.operand(e.value, REL)
            return f"{val} != {zero}", EQUAL
        if dst in _HALF_FLOATS:
            helper, _, from_float, from_double = _HALF_FLOATS[dst]
            self.helpers.add(helper)
            if src is DType.FLOAT64:
                return f"{from_double}({self.expr(e.value)})", PRIMARY
            if src in _HALF_FLOATS:      # exact in float; one rounding to the destination
                return f"{from_float}({self.as_float(e.value)})", PRIMARY
            inner = self.expr(e.value) if src is DType.FLOAT32 else \
                f"(float){self.operand(e.value, UNARY)}"
            return f"{from_float}({inner})", PRIMARY
        if src.is_float and dst.is_int:      # saturating (docs/ir.md), never C's UB
            self.helpers.add("f2i")
            val = self.as_float(e.value) if src in _HALF_FLOATS else self.expr(e.value)
            return f"tdsl_f2i_{dst.value}({val})", PRIMARY
        if src in _HALF_FLOATS:
            return f"({c_type(dst)}){self.as_float(e.value)}", UNARY
        return f"({c_type(dst)}){self.operand(e.value, UNARY)}", UNARY

    def _arith(self, e: Any) -> tuple[str, int]:
        dt = e.dtype
        sym = {Add: "+", Sub: "-", Mul: "*", Div: "/"}[type(e)]
        prec = ADD if sym in "+-" else MUL
        if dt in _HALF_FLOATS:
            return self.half_result(f"{self.as_float(e.a)} {sym} {self.as_float(e.b)}", dt)
        if dt.is_int and isinstance(e.a, Const) and isinstance(e.b, Const) and sym != "/":
            return self._const(Const(_wrap(_fold(sym, e.a.value, e.b.value), dt), dt))
        code = f"{self.operand(e.a, prec)} {sym} {self.operand(e.b, prec - 1)}"
        if dt in _NARROW_INTS:
            return f"({c_type(dt)})({code})", UNARY
        return code, prec

    def nonneg(self, e: Expr) -> bool:
        lo = self.ana.const_int_bound(e)[0] if e.dtype in (DType.INT32, DType.INT64) else None
        return lo is not None and lo >= 0

    def _floor_divmod(self, e: Any) -> tuple[str, int]:
        dt = e.dtype
        is_div = isinstance(e, FloorDiv)
        if dt.is_float:
            a, b = self.as_float(e.a), self.as_float(e.b)
            fl = "floor" if dt is DType.FLOAT64 else "floorf"
            if is_div:
                code = f"{fl}({_paren(a)} / {_paren(b)})"
            else:
                code = f"{_paren(a)} - {fl}({_paren(a)} / {_paren(b)}) * {_paren(b)}"
            return self.half_result(code, dt) if dt in _HALF_FLOATS else \
                (code, PRIMARY if is_div else ADD)
        if self.nonneg(e.a) and isinstance(e.b, Const) and e.b.value > 0 or \
                self.nonneg(e.a) and self.ana.can_prove(e.b > 0):
            sym = "/" if is_div else "%"
            code = f"{self.operand(e.a, MUL)} {sym} {self.operand(e.b, MUL - 1)}"
            if dt in _NARROW_INTS:
                return f"({c_type(dt)})({code})", UNARY
            return code, MUL
        self.helpers.add("floordiv")
        fn = "tdsl_floordiv" if is_div else "tdsl_floormod"
        return f"{fn}({self.typed_operand(e.a)}, {self.typed_operand(e.b)})", PRIMARY

    def typed_operand(self, e: Expr) -> str:
        """An argument to an overloaded helper: the exact C type of ``e``."""
        if isinstance(e, Const) and e.dtype.is_int:
            return f"({c_type(e.dtype)}){int(e.value)}"
        if e.dtype.is_int and isinstance(e, Var):
            # a loop variable may be declared narrower in C than its dtype (an ``int``
            # loop over an int64 range): ``min(int, long long)`` is ambiguous to NVRTC
            return f"({c_type(e.dtype)}){self.expr(e)}"
        if e.dtype.is_int and not isinstance(e, BufferLoad):
            return f"({c_type(e.dtype)})({self.expr(e)})"
        return self.expr(e)

    def _minmax(self, e: Any) -> tuple[str, int]:
        dt = e.dtype
        is_min = isinstance(e, Min)
        if dt.is_float:
            fn = ("fmin" if is_min else "fmax") + ("" if dt is DType.FLOAT64 else "f")
            code = f"{fn}({self.as_float(e.a)}, {self.as_float(e.b)})"
            return self.half_result(code, dt) if dt in _HALF_FLOATS else (code, PRIMARY)
        fn = "min" if is_min else "max"
        code = f"{fn}({self.typed_operand(e.a)}, {self.typed_operand(e.b)})"
        if dt in _NARROW_INTS or dt is DType.BOOL:
            return f"({c_type(dt)}){code}", UNARY
        return code, PRIMARY

    def _compare(self, e: CmpOp) -> tuple[str, int]:
        sym = {EQ: "==", NE: "!=", LT: "<", LE: "<=", GT: ">", GE: ">="}[type(e)]
        prec = EQUAL if sym in ("==", "!=") else REL
        if e.a.dtype in _HALF_FLOATS:
            return f"{self.as_float(e.a)} {sym} {self.as_float(e.b)}", prec
        return f"{self.operand(e.a, prec)} {sym} {self.operand(e.b, prec - 1)}", prec

    def _logic(self, e: Any) -> tuple[str, int]:
        if isinstance(e, And):
            return f"{self.operand(e.a, LAND)} && {self.operand(e.b, LAND - 1)}", LAND
        return f"{self.operand(e.a, LOR)} || {self.operand(e.b, LOR - 1)}", LOR

    def _not(self, e: Not) -> tuple[str, int]:
        return f"!{self.operand(e.a, UNARY)}", UNARY

    def _select(self, e: Select) -> tuple[str, int]:
        return (f"{self.operand(e.cond, LOR)} ? {self.operand(e.true_value, COND)} : "
                f"{self.operand(e.false_value, COND)}"), COND

    def _call(self, e: Call) -> tuple[str, int]:
        f, dt = e.func, e.dtype
        arg_dt = e.args[0].dtype
        if f is Intrinsic.ISNAN:
            return f"isnan({self.as_float(e.args[0])})", PRIMARY
        if f is Intrinsic.ABS and arg_dt.is_int:
            x = self.expr(e.args[0])
            if arg_dt is DType.INT64:
                return f"llabs({x})", PRIMARY
            if arg_dt is DType.INT32:
                return f"abs({x})", PRIMARY
            if not arg_dt.is_signed:
                return x, PRIMARY
            return f"({c_type(arg_dt)})abs((int){_paren(x)})", UNARY
        if f in _BIT_SYMBOLS:
            sym = _BIT_SYMBOLS[f]
            if f is Intrinsic.BITWISE_NOT:
                code = f"~{self.operand(e.args[0], UNARY)}"
            else:
                code = f"{self.operand(e.args[0], UNARY)} {sym} {self.operand(e.args[1], UNARY)}"
            return f"({c_type(dt)})({code})", UNARY
        if not arg_dt.is_float:
            raise BuildError(f"CUDA codegen: {f} on {arg_dt} in {e!r} needs a float argument")
        suffix = "" if arg_dt is DType.FLOAT64 else "f"
        one = "1.0" + suffix
        args = [self.as_float(a) for a in e.args]
        x = args[0]
        if f is Intrinsic.SIGMOID:
            code = f"{one} / ({one} + exp{suffix}(-{_paren(x)}))"
            prec = MUL
        elif f is Intrinsic.RSQRT:
            code, prec = f"{one} / sqrt{suffix}({x})", MUL
        else:
            name = {Intrinsic.ABS: "fabs", Intrinsic.ROUND: "rint", Intrinsic.POW: "pow"}.get(
                f, f.value)
            code, prec = f"{name}{suffix}({', '.join(args)})", PRIMARY
        if dt in _HALF_FLOATS:
            return self.half_result(code, dt)
        return code, prec

    def _load(self, e: BufferLoad) -> tuple[str, int]:
        return f"{self.buffer_ref(e.buffer)}[{self.flat_index(e.buffer, e.indices)}]", PRIMARY

    # ---- buffers ------------------------------------------------------------------------------------
    def buffer_ref(self, buf: Buffer) -> str:
        name = self.names.get(buf)
        if name is None:
            raise InternalError(f"CUDA codegen: buffer '{buf.name}' is accessed outside its "
                                f"allocation")
        return name

    def flat_offset(self, buf: Buffer, indices: tuple) -> Expr:
        if len(indices) != buf.ndim:
            raise InternalError(f"buffer '{buf.name}' has {buf.ndim} dimension(s) but is indexed "
                                f"with {len(indices)}")
        if not indices:
            return Const(0, "int64")
        total: "Expr | None" = None
        for ix, stride in zip(indices, buf.effective_strides()):
            ix = ix if ix.dtype is DType.INT64 else Cast(ix, "int64")
            term = ix if isinstance(stride, Const) and stride.value == 1 else ix * stride
            total = term if total is None else total + term
        assert total is not None
        return self.ana.simplify(total)

    def flat_index(self, buf: Buffer, indices: tuple) -> str:
        return self.expr(self.flat_offset(buf, indices))

    # ---- statements ------------------------------------------------------------------------------------
    def stmt(self, s: Stmt) -> None:
        handler = self.stmt_handlers().get(type(s))
        if handler is None:
            raise BuildError(f"CUDA codegen: statement {type(s).__name__} is not supported here")
        handler(s)

    def stmt_handlers(self) -> dict[type, Callable[[Any], None]]:
        return {SeqStmt: self.seq, IfThenElse: self.if_then_else, LetStmt: self.let,
                BufferStore: self.store, Evaluate: self.evaluate, For: self.loop}

    def seq(self, s: SeqStmt) -> None:
        for x in s.stmts:
            self.stmt(x)

    def if_then_else(self, s: IfThenElse) -> None:
        with self.block(f"if ({self.expr(s.cond)})"):
            with self.ana.constraint(s.cond):
                self.stmt(s.then_case)
        if s.else_case is not None:
            with self.block("else"):
                self.stmt(s.else_case)

    def let(self, s: LetStmt) -> None:
        value = self.expr(s.value)
        with self.names.scoped(s.var, s.var.name) as name:
            self.emit(f"const {c_type(s.var.dtype)} {name} = {value};")
            self.stmt(s.body)

    def store(self, s: BufferStore) -> None:
        if s.value.dtype != s.buffer.dtype:
            raise InternalError(f"store of a {s.value.dtype} value into {s.buffer.dtype} buffer "
                                f"'{s.buffer.name}'")
        self.emit(f"{self.buffer_ref(s.buffer)}[{self.flat_index(s.buffer, s.indices)}] = "
                  f"{self.expr(s.value)};")

    def evaluate(self, s: Evaluate) -> None:
        if not isinstance(s.value, Const):
            self.emit(f"(void)({self.expr(s.value)});")

    def loop(self, s: For) -> None:
        if s.kind is ForKind.THREAD_BINDING:
            raise InternalError(f"thread-bound loop '{s.var.name}' reached the C renderer")
        self.serial_loop(s)

    def serial_loop(self, s: For) -> None:
        lo, ext = s.min, s.extent
        with self.names.scoped(s.var, s.var.name) as name:
            t = c_type(s.var.dtype)
            if isinstance(lo, Const) and lo.value == 0:
                head = f"for ({t} {name} = 0; {name} < {self.expr(ext)}; ++{name})"
            else:
                start = self.expr(lo)
                end = self.expr(self.ana.simplify(lo + ext))
                head = f"for ({t} {name} = {start}; {name} < {end}; ++{name})"
            limit = s.annotations.get("pragma_unroll_limit")
            if s.kind in (ForKind.UNROLLED, ForKind.VECTORIZED) or "pragma_unroll" in s.annotations:
                self.emit("#pragma unroll")
            elif isinstance(limit, int) and limit >= 1:
                # at most ``limit`` iterations unrolled (1: kept a loop) -- a loop whose full
                # unrolling would hold more values live than the registers fit
                self.emit(f"#pragma unroll {limit}")
            self.bind_loop_range(s.var, lo, ext)
            with self.block(head):
                self.stmt(s.body)


def _paren(code: str) -> str:
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*|[0-9.]+f?", code):
        return code
    return f"({code})"


def _fold(sym: str, a: int, b: int) -> int:
    return a + b if sym == "+" else a - b if sym == "-" else a * b


def _wrap(v: int, dt: DType) -> int:
    bits = dt.bits
    v &= (1 << bits) - 1
    if dt.is_signed and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


_EXPR_HANDLERS: dict[type, Callable[[CStyleRenderer, Any], tuple[str, int]]] = {
    Var: CStyleRenderer._var, Const: CStyleRenderer._const, Cast: CStyleRenderer._cast,
    Add: CStyleRenderer._arith, Sub: CStyleRenderer._arith, Mul: CStyleRenderer._arith,
    Div: CStyleRenderer._arith, FloorDiv: CStyleRenderer._floor_divmod,
    FloorMod: CStyleRenderer._floor_divmod, Min: CStyleRenderer._minmax,
    Max: CStyleRenderer._minmax, CmpOp: CStyleRenderer._compare, And: CStyleRenderer._logic,
    Or: CStyleRenderer._logic, Not: CStyleRenderer._not, Select: CStyleRenderer._select,
    Call: CStyleRenderer._call, BufferLoad: CStyleRenderer._load,
}
