"""opt_gemm's Opt6 (issue 14 point 4): a small write cache attached inside a parallel loop
gets stack storage whatever its declared scope, so "global" compiles like "local"."""
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import tdsl as td
import tdsl.interpreter

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_opt_gemm import opt6  # noqa: E402


def _ir(scope: str, size: int) -> str:
    return td.build(*opt6(size, scope), target="llvm").get_source("ll")


def test_attached_global_cache_is_a_stack_allocation():
    ir = _ir("global", 1024)
    # the 32x32 write cache: an alloca of 1024 floats (in the parallel body), not a heap block
    assert re.search(r'%"C_global" = alloca \[1024 x float\]', ir)
    # the only heap allocation is packedB's (4 MiB, at root)
    assert ir.count("call i8* @\"tdsl_kernel_alloc\"") == 1
    local = _ir("local", 1024)
    assert ir.replace("C_global", "C_local") == local


@pytest.mark.parametrize("scope", ["global", "local"])
def test_opt6_matches_numpy(rng, scope):
    n = 64
    s, args = opt6(n, scope)
    a = rng.random((n, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    c = np.zeros((n, n), np.float32)
    td.build(s, args, target="llvm")(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4)
    c2 = np.zeros((n, n), np.float32)
    tdsl.interpreter.run(td.lower(s, args), a, b, c2)
    np.testing.assert_allclose(c2, a @ b, rtol=1e-4)
