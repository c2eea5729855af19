"""Core-ATen FX graph -> ``tdsl.graph.Graph``.

``import_fx(gm, kinds)`` walks an FX GraphModule whose nodes call ATen ops (after the
decompositions of ``tdsl.frontend.decomp``) and whose ``meta['val']`` holds fake tensors.
Each placeholder is either a run-time input or a constant (a parameter or buffer snapshotted
at compile time).  Each call is converted by the table in ``tdsl.frontend.aten_ops``; a call
with no mapping, an unsupported dtype or attrs, or one the graph's op set refuses
(``tdsl.graph.opset.supports``) becomes a ``torch`` fallback node that runs the ATen op in
PyTorch, and is listed in the import's report.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch
import torch.fx

from ..graph import Graph, Value, constant, fallback
from .errors import ImportFailure, Unsupported
from .supports_memo import SupportsMemo
from .symbols import SymbolTable, is_symbolic, sym_expr

#: torch dtypes a graph Value may have (others only flow between fallback nodes)
_NP_DTYPES = {torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16,
              torch.int64: np.int64, torch.int32: np.int32, torch.int16: np.int16,
              torch.int8: np.int8, torch.uint8: np.uint8, torch.bool: np.bool_}


def dtype_name(dt: torch.dtype) -> str:
    """'float32' for torch.float32."""
    return str(dt).replace("torch.", "")


@dataclass
class ImportReport:
    """What the import did: the ops it mapped, the fallbacks (op -> count, and why)."""

    mapped: dict = field(default_factory=dict)       # aten op name -> count
    fallbacks: dict = field(default_factory=dict)    # aten op name -> count
    reasons: dict = field(default_factory=dict)      # aten op name -> first reason seen
    notes: list = field(default_factory=list)

    def add_fallback(self, name: str, reason: str) -> None:
        self.fallbacks[name] = self.fallbacks.get(name, 0) + 1
        self.reasons.setdefault(name, reason)

    def __str__(self) -> str:
        lines = [f"mapped: {sum(self.mapped.values())} ATen calls "
                 f"({len(self.mapped)} distinct ops)"]
        if self.fallbacks:
            lines.append("fallbacks (run by PyTorch):")
            lines += [f"  {k} x{n}: {self.reasons.get(k, '')}"
                      for k, n in sorted(self.fallbacks.items())]
        else:
            lines.append("fallbacks: none")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def op_name(target: Any) -> str:
    """'aten.add.Tensor' for an OpOverload, the function name otherwise."""
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    return getattr(target, "__qualname__", None) or getattr(target, "__name__", str(target))


class Context:
    """What a converter sees: the graph being built, the values of earlier FX nodes and
    helpers to emit nodes.  Nodes a converter emits are kept only if it succeeds."""

    def __init__(self, graph: Graph, symbols: SymbolTable, supports: Optional[Callable]
                 ) -> None:
        self.graph = graph
        self.symbols = symbols
        self._supports = SupportsMemo(supports) if supports is not None else None
        self.env: dict = {}            # fx.Node -> Value | tuple | Expr | int
        self.node: Optional[torch.fx.Node] = None
        self._pending: list = []

    # ---- reading arguments ------------------------------------------------------------------
    def value(self, a: Any) -> Value:
        """The Value an FX argument names (Unsupported unless it is a tensor)."""
        v = self.env.get(a) if isinstance(a, torch.fx.Node) else None
        if not isinstance(v, Value):
            raise Unsupported(f"argument {a} is not a tensor")
        return v

    def meta(self, a: Any = None) -> Any:
        """The fake tensor (or tuple of them) of an FX node (default: the current one)."""
        n = self.node if a is None else a
        return n.meta.get("val")

    def out_shape(self, i: Optional[int] = None) -> tuple:
        m = self.meta()
        if i is not None:
            m = m[i]
        return self.symbols.shape(m.shape)

    def out_dtype(self, i: Optional[int] = None) -> str:
        m = self.meta()
        if i is not None:
            m = m[i]
        return dtype_name(m.dtype)

    def scalar(self, x: Any, dtype: str = "float32") -> Value:
        """A 0-d constant (scalars in the graph are constants, never attrs)."""
        if is_symbolic(x):
            raise Unsupported(f"symbolic scalar {x}")
        return constant(np.asarray(x, dtype=dtype))

    def const_array(self, a: np.ndarray) -> Value:
        return constant(np.ascontiguousarray(a))

    def users_of_outputs(self) -> set:
        """Indices of a multi-output node's outputs read by getitem users (others: all)."""
        used: set = set()
        for u in self.node.users:
            if u.op == "call_function" and u.target is operator.getitem:
                used.add(u.args[1])
            else:
                return {-1}
        return used

    # ---- emitting ----------------------------------------------------------------------------
    def emit(self, op: str, inputs: Sequence[Value], attrs: Optional[dict] = None,
             shape: Optional[tuple] = None, dtype: Optional[str] = None) -> Value:
        """Emit one graph node with one output (shape/dtype default to the FX node's)."""
        attrs = dict(attrs or {})
        inputs = list(inputs)
        shape = self.out_shape() if shape is None else tuple(shape)
        if len(shape) == 0:
            raise Unsupported(f"'{op}' with a 0-d result (tdsl kernels make tensors)")
        if self._supports is not None and not self._supports(op, inputs, attrs):
            raise Unsupported(f"tdsl's '{op}' does not support these inputs/attrs "
                              f"({', '.join(f'{v.dtype}{list(v.shape)}' for v in inputs)}, "
                              f"{_short(attrs)})")
        out = Value(shape, self.out_dtype() if dtype is None else dtype)
        self._pending.append((op, inputs, attrs, out))
        return out

    def producer_op(self, v: Value) -> Optional[tuple]:
        """(op, inputs, attrs) of the node that made ``v`` (pending nodes included)."""
        for op, ins, attrs, out in self._pending:
            if out is v:
                return op, ins, attrs
        p = v.producer
        return (p.op, p.inputs, p.attrs) if p is not None else None

    def _commit(self) -> None:
        for op, ins, attrs, out in self._pending:
            self.graph.add(op, ins, attrs, [out])
        self._pending = []


