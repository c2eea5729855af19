"""Readable, Python-like text of expressions, loop IR and lowered functions.

The output is for people (``print(func)``, notebooks, error messages), not for
parsing back: loops print as ``for i in parallel(16):``, allocations as
``C.local = allocate((32, 32), "float32", scope="local")``.  Operators get the
fewest parentheses Python's precedence allows.  Two distinct variables (or
buffers) that share a name in one printed tree get deterministic suffixes
(``i``, ``i_1``, ``i_2``) in the order they are first printed.
"""
from __future__ import annotations

import html
import re
from typing import Any, Callable

from .deep import retry_deep
from .dtype import DType
from .expr import (Add, And, BufferLoad, Call, Cast, CmpOp, Const, Div, Expr, FloorDiv,
                   FloorMod, Max, Min, Mul, Not, Or, Reduce, Select, Sub, TensorLoad, Var)
from .stmt import (AllReduce, Allocate, Barrier, Buffer, BufferRegion, BufferStore, Evaluate, ExternCall, For,
                   ForKind, IfThenElse, IntrinCall, LetStmt, PrimFunc, SeqStmt, Stmt,
                   StorageScope)

__all__ = ["expr_to_str", "stmt_to_str", "func_to_str", "to_html"]

_INDENT = "    "

# Binding strength, Python's order: or < and < not < comparisons < +,- < *,/,//,% < unary.
_PREC_OR, _PREC_AND, _PREC_NOT, _PREC_CMP, _PREC_ADD, _PREC_MUL, _PREC_UNARY = 1, 2, 3, 4, 5, 6, 7
_PREC_ATOM = 10
_BINARY_PREC: dict[type, int] = {
    Or: _PREC_OR, And: _PREC_AND, Add: _PREC_ADD, Sub: _PREC_ADD,
    Mul: _PREC_MUL, Div: _PREC_MUL, FloorDiv: _PREC_MUL, FloorMod: _PREC_MUL,
}
_KEYWORD_OPS = {And: "and", Or: "or"}
_LOOP_FUNC = {ForKind.SERIAL: "range", ForKind.PARALLEL: "parallel",
              ForKind.VECTORIZED: "vectorized", ForKind.UNROLLED: "unrolled",
              ForKind.THREAD_BINDING: "thread_binding"}


class _Namer:
    """Gives each distinct object a printable name; equal names get ``_1``, ``_2``...

    Keyed by ``id`` (objects stay alive while their tree is printed) so Expr's
    overloaded ``==`` never runs.
    """

    def __init__(self) -> None:
        self._names: dict[int, str] = {}
        self._taken: set[str] = set()

    def __call__(self, obj: Any, base: str) -> str:
        name = self._names.get(id(obj))
        if name is None:
            base = base or "v"
            name, k = base, 0
            while name in self._taken:
                k += 1
                name = f"{base}_{k}"
            self._taken.add(name)
            self._names[id(obj)] = name
        return name


