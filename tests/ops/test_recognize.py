"""A matmul written by hand with ``td.compute`` gets ``ops.matmul``'s default schedule
(register tiles, B's panels packed by a cache stage), and stays correct; computations
that only look similar do not (tdsl/ops/schedules/recognize.py)."""
from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tdsl as td
from tdsl import ops
from tdsl.ops.schedules.recognize import gemm_form

from .helpers import check, randn


def _matmul(M, N, K, dtype="float32", transpose_b=False, batch=None):
    bshape = () if batch is None else (batch,)
    A = td.placeholder(bshape + (M, K), dtype, name="A")
    B = td.placeholder(bshape + ((N, K) if transpose_b else (K, N)), dtype, name="B")
    k = td.reduce_axis((0, K), name="k")
    if batch is None:
        C = td.compute((M, N), lambda i, j: td.sum(
            A[i, k] * (B[j, k] if transpose_b else B[k, j]), axis=k), name="C")
    else:
        C = td.compute((batch, M, N), lambda b, i, j: td.sum(A[b, i, k] * B[b, k, j], axis=k),
                       name="C")
    return A, B, C


def _stage_names(s):
    return [st.op.name for st in s.stages]


def test_hand_written_matmul_gets_the_packed_register_tiled_schedule():
    A, B, C = _matmul(96, 80, 64)
    form = gemm_form(C.op)
    assert form is not None and form.a is A and form.b is B
    s = ops.schedule([C])
    names = _stage_names(s)
    assert "B.global" in names and "C.local" in names, names
    text = str(td.lower(s, [A, B, C]))
    assert "B.global[" in text and "parallel(" in text and "vectorized(" in text


def test_operands_in_either_order():
    A = td.placeholder((32, 48), name="A")
    B = td.placeholder((48, 40), name="B")
    k = td.reduce_axis((0, 48), name="k")
    C = td.compute((32, 40), lambda i, j: td.sum(B[k, j] * A[i, k], axis=k), name="C")
    form = gemm_form(C.op)
    assert form is not None and form.a is A and form.b is B


@pytest.mark.parametrize("what", ["max", "tagged", "where", "same_tensor",
                                  "swapped_axes", "integer", "init", "transposed_a"])
def test_look_alikes_are_not_recognized(what):
    A = td.placeholder((32, 32), name="A")
    B = td.placeholder((32, 32), name="B")
    k = td.reduce_axis((0, 32), name="k")
    if what == "transposed_a":
        C = td.compute((32, 32), lambda i, j: td.sum(A[k, i] * B[k, j], axis=k))
    elif what == "max":
        C = td.compute((32, 32), lambda i, j: td.max(A[i, k] * B[k, j], axis=k))
    elif what == "tagged":
        C = ops.matmul(A, B)
    elif what == "where":
        C = td.compute((32, 32), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k, where=k > i))
    elif what == "same_tensor":
        C = td.compute((32, 32), lambda i, j: td.sum(A[i, k] * A[k, j], axis=k))
    elif what == "swapped_axes":
        C = td.compute((32, 32), lambda i, j: td.sum(A[j, k] * B[k, i], axis=k))
    elif what == "integer":
        Ai = td.placeholder((32, 32), "int32", name="Ai")
        Bi = td.placeholder((32, 32), "int32", name="Bi")
        C = td.compute((32, 32), lambda i, j: td.sum(Ai[i, k] * Bi[k, j], axis=k))
    else:
        C = td.compute((32, 32), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k, init=1.0))
    assert gemm_form(C.op) is None


def _check_numeric(A, B, C, shapes):
    s = ops.schedule([C])
    f = td.build(s, [A, B, C], target="llvm")
    a, b = randn(*shapes[0]), randn(*shapes[1])
    check(f, [a, b], np.matmul(a, b), rtol=1e-4, atol=1e-4 * shapes[0][-1])


@settings(max_examples=12, deadline=None)
@given(M=st.integers(1, 70), N=st.integers(1, 70), K=st.integers(1, 70))
def test_hand_written_matmul_matches_numpy(M, N, K):
    """Sizes that do and do not divide the register tile (6 x 16 / 6 x 32) and the K split."""
    A, B, C = _matmul(M, N, K)
    _check_numeric(A, B, C, [(M, K), (K, N)])


