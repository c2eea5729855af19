"""The model zoo (tdsl.testing.models): each tiny model builds and runs in eager PyTorch, is
deterministic from its seed, has non-trivial norm statistics, and has the architecture it
claims (parameter counts of the full-sized models; transformer layers against PyTorch's own
TransformerEncoderLayer)."""
import importlib.util
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed: the model zoo is torch.nn")

from torch import nn  # noqa: E402

from tdsl.errors import ArgumentError  # noqa: E402
from tdsl.testing import models  # noqa: E402


@pytest.mark.parametrize("name", models.MODELS)
def test_tiny_model_runs_in_eval_mode(name):
    model, inputs = models.make(name, "tiny", batch=3)
    assert not model.training and all(not m.training for m in model.modules())
    with torch.no_grad():
        out = model(*inputs)
    assert out.shape[0] == 3 and torch.isfinite(out).all()
    assert out.abs().max() > 0.1 and out.std() > 0.1  # neither vanished nor constant


@pytest.mark.parametrize("name", models.MODELS)
def test_seed_determines_weights_inputs_and_output(name):
    torch.manual_seed(123)
    before = torch.get_rng_state()
    (m1, x1), (m2, x2) = models.make(name, "tiny", seed=5), models.make(name, "tiny", seed=5)
    assert torch.equal(torch.get_rng_state(), before)  # the global RNG is left alone
    m3, x3 = models.make(name, "tiny", seed=6)
    s1, s2, s3 = m1.state_dict(), m2.state_dict(), m3.state_dict()
    assert all(torch.equal(s1[k], s2[k]) for k in s1)
    assert any(not torch.equal(s1[k], s3[k]) for k in s1)
    assert all(torch.equal(a, b) for a, b in zip(x1, x2))
    assert not all(torch.equal(a, b) for a, b in zip(x1, x3))
    with torch.no_grad():
        assert torch.equal(m1(*x1), m2(*x2))


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_batch_norm_statistics_are_not_the_defaults(name):
    model, _ = models.make(name, "tiny")
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    assert bns
    for bn in bns:
        assert bn.running_mean.abs().min() > 0 and bn.running_mean.std() > 0.05
        assert (bn.running_var - 1).abs().max() > 0.1 and bn.running_var.min() >= 0.5
        assert bn.weight.std() > 0.05 and bn.bias.abs().max() > 0


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_layer_norms_are_not_identity(name):
    model, _ = models.make(name, "tiny")
    for ln in (m for m in model.modules() if isinstance(m, nn.LayerNorm)):
        assert (ln.weight - 1).abs().max() > 0.05 and ln.bias.abs().max() > 0


def test_tiny_cnns_have_the_strided_and_depthwise_layers():
    resnet, _ = models.make("resnet18", "tiny")
    downsample = [m.downsample for m in resnet.modules()
                  if isinstance(m, models.BasicBlock) and m.downsample is not None]
    assert len(downsample) == 3 and downsample[0][0].stride == (2, 2)
    assert downsample[0][0].kernel_size == (1, 1)
    mobile, _ = models.make("mobilenet_v2", "tiny")
    convs = [m for m in mobile.modules() if isinstance(m, nn.Conv2d)]
    assert any(c.groups == c.in_channels > 1 and c.stride == (2, 2) for c in convs)
    assert any(isinstance(m, nn.ReLU6) for m in mobile.modules())
    assert any(m.residual for m in mobile.modules() if isinstance(m, models.InvertedResidual))


@pytest.mark.parametrize("name, params", [("resnet18", 11_689_512),
                                          ("mobilenet_v2", 3_504_872),
                                          ("bert", 6 * 7_087_872),
                                          ("gpt2", 6 * 7_087_872 + 2 * 768)])
def test_full_sized_models_have_the_reference_parameter_counts(name, params):
    # torchvision's resnet18 / mobilenet_v2 and 6 layers of BERT-base / GPT-2 small.
    cfg = models.config(name, "bench")
    kwargs = {k: v for k, v in cfg.items() if k not in ("image", "seq")}
    with torch.device("meta"):
        model = models._CLASSES[name](**kwargs)
    assert sum(p.numel() for p in model.parameters()) == params


def _reference_layer(layer, norm_first: bool, activation) -> nn.TransformerEncoderLayer:
    """PyTorch's encoder layer holding the weights of a zoo layer."""
    hidden, ffn = layer.ln1.normalized_shape[0], layer.ln2.normalized_shape[0]
    ffn = (layer.ffn_in if hasattr(layer, "ffn_in") else layer.fc).out_features
    ref = nn.TransformerEncoderLayer(hidden, layer.heads, ffn, dropout=0.0,
                                     activation=activation, layer_norm_eps=layer.ln1.eps,
                                     batch_first=True, norm_first=norm_first).eval()
    with torch.no_grad():
        if hasattr(layer, "qkv"):
            ref.self_attn.in_proj_weight.copy_(layer.qkv.weight)
            ref.self_attn.in_proj_bias.copy_(layer.qkv.bias)
            pairs = [(layer.proj, ref.self_attn.out_proj), (layer.fc, ref.linear1),
                     (layer.fc_out, ref.linear2)]
        else:
            ref.self_attn.in_proj_weight.copy_(torch.cat(
                [layer.query.weight, layer.key.weight, layer.value.weight]))
            ref.self_attn.in_proj_bias.copy_(torch.cat(
                [layer.query.bias, layer.key.bias, layer.value.bias]))
            pairs = [(layer.attn_out, ref.self_attn.out_proj), (layer.ffn_in, ref.linear1),
                     (layer.ffn_out, ref.linear2)]
        pairs += [(layer.ln1, ref.norm1), (layer.ln2, ref.norm2)]
        for src, dst in pairs:
            dst.weight.copy_(src.weight)
            dst.bias.copy_(src.bias)
    return ref


