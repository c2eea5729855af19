"""ops.attention on CUDA: the default schedule ("staged") and the first one ("thread": a
thread per query) are one fused kernel each, right under the CPU emulator (race-checked)
against PyTorch, and NVRTC compiles them for sm_80 and sm_90."""
import numpy as np
import pytest

import tdsl as td
from tdsl import ops
from tdsl.backends.cuda import nvrtc
from tdsl.ops.schedules.cuda_attention import StagedTiles, attention_schedule

torch = pytest.importorskip("torch", reason="PyTorch's SDPA is the reference")


def _build(causal, sq=5, sk=70, d=8, heads=2, target=None):
    q = td.placeholder((1, heads, sq, d), name="q")
    k = td.placeholder((1, heads, sk, d), name="k")
    v = td.placeholder((1, heads, sk, d), name="v")
    o = ops.attention(q, k, v, causal=causal, target=target)
    return td.build(ops.schedule(o, "cuda"), [q, k, v, o], target="cuda -arch=sm_80")


def _emulated_against_sdpa(f, causal, sq, sk, d=8, heads=2, seed=1):
    rng = np.random.default_rng(seed)
    a = [rng.standard_normal(s).astype("float32")
         for s in ((1, heads, sq, d), (1, heads, sk, d), (1, heads, sk, d))]
    out = np.full((1, heads, sq, d), 7.0, "float32")
    f.emulate(*a, out)
    ref = torch.nn.functional.scaled_dot_product_attention(
        *[torch.from_numpy(x) for x in a], is_causal=causal).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_one_fused_kernel_emulated_against_torch(causal):
    f = _build(causal)
    assert f.get_source().count("__global__") == 1
    _emulated_against_sdpa(f, causal, 5, 70)


def test_a_long_non_causal_key_sequence_with_the_cuda_key_block_emulated():
    """``target="cuda"``: the key block of 128 over 600 keys (a partial last block)."""
    f = _build(False, sq=3, sk=600, heads=1, target="cuda")
    _emulated_against_sdpa(f, False, 3, 600, heads=1, seed=3)


