"""Converters: one core-ATen op -> graph ops (MODEL.md's vocabulary).

``CONVERTERS`` maps an ATen ``OpOverload`` to ``fn(ctx, *args, **kwargs)``, which emits graph
nodes through ``ctx.emit`` and returns the Value (or tuple of Values) standing for the op's
result, or raises ``Unsupported`` (the op then runs in PyTorch as a fallback node).
Float ops take float32 tensors only; indices may be int64/int32.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np
import torch

from ..graph import Value
from .errors import Unsupported
from .importer import Context
from .symbols import is_symbolic

aten = torch.ops.aten
CONVERTERS: dict = {}
F32 = "float32"


def _reg(*targets: Any) -> Callable:
    def deco(fn: Callable) -> Callable:
        for t in targets:
            CONVERTERS[t] = fn
        return fn
    return deco


def _f32(*vals: Value) -> None:
    for v in vals:
        if v.dtype != F32:
            raise Unsupported(f"dtype {v.dtype} (tdsl graph ops take float32)")


def _out_f32(ctx: Context) -> None:
    if ctx.out_dtype() != F32:
        raise Unsupported(f"result dtype {ctx.out_dtype()}")


def _static(x: Any, what: str) -> Any:
    """``x`` (a number or a list of them) when it is known at compile time; Unsupported (the
    op falls back to PyTorch) when it is symbolic -- a SymInt, or an FX node computing one
    (``x.shape[1]`` traced as ``sym_size``)."""
    items = x if isinstance(x, (list, tuple)) else (x,)
    if any(is_symbolic(e) or isinstance(e, torch.fx.Node) for e in items):
        raise Unsupported(f"symbolic {what}")
    return x


def _operand(ctx: Context, a: Any) -> Value:
    """A tensor argument, or a Python number as a 0-d float32 constant."""
    if isinstance(a, torch.fx.Node):
        v = ctx.value(a)
        _f32(v)
        return v
    if isinstance(a, (int, float)) and not isinstance(a, bool):
        return ctx.scalar(float(a))
    raise Unsupported(f"operand {a!r}")


def _norm_dim(d: int, ndim: int) -> int:
    return d + ndim if d < 0 else d


# ---- elementwise ---------------------------------------------------------------------------
def _binary(op: str) -> Callable:
    def conv(ctx: Context, a: Any, b: Any, alpha: Any = 1) -> Value:
        _out_f32(ctx)
        x, y = _operand(ctx, a), _operand(ctx, b)
        if alpha != 1:
            _static(alpha, "alpha")
            y = ctx.emit("mul", [y, ctx.scalar(float(alpha))], shape=y.shape, dtype=F32)
        return ctx.emit(op, [x, y])
    return conv


for _name, _ops in {"add": (aten.add.Tensor, aten.add.Scalar),
                    "sub": (aten.sub.Tensor, aten.sub.Scalar),
                    "mul": (aten.mul.Tensor, aten.mul.Scalar),
                    "div": (aten.div.Tensor, aten.div.Scalar),
                    "maximum": (aten.maximum.default,), "minimum": (aten.minimum.default,),
                    "pow": (aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor)}.items():
    _reg(*_ops)(_binary(_name))


@_reg(aten.rsub.Scalar, aten.rsub.Tensor)
def _rsub(ctx: Context, a: Any, b: Any, alpha: Any = 1) -> Value:
    _out_f32(ctx)
    x, y = _operand(ctx, a), _operand(ctx, b)
    if alpha != 1:
        raise Unsupported("rsub with alpha")
    return ctx.emit("sub", [y, x])


def _compare(op: str) -> Callable:
    def conv(ctx: Context, a: Any, b: Any) -> Value:
        return ctx.emit(op, [_operand(ctx, a), _operand(ctx, b)])
    return conv


for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    _reg(getattr(aten, _name).Tensor, getattr(aten, _name).Scalar)(_compare(_name))


@_reg(aten.where.self)
def _where(ctx: Context, c: Any, a: Any, b: Any) -> Value:
    _out_f32(ctx)
    cond = ctx.value(c)
    if cond.dtype != "bool":
        raise Unsupported(f"where on a {cond.dtype} condition")
    return ctx.emit("where", [cond, _operand(ctx, a), _operand(ctx, b)])


def _unary(op: str) -> Callable:
    def conv(ctx: Context, a: Any) -> Value:
        _out_f32(ctx)
        return ctx.emit(op, [_operand(ctx, a)])
    return conv


for _name in ("neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "silu", "erf",
              "abs"):
    _reg(getattr(aten, _name).default)(_unary(_name))


@_reg(aten.gelu.default)
def _gelu(ctx: Context, a: Any, approximate: str = "none") -> Value:
    _out_f32(ctx)
    return ctx.emit("gelu", [_operand(ctx, a)], {"approximate": approximate})


def _clamp_emit(ctx: Context, a: Any, lo: Any, hi: Any) -> Value:
    _out_f32(ctx)
    lo, hi = _static(lo, "clamp bound"), _static(hi, "clamp bound")
    return ctx.emit("clamp", [_operand(ctx, a)], {"min": None if lo is None else float(lo),
                                                  "max": None if hi is None else float(hi)})


@_reg(aten.clamp.default)
def _clamp(ctx: Context, a: Any, min: Any = None, max: Any = None) -> Value:
    return _clamp_emit(ctx, a, min, max)


@_reg(aten.clamp_min.default)
def _clamp_min(ctx: Context, a: Any, lo: Any) -> Value:
    return _clamp_emit(ctx, a, lo, None)


@_reg(aten.clamp_max.default)
def _clamp_max(ctx: Context, a: Any, hi: Any) -> Value:
    return _clamp_emit(ctx, a, None, hi)


@_reg(aten.hardtanh.default)
def _hardtanh(ctx: Context, a: Any, min_val: Any = -1.0, max_val: Any = 1.0) -> Value:
    return _clamp_emit(ctx, a, min_val, max_val)


@_reg(aten.relu6.default)
def _relu6(ctx: Context, a: Any) -> Value:
    return _clamp_emit(ctx, a, 0.0, 6.0)


# ---- identities and casts ----------------------------------------------------------------------
@_reg(aten.clone.default, aten.alias.default, aten.detach.default, aten.lift_fresh_copy.default,
      aten.contiguous.default)
def _identity(ctx: Context, a: Any, **kwargs: Any) -> Value:
    return ctx.value(a)


_CAST_OK = ("float32", "int64", "int32", "bool")


@_reg(aten._to_copy.default)
def _to_copy(ctx: Context, a: Any, dtype: Any = None, layout: Any = None, device: Any = None,
             pin_memory: Any = None, non_blocking: bool = False, memory_format: Any = None
             ) -> Value:
    x = ctx.value(a)
    if device is not None and torch.device(device).type != "cpu":
        raise Unsupported(f"copy to {device}")
    out = ctx.out_dtype()
    if out == x.dtype:
        return x
    if out not in _CAST_OK or x.dtype not in _CAST_OK:
        raise Unsupported(f"cast {x.dtype} -> {out}")
    return ctx.emit("cast", [x], {"dtype": out})


# ---- linear algebra ----------------------------------------------------------------------------
def _untransposed(ctx: Context, w: Value) -> Optional[Value]:
    """The [N, K] source of a 2-D ``w`` = transpose(src, (1, 0)), else None."""
    p = ctx.producer_op(w)
    if p is not None and p[0] == "transpose" and tuple(p[2]["axes"]) == (1, 0):
        return p[1][0]
    return None


def _mm(ctx: Context, x: Value, w: Value, bias: Optional[Value]) -> Value:
    """x[M, K] @ w[K, N] (+ bias): ``dense`` when w is a transposed [N, K] matrix."""
    src = _untransposed(ctx, w) if w.ndim == 2 else None
    n = w.shape[-1]
    if src is not None and (bias is None or (bias.ndim == 1 and bias.shape[0] == n)):
        return ctx.emit("dense", [x, src] + ([bias] if bias is not None else []))
    if bias is None:
        return ctx.emit("matmul", [x, w], {"transpose_a": False, "transpose_b": False})
    y = ctx.emit("matmul", [x, w], {"transpose_a": False, "transpose_b": False})
    return ctx.emit("add", [y, bias])


@_reg(aten.mm.default)
def _mm_conv(ctx: Context, a: Any, b: Any) -> Value:
    _out_f32(ctx)
    return _mm(ctx, _operand(ctx, a), _operand(ctx, b), None)


@_reg(aten.addmm.default)
def _addmm(ctx: Context, bias: Any, a: Any, b: Any, beta: Any = 1, alpha: Any = 1) -> Value:
    _out_f32(ctx)
    if beta != 1 or alpha != 1:
        raise Unsupported("addmm with beta/alpha != 1")
    return _mm(ctx, _operand(ctx, a), _operand(ctx, b), _operand(ctx, bias))


@_reg(aten.bmm.default, aten.matmul.default)
def _bmm(ctx: Context, a: Any, b: Any) -> Value:
    _out_f32(ctx)
    x, y = _operand(ctx, a), _operand(ctx, b)
    if x.ndim < 2 or y.ndim < 2:
        raise Unsupported("matmul of a 1-d operand")
    return ctx.emit("matmul", [x, y], {"transpose_a": False, "transpose_b": False})


@_reg(aten.linear.default)
def _linear(ctx: Context, a: Any, w: Any, b: Any = None) -> Value:
    _out_f32(ctx)
    ins = [_operand(ctx, a), _operand(ctx, w)] + ([_operand(ctx, b)] if b is not None else [])
    return ctx.emit("dense", ins)


@_reg(aten.convolution.default)
def _convolution(ctx: Context, x: Any, w: Any, b: Any, stride: Any, padding: Any,
                 dilation: Any, transposed: bool, output_padding: Any, groups: int) -> Value:
    _out_f32(ctx)
    xv, wv = _operand(ctx, x), _operand(ctx, w)
    if transposed:
        raise Unsupported("transposed convolution")
    if xv.ndim != 4:
        raise Unsupported(f"{xv.ndim - 2}-d convolution (tdsl maps conv2d)")
    _static(list(stride) + list(padding) + list(dilation), "conv attrs")
    ph, pw = (list(padding) * 2)[:2] if len(padding) == 1 else padding
    ins = [xv, wv] + ([_operand(ctx, b)] if b is not None else [])
    return ctx.emit("conv2d", ins, {"stride": tuple(int(s) for s in _pair(stride)),
                                    "padding": (int(ph), int(pw), int(ph), int(pw)),
                                    "dilation": tuple(int(d) for d in _pair(dilation)),
                                    "groups": int(groups)})


def _pair(v: Any) -> tuple:
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return (v[0], v[0]) if len(v) == 1 else tuple(v)


# ---- normalization -------------------------------------------------------------------------------
def _channel_param(ctx: Context, a: Any, c: Any, fill: float) -> Value:
    if a is not None:
        return _operand(ctx, a)
    if is_symbolic(c) or not isinstance(c, int):
        raise Unsupported("missing affine parameter over a symbolic size")
    return ctx.const_array(np.full((c,), fill, np.float32))


def _only_first_output(ctx: Context, what: str) -> None:
    used = ctx.users_of_outputs()
    if used - {0}:
        raise Unsupported(f"{what}: its statistics outputs are used")


@_reg(aten._native_batch_norm_legit_no_training.default)
def _bn_no_training(ctx: Context, x: Any, w: Any, b: Any, mean: Any, var: Any,
                    momentum: float, eps: float) -> tuple:
    _only_first_output(ctx, "batch_norm")
    return (_bn(ctx, x, w, b, mean, var, eps, 0), None, None)


@_reg(aten._native_batch_norm_legit.default, aten.native_batch_norm.default)
def _bn_legit(ctx: Context, x: Any, w: Any, b: Any, mean: Any, var: Any, training: bool,
              momentum: float, eps: float) -> tuple:
    if training or mean is None:
        raise Unsupported("batch_norm in training mode")
    _only_first_output(ctx, "batch_norm")
    return (_bn(ctx, x, w, b, mean, var, eps, 0), None, None)


@_reg(aten.batch_norm.default)
def _batch_norm(ctx: Context, x: Any, w: Any, b: Any, mean: Any, var: Any, training: bool,
                momentum: float, eps: float, cudnn_enabled: bool = True) -> Value:
    if training or mean is None:
        raise Unsupported("batch_norm in training mode")
    return _bn(ctx, x, w, b, mean, var, eps, None)


def _bn(ctx: Context, x: Any, w: Any, b: Any, mean: Any, var: Any, eps: float,
        out: Optional[int]) -> Value:
    xv = _operand(ctx, x)
    c = xv.shape[1]
    ins = [xv, _channel_param(ctx, w, c, 1.0), _channel_param(ctx, b, c, 0.0),
           _operand(ctx, mean), _operand(ctx, var)]
    if ctx.out_dtype(out) != F32:
        raise Unsupported("batch_norm result dtype")
    return ctx.emit("batch_norm", ins, {"eps": float(eps), "axis": 1},
                    shape=ctx.out_shape(out), dtype=F32)


def _layer_norm_emit(ctx: Context, x: Any, shape: Any, w: Any, b: Any, eps: float,
                     out: Optional[int]) -> Value:
    xv = _operand(ctx, x)
    k = len(shape)
    axes = tuple(range(xv.ndim - k, xv.ndim))
    if w is None or b is None:
        _static(list(shape), "normalized_shape")
    gw = _operand(ctx, w) if w is not None else ctx.const_array(np.ones(shape, np.float32))
    gb = _operand(ctx, b) if b is not None else ctx.const_array(np.zeros(shape, np.float32))
    return ctx.emit("layer_norm", [xv, gw, gb], {"axes": axes, "eps": float(eps)},
                    shape=ctx.out_shape(out), dtype=F32)


@_reg(aten.native_layer_norm.default)
def _native_layer_norm(ctx: Context, x: Any, shape: Any, w: Any, b: Any, eps: float) -> tuple:
    _only_first_output(ctx, "layer_norm")
    return (_layer_norm_emit(ctx, x, shape, w, b, eps, 0), None, None)


@_reg(aten.layer_norm.default)
def _layer_norm(ctx: Context, x: Any, shape: Any, w: Any = None, b: Any = None,
                eps: float = 1e-5, cudnn_enable: bool = True) -> Value:
    return _layer_norm_emit(ctx, x, shape, w, b, eps, None)


def _softmax_like(op: str) -> Callable:
    def conv(ctx: Context, x: Any, dim: int, half_to_float: Any = False) -> Value:
        _out_f32(ctx)
        if half_to_float not in (False, None):
            raise Unsupported(f"{op} with dtype conversion")
        xv = _operand(ctx, x)
        return ctx.emit(op, [xv], {"axis": _norm_dim(int(dim), xv.ndim)})
    return conv


_reg(aten._softmax.default, aten.softmax.int)(_softmax_like("softmax"))
_reg(aten._log_softmax.default, aten.log_softmax.int)(_softmax_like("log_softmax"))


# ---- pooling ------------------------------------------------------------------------------------
@_reg(aten.max_pool2d_with_indices.default)
def _max_pool_idx(ctx: Context, x: Any, kernel: Any, stride: Any = (), padding: Any = 0,
                  dilation: Any = 1, ceil_mode: bool = False) -> tuple:
    _only_first_output(ctx, "max_pool2d")
    return (_max_pool(ctx, x, kernel, stride, padding, dilation, ceil_mode, 0), None)


@_reg(aten.max_pool2d.default)
def _max_pool2d(ctx: Context, x: Any, kernel: Any, stride: Any = (), padding: Any = 0,
                dilation: Any = 1, ceil_mode: bool = False) -> Value:
    return _max_pool(ctx, x, kernel, stride, padding, dilation, ceil_mode, None)


def _pool_attrs(kernel: Any, stride: Any, padding: Any) -> dict:
    k = tuple(int(v) for v in _pair(kernel))
    s = tuple(int(v) for v in _pair(stride)) if stride not in ((), [], None) else k
    p = tuple(int(v) for v in _pair(padding))
    return {"kernel": k, "stride": s, "padding": (p[0], p[1], p[0], p[1])}


def _max_pool(ctx: Context, x: Any, kernel: Any, stride: Any, padding: Any, dilation: Any,
              ceil_mode: bool, out: Optional[int]) -> Value:
    xv = _operand(ctx, x)
    if xv.ndim != 4:
        raise Unsupported("max_pool2d on a 3-d input")
    attrs = _pool_attrs(kernel, stride, padding)
    attrs.update(dilation=tuple(int(v) for v in _pair(dilation)), ceil_mode=bool(ceil_mode))
    return ctx.emit("max_pool2d", [xv], attrs, shape=ctx.out_shape(out), dtype=F32)


@_reg(aten.avg_pool2d.default)
def _avg_pool2d(ctx: Context, x: Any, kernel: Any, stride: Any = (), padding: Any = 0,
                ceil_mode: bool = False, count_include_pad: bool = True,
                divisor_override: Any = None) -> Value:
    _out_f32(ctx)
    xv = _operand(ctx, x)
    if divisor_override is not None or xv.ndim != 4:
        raise Unsupported("avg_pool2d with divisor_override or a 3-d input")
    attrs = _pool_attrs(kernel, stride, padding)
    attrs.update(ceil_mode=bool(ceil_mode), count_include_pad=bool(count_include_pad))
    return ctx.emit("avg_pool2d", [xv], attrs)


@_reg(aten._adaptive_avg_pool2d.default, aten.adaptive_avg_pool2d.default)
def _adaptive(ctx: Context, x: Any, output_size: Any) -> Value:
    _out_f32(ctx)
    xv = _operand(ctx, x)
    if xv.ndim != 4:
        raise Unsupported("adaptive_avg_pool2d on a 3-d input")
    _static(list(output_size), "output_size")
    return ctx.emit("adaptive_avg_pool2d", [xv],
                    {"output_size": tuple(int(v) for v in _pair(output_size))})


# ---- reductions ---------------------------------------------------------------------------------
def _reduction(op: str) -> Callable:
    def conv(ctx: Context, x: Any, dims: Any = None, keepdim: bool = False, dtype: Any = None
             ) -> Value:
        _out_f32(ctx)
        if dtype is not None and dtype != torch.float32:
            raise Unsupported(f"{op} to {dtype}")
        xv = _operand(ctx, x)
        if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
            axes = tuple(range(xv.ndim))
        else:
            dims = [dims] if isinstance(dims, int) else dims
            axes = tuple(sorted({_norm_dim(int(d), xv.ndim) for d in dims}))
        return ctx.emit(op, [xv], {"axes": axes, "keepdims": bool(keepdim)})
    return conv


_reg(aten.mean.dim)(_reduction("mean"))
_reg(aten.sum.dim_IntList)(_reduction("sum"))
_reg(aten.amax.default)(_reduction("amax"))
_reg(aten.amin.default)(_reduction("amin"))


@_reg(aten.sum.default, aten.mean.default)
def _reduce_all(ctx: Context, x: Any, dtype: Any = None) -> Value:
    op = "sum" if ctx.node.target is aten.sum.default else "mean"
    return _reduction(op)(ctx, x, None, False, dtype)


@_reg(aten.cumsum.default)
def _cumsum(ctx: Context, x: Any, dim: int, dtype: Any = None) -> Value:
    _out_f32(ctx)
    xv = _operand(ctx, x)
    return ctx.emit("cumsum", [xv], {"axis": _norm_dim(int(dim), xv.ndim)})


# layout, attention and constant-creation converters register themselves from there
from . import aten_layout  # noqa: E402,F401
