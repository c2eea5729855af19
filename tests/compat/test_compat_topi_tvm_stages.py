"""topi's convolutions, dense/matmul and pooling declared with TVM's stages (a padding stage,
one compute with the reduce axes), so that AutoTVM templates written for TVM schedule them:
their structure, and their results against NumPy under the default schedule and under a
TVM-style CUDA schedule (emulated) with tiles that divide the sizes and tiles that don't."""
import shutil

import numpy as np
import pytest

import tvm
import tvm.topi.testing
from tvm import te, topi

from tdsl.errors import ShapeError


def _run(outs, args, arrays, target="llvm"):
    s = topi.generic.schedule_injective(outs) if target == "llvm" else None
    f = tvm.build(s, args, target)
    nd = [tvm.nd.array(a) for a in arrays]
    f(*nd)
    return nd[-1].numpy()


@pytest.mark.parametrize("stride,padding,dilation", [(1, 1, 1), (2, (1, 2), 1), (1, 0, 2),
                                                     ((2, 1), "SAME", 1)])
def test_conv2d_nchw_stages_and_results(rng, stride, padding, dilation):
    X = te.placeholder((2, 5, 9, 8), name="X")
    K = te.placeholder((6, 5, 3, 3), name="K")
    Y = topi.nn.conv2d_nchw(X, K, stride, padding, dilation, out_dtype="float32")
    assert Y.op.name == "conv2d_nchw" and Y.op.tag == "conv2d_nchw"
    assert [iv.var.name for iv in Y.op.axis] == ["nn", "ff", "yy", "xx"]
    assert [iv.var.name for iv in Y.op.reduce_axis] == ["rc", "ry", "rx"]
    pad = Y.op.input_tensors[0]
    assert pad.op.name == "pad_temp" and "pad" in pad.op.tag
    x = rng.standard_normal((2, 5, 9, 8)).astype("float32")
    k = rng.standard_normal((6, 5, 3, 3)).astype("float32")
    dil = k if dilation == 1 else np.zeros((6, 5, 5, 5), "float32")
    if dilation == 2:
        dil[:, :, ::2, ::2] = k
    want = tvm.topi.testing.conv2d_nchw_python(x, dil, stride, padding)
    got = _run([Y], [X, K, Y], [x, k, np.full(want.shape, np.nan, "float32")])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_conv2d_hwcn_nhwc_depthwise(rng):
    x = rng.standard_normal((7, 6, 4, 3)).astype("float32")          # H, W, C, N
    w = rng.standard_normal((3, 3, 4, 5)).astype("float32")          # KH, KW, C, O
    A, W = te.placeholder(x.shape, name="A"), te.placeholder(w.shape, name="W")
    B = topi.nn.conv2d_hwcn(A, W, 1, 1, 1)
    assert B.op.name == "conv2d_hwcn" and B.op.input_tensors[0].op.name == "pad_temp"
    assert [iv.var.name for iv in B.op.reduce_axis] == ["ry", "rx", "rc"]
    got = _run([B], [A, W, B], [x, w, np.zeros((7, 6, 5, 3), "float32")])
    np.testing.assert_allclose(got, tvm.topi.testing.conv2d_hwcn_python(x, w, 1, 1),
                               rtol=1e-4, atol=1e-4)
    xn = x.transpose(3, 0, 1, 2).copy()                                # N, H, W, C
    An = te.placeholder(xn.shape, name="An")
    Bn = topi.nn.conv2d(An, W, 2, 1, 1, layout="NHWC")
    want = tvm.topi.testing.conv2d_nhwc_python(xn, w, 2, 1)
    got = _run([Bn], [An, W, Bn], [xn, w, np.zeros(want.shape, "float32")])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # depthwise: channel multiplier 2, output channel c reads input channel c // 2
    xd = rng.standard_normal((1, 3, 8, 7)).astype("float32")
    wd = rng.standard_normal((3, 2, 3, 3)).astype("float32")
    Ad, Wd = te.placeholder(xd.shape, name="Ad"), te.placeholder(wd.shape, name="Wd")
    D = topi.nn.depthwise_conv2d_nchw(Ad, Wd, 1, 1, 1)
    assert D.op.name == "DepthwiseConv2d" and D.op.input_tensors[0].op.name == "PaddedInput"
    assert [iv.var.name for iv in D.op.reduce_axis] == ["di", "dj"]
    want = tvm.topi.testing.conv2d_nchw_python(xd, wd.reshape(6, 1, 3, 3), 1, 1, groups=3)
    got = _run([D], [Ad, Wd, D], [xd, wd, np.zeros((1, 6, 8, 7), "float32")])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_dense_and_matmul_stages(rng):
    a = rng.standard_normal((9, 13)).astype("float32")
    w = rng.standard_normal((6, 13)).astype("float32")
    b = rng.standard_normal(6).astype("float32")
    A, Wt, Bb = (te.placeholder(v.shape, name=n) for v, n in ((a, "A"), (w, "W"), (b, "b")))
    D = topi.nn.dense(A, Wt, Bb)
    assert D.op.name == "T_add"
    mat = D.op.input_tensors[0]
    assert mat.op.name == "T_matmul_NT" and mat.op.tag == "dense"
    assert [iv.var.name for iv in mat.op.reduce_axis] == ["k"]
    got = _run([D], [A, Wt, Bb, D], [a, w, b, np.zeros((9, 6), "float32")])
    np.testing.assert_allclose(got, a @ w.T + b, rtol=1e-4, atol=1e-4)
    M = topi.nn.matmul(A, Wt, transpose_b=True)
    Bm = te.placeholder((13, 6), name="Bm")
    M2 = topi.nn.matmul(A, Bm)
    assert M2.op.name == "T_matmul_NN" and M2.op.tag == "matmul"
    got = _run([M], [A, Wt, M], [a, w, np.zeros((9, 6), "float32")])
    np.testing.assert_allclose(got, a @ w.T, rtol=1e-4, atol=1e-4)
    got = _run([M2], [A, Bm, M2], [a, w.T.copy(), np.zeros((9, 6), "float32")])
    np.testing.assert_allclose(got, a @ w.T, rtol=1e-4, atol=1e-4)
    with pytest.raises(ShapeError, match="reduction dimensions differ"):
        topi.nn.matmul(A, te.placeholder((12, 6), name="bad"))


