"""The graph op vocabulary: op name -> how to build it from tdsl tensors, its fusion kind,
and (for constant folding) how NumPy evaluates it.

Each entry of ``OPS`` is an ``OpDef``.  ``build(operands, attrs)`` receives one operand per
input Value -- a tdsl ``Tensor``, or a Python number for a 0-d constant (scalars are
immediates in the generated code, never kernel arguments) -- and returns the output tensor.
Shapes are never stated twice: ``infer`` builds the op on placeholders and reads the result.

Ops added here beyond MODEL.md's table (graph-internal, made by passes):

* ``dense`` takes ``weight_layout``: "NK" (PyTorch's (out, in), the default) or "KN" (the
  weight pre-transposed at compile time by ``passes.prepack``: the GEMM reads it in rows);
* ``conv2d`` takes ``kernel_layout``: "OIHW" (PyTorch's, the default) or "HWIO" (a constant
  weight re-laid at compile time by ``passes.prepack``: the filter panels copy runs of it),
  and ``layout``: "NCHW" (the default) or "NHWC" (data (N, H, W, C), HWIO weight; made by
  ``passes.layout`` where that layout's kernel is faster);
* ``causal_mask`` (x; offset): ``x`` where ``col <= row + offset`` on the last two axes,
  else -inf -- the causal attention mask as an elementwise op (fuses into softmax).
* ``attention`` takes ``impl``: "auto" (the default), "fused" or "decomposed" -- whether it
  runs as ``ops.attention``'s one-pass kernel or is expanded by ``passes.decompose`` (see
  ``fused_attention_applies`` and ``passes.decompose.use_fused_attention``).

The semantics are PyTorch's (NCHW / OIHW, float32 first).
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np

import tdsl as td
import tdsl.intrin as _i
from tdsl import ops
from tdsl.dtype import INDEX, as_dtype
from tdsl.errors import ShapeError, TDSLError
from tdsl.expr import Expr, Select, convert
from tdsl.ops._util import const_value, prod, same_size, simplify
from tdsl.ops.tags import OpKind
from tdsl.reduction import sum as _rsum
from tdsl.tensor import Tensor, compute, reduce_axis

from .ir import GraphError, Value


class Kind(enum.Enum):
    """How a graph op fuses (the graph-level analogue of ``tdsl.ops.Pattern``)."""

    ELEMWISE = "elemwise"     # pointwise, incl. broadcasting: epilogue / prologue material
    INJECTIVE = "injective"   # reshape, transpose, slice, expand, concat, embedding
    ANCHOR = "anchor"         # conv2d, dense, matmul: a tiled kernel with an epilogue
    ROW = "row"               # softmax, layer_norm: a row group with a prologue
    REDUCE = "reduce"         # sum/mean/amax/amin, pooling: its own kernel, prologue fused
    OPAQUE = "opaque"         # torch fallback


@dataclass(frozen=True)
class OpDef:
    """One op of the vocabulary."""

    name: str
    kind: Kind
    build: Callable[[list, dict], Tensor]
    np_eval: Optional[Callable[[list, dict], np.ndarray]] = None   # for constant folding
    cheap: bool = True            # cheap enough to recompute instead of materializing


OPS: dict[str, OpDef] = {}


def _op(name: str, kind: Kind, build: Callable, np_eval: Optional[Callable] = None,
        cheap: bool = True) -> None:
    OPS[name] = OpDef(name, kind, build, np_eval, cheap)


# ---- elementwise --------------------------------------------------------------------------------
def _tensor_first(fn: Callable) -> Callable:
    """A binary op whose operands may both be scalars-or-tensors (one must be a tensor)."""
    def build(xs: list, attrs: dict) -> Tensor:
        a, b = xs
        return fn(*_promote(a, b))
    return build


def _promote(a: Any, b: Any) -> tuple:
    """An int tensor with a float scalar becomes float32 (PyTorch's promotion)."""
    out = []
    for v, other in ((a, b), (b, a)):
        if (isinstance(v, Tensor) and not v.dtype.is_float and isinstance(other, float)):
            v = ops.cast(v, "float32")
        out.append(v)
    return tuple(out)


_BINARY = {"add": (ops.add, np.add), "sub": (ops.subtract, np.subtract),
           "mul": (ops.multiply, np.multiply), "div": (ops.divide, np.true_divide),
           "pow": (ops.power, np.power), "maximum": (ops.maximum, np.maximum),
           "minimum": (ops.minimum, np.minimum), "eq": (ops.equal, np.equal),
           "ne": (ops.not_equal, np.not_equal), "lt": (ops.less, np.less),
           "le": (ops.less_equal, np.less_equal), "gt": (ops.greater, np.greater),
           "ge": (ops.greater_equal, np.greater_equal)}
for _n, (_f, _np) in _BINARY.items():
    _op(_n, Kind.ELEMWISE, _tensor_first(_f),
        (lambda f: lambda xs, a: f(xs[0], xs[1]))(_np))


def _true_divide(xs: list, a: dict) -> Tensor:
    """PyTorch's ``/``: integer operands divide as float32."""
    x, y = (ops.cast(v, "float32") if isinstance(v, Tensor) and not v.dtype.is_float else
            float(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in xs)
    return ops.divide(*_promote(x, y))


_op("div", Kind.ELEMWISE, _true_divide,
    lambda xs, a: np.true_divide(xs[0], xs[1]).astype(
        np.result_type(xs[0], xs[1], np.float32)))


def _np_erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[x.dtype])(x)


def _np_gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + _np_erf(x / np.sqrt(2).astype(x.dtype)))


