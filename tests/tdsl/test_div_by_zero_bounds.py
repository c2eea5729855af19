"""Integer ``//`` and ``%`` by zero are defined (docs/ir.md: ``x // 0 == x % 0 == 0``).

The simplifier's bound analysis, rewrite rules, constant folding and the SymPy bridge must
keep that meaning (and not crash) when the divisor is a constant 0, and the interpreter and
LLVM must agree with NumPy for constant and run-time zero divisors, in index arithmetic
(under min/max/compares, where bounds are used) and on data; so must the CUDA emulation."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import tdsl as td
from tdsl import interpreter
from tdsl.arith import Analyzer, simplify, to_sympy
from tdsl.arith.constfold import const_fold
from tdsl.backends.cuda import nvrtc
from tdsl.expr import Const, FloorDiv, FloorMod, Var, const

N, M = 5, 3


def _run_both(s, args, arrays):
    """The output (last array) from the interpreter and from LLVM."""
    outs = []
    for mode in ("interp", "llvm"):
        arrs = [a.copy() for a in arrays]
        if mode == "interp":
            interpreter.run(td.lower(s, args), *arrs)
        else:
            td.build(s, args, target="llvm")(*arrs)
        outs.append(arrs[-1])
    return outs


# each: (tdsl body on index vars i, j and zero constant z, NumPy value on index grids)
_INDEX_CASES = {
    "min_div": (lambda i, j, z: td.minimum(j // z, i), lambda i, j: np.minimum(0, i)),
    "max_mod": (lambda i, j, z: td.maximum(j % z, i - 2), lambda i, j: np.maximum(0, i - 2)),
    "cmp_div": (lambda i, j, z: td.if_then_else(j // z < i, i + 7, j),
                lambda i, j: np.where(0 < i, i + 7, j)),
    "cmp_mod": (lambda i, j, z: td.if_then_else(i % z >= 1, i, j - 9),
                lambda i, j: np.broadcast_to(j - 9, np.broadcast(i, j).shape)),
    "sum_div_mod": (lambda i, j, z: (i * 3 + j) // z + (i + j) % z + i * 2,
                    lambda i, j: i * 2 + 0 * j),
    "nested": (lambda i, j, z: td.minimum((i // z) // 2, j) + td.maximum(i % z % 3, j),
               lambda i, j: np.minimum(0, j) + np.maximum(0, j)),
}


@pytest.mark.parametrize("case", sorted(_INDEX_CASES))
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_index_divide_by_constant_zero(case, dtype):
    body, ref = _INDEX_CASES[case]
    A = td.placeholder((N, M), dtype, name="A")
    C = td.compute((N, M), lambda i, j: (body(i.astype(dtype), j.astype(dtype), const(0, dtype))
                                         + A[i, j]), name="C")
    s = td.create_schedule(C.op)
    a = np.random.default_rng(3).integers(-50, 50, size=(N, M)).astype(dtype)
    ii, jj = np.meshgrid(np.arange(N), np.arange(M), indexing="ij")
    want = (ref(ii, jj) + a).astype(dtype)
    for got in _run_both(s, [A, C], [a, np.zeros((N, M), dtype)]):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n", [1, 4, 7])
def test_index_divide_by_runtime_zero(n):
    """A divisor that is 0 at run time only (a loop variable): same semantics."""
    A = td.placeholder((n, M), "int64", name="A")
    C = td.compute((n, M), lambda i, j: td.minimum((j + 5) // i, 3) + (j + 5) % i * 10
                   + A[i, j], name="C")
    s = td.create_schedule(C.op)
    a = np.random.default_rng(4).integers(-50, 50, size=(n, M)).astype("int64")
    ii, jj = np.meshgrid(np.arange(n), np.arange(M), indexing="ij")
    with np.errstate(all="ignore"):
        want = np.minimum((jj + 5) // ii, 3) + (jj + 5) % ii * 10 + a
    for got in _run_both(s, [A, C], [a, np.zeros((n, M), "int64")]):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "int64", "uint32"])
def test_data_divide_by_constant_zero(dtype):
    A = td.placeholder((N,), dtype, name="A")
    z = const(0, dtype)
    C = td.compute((N,), lambda i: td.minimum(A[i] // z, A[i]) + A[i] % z + (A[i] - A[i] % z),
                   name="C")
    s = td.create_schedule(C.op)
    info = np.iinfo(dtype)
    a = np.array([info.min, info.max, 3, 1, 100], dtype)
    with np.errstate(all="ignore"):
        want = (np.minimum(a // np.zeros_like(a), a) + a % np.zeros_like(a)
                + (a - a % np.zeros_like(a))).astype(dtype)
    for got in _run_both(s, [A, C], [a, np.zeros(N, dtype)]):
        np.testing.assert_array_equal(got, want)


def _is_zero(e) -> bool:
    return isinstance(e, Const) and e.value == 0 and e.dtype.is_int


def test_analyzer_zero_divisor():
    x = Var("x", "int64")
    ana = Analyzer()
    ana.bind(x, td.tensor.Range(0, 10))
    for e in (FloorDiv(x, const(0, "int64")), FloorMod(x, const(0, "int64")),
              FloorDiv(x * 3 + 1, const(0, "int64"))):
        assert _is_zero(ana.simplify(e))
        assert ana.can_prove(e == 0)
        assert not ana.can_prove(e == 5)
        assert str(ana.simplify(td.minimum(e, x - 4))) == str(simplify(td.minimum(0, x - 4)))
    assert _is_zero(simplify(FloorDiv(const(7, "int64"), const(0, "int64"))))
    assert _is_zero(simplify(FloorMod(const(-7, "int32"), const(0, "int32"))))


def test_const_fold_zero_divisor():
    x = Var("x", "int32")
    for cls in (FloorDiv, FloorMod):
        assert _is_zero(const_fold(cls(const(9, "int32"), const(0, "int32"))))
        assert _is_zero(const_fold(cls(x, const(0, "int32"))))
    # float division by zero keeps IEEE semantics: not folded to 0
    fz = const_fold(FloorDiv(Var("f", "float32"), const(0.0, "float32")))
    assert not isinstance(fz, Const)


def test_sympy_zero_divisor():
    x, y = Var("x", "int64"), Var("y", "int64")
    assert to_sympy(FloorDiv(x, const(0, "int64"))) == 0
    assert to_sympy(FloorMod(x, y - y)) == 0


@pytest.mark.skipif(shutil.which("g++") is None,
                    reason="g++ is not installed: the CUDA emulation harness needs it")
@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "uint32"])
def test_cuda_divide_by_runtime_zero_and_minus_one(dtype):
    """CUDA's floor division helpers: x // 0 == x % 0 == 0 and MIN // -1 wraps, where C's
    ``/`` would be undefined behaviour (the emulation would die of SIGFPE)."""
    n = 70
    A = td.placeholder((n,), dtype, name="A")
    B = td.placeholder((n,), dtype, name="B")
    C = td.compute((n,), lambda i: A[i] // B[i] + A[i] % B[i] * 3, name="C")
    s = td.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=32)
    s[C].bind(bx, td.thread_axis("blockIdx.x"))
    s[C].bind(tx, td.thread_axis("threadIdx.x"))
    info = np.iinfo(dtype)
    rng = np.random.default_rng(5)
    a = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    b = rng.integers(-3 if info.min else 0, 3, n, dtype=dtype, endpoint=True)
    a[:6] = [info.min, info.min, info.max, info.min, 7, 0]
    b[:6] = [0, -1 if info.min else info.max, 0, 1, 0, 0]
    with np.errstate(all="ignore"):
        want = (a // b + a % b * 3).astype(dtype)
    mod = td.build(s, [A, B, C], target="cuda")
    got = np.zeros(n, dtype)
    mod.emulate(a, b, got)
    np.testing.assert_array_equal(got, want)
    if nvrtc.is_available():
        nvrtc.compile_cuda(mod.get_source(), arch="sm_80")
