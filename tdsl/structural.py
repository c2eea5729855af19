"""Structural equality and hashing of IR: expressions, statements, PrimFuncs, compute graphs.

Two trees are equal when they compute the same thing up to renaming:

* variables compare by binding position (alpha-equivalence): loop/let/axis/reducer
  variables are numbered where they are bound, free variables (symbolic sizes) in
  order of first occurrence;
* buffers compare by dtype, shape, strides, scope and alignment, numbered where
  they are bound (parameters, ``Allocate``) or first used — never by name;
* compute graphs are walked through ``TensorLoad``; placeholders compare by
  shape and dtype, compute ops by axes, body, tag and attrs — not by name;
* a ``PrimFunc``'s name is ignored; its attrs and loop annotations count.

Both functions reduce a tree to one canonical token sequence; ``structural_hash``
digests it with BLAKE2b, so the hash is stable across processes (it never uses
``id()`` or Python's salted ``hash()``) and can key caches and tuning records.
"""
from __future__ import annotations

import dataclasses
import enum
import hashlib
import numbers
from typing import Any, Callable

from .expr import BufferLoad, Call, Const, Expr, Reduce, TensorLoad, Var
from .stmt import (AllReduce, Allocate, Buffer, BufferRegion, BufferStore, For, IntrinCall, LetStmt,
                   PrimFunc, Stmt)
from .tensor import ComputeOp, IterVar, Operation, PlaceholderOp, Tensor
from .deep import retry_deep

__all__ = ["structural_equal", "structural_hash"]


@retry_deep
def structural_hash(node: Any) -> str:
    """A hex digest that is equal for structurally equal ``node``s (see module doc)."""
    h = hashlib.blake2b(digest_size=16)
    for token in _canonical(node):
        h.update(repr(token).encode())
        h.update(b"\x00")
    return h.hexdigest()


@retry_deep
def structural_equal(a: Any, b: Any) -> bool:
    """True if ``a`` and ``b`` are the same computation up to names (see module doc)."""
    return a is b or _canonical(a) == _canonical(b)


def _canonical(node: Any) -> list:
    c = _Canon()
    c.visit(node)
    return c.out


