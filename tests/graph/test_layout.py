"""Layout choice (``passes.layout``): NHWC convolution regions between transposes, the
transposes sunk and cancelled, per-region decisions; models compiled in each layout match
eager PyTorch."""
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import tdsl
from tdsl.graph import compile_graph
from tdsl.graph.builder import Builder
from tdsl.graph.passes import layout as layout_pass
from tdsl.graph.passes.layout import LayoutError, count_transposes
from tdsl.testing.models import randomize

from .helpers import close, rand, t

MODES = ("auto", "NCHW", "NHWC")


def conv(b, x, w, stride=1, pad=1, groups=1, bias=None):
    ins = [x, b.const(w)] + ([b.const(bias)] if bias is not None else [])
    return b.op("conv2d", *ins, stride=(stride, stride), padding=(pad,) * 4, dilation=(1, 1),
                groups=groups)


def ref_conv(x, w, bias=None, stride=1, pad=1, groups=1):
    return F.conv2d(x, t(w), None if bias is None else t(bias), stride=stride, padding=pad,
                    groups=groups)


def nhwc_convs(cg):
    return [n for n in cg.optimized.nodes
            if n.op == "conv2d" and n.attrs.get("layout") == "NHWC"]


# ---- structure --------------------------------------------------------------------------------
def test_conv_relu_conv_chain_keeps_two_transposes(rng):
    """Each converted conv brings two transposes; sinking and cancelling leave one at each
    end of the chain (fails without ``cancel_transposes``: 4 remain)."""
    b = Builder()
    x = b.input((2, 8, 9, 11), name="x")
    w1, w2, c = rand(rng, 12, 8, 3, 3), rand(rng, 8, 12, 3, 3), rand(rng, 12, 1, 1)
    y = b.op("relu", b.op("add", conv(b, x, w1), b.const(c)))
    b.output(b.op("relu", conv(b, y, w2)))
    cg = compile_graph(b.graph, layout="NHWC")
    assert len(nhwc_convs(cg)) == 2
    assert count_transposes(cg.optimized) == 2
    assert cg.report.passes.nhwc_convs == 2 and cg.report.passes.cancelled_transposes >= 1
    xa = rand(rng, 2, 8, 9, 11)
    ref = F.relu(ref_conv(F.relu(ref_conv(t(xa), w1) + t(c)), w2))
    close(cg(xa)[0], ref)


def test_residual_chain_all_nhwc_two_transposes(rng):
    """conv-relu-conv-add(skip)-relu: the skip input reuses the first conv's transpose."""
    b = Builder()
    x = b.input((3, 8, 10, 10), name="x")
    w1, w2, bias = rand(rng, 8, 8, 3, 3), rand(rng, 8, 8, 3, 3), rand(rng, 8)
    y = b.op("relu", conv(b, x, w1, bias=bias))
    y = b.op("add", conv(b, y, w2), x)
    b.output(b.op("clamp", y, min=0.0, max=6.0))
    cg = compile_graph(b.graph, layout="NHWC")
    assert count_transposes(cg.optimized) == 2
    xa = rand(rng, 3, 8, 10, 10)
    ref = F.relu6(ref_conv(F.relu(ref_conv(t(xa), w1, bias)), w2) + t(xa))
    close(cg(xa)[0], ref)


def test_transpose_stays_before_pooling(rng):
    """Sinking stops at an op without an NHWC form: the pool reads NCHW."""
    b = Builder()
    x = b.input((2, 6, 12, 12), name="x")
    w = rand(rng, 6, 6, 3, 3)
    y = b.op("relu", conv(b, x, w))
    b.output(b.op("max_pool2d", y, kernel=(2, 2), stride=(2, 2), padding=(0, 0, 0, 0),
                  dilation=(1, 1), ceil_mode=False))
    cg = compile_graph(b.graph, layout="NHWC")
    nodes = cg.optimized.nodes
    pool = next(n for n in nodes if n.op == "max_pool2d")
    assert pool.inputs[0].producer.op == "transpose"
    assert count_transposes(cg.optimized) == 2
    xa = rand(rng, 2, 6, 12, 12)
    close(cg(xa)[0], F.max_pool2d(F.relu(ref_conv(t(xa), w)), 2))


