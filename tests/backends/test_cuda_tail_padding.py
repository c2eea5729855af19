"""Tails of the default tiled CUDA kernels (tdsl/lowering/padding.py): at sizes the block
and thread tiles do not divide, the register FMAs of the innermost k loop carry no guard;
the fetches into shared memory zero-fill what lies outside the arrays and the final stores
are guarded.  Checked on the emitted source (its block structure, parsed), under NVRTC
(no spills) and under the emulator against NumPy on random data."""
from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

import tdsl as td
from tdsl import ops
from tdsl.backends.cuda import nvrtc
from tdsl.backends.cuda.cubin import kernel_resources
from tdsl.expr import Const, Select
from tdsl.stmt import BufferStore, StorageScope
from tdsl.visitor import post_order_visit

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")
needs_nvrtc = pytest.mark.skipif(not nvrtc.is_available(), reason="NVRTC (cuda-python) is not installed")

_FMA = re.compile(r"^(\w+)\[([^\]]+)\] = \1\[\2\] \+ \w+\[[^\]]+\] \* \w+\[[^\]]+\];$")


def kernel_blocks(src: str) -> list[tuple[str, list[str]]]:
    """Each statement of the kernel bodies in ``src`` with the headers of the blocks
    (``for (...)``, ``if (...)``, ``else``) around it, innermost last."""
    out: list[tuple[str, list[str]]] = []
    stack: list[str] = []
    inside = False
    for raw in src.splitlines():
        line = raw.strip()
        if not inside:
            if line.startswith('extern "C" __global__'):
                inside, stack = True, []
            continue
        if line.endswith("{"):
            stack.append(line[:-1].strip())
        elif line == "}":
            if not stack:
                inside = False
                continue
            stack.pop()
        elif line and not line.startswith(("//", "#pragma")):
            out.append((line, list(stack)))
    return out


def fma_headers(src: str) -> list[list[str]]:
    """The enclosing block headers of every register FMA ``acc[i] = acc[i] + a * b``."""
    found = [h for line, h in kernel_blocks(src) if _FMA.match(line)]
    assert found, "no register FMA found in the kernel"
    return found


def assert_unguarded_fmas(src: str) -> None:
    for headers in fma_headers(src):
        assert any(h.startswith("for (") for h in headers[1:]), headers   # inside a k loop
        ifs = [h for h in headers if h.startswith(("if (", "else"))]
        assert not ifs, f"guard around the register FMA: {ifs}"


def assert_guarded_stores(src: str, out: str) -> None:
    stores = [h for line, h in kernel_blocks(src)
              if line.startswith((f"{out}[", f"tdsl_vstore({out} "))]
    assert stores and all(any(x.startswith(("if (", "else")) for x in h) for h in stores)


def zero_fills(f) -> list[str]:
    """Shared buffers a fetch zero-fills (``X[i] = if_then_else(c, v, 0)``)."""
    names = []

    def fn(n):
        if isinstance(n, BufferStore) and n.buffer.scope is StorageScope.SHARED and \
                isinstance(n.value, Select) and isinstance(n.value.false_value, Const) and \
                n.value.false_value.value == 0:
            names.append(n.buffer.name)
    for k in f.kernels:
        post_order_visit(k.root, fn)
    return names


def _build(args, arch="sm_90"):
    return td.build(ops.schedule(args[-1], "cuda"), list(args), target=f"cuda -arch={arch}")


def _matmul(M, N, K):
    A, B = td.placeholder((M, K), name="A"), td.placeholder((K, N), name="B")
    return [A, B, ops.matmul(A, B)]


def _dense(M, N, K):
    X, W = td.placeholder((M, K), name="X"), td.placeholder((N, K), name="W")
    b = td.placeholder((N,), name="b")
    return [X, W, b, ops.dense(X, W, b, activation="relu")]


def _conv(shape, co, k=3, stride=1, pad=1):
    D = td.placeholder(shape, name="D")
    K = td.placeholder((co, shape[1], k, k), name="K")
    return [D, K, ops.conv2d(D, K, stride=stride, padding=pad)]


# ---- the emitted structure ---------------------------------------------------------------------
@pytest.mark.parametrize("M,N,K", [(1000, 1000, 1000), (1023, 1021, 517), (77, 300, 33)])
def test_matmul_tail_fmas_unguarded_fetch_zero_filled_store_guarded(M, N, K):
    f = _build(_matmul(M, N, K))
    src = f.get_source()
    assert_unguarded_fmas(src)
    assert_guarded_stores(src, "T_matmul")
    assert {"A.shared", "B_pack"} <= set(zero_fills(f))


def test_dense_symbolic_rows_and_batch_matmul_tail_fmas_unguarded():
    n = td.var("n")
    f = _build(_dense(n, 100, 20))
    assert_unguarded_fmas(f.get_source())
    assert_guarded_stores(f.get_source(), "T_relu")
    P, Q = td.placeholder((3, 18, 12), name="P"), td.placeholder((3, 12, 40), name="Q")
    f = _build([P, Q, ops.batch_matmul(P, Q)])
    assert_unguarded_fmas(f.get_source())
    assert_guarded_stores(f.get_source(), "T_batch_matmul")


