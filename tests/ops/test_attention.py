"""ops.attention against PyTorch's scaled_dot_product_attention (CPU, fp32): causal and
not, bool and additive masks, seq_q != seq_k, lengths that do and don't divide the key
block, symbolic sizes bound to several values, fully masked rows, the decode shape; the
lowered IR keeps one pass over the keys with no seq_q x seq_k buffer; the auto-scheduler's
candidates are right."""
import random

import numpy as np
import pytest

import tdsl as td
from tdsl import ops
from tdsl.expr import Const
from tdsl.ops.attention import BLOCK_K, BLOCK_K_LONG, LONG_SEQ_K, default_block_k
from tdsl.ops.schedules.llvm_attention import QUERY_VECTORS
from tdsl.stmt import Allocate
from tdsl.visitor import post_order_visit

torch = pytest.importorskip("torch", reason="PyTorch's SDPA is the reference")
F = torch.nn.functional
RNG = np.random.default_rng(24)


def _arrays(*shapes):
    return [RNG.standard_normal(s).astype("float32") for s in shapes]


def _sdpa(q, k, v, **kw):
    t = [torch.from_numpy(x) for x in (q, k, v)]
    if isinstance(kw.get("attn_mask"), np.ndarray):
        kw["attn_mask"] = torch.from_numpy(kw["attn_mask"])
    return F.scaled_dot_product_attention(*t, **kw).numpy()


def _run(f, arrays, shape):
    out = np.full(shape, 7.0, "float32")     # junk: a kernel that skips elements fails
    f(*arrays, out)
    return out


def _declare(B, H, Sq, Sk, D):
    q = td.placeholder((B, H, Sq, D), name="q")
    k = td.placeholder((B, H, Sk, D), name="k")
    v = td.placeholder((B, H, Sk, D), name="v")
    return q, k, v


@pytest.mark.parametrize("causal", [False, True])
def test_symbolic_sizes_bound_to_several_values(causal):
    """One build, symbolic batch and both sequence lengths: Sq != Sk either way, lengths
    under, at and over a query block and the key block (128), tail blocks, one query."""
    B, Sq, Sk = td.var("B"), td.var("Sq"), td.var("Sk")
    q, k, v = _declare(B, 2, Sq, Sk, 16)
    o = ops.attention(q, k, v, causal=causal)
    f = td.build(ops.schedule(o, "llvm"), [q, k, v, o], target="llvm")
    for b, sq, sk in [(1, 5, 7), (2, 37, 130), (1, 128, 128), (1, 130, 37), (1, 1, 300)]:
        a = _arrays((b, 2, sq, 16), (b, 2, sk, 16), (b, 2, sk, 16))
        got = _run(f, a, (b, 2, sq, 16))
        np.testing.assert_allclose(got, _sdpa(*a, is_causal=causal), rtol=1e-4, atol=1e-5,
                                   err_msg=f"B={b} Sq={sq} Sk={sk}")


