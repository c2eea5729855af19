"""ops.attention on CUDA: the default schedule is one fused kernel, right under the CPU
emulator (race-checked) against PyTorch, and NVRTC compiles it for sm_80 and sm_90."""
import numpy as np
import pytest

import tdsl as td
from tdsl import ops
from tdsl.backends.cuda import nvrtc

torch = pytest.importorskip("torch", reason="PyTorch's SDPA is the reference")


def _build(causal, sq=5, sk=70, d=8):
    q = td.placeholder((1, 2, sq, d), name="q")
    k = td.placeholder((1, 2, sk, d), name="k")
    v = td.placeholder((1, 2, sk, d), name="v")
    o = ops.attention(q, k, v, causal=causal)
    return td.build(ops.schedule(o, "cuda"), [q, k, v, o], target="cuda -arch=sm_80")


@pytest.mark.parametrize("causal", [False, True])
def test_one_fused_kernel_emulated_against_torch(causal):
    f = _build(causal)
    assert f.get_source().count("__global__") == 1
    rng = np.random.default_rng(1)
    a = [rng.standard_normal(s).astype("float32") for s in ((1, 2, 5, 8), (1, 2, 70, 8),
                                                              (1, 2, 70, 8))]
    out = np.full((1, 2, 5, 8), 7.0, "float32")
    f.emulate(*a, out)
    ref = torch.nn.functional.scaled_dot_product_attention(
        *[torch.from_numpy(x) for x in a], is_causal=causal).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not nvrtc.is_available(), reason="NVRTC (cuda-python) is not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_compiles_it(arch):
    src = _build(True, sq=128, sk=512, d=64).get_source()
    assert nvrtc.compile_cuda(src, arch, "cubin")


def _emulate(q_shape, k_shape, causal=False, mask_shape=None, sizes=None, symbolic=False):
    """Build the default CUDA attention (``symbolic``: seq_q and seq_k symbolic), emulate
    it at ``sizes`` (q, k shapes) and compare with PyTorch's SDPA."""
    if symbolic:
        n, m = td.var("n"), td.var("m")
        qs, ks = (*q_shape[:2], n, q_shape[3]), (*k_shape[:2], m, k_shape[3])
    else:
        qs, ks = q_shape, k_shape
    q, k, v = (td.placeholder(s, name=x) for s, x in ((qs, "q"), (ks, "k"), (ks, "v")))
    args = [q, k, v]
    mask = None
    if mask_shape is not None:
        mask = td.placeholder(mask_shape, name="mask", dtype="bool")
        args.append(mask)
    o = ops.attention(q, k, v, causal=causal, mask=mask)
    f = td.build(ops.schedule(o, "cuda"), [*args, o], target="cuda -arch=sm_80")
    src = f.get_source()
    assert "k_shared" in src and "v_shared" in src and "float4" in src
    rng = np.random.default_rng(7)
    for qsz, ksz in sizes or [(q_shape, k_shape)]:
        a = [rng.standard_normal(s).astype("float32") for s in (qsz, ksz, ksz)]
        t = [torch.from_numpy(x) for x in a]
        extra = []
        if mask_shape is not None:
            mk = rng.random(mask_shape) < 0.7
            extra = [mk]
            ref = torch.nn.functional.scaled_dot_product_attention(
                *t, attn_mask=torch.from_numpy(mk)).numpy()
        else:
            ref = torch.nn.functional.scaled_dot_product_attention(*t, is_causal=causal).numpy()
        out = np.full(ref.shape, 7.0, "float32")
        f.emulate(*a, *extra, out)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_shared_tiles_at_sizes_the_tiles_do_not_divide(causal):
    """K / V tiles of 64 keys in shared memory: 37 queries, 130 keys (a partial tile and a
    partial key block), seq_q != seq_k."""
    _emulate((1, 2, 37, 64), (1, 2, 130, 64), causal=causal)


def test_shared_tiles_with_a_bool_mask():
    _emulate((1, 2, 37, 16), (1, 2, 70, 16), mask_shape=(37, 70))


def test_shared_tiles_with_symbolic_sequences():
    _emulate((1, 2, 0, 16), (1, 2, 0, 16), causal=True, symbolic=True,
             sizes=[((1, 2, 5, 16), (1, 2, 5, 16)), ((1, 2, 70, 16), (1, 2, 70, 16)),
                    ((1, 2, 130, 16), (1, 2, 130, 16))])


@pytest.mark.skipif(not nvrtc.is_available(), reason="NVRTC (cuda-python) is not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("d", [16, 64])
def test_no_spills_and_shared_tiles(arch, d):
    """The score and weighted-value loops stay rolled (``#pragma unroll 1``): fully
    unrolled at d 16 they held 128 scores live and spilled; the K / V tiles take 2 x 64
    keys x d floats of shared memory."""
    from tdsl.backends.cuda.static import analyze
    q, k, v = (td.placeholder((1, 2, n, d), name=x) for x, n in (("q", 37), ("k", 70),
                                                                  ("v", 70)))
    o = ops.attention(q, k, v)
    f = td.build(ops.schedule(o, "cuda"), [q, k, v, o], target=f"cuda -arch={arch}")
    assert "#pragma unroll 1" in f.get_source()
    (ks,) = analyze(f)
    assert ks.spill_bytes == 0, ks.findings
    assert ks.shared_bytes == 2 * 64 * d * 4