class _Canon:
    """Serializes a tree to tokens, numbering variables, buffers and ops by position.

    Tables are keyed by ``id``; ``keep`` holds every keyed object so ids stay unique.
    """

    def __init__(self) -> None:
        self.out: list = []
        self.vars: dict[int, int] = {}
        self.bufs: dict[int, int] = {}
        self.ops: dict[int, int] = {}
        self.keep: list = []
        self.count = 0

    def emit(self, *tokens: Any) -> None:
        self.out.extend(tokens)

    def number(self) -> int:
        self.count += 1
        return self.count

    def visit(self, x: Any) -> None:
        for cls in type(x).__mro__:
            handler = _HANDLERS.get(cls)
            if handler is not None:
                handler(self, x)
                return
        if isinstance(x, numbers.Number) or hasattr(x, "item"):  # numpy scalars
            self.primitive(x.item() if hasattr(x, "item") else x)
        else:
            self.opaque(x)

    def visit_all(self, items: Any) -> None:
        items = tuple(items)
        self.emit("seq", len(items))
        for x in items:
            self.visit(x)

    # ---- leaves and plain data -----------------------------------------------------------
    def primitive(self, x: Any) -> None:
        if isinstance(x, bool) or x is None:
            self.emit(type(x).__name__, x)
        elif isinstance(x, numbers.Integral):
            self.emit("int", int(x))
        elif isinstance(x, numbers.Real):
            self.emit("float", float(x).hex())
        else:
            self.emit("str", str(x))

    def enum_value(self, x: enum.Enum) -> None:
        self.emit("enum", type(x).__qualname__, x.value)

    def mapping(self, d: dict) -> None:
        items = list(d.items())
        if all(isinstance(k, str) for k, _ in items):
            items.sort(key=lambda kv: kv[0])
        self.emit("dict", len(items))
        for k, v in items:
            self.visit(k)
            self.visit(v)

    def unordered(self, items: Any) -> None:
        """A set: its elements' token sequences, sorted (set order depends on hash seeds)."""
        parts = sorted((_canonical(x) for x in items), key=repr)
        self.emit("set", len(parts))
        for p in parts:
            self.emit(len(p), *p)

    def opaque(self, x: Any) -> None:
        """An object tdsl does not know: a dataclass by its fields, others by type and repr
        (or name, when the repr is the default one that shows an address)."""
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            fields = dataclasses.fields(x)
            self.emit("dataclass", type(x).__qualname__, len(fields))
            for f in fields:
                self.emit(f.name)
                self.visit(getattr(x, f.name))
            return
        text = repr(x)
        if " at 0x" in text:
            text = str(getattr(x, "name", ""))
        self.emit("opaque", type(x).__qualname__, text)

    # ---- variables and buffers ---------------------------------------------------------------
    def var(self, v: Var) -> None:
        k = self.vars.get(id(v))
        if k is not None:
            self.emit("var", k)
            return
        self.keep.append(v)
        k = self.vars[id(v)] = self.number()
        self.emit("free", k, type(v).__name__, v.dtype.value)

    def bind(self, v: Var) -> "int | None":
        """Number ``v`` freshly for a scope; returns what to restore with ``unbind``."""
        self.keep.append(v)
        saved = self.vars.get(id(v))
        k = self.vars[id(v)] = self.number()
        self.emit("bind", k, type(v).__name__, v.dtype.value)
        return saved

    def unbind(self, v: Var, saved: "int | None") -> None:
        if saved is None:
            del self.vars[id(v)]
        else:
            self.vars[id(v)] = saved

    def buffer_def(self, b: Buffer) -> "int | None":
        """Define ``b`` (layout, not name) under a fresh number; returns the shadowed one."""
        self.emit("buffer", b.dtype.value, str(b.scope), b.align)
        self.visit_all(b.shape)
        if b.strides is None:
            self.emit("compact")
        else:
            self.visit_all(b.strides)
        self.keep.append(b)
        saved = self.bufs.get(id(b))
        self.bufs[id(b)] = self.number()
        self.emit(self.bufs[id(b)])
        return saved

    def buffer_ref(self, b: Buffer) -> None:
        k = self.bufs.get(id(b))
        if k is None:
            self.emit("free_buffer")
            self.buffer_def(b)
        else:
            self.emit("bufref", k)

    def region(self, r: BufferRegion) -> None:
        self.buffer_ref(r.buffer)
        self.visit_all(r.mins)
        self.visit_all(r.extents)
        self.visit_all(getattr(r, "axes", ()))

    # ---- expressions ---------------------------------------------------------------------
    def generic(self, node: Any) -> None:
        """Type, dtype (expressions) and the ``_fields`` children of a node."""
        self.emit(type(node).__name__)
        if isinstance(node, Expr):
            self.emit(node.dtype.value)
        for f in type(node)._fields:
            value = getattr(node, f)
            if isinstance(value, tuple):
                self.visit_all(value)
            else:
                self.visit(value)

    def const(self, e: Const) -> None:
        self.emit("Const", e.dtype.value)
        self.primitive(e.value)

    def call(self, e: Call) -> None:
        self.emit("Call", e.dtype.value, e.func.value)
        self.visit_all(e.args)

    def buffer_load(self, e: BufferLoad) -> None:
        self.emit("BufferLoad", e.dtype.value)
        self.buffer_ref(e.buffer)
        self.visit_all(e.indices)

    def tensor_load(self, e: TensorLoad) -> None:
        self.emit("TensorLoad", e.dtype.value)
        self.visit(e.tensor)
        self.visit_all(e.indices)

    def iter_var_def(self, iv: IterVar) -> "int | None":
        """An axis: its domain and kind, then its variable bound."""
        self.emit("IterVar", iv.kind.value, None if iv.thread_tag is None else str(iv.thread_tag))
        if iv.dom is None:
            self.emit(None)
        else:
            self.visit(iv.dom.min)
            self.visit(iv.dom.extent)
        return self.bind(iv.var)

    def scoped(self, axes: tuple, body: Callable[[], None]) -> None:
        saved = [self.iter_var_def(iv) for iv in axes]
        body()
        for iv, s in reversed(list(zip(axes, saved))):
            self.unbind(iv.var, s)

    def reduce(self, e: Reduce) -> None:
        self.emit("Reduce", e.dtype.value, e.value_index, len(e.axis))
        self.combiner(e.combiner)
        self.scoped(e.axis, lambda: (self.visit_all(e.source), self.visit(e.condition)))
        self.visit_all(e.init)

    def combiner(self, red: Any) -> None:
        """A reducer by its combining expressions and identities, not its name."""
        if not hasattr(red, "lhs"):
            self.opaque(red)
            return
        params = red.lhs + red.rhs
        saved = [self.bind(v) for v in params]
        self.visit_all(red.result)
        if red.update is not None:
            self.emit("update")
            self.visit_all(red.update)
        for v, s in reversed(list(zip(params, saved))):
            self.unbind(v, s)
        self.visit_all(red.identity)

    # ---- statements ------------------------------------------------------------------------
    def loop(self, s: For) -> None:
        self.emit("For", s.kind.value, None if s.thread_tag is None else str(s.thread_tag))
        self.mapping(s.annotations)
        self.visit(s.min)
        self.visit(s.extent)
        saved = self.bind(s.var)
        self.visit(s.body)
        self.unbind(s.var, saved)

    def let(self, s: LetStmt) -> None:
        self.emit("LetStmt")
        self.visit(s.value)
        saved = self.bind(s.var)
        self.visit(s.body)
        self.unbind(s.var, saved)

    def allocate(self, s: Allocate) -> None:
        self.emit("Allocate")
        saved = self.buffer_def(s.buffer)
        self.visit(s.body)
        self._restore_buffer(s.buffer, saved)

    def _restore_buffer(self, b: Buffer, saved: "int | None") -> None:
        if saved is None:
            del self.bufs[id(b)]
        else:
            self.bufs[id(b)] = saved

    def store(self, s: BufferStore) -> None:
        self.emit("BufferStore")
        self.buffer_ref(s.buffer)
        self.visit(s.value)
        self.visit_all(s.indices)

    def intrin_call(self, s: IntrinCall) -> None:
        self.emit("IntrinCall", s.reset, s.update, str(getattr(s.intrin, "name", "")))
        op = getattr(s.intrin, "op", None)  # a TensorIntrin: its declared computation
        if isinstance(op, Operation):
            self.operation(op)
        else:
            self.opaque(s.intrin)
        self.emit("outputs", len(s.outputs))
        for r in s.outputs:
            self.region(r)
        self.emit("inputs", len(s.inputs))
        for r in s.inputs:
            self.region(r)

    def all_reduce(self, s: AllReduce) -> None:
        self.emit("AllReduce", tuple(t.value for t in s.tags), len(s.results))
        self.combiner(s.combiner)
        self.visit_all(s.values)
        self.visit(s.cond)
        for b in s.results:
            self.buffer_ref(b)

    def func(self, f: PrimFunc) -> None:
        self.emit("PrimFunc", len(f.params))
        for b in f.params:
            self.buffer_def(b)
        self.visit_all(f.size_vars)
        bindings = sorted(f.bindings.items(), key=lambda kv: kv[1])
        self.emit("bindings", len(bindings))
        for v, (p, d) in bindings:
            self.var(v)
            self.emit(p, d)
        self.visit(f.body)
        self.mapping(f.attrs)

    # ---- compute graphs --------------------------------------------------------------------
    def tensor(self, t: Tensor) -> None:
        self.emit("Tensor", t.value_index)
        self.operation(t.op)

    def operation(self, op: Operation) -> None:
        k = self.ops.get(id(op))
        if k is not None:
            self.emit("opref", k)
            return
        self.keep.append(op)
        k = self.ops[id(op)] = self.number()
        if isinstance(op, PlaceholderOp):
            self.emit("Placeholder", k, op.dtype.value)
            self.visit_all(op.shape)
        elif isinstance(op, ComputeOp):
            self.emit("Compute", k, op.tag, op.num_outputs)
            self.mapping(op.attrs)
            self.scoped(op.axis, lambda: self.visit_all(op.body))
        else:
            self.emit("Operation", k, type(op).__qualname__)
            self.visit_all(op.input_tensors)
            describe = getattr(op, "structural_parts", None)
            if describe is not None:   # an opaque op: its shapes, dtypes and what it runs
                self.visit_all([(t.dtype.value, t.shape) for t in op.outputs])
                describe(self)


_HANDLERS: dict[type, Callable[[_Canon, Any], None]] = {
    bool: _Canon.primitive, int: _Canon.primitive, float: _Canon.primitive,
    str: _Canon.primitive, type(None): _Canon.primitive,
    enum.Enum: _Canon.enum_value, tuple: _Canon.visit_all, list: _Canon.visit_all,
    dict: _Canon.mapping, set: _Canon.unordered, frozenset: _Canon.unordered,
    Var: _Canon.var, Const: _Canon.const, Call: _Canon.call, BufferLoad: _Canon.buffer_load,
    TensorLoad: _Canon.tensor_load, Reduce: _Canon.reduce,
    IterVar: lambda c, iv: (c.emit("IterVarRef"), c.var(iv.var)),
    Expr: _Canon.generic, Stmt: _Canon.generic,
    For: _Canon.loop, LetStmt: _Canon.let, Allocate: _Canon.allocate,
    BufferStore: _Canon.store, IntrinCall: _Canon.intrin_call, PrimFunc: _Canon.func,
    AllReduce: _Canon.all_reduce,
    Buffer: _Canon.buffer_ref, BufferRegion: _Canon.region,
    Tensor: _Canon.tensor, Operation: _Canon.operation,
}