def test_nchw_mode_changes_nothing(rng):
    b = Builder()
    x = b.input((1, 4, 7, 7), name="x")
    b.output(b.op("relu", conv(b, x, rand(rng, 4, 1, 3, 3), groups=4)))
    cg = compile_graph(b.graph, layout="NCHW")
    assert not nhwc_convs(cg) and count_transposes(cg.optimized) == 0


def test_auto_converts_where_it_pays_per_region(rng):
    """A region of small-plane depthwise convolutions (NHWC ~2x faster) is converted; one
    whose large stride-1 depthwise loses more than its small one gains stays NCHW."""
    b = Builder()
    x = b.input((1, 32, 56, 56), name="x")
    y = b.op("relu", conv(b, x, rand(rng, 32, 1, 3, 3), groups=32))       # 56x56: loses
    y = b.op("relu", conv(b, y, rand(rng, 32, 1, 3, 3), stride=2, groups=32))
    y = b.op("max_pool2d", y, kernel=(2, 2), stride=(2, 2), padding=(0, 0, 0, 0),
             dilation=(1, 1), ceil_mode=False)                              # -> 14x14
    w = rand(rng, 256, 32, 1, 1)
    y = b.op("relu", conv(b, y, w, pad=0, stride=2))                       # -> 7x7
    for _ in range(3):
        y = b.op("relu", conv(b, y, rand(rng, 256, 1, 3, 3), groups=256))
    b.output(y)
    cg = compile_graph(b.graph, layout="auto")
    st = cg.report.passes
    assert st.nhwc_regions == 1 and st.nchw_regions_kept == 1
    assert len(nhwc_convs(cg)) == 4
    assert all(n.outputs[0].shape[1] == 7 for n in nhwc_convs(cg))   # NHWC: (n, h, w, c)
    assert "nhwc convs 4" in str(cg.report)


def test_bad_layout_option():
    b = Builder()
    x = b.input((1, 2, 3, 3), name="x")
    b.output(b.op("relu", x))
    with pytest.raises(LayoutError, match="layout option"):
        compile_graph(b.graph, layout="NCWH")


def test_rule_figures():
    """The rule's shape classes (module doc): large-plane depthwise loses, small wins."""
    b = Builder()
    x = b.input((1, 32, 56, 56))
    y = conv(b, x, np.zeros((32, 1, 3, 3), np.float32), groups=32)
    z = b.input((1, 384, 14, 14))
    v = conv(b, z, np.zeros((384, 1, 3, 3), np.float32), groups=384)
    dw56, dw14 = y.producer, v.producer
    assert layout_pass.nhwc_ratio(dw56) > 1 > layout_pass.nhwc_ratio(dw14)
    assert layout_pass.nhwc_saving_ms(dw56) < 0 < layout_pass.nhwc_saving_ms(dw14)


