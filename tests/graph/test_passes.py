"""The graph passes on their own: folding, CSE, DCE, fusion decisions."""
import numpy as np

import tdsl as td
from tdsl.graph import compile_graph, opset
from tdsl.graph.builder import Builder
from tdsl.graph.passes import optimize

from .helpers import bn_params, close, rand


def test_batch_norm_folds_into_conv_and_dense_or_becomes_scale_shift(rng):
    b = Builder()
    x = b.input((2, 4, 6, 6), name="x")
    c = b.op("conv2d", x, b.const(rand(rng, 4, 4, 1, 1)), stride=(1, 1), padding=(0,) * 4,
             dilation=(1, 1), groups=1)
    c = b.op("batch_norm", c, *map(b.const, bn_params(rng, 4)), eps=1e-5, axis=1)
    s = b.op("batch_norm", x, *map(b.const, bn_params(rng, 4)), eps=1e-5, axis=1)
    f = b.input((3, 4), name="f")
    d = b.op("dense", f, b.const(rand(rng, 5, 4)))
    d = b.op("batch_norm", d, *map(b.const, bn_params(rng, 5)), eps=1e-5, axis=1)
    b.output(c, s, d)
    g, st = optimize(b.graph)
    assert not any(n.op == "batch_norm" for n in g.nodes)
    assert st.folded_batch_norms == 2
    assert [n.op for n in g.nodes] == ["conv2d", "mul", "add", "dense"]
    cg = compile_graph(b.graph)
    xa, fa = rand(rng, 2, 4, 6, 6), rand(rng, 3, 4)
    ref = _reference(b.graph, [xa, fa])
    for a, r in zip(cg(xa, fa), ref):
        close(a, r)


def _reference(graph, inputs):
    """Evaluate a graph with NumPy (ops with an evaluator, plus batch_norm)."""
    from tdsl.graph.passes.fold import _np_batch_norm
    env = {id(v): a for v, a in zip(graph.inputs, inputs)}

    def get(v):
        return v.const if v.is_const else env[id(v)]
    for n in graph.nodes:
        xs = [get(v) for v in n.inputs]
        if n.op == "batch_norm":
            env[id(n.outputs[0])] = _np_batch_norm(xs, n.attrs)
        elif n.op == "conv2d":
            import torch
            import torch.nn.functional as F
            env[id(n.outputs[0])] = F.conv2d(torch.from_numpy(xs[0]),
                                             torch.from_numpy(xs[1])).numpy()
        else:
            env[id(n.outputs[0])] = opset.OPS[n.op].np_eval(xs, n.attrs)
    return [get(v) for v in graph.outputs]


def test_constant_folding_of_a_weight_transpose(rng):
    b = Builder()
    x = b.input((td.var("n"), 6), name="x")
    w = rand(rng, 6, 9)
    wt = b.op("transpose", b.const(w), axes=(1, 0))         # (9, 6): a linear's weight
    wt = b.op("cast", b.op("mul", wt, b.scalar(2.0)), dtype="float32")
    b.output(b.op("dense", x, wt))
    g, st = optimize(b.graph)
    assert st.folded_constants == 3
    assert [n.op for n in g.nodes] == ["dense"]
    assert g.nodes[0].inputs[1].is_const
    # pre-packed: the (9, 6) weight PyTorch-style is stored as (6, 9), read in rows
    assert g.nodes[0].attrs["weight_layout"] == "KN" and st.prepacked == 1
    np.testing.assert_array_equal(g.nodes[0].inputs[1].const, 2 * w)
    cg = compile_graph(b.graph)
    xa = rand(rng, 5, 6)
    close(cg(xa)[0], xa @ (2 * w))