def _pool_ref(x, k, s, pads, kind, count_include_pad, ceil_mode):
    """Pooling over the last two axes (NCHW), by loops over windows."""
    n, c, h, w = x.shape
    pt, pl, pb, pr = pads
    eb, er = (s - 1, s - 1) if ceil_mode else (0, 0)
    oh = (h + pt + pb + eb - k) // s + 1
    ow = (w + pl + pr + er - k) // s + 1
    out = np.zeros((n, c, oh, ow), x.dtype)
    for i in range(oh):
        for j in range(ow):
            y0, x0 = i * s - pt, j * s - pl
            ys, xs = max(y0, 0), max(x0, 0)
            ye, xe = min(y0 + k, h), min(x0 + k, w)
            win = x[:, :, ys:ye, xs:xe]
            if kind == "max":
                out[:, :, i, j] = win.max(axis=(2, 3))
            else:
                if count_include_pad:
                    cnt = (min(y0 + k, h + pb) - y0) * (min(x0 + k, w + pr) - x0)
                else:
                    cnt = (ye - ys) * (xe - xs)
                out[:, :, i, j] = win.sum(axis=(2, 3)) / cnt
    return out


@pytest.mark.parametrize("kind,pads,cip,ceil", [("max", (1, 1, 1, 1), True, False),
                                                ("max", (0, 0, 0, 0), True, True),
                                                ("avg", (1, 0, 1, 2), True, False),
                                                ("avg", (1, 1, 0, 0), False, True)])