# ---- models against eager ----------------------------------------------------------------------
class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.down = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNetLike(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        self.l1 = Block(16, 16, 1)
        self.l2 = Block(16, 24, 2)
        self.fc = nn.Linear(24, 10)

    def forward(self, x):
        y = self.l2(self.l1(self.stem(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))


class Inverted(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        mid = cin * expand
        self.body = nn.Sequential(
            nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU6(),
            nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False), nn.BatchNorm2d(mid),
            nn.ReLU6(), nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.res = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.res else self.body(x)


class MobileNetLike(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU6())
        self.b1 = Inverted(16, 16, 1, 3)
        self.b2 = Inverted(16, 24, 2, 4)
        self.b3 = Inverted(24, 24, 1, 4)
        self.fc = nn.Linear(24, 7)

    def forward(self, x):
        y = self.b3(self.b2(self.b1(self.stem(x))))
        return self.fc(F.adaptive_avg_pool2d(y, 1).flatten(1))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("make,hw", [(ResNetLike, 20), (ResNetLike, 16),
                                     (MobileNetLike, 18), (MobileNetLike, 32)])
def test_models_match_eager_symbolic_batch(make, hw, mode):
    model = randomize(make(), seed=hw)
    gen = torch.Generator().manual_seed(hw)
    c = tdsl.compile(model, torch.randn(2, 3, hw, hw, generator=gen), dynamic={0: "batch"},
                     options={"layout": mode})
    if mode == "NHWC":
        assert c.report.graph.passes.nhwc_convs > 0
    if mode == "NCHW":
        assert c.report.graph.passes.nhwc_convs == 0
    with torch.no_grad():
        for n in (3, 5):
            x = torch.randn(n, 3, hw, hw, generator=gen)
            close(c(x).numpy(), model(x), tol=1e-4)


def test_dynamo_backend_takes_layout_option():
    import torch._dynamo
    from tdsl.frontend import Backend
    torch._dynamo.reset()
    model = randomize(MobileNetLike(), seed=1)
    be = Backend({"layout": "NHWC"})
    f = torch.compile(model, backend=be)
    x = torch.randn(2, 3, 20, 20, generator=torch.Generator().manual_seed(1))
    try:
        with torch.no_grad():
            close(f(x).numpy(), model(x), tol=1e-4)
    finally:
        torch._dynamo.reset()
    rep = be.compiles[-1]
    assert not rep.eager, str(rep)
    assert rep.graph.passes.nhwc_convs > 0


def test_conv_output_also_graph_output_and_se_broadcast(rng):
    """A converted conv's NCHW result that is a graph output keeps its transpose; a
    squeeze-excite multiply by a (N, C, 1, 1) non-constant stops the sinking; both right."""
    b = Builder()
    x = b.input((tdsl.var("n"), 8, 9, 7), name="x")
    w1, w2 = rand(rng, 8, 1, 3, 3), rand(rng, 8, 8, 3, 3)
    y = conv(b, x, w1, groups=8)
    r = b.op("relu", y)
    se = b.op("sigmoid", b.op("adaptive_avg_pool2d", r, output_size=(1, 1)))
    z = b.op("mul", r, se)
    out = b.op("add", conv(b, z, w2), b.const(rand(rng, 8, 1, 1)))
    b.output(y)
    b.output(out)
    for mode in MODES:
        cg = compile_graph(b.graph, layout=mode)
        assert len(nhwc_convs(cg)) == (2 if mode == "NHWC" else 0 if mode == "NCHW" else
                                       len(nhwc_convs(cg)))
        for n in (1, 3):
            xa = rand(rng, n, 8, 9, 7)
            ry = ref_conv(t(xa), w1, groups=8)
            rr = F.relu(ry)
            rz = rr * torch.sigmoid(F.adaptive_avg_pool2d(rr, 1))
            got = cg(xa)
            close(got[0], ry)
            close(got[1], ref_conv(rz, w2) + t(b.graph.nodes[-1].inputs[1].const))


def test_transpose_with_two_elementwise_readers_is_not_duplicated(rng):
    """Sinking below both readers would leave a transpose per reader: it stays put."""
    b = Builder()
    x = b.input((2, 4, 6, 6), name="x")
    w = rand(rng, 4, 4, 3, 3)
    y = conv(b, x, w)
    b.output(b.op("max_pool2d", b.op("relu", y), kernel=(2, 2), stride=(2, 2),
                  padding=(0, 0, 0, 0), dilation=(1, 1), ceil_mode=False))
    b.output(b.op("sigmoid", y))
    cg = compile_graph(b.graph, layout="NHWC")
    assert count_transposes(cg.optimized) == 2
    xa = rand(rng, 2, 4, 6, 6)
    ry = ref_conv(t(xa), w)
    got = cg(xa)
    close(got[0], F.max_pool2d(F.relu(ry), 2))
    close(got[1], torch.sigmoid(ry))


def test_auto_keeps_nchw_for_a_gpu_target():
    # the rule is measured on the CPU kernels: a GPU compile keeps PyTorch's layout unless asked
    from tdsl.graph.runtime import _layout_for
    assert _layout_for("llvm", "auto") == "auto"
    assert _layout_for("cuda", "auto") == "NCHW"
    assert _layout_for("cuda", "NHWC") == "NHWC"