_UNARY: dict[str, tuple[Callable, Callable]] = {
    "neg": (ops.negative, np.negative), "exp": (ops.exp, np.exp), "log": (ops.log, np.log),
    "sqrt": (ops.sqrt, np.sqrt), "rsqrt": (ops.rsqrt, lambda x: 1 / np.sqrt(x)),
    "tanh": (ops.tanh, np.tanh), "sigmoid": (ops.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    "relu": (ops.relu, lambda x: np.maximum(x, 0).astype(x.dtype)),
    "silu": (ops.silu, lambda x: x / (1 + np.exp(-x))), "erf": (ops.erf, _np_erf),
    "abs": (ops.abs, np.abs),
}
for _n, (_f, _np) in _UNARY.items():
    _op(_n, Kind.ELEMWISE, (lambda f: lambda xs, a: f(xs[0]))(_f),
        (lambda f: lambda xs, a: f(xs[0]))(_np))

_op("gelu", Kind.ELEMWISE, lambda xs, a: ops.gelu(xs[0], a.get("approximate", "none")),
    lambda xs, a: _np_gelu(xs[0], a.get("approximate", "none")), cheap=False)
OPS["erf"] = OpDef("erf", Kind.ELEMWISE, OPS["erf"].build, OPS["erf"].np_eval, cheap=False)


def _clamp(xs: list, a: dict) -> Tensor:
    x = xs[0]
    lo, hi = a.get("min"), a.get("max")
    if lo is not None and hi is not None:
        return ops.clip(x, lo, hi)
    if lo is not None:
        return ops.maximum(x, lo)
    if hi is not None:
        return ops.minimum(x, hi)
    return ops.identity(x)


_op("clamp", Kind.ELEMWISE, _clamp, lambda xs, a: np.clip(xs[0], a.get("min"), a.get("max")))
_op("cast", Kind.ELEMWISE, lambda xs, a: ops.cast(xs[0], a["dtype"]),
    lambda xs, a: xs[0].astype(a["dtype"]))
_op("where", Kind.ELEMWISE, lambda xs, a: ops.where(*xs), lambda xs, a: np.where(*xs))


def _batch_norm(xs: list, a: dict) -> Tensor:
    return ops.batch_norm(*xs, axis=a.get("axis", 1), eps=a.get("eps", 1e-5))


_op("batch_norm", Kind.ELEMWISE, _batch_norm)


def _causal_mask(xs: list, a: dict) -> Tensor:
    x = xs[0]
    off = int(a.get("offset", 0))
    nd = x.ndim
    ninf = convert(-math.inf, x.dtype)
    return compute(x.shape, lambda *i: Select(i[nd - 1] <= i[nd - 2] + off, x(*i), ninf),
                   name="T_causal_mask", tag=OpKind.ELEMWISE)


_op("causal_mask", Kind.ELEMWISE, _causal_mask)


# ---- anchors ---------------------------------------------------------------------------------
def _dense2d(x: Tensor, w: Tensor, b: "Tensor | None", layout: str) -> Tensor:
    if layout == "NK":
        return ops.dense(x, w, b)
    if layout != "KN":
        raise ShapeError(f"graph dense: weight_layout must be 'NK' or 'KN', got {layout!r}")
    y = ops.matmul(x, w, name="T_dense")        # a pre-transposed (K, N) weight
    return y if b is None else ops.add(y, b)


def _dense(xs: list, a: dict) -> Tensor:
    x, w = xs[0], xs[1]
    b = xs[2] if len(xs) > 2 else None
    layout = a.get("weight_layout", "NK")
    if x.ndim == 2:
        return _dense2d(x, w, b, layout)
    lead = x.shape[:-1]
    y = _dense2d(ops.reshape(x, (simplify(prod(lead)), x.shape[-1])), w, b, layout)
    return ops.reshape(y, (*lead, y.shape[1]))


def _np_dense(xs: list, a: dict) -> np.ndarray:
    w = xs[1] if a.get("weight_layout", "NK") == "KN" else xs[1].T
    y = xs[0] @ w
    return y + xs[2] if len(xs) > 2 else y


def _matmul(xs: list, a: dict) -> Tensor:
    x, y = xs
    ta, tb = bool(a.get("transpose_a")), bool(a.get("transpose_b"))
    if x.ndim == 2 and y.ndim == 2:
        return ops.matmul(x, y, ta, tb)
    if y.ndim == 2 and not ta:   # (..., M, K) @ (K, N): one GEMM over the flattened rows
        lead = x.shape[:-1]
        z = ops.matmul(ops.reshape(x, (simplify(prod(lead)), x.shape[-1])), y, False, tb)
        return ops.reshape(z, (*lead, z.shape[1]))
    if x.ndim < 3 or y.ndim < 2:
        raise ShapeError("graph matmul: 1-d operands are not supported")
    bx, by = x.shape[:-2], y.shape[:-2]
    if len(bx) != len(by) and y.ndim != 2:
        if len(by) < len(bx):
            y = ops.reshape(y, (*([1] * (len(bx) - len(by))), *y.shape))
            by = y.shape[:-2]
        else:
            x = ops.reshape(x, (*([1] * (len(by) - len(bx))), *x.shape))
            bx = x.shape[:-2]
    ones_x = all(const_value(d) == 1 for d in bx)
    ones_y = all(const_value(d) == 1 for d in by)
    same = all(const_value(p) == const_value(q) if const_value(p) is not None
               else p is q or _same(p, q) for p, q in zip(bx, by))
    if not (same or ones_x or ones_y):
        raise ShapeError("graph matmul: batch dimensions that broadcast partially are not "
                         "supported")
    batch = bx if not ones_x or ones_y else by
    x3 = ops.reshape(x, (simplify(prod(bx)), *x.shape[-2:]))
    y3 = ops.reshape(y, (simplify(prod(by)), *y.shape[-2:]))
    z = ops.batch_matmul(x3, y3, ta, tb)
    return ops.reshape(z, (*batch, *z.shape[1:]))


def _same(p: Expr, q: Expr) -> bool:
    from tdsl.ops._util import same_size
    return same_size(p, q)


def _np_matmul(xs: list, a: dict) -> np.ndarray:
    x, y = xs
    if a.get("transpose_a"):
        x = np.swapaxes(x, -1, -2)
    if a.get("transpose_b"):
        y = np.swapaxes(y, -1, -2)
    return np.matmul(x, y)


def _conv2d(xs: list, a: dict) -> Tensor:
    x, w = xs[0], xs[1]
    b = xs[2] if len(xs) > 2 else None
    return ops.conv2d(x, w, stride=a.get("stride", 1), padding=a.get("padding", 0),
                      dilation=a.get("dilation", 1), groups=a.get("groups", 1),
                      layout=a.get("layout", "NCHW"),
                      kernel_layout=a.get("kernel_layout", "OIHW"), bias=b)


_op("dense", Kind.ANCHOR, _dense, _np_dense, cheap=False)
_op("matmul", Kind.ANCHOR, _matmul, _np_matmul, cheap=False)
_op("conv2d", Kind.ANCHOR, _conv2d, cheap=False)


# ---- row groups -------------------------------------------------------------------------------
def _layer_norm(xs: list, a: dict) -> Tensor:
    x, g, b = xs
    axes = tuple(a.get("axes", (-1,)))
    return ops.layer_norm(x, g, b, axis=axes if len(axes) > 1 else axes[0],
                          eps=a.get("eps", 1e-5))


_op("softmax", Kind.ROW, lambda xs, a: ops.softmax(xs[0], a.get("axis", -1),
                                                   a.get("masked_rows", False)), cheap=False)
_op("log_softmax", Kind.ROW, lambda xs, a: ops.log_softmax(xs[0], a.get("axis", -1)),
    cheap=False)
_op("layer_norm", Kind.ROW, _layer_norm, cheap=False)


# ---- reductions and pooling ---------------------------------------------------------------------
def _reduce(fn: Callable) -> Callable:
    def build(xs: list, a: dict) -> Tensor:
        axes = a.get("axes")
        return fn(xs[0], axis=tuple(axes) if axes is not None else None,
                  keepdims=bool(a.get("keepdims", False)))
    return build


def _np_reduce(fn: Callable) -> Callable:
    def ev(xs: list, a: dict) -> np.ndarray:
        axes = a.get("axes")
        return fn(xs[0], axis=tuple(axes) if axes is not None else None,
                  keepdims=bool(a.get("keepdims", False)))
    return ev


for _n, _f, _np in (("sum", ops.sum, np.sum), ("mean", ops.mean, np.mean),
                    ("amax", ops.max, np.max), ("amin", ops.min, np.min)):
    _op(_n, Kind.REDUCE, _reduce(_f), _np_reduce(_np), cheap=False)


def _max_pool(xs: list, a: dict) -> Tensor:
    return ops.max_pool2d(xs[0], a["kernel"], a.get("stride") or a["kernel"],
                          a.get("padding", 0), a.get("dilation", 1),
                          ceil_mode=bool(a.get("ceil_mode", False)))


def _avg_pool(xs: list, a: dict) -> Tensor:
    return ops.avg_pool2d(xs[0], a["kernel"], a.get("stride") or a["kernel"],
                          a.get("padding", 0), ceil_mode=bool(a.get("ceil_mode", False)),
                          count_include_pad=bool(a.get("count_include_pad", True)))


def _adaptive_avg_pool(xs: list, a: dict) -> Tensor:
    x = xs[0]
    oh, ow = (a["output_size"], a["output_size"]) if isinstance(a["output_size"], int) \
        else a["output_size"]
    if (oh, ow) == (1, 1):
        return ops.mean(x, axis=(2, 3), keepdims=True)
    h, w = const_value(x.shape[2]), const_value(x.shape[3])
    if h is None or w is None:
        raise ShapeError("graph adaptive_avg_pool2d: symbolic H or W needs output_size (1, 1)")
    if h % oh == 0 and w % ow == 0:
        return ops.avg_pool2d(x, (h // oh, w // ow), (h // oh, w // ow))
    # windows of varying size: [floor(i*H/OH), ceil((i+1)*H/OH))
    kh = max(-(-((i + 1) * h) // oh) - (i * h) // oh for i in range(oh))
    kw = max(-(-((j + 1) * w) // ow) - (j * w) // ow for j in range(ow))
    ry, rx = reduce_axis((0, kh), name="ry"), reduce_axis((0, kw), name="rx")

    def body(n: Expr, c: Expr, i: Expr, j: Expr) -> Expr:
        y0, x0 = (i * h) // oh, (j * w) // ow
        y1, x1 = ((i + 1) * h + oh - 1) // oh, ((j + 1) * w + ow - 1) // ow
        inside = _i.all(y0 + ry < y1, x0 + rx < x1)
        iy = _i.minimum(y0 + ry, convert(h - 1, INDEX))
        ix = _i.minimum(x0 + rx, convert(w - 1, INDEX))
        return _rsum(Select(inside, x[n, c, iy, ix], convert(0.0, x.dtype)), axis=[ry, rx])
    s = compute((x.shape[0], x.shape[1], oh, ow), body, name="T_adaptive_pool_sum",
                tag=OpKind.POOL2D)

    def div(n: Expr, c: Expr, i: Expr, j: Expr) -> Expr:
        cy = ((i + 1) * h + oh - 1) // oh - (i * h) // oh
        cx = ((j + 1) * w + ow - 1) // ow - (j * w) // ow
        return s[n, c, i, j] / (cy * cx).astype(x.dtype)
    return compute(s.shape, div, name="T_adaptive_avg_pool2d", tag=OpKind.ELEMWISE)


_op("max_pool2d", Kind.REDUCE, _max_pool, cheap=False)
_op("avg_pool2d", Kind.REDUCE, _avg_pool, cheap=False)
_op("adaptive_avg_pool2d", Kind.REDUCE, _adaptive_avg_pool, cheap=False)


def _cumsum(xs: list, a: dict) -> Tensor:
    x = xs[0]
    ax = a["axis"] % x.ndim
    k = reduce_axis((0, x.shape[ax]), name="k")

    def body(*i: Expr) -> Expr:
        src = list(i)
        src[ax] = k.var
        return _rsum(Select(k.var <= i[ax], x(*src), convert(0, x.dtype)), axis=k)
    return compute(x.shape, body, name="T_cumsum")


_op("cumsum", Kind.REDUCE, _cumsum, lambda xs, a: np.cumsum(xs[0], axis=a["axis"]),
    cheap=False)


# ---- layout / injective -------------------------------------------------------------------------
def _reshape(xs: list, a: dict) -> Tensor:
    return ops.reshape(xs[0], [d if isinstance(d, Expr) else int(d) for d in a["shape"]])


_op("reshape", Kind.INJECTIVE, _reshape,
    lambda xs, a: xs[0].reshape([int(d) for d in a["shape"]]))
_op("transpose", Kind.INJECTIVE, lambda xs, a: ops.transpose(xs[0], tuple(a["axes"])),
    lambda xs, a: np.ascontiguousarray(np.transpose(xs[0], a["axes"])))
_op("concat", Kind.INJECTIVE, lambda xs, a: ops.concatenate(xs, a.get("axis", 0)),
    lambda xs, a: np.concatenate(xs, a.get("axis", 0)))


def slice_bounds(size: Any, start: int, end: int, step: int) -> tuple[Any, Any]:
    """PyTorch's clamping of ``x[start:end:step]`` along a dimension of ``size`` (an int or a
    symbolic Expr): (start, length).  Symbolic sizes take starts >= 0 and ends that are
    negative or past any size (>= 2**31)."""
    if step < 1:
        raise ShapeError(f"graph slice: step must be >= 1, got {step}")
    n = const_value(size)
    if n is not None:
        s = min(max(start + n if start < 0 else start, 0), n)
        e = min(max(end + n if end < 0 else end, 0), n)
        return s, max(0, -(-(e - s) // step))
    if start < 0:
        raise ShapeError("graph slice: a negative start on a symbolic dimension")
    if end < 0:
        e: Any = size + end
    elif end >= 2 ** 31:
        e = size
    else:
        raise ShapeError("graph slice: a positive end on a symbolic dimension may exceed it")
    return start, simplify((e - start + step - 1) // step)


def _slice(xs: list, a: dict) -> Tensor:
    x = xs[0]
    ax = a["axis"] % x.ndim
    step = int(a.get("step", 1))
    start, length = slice_bounds(x.shape[ax], int(a.get("start", 0)),
                                 int(a.get("end", 2 ** 62)), step)
    if const_value(length) == 0:
        raise ShapeError("graph slice: empty result")
    shape = list(x.shape)
    shape[ax] = length

    def body(*i: Expr) -> Expr:
        src = list(i)
        src[ax] = i[ax] * step + start if step != 1 else i[ax] + start
        return x(*src)
    return compute(shape, body, name="T_slice", tag=OpKind.INJECTIVE)


def _np_slice(xs: list, a: dict) -> np.ndarray:
    x = xs[0]
    idx = [slice(None)] * x.ndim
    idx[a["axis"] % x.ndim] = slice(a.get("start", 0), a.get("end", None), a.get("step", 1))
    return np.ascontiguousarray(x[tuple(idx)])


_op("slice", Kind.INJECTIVE, _slice, _np_slice)


def _expand_shape(x_shape: Sequence, shape: Sequence) -> list:
    lead = len(shape) - len(x_shape)
    out = []
    for d, s in enumerate(shape):
        if isinstance(s, int) and s == -1:
            if d < lead:
                raise ShapeError("graph expand: -1 for a new leading dimension")
            out.append(x_shape[d - lead])
        else:
            out.append(s)
    return out


_op("expand", Kind.INJECTIVE,
    lambda xs, a: ops.broadcast_to(xs[0], _expand_shape(xs[0].shape, a["shape"])),
    lambda xs, a: np.ascontiguousarray(np.broadcast_to(
        xs[0], [int(s) for s in _expand_shape(xs[0].shape, a["shape"])])))


def _embedding(xs: list, a: dict) -> Tensor:
    w, idx = xs
    v = w.shape[0]

    def body(*i: Expr) -> Expr:
        # out-of-range indices are clamped (a kernel cannot raise): callers validate
        k = idx(*i[:-1]).astype(INDEX)
        k = _i.minimum(_i.maximum(k, convert(0, INDEX)), v - 1)
        return w[k, i[-1]]
    return compute((*idx.shape, w.shape[1]), body, name="T_embedding", tag=OpKind.INJECTIVE)


_op("embedding", Kind.INJECTIVE, _embedding, lambda xs, a: xs[0][xs[1]])


# ---- the public helpers -------------------------------------------------------------------------
def is_scalar(v: Value) -> bool:
    """A 0-d constant: an immediate in kernels, not an argument."""
    return v.is_const and v.ndim == 0


def scalar_of(v: Value) -> "int | float | bool":
    return v.const.reshape(()).item()


def placeholders(inputs: Sequence[Value]) -> list:
    """One operand per input Value: a number for a 0-d constant, else a placeholder."""
    out: list = []
    for k, v in enumerate(inputs):
        if is_scalar(v):
            out.append(scalar_of(v))
        else:
            if v.ndim == 0:
                raise GraphError(f"graph: %{v.name} is a 0-d tensor that is not a constant; "
                                 f"tdsl kernels take tensors of rank >= 1")
            out.append(td.placeholder(v.shape, v.dtype, name=f"in{k}"))
    return out


def build(op: str, operands: list, attrs: dict) -> Tensor:
    """The output tensor of ``op`` on ``operands`` (tensors or numbers)."""
    d = OPS.get(op)
    if d is None:
        raise GraphError(f"graph: unknown op '{op}' (see tdsl.graph.opset.OPS)")
    if not any(isinstance(o, Tensor) for o in operands):
        raise GraphError(f"graph: '{op}' needs at least one tensor operand")
    return d.build(list(operands), dict(attrs))


def dim(e: Any) -> Any:
    """A shape entry as the IR keeps it: an int when constant, else the Expr."""
    c = const_value(e)
    return c if c is not None else e


def infer(op: str, inputs: Sequence[Value], attrs: dict) -> list[tuple[tuple, str]]:
    """The (shape, dtype) of each output of ``op`` on ``inputs`` (built on placeholders)."""
    t = build(op, placeholders(inputs), attrs)
    return [(tuple(dim(s) for s in t.shape), str(t.dtype))]


def supports(op: str, input_values: Sequence[Value], attrs: dict) -> bool:
    """Whether tdsl can run ``op`` with these inputs and attrs (else the frontend emits a
    ``torch`` fallback node).  Floats, ints and bools of rank >= 1 (0-d constants as
    scalars), and the output must not be a 0-d tensor."""
    if op not in OPS:
        return False
    try:
        for v in input_values:
            as_dtype(v.dtype)
            if v.ndim == 0 and not v.is_const:
                return False
        (shape, dt), = infer(op, input_values, attrs)
    except (TDSLError, ValueError, TypeError, KeyError, IndexError, ZeroDivisionError):
        return False
    if op in ("sum", "mean", "amax", "amin") and not attrs.get("keepdims"):
        axes = attrs.get("axes")
        nd = input_values[0].ndim
        if axes is None or len({a % nd for a in axes}) == nd:
            return False   # a 0-d result
    return not any(const_value(s) == 0 for s in shape)


def kind(op: str) -> Kind:
    if op == "torch":
        return Kind.OPAQUE
    d = OPS.get(op)
    if d is None:
        raise GraphError(f"graph: unknown op '{op}'")
    return d.kind


def fused_attention_applies(q: Any, k: Any, v: Any, mask: Any, causal: bool) -> bool:
    """Whether ``ops.attention`` (the one-pass fused kernel) computes this ``attention``:
    4-d float q/k/v of one dtype, the same batch and heads (no broadcasting between them),
    k and v of one length, q and k of one head size, and a mask (with or without ``causal``:
    both apply) that is bool or of q's dtype, broadcasting to (batch, heads, seq_q, seq_k).
    The operands are graph Values or tdsl tensors (read: ``shape``, ``dtype``).  The
    ``decompose`` pass expands every other ``attention`` into matmul/softmax/matmul."""
    dt = str(q.dtype)
    if any(len(t.shape) != 4 for t in (q, k, v)) or dt not in ("float32", "float64"):
        return False
    if str(k.dtype) != dt or str(v.dtype) != dt:
        return False
    if not all(same_size(q.shape[d], t.shape[d]) for d in (0, 1) for t in (k, v)):
        return False
    if not (same_size(k.shape[2], v.shape[2]) and same_size(q.shape[3], k.shape[3])):
        return False
    if mask is None:
        return True
    if str(mask.dtype) not in ("bool", dt) or not 1 <= len(mask.shape) <= 4:
        return False
    full = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])[4 - len(mask.shape):]
    return all(const_value(m) == 1 or same_size(m, f) for m, f in zip(mask.shape, full))


def _attention(xs: list, a: dict) -> Tensor:
    """``ops.attention`` where it applies (``fused_attention_applies``, judged on the
    operands); else the matmul/softmax/matmul form, for shape inference and ``supports``
    only: the ``decompose`` pass expands those nodes before kernels are built."""
    q, k, v = xs[:3]
    m = xs[3] if len(xs) > 3 else None
    causal = bool(a.get("causal"))
    if all(isinstance(t, Tensor) for t in xs) and fused_attention_applies(q, k, v, m, causal):
        return ops.attention(q, k, v, causal=causal, scale=a.get("scale"), mask=m)
    s = _matmul([q, k], {"transpose_b": True})
    if m is not None:
        s = ops.where(m, s, -math.inf) if m.dtype.is_bool else ops.add(s, m)
    return _matmul([ops.softmax(s, -1), v], {})


_op("attention", Kind.ANCHOR, _attention, cheap=False)