def test_bool_mask_with_fully_masked_rows_and_scale():
    """A (Sq, Sk) boolean mask (True: the key takes part) with whole rows False: PyTorch
    2.13's CPU SDPA gives zeros there, and so do we (not NaN)."""
    Sq, Sk = 20, 70
    q, k, v = _declare(2, 3, Sq, Sk, 8)
    m = td.placeholder((Sq, Sk), "bool", name="m")
    o = ops.attention(q, k, v, mask=m, scale=0.3)
    f = td.build(ops.schedule(o, "llvm"), [q, k, v, m, o], target="llvm")
    a = _arrays((2, 3, Sq, 8), (2, 3, Sk, 8), (2, 3, Sk, 8))
    mask = RNG.random((Sq, Sk)) < 0.6
    mask[[0, 7, 19]] = False
    expected = _sdpa(*a, attn_mask=mask, scale=0.3)
    assert np.all(expected[:, :, 7] == 0)          # what PyTorch does with such a row
    got = _run(f, a + [mask], (2, 3, Sq, 8))
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_additive_mask_broadcast_over_heads():
    """A (B, 1, Sq, Sk) float mask added to the scores, with -inf entries and a row of
    -inf, and a row whose first key block is all -inf; Sk a multiple of the block, Sq not."""
    B, Sq, Sk = 2, 9, 256
    q, k, v = _declare(B, 4, Sq, Sk, 16)
    m = td.placeholder((B, 1, Sq, Sk), name="m")
    o = ops.attention(q, k, v, mask=m)
    f = td.build(ops.schedule(o, "llvm"), [q, k, v, m, o], target="llvm")
    a = _arrays((B, 4, Sq, 16), (B, 4, Sk, 16), (B, 4, Sk, 16))
    mask = RNG.standard_normal((B, 1, Sq, Sk)).astype("float32") * 3
    mask[RNG.random(mask.shape) < 0.3] = -np.inf
    mask[1, 0, 4] = -np.inf
    mask[0, 0, 2, :128] = -np.inf                   # a whole key block masked for a row
    got = _run(f, a + [mask], (B, 4, Sq, 16))
    np.testing.assert_allclose(got, _sdpa(*a, attn_mask=mask), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", ["bool", "add"])
def test_causal_with_a_mask(kind):
    """causal=True and a mask together (PyTorch 2.13 takes both: a key takes part where
    both allow it); Sq > Sk, so causality alone masks no row but the mask does."""
    Sq, Sk = 40, 30
    q, k, v = _declare(1, 2, Sq, Sk, 8)
    m = td.placeholder((Sq, Sk), "bool" if kind == "bool" else "float32", name="m")
    o = ops.attention(q, k, v, mask=m, causal=True)
    f = td.build(ops.schedule(o, "llvm"), [q, k, v, m, o], target="llvm")
    a = _arrays((1, 2, Sq, 8), (1, 2, Sk, 8), (1, 2, Sk, 8))
    if kind == "bool":
        mask = RNG.random((Sq, Sk)) < 0.6
        mask[5] = False
    else:
        mask = RNG.standard_normal((Sq, Sk)).astype("float32")
        mask[5] = -np.inf
    expected = _sdpa(*a, attn_mask=mask, is_causal=True)
    got = _run(f, a + [mask], (1, 2, Sq, 8))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("sk", [4096, 1300])
def test_decode_shape(sk):
    """One query against a long key sequence (seq_q 1), several heads: the keys split into
    parts reduced in parallel, then merged (1300 keys: 11 blocks in 2 uneven parts)."""
    q, k, v = _declare(1, 3, 1, sk, 64)
    o = ops.attention(q, k, v)
    s = ops.schedule(o, "llvm")
    assert "T_attn_merge.v0.rf" in str(td.lower(s, [q, k, v, o]))      # split-K
    f = td.build(s, [q, k, v, o], target="llvm")
    a = _arrays((1, 3, 1, 64), (1, 3, sk, 64), (1, 3, sk, 64))
    a[1] *= 2.0                                     # peaked scores: the merge rescales
    np.testing.assert_allclose(_run(f, a, (1, 3, 1, 64)), _sdpa(*a), rtol=1e-4, atol=1e-5)


def _allocations(func):
    found = []
    post_order_visit(func.body, lambda n: found.append(n.buffer)
                     if isinstance(n, Allocate) else None)
    return found


@pytest.mark.parametrize("symbolic", [False, True])
def test_lowered_ir_has_no_seq_q_by_seq_k_buffer(symbolic):
    """Every buffer the default schedule allocates is a tile of constant size, far below
    seq_q x seq_k (with symbolic lengths: no allocation depends on them)."""
    Sq, Sk = (td.var("Sq"), td.var("Sk")) if symbolic else (512, 1024)
    q, k, v = _declare(1, 2, Sq, Sk, 64)
    o = ops.attention(q, k, v, causal=True)
    func = td.lower(ops.schedule(o, "llvm"), [q, k, v, o])
    bufs = _allocations(func)
    names = {b.name for b in bufs}
    assert {"T_attn_score", "T_attn_prob", "T_attn_merge.v2"} <= names, names
    for b in bufs:
        assert all(isinstance(e, Const) for e in b.shape), (b.name, b.shape)
        size = int(np.prod([e.value for e in b.shape]))
        # a tile: key block x query block (at most 2 vectors of 16 lanes; with symbolic
        # lengths, bounds inference keeps the 2 heads of the fused parallel loop in the
        # tile's shape)
        assert size <= 2 * 128 * QUERY_VECTORS * 16, (b.name, b.shape)


def test_one_pass_over_the_keys():
    """The keys and values are read inside the merge's key-block loop only: ``k`` and
    ``v`` appear in one loop nest under one loop over key blocks (no second pass)."""
    q, k, v = _declare(1, 1, 256, 1024, 32)
    o = ops.attention(q, k, v)
    text = str(td.lower(ops.schedule(o, "llvm"), [q, k, v, o]))
    blocks = 1024 // default_block_k(256, 1024, False)
    assert text.count(f"for kb in range({blocks})") == 1, text


def test_key_block_rule():
    """Non-causal attention over many keys takes the long key block; causal, short,
    symbolic and decode keep the default one."""
    assert default_block_k(512, 512, False) == BLOCK_K_LONG
    assert default_block_k(td.var("Sq"), 4096, False) == BLOCK_K_LONG
    assert default_block_k(512, 512, True) == BLOCK_K
    assert default_block_k(512, LONG_SEQ_K - 1, False) == BLOCK_K
    assert default_block_k(512, td.var("Sk"), False) == BLOCK_K
    assert default_block_k(1, 4096, False) == BLOCK_K


def test_key_block_rule_for_a_cuda_target():
    """On CUDA the long key block is off (it halved the staged kernel's speed on an H200);
    ``ops.attention(target=)`` declares with the target's rule, a bad target is refused."""
    from tdsl.target import as_target
    for t in ("cuda", "cuda -arch=sm_90", as_target("cuda -arch=sm_80")):
        assert default_block_k(512, 4096, False, t) == BLOCK_K
    assert default_block_k(512, 4096, False, "llvm") == BLOCK_K_LONG
    q, k, v = _declare(1, 1, 8, 1024, 16)
    for target, block in (("cuda", BLOCK_K), ("llvm", BLOCK_K_LONG), (None, BLOCK_K_LONG)):
        o = ops.attention(q, k, v, target=target)
        text = str(td.lower(ops.schedule(o, "llvm"), [q, k, v, o]))
        assert f"for kb in range({1024 // block})" in text, (target, text)
    with pytest.raises(td.TDSLError, match="unknown target"):
        ops.attention(q, k, v, target="tpu")


@pytest.mark.parametrize("sq,sk,mask", [(70, 600, None), (300, 520, "bool"), (33, 777, "add")])
def test_long_key_block_matches_torch(sq, sk, mask):
    """The long key block (lengths that don't divide it nor the 2-vector query block), with
    and without masks."""
    q, k, v = _declare(1, 2, sq, sk, 64)
    kw, mk, args = {}, None, []
    if mask == "bool":
        mk = td.placeholder((sq, sk), "bool", name="m")
        m = RNG.random((sq, sk)) < 0.7
        kw, args = {"attn_mask": m}, [m]
    elif mask == "add":
        mk = td.placeholder((1, 2, sq, sk), name="m")
        m = RNG.standard_normal((1, 2, sq, sk)).astype("float32")
        kw, args = {"attn_mask": m}, [m]
    o = ops.attention(q, k, v, mask=mk)
    args_t = [q, k, v] + ([mk] if mk is not None else []) + [o]
    text = str(td.lower(ops.schedule(o, "llvm"), args_t))
    assert f"for kb in range({-(-sk // BLOCK_K_LONG)})" in text
    f = td.build(ops.schedule(o, "llvm"), args_t, target="llvm")
    a = _arrays((1, 2, sq, 64), (1, 2, sk, 64), (1, 2, sk, 64))
    got = _run(f, a + args, (1, 2, sq, 64))
    np.testing.assert_allclose(got, _sdpa(*a, **kw), rtol=1e-4, atol=1e-5)


def test_bad_inputs_are_named():
    q, k, v = _declare(1, 2, 8, 8, 16)
    with pytest.raises(td.ShapeError, match="4-D"):
        ops.attention(td.placeholder((2, 8, 16), name="q3"), k, v)
    with pytest.raises(td.ShapeError, match="head sizes"):
        ops.attention(q, td.placeholder((1, 2, 8, 4), name="kk"), v)
    with pytest.raises(td.DTypeError, match="float"):
        ops.attention(td.placeholder((1, 2, 8, 16), "int32", name="qi"), k, v)
    with pytest.raises(td.ShapeError, match="broadcast"):
        ops.attention(q, k, v, mask=td.placeholder((8, 5), name="m"))
    with pytest.raises(td.DTypeError, match="mask"):
        ops.attention(q, k, v, mask=td.placeholder((8, 8), "int32", name="mi"))


def test_auto_scheduler_candidates_match_torch():
    """The tuner's sketch space covers the attention's stages; random points of it build
    and match PyTorch."""
    from tdsl import autotune
    from tdsl.autotune.replay import replay
    q, k, v = _declare(1, 2, 20, 70, 16)
    o = ops.attention(q, k, v, causal=True)
    task = autotune.create_auto_task([q, k, v, o])
    assert "T_attn.rows" in task.space.names, task.space.names   # the FUSED rule's knobs
    a = _arrays((1, 2, 20, 16), (1, 2, 70, 16), (1, 2, 70, 16))
    expected = _sdpa(*a, is_causal=True)
    r = random.Random(3)
    for _ in range(2):
        cfg = [r.randrange(len(task.space.knobs[n].entities)) for n in task.space.names]
        c = task.candidate(cfg)
        assert c.valid, (c.config, c.error)
        f = td.build(replay(c.trace, task.outputs), task.args, target="llvm")
        np.testing.assert_allclose(_run(f, a, (1, 2, 20, 16)), expected, rtol=1e-4,
                                   atol=1e-5, err_msg=str(c.config))


def test_merge_computes_one_exponential():
    """The online-softmax merge's rescale factors share one exponential (one side's factor
    is 1): two would double the merge's share of the exponentials."""
    from tdsl.expr import Call, Intrinsic
    from tdsl.ops.attention import _merge
    from tdsl.structural import structural_hash
    xs = [td.var(n, "float32") for n in ("m1", "l1", "a1", "m2", "l2", "a2")]
    exps = set()

    def visit(n):
        if isinstance(n, Call) and n.func is Intrinsic.EXP:
            exps.add(structural_hash(n))
    for e in _merge(tuple(xs[:3]), tuple(xs[3:])):
        post_order_visit(e, visit)
    assert len(exps) == 1, exps
