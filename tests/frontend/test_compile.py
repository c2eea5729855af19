"""tdsl.compile: tiny CNN / transformer block / MLP vs eager, one compile for batch 3, 8, 17
and 1 (symbolic batch), fallbacks, and the errors of bad inputs."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import tdsl  # noqa: E402
from tdsl.errors import DTypeError, ShapeError  # noqa: E402
from tdsl.frontend import FrontendError  # noqa: E402

from ._models import MLP, Block, SmallCNN, WithCumprod, randomize_bn, rel_err  # noqa: E402

BATCHES = (3, 8, 17, 1)
TOL = 1e-4


@pytest.fixture(scope="module")
def counted():
    """Counts compile_graph calls (a symbolic batch must need one)."""
    import tdsl.graph.runtime as rt
    calls = []
    orig = rt.compile_graph

    def wrapper(*a, **k):
        calls.append(1)
        return orig(*a, **k)
    rt.compile_graph = wrapper
    yield calls
    rt.compile_graph = orig


def _check_batches(model, compiled, make):
    g = torch.Generator().manual_seed(7)
    for b in BATCHES:
        x = make(b, g)
        with torch.no_grad():
            ref = model(x)
        out = compiled(x)
        assert out.shape == ref.shape
        assert rel_err(out, ref) <= TOL, (b, rel_err(out, ref))


def test_cnn_dynamic_batch_one_compile(counted):
    model = randomize_bn(SmallCNN())
    n0 = len(counted)
    c = tdsl.compile(model, torch.randn(2, 3, 16, 16), dynamic={0: "batch"})
    _check_batches(model, c, lambda b, g: torch.randn(b, 3, 16, 16, generator=g))
    assert len(counted) - n0 == 1
    text = str(c.graph)
    assert "conv2d" in text and "batch" in text
    assert c.report.fallbacks == {}


def test_transformer_block_dynamic_batch(counted):
    model = Block().eval()
    n0 = len(counted)
    c = tdsl.compile(model, torch.randint(0, 40, (2, 6)), dynamic=[{0: "batch"}])
    _check_batches(model, c, lambda b, g: torch.randint(0, 40, (b, 6), generator=g))
    assert len(counted) - n0 == 1
    assert c.report.fallbacks == {}


def test_mlp_static_and_zero_copy_outputs():
    model = MLP().eval()
    x = torch.randn(5, 20)
    c = tdsl.compile(model, x)
    out = c(x)
    with torch.no_grad():
        assert rel_err(out, model(x)) <= TOL
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    out2 = c(x)
    assert out2.data_ptr() != out.data_ptr()           # a fresh output each call
    # a non-contiguous input is made contiguous first
    xt = torch.randn(20, 5).t()
    with torch.no_grad():
        assert rel_err(c(xt), model(xt)) <= TOL
    with pytest.raises(ShapeError, match="compiled for 5"):
        c(torch.randn(6, 20))                           # static batch
    with pytest.raises(DTypeError):
        c(torch.randn(5, 20, dtype=torch.float64))


def test_unmapped_op_falls_back_right_answer():
    model = WithCumprod().eval()
    c = tdsl.compile(model, torch.randn(3, 6), dynamic={0: "n"})
    for b in (3, 1, 4):
        x = torch.randn(b, 6)
        with torch.no_grad():
            assert rel_err(c(x), model(x)) <= TOL
    assert c.report.fallbacks == {"aten.cumprod.default": 1}
    assert "cumprod" in str(c.report) and "cumprod" in str(c.graph)
    text = str(c.report.graph)          # the graph's report reads as text, not a repr
    assert "CompileReport(" not in text and "aten.cumprod.default x1" in text
    assert f"kernels: {c.report.graph.kernels} " in text


def test_compile_passes_under_warnings_as_errors():
    """torch's run_decompositions warns about its own deprecated pytree API; a user who runs
    with -W error (or a notebook that shows every warning) must not see it through tdsl."""
    import warnings
    model = MLP((4, 3)).eval()
    x = torch.randn(2, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        c = tdsl.compile(model, x)
    with torch.no_grad():
        assert rel_err(c(x), model(x)) <= TOL


def test_weights_are_snapshotted():
    model = MLP((4, 3)).eval()
    x = torch.randn(2, 4)
    c = tdsl.compile(model, x)
    with torch.no_grad():
        ref = model(x)
        model.layers[0].weight.add_(1.0)                # after compile: not seen
    assert rel_err(c(x), ref) <= TOL


def test_multiple_inputs_and_outputs_shared_dim_name():
    def f(a, b):
        return torch.relu(a @ b), (a * 2).sum(-1)
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    c = tdsl.compile(f, (a, b), dynamic=[{0: "m"}, None])
    for m in (3, 7):
        a = torch.randn(m, 4)
        o1, o2 = c(a, b)
        r1, r2 = f(a, b)
        assert rel_err(o1, r1) <= TOL and rel_err(o2, r2) <= TOL


def test_bad_arguments():
    with pytest.raises(FrontendError, match="example_inputs"):
        tdsl.compile(MLP(), 3)
    with pytest.raises(FrontendError, match="no dimension"):
        tdsl.compile(MLP(), torch.randn(2, 20), dynamic={5: "batch"})
    with pytest.raises(FrontendError, match="dynamic has"):
        tdsl.compile(MLP(), torch.randn(2, 20), dynamic=[{0: "b"}, {0: "b"}])
    bn = torch.nn.Sequential(torch.nn.BatchNorm2d(3)).train()
    with pytest.raises(FrontendError, match="eval"):
        tdsl.compile(bn, torch.randn(2, 3, 4, 4))


def test_fallback_with_symbolic_arguments():
    """arange(seq) over a symbolic seq runs in PyTorch with seq bound from the input."""
    def f(x):
        return x * torch.arange(x.shape[1], dtype=torch.float32) + 1.0
    c = tdsl.compile(f, torch.randn(2, 5), dynamic={1: "seq"})
    for s in (5, 3, 9):
        x = torch.randn(2, s)
        assert rel_err(c(x), f(x)) <= TOL, s
    assert list(c.report.fallbacks) == ["aten.arange.start_step"]


class _PositionalSlices(torch.nn.Module):
    """GPT-2's pattern: a position table and a causal buffer sliced to the input's length."""

    def __init__(self):
        super().__init__()
        self.pos = torch.nn.Parameter(torch.randn(64, 16))
        self.lin = torch.nn.Linear(16, 16)
        self.register_buffer("tri", torch.tril(torch.ones(64, 64)).view(1, 64, 64))

    def forward(self, x):
        t = x.shape[1]
        h = self.lin(x + self.pos[:t])
        s = (h @ h.transpose(1, 2)).masked_fill(self.tri[:, :t, :t] == 0, float("-inf"))
        return torch.softmax(s, -1) @ h


def test_slices_to_a_symbolic_length_fall_back():
    """A slice whose bound is a symbolic size (``pos[:x.shape[1]]``) runs in PyTorch, with
    the size bound from the input (it crashed the importer with a TypeError)."""
    m = _PositionalSlices().eval()
    c = tdsl.compile(m, torch.randn(2, 10, 16),
                     dynamic={1: torch.export.Dim("seq", max=63)})
    assert c.report.fallbacks == {"aten.slice.Tensor": 3}
    for s in (10, 7, 33):
        x = torch.randn(2, s, 16)
        assert rel_err(c(x), m(x)) <= TOL, s


def test_export_dim_objects_name_the_symbol():
    def f(x):
        return torch.tanh(x) * 3.0
    c = tdsl.compile(f, torch.randn(4, 3), dynamic={0: torch.export.Dim("rows")})
    assert "rows" in str(c.graph)
    for n in (4, 2, 9):
        x = torch.randn(n, 3)
        assert rel_err(c(x), f(x)) <= TOL
