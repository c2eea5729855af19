"""A matmul written by hand with ``td.compute`` gets the CUDA default of ``ops.matmul`` /
``ops.dense`` (``cuda_gemm.gemm_anchor`` recognizes it with ``recognize.gemm_form``; B is
copied by a cache stage laid out ``[k, j]`` in the PACK stage's role): the same kernel
source but for names, the tensor-core microkernel for fp16/bf16, and NumPy's results under
the emulator at sizes that do and don't divide the tiles."""
from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

import tdsl as td
from tdsl import ops
from tests.workloads import half_dtype

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")
TARGET = "cuda -arch=sm_90"


def _hand(M, N, K, dt="float32", transposed=False, batch=None):
    """``C = A @ B`` (``transposed``: ``A @ B.T``, B read ``B[j, k]``), fp16/bf16
    accumulating in fp32 through casts; ``batch``: a leading batch axis."""
    lead = () if batch is None else (batch,)
    A = td.placeholder((*lead, M, K), dt, name="A")
    B = td.placeholder((*lead, *((N, K) if transposed else (K, N))), dt, name="B")
    k = td.reduce_axis((0, K), "k")

    def f32(x):
        return x if dt == "float32" else x.astype("float32")

    def body(*ix):
        *b, i, j = ix
        rhs = B[(*b, j, k)] if transposed else B[(*b, k, j)]
        return td.sum(f32(A[(*b, i, k)]) * f32(rhs), axis=k)
    return A, B, td.compute((*lead, M, N), body, name="C")


def _tagged(M, N, K, dt="float32", transposed=False):
    A = td.placeholder((M, K), dt, name="A")
    B = td.placeholder((N, K) if transposed else (K, N), dt, name="B")
    C = (ops.dense if transposed else ops.matmul)(A, B, out_dtype="float32")
    return A, B, C


def _source(args) -> str:
    s = ops.schedule(args[-1], TARGET)
    return td.build(s, list(args), target=TARGET).get_source()


#: Words kept: C keywords and types (``float4``), tdsl's and CUDA's built-ins.
_VOCABULARY = re.compile(r"([a-z]+\d?|tdsl_\w+|__\w+|threadIdx|blockIdx)$")


def _statements(src: str) -> list:
    """``src``'s lines, comments dropped, sorted, with every other identifier (tensors,
    loop variables) replaced by ``x``: equal for two kernels that differ only in names and
    in the order of independent statements (a hand-written matmul's B copy is a stage made
    after A's)."""
    def word(m: re.Match) -> str:
        return m.group(0) if _VOCABULARY.match(m.group(0)) else "x"
    return sorted(re.sub(r"[A-Za-z_]\w*", word, line.split("//")[0])
                  for line in src.splitlines())


@pytest.mark.parametrize("dt, transposed", [("float32", False), ("float32", True),
                                             ("float16", False), ("bfloat16", True)])
def test_gets_the_kernel_ops_gets(dt, transposed):
    hand = _source(_hand(256, 192, 128, dt, transposed))
    tagged = _source(_tagged(256, 192, 128, dt, transposed))
    assert _statements(hand) == _statements(tagged)
    if dt != "float32":
        assert "tdsl_tc_gemm<" in hand                # the tensor-core microkernel


def _run(args, arrays, ref, rtol=1e-4, atol=1e-4):
    s = ops.schedule(args[-1], TARGET)
    f = td.build(s, list(args), target=TARGET)
    out = np.full(ref.shape, np.nan, "float32")
    f.emulate(*arrays, out)
    np.testing.assert_allclose(out, ref, rtol=rtol, atol=atol)


@needs_gxx
@pytest.mark.parametrize("M, N, K", [(64, 64, 32), (37, 45, 19), (257, 260, 20)])
@pytest.mark.parametrize("transposed", [False, True])
def test_matches_numpy(M, N, K, transposed):
    g = np.random.default_rng(M + N)
    a = g.standard_normal((M, K)).astype("float32")
    b = g.standard_normal((N, K) if transposed else (K, N)).astype("float32")
    _run(_hand(M, N, K, transposed=transposed), [a, b], a @ (b.T if transposed else b))


@needs_gxx
def test_epilogue_and_symbolic_rows():
    n = td.var("n")
    A, W, C = _hand(n, 36, 20, transposed=True)
    bias = td.placeholder((36,), name="bias")
    Y = td.compute(C.shape, lambda i, j: td.maximum(C[i, j] + bias[j], 0.0), name="Y")
    s = ops.schedule(Y, TARGET)
    assert "B.global" in [st.op.name for st in s.stages]
    f = td.build(s, [A, W, bias, Y], target=TARGET)
    g = np.random.default_rng(3)
    for rows in (1, 33, 130):
        x, w, bb = (g.standard_normal(sh).astype("float32") for sh in ((rows, 20), (36, 20), (36,)))
        y = np.full((rows, 36), np.nan, "float32")
        f.emulate(x, w, bb, y)
        np.testing.assert_allclose(y, np.maximum(x @ w.T + bb, 0), rtol=1e-4, atol=1e-4)


@needs_gxx
def test_batch_matmul():
    g = np.random.default_rng(5)
    a = g.standard_normal((3, 18, 12)).astype("float32")
    b = g.standard_normal((3, 12, 22)).astype("float32")
    _run(_hand(18, 22, 12, batch=3), [a, b], a @ b)


@needs_gxx
@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_tensor_core_path_matches_numpy(dt):
    g = np.random.default_rng(7)
    a = (g.random((130, 100)) - .5).astype(half_dtype(dt))
    b = (g.random((100, 72)) - .5).astype(half_dtype(dt))
    ref = a.astype("float32") @ b.astype("float32")
    _run(_hand(130, 72, 100, dt), [a, b], ref, rtol=1e-3, atol=1e-3)