class _Printer:
    """Prints one tree with one set of names (so disambiguation is consistent)."""

    def __init__(self) -> None:
        self.var_names = _Namer()
        self.buf_names = _Namer()
        self.lines: list[str] = []

    # ---- names ---------------------------------------------------------------------
    def var(self, v: Var) -> str:
        return self.var_names(v, v.name)

    def buf(self, b: Buffer) -> str:
        return self.buf_names(b, b.name)

    # ---- expressions -----------------------------------------------------------------
    def expr(self, e: Any) -> str:
        return self._expr(e)[0]

    def _expr(self, e: Any) -> tuple[str, int]:
        """The text of ``e`` and its precedence."""
        for cls in type(e).__mro__:
            handler = _EXPR_HANDLERS.get(cls)
            if handler is not None:
                return handler(self, e)
        if hasattr(e, "var") and isinstance(getattr(e, "var"), Var):  # IterVar
            return self.var(e.var), _PREC_ATOM
        return f"<{type(e).__name__}>", _PREC_ATOM

    def _operand(self, e: Expr, min_prec: int) -> str:
        text, prec = self._expr(e)
        return f"({text})" if prec < min_prec else text

    def _binary(self, e: Any) -> tuple[str, int]:
        prec = _BINARY_PREC[type(e)]
        sym = _KEYWORD_OPS.get(type(e), e.symbol)
        return f"{self._operand(e.a, prec)} {sym} {self._operand(e.b, prec + 1)}", prec

    def _compare(self, e: CmpOp) -> tuple[str, int]:
        # Comparisons chain in Python, so both sides of one need parentheses.
        left = self._operand(e.a, _PREC_CMP + 1)
        right = self._operand(e.b, _PREC_CMP + 1)
        return f"{left} {e.symbol} {right}", _PREC_CMP

    def _const(self, e: Const) -> tuple[str, int]:
        if e.dtype.is_bool or e.dtype.is_int:
            text = str(e.value)
        else:
            text = repr(e.value)
            if e.dtype is not DType.FLOAT32:
                return f"{e.dtype}({text})", _PREC_ATOM
        return text, (_PREC_UNARY if text.startswith("-") else _PREC_ATOM)

    def _call(self, name: str, args: Any) -> tuple[str, int]:
        return f"{name}({', '.join(self.expr(a) for a in args)})", _PREC_ATOM

    def _reduce(self, e: Reduce) -> tuple[str, int]:
        srcs = [self.expr(s) for s in e.source]
        src = srcs[0] if len(srcs) == 1 else f"({', '.join(srcs)})"
        axes = ", ".join(self.var(iv.var) for iv in e.axis)
        text = f"{getattr(e.combiner, 'name', 'reduce')}({src}, axis=[{axes}]"
        if not (isinstance(e.condition, Const) and e.condition.value is True):
            text += f", where={self.expr(e.condition)}"
        if e.init:
            inits = [self.expr(i) for i in e.init]
            text += f", init={inits[0] if len(inits) == 1 else '(' + ', '.join(inits) + ')'}"
        text += ")"
        if len(e.source) > 1:
            text += f"[{e.value_index}]"
        return text, _PREC_ATOM

    def indices(self, indices: tuple) -> str:
        return ", ".join(self.expr(i) for i in indices) if indices else "()"

    def region(self, r: BufferRegion) -> str:
        dims = []
        for m, ext in zip(r.mins, r.extents):
            if isinstance(m, Const) and isinstance(ext, Const) and m.dtype.is_int:
                end = str(m.value + ext.value)
            else:
                end = self.expr(Add(m, ext)) if m.dtype == ext.dtype else \
                    f"{self.expr(m)} + {self.expr(ext)}"
            dims.append(f"{self.expr(m)}:{end}")
        return f"{self.buf(r.buffer)}[{', '.join(dims)}]"

    def shape(self, dims: tuple) -> str:
        parts = [self.expr(d) for d in dims]
        return f"({parts[0]},)" if len(parts) == 1 else f"({', '.join(parts)})"

    # ---- statements ------------------------------------------------------------------
    def emit(self, depth: int, text: str) -> None:
        self.lines.append(_INDENT * depth + text)

    def stmt(self, s: Any, depth: int) -> None:
        handler = _STMT_HANDLERS.get(type(s))
        if handler is None:
            self.emit(depth, f"<{type(s).__name__}>")
        else:
            handler(self, s, depth)

    def _for(self, s: For, depth: int) -> None:
        v = self.var(s.var)
        if isinstance(s.min, Const) and s.min.value == 0:
            bounds = self.expr(s.extent)
        else:
            end = (str(s.min.value + s.extent.value)
                   if isinstance(s.min, Const) and isinstance(s.extent, Const)
                   else self.expr(Add(s.min, s.extent)) if s.min.dtype == s.extent.dtype
                   else f"{self.expr(s.min)} + {self.expr(s.extent)}")
            bounds = f"{self.expr(s.min)}, {end}"
        if s.kind is ForKind.THREAD_BINDING:
            bounds += f', "{s.thread_tag}"'
        if s.annotations:
            items = ", ".join(f'"{k}": {val!r}' for k, val in s.annotations.items())
            bounds += f", annotations={{{items}}}"
        self.emit(depth, f"for {v} in {_LOOP_FUNC[s.kind]}({bounds}):")
        self.stmt(s.body, depth + 1)

    def _if(self, s: IfThenElse, depth: int, keyword: str = "if") -> None:
        self.emit(depth, f"{keyword} {self.expr(s.cond)}:")
        self.stmt(s.then_case, depth + 1)
        if isinstance(s.else_case, IfThenElse):
            self._if(s.else_case, depth, "elif")
        elif s.else_case is not None:
            self.emit(depth, "else:")
            self.stmt(s.else_case, depth + 1)

    def _seq(self, s: SeqStmt, depth: int) -> None:
        if not s.stmts:
            self.emit(depth, "pass")
        for x in s.stmts:
            self.stmt(x, depth)

    def _allocate(self, s: Allocate, depth: int) -> None:
        b = s.buffer
        extra = f", strides={self.shape(b.strides)}" if b.strides is not None else ""
        self.emit(depth, f'{self.buf(b)} = allocate({self.shape(b.shape)}, "{b.dtype}", '
                         f'scope="{b.scope}"{extra})')
        self.stmt(s.body, depth)

    def _intrin_call(self, s: IntrinCall, depth: int) -> None:
        name = getattr(s.intrin, "name", type(s.intrin).__name__)
        outs = ", ".join(self.region(r) for r in s.outputs)
        ins = ", ".join(self.region(r) for r in s.inputs)
        self.emit(depth, f'tensorize("{name}", outputs=[{outs}], inputs=[{ins}], '
                         f"reset={s.reset}, update={s.update})")

    # ---- functions -------------------------------------------------------------------
    def param(self, b: Buffer) -> str:
        text = f'{self.buf(b)}: Buffer[{self.shape(b.shape)}, "{b.dtype}"'
        if b.strides is not None:
            text += f", strides={self.shape(b.strides)}"
        if b.scope is not StorageScope.GLOBAL:
            text += f', scope="{b.scope}"'
        return text + "]"

    def func(self, f: PrimFunc) -> None:
        self.emit(0, "@tdsl.prim_func")
        self.emit(0, f"def {f.name}({', '.join(self.param(b) for b in f.params)}):")
        if f.attrs:
            self.emit(1, f"# attrs: {f.attrs!r}")
        self.stmt(f.body, 1)