def test_conv_weights_are_prepacked_hwio_after_batch_norm_folding(rng):
    """A constant conv2d weight (groups 1) is stored HWIO once, after batch-norm folding
    scaled it in PyTorch's OIHW; a depthwise weight and a non-constant one stay OIHW."""
    import torch
    b = Builder()
    x = b.input((td.var("n"), 6, 9, 9), name="x")
    w = rand(rng, 10, 6, 3, 3)
    c = b.op("conv2d", x, b.const(w), stride=(2, 2), padding=(1,) * 4, dilation=(1, 1),
             groups=1)
    bn = bn_params(rng, 10)
    c = b.op("batch_norm", c, *map(b.const, bn), eps=1e-5, axis=1)
    wd = rand(rng, 10, 1, 3, 3)
    d = b.op("conv2d", c, b.const(wd), stride=(1, 1), padding=(1,) * 4, dilation=(1, 1),
             groups=10)
    wv = b.input((4, 10, 1, 1), name="wv")
    e = b.op("conv2d", d, wv, stride=(1, 1), padding=(0,) * 4, dilation=(1, 1), groups=1)
    b.output(e)
    g, st = optimize(b.graph, layout="NCHW")   # (auto would run the small depthwise NHWC)
    convs = [n for n in g.nodes if n.op == "conv2d"]
    assert [n.attrs.get("kernel_layout", "OIHW") for n in convs] == ["HWIO", "OIHW", "OIHW"]
    assert convs[0].inputs[1].const.shape == (3, 3, 6, 10) and st.prepacked == 1
    cg = compile_graph(b.graph)
    gamma, beta, mean, var = (np.asarray(a, np.float64) for a in bn)
    scale = gamma / np.sqrt(var + 1e-5)
    for n in (1, 3):
        xa, wva = rand(rng, n, 6, 9, 9), rand(rng, 4, 10, 1, 1)
        t = torch.nn.functional.conv2d(torch.from_numpy(xa).double(),
                                       torch.from_numpy(w).double(), stride=2, padding=1)
        t = (t - torch.from_numpy(mean)[:, None, None]) * torch.from_numpy(scale)[:, None, None]
        t = t + torch.from_numpy(beta)[:, None, None]
        t = torch.nn.functional.conv2d(t, torch.from_numpy(wd).double(), padding=1, groups=10)
        t = torch.nn.functional.conv2d(t, torch.from_numpy(wva).double())
        close(cg(xa, wva)[0], t.float().numpy())


def test_cse_merges_duplicates_and_dce_removes_unused(rng):
    b = Builder()
    x = b.input((4, 7), name="x")
    a1 = b.op("exp", x)
    a2 = b.op("exp", x)
    b.op("tanh", x)                                         # unused
    c1, c2 = b.const(np.full((7,), 3.0, np.float32)), b.const(np.full((7,), 3.0, np.float32))
    y = b.op("add", b.op("mul", a1, c1), b.op("mul", a2, c2))
    b.output(y)
    g, st = optimize(b.graph)
    assert st.removed_dead == 1
    assert [n.op for n in g.nodes] == ["exp", "mul", "add"]
    assert st.merged_common >= 2
    assert len(b.graph.nodes) == 6                          # the input graph is unchanged
    xa = rand(rng, 4, 7)
    close(compile_graph(b.graph)(xa)[0], 6 * np.exp(xa))


def test_fusion_boundaries(rng):
    b = Builder()
    x = b.input((8, 16), name="x")
    h = b.op("dense", x, b.const(rand(rng, 16, 16)), b.const(rand(rng, 16)))
    h = b.op("gelu", h)
    y1 = b.op("add", h, x)                   # epilogue: one kernel dense+gelu? no: h read twice
    y2 = b.op("mul", h, b.scalar(2.0))
    s = b.op("sum", b.op("exp", y2), axes=(1,), keepdims=True)   # prologue into the reduction
    b.output(y1, s)
    cg = compile_graph(b.graph)
    fused = [ops for _, ops in cg.report.fused]
    assert fused == [["dense", "gelu"], ["add"], ["mul", "exp", "sum"]]
    text = str(cg.graph)
    assert "fused: dense + gelu" in text and "fused: mul + exp + sum" in text