@pytest.mark.skipif(not nvrtc.is_available(), reason="NVRTC (cuda-python) is not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_compiles_it(arch):
    src = _build(True, sq=128, sk=512, d=64).get_source()
    assert nvrtc.compile_cuda(src, arch, "cubin")


#: What each schedule's source shows: the thread variant's K / V tiles (fetched as float4),
#: the staged one's score and probability tiles and its shuffled block max / sum.
MARKS = {"thread": ("k_shared", "v_shared", "float4"),
         "staged": ("T_attn_score[", "T_attn_prob[", "__shfl_xor_sync")}


def _emulate(q_shape, k_shape, causal=False, mask_shape=None, sizes=None, symbolic=False,
             variant="staged", tiles=None):
    """Build the CUDA attention ``variant`` (``symbolic``: seq_q and seq_k symbolic),
    emulate it at ``sizes`` (q, k shapes) and compare with PyTorch's SDPA."""
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
    sch = ops.schedule(o, "cuda") if variant == "staged" and tiles is None else \
        attention_schedule(o, variant, tiles)
    f = td.build(sch, [*args, o], target="cuda -arch=sm_80")
    src = f.get_source()
    assert src.count("__global__") == 1 and all(m in src for m in MARKS[variant])
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


VARIANTS = ["staged", "thread"]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("causal", [False, True])
def test_shared_tiles_at_sizes_the_tiles_do_not_divide(causal, variant):
    """37 queries, 130 keys: a partial query block (staged: 32 queries; thread: 64), a
    partial K / V tile and a partial key block, seq_q != seq_k."""
    _emulate((1, 2, 37, 64), (1, 2, 130, 64), causal=causal, variant=variant)


@pytest.mark.parametrize("tiles", [StagedTiles(4, 2), StagedTiles(8, 2)])
def test_staged_tiles_at_sizes_the_tiles_do_not_divide(tiles):
    """The staged schedule's other tiles (2 queries a thread in the score tile, 8 columns):
    37 queries, 130 keys, causal."""
    _emulate((1, 2, 37, 16), (1, 2, 130, 16), causal=True, tiles=tiles)


@pytest.mark.parametrize("variant", VARIANTS)
def test_shared_tiles_with_a_bool_mask(variant):
    _emulate((1, 2, 37, 16), (1, 2, 70, 16), mask_shape=(37, 70), variant=variant)


@pytest.mark.parametrize("variant", VARIANTS)
def test_shared_tiles_with_symbolic_sequences(variant):
    _emulate((1, 2, 0, 16), (1, 2, 0, 16), causal=True, symbolic=True, variant=variant,
             sizes=[((1, 2, 5, 16), (1, 2, 5, 16)), ((1, 2, 70, 16), (1, 2, 70, 16)),
                    ((1, 2, 130, 16), (1, 2, 130, 16))])


def test_staged_fully_masked_rows_and_a_long_key_block():
    """A bool mask that hides every key from some queries (zeros, as PyTorch's CPU SDPA),
    and 600 keys: the 256-key block of a long non-causal sequence (16 queries a block)."""
    rng = np.random.default_rng(3)
    q, k, v = (td.placeholder(s, name=x) for s, x in (((1, 1, 20, 8), "q"),
                                                       ((1, 1, 600, 8), "k"),
                                                       ((1, 1, 600, 8), "v")))
    mask = td.placeholder((20, 600), name="mask", dtype="bool")
    o = ops.attention(q, k, v, mask=mask)
    f = td.build(ops.schedule(o, "cuda"), [q, k, v, mask, o], target="cuda -arch=sm_80")
    assert "T_attn_score[" in f.get_source()
    a = [rng.standard_normal(s).astype("float32") for s in ((1, 1, 20, 8), (1, 1, 600, 8),
                                                              (1, 1, 600, 8))]
    mk = rng.random((20, 600)) < 0.5
    mk[[0, 7, 19]] = False
    out = np.full((1, 1, 20, 8), 7.0, "float32")
    f.emulate(*a, mk, out)
    ref = torch.nn.functional.scaled_dot_product_attention(
        *[torch.from_numpy(x) for x in a], attn_mask=torch.from_numpy(mk)).numpy()
    ref = np.nan_to_num(ref, nan=0.0)
    assert not np.isnan(out).any() and (out[0, 0, [0, 7, 19]] == 0).all()
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not nvrtc.is_available(), reason="NVRTC (cuda-python) is not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("d", [16, 64])
def test_thread_variant_no_spills_and_shared_tiles(arch, d):
    """The score and weighted-value loops stay rolled (``#pragma unroll 1``): fully
    unrolled at d 16 they held 128 scores live and spilled; the K / V tiles take 2 x 64
    keys x d floats of shared memory."""
    from tdsl.backends.cuda.static import analyze
    q, k, v = (td.placeholder((1, 2, n, d), name=x) for x, n in (("q", 37), ("k", 70),
                                                                  ("v", 70)))
    o = ops.attention(q, k, v)
    f = td.build(attention_schedule(o, "thread"), [q, k, v, o], target=f"cuda -arch={arch}")
    assert "#pragma unroll 1" in f.get_source()
    (ks,) = analyze(f)
    assert ks.spill_bytes == 0, ks.findings
    assert ks.shared_bytes == 2 * 64 * d * 4


@pytest.mark.skipif(not nvrtc.is_available(), reason="NVRTC (cuda-python) is not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("causal", [False, True])
def test_staged_static_figures(arch, causal):
    """The default at 12 heads x 1024 x d 64: no local memory (no stack frame, no spill) and
    more than one block resident per SM.  Causal (128-key blocks, 32 queries a block): no
    bank conflict and every global request coalesced.  Not causal (256-key blocks, so 16
    queries a block to fit the tiles): a warp spans two keys' rows of the score tile, so
    its K reads touch 2 sectors (2 rows) and its score / probability stores 2 ways."""
    from tdsl.backends.cuda.static import analyze
    q, k, v = (td.placeholder((1, 12, 1024, 64), name=x) for x in "qkv")
    o = ops.attention(q, k, v, causal=causal)
    f = td.build(ops.schedule(o, "cuda"), [q, k, v, o], target=f"cuda -arch={arch}")
    (ks,) = analyze(f, arch)
    assert ks.spill_bytes == 0 and ks.frame_bytes == 0, ks.findings
    worst = 1 if causal else 2
    assert ks.bank_ways <= worst and ks.sector_ratio <= worst, ks.findings
    assert ks.occupancy[arch].blocks_per_sm >= 2, ks.findings
    assert ks.shared_bytes <= 48 * 1024


@pytest.mark.parametrize("causal", [False, True])
def test_staged_fp16_emulated_against_torch(causal):
    """fp16 operands (tiles of half the bytes, half4 vector accesses): against PyTorch's
    SDPA in fp32 on the same fp16 inputs, within fp16's precision."""
    shapes = ((1, 2, 37, 16), (1, 2, 70, 16), (1, 2, 70, 16))
    q, k, v = (td.placeholder(s, "float16", name=x) for s, x in zip(shapes, "qkv"))
    o = ops.attention(q, k, v, causal=causal)
    f = td.build(ops.schedule(o, "cuda"), [q, k, v, o], target="cuda -arch=sm_80")
    assert "T_attn_score[" in f.get_source()
    rng = np.random.default_rng(5)
    a = [rng.standard_normal(s).astype("float16") for s in shapes]
    out = np.full(shapes[0], 7.0, "float16")
    f.emulate(*a, out)
    ref = torch.nn.functional.scaled_dot_product_attention(
        *[torch.from_numpy(x).float() for x in a], is_causal=causal).numpy()
    np.testing.assert_allclose(out.astype("float32"), ref, rtol=1e-2, atol=5e-3)


def test_bad_variant_and_tiles_are_schedule_errors():
    q, k = td.placeholder((1, 1, 8, 8), name="q"), td.placeholder((1, 1, 8, 8), name="k")
    o = ops.attention(q, k, k)
    with pytest.raises(td.TDSLError, match="variant must be"):
        attention_schedule(o, "warp")
    with pytest.raises(td.TDSLError, match="cols must be"):
        StagedTiles(cols=6)
    with pytest.raises(td.TDSLError, match="score_queries must be"):
        StagedTiles(score_queries=0)
    with pytest.raises(td.TDSLError, match="not the result of ops.attention"):
        attention_schedule(td.compute((4,), lambda i: q[0, 0, i, 0] * 2.0, name="x"))