@pytest.mark.parametrize("shape,co,stride", [((1, 16, 30, 30), 32, 1), ((2, 8, 13, 11), 20, 2)])
def test_conv_tail_fmas_unguarded(shape, co, stride):
    f = _build(_conv(shape, co, stride=stride))
    src = f.get_source()
    assert_unguarded_fmas(src)
    assert_guarded_stores(src, "T_conv2d")
    assert zero_fills(f)


def test_parser_sees_a_guard_inside_the_k_loop():
    """The structure check is not vacuous: a hand-written guarded FMA is reported."""
    src = ('extern "C" __global__ void k(float* C) {\n  float acc[4];\n'
           '  for (int k = 0; k < 9; ++k) {\n    for (int i = 0; i < 4; ++i) {\n'
           '      if (i < n) {\n        acc[i] = acc[i] + a[k] * b[i];\n      }\n    }\n  }\n}\n')
    with pytest.raises(AssertionError, match="guard around the register FMA"):
        assert_unguarded_fmas(src)


# ---- NVRTC ------------------------------------------------------------------------------------
@needs_nvrtc
@pytest.mark.parametrize("make,frame", [
    (lambda: _matmul(1000, 1000, 1000), 0), (lambda: _dense(77, 1000, 1000), 0),
    (lambda: _conv((1, 64, 30, 30), 64), 0),
    # odd row strides: every fetch is a scalar 4-byte cp.async with its own address and
    # zero-fill predicate, one register over the 128 of two blocks per SM (536 B of
    # local memory when the FMAs were guarded)
    (lambda: _matmul(1023, 1021, 517), 8)])
def test_tail_kernels_assemble_without_spills(make, frame):
    f = _build(make())
    for res in kernel_resources(f.cubin("sm_90")).values():
        assert res.frame_bytes <= frame, res      # local memory: spills
        assert res.registers <= 128, res


# ---- emulation against NumPy ----------------------------------------------------------------------
def _emulate(f, arrays, out_shape):
    out = np.full(out_shape, np.nan, "float32")
    f.emulate(*arrays, out)
    return out


@needs_gxx
@pytest.mark.parametrize("M,N,K", [(64, 64, 32), (37, 45, 19), (130, 67, 21), (128, 256, 40)])
def test_matmul_tails_match_numpy(M, N, K):
    f = _build(_matmul(M, N, K))
    g = np.random.default_rng(M * N + K)
    a, b = g.standard_normal((M, K)).astype("float32"), g.standard_normal((K, N)).astype("float32")
    np.testing.assert_allclose(_emulate(f, [a, b], (M, N)), a @ b, rtol=1e-4, atol=1e-4)


@needs_gxx
def test_dense_symbolic_rows_bound_to_several_sizes_matches_numpy():
    n = td.var("n")
    f = _build(_dense(n, 36, 20))
    g = np.random.default_rng(7)
    w, bias = g.standard_normal((36, 20)).astype("float32"), g.standard_normal(36).astype("float32")
    for rows in (1, 33, 77, 128, 130):
        x = g.standard_normal((rows, 20)).astype("float32")
        np.testing.assert_allclose(_emulate(f, [x, w, bias], (rows, 36)),
                                   np.maximum(x @ w.T + bias, 0), rtol=1e-4, atol=1e-4)


@needs_gxx
def test_batch_matmul_tails_match_numpy():
    P, Q = td.placeholder((3, 18, 12), name="P"), td.placeholder((3, 12, 40), name="Q")
    f = _build([P, Q, ops.batch_matmul(P, Q)])
    g = np.random.default_rng(3)
    p, q = g.standard_normal((3, 18, 12)).astype("float32"), g.standard_normal((3, 12, 40)).astype("float32")
    np.testing.assert_allclose(_emulate(f, [p, q], (3, 18, 40)), p @ q, rtol=1e-4, atol=1e-4)