def _short(attrs: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in attrs.items())


@dataclass
class Imported:
    """The result of ``import_fx``: the graph, how FX inputs map to graph inputs and how the
    graph outputs rebuild the FX outputs."""

    graph: Graph
    input_index: list      # per FX placeholder: graph input position, or None (constant/int)
    outputs: list          # per FX output leaf: ("graph", k) | ("value", obj) | ("sym", expr)
    out_spec: Any          # pytree spec of the FX outputs
    symbols: SymbolTable
    report: ImportReport


def import_fx(gm: torch.fx.GraphModule, constants: dict, supports: Optional[Callable] = None,
              names: Optional[dict] = None) -> Imported:
    """Import ``gm``.  ``constants`` maps placeholder position -> tensor for parameters and
    buffers (snapshotted into graph constants); every other tensor placeholder is a run-time
    input; SymInt/int placeholders are dropped (their values come from input shapes).
    ``names`` maps (placeholder position, dim) -> a name for the symbolic size there."""
    from . import aten_ops
    graph = Graph()
    symbols = SymbolTable()
    ctx = Context(graph, symbols, supports)
    report = ImportReport()
    input_index: list = []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for pos, n in enumerate(placeholders):
        val = n.meta.get("val", n.meta.get("example_value"))
        if pos in constants:
            ctx.env[n] = _constant_value(constants[pos], n.name)
            input_index.append(None)
        elif isinstance(val, torch.Tensor):
            _check_dtype(val.dtype, f"input {n.name}")
            shape = val.shape
            for d, s in enumerate(shape):
                if names and (pos, d) in names and is_symbolic(s):
                    symbols.name(sym_expr(s), names[(pos, d)])
            symbols.note_input(len(graph.inputs), shape)
            v = Value(symbols.shape(shape), dtype_name(val.dtype), name=_ident(n.name))
            graph.inputs.append(v)
            ctx.env[n] = v
            input_index.append(len(graph.inputs) - 1)
        else:
            ctx.env[n] = symbols.dim(val) if val is not None else None
            input_index.append(None)
    out_node = None
    for n in gm.graph.nodes:
        if n.op == "output":
            out_node = n
        elif n.op == "call_function":
            _convert(ctx, n, aten_ops, report)
        elif n.op == "get_attr":
            ctx.env[n] = _constant_value(_get_attr(gm, n.target), n.name)
        elif n.op != "placeholder":
            raise ImportFailure(f"FX node {n.format_node()}: op '{n.op}' is not supported")
    leaves, spec = torch.utils._pytree.tree_flatten(out_node.args[0])
    outputs: list = []
    for leaf in leaves:
        v = ctx.env.get(leaf) if isinstance(leaf, torch.fx.Node) else leaf
        if isinstance(v, Value):
            if v.is_const or any(v is o for o in graph.outputs) or \
                    any(v is i for i in graph.inputs):
                outputs.append(("alias", v))
            else:
                graph.outputs.append(v)
                outputs.append(("graph", len(graph.outputs) - 1))
        elif isinstance(leaf, torch.fx.Node) and isinstance(ctx.meta(leaf), torch.SymInt):
            outputs.append(("sym", sym_expr(ctx.meta(leaf))))
        else:
            outputs.append(("value", v))
    unbound = symbols.unbound()
    if unbound:
        raise ImportFailure(f"symbolic sizes {unbound} are no input tensor's dimension")
    graph.verify()
    return Imported(graph, input_index, outputs, spec, symbols, report)


