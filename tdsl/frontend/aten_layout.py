"""Converters (continued): layout ops, attention, and creation ops made constants.

Registered in ``tdsl.frontend.aten_ops.CONVERTERS`` (see there for the contract).
"""
from __future__ import annotations

import math
from typing import Any, Optional

import torch

from ..graph import Value
from .aten_ops import F32, _norm_dim, _only_first_output, _operand, _reg, _static, aten
from .errors import Unsupported
from .importer import Context, _constant_value
from .symbols import is_symbolic


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
        if str(mv.dtype) not in (str(F32), "bool"):   # bool: True attends (PyTorch's)
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
    return _constant_value(t, ctx.node.name)


for _t_op in (aten.full.default, aten.ones.default, aten.zeros.default, aten.arange.default,
              aten.arange.start, aten.arange.start_step, aten.scalar_tensor.default,
              aten.empty.memory_format):
    _reg(_t_op)(_creation)
