"""The packed B panel of the CPU matmul default (``llvm_matmul._schedule_panel``): a
transposed panel (``dense``, ``b[j, k]``) is copied a block of k at a time, each row of ``b``
read along k (a k-outermost copy gathered from rows a whole row apart, and where a row is a
multiple of 4 KiB every load missed L1); results against NumPy at sizes that do and do not
divide the block and the register tile, and with a symbolic K."""
from __future__ import annotations

import numpy as np
import pytest

import tdsl as td
from tdsl import ops
from tdsl.schedule.stage import IterVar
from tdsl.ops.schedules.llvm_matmul import TRANSPOSED_PANEL_K_BLOCK

from .helpers import check, conv2d_nchw, randn


def _panel_loops(s, name: str) -> list[tuple[int, bool]]:
    """(split factor or -1, vectorized) of the panel stage's loops, outermost first."""
    st = s.stage_by_name(name)
    factors = {id(r.inner): int(getattr(r.factor, "value", r.factor))
               for r in st.relations if getattr(r, "factor", None) is not None}
    out = []
    for iv in st.leaf_iter_vars:
        attr = st.iter_var_attrs.get(iv)
        out.append((factors.get(id(iv), -1),
                    attr is not None and attr.iter_type == IterVar.Vectorized))
    return out


def test_a_transposed_panel_is_copied_a_block_of_k_at_a_time():
    x = td.placeholder((128, 1024), name="x")
    w = td.placeholder((768, 1024), name="w")
    s = ops.schedule(ops.dense(x, w), "llvm")
    loops = _panel_loops(s, "w_pack")
    # innermost: k within a block, read along a row of w (no gather along j)
    assert loops[-1] == (TRANSPOSED_PANEL_K_BLOCK, False), loops
    assert not any(vec for _, vec in loops), loops


def test_a_panel_read_in_place_stays_vectorized_along_its_columns():
    x = td.placeholder((128, 1024), name="x")
    w = td.placeholder((1024, 768), name="w")
    s = ops.schedule(ops.matmul(x, w), "llvm")
    assert _panel_loops(s, "w_pack")[-1][1], _panel_loops(s, "w_pack")


def test_a_short_transposed_panel_keeps_the_vectorized_copy():
    """Below 4 blocks of k the old copy stays (64 x 100 x 1000 ran 4% slower blocked)."""
    x = td.placeholder((64, 100), name="x")
    w = td.placeholder((1000, 100), name="w")
    s = ops.schedule(ops.dense(x, w), "llvm")
    assert _panel_loops(s, "w_pack")[-1][1]


@pytest.mark.parametrize("M,K,N", [(128, 1024, 96), (37, 1000, 70), (50, 1030, 33),
                                   (19, 257, 17)])
def test_dense_with_a_blocked_panel_matches_numpy(M, K, N):
    x = td.placeholder((M, K), name="x")
    w = td.placeholder((N, K), name="w")
    b = td.placeholder((N,), name="b")
    out = ops.relu(ops.dense(x, w, b))
    f = td.build(ops.schedule(out, "llvm"), [x, w, b, out])
    xa, wa, ba = randn(M, K), randn(N, K), randn(N)
    check(f, [xa, wa, ba], np.maximum(xa @ wa.T + ba, 0),
          rtol=1e-4, atol=1e-4 * K ** 0.5)


def test_hand_written_and_batched_dense_with_a_blocked_panel_match_numpy():
    A = td.placeholder((40, 1000), name="A")
    B = td.placeholder((70, 1000), name="B")
    k = td.reduce_axis((0, 1000), name="k")
    C = td.compute((40, 70), lambda i, j: td.sum(A[i, k] * B[j, k], axis=k), name="C")
    s = ops.schedule([C])
    assert _panel_loops(s, "B.global")[-1] == (TRANSPOSED_PANEL_K_BLOCK, False)
    a, bb = randn(40, 1000), randn(70, 1000)
    check(td.build(s, [A, B, C], target="llvm"), [a, bb], a @ bb.T, rtol=1e-4, atol=3e-3)
    A3 = td.placeholder((3, 30, 300), name="A3")
    B3 = td.placeholder((3, 41, 300), name="B3")
    C3 = ops.batch_matmul(A3, B3, transpose_b=True)
    s3 = ops.schedule(C3, "llvm")
    a3, b3 = randn(3, 30, 300), randn(3, 41, 300)
    check(td.build(s3, [A3, B3, C3]), [a3, b3], a3 @ b3.transpose(0, 2, 1),
          rtol=1e-4, atol=2e-3)


def test_dense_with_a_symbolic_k_matches_numpy():
    kk = td.var("kk")
    x = td.placeholder((45, kk), name="x")
    w = td.placeholder((50, kk), name="w")
    out = ops.dense(x, w)
    s = ops.schedule(out, "llvm")
    f = td.build(s, [x, w, out])
    for K in (1, 63, 64, 300, 1000):
        xa, wa = randn(45, K), randn(50, K)
        check(f, [xa, wa], xa @ wa.T, rtol=1e-4, atol=1e-4 * max(1, K) ** 0.5)


def test_an_oihw_filter_panel_is_copied_along_the_filters_rows():
    d = td.placeholder((1, 512, 7, 7), name="d")
    w = td.placeholder((512, 512, 3, 3), name="w")
    s = ops.schedule(ops.conv2d(d, w, padding=1), "llvm")
    st = s.stage_by_name("w_pack")
    loops = _panel_loops(s, "w_pack")
    assert not any(vec for _, vec in loops), loops
    # innermost: a block of input channels, then the taps unrolled (a run of w's row)
    names = [iv.var.name for iv in st.leaf_iter_vars]
    assert names[-3:] == ["c.inner", "y", "x"], names
    attrs = st.iter_var_attrs
    assert all(iv in attrs and attrs[iv].iter_type == IterVar.Unrolled
               for iv in st.leaf_iter_vars[-2:])
    # no division or remainder in the copy's indices (the fused loop of (c, y, x) took
    # two of each per element: the copy cost more than the convolution)
    out = s.outputs[0].output(0)
    copies = [ln for ln in str(td.lower(s, [d, w, out])).splitlines()
              if "w_pack[" in ln and "= w[" in ln]
    assert copies and not any("//" in ln or "%" in ln for ln in copies), copies


@pytest.mark.parametrize("n,c,size,co,k,stride,groups", [
    (1, 20, 9, 24, 3, 1, 1), (2, 100, 8, 40, 1, 2, 1), (1, 64, 7, 70, 3, 1, 1),
    (1, 48, 10, 32, 3, 1, 2), (1, 6, 15, 20, 7, 2, 1), (1, 40, 9, 36, 5, 1, 1)])
def test_conv2d_with_a_blocked_filter_panel_matches_numpy(n, c, size, co, k, stride, groups):
    d = td.placeholder((n, c, size, size), name="d")
    w = td.placeholder((co, c // groups, k, k), name="w")
    out = ops.conv2d(d, w, stride=stride, padding=k // 2, groups=groups)
    f = td.build(ops.schedule(out, "llvm"), [d, w, out])
    da, wa = randn(n, c, size, size), randn(co, c // groups, k, k)
    p = k // 2
    want = conv2d_nchw(da, wa, stride=(stride, stride), padding=(p, p, p, p), groups=groups)
    check(f, [da, wa], want, rtol=1e-4, atol=1e-4 * (c * k * k) ** 0.5)