def test_supports():
    from tdsl.graph import Value
    x = Value((2, 3), "float32")
    assert opset.supports("relu", [x], {})
    assert not opset.supports("fft", [x], {})
    assert not opset.supports("sum", [x], {"axes": (0, 1), "keepdims": False})   # 0-d
    assert opset.supports("sum", [x], {"axes": (1,), "keepdims": False})
    assert not opset.supports("conv2d", [x, x], {})
    assert not opset.supports("relu", [Value((), "float32")], {})


def test_anchor_flattened_and_reshape_sunk_into_its_epilogue(rng):
    s = td.var("s")
    b = Builder()
    x = b.input((2, s, 12), name="x")
    r = b.input((2, s, 10), name="r")
    w, bias = rand(rng, 10, 12), rand(rng, 10)
    h = b.op("add", b.op("gelu", b.op("dense", x, b.const(w), b.const(bias))), r)
    y = b.op("layer_norm", h, b.const(rand(rng, 10)), b.const(rand(rng, 10)), axes=(-1,),
             eps=1e-5)
    b.output(y)
    g, st = optimize(b.graph)   # terminates (the residual's reshape does not sink back)
    assert st.flattened == 1 and st.sunk_reshapes == 3
    dense = next(n for n in g.nodes if n.op == "dense")
    assert dense.inputs[0].ndim == 2
    cg = compile_graph(b.graph)
    assert [ops for _, ops in cg.report.fused] == [["dense", "gelu", "add"], ["layer_norm"]]
    import torch
    import torch.nn.functional as F
    for seq in (1, 9):
        xa, ra = rand(rng, 2, seq, 12), rand(rng, 2, seq, 10)
        ref = F.gelu(F.linear(torch.from_numpy(xa), torch.from_numpy(w),
                              torch.from_numpy(bias))) + torch.from_numpy(ra)
        lnw = [v.const for v in b.graph.nodes[-1].inputs[1:]]
        ref = F.layer_norm(ref, (10,), torch.from_numpy(lnw[0]), torch.from_numpy(lnw[1]))
        out, = cg(xa, ra)
        close(out, ref)
    ex = next(iter(cg._plans.values()))
    assert not ex.copy_out      # the last kernel writes the (reshaped) output array itself


def test_batched_matmul_flattened_to_3d(rng):
    b = Builder()
    q = b.input((2, 3, 5, 8), name="q")
    k = b.input((2, 3, 7, 8), name="k")
    y = b.op("softmax", b.op("matmul", q, k, transpose_b=True), axis=-1)
    b.output(y)
    g, st = optimize(b.graph)
    mm = next(n for n in g.nodes if n.op == "matmul")
    assert mm.inputs[0].ndim == 3 and st.sunk_reshapes == 1
    qa, ka = rand(rng, 2, 3, 5, 8), rand(rng, 2, 3, 7, 8)
    e = qa @ np.swapaxes(ka, -1, -2)
    e = np.exp(e - e.max(-1, keepdims=True))
    close(compile_graph(b.graph)(qa, ka)[0], e / e.sum(-1, keepdims=True))


def test_constant_folding_without_a_numpy_form_runs_a_kernel(rng):
    import torch
    b = Builder()
    x = b.input((2, 5), name="x")
    w = rand(rng, 3, 5)
    sw = b.op("softmax", b.const(w), axis=-1)                # folded by a tdsl kernel
    b.output(b.op("dense", x, sw))
    g, st = optimize(b.graph)
    assert [n.op for n in g.nodes] == ["dense"] and st.folded_constants == 1
    xa = rand(rng, 2, 5)
    close(compile_graph(b.graph)(xa)[0], xa @ torch.softmax(torch.from_numpy(w), -1).numpy().T)


