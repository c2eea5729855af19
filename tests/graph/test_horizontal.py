"""``passes.horizontal``: GEMMs of one input against constant weights merge into one, on
graphs built op by op (NumPy references, a symbolic row count bound to several values);
and where they must not merge."""
import numpy as np
import pytest

import tdsl as td
from tdsl.graph import compile_graph
from tdsl.graph.builder import Builder
from tdsl.graph.passes import optimize

from .helpers import close, rand


def _np_softmax(a):
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _dense_kernels(cg) -> int:
    return sum(("dense" in ops or "matmul" in ops) for _, ops in cg.report.fused)


@pytest.mark.parametrize("bias", [True, False])
def test_dense_and_matmul_products_merge(rng, bias):
    """Three dense (sizes 24/8/8, bias or none) and two matmul on a (K, N) weight; every
    product read by a softmax (a row op: the slice is its prologue)."""
    n = td.var("n")
    b = Builder()
    x = b.input((n, 16), name="x")
    ws = [rand(rng, m, 16) for m in (24, 8, 8)]
    bs = [rand(rng, m) for m in (24, 8, 8)]
    ms = [rand(rng, 16, 12), rand(rng, 16, 5)]
    outs = []
    for w, c in zip(ws, bs):
        d = b.op("dense", x, b.const(w), *([b.const(c)] if bias else []))
        outs.append(b.op("softmax", d, axis=-1))
    for m in ms:
        outs.append(b.op("softmax", b.op("matmul", x, b.const(m)), axis=-1))
    b.output(*outs)
    g, st = optimize(b.graph)
    assert st.merged_gemms == 3                    # 3 dense -> 1, 2 matmul -> 1
    assert sum(nd.op in ("dense", "matmul") for nd in g.nodes) == 2
    cg = compile_graph(b.graph)
    assert _dense_kernels(cg) == 2
    assert len(cg.report.fused) == 2 + 5           # the GEMMs and the softmaxes, no copy
    for rows in (1, 7, 33):
        xa = rand(rng, rows, 16)
        refs = [_np_softmax(xa @ w.T + (c if bias else 0)) for w, c in zip(ws, bs)]
        refs += [_np_softmax(xa @ m) for m in ms]
        for out, ref in zip(cg(xa), refs):
            close(out, ref)


def test_no_merge_across_inputs_weights_or_layouts(rng):
    """Different inputs; a weight that is a graph input; a different transpose_b: nothing
    merges."""
    b = Builder()
    x, y = b.input((5, 16), name="x"), b.input((5, 16), name="y")
    wl = b.input((8, 16), name="w_live")
    w1, w2, w3 = rand(rng, 8, 16), rand(rng, 16, 8), rand(rng, 8, 16)
    p1 = b.op("dense", x, b.const(w1))
    p2 = b.op("dense", y, b.const(w3))                       # another input
    p3 = b.op("dense", x, wl)                                # not a constant
    p4 = b.op("matmul", x, b.const(w2))
    p5 = b.op("matmul", x, b.const(w3), transpose_b=True)    # transposed differently
    b.output(*(b.op("softmax", p, axis=-1) for p in (p1, p2, p3, p4, p5)))
    g, st = optimize(b.graph)
    assert st.merged_gemms == 0
    assert sum(nd.op in ("dense", "matmul") for nd in g.nodes) == 5
    cg = compile_graph(b.graph)
    xa, ya, wa = rand(rng, 5, 16), rand(rng, 5, 16), rand(rng, 8, 16)
    refs = [xa @ w1.T, ya @ w3.T, xa @ wa.T, xa @ w2, xa @ w3.T]
    for out, ref in zip(cg(xa, ya, wa), refs):
        close(out, _np_softmax(ref))


def test_products_that_need_their_own_buffer_stay(rng):
    """A product that is a graph output, or whose sole reader is its elementwise epilogue,
    or that a dense reads, or that two ops read, keeps its GEMM; the two others merge."""
    b = Builder()
    x = b.input((6, 16), name="x")
    w = [rand(rng, 8, 16) for _ in range(6)]
    wd = rand(rng, 4, 8)
    p = [b.op("dense", x, b.const(wk)) for wk in w]
    out_direct = p[0]                                        # graph output
    epi = b.op("relu", p[1])                                 # epilogue
    chained = b.op("dense", p[2], b.const(wd))               # read by a GEMM
    rows = [b.op("softmax", p[3], axis=-1), b.op("softmax", p[4], axis=-1)]
    two = b.op("add", b.op("softmax", p[5], axis=-1), b.op("sum", p[5], axes=(1,),
                                                           keepdims=True))
    b.output(out_direct, epi, chained, *rows, two)
    g, st = optimize(b.graph)
    assert st.merged_gemms == 1
    cg = compile_graph(b.graph)
    assert _dense_kernels(cg) == 6                           # 4 alone + merged + chained
    xa = rand(rng, 6, 16)
    ys = [xa @ wk.T for wk in w]
    refs = [ys[0], np.maximum(ys[1], 0), ys[2] @ wd.T, _np_softmax(ys[3]), _np_softmax(ys[4]),
            _np_softmax(ys[5]) + ys[5].sum(1, keepdims=True)]
    for out, ref in zip(cg(xa), refs):
        close(out, ref)