def test_pool2d_stages(rng, kind, pads, cip, ceil):
    x = rng.standard_normal((2, 3, 9, 10)).astype("float32")
    X = te.placeholder(x.shape, name="X")
    P = topi.nn.pool2d(X, (3, 3), (2, 2), (1, 1), pads, kind, ceil_mode=ceil,
                       count_include_pad=cip)
    if kind == "max":
        assert P.op.name == "pool_max" and P.op.tag == "pool_max"
        red = P
    else:
        assert P.op.name == "pool_avg"
        red = P.op.input_tensors[0]
        assert red.op.name == "pool_sum"
    assert [iv.var.name for iv in red.op.reduce_axis] == ["rv0", "rv1"]
    assert (red.op.input_tensors[0].op.name == "pad_temp") == (any(pads) or ceil)
    want = _pool_ref(x, 3, 2, pads, kind, cip, ceil)
    got = _run([P], [X, P], [x, np.zeros(want.shape, "float32")])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_conv2d_bad_arguments():
    X = te.placeholder((1, 4, 8, 8), name="X")
    with pytest.raises(ShapeError, match="input channels"):
        topi.nn.conv2d_nchw(X, te.placeholder((2, 3, 3, 3), name="K"), 1, 1, 1)
    with pytest.raises(ShapeError, match="padding"):
        topi.nn.conv2d_nchw(X, te.placeholder((2, 4, 3, 3), name="K"), 1, "FULL", 1)
    with pytest.raises(ShapeError, match="larger than the padded input"):
        topi.nn.conv2d_nchw(X, te.placeholder((2, 4, 9, 9), name="K"), 1, 0, 1)
    with pytest.raises(ShapeError, match="pool_type"):
        topi.nn.pool2d(X, 2, 2, 1, 0, "sum")


def _tvm_style_cuda_conv(n, ci, co, size, tiles, rc_tile):
    """TVM's AutoTVM conv2d schedule shape, written out: pad inlined, shared and local
    caches, block/vthread/thread tiling of f, y, x and a split reduction."""
    data = te.placeholder((n, ci, size, size), name="data")
    kernel = te.placeholder((co, ci, 3, 3), name="kernel")
    conv = topi.nn.conv2d_nchw(data, kernel, 1, 1, 1, out_dtype="float32")
    s = te.create_schedule([conv.op])
    pad_data = s[conv].op.input_tensors[0]
    s[pad_data].compute_inline()
    OL = s.cache_write(conv, "local")
    AA = s.cache_read(pad_data, "shared", [OL])
    WW = s.cache_read(kernel, "shared", [OL])
    AL = s.cache_read(AA, "local", [OL])
    WL = s.cache_read(WW, "local", [OL])
    nn, f, y, x = s[conv].op.axis
    outer = []
    names = ("z", "y", "x")
    for ax, (vt, th, inner), nm in zip((f, y, x), tiles, names):
        rest, ii = s[conv].split(ax, factor=inner)
        rest, ti = s[conv].split(rest, factor=th)
        bo, vi = s[conv].split(rest, factor=vt)
        outer.append((bo, vi, ti, ii, nm))
    s[conv].reorder(nn, *[o[0] for o in outer], *[o[1] for o in outer],
                    *[o[2] for o in outer], *[o[3] for o in outer])
    for bo, vi, ti, _, nm in outer:
        s[conv].bind(bo, te.thread_axis("blockIdx." + nm))
        s[conv].bind(vi, te.thread_axis("vthread"))
        s[conv].bind(ti, te.thread_axis("threadIdx." + nm))
    s[OL].compute_at(s[conv], outer[-1][2])
    rc, ry, rx = s[OL].op.reduce_axis
    rco, rci = s[OL].split(rc, factor=rc_tile)
    s[OL].reorder(rco, ry, rx, rci, *s[OL].op.axis)
    s[AA].compute_at(s[OL], rx)
    s[WW].compute_at(s[OL], rx)
    s[AL].compute_at(s[OL], rci)
    s[WL].compute_at(s[OL], rci)
    for load in (AA, WW):
        fused = s[load].fuse(*s[load].op.axis)
        for (_, th, _), nm in zip(tiles, names):
            t, fused = s[load].split(fused, nparts=th)
            s[load].bind(t, te.thread_axis("threadIdx." + nm))
    return s, [data, kernel, conv]


