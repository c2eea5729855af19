"""argmax / argmin with the default schedules: independent chains of vector lanes along a
row, four-vector chunks of columns, every axis reduced in place for ``axis=None`` -- and
NumPy's exact answer (first NaN wins, ties to the lowest index, a row of -inf gives 0)
on random data full of ties and special values, through LLVM and the interpreter, at
lengths the lanes and chains do and don't divide, constant and symbolic."""
from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import tdsl as td
import tdsl.interpreter
from tdsl import ops
from tdsl.ops.schedules.llvm import SELECT_CHAINS, cpu_of
from tdsl.target import as_target

OPS = {"argmax": (ops.argmax, np.argmax), "argmin": (ops.argmin, np.argmin)}
SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.0], "float32")


def _lanes() -> int:
    return cpu_of(as_target("llvm")).lanes(td.placeholder((1,), "float32").dtype)


def _data(rng: np.random.Generator, rows: int, cols: int, special: float) -> np.ndarray:
    """Small integers (many ties) with a fraction ``special`` of NaN/inf/-inf/-0, and a
    constant row, a row of -inf and a row of NaN when there are rows enough."""
    a = rng.integers(-3, 4, (rows, cols)).astype("float32")
    mask = rng.random((rows, cols)) < special
    a[mask] = rng.choice(SPECIAL, int(mask.sum()))
    if rows > 3:
        a[0] = 2.0
        a[1] = -np.inf
        a[2] = np.nan
    return a


@functools.lru_cache(maxsize=None)
def _kernel(op: str, rows: "int | None", cols: "int | None", axis: "int | None"):
    """(LLVM function, lowered function, output tensor) of the default schedule; None
    sizes are symbolic."""
    n, m = td.var("n"), td.var("m")
    x = td.placeholder((n if rows is None else rows, m if cols is None else cols),
                       "float32", name="x")
    y = OPS[op][0](x, axis=axis)
    s = ops.schedule(y)
    return td.build(s, [x, y], target="llvm"), td.lower(s, [x, y]), y


def _expect(op: str, a: np.ndarray, axis: "int | None") -> np.ndarray:
    return np.asarray(OPS[op][1](a, axis=axis)).astype("int64").reshape(-1)


def _check(op: str, rows: "int | None", cols: "int | None", axis: "int | None",
           a: np.ndarray, interpreter: bool = True) -> None:
    f, lowered, _ = _kernel(op, rows, cols, axis)
    exp = _expect(op, a, axis)
    out = np.full(exp.shape, 7, "int64")
    f(a, out)
    np.testing.assert_array_equal(out, exp, err_msg=f"{op} axis={axis} llvm\n{a}")
    if interpreter:
        out = np.full(exp.shape, 7, "int64")
        tdsl.interpreter.run(lowered, a, out)
        np.testing.assert_array_equal(out, exp, err_msg=f"{op} axis={axis} interpreter\n{a}")


# lengths below a vector, between one vector and one set of chains, dividing, not dividing
COLS = [1, 5, 8, 13, 32, 33, 40, 100]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axis", [1, 0, None])
@pytest.mark.parametrize("cols", COLS)
def test_special_values_and_ties_at_every_length(op, axis, cols):
    rng = np.random.default_rng(cols)
    a = _data(rng, 7, cols, 0.15)
    _check(op, 7, cols, axis, a, interpreter=cols <= 40)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axis", [1, 0])
def test_symbolic_lengths(op, axis):
    rng = np.random.default_rng(1)
    for rows, cols in [(4, 1), (5, 7), (4, 8), (6, 31), (4, 32), (5, 33), (3, 200)]:
        a = _data(rng, rows, cols, 0.1)
        _check(op, None, None, axis, a, interpreter=cols <= 33)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(op=st.sampled_from(sorted(OPS)), axis=st.sampled_from([1, 0, None]),
       cols=st.sampled_from([3, 8, 33, 64]), seed=st.integers(0, 2 ** 16),
       special=st.sampled_from([0.0, 0.02, 0.3, 1.0]))
def test_random_rows_follow_numpy(op, axis, cols, seed, special):
    """Ties split across lanes and chains, NaN in some lanes only, whole rows special."""
    a = _data(np.random.default_rng(seed), 6, cols, special)
    _check(op, 6, cols, axis, a, interpreter=False)


def test_a_tie_split_across_chains_and_lanes_goes_to_the_lowest_index():
    """The largest value in every chain and lane at once (and NaN in the last lanes only):
    the merges of chains and of lanes keep the lowest index."""
    lanes = _lanes()
    cols = 4 * SELECT_CHAINS * lanes + 3
    a = np.zeros((4, cols), "float32")
    a[0, 5::lanes + 1] = 9.0                      # ties spread over chains and lanes
    a[1, -1] = a[1, lanes * SELECT_CHAINS + 1] = a[1, lanes - 1] = 9.0
    a[2, [cols - 1, cols - 2 - lanes]] = np.nan   # NaN in the tail and one chain
    a[3] = -np.inf
    for op in OPS:
        _check(op, 4, cols, 1, a)