@pytest.mark.parametrize("M, N, K", [(512, 512, 512), (200, 130, 77), (7, 300, 33)])
def test_hand_written_matmul_matches_numpy_at_larger_sizes(M, N, K):
    A, B, C = _matmul(M, N, K)
    _check_numeric(A, B, C, [(M, K), (K, N)])


@pytest.mark.parametrize("M, N, K", [(6, 32, 16), (13, 50, 9)])
def test_hand_written_batch_matmul_matches_numpy(M, N, K):
    A, B, C = _matmul(M, N, K, batch=3)
    assert gemm_form(C.op) is not None
    _check_numeric(A, B, C, [(3, M, K), (3, K, N)])


def test_hand_written_matmul_float64():
    A, B, C = _matmul(37, 41, 29, dtype="float64")
    s = ops.schedule([C])
    f = td.build(s, [A, B, C], target="llvm")
    a, b = randn(37, 29, dtype="float64"), randn(29, 41, dtype="float64")
    check(f, [a, b], a @ b, rtol=1e-10, atol=1e-10)


def test_hand_written_matmul_with_symbolic_sizes():
    m, n, kk = td.var("m"), td.var("n"), td.var("kk")
    A = td.placeholder((m, kk), name="A")
    B = td.placeholder((kk, n), name="B")
    k = td.reduce_axis((0, kk), name="k")
    C = td.compute((m, n), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k), name="C")
    assert gemm_form(C.op) is not None
    f = td.build(ops.schedule([C]), [A, B, C], target="llvm")
    for M, N, K in [(1, 1, 1), (6, 16, 4), (50, 33, 70), (129, 7, 3)]:
        a, b = randn(M, K), randn(K, N)
        check(f, [a, b], a @ b, rtol=1e-4, atol=1e-4 * K)


def _count_skinny(monkeypatch) -> list:
    from tdsl.ops.schedules import llvm as cpu_schedules
    calls = []
    real = cpu_schedules.schedule_skinny_dense

    def counted(*a, **kw):
        calls.append(a[1].op)
        return real(*a, **kw)
    monkeypatch.setattr(cpu_schedules, "schedule_skinny_dense", counted)
    return calls


@pytest.mark.parametrize("M, N, K", [(1, 4096, 512), (1, 37, 70), (3, 50, 129), (8, 16, 64)])
def test_hand_written_dense_with_a_small_m_gets_the_streaming_schedule(M, N, K, monkeypatch):
    """``x @ W.T`` written by hand: ``ops.dense``'s streaming schedule (lanes along K by
    rfactor, W's rows read once), correct at sizes that do and do not divide its tiles."""
    A, B, C = _matmul(M, N, K, transpose_b=True)
    form = gemm_form(C.op)
    assert form is not None and form.transpose_b and form.a is A and form.b is B
    calls = _count_skinny(monkeypatch)
    s = ops.schedule([C])
    assert calls == [C.op]
    f = td.build(s, [A, B, C], target="llvm")
    a, b = randn(M, K), randn(N, K)
    check(f, [a, b], a @ b.T, rtol=1e-4, atol=1e-4 * K)


@pytest.mark.parametrize("M, N, K", [(64, 40, 24), (200, 130, 77), (97, 300, 513)])
def test_hand_written_dense_with_a_large_m_packs_w_transposed(M, N, K, monkeypatch):
    """A large-M ``x @ W.T`` written by hand gets ``ops.dense``'s register-tiled schedule:
    W's panels copied by a cache stage laid out ``[k, j]`` (``transform_layout``), so the
    micro-kernel loads whole vectors of one k row; sizes that do and do not divide the
    tiles."""
    A, B, C = _matmul(M, N, K, transpose_b=True)
    calls = _count_skinny(monkeypatch)
    s = ops.schedule([C])
    assert not calls and "B.global" in _stage_names(s) and "C.local" in _stage_names(s)
    pack = s.stage_by_name("B.global")
    assert [int(d.value) for d in pack.op.outputs[0].shape] == [K, N]
    text = str(td.lower(s, [A, B, C]))
    # the micro-kernel reads the panel along its columns: B.global[k, j]
    assert re.search(r"\* B\.global\[k[\w.]* \* \d+ \+ k[\w.]*, j\.c\.inner\]", text) or \
        re.search(r"\* B\.global\[k[\w.]*, j\.c\.inner\]", text), text
    f = td.build(s, [A, B, C], target="llvm")
    a, b = randn(M, K), randn(N, K)
    check(f, [a, b], a @ b.T, rtol=1e-4, atol=1e-4 * K)