def test_cheap_elementwise_read_by_several_kernels_is_recomputed(rng):
    b = Builder()
    x = b.input((6, 20), name="x")
    r = b.op("relu", x)                                      # read by a softmax and a sum
    s = b.op("softmax", r, axis=-1)
    m = b.op("sum", r, axes=(1,), keepdims=True)
    d = b.op("dense", r, b.const(rand(rng, 4, 20)))          # an anchor: keeps its input
    b.output(s, m)
    g, st = optimize(b.graph)
    assert st.recomputed == 2                                # (the dense is dead)
    b.output(d)
    g, st = optimize(b.graph)
    assert st.recomputed == 0                                # an anchor reads it: materialize
    b2 = Builder()
    x = b2.input((6, 20), name="x")
    r = b2.op("relu", x)
    b2.output(b2.op("softmax", r, axis=-1), b2.op("sum", r, axes=(1,), keepdims=True))
    cg = compile_graph(b2.graph)
    assert cg.report.passes.recomputed == 2
    assert [ops for _, ops in cg.report.fused] == [["relu", "softmax"], ["relu", "sum"]]
    xa = rand(rng, 6, 20)
    s1, m1 = cg(xa)
    e = np.exp(np.maximum(xa, 0) - np.maximum(xa, 0).max(-1, keepdims=True))
    close(s1, e / e.sum(-1, keepdims=True))
    close(m1, np.maximum(xa, 0).sum(1, keepdims=True))


def test_scalar_constants_stay_0d_and_are_immediates(rng):
    from tdsl.graph import constant
    assert constant(np.float32(2.0)).shape == () and constant(np.array(3)).ndim == 0
    b = Builder()
    x = b.input((4, 5), "int64", name="x")
    y = b.op("mul", x, b.scalar(2.5))                  # int tensor * float: float32
    z = b.op("div", x, b.const(np.array(4, np.int64)))  # true division of ints
    b.output(y, z)
    cg = compile_graph(b.graph)
    k = next(iter(cg.kernels.values()))
    assert len(k.inputs) == 1                          # the scalar is not an argument
    xa = rng.integers(-9, 9, (4, 5))
    y1, z1 = cg(xa)
    assert y1.dtype == np.float32 and z1.dtype == np.float32
    close(y1, xa * 2.5)
    close(z1, xa / 4)


def test_layout_only_matmul_operands_are_read_in_place(rng):
    n, s = td.var("n"), td.var("s")
    b = Builder()
    q = b.input((n, s, 3, 8), name="q")                      # (batch, seq, heads, dim)
    k = b.input((n, s, 3, 8), name="k")
    qh = b.op("transpose", q, axes=(0, 2, 1, 3))
    kh = b.op("transpose", k, axes=(0, 2, 1, 3))
    e = b.op("exp", k)                                       # not layout-only: its own kernel
    y = b.op("matmul", qh, kh, transpose_b=True)
    b.output(y, b.op("matmul", b.op("transpose", e, axes=(0, 2, 1, 3)), qh, transpose_a=True))
    cg = compile_graph(b.graph)
    fused = [ops for _, ops in cg.report.fused]
    # k's permute is read in place by its one matmul; q's (two readers) and the permute of
    # exp(k) (not layout-only) are materialized
    assert fused == [["transpose", "reshape"], ["transpose", "reshape", "matmul"],
                     ["exp", "transpose", "reshape"], ["matmul"]]
    for seq in (1, 6):
        qa, ka = rand(rng, 2, seq, 3, 8), rand(rng, 2, seq, 3, 8)
        y1, y2 = cg(qa, ka)
        qt, kt = qa.transpose(0, 2, 1, 3), ka.transpose(0, 2, 1, 3)
        close(y1, qt @ np.swapaxes(kt, -1, -2))
        close(y2, np.swapaxes(np.exp(kt), -1, -2) @ qt)


