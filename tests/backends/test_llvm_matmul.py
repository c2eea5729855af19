"""LLVM backend: a tiled matmul (vectorized inner loop with tail guards, unrolled rows,
parallel outer loop), its machine code and code size, and thread control."""
from __future__ import annotations

import re

import numpy as np
import pytest

from tdsl.expr import Const, SizeVar
from tdsl.stmt import Buffer

try:
    from .llvm_irbuild import P, S, V, load, loop, prim, store, tiled_matmul
except ImportError:
    from llvm_irbuild import P, S, V, load, loop, prim, store, tiled_matmul

from tdsl.backends.llvm import build
from tdsl.backends.llvm.machine import host_info

RNG = np.random.default_rng(7)
HAS_AVX512 = "+avx512f" in host_info()[2]


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TDSL_CACHE_DIR", str(tmp_path / "cache"))


def operands(m: int, k: int, n: int, dtype: str = "float32"):
    a = RNG.standard_normal((m, k)).astype(dtype)
    b = RNG.standard_normal((k, n)).astype(dtype)
    c = RNG.standard_normal((m, n)).astype(dtype)  # garbage: the kernel must overwrite it
    return a, b, c


@pytest.mark.parametrize("outer", [S, P], ids=["serial", "parallel"])
@pytest.mark.parametrize("m,n", [(8, 32), (7, 21), (1, 1), (13, 50), (64, 64), (33, 17)])
def test_tiled_matmul_with_tails(outer, m, n):
    mod = build(tiled_matmul(f"mm_{outer}", K=64, outer=outer))
    assert not mod.notes  # every vectorized loop was widened
    a, b, c = operands(m, 64, n)
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_matmul_symbolic_k_and_float64():
    mod = build(tiled_matmul("mm_sym", symbolic_k=True, dtype="float64"))
    for m, k, n in ((5, 3, 19), (16, 40, 16)):
        a, b, c = operands(m, k, n, "float64")
        mod(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-12, atol=1e-12)


def test_parallel_matches_serial_bitwise():
    ser = build(tiled_matmul("mm_ser", K=48, outer=S))
    par = build(tiled_matmul("mm_par", K=48, outer=P))
    a, b, c1 = operands(61, 48, 45)
    c2 = RNG.standard_normal(c1.shape).astype("float32")
    ser(a, b, c1)
    for threads in (1, 2, 3, 7, 64):
        par.set_num_threads(threads)
        c2[:] = 0.5
        par(a, b, c2)
        np.testing.assert_array_equal(c1, c2)


def test_parallel_loop_elementwise_and_env_threads(monkeypatch):
    n = SizeVar("n")
    A = Buffer("A", [n], "int64")
    Out = Buffer("Out", [n], "int64")
    f = prim("par_sq", [A, Out], loop("i", n, lambda i: store(Out, load(A, i) * load(A, i) + i, i), P),
             [n])
    mod = build(f)
    monkeypatch.setenv("TDSL_NUM_THREADS", "3")
    assert mod.num_threads == 3
    for size in (1, 2, 3, 1000, 4097):
        a = RNG.integers(-1000, 1000, size)
        out = RNG.integers(-5, 5, size)
        mod(a, out)
        np.testing.assert_array_equal(out, a * a + np.arange(size))
    mod.set_num_threads(2)
    assert mod.num_threads == 2
    assert "GOMP_parallel" in mod.get_source("ll")


def test_nested_parallel_loops_run_inner_serially():
    A = Buffer("A", [6, 10], "float32")
    f = prim("nestpar", [A], loop("i", 6, lambda i: loop(
        "j", 10, lambda j: store(A, load(A, i, j) * Const(2.0, "float32"), i, j), P), P))
    mod = build(f)
    a = RNG.standard_normal((6, 10)).astype("float32")
    want = a * 2
    mod(a)
    np.testing.assert_array_equal(a, want)
    assert mod.get_source("ll").count("call void @\"GOMP_parallel\"") == 1


@pytest.mark.skipif(not HAS_AVX512, reason="this CPU has no AVX-512")
def test_vectorized_float32_inner_loop_is_512bit_fma():
    """A 16-lane float32 vectorized loop over contiguous data becomes zmm FMAs."""
    asm = build(tiled_matmul("mm_asm", K=64)).get_source("asm")
    fma = [l for l in asm.splitlines() if re.search(r"\bvfmadd\w*ps\b", l)]
    assert fma and all("zmm" in l for l in fma), fma[:4]


def test_tiled_matmul_compiles_to_a_small_module(monkeypatch):
    """What makes a compile slow, counted instead of timed: the tiled matmul's optimized IR and
    machine code stay small (610 and about 300 lines; an unrolling blow-up multiplies them).
    Its compile time is printed by ``benchmarks/run.py --only compile``."""
    monkeypatch.setenv("TDSL_CACHE_DIR", "off")
    mod = build(tiled_matmul("mm_size", K=64))
    ll, asm = mod.get_source("ll").splitlines(), mod.get_source("asm").splitlines()
    assert len(ll) < 1500 and len(asm) < 1000, (len(ll), len(asm))
    a = RNG.standard_normal((32, 64)).astype("float32")
    b = RNG.standard_normal((64, 64)).astype("float32")
    c = np.zeros((32, 64), "float32")
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def _child_runs_kernel(mod, a, b, conn):  # in a forked child
    import warnings
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        c = np.zeros((a.shape[0], b.shape[1]), "float32")
        mod(a, b, c)
    conn.send(float(np.abs(c - a @ b).max()))


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork()")
def test_forked_child_after_parallel_run_does_not_hang():
    """libgomp cannot start threads in a child forked after it ran: the child must
    fall back to one thread instead of hanging."""
    import multiprocessing as mp
    mod = build(tiled_matmul("mm_fork", K=32, outer=P))
    mod.set_num_threads(2)
    a, b, c = operands(40, 32, 40)
    mod(a, b, c)
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=_child_runs_kernel, args=(mod, a, b, child))
    p.start()
    p.join(60)
    if p.is_alive():
        p.kill()
        pytest.fail("the forked child hung in the OpenMP runtime")
    assert p.exitcode == 0 and parent.recv() < 1e-3