def test_hand_written_dense_with_symbolic_sizes_and_a_batch():
    """The transposed panel with symbolic M, N, K bound to several values, and batched."""
    m, n, kk = td.var("m"), td.var("n"), td.var("kk")
    A = td.placeholder((m, kk), name="A")
    B = td.placeholder((n, kk), name="B")
    k = td.reduce_axis((0, kk), name="k")
    C = td.compute((m, n), lambda i, j: td.sum(A[i, k] * B[j, k], axis=k), name="C")
    f = td.build(ops.schedule([C]), [A, B, C], target="llvm")
    for M, N, K in [(1, 1, 1), (6, 16, 4), (50, 33, 70), (129, 7, 3), (300, 65, 40)]:
        a, b = randn(M, K), randn(N, K)
        check(f, [a, b], a @ b.T, rtol=1e-4, atol=1e-4 * K)
    A3 = td.placeholder((2, 70, 24), name="A3")
    B3 = td.placeholder((2, 50, 24), name="B3")
    k3 = td.reduce_axis((0, 24), name="k3")
    C3 = td.compute((2, 70, 50), lambda z, i, j: td.sum(A3[z, i, k3] * B3[z, j, k3], axis=k3),
                    name="C3")
    assert gemm_form(C3.op).transpose_b
    s3 = ops.schedule([C3])
    assert [int(d.value) for d in s3.stage_by_name("B3.global").op.outputs[0].shape] == \
        [2, 24, 50]
    f3 = td.build(s3, [A3, B3, C3], target="llvm")
    a3, b3 = randn(2, 70, 24), randn(2, 50, 24)
    check(f3, [a3, b3], a3 @ b3.transpose(0, 2, 1), rtol=1e-4, atol=1e-4 * 24)


@pytest.mark.parametrize("transpose_b", [True, False])
@pytest.mark.parametrize("M, N, K", [(128, 96, 80), (45, 70, 33)])
def test_hand_written_gemm_epilogue_runs_on_its_write_out(M, N, K, transpose_b):
    """Bias, GELU and a residual written by hand after the GEMM: the epilogue runs on the
    register tile's write-out as ``ops.dense``'s does (before, the GEMM was scheduled as
    a row reduction feeding it: 2.5x slower at BERT's sizes)."""
    A, B, C = _matmul(M, N, K, transpose_b=transpose_b)
    bias = td.placeholder((N,), name="bias")
    res = td.placeholder((M, N), name="res")
    out = td.compute((M, N), lambda i, j: 0.5 * (C[i, j] + bias[j]) * (
        1.0 + td.erf((C[i, j] + bias[j]) * 0.7071067811865476)) + res[i, j], name="out")
    s = ops.schedule([out])
    names = _stage_names(s)
    # C accumulates in a register tile inside out's loops (not a row reduction, C.rf)
    assert "B.global" in names and "C.rf" not in names, names
    assert s.stage_by_name("C").attach_type.value == "scope", names
    assert s.stage_by_name("C").scope.value == "local"
    f = td.build(s, [A, B, bias, res, out], target="llvm")
    a = randn(M, K)
    b = randn(N, K) if transpose_b else randn(K, N)
    bb, r = randn(N), randn(M, N)
    y = (a.astype("f8") @ (b.T if transpose_b else b)) + bb
    from math import erf
    want = 0.5 * y * (1.0 + np.vectorize(erf)(y / np.sqrt(2.0))) + r
    check(f, [a, b, bb, r], want.astype("float32"), rtol=1e-4, atol=1e-4 * K)