def test_bert_layer_is_a_post_ln_encoder_layer():
    model, (x,) = models.make("bert", "tiny", batch=2)
    layer = model.layers[0]
    ref = _reference_layer(layer, norm_first=False, activation="gelu")
    with torch.no_grad():
        torch.testing.assert_close(layer(x), ref(x), rtol=1e-5, atol=1e-5)


def test_gpt2_block_is_a_pre_ln_causal_layer_with_tanh_gelu():
    model, (x,) = models.make("gpt2", "tiny", batch=2)
    block = model.blocks[0]
    ref = _reference_layer(block, norm_first=True,
                           activation=lambda t: nn.functional.gelu(t, approximate="tanh"))
    mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
    with torch.no_grad():
        torch.testing.assert_close(block(x), ref(x, src_mask=mask, is_causal=True),
                                   rtol=1e-5, atol=1e-5)
        # causal: the first position does not see the later ones
        y = x.clone()
        y[:, 1:] += 1.0
        torch.testing.assert_close(block(x)[:, 0], block(y)[:, 0])


def test_transformers_with_embeddings_and_heads():
    model, (ids,) = models.make("gpt2", "tiny", batch=2, seq=5, vocab=50, head="tied")
    assert ids.dtype == torch.int64 and ids.shape == (2, 5) and int(ids.max()) < 50
    with torch.no_grad():
        assert model(*ids.unsqueeze(0)).shape == (2, 5, 50)
    model, (ids,) = models.make("gpt2", "tiny", seq=4, head=7)
    assert model(ids).shape == (1, 4, 7)
    model, (ids,) = models.make("bert", "tiny", batch=2, vocab=30)
    assert model(ids).shape == (2, 8, 32)


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ArgumentError, match="unknown model 'vgg'"):
        models.make("vgg", "tiny")
    with pytest.raises(ArgumentError, match="unknown size 'huge'"):
        models.make("mlp", "huge")
    with pytest.raises(ArgumentError, match="batch 0"):
        models.make("mlp", "tiny", batch=0)
    with pytest.raises(ArgumentError, match="head='tied' needs a vocab"):
        models.make("gpt2", "tiny", head="tied")
    with pytest.raises(ArgumentError, match="not a multiple of heads"):
        models.make("bert", "tiny", heads=5)
    with pytest.raises(ArgumentError, match="activation 'swish'"):
        models.make("mlp", "tiny", activation="swish")


def _bench_models():
    """benchmarks/models.py as a module (it imports its sibling timing.py)."""
    bench = Path(__file__).resolve().parents[1] / "benchmarks"
    saved = list(sys.path)
    sys.path.insert(0, str(bench))
    try:
        spec = importlib.util.spec_from_file_location("bench_models", bench / "models.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules["bench_models"] = mod  # dataclasses look their module up there
        spec.loader.exec_module(mod)
    finally:
        sys.path[:] = saved
    return mod


def test_benchmark_error_is_relative_to_the_output_scale():
    bench = _bench_models()
    ref = (torch.tensor([100.0, -200.0]), torch.tensor([1.0]))
    assert bench.rel_error((torch.tensor([100.0, -198.0]), torch.tensor([1.5])), ref) == 0.01
    assert bench.rel_error(torch.zeros(2), ref) == float("inf")  # a different structure


def test_benchmark_table_lists_what_did_not_run_and_why():
    bench = _bench_models()
    row = bench.Row("mlp", 1, 8, {"eager": bench.Cell(ms=2.0, err=0.0),
                                  "inductor": bench.Cell(ms=1.0, compile_s=10.0, err=1e-7),
                                  "tdsl": bench.Cell(note="fail: KeyError: 'x'"),
                                  "tuned": bench.Cell(note="n/a: no --db given")})
    text = bench.table([row])
    assert "| mlp | 1 | 8 | 2.00 | 1.00 | 2.00 | 10.0 | 1.0e-07 | fail [1] |" in text
    assert "[1] mlp thr=1 batch=8 tdsl: fail: KeyError: 'x'" in text
    assert "tuned: n/a: no --db given" in text and "geomean inductor vs eager: 2.00×" in text


def test_benchmark_cpu_time_needs_one_thread():
    """--cpu-time reads the calling thread's clock: with 2 threads the work it would miss
    runs on other threads, so the option is refused rather than reading low."""
    bench = _bench_models()
    assert bench.parse(["--cpu-time", "--threads", "1"]).cpu_time
    with pytest.raises(SystemExit):
        bench.parse(["--cpu-time", "--threads", "1", "2"])