def test_cse_checksums_each_weight_once_and_only_against_rivals(rng):
    """The three CSE passes of ``optimize`` share one ConstDigests: a weight with a
    rival of its dtype and shape is checksummed once, one without a rival never; equal
    data merges, same-shape different data (even one element apart) does not."""
    from tdsl.graph.passes import eliminate_common_subexpressions
    from tdsl.graph.passes.cleanup import ConstDigests
    b = Builder()
    x = b.input((3, 5), name="x")
    w1 = rand(rng, 5)
    w3 = w1.copy()
    w3[4] += 1.0                                            # same shape, other data
    c1, c2, c3 = b.const(w1), b.const(w1.copy()), b.const(w3)
    lone = b.const(rand(rng, 3, 1))                         # no rival: never read whole
    y = b.op("add", b.op("mul", x, c1), b.op("mul", x, c2))
    b.output(b.op("add", b.op("add", y, b.op("mul", x, c3)), lone))
    digest = ConstDigests()
    g = b.graph
    assert eliminate_common_subexpressions(g, digest) == 2   # c2 -> c1, then mul(x, c1)
    assert digest.computed == 3
    assert eliminate_common_subexpressions(g, digest) == 0
    assert digest.computed == 3                              # the second pass reuses them
    consts = {id(v) for n in g.nodes for v in n.inputs if v.is_const}
    assert consts == {id(c1), id(c3), id(lone)}
    xa = rand(rng, 3, 5)
    close(compile_graph(g)(xa)[0], 2 * xa * w1 + xa * w3 + lone.const)


def test_cse_sampled_checksum_never_merges_unequal_constants(rng):
    """Two large weights that differ only between the checksum's samples have the same
    checksum: ``array_equal`` keeps them apart; an equal copy still merges."""
    from tdsl.graph.passes.cleanup import DIGEST_SAMPLE, ConstDigests
    n = 4 * DIGEST_SAMPLE + 3
    w = rand(rng, n)
    w_odd = w.copy()
    w_odd[1] += 1.0                                         # not a sampled element
    digest = ConstDigests()
    assert digest(w) == digest(w_odd)
    b = Builder()
    x = b.input((2, n), name="x")
    c1, c2, c3 = b.const(w), b.const(w_odd), b.const(w.copy())
    b.output(b.op("add", b.op("add", b.op("mul", x, c1), b.op("mul", x, c2)),
                  b.op("mul", x, c3)))
    g, st = optimize(b.graph)
    consts = {id(v) for n_ in g.nodes for v in n_.inputs if v.is_const}
    assert len(consts) == 2 and st.merged_common == 2       # c3 -> c1, then its mul
    xa = rand(rng, 2, n)
    close(compile_graph(b.graph)(xa)[0], 2 * xa * w + xa * w_odd)


def test_cse_keeps_constants_that_differ_in_the_sign_of_zero(rng):
    """-0.0 and 0.0 compare equal, but ``x / w`` gives -inf and +inf: such weights are
    different constants (compared by their bytes)."""
    from tdsl.graph.passes.cleanup import DIGEST_SAMPLE
    n = 4 * DIGEST_SAMPLE + 3
    w = rand(rng, n)
    w[1] = 0.0                                              # not a sampled element
    w_neg = w.copy()
    w_neg[1] = -0.0
    b = Builder()
    x = b.input((n,), name="x")
    b.output(b.op("add", b.op("div", x, b.const(w)), b.op("div", x, b.const(w_neg))))
    g, st = optimize(b.graph)
    assert st.merged_common == 0
    xa = np.abs(rand(rng, n)) + 0.5
    got = compile_graph(b.graph)(xa)[0]
    assert np.isnan(got[1])                                 # +inf + -inf, not 2 * inf


def test_prepacked_weight_transpose_in_bands(rng):
    """``transpose_2d`` (banded copy) equals ``a.T`` for row counts around the band,
    several dtypes, and a single row or column."""
    from tdsl.graph.passes.prepack import TRANSPOSE_ROWS, transpose_2d
    for rows, cols in [(1, 7), (9, 1), (TRANSPOSE_ROWS - 1, 5), (TRANSPOSE_ROWS, 3),
                       (2 * TRANSPOSE_ROWS + 5, 17)]:
        for dtype in ("float32", "float64", "int32"):
            a = (rng.standard_normal((rows, cols)) * 100).astype(dtype)
            t_ = transpose_2d(a)
            assert t_.flags.c_contiguous and t_.dtype == a.dtype
            np.testing.assert_array_equal(t_, a.T)