_ExprHandler = Callable[[_Printer, Any], "tuple[str, int]"]
_EXPR_HANDLERS: dict[type, _ExprHandler] = {
    Var: lambda p, e: (p.var(e), _PREC_ATOM),
    Const: _Printer._const,
    Cast: lambda p, e: (f"{e.dtype}({p.expr(e.value)})", _PREC_ATOM),
    CmpOp: _Printer._compare,
    Min: lambda p, e: p._call("min", (e.a, e.b)),
    Max: lambda p, e: p._call("max", (e.a, e.b)),
    Not: lambda p, e: (f"not {p._operand(e.a, _PREC_NOT)}", _PREC_NOT),
    Select: lambda p, e: p._call("if_then_else", (e.cond, e.true_value, e.false_value)),
    Call: lambda p, e: p._call(str(e.func), e.args),
    BufferLoad: lambda p, e: (f"{p.buf(e.buffer)}[{p.indices(e.indices)}]", _PREC_ATOM),
    TensorLoad: lambda p, e: (f"{e.tensor.name}[{p.indices(e.indices)}]", _PREC_ATOM),
    Reduce: _Printer._reduce,
}
for _cls in _BINARY_PREC:
    _EXPR_HANDLERS[_cls] = _Printer._binary

_STMT_HANDLERS: dict[type, Callable[[_Printer, Any, int], None]] = {
    For: _Printer._for,
    IfThenElse: _Printer._if,
    SeqStmt: _Printer._seq,
    Allocate: _Printer._allocate,
    IntrinCall: _Printer._intrin_call,
    BufferStore: lambda p, s, d: p.emit(
        d, f"{p.buf(s.buffer)}[{p.indices(s.indices)}] = {p.expr(s.value)}"),
    LetStmt: lambda p, s, d: (p.emit(d, f"{p.var(s.var)} = {p.expr(s.value)}"),
                              p.stmt(s.body, d)),
    Barrier: lambda p, s, d: p.emit(d, "sync_threads()"),
    AllReduce: lambda p, s, d: p.emit(
        d, f"{', '.join(p.buf(b) + '[0]' for b in s.results)} = all_reduce({s.combiner.name}, "
           f"[{', '.join(p.expr(v) for v in s.values)}], where={p.expr(s.cond)}, "
           f"over={[t.value for t in s.tags]})"),
    Evaluate: lambda p, s, d: p.emit(d, p.expr(s.value)),
    ExternCall: lambda p, s, d: p.emit(
        d, f"{'call_packed' if s.packed else 'call_extern'}({s.func!r}, "
           f"{', '.join(p.buf(a) if isinstance(a, Buffer) else p.expr(a) for a in s.args)})"),
}


@retry_deep
def expr_to_str(expr: Any) -> str:
    """One expression as text, e.g. ``i.outer * 32 + ii < n``."""
    return _Printer().expr(expr)


@retry_deep
def stmt_to_str(stmt: Stmt) -> str:
    """A statement tree as indented lines (no trailing newline)."""
    p = _Printer()
    p.stmt(stmt, 0)
    return "\n".join(p.lines)


@retry_deep
def func_to_str(func: PrimFunc) -> str:
    """A lowered function as a ``@tdsl.prim_func`` definition."""
    p = _Printer()
    p.func(func)
    return "\n".join(p.lines)


# ---- HTML ---------------------------------------------------------------------------------
_KEYWORDS = frozenset({"for", "in", "if", "elif", "else", "def", "and", "or", "not", "pass",
                       "return", "True", "False"})
_BUILTINS = frozenset(_LOOP_FUNC.values()) | {
    "allocate", "sync_threads", "if_then_else", "tensorize", "min", "max", "Buffer"}
_TOKEN = re.compile(r'(?P<comment>#[^\n]*)|(?P<string>"[^"\n]*")|(?P<deco>@[\w.]+)'
                    r"|(?P<name>[A-Za-z_][\w.]*)"
                    r"|(?P<number>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)"
                    r"|(?P<other>.)", re.S)
_STYLE = {"keyword": "color:#0000cc;font-weight:bold", "builtin": "color:#008080",
          "number": "color:#b05a00", "string": "color:#a31515", "comment": "color:#6a737d",
          "deco": "color:#795e26"}


def _highlight(m: "re.Match[str]") -> str:
    kind, text = m.lastgroup, m.group()
    if kind == "name":
        kind = "keyword" if text in _KEYWORDS else "builtin" if text in _BUILTINS else None
    elif kind == "other":
        kind = None
    escaped = html.escape(text, quote=False)
    return f'<span style="{_STYLE[kind]}">{escaped}</span>' if kind else escaped


def to_html(text: str) -> str:
    """``text`` as an HTML ``<pre>`` block with keywords, numbers and strings colored."""
    body = _TOKEN.sub(_highlight, text)
    return f'<pre style="line-height:1.25">{body}</pre>'
