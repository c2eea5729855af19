"""NumPy references that tests and the TVM compatibility layer compare kernels against."""
from __future__ import annotations

from typing import Sequence

import numpy as np


def conv2d_nchw(x: np.ndarray, w: np.ndarray, stride: Sequence[int] = (1, 1),
                padding: Sequence[int] = (0, 0, 0, 0), dilation: Sequence[int] = (1, 1),
                groups: int = 1) -> np.ndarray:
    """Convolution of ``x`` (N, C, H, W) with ``w`` (O, C // groups, KH, KW), PyTorch's
    semantics; ``padding`` is (top, left, bottom, right).  Accumulates in float64 and
    returns ``x``'s dtype."""
    sh, sw = stride
    dh, dw = dilation
    pt, pl, pb, pr = padding
    n, _, h, wd = x.shape
    co, cig, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, co, oh, ow))
    opg = co // groups
    for g in range(groups):
        xs = xp[:, g * cig:(g + 1) * cig]
        ws = w[g * opg:(g + 1) * opg].astype(np.float64)
        for y in range(kh):
            for x_ in range(kw):
                patch = xs[:, :, y * dh: y * dh + sh * (oh - 1) + 1: sh,
                           x_ * dw: x_ * dw + sw * (ow - 1) + 1: sw]
                out[:, g * opg:(g + 1) * opg] += np.einsum("nchw,oc->nohw", patch,
                                                           ws[:, :, y, x_])
    return out.astype(x.dtype)