def _buffers(lowered) -> dict:
    """name -> shape of every allocation in the lowered function."""
    from tdsl.stmt import Allocate
    from tdsl.visitor import post_order_visit
    out = {}

    def visit(n):
        if isinstance(n, Allocate):
            out[n.buffer.name] = tuple(int(e.value) for e in n.buffer.shape)
    post_order_visit(lowered.body, visit)
    return out


def test_row_argmax_keeps_independent_chains_of_lanes():
    """Each row: ``SELECT_CHAINS`` vectors of partial (index, value) pairs (one vector ran
    at the latency of its compare-select chain: 0.33x NumPy), merged to one vector, then
    across lanes."""
    _, lowered, _ = _kernel("argmax", 64, 1024, 1)
    lanes = _lanes()
    shapes = _buffers(lowered)
    assert any(s[-2:] == (SELECT_CHAINS, lanes) for s in shapes.values()), shapes
    assert any(s[-1:] == (lanes,) and len(s) == 2 for s in shapes.values()), shapes
    assert "unrolled(" in str(lowered)
    # the chains fold elements in index order: the in-order update, no index compare
    assert "== 2147483647" in str(lowered)


def test_column_argmax_chunks_are_several_vectors_wide():
    """Columns in chunks of ``SELECT_CHAINS`` vectors: independent chains reading whole
    cache lines (a chunk of 4 int64 outputs read 16 bytes of each line and ran 4.5x
    slower)."""
    _, lowered, _ = _kernel("argmax", 64, 1024, 0)
    width = SELECT_CHAINS * _lanes()
    assert any(s == (width,) for s in _buffers(lowered).values()), _buffers(lowered)


def test_full_argmax_reduces_every_axis_in_place():
    """``axis=None`` reduces both axes with a flat row-major index, so the inner axis stays
    contiguous and vectorized (a reshape to 1-D indexed ``x[k // n, k % n]`` and ran as
    one scalar loop, 10x slower than NumPy)."""
    _, lowered, _ = _kernel("argmax", 64, 1024, None)
    text = str(lowered)
    assert "//" not in text and "%" not in text, text
    assert "vectorized(" in text
    if cpu_of(as_target("llvm")).threads > 1:
        # parts of the rows reduced in parallel, then combined (one thread did it all)
        assert "parallel(" in text, text
    a = _data(np.random.default_rng(5), 64, 1024, 0.0)
    a[40, 1000] = 50.0
    a[50, 3] = 50.0
    _check("argmax", 64, 1024, None, a, interpreter=False)
    _, _, y = _kernel("argmax", 64, 1024, None)
    assert [int(d.value) for d in y.shape] == [1]


def test_full_argmax_keepdims_and_3d():
    x = td.placeholder((3, 4, 21), "float32", name="x")
    for keep in (False, True):
        y = ops.argmax(x, axis=None, keepdims=keep)
        s = ops.schedule(y)
        f = td.build(s, [x, y], target="llvm")
        a = _data(np.random.default_rng(keep), 3, 4 * 21, 0.05).reshape(3, 4, 21)
        exp = np.argmax(a, axis=None, keepdims=keep).astype("int64").reshape(
            [int(d.value) for d in y.shape])
        out = np.full(exp.shape, 7, "int64")
        f(a, out)
        np.testing.assert_array_equal(out, exp)
        out = np.full(exp.shape, 7, "int64")
        tdsl.interpreter.run(td.lower(s, [x, y]), a, out)
        np.testing.assert_array_equal(out, exp)


def test_argmax_axis_must_be_an_int_or_none():
    from tdsl.errors import ShapeError
    x = td.placeholder((3, 4), "float32", name="x")
    with pytest.raises(ShapeError, match="argmax"):
        ops.argmax(x, axis=(0, 1))


@pytest.mark.parametrize("dtype", ["int32", "uint8", "float64"])
@pytest.mark.parametrize("axis", [1, 0, None])
def test_other_dtypes_with_ties(dtype, axis):
    """Integer rows (the combiner without NaN tests, the identity the dtype's extreme:
    a row of it must give 0) and float64 (4 lanes per vector)."""
    rng = np.random.default_rng(7)
    x = td.placeholder((5, 70), dtype, name="x")
    info = np.iinfo(dtype) if dtype != "float64" else None
    a = rng.integers(0, 4, (5, 70)).astype(dtype)
    if info is not None:
        a[0] = info.min
        a[1] = info.max
    for op, ref in OPS.values():
        y = op(x, axis=axis)
        s = ops.schedule(y)
        exp = np.asarray(ref(a, axis=axis)).astype("int64").reshape(-1)
        out = np.full(exp.shape, 7, "int64")
        td.build(s, [x, y], target="llvm")(a, out)
        np.testing.assert_array_equal(out, exp)
        out = np.full(exp.shape, 7, "int64")
        tdsl.interpreter.run(td.lower(s, [x, y]), a, out)
        np.testing.assert_array_equal(out, exp)