@pytest.mark.skipif(shutil.which("g++") is None, reason="the CUDA emulation harness needs g++")
@pytest.mark.parametrize("n,ci,co,size,tiles,rc_tile", [
    (1, 8, 8, 6, ((2, 2, 2), (1, 3, 2), (1, 3, 2)), 4),     # every tile divides
    (1, 6, 10, 7, ((2, 2, 2), (2, 2, 1), (1, 2, 2)), 4),    # none divides: 10, 7 and 6 leave tails
])
def test_tvm_style_cuda_conv_schedule_emulated(rng, n, ci, co, size, tiles, rc_tile):
    s, args = _tvm_style_cuda_conv(n, ci, co, size, tiles, rc_tile)
    f = tvm.build(s, args, "cuda")
    a = rng.standard_normal((n, ci, size, size)).astype("float32")
    w = rng.standard_normal((co, ci, 3, 3)).astype("float32")
    out = tvm.nd.array(np.full((n, co, size, size), np.nan, "float32"))
    f.emulate(tvm.nd.array(a), tvm.nd.array(w), out)
    np.testing.assert_allclose(out.numpy(), tvm.topi.testing.conv2d_nchw_python(a, w, 1, 1),
                               rtol=1e-4, atol=1e-4)


@tvm.autotvm.template("compat_test/conv2d_nchw_cuda")
def _conv_template(ci, co, size):
    """An AutoTVM template over topi's conv2d_nchw as TVM's conv tutorials tune it: splits
    defined on the compute's own axes and reduce axes, the padding stage inlined."""
    data = te.placeholder((1, ci, size, size), name="data")
    kernel = te.placeholder((co, ci, 3, 3), name="kernel")
    conv = topi.nn.conv2d_nchw(data, kernel, 1, 1, 1, out_dtype="float32")
    s = te.create_schedule([conv.op])
    _, f, y, x = s[conv].op.axis
    rc, ry, rx = s[conv].op.reduce_axis
    cfg = tvm.autotvm.get_config()
    for name, ax in (("f", f), ("y", y), ("x", x)):
        cfg.define_split("tile_" + name, ax, num_outputs=3)
    cfg.define_split("tile_rc", rc, num_outputs=2)
    s[s[conv].op.input_tensors[0]].compute_inline()
    OL = s.cache_write(conv, "local")
    parts = [cfg["tile_" + nm].apply(s, conv, ax) for nm, ax in (("f", f), ("y", y), ("x", x))]
    s[conv].reorder(*[p[0] for p in parts], *[p[1] for p in parts], *[p[2] for p in parts])
    for (bo, th, _), nm in zip(parts, "zyx"):
        s[conv].bind(bo, te.thread_axis("blockIdx." + nm))
        s[conv].bind(th, te.thread_axis("threadIdx." + nm))
    s[OL].compute_at(s[conv], parts[-1][1])
    rco, rci = cfg["tile_rc"].apply(s, OL, s[OL].op.reduce_axis[0])
    return s, [data, kernel, conv]


@pytest.mark.skipif(shutil.which("g++") is None, reason="the CUDA emulation harness needs g++")
def test_autotvm_template_over_topi_conv2d_configs_emulated(rng):
    """Configs of the template's space (the default and seeded random ones), built for CUDA
    and emulated, against NumPy; the space's splits come from conv2d_nchw's axes (8 and 5)."""
    import random
    task = tvm.autotvm.task.create("compat_test/conv2d_nchw_cuda", args=(4, 8, 5),
                                   target="cuda")
    space = task.config_space
    assert space["tile_f"].num_outputs == 3 and space["tile_rc"].num_outputs == 2
    a = rng.standard_normal((1, 4, 5, 5)).astype("float32")
    w = rng.standard_normal((8, 4, 3, 3)).astype("float32")
    want = tvm.topi.testing.conv2d_nchw_python(a, w, 1, 1)
    pick = random.Random(5)
    for index in [0] + [pick.randrange(len(space)) for _ in range(3)]:
        with tvm.target.Target("cuda"):
            s, args = task.instantiate(space.get(index))
            f = tvm.build(s, args)
        out = tvm.nd.array(np.full(want.shape, np.nan, "float32"))
        f.emulate(tvm.nd.array(a), tvm.nd.array(w), out)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4,
                                   err_msg=f"config {space.get(index)}")
