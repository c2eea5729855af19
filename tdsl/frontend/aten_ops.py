"""Converters: one core-ATen op -> graph ops (MODEL.md's vocabulary).

``CONVERTERS`` maps an ATen ``OpOverload`` to ``fn(ctx, *args, **kwargs)``, which emits graph
nodes through ``ctx.emit`` and returns the Value (or tuple of Values) standing for the op's
result, or raises ``Unsupported`` (the op then runs in PyTorch as a fallback node).
Float ops take float32 tensors only; indices may be int64/int32.
"""
from __future__ import annotations

import math
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
    if is_symbolic(x) if not isinstance(x, (list, tuple)) else any(is_symbolic(e) for e in x):
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


# ---- layout -------------------------------------------------------------------------------------
def _reshape_to_out(ctx: Context, x: Any, *rest: Any, **kw: Any) -> Value:
    xv = ctx.value(x)
    shape = ctx.out_shape()
    if tuple(shape) == tuple(xv.shape):
        return xv
    return ctx.emit("reshape", [xv], {"shape": shape})


_reg(aten.view.default, aten._unsafe_view.default, aten.reshape.default,
     aten.flatten.using_ints, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default,
     aten.unsqueeze.default)(_reshape_to_out)


@_reg(aten.permute.default)
def _permute(ctx: Context, x: Any, dims: Any) -> Value:
    xv = ctx.value(x)
    axes = tuple(_norm_dim(int(d), xv.ndim) for d in dims)
    if axes == tuple(range(xv.ndim)):
        return xv
    return ctx.emit("transpose", [xv], {"axes": axes})


@_reg(aten.transpose.int)
def _transpose(ctx: Context, x: Any, d0: int, d1: int) -> Value:
    xv = ctx.value(x)
    axes = list(range(xv.ndim))
    a, b = _norm_dim(d0, xv.ndim), _norm_dim(d1, xv.ndim)
    axes[a], axes[b] = axes[b], axes[a]
    return _permute(ctx, x, axes)


@_reg(aten.t.default, aten.numpy_T.default)
def _t(ctx: Context, x: Any) -> Value:
    xv = ctx.value(x)
    if xv.ndim < 2:
        return xv
    return _permute(ctx, x, list(range(xv.ndim))[::-1])


@_reg(aten.expand.default)
def _expand(ctx: Context, x: Any, size: Any, implicit: bool = False) -> Value:
    xv = ctx.value(x)
    shape = ctx.out_shape()
    if tuple(shape) == tuple(xv.shape):
        return xv
    return ctx.emit("expand", [xv], {"shape": shape})


@_reg(aten.cat.default)
def _cat(ctx: Context, xs: Any, dim: int = 0) -> Value:
    vals = [ctx.value(a) for a in xs]
    nd = len(ctx.out_shape())
    vals = [v for v in vals if not (v.ndim == 1 and v.shape[0] == 0 and nd != 1)]
    if len(vals) == 1:
        return vals[0]
    return ctx.emit("concat", vals, {"axis": _norm_dim(int(dim), nd)})


_BIG = 2 ** 62


def _slice_emit(ctx: Context, xv: Value, dim: int, start: Any, end: Any, step: int,
                shape: Optional[tuple] = None) -> Value:
    _static([start if start is not None else 0, end if end is not None else 0, step],
            "slice bounds")
    ax = _norm_dim(int(dim), xv.ndim)
    start = 0 if start is None else int(start)
    end = _BIG if end is None or int(end) >= _BIG else int(end)
    if start == 0 and end == _BIG and step == 1:
        return xv
    return ctx.emit("slice", [xv], {"axis": ax, "start": start, "end": end, "step": int(step)},
                    shape=shape, dtype=xv.dtype)


@_reg(aten.slice.Tensor)
def _slice(ctx: Context, x: Any, dim: int = 0, start: Any = None, end: Any = None,
           step: int = 1) -> Value:
    return _slice_emit(ctx, ctx.value(x), dim, start, end, step)


@_reg(aten.select.int)
def _select(ctx: Context, x: Any, dim: int, index: Any) -> Value:
    """select = a length-1 slice, then a reshape dropping that axis."""
    xv = ctx.value(x)
    ax = _norm_dim(int(dim), xv.ndim)
    _static(index, "select index")
    index = int(index)
    if index < 0:
        size = xv.shape[ax]
        if not isinstance(size, int):
            raise Unsupported("negative select index on a symbolic dimension")
        index += size
    mid = list(xv.shape)
    mid[ax] = 1
    s = _slice_emit(ctx, xv, ax, index, index + 1, 1, shape=tuple(mid))
    return ctx.emit("reshape", [s], {"shape": ctx.out_shape()}, dtype=xv.dtype)


