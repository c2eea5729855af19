"""TVM's ``topi.nn.pool2d`` as TVM declares it: ``pad_temp`` (only where there is
padding) read by ``pool_max`` (tag ``"pool_max"``, reduce axes ``rv0, rv1``), or by
``pool_sum`` then ``pool_avg`` (the division by the window's element count)."""
from __future__ import annotations

from typing import Any

import tdsl
from tdsl.errors import ShapeError
from tdsl.intrin import maximum, minimum

from .._args import pad4, pair
from ..utils import get_const_tuple
from .conv2d import _out_dim, pad


def _hw_axes(layout: str) -> tuple[int, int]:
    if len(layout) != 4 or sorted(layout) != sorted("NCHW"):
        raise ShapeError(f"topi.nn.pool2d: layout must order N, C, H, W (NCHW, NHWC...), got "
                         f"{layout!r}")
    return layout.index("H"), layout.index("W")


def pool2d(data: Any, kernel: Any, stride: Any, dilation: Any, padding: Any, pool_type: str,
           ceil_mode: bool = False, layout: str = "NCHW", count_include_pad: bool = True) -> Any:
    """Max or average pooling over H and W of ``layout``; ``padding`` is (top, left, bottom,
    right); ``ceil_mode`` pads the end by ``stride - 1`` more (TVM's rule)."""
    if pool_type not in ("max", "avg"):
        raise ShapeError(f"topi.nn.pool2d: pool_type must be 'max' or 'avg', got {pool_type!r}")
    if len(data.shape) != 4:
        raise ShapeError(f"topi.nn.pool2d: data must be 4-d, got {len(data.shape)}-d")
    ha, wa = _hw_axes(layout)
    k = pair(tuple(kernel) if isinstance(kernel, list) else kernel, "kernel", "topi.nn.pool2d")
    s = pair(tuple(stride) if isinstance(stride, list) else stride, "stride", "topi.nn.pool2d")
    d = pair(tuple(dilation) if isinstance(dilation, list) else dilation, "dilation",
             "topi.nn.pool2d")
    if min(*k, *s, *d) < 1:
        raise ShapeError("topi.nn.pool2d: kernel, stride and dilation must be >= 1")
    pt, pl, pb, pr = pad4(list(padding) if isinstance(padding, tuple) else padding,
                          k[0], k[1], "topi.nn.pool2d")
    head = (pt, pl)
    offset = (s[0] - 1, s[1] - 1) if ceil_mode else (0, 0)
    tail = (pb + offset[0], pr + offset[1])
    shape = list(get_const_tuple(data.shape))
    sizes = (shape[ha], shape[wa])
    out_shape = list(shape)
    for i, ax in enumerate((ha, wa)):
        out_shape[ax] = _out_dim("pool2d", sizes[i], k[i], d[i], head[i], tail[i], s[i])
    before, after = [0] * 4, [0] * 4
    before[ha], before[wa] = head
    after[ha], after[wa] = tail
    do_pad = any(before) or any(after)
    rv = [tdsl.reduce_axis((0, k[0]), name="rv0"), tdsl.reduce_axis((0, k[1]), name="rv1")]
    dtype = str(data.dtype)
    fill = tdsl.min_value(dtype) if pool_type == "max" else 0
    temp = pad(data, before, after, fill, name="pad_temp") if do_pad else data

    def window(idx: tuple) -> list:
        out = list(idx)
        for i, ax in enumerate((ha, wa)):
            out[ax] = idx[ax] * s[i] + rv[i] * d[i]
        return out

    if pool_type == "max":
        return tdsl.compute(out_shape, lambda *i: tdsl.max(temp(*window(i)), axis=rv),
                            name="pool_max", tag="pool_max")
    total = tdsl.compute(out_shape, lambda *i: tdsl.sum(temp(*window(i)), axis=rv),
                         name="pool_sum", tag="pool_sum")

    def count(idx: tuple) -> Any:
        num = None
        for i, ax in enumerate((ha, wa)):
            start = idx[ax] * s[i] - head[i]
            end = start + (k[i] - 1) * d[i]
            if count_include_pad:
                end = minimum(end, sizes[i] + tail[i] - 1 - offset[i])
            else:
                jumps = maximum((d[i] - 1 - start) // d[i], 0)
                start = start + d[i] * jumps
                end = minimum(end, sizes[i] - 1)
            n = (end - start) // d[i] + 1
            num = n if num is None else num * n
        return num if count_include_pad else maximum(num, 1)

    return tdsl.compute(out_shape, lambda *i: total(*i) / count(i).astype(dtype),
                        name="pool_avg", tag="elemwise")


__all__ = ["pool2d"]