def _check_dtype(dt: torch.dtype, what: str) -> None:
    """Tensors between graph nodes are NumPy arrays: a dtype NumPy lacks (bfloat16, complex
    ...) cannot flow through the graph, so the whole graph is refused (Dynamo then runs it
    eagerly)."""
    if dt not in _NP_DTYPES:
        raise ImportFailure(f"{what} is {dt}, which cannot flow through a tdsl graph")


def _ident(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)


def _get_attr(gm: torch.fx.GraphModule, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _constant_value(t: Any, name: str) -> Any:
    """A parameter/buffer as a graph constant (a copy: later changes to the model's weights
    do not reach a compiled model, as with Inductor's freezing)."""
    if not isinstance(t, torch.Tensor):
        return t
    t = t.detach()
    if t.dtype not in _NP_DTYPES or t.device.type != "cpu" or t.is_sparse:
        raise ImportFailure(f"constant {name}: {t.dtype} on {t.device} cannot be a tdsl "
                            f"constant")
    return constant(np.array(t.contiguous().numpy(), copy=True), name=_ident(name))


def _convert(ctx: Context, n: torch.fx.Node, aten_ops: Any, report: ImportReport) -> None:
    """Convert one call node, or emit it as a fallback."""
    val = n.meta.get("val")
    name = op_name(n.target)
    # sizes computed from sizes (sym_size, operator.mul on SymInts, ...) are Exprs
    if isinstance(val, (torch.SymInt, int)) and not isinstance(val, bool) and \
            n.target is not operator.getitem:
        try:
            ctx.env[n] = ctx.symbols.dim(val)
            return
        except ImportFailure:
            pass
    if val is None and not n.users and (name.startswith("aten._assert")
                                         or name.startswith("aten.sym_constrain_range")):
        # trace-time checks of dtypes/metadata and symbolic ranges: the compiled model
        # checks its inputs' dtypes and sizes itself
        return
    if n.target is operator.getitem:
        src = ctx.env.get(n.args[0])
        if isinstance(src, (tuple, list)):
            ctx.env[n] = src[n.args[1]]
            return
    conv = aten_ops.CONVERTERS.get(n.target)
    ctx.node = n
    ctx._pending = []
    reason = f"no tdsl mapping for {name}"
    if conv is not None:
        try:
            result = conv(ctx, *n.args, **n.kwargs)
        except Unsupported as e:
            reason = str(e)
            ctx._pending = []
        else:
            ctx._commit()
            ctx.env[n] = result
            report.mapped[name] = report.mapped.get(name, 0) + 1
            return
    _emit_fallback(ctx, n, reason, report)


def _emit_fallback(ctx: Context, n: torch.fx.Node, reason: str, report: ImportReport) -> None:
    """A ``torch`` node that runs ``n.target`` on the tensors of its arguments."""
    name = op_name(n.target)
    inputs: list = []
    sym: list = []

    def arg(a: Any) -> Any:
        if isinstance(a, torch.fx.Node):
            v = ctx.env.get(a)
            if isinstance(v, Value):
                if not any(v is i for i in inputs):
                    inputs.append(v)
                return v
            m = a.meta.get("val")
            if isinstance(m, (torch.SymInt, torch.SymFloat, torch.SymBool)) and \
                    is_symbolic(m):
                sym.append(sym_expr(m))
                return _Sym(len(sym) - 1)
            if isinstance(v, (tuple, list)):
                return type(v)(arg(x) for x in v)
            return m if m is not None else v
        if isinstance(a, (torch.SymInt, torch.SymFloat)) and is_symbolic(a):
            sym.append(sym_expr(a))
            return _Sym(len(sym) - 1)
        return a
    args = torch.fx.node.map_aggregate(n.args, arg)
    kwargs = torch.fx.node.map_aggregate(dict(n.kwargs), arg)
    val = n.meta.get("val")
    target: Callable = n.target
    if sym:
        # symbol values are read from the shapes of the graph inputs that carry them
        srcs = []
        for e in sym:
            for s in e.free_symbols:
                if s not in ctx.symbols.sources:
                    raise ImportFailure(f"{name}: symbolic argument {e} has no input source")
        order = sorted({s for e in sym for s in e.free_symbols}, key=str)
        for s in order:
            k, d = ctx.symbols.sources[s]
            srcs.append((ctx.graph.inputs[k], d))
            if not any(ctx.graph.inputs[k] is i for i in inputs):
                inputs.append(ctx.graph.inputs[k])
        target = _SymbolicCall(n.target, sym, order, [d for _, d in srcs])
        args = (tuple(v for v, _ in srcs), args, kwargs)
        kwargs = {}
    for t in (val if isinstance(val, (tuple, list)) else [val]):
        if isinstance(t, torch.Tensor):
            _check_dtype(t.dtype, f"the result of {name}")
    if isinstance(val, torch.Tensor):
        outs = [Value(ctx.symbols.shape(val.shape), dtype_name(val.dtype))]
        result: Any = outs[0]
    elif isinstance(val, (tuple, list)) and all(isinstance(t, torch.Tensor) or t is None
                                                for t in val):
        outs = [Value(ctx.symbols.shape(t.shape), dtype_name(t.dtype))
                for t in val if t is not None]
        it = iter(outs)
        result = tuple(next(it) if t is not None else None for t in val)
        if any(t is None for t in val):
            target = _TensorsOnly(target)
    else:
        raise ImportFailure(f"{name} returns {type(val).__name__}, which the graph cannot "
                            f"hold")
    ctx.graph.nodes.append(fallback(target, args, kwargs, inputs, outs, name=name))
    ctx.env[n] = result
    report.add_fallback(name, reason)


class _Sym:
    """Placeholder for the k-th symbolic argument of a fallback call."""

    def __init__(self, k: int) -> None:
        self.k = k

    def __repr__(self) -> str:
        return f"<sym {self.k}>"


class _SymbolicCall:
    """A fallback target whose arguments include symbolic sizes: their values are computed
    from the shapes of the graph inputs passed first (``(sources, args, kwargs)``)."""

    def __init__(self, target: Callable, exprs: list, symbols: list, dims: list) -> None:
        self.target, self.exprs, self.symbols, self.dims = target, exprs, symbols, dims
        self.__name__ = op_name(target)

    def __call__(self, sources: tuple, args: Any, kwargs: Any) -> Any:
        binding = {s: int(t.shape[d]) for s, t, d in zip(self.symbols, sources, self.dims)}
        vals = [int(e.xreplace(binding)) if hasattr(e, "xreplace") else e for e in self.exprs]

        def sub(a: Any) -> Any:
            return vals[a.k] if isinstance(a, _Sym) else a
        args = torch.fx.node.map_aggregate(args, sub)
        kwargs = torch.fx.node.map_aggregate(kwargs, sub)
        return self.target(*args, **kwargs)


class _TensorsOnly:
    """A fallback target whose tuple result has Nones: returns only its tensors."""

    def __init__(self, target: Callable) -> None:
        self.target = target
        self.__name__ = op_name(target)

    def __call__(self, *args: Any, **kwargs: Any) -> tuple:
        return tuple(t for t in self.target(*args, **kwargs) if t is not None)