@_reg(aten.split_with_sizes.default, aten.split.Tensor)
def _split(ctx: Context, x: Any, sizes: Any, dim: int = 0) -> tuple:
    xv = ctx.value(x)
    outs = ctx.meta()
    ax = _norm_dim(int(dim), xv.ndim)
    res, start = [], 0
    for k, o in enumerate(outs):
        n = o.shape[ax]
        _static(n, "split size")
        res.append(_slice_emit(ctx, xv, ax, start, start + int(n), 1,
                               shape=ctx.out_shape(k)))
        start += int(n)
    return tuple(res)


@_reg(aten.embedding.default)
def _embedding(ctx: Context, w: Any, idx: Any, padding_idx: int = -1,
               scale_grad_by_freq: bool = False, sparse: bool = False) -> Value:
    wv, iv = _operand(ctx, w), ctx.value(idx)
    if iv.dtype not in ("int64", "int32"):
        raise Unsupported(f"embedding indices of {iv.dtype}")
    return ctx.emit("embedding", [wv, iv])


# ---- attention ----------------------------------------------------------------------------------
def _attention(ctx: Context, q: Any, k: Any, v: Any, mask: Any, dropout_p: float,
               is_causal: bool, scale: Any, out: Optional[int]) -> Value:
    qv, kv, vv = _operand(ctx, q), _operand(ctx, k), _operand(ctx, v)
    if dropout_p:
        raise Unsupported("attention with dropout")
    if qv.ndim != 4 or kv.ndim != 4 or vv.ndim != 4:
        raise Unsupported("attention on other than 4-d (batch, heads, seq, d) tensors")
    if scale is None:
        d = qv.shape[-1]
        if not isinstance(d, int):
            raise Unsupported("attention with a symbolic head size")
        scale = 1.0 / math.sqrt(d)
    ins = [qv, kv, vv]
    if mask is not None:
        mv = ctx.value(mask)
        if mv.dtype != F32:
            raise Unsupported(f"attention mask of {mv.dtype}")
        ins.append(mv)
    return ctx.emit("attention", ins, {"causal": bool(is_causal), "scale": float(scale)},
                    shape=ctx.out_shape(out), dtype=F32)


@_reg(aten.scaled_dot_product_attention.default)
def _sdpa(ctx: Context, q: Any, k: Any, v: Any, attn_mask: Any = None, dropout_p: float = 0.0,
          is_causal: bool = False, scale: Any = None, enable_gqa: bool = False) -> Value:
    if enable_gqa:
        raise Unsupported("attention with enable_gqa")
    return _attention(ctx, q, k, v, attn_mask, dropout_p, is_causal, scale, None)


@_reg(aten._scaled_dot_product_flash_attention_for_cpu.default)
def _sdpa_cpu(ctx: Context, q: Any, k: Any, v: Any, dropout_p: float = 0.0,
              is_causal: bool = False, attn_mask: Any = None, scale: Any = None) -> tuple:
    _only_first_output(ctx, "attention")
    return (_attention(ctx, q, k, v, attn_mask, dropout_p, is_causal, scale, 0), None)


# ---- constants ----------------------------------------------------------------------------------
def _creation(ctx: Context, *args: Any, **kwargs: Any) -> Value:
    """full/ones/zeros/arange/scalar_tensor with static arguments: evaluated now, a constant."""
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.fx.Node) or is_symbolic(a) if not isinstance(a, (list, tuple)) \
                else any(isinstance(e, torch.fx.Node) or is_symbolic(e) for e in a):
            raise Unsupported("creation op with symbolic arguments")
    kwargs = {k: v for k, v in kwargs.items() if k != "pin_memory"}
    t = ctx.node.target(*args, **kwargs)
    if t.device.type != "cpu":
        raise Unsupported("creation op off the CPU")
    from .importer import _constant_value
    return _constant_value(t, ctx.node.name)


for _t_op in (aten.full.default, aten.ones.default, aten.zeros.default, aten.arange.default,
              aten.arange.start, aten.arange.start_step, aten.scalar_tensor.default,
              aten.empty.memory_format):
    _reg(_t_op)(_creation)
