"""Neural-network operators: matmul, batch_matmul, dense, conv2d, pooling, softmax,
log_softmax, layernorm, rmsnorm, batch_norm (inference) and conv + batch-norm folding."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

import tdsl.intrin as _i
from tdsl.dtype import INDEX, as_dtype
from tdsl.errors import DTypeError, ShapeError
from tdsl.expr import Const, Expr, Select, convert
from tdsl.reduction import max as _rmax
from tdsl.reduction import min_value
from tdsl.reduction import sum as _rsum
from tdsl.tensor import Tensor, compute, reduce_axis

from ._util import (as_pair, broadcast_shape, check_same_size, check_tensor, const_value,
                    norm_axes, norm_axis, padding4, prod, simplify, size_str)
from .elemwise import apply_activation
from .tags import OpKind
from .transform import pad as _pad

__all__ = ["matmul", "batch_matmul", "dense", "conv2d", "pool2d", "max_pool2d", "avg_pool2d",
           "softmax", "log_softmax", "layernorm", "layer_norm", "rmsnorm", "rms_norm",
           "batch_norm", "fold_batch_norm"]


def _mul_acc(a: Expr, b: Expr, out_dtype: Any) -> Expr:
    if out_dtype is not None:
        dt = as_dtype(out_dtype)
        return a.astype(dt) * b.astype(dt)
    return a * b


def _check_float_or_same(op: str, a: Tensor, b: Tensor, out_dtype: Any) -> None:
    if a.dtype != b.dtype and out_dtype is None:
        raise DTypeError(f"ops.{op}: operand dtypes {a.dtype} and {b.dtype} differ; pass out_dtype= "
                         f"or cast one (ops.cast)")


# ---- matmul family ------------------------------------------------------------------------
def matmul(a: Tensor, b: Tensor, transpose_a: bool = False, transpose_b: bool = False,
           out_dtype: Any = None, name: str = "T_matmul") -> Tensor:
    """``a @ b`` for 2-D tensors (``a`` is (M, K), or (K, M) with ``transpose_a``; ``b`` is
    (K, N), or (N, K) with ``transpose_b``).  ``out_dtype`` accumulates in another dtype
    (e.g. int8 inputs, int32 sums).

    The declaration reads ``b`` through a PACK stage ``b_pack[k, j]`` (a re-layout with
    columns innermost); the default CPU schedule turns its per-column-tile region into the
    packed panel of the micro-kernel, other schedules inline it.
    """
    check_tensor("matmul", a, "a")
    check_tensor("matmul", b, "b")
    if a.ndim != 2 or b.ndim != 2:
        raise ShapeError(f"ops.matmul: needs 2-D tensors, got {a.ndim}-d and {b.ndim}-d "
                         f"(use ops.batch_matmul for 3-D)")
    _check_float_or_same("matmul", a, b, out_dtype)
    M, K = (a.shape[1], a.shape[0]) if transpose_a else (a.shape[0], a.shape[1])
    N, K2 = (b.shape[0], b.shape[1]) if transpose_b else (b.shape[1], b.shape[0])
    check_same_size("matmul", "the reduction dimension of a and b", K, K2)
    bp = compute((K, N), (lambda k, j: b[j, k]) if transpose_b else (lambda k, j: b[k, j]),
                 name=f"{b.name}_pack", tag=OpKind.PACK)
    k = reduce_axis((0, K), name="k")

    def body(i: Expr, j: Expr) -> Expr:
        av = a[k, i] if transpose_a else a[i, k]
        return _rsum(_mul_acc(av, bp[k, j], out_dtype), axis=k)
    return compute((M, N), body, name=name, tag=OpKind.MATMUL,
                   attrs={"transpose_a": bool(transpose_a), "transpose_b": bool(transpose_b)})


def batch_matmul(a: Tensor, b: Tensor, transpose_a: bool = False, transpose_b: bool = False,
                 out_dtype: Any = None) -> Tensor:
    """Batched ``a @ b``: (B, M, K) x (B, K, N) -> (B, M, N) (``torch.bmm``; transposes as in
    ``matmul``; a batch size of 1 broadcasts)."""
    check_tensor("batch_matmul", a, "a")
    check_tensor("batch_matmul", b, "b")
    if a.ndim != 3 or b.ndim != 3:
        raise ShapeError(f"ops.batch_matmul: needs 3-D tensors, got {a.ndim}-d and {b.ndim}-d")
    _check_float_or_same("batch_matmul", a, b, out_dtype)
    (batch,) = broadcast_shape("batch_matmul", a.shape[:1], b.shape[:1])
    M, K = (a.shape[2], a.shape[1]) if transpose_a else (a.shape[1], a.shape[2])
    N, K2 = (b.shape[1], b.shape[2]) if transpose_b else (b.shape[2], b.shape[1])
    check_same_size("batch_matmul", "the reduction dimension of a and b", K, K2)
    ab = const_value(a.shape[0]) == 1 and const_value(batch) != 1
    bb = const_value(b.shape[0]) == 1 and const_value(batch) != 1
    bp = compute((b.shape[0], K, N),
                 (lambda z, k, j: b[z, j, k]) if transpose_b else (lambda z, k, j: b[z, k, j]),
                 name=f"{b.name}_pack", tag=OpKind.PACK)
    k = reduce_axis((0, K), name="k")

    def body(z: Expr, i: Expr, j: Expr) -> Expr:
        za = Const(0, INDEX) if ab else z
        zb = Const(0, INDEX) if bb else z
        av = a[za, k, i] if transpose_a else a[za, i, k]
        return _rsum(_mul_acc(av, bp[zb, k, j], out_dtype), axis=k)
    return compute((batch, M, N), body, name="T_batch_matmul", tag=OpKind.BATCH_MATMUL,
                   attrs={"transpose_a": bool(transpose_a), "transpose_b": bool(transpose_b)})


def _add_bias(op: str, out: Tensor, bias: "Tensor | None", axis: int) -> Tensor:
    if bias is None:
        return out
    check_tensor(op, bias, "bias")
    if bias.ndim != 1:
        raise ShapeError(f"ops.{op}: bias must be 1-D, got shape {list(bias.shape)}")
    check_same_size(op, "bias length vs output channels", bias.shape[0], out.shape[axis])
    if bias.dtype != out.dtype:
        raise DTypeError(f"ops.{op}: bias dtype {bias.dtype} differs from the output's {out.dtype}")
    return compute(out.shape, lambda *idx: out(*idx) + bias[idx[axis]], name=f"T_{op}_bias",
                   tag=OpKind.BROADCAST)


def dense(x: Tensor, weight: Tensor, bias: "Tensor | None" = None, activation: "str | None" = None,
          out_dtype: Any = None) -> Tensor:
    """``x @ weight.T (+ bias) (then activation)``, as ``torch.nn.functional.linear`` / TVM's
    ``topi.nn.dense``: ``x`` (M, K), ``weight`` (N, K), ``bias`` (N,); ``activation`` is None,
    ``"relu"``, ``"gelu"``, ``"gelu_tanh"``, ``"silu"``, ``"sigmoid"`` or ``"tanh"``.  Bias and
    activation are elementwise stages that the default schedules fuse into the matmul tiles."""
    out = matmul(x, weight, transpose_b=True, out_dtype=out_dtype, name="T_dense")
    out = _add_bias("dense", out, bias, 1)
    return apply_activation("dense", out, activation)


# ---- convolution ------------------------------------------------------------------------
_DATA_LAYOUTS = ("NCHW", "NHWC")
_KERNEL_LAYOUTS = ("OIHW", "HWIO")


def _out_size(op: str, size: Expr, before: int, after: int, k: Expr, stride: int, dil: int,
              ceil_mode: bool = False) -> Expr:
    eff = (k - 1) * dil + 1
    span = size + before + after - eff
    if ceil_mode:
        out = (span + stride - 1) // stride + 1
        # the last window must start inside the input or the left padding (PyTorch's rule)
        cv = const_value(simplify(out))
        if cv is not None and const_value(size) is not None and (cv - 1) * stride >= const_value(size) + before:
            out = out - 1
        elif cv is None:
            out = Select((out - 1) * stride >= size + before, out - 1, out)
    else:
        out = span // stride + 1
    out = simplify(out)
    c = const_value(out)
    if c is not None and c < 1:
        raise ShapeError(f"ops.{op}: the window (size {size_str(eff)}) is larger than the padded "
                         f"input ({size_str(simplify(size + before + after))}); no output")
    return out


def conv2d(data: Tensor, weight: Tensor, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
           groups: int = 1, layout: str = "NCHW", kernel_layout: "str | None" = None,
           bias: "Tensor | None" = None, activation: "str | None" = None,
           out_dtype: Any = None) -> Tensor:
    """2-D convolution (cross-correlation, as PyTorch and TVM compute it).

    ``layout`` is the data layout: ``"NCHW"`` (data (N, C, H, W)) or ``"NHWC"``.  The weight
    is ``"OIHW"`` (Cout, Cin/groups, KH, KW; PyTorch's) by default for NCHW and ``"HWIO"``
    (KH, KW, Cin/groups, Cout; TVM's) for NHWC; ``kernel_layout`` chooses either for either.
    ``padding``: int, (pad_h, pad_w) or (top, left, bottom, right).  ``groups`` splits the
    channels (``groups == C`` is depthwise; Cout may be a multiple of it).  ``bias`` (Cout,)
    and ``activation`` (see ``dense``) are fused into the convolution's tiles by default.
    """
    check_tensor("conv2d", data, "data")
    check_tensor("conv2d", weight, "weight")
    if layout not in _DATA_LAYOUTS:
        raise ShapeError(f"ops.conv2d: layout must be one of {_DATA_LAYOUTS}, got {layout!r}")
    kernel_layout = kernel_layout or ("OIHW" if layout == "NCHW" else "HWIO")
    if kernel_layout not in _KERNEL_LAYOUTS:
        raise ShapeError(f"ops.conv2d: kernel_layout must be one of {_KERNEL_LAYOUTS}, got "
                         f"{kernel_layout!r}")
    if data.ndim != 4 or weight.ndim != 4:
        raise ShapeError(f"ops.conv2d: data and weight must be 4-D, got {data.ndim}-d and "
                         f"{weight.ndim}-d")
    _check_float_or_same("conv2d", data, weight, out_dtype)
    sh, sw = as_pair("conv2d", "stride", stride)
    dh, dw = as_pair("conv2d", "dilation", dilation)
    if min(sh, sw, dh, dw) < 1:
        raise ShapeError(f"ops.conv2d: stride and dilation must be >= 1, got {stride!r}, {dilation!r}")
    pt, pl, pb, pr = padding4("conv2d", padding)
    if not isinstance(groups, int) or groups < 1:
        raise ShapeError(f"ops.conv2d: groups must be a positive int, got {groups!r}")
    if layout == "NCHW":
        N, C, H, W = data.shape
    else:
        N, H, W, C = data.shape
    if kernel_layout == "OIHW":
        CO, CIg, KH, KW = weight.shape
    else:
        KH, KW, CIg, CO = weight.shape
    cc, coc = const_value(C), const_value(CO)
    if cc is not None and cc % groups:
        raise ShapeError(f"ops.conv2d: {cc} input channels are not divisible by groups={groups}")
    if coc is not None and coc % groups:
        raise ShapeError(f"ops.conv2d: {coc} output channels are not divisible by groups={groups}")
    check_same_size("conv2d", f"weight input channels vs data channels / groups ({groups})", CIg,
                    simplify(C // groups) if groups > 1 else C)
    OH = _out_size("conv2d", H, pt, pb, KH, sh, dh)
    OW = _out_size("conv2d", W, pl, pr, KW, sw, dw)
    if pt or pl or pb or pr:
        pads = ([0, 0, pt, pl], [0, 0, pb, pr]) if layout == "NCHW" else ([0, pt, pl, 0], [0, pb, pr, 0])
        src = _pad(data, pads[0], pads[1], 0, name=f"{data.name}_pad")
    else:
        src = data
    if kernel_layout == "OIHW":
        # co innermost: the CPU schedule's per-channel-tile region is a packed filter panel
        wp = compute((CIg, KH, KW, CO), lambda c, y, x, o: weight[o, c, y, x],
                     name=f"{weight.name}_pack", tag=OpKind.PACK)
    else:
        wp = compute((CIg, KH, KW, CO), lambda c, y, x, o: weight[y, x, c, o],
                     name=f"{weight.name}_pack", tag=OpKind.PACK)
    rc = reduce_axis((0, CIg), name="rc")
    ry = reduce_axis((0, KH), name="ry")
    rx = reduce_axis((0, KW), name="rx")
    opg = simplify(CO // groups) if groups > 1 else None

    def chan(co: Expr) -> Expr:
        return rc.var if groups == 1 else (co // opg) * CIg + rc.var

    attrs = {"layout": layout, "kernel_layout": kernel_layout, "stride": (sh, sw),
             "padding": (pt, pl, pb, pr), "dilation": (dh, dw), "groups": groups}

    def nhwc_body(n: Expr, y: Expr, x: Expr, co: Expr) -> Expr:
        v = (src[n, chan(co), y * sh + ry * dh, x * sw + rx * dw] if layout == "NCHW"
             else src[n, y * sh + ry * dh, x * sw + rx * dw, chan(co)])
        return _rsum(_mul_acc(v, wp[rc, ry, rx, co], out_dtype), axis=[rc, ry, rx])

    if layout == "NHWC":
        out = compute((N, OH, OW, CO), nhwc_body, name="T_conv2d", tag=OpKind.CONV2D, attrs=attrs)
        caxis = 3
    elif groups == 1:
        # Computed with output channels innermost (the CPU micro-kernel vectorizes them and
        # keeps the tile's layout) and transposed to NCHW on write-out, which the default
        # schedules fuse with the tile (and with bias / activation / batch-norm).
        inner = compute((N, OH, OW, CO), nhwc_body, name="T_conv2d_nhwc", tag=OpKind.CONV2D,
                        attrs={**attrs, "compute_layout": "NHWC"})
        out = compute((N, CO, OH, OW), lambda n, co, y, x: inner[n, y, x, co], name="T_conv2d",
                      tag=OpKind.INJECTIVE)
        caxis = 1
    else:
        def nchw_body(n: Expr, co: Expr, y: Expr, x: Expr) -> Expr:
            v = src[n, chan(co), y * sh + ry * dh, x * sw + rx * dw]
            return _rsum(_mul_acc(v, wp[rc, ry, rx, co], out_dtype), axis=[rc, ry, rx])
        out = compute((N, CO, OH, OW), nchw_body, name="T_conv2d", tag=OpKind.CONV2D, attrs=attrs)
        caxis = 1
    out = _add_bias("conv2d", out, bias, caxis)
    return apply_activation("conv2d", out, activation)


# ---- pooling ------------------------------------------------------------------------------
def pool2d(data: Tensor, kernel: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
           pool_type: str = "max", layout: str = "NCHW", ceil_mode: bool = False,
           count_include_pad: bool = True) -> Tensor:
    """Max or average pooling over H and W (PyTorch semantics: padding never wins a max;
    ``count_include_pad`` and ``ceil_mode`` as in ``torch.nn.functional.avg_pool2d``)."""
    check_tensor("pool2d", data, "data")
    if layout not in _DATA_LAYOUTS:
        raise ShapeError(f"ops.pool2d: layout must be one of {_DATA_LAYOUTS}, got {layout!r}")
    if pool_type not in ("max", "avg"):
        raise ShapeError(f"ops.pool2d: pool_type must be 'max' or 'avg', got {pool_type!r}")
    if data.ndim != 4:
        raise ShapeError(f"ops.pool2d: data must be 4-D, got {data.ndim}-d")
    kh, kw = as_pair("pool2d", "kernel", kernel)
    sh, sw = as_pair("pool2d", "stride", kernel if stride is None else stride)
    dh, dw = as_pair("pool2d", "dilation", dilation)
    pt, pl, pb, pr = padding4("pool2d", padding)
    if min(kh, kw, sh, sw, dh, dw) < 1:
        raise ShapeError("ops.pool2d: kernel, stride and dilation must be >= 1")
    if pool_type == "avg" and (dh, dw) != (1, 1):
        raise ShapeError("ops.pool2d: average pooling has no dilation")
    if layout == "NCHW":
        N, C, H, W = data.shape
    else:
        N, H, W, C = data.shape
    OH = _out_size("pool2d", H, pt, pb, Const(kh, INDEX), sh, dh, ceil_mode)
    OW = _out_size("pool2d", W, pl, pr, Const(kw, INDEX), sw, dw, ceil_mode)
    ry = reduce_axis((0, kh), name="ry")
    rx = reduce_axis((0, kw), name="rx")
    dt = data.dtype

    def load(n: Expr, c: Expr, y: Expr, x: Expr) -> Expr:
        iy = y * sh + ry * dh - pt
        ix = x * sw + rx * dw - pl
        v = data[n, c, iy, ix] if layout == "NCHW" else data[n, iy, ix, c]
        conds = []
        if pt or ceil_mode:
            conds.append(iy >= 0)
        conds.append(iy < H)
        if pl or ceil_mode:
            conds.append(ix >= 0)
        conds.append(ix < W)
        fill = min_value(dt) if pool_type == "max" else Const(0, dt)
        return Select(_i.all(*conds), v, fill)

    red = _rmax if pool_type == "max" else _rsum
    if layout == "NCHW":
        shape = (N, C, OH, OW)
        pooled = compute(shape, lambda n, c, y, x: red(load(n, c, y, x), axis=[ry, rx]),
                         name=f"T_{pool_type}_pool2d", tag=OpKind.POOL2D)
    else:
        shape = (N, OH, OW, C)
        pooled = compute(shape, lambda n, y, x, c: red(load(n, c, y, x), axis=[ry, rx]),
                         name=f"T_{pool_type}_pool2d", tag=OpKind.POOL2D)
    if pool_type == "max":
        return pooled
    if not dt.is_float:
        raise DTypeError(f"ops.avg_pool2d: needs a float tensor, got {dt}")

    def count(y: Expr, x: Expr) -> Expr:
        def span(o: Expr, s: int, k: int, before: int, after: int, size: Expr) -> Expr:
            start = o * s - before
            end = _i.minimum(start + k, size + after)
            if count_include_pad:
                return end - start
            return _i.minimum(end, size) - _i.maximum(start, Const(0, INDEX))
        return (span(y, sh, kh, pt, pb, H) * span(x, sw, kw, pl, pr, W)).astype(dt)

    if layout == "NCHW":
        return compute(shape, lambda n, c, y, x: pooled[n, c, y, x] / count(y, x),
                       name="T_avg_pool2d_div", tag=OpKind.ELEMWISE)
    return compute(shape, lambda n, y, x, c: pooled[n, y, x, c] / count(y, x),
                   name="T_avg_pool2d_div", tag=OpKind.ELEMWISE)


def max_pool2d(data: Tensor, kernel: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               layout: str = "NCHW", ceil_mode: bool = False) -> Tensor:
    """``torch.nn.functional.max_pool2d`` (stride defaults to the kernel size)."""
    return pool2d(data, kernel, stride, padding, dilation, "max", layout, ceil_mode)


def avg_pool2d(data: Tensor, kernel: Any, stride: Any = None, padding: Any = 0,
               layout: str = "NCHW", ceil_mode: bool = False, count_include_pad: bool = True) -> Tensor:
    """``torch.nn.functional.avg_pool2d`` (stride defaults to the kernel size)."""
    return pool2d(data, kernel, stride, padding, 1, "avg", layout, ceil_mode, count_include_pad)


# ---- normalizations -------------------------------------------------------------------------
def _row_reduce(x: Tensor, axes: Sequence[int], reducer: Any, fn: Any, name: str) -> Tensor:
    """``reducer(fn(x[idx], idx))`` over ``axes``; the result has the kept dimensions."""
    kept = [d for d in range(x.ndim) if d not in axes]
    ks = {d: reduce_axis((0, x.shape[d]), name=f"k{d}") for d in axes}
    shape = [x.shape[d] for d in kept] or [Const(1, INDEX)]

    def body(*idx: Expr) -> Expr:
        full: list[Any] = [None] * x.ndim
        for o, d in enumerate(kept):
            full[d] = idx[o]
        for d, k in ks.items():
            full[d] = k.var
        return reducer(fn(full), axis=[ks[d] for d in axes])
    return compute(shape, body, name=name, tag=OpKind.ROW_REDUCE)


def _kept(full: Sequence[Expr], axes: Sequence[int]) -> list[Expr]:
    out = [e for d, e in enumerate(full) if d not in axes]
    return out or [Const(0, INDEX)]


def _float_tensor(op: str, x: Tensor) -> None:
    check_tensor(op, x)
    if not x.dtype.is_float:
        raise DTypeError(f"ops.{op}: needs a float tensor, got {x.dtype}")


def softmax(x: Tensor, axis: int = -1, masked_rows: bool = False) -> Tensor:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``.

    Stages: the row max, ``exp(x - max)`` kept per row, its sum, the scaling; the default
    CPU schedule runs them per row (one read of the row from memory, one write).
    ``masked_rows``: a row whose every element is -inf gives 0, not NaN (what PyTorch's
    attention gives a query whose every key is masked); -inf elements give an exact 0.
    """
    _float_tensor("softmax", x)
    ax = norm_axis("softmax", axis, x.ndim)
    m = _row_reduce(x, [ax], _rmax, lambda f: x(*f), "T_softmax_max")
    one, zero = convert(1.0, x.dtype), convert(0.0, x.dtype)

    def exp(*f: Any) -> Expr:
        v = _i.exp(x(*f) - m(*_kept(f, [ax])))
        return Select(x(*f) == convert(-np.inf, x.dtype), zero, v) if masked_rows else v
    e = compute(x.shape, exp, name="T_softmax_exp", tag=OpKind.ROW_TEMP)
    s = _row_reduce(e, [ax], _rsum, lambda f: e(*f), "T_softmax_sum")

    # times the reciprocal: one division per row (hoisted out of the row loop), not per element
    def scale(*f: Any) -> Expr:
        r = s(*_kept(f, [ax]))
        return e(*f) * (Select(r == zero, zero, one / r) if masked_rows else one / r)
    return compute(x.shape, scale, name="T_softmax", tag=OpKind.ELEMWISE)


def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    """``x - max - log(sum(exp(x - max)))`` along ``axis``."""
    _float_tensor("log_softmax", x)
    ax = norm_axis("log_softmax", axis, x.ndim)
    m = _row_reduce(x, [ax], _rmax, lambda f: x(*f), "T_log_softmax_max")
    s = _row_reduce(x, [ax], _rsum, lambda f: _i.exp(x(*f) - m(*_kept(f, [ax]))),
                    "T_log_softmax_sum")
    return compute(x.shape, lambda *f: x(*f) - m(*_kept(f, [ax])) - _i.log(s(*_kept(f, [ax]))),
                   name="T_log_softmax", tag=OpKind.ELEMWISE)


def _norm_axes(op: str, x: Tensor, axis: Any) -> tuple[int, ...]:
    axes = norm_axes(op, axis, x.ndim)
    return axes


def _param(op: str, x: Tensor, p: "Tensor | None", axes: Sequence[int], what: str) -> None:
    if p is None:
        return
    check_tensor(op, p, what)
    if p.ndim != len(axes):
        raise ShapeError(f"ops.{op}: {what} must have the normalized dimensions' shape "
                         f"{[x.shape[d] for d in axes]}, got {list(p.shape)}")
    for d, s in zip(axes, p.shape):
        check_same_size(op, f"{what} dimension", s, x.shape[d])
    if p.dtype != x.dtype:
        raise DTypeError(f"ops.{op}: {what} dtype {p.dtype} differs from the input's {x.dtype}")


def layernorm(x: Tensor, gamma: "Tensor | None" = None, beta: "Tensor | None" = None,
              axis: Any = -1, eps: float = 1e-5) -> Tensor:
    """``(x - mean) / sqrt(var + eps) * gamma + beta`` over ``axis`` (an int or a tuple of
    axes; gamma/beta have those axes' shape, either may be None).  The variance is the
    biased one (PyTorch's), computed in two passes over the cached row for accuracy."""
    _float_tensor("layernorm", x)
    axes = _norm_axes("layernorm", x, axis)
    _param("layernorm", x, gamma, axes, "gamma")
    _param("layernorm", x, beta, axes, "beta")
    dt = x.dtype
    inv = convert(1.0, dt) / prod([x.shape[d] for d in axes]).astype(dt)
    s1 = _row_reduce(x, axes, _rsum, lambda f: x(*f), "T_layernorm_sum")

    def centered(f: Sequence[Expr]) -> Expr:
        return x(*f) - s1(*_kept(f, axes)) * inv
    s2 = _row_reduce(x, axes, _rsum, lambda f: centered(f) * centered(f), "T_layernorm_var")

    def body(*f: Expr) -> Expr:
        v = centered(f) * _i.rsqrt(s2(*_kept(f, axes)) * inv + convert(eps, dt))
        sub = [f[d] for d in axes]
        if gamma is not None:
            v = v * gamma(*sub)
        if beta is not None:
            v = v + beta(*sub)
        return v
    return compute(x.shape, body, name="T_layernorm", tag=OpKind.ELEMWISE)


def rmsnorm(x: Tensor, gamma: "Tensor | None" = None, axis: Any = -1, eps: float = 1e-5) -> Tensor:
    """``x / sqrt(mean(x^2) + eps) * gamma`` over ``axis`` (``torch.nn.functional.rms_norm``)."""
    _float_tensor("rmsnorm", x)
    axes = _norm_axes("rmsnorm", x, axis)
    _param("rmsnorm", x, gamma, axes, "gamma")
    dt = x.dtype
    inv = convert(1.0, dt) / prod([x.shape[d] for d in axes]).astype(dt)
    ss = _row_reduce(x, axes, _rsum, lambda f: x(*f) * x(*f), "T_rmsnorm_sumsq")

    def body(*f: Expr) -> Expr:
        v = x(*f) * _i.rsqrt(ss(*_kept(f, axes)) * inv + convert(eps, dt))
        if gamma is not None:
            v = v * gamma(*[f[d] for d in axes])
        return v
    return compute(x.shape, body, name="T_rmsnorm", tag=OpKind.ELEMWISE)


layer_norm = layernorm
rms_norm = rmsnorm


def batch_norm(x: Tensor, gamma: Tensor, beta: Tensor, mean: Tensor, var: Tensor, axis: int = 1,
               eps: float = 1e-5) -> Tensor:
    """Batch normalization at inference: ``(x - mean) / sqrt(var + eps) * gamma + beta`` with
    per-channel (``axis``) statistics; an elementwise stage (fused into a preceding conv2d's
    tiles by default; ``fold_batch_norm`` removes it altogether)."""
    _float_tensor("batch_norm", x)
    ax = norm_axis("batch_norm", axis, x.ndim)
    for p, nm in ((gamma, "gamma"), (beta, "beta"), (mean, "mean"), (var, "var")):
        _param("batch_norm", x, p, [ax], nm)
    dt = x.dtype
    return compute(x.shape, lambda *f: (x(*f) - mean[f[ax]]) * _i.rsqrt(var[f[ax]] + convert(eps, dt))
                   * gamma[f[ax]] + beta[f[ax]], name="T_batch_norm", tag=OpKind.BROADCAST)


def fold_batch_norm(weight: Any, bias: Any, gamma: Any, beta: Any, mean: Any, var: Any,
                    eps: float = 1e-5, kernel_layout: str = "OIHW") -> tuple[np.ndarray, np.ndarray]:
    """Fold an inference batch-norm that follows a convolution into its weights and bias.

    ``batch_norm(conv2d(x, W) + b) == conv2d(x, W') + b'`` with
    ``W' = W * s`` (per output channel), ``b' = (b - mean) * s + beta``,
    ``s = gamma / sqrt(var + eps)``.  Takes and returns NumPy arrays (``bias`` may be None);
    ``kernel_layout`` says where the output channel is ("OIHW": first, "HWIO": last).
    """
    w = np.asarray(weight)
    g, bt, mu, v = (np.asarray(a, dtype=np.float64) for a in (gamma, beta, mean, var))
    if kernel_layout not in _KERNEL_LAYOUTS:
        raise ShapeError(f"fold_batch_norm: kernel_layout must be one of {_KERNEL_LAYOUTS}")
    co = w.shape[0] if kernel_layout == "OIHW" else w.shape[-1]
    for a, nm in ((g, "gamma"), (bt, "beta"), (mu, "mean"), (v, "var")):
        if a.shape != (co,):
            raise ShapeError(f"fold_batch_norm: {nm} must have shape ({co},), got {a.shape}")
    scale = g / np.sqrt(v + eps)
    b = np.zeros(co) if bias is None else np.asarray(bias, dtype=np.float64)
    shape = (co, 1, 1, 1) if kernel_layout == "OIHW" else (1, 1, 1, co)
    w2 = (w.astype(np.float64) * scale.reshape(shape)).astype(w.dtype)
    b2 = ((b - mu) * scale + bt).astype(w.dtype)
    return w2, b2