def _conv_ref(d, k, stride, pad):
    n, c, h, w = d.shape
    co, _, kh, kw = k.shape
    dp = np.pad(d.astype("float64"), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (w + 2 * pad - kw) // stride + 1
    out = np.zeros((n, co, oh, ow))
    for y in range(kh):
        for x in range(kw):
            win = dp[:, :, y:y + stride * (oh - 1) + 1:stride, x:x + stride * (ow - 1) + 1:stride]
            out += np.einsum("nchw,oc->nohw", win, k[:, :, y, x])
    return out


@needs_gxx
@pytest.mark.parametrize("shape,co,stride", [((1, 8, 16, 16), 16, 1), ((1, 16, 30, 30), 32, 1),
                                             ((2, 8, 13, 11), 20, 2)])
def test_conv_tails_match_numpy(shape, co, stride):
    args = _conv(shape, co, stride=stride)
    f = _build(args)
    g = np.random.default_rng(shape[2])
    d = g.standard_normal(shape).astype("float32")
    k = g.standard_normal((co, shape[1], 3, 3)).astype("float32")
    ref = _conv_ref(d, k, stride, 1)
    np.testing.assert_allclose(_emulate(f, [d, k], ref.shape), ref, rtol=1e-4, atol=1e-4)


def test_tails_through_the_interpreter():
    """The lowered IR itself (no C compiler): matmul and conv tails."""
    from tdsl import interpreter
    g = np.random.default_rng(13)
    args = _matmul(37, 45, 19)
    a, b = g.standard_normal((37, 19)).astype("float32"), g.standard_normal((19, 45)).astype("float32")
    c = np.full((37, 45), np.nan, "float32")
    interpreter.run(td.lower(ops.schedule(args[-1], "cuda"), args), a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    args = _conv((1, 8, 11, 13), 12)
    d = g.standard_normal((1, 8, 11, 13)).astype("float32")
    k = g.standard_normal((12, 8, 3, 3)).astype("float32")
    o = np.full((1, 12, 11, 13), np.nan, "float32")
    interpreter.run(td.lower(ops.schedule(args[-1], "cuda"), args), d, k, o)
    np.testing.assert_allclose(o, _conv_ref(d, k, 1, 1), rtol=1e-4, atol=1e-4)


@needs_gxx
def test_stage_over_a_guarded_producer_is_not_run_unguarded():
    """A local stage reading a shared *reduction* (which keeps its guards: its
    out-of-domain elements are never written) is zero-filled, not run unguarded: it
    would read shared elements no thread wrote (the emulator reports that)."""
    n = 70
    A = td.placeholder((n, 8), name="A")
    k = td.reduce_axis((0, 8), name="k")
    S = td.compute((n,), lambda i: td.sum(A[i, k], axis=k), name="S")
    L = td.compute((n,), lambda i: S[i] * 2.0, name="L")
    B = td.compute((n,), lambda i: L[i] + 1.0, name="B")
    s = td.create_schedule(B.op)
    bo, bi = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bo, td.thread_axis("blockIdx.x"))
    s[B].bind(bi, td.thread_axis("threadIdx.x"))
    s[L].set_scope("local")
    s[L].compute_at(s[B], bi)
    s[S].set_scope("shared")
    s[S].compute_at(s[B], bo)
    _, si = s[S].split(S.op.axis[0], factor=32)
    s[S].bind(si, td.thread_axis("threadIdx.x"))
    f = td.build(s, [A, B], target="cuda")
    a = np.random.default_rng(0).standard_normal((n, 8)).astype("float32")
    b = np.full(n, np.nan, "float32")
    f.emulate(a, b)
    np.testing.assert_allclose(b, a.sum(1) * 2 + 1, rtol=1e-5, atol=1e-5)


@needs_gxx
def test_stage_over_a_cross_thread_reduction_keeps_its_guard():
    """A shared reduction over threads (its rows on threadIdx.y, its keys on threadIdx.x:
    an all-reduce) reads only a zero-filled fetch, yet its nest keeps its domain guards
    (the all-reduce's store); a local stage reading it past the domain must be guarded
    too, not run unguarded on elements no thread wrote (ops.attention's staged CUDA
    schedule: the probabilities over the block max)."""
    n = 70
    A = td.placeholder((n, 32), name="A")
    k = td.reduce_axis((0, 32), name="k")
    S = td.compute((n,), lambda i: td.max(A[i, k], axis=k), name="S")
    L = td.compute((n,), lambda i: S[i] * 2.0, name="L")
    B = td.compute((n, 32), lambda i, j: L[i] + j.astype("float32"), name="B")
    s = td.create_schedule(B.op)
    bo, bi = s[B].split(B.op.axis[0], factor=8)
    s[B].bind(bo, td.thread_axis("blockIdx.x"))
    s[B].bind(bi, td.thread_axis("threadIdx.y"))
    s[B].bind(B.op.axis[1], td.thread_axis("threadIdx.x"))
    AS = s.cache_read(A, "shared", [S])
    s[AS].compute_at(s[B], bo)
    ai, aj = s[AS].op.axis
    s[AS].bind(s[AS].split(ai, factor=8)[1], td.thread_axis("threadIdx.y"))
    s[AS].bind(aj, td.thread_axis("threadIdx.x"))
    s[S].set_scope("shared")
    s[S].compute_at(s[B], bo)
    s[S].bind(s[S].split(S.op.axis[0], factor=8)[1], td.thread_axis("threadIdx.y"))
    s[S].bind(S.op.reduce_axis[0], td.thread_axis("threadIdx.x"))
    s[L].set_scope("local")
    s[L].compute_at(s[B], bi)
    f = td.build(s, [A, B], target="cuda")
    a = np.random.default_rng(0).standard_normal((n, 32)).astype("float32")
    b = np.full((n, 32), np.nan, "float32")
    f.emulate(a, b)
    np.testing.assert_allclose(b, a.max(1)[:, None] * 2 + np.arange(32), rtol=1e-5)
