"""The reference interpreter on hand-built loop IR: arithmetic semantics, GPU kernels, errors."""
import math

import numpy as np
import pytest

import tdsl as td
from tdsl import interpreter
from tdsl.errors import DTypeError, LoweringError, ShapeError
from tdsl.expr import BufferLoad, Const, FloorDiv, FloorMod, Select, Var
from tdsl.stmt import (Allocate, Barrier, Buffer, BufferRegion, BufferStore, Evaluate, For,
                       ForKind, IfThenElse, IntrinCall, LetStmt, PrimFunc, SeqStmt, ThreadTag)

ZERO = Const(0, "int64")
SERIAL, PARALLEL, VECTORIZED, UNROLLED = (ForKind.SERIAL, ForKind.PARALLEL,
                                          ForKind.VECTORIZED, ForKind.UNROLLED)


def loop(var, extent, body, kind=SERIAL, tag=None, start=0):
    return For(var, start, extent, kind, body, tag)


def bind(var, extent, tag, body):
    return For(var, 0, extent, ForKind.THREAD_BINDING, body, ThreadTag(tag))


def func(params, body, size_vars=(), bindings=None):
    return PrimFunc("main", params, body, list(size_vars), bindings or {})


def elementwise(dtype, fn, n=8, ninputs=2):
    """out[i] = fn(in0[i], in1[i], ...) over n elements."""
    ins = [Buffer(f"in{k}", (n,), dtype) for k in range(ninputs)]
    out = Buffer("out", (n,), dtype)
    i = Var("i")
    value = fn(*[BufferLoad(b, [i]) for b in ins])
    return func(ins + [out], loop(i, n, BufferStore(out, value, [i])))


# ---- CPU loop nests ---------------------------------------------------------------------------
def matmul_func(k_extent=32, m_extent=24):
    n = td.var("n")
    A = Buffer("A", (n, k_extent), "float32")
    B = Buffer("B", (k_extent, m_extent), "float32")
    C = Buffer("C", (n, m_extent), "float32")
    i, j, k = Var("i"), Var("j"), Var("k")
    acc = Buffer("acc", (1,), "float32", scope="local")
    zero = Const(0.0, "float32")
    body = loop(i, n, loop(j, m_extent, Allocate(acc, SeqStmt([
        BufferStore(acc, zero, [ZERO]),
        loop(k, k_extent, BufferStore(
            acc, BufferLoad(acc, [ZERO]) + BufferLoad(A, [i, k]) * BufferLoad(B, [k, j]),
            [ZERO])),
        BufferStore(C, BufferLoad(acc, [ZERO]), [i, j]),
    ]))), PARALLEL)
    return func([A, B, C], body, [n], {n: (0, 0)})


def test_matmul_matches_numpy(rng):
    f = matmul_func()
    a = rng.standard_normal((5, 32), dtype=np.float32)
    b = rng.standard_normal((32, 24), dtype=np.float32)
    c = np.zeros((5, 24), np.float32)
    interpreter.run(f, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    # Compiled once, rerun with another size bound to n.
    a2 = rng.standard_normal((3, 32), dtype=np.float32)
    c2 = np.zeros((3, 24), np.float32)
    interpreter.run(f, a2, b, c2)
    np.testing.assert_allclose(c2, a2 @ b, rtol=1e-5, atol=1e-5)


def test_float32_accumulation_rounds_in_float32(rng):
    f = matmul_func(k_extent=64, m_extent=1)
    a = rng.standard_normal((1, 64), dtype=np.float32) * 1000
    b = rng.standard_normal((64, 1), dtype=np.float32)
    c = np.zeros((1, 1), np.float32)
    interpreter.run(f, a, b, c)
    expected = np.float32(0)
    for k in range(64):
        expected = expected + a[0, k] * b[k, 0]
    assert c[0, 0] == expected  # bit-exact sequential float32, not float64 then rounded


def test_float16_rounds_after_every_operation():
    f = elementwise("float16", lambda a, b: a * b + b)
    a = np.array([1.001, 3.3, 1e4, 65504, -2.5, 0.1, 7, 1 / 3], np.float16)
    b = np.array([1.003, 0.7, 9.0, 2.0, 2.5, 0.1, 1e-3, 3], np.float16)
    out = np.zeros(8, np.float16)
    interpreter.run(f, a, b, out)
    with np.errstate(over="ignore"):
        expected = np.array([x * y + y for x, y in zip(a, b)], np.float16)  # float16 scalar ops
    np.testing.assert_array_equal(out, expected)
    assert np.isinf(out[3])  # 65504 * 2 overflows float16


@pytest.mark.parametrize("dtype,a,b,expected", [
    ("int8", [100, -128, 127, 5], [100, -1, 1, -7], [-56, 127, -128, -2]),
    ("uint8", [200, 0, 255, 5], [100, 1, 1, 7], [44, 1, 0, 12]),
])
def test_integer_add_wraps(dtype, a, b, expected):
    f = elementwise(dtype, lambda x, y: x + y + y - y, n=4)  # == x + y, intermediates wrap
    out = np.zeros(4, dtype)
    interpreter.run(f, np.array(a, dtype), np.array(b, dtype), out)
    np.testing.assert_array_equal(out, np.array(expected, dtype))


def test_unsigned_subtraction_wraps():
    f = elementwise("uint8", lambda x, y: x - y, n=2)
    out = np.zeros(2, np.uint8)
    interpreter.run(f, np.array([0, 3], np.uint8), np.array([1, 5], np.uint8), out)
    np.testing.assert_array_equal(out, [255, 254])


def test_int32_and_int64_multiplication_wraps():
    for dtype in ("int32", "int64"):
        f = elementwise(dtype, lambda x, y: x * y, n=3)
        info = np.iinfo(dtype)
        a = np.array([info.max, info.min, 123456789], dtype)
        b = np.array([2, -1, 1000003], dtype)
        out = np.zeros(3, dtype)
        interpreter.run(f, a, b, out)
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal(out, a * b)


def test_floor_division_and_modulo_of_ints_and_floats():
    f = elementwise("int32", lambda x, y: FloorDiv(x, y) * 100 + FloorMod(x, y), n=4)
    a = np.array([7, -7, 7, -7], np.int32)
    b = np.array([2, 2, -2, -2], np.int32)
    out = np.zeros(4, np.int32)
    interpreter.run(f, a, b, out)
    np.testing.assert_array_equal(out, (a // b) * 100 + a % b)

    g = elementwise("float32", lambda x, y: FloorMod(x, y), n=3)
    x = np.array([5.5, -5.5, 5.5], np.float32)
    y = np.array([2.0, 2.0, -2.0], np.float32)
    out = np.zeros(3, np.float32)
    interpreter.run(g, x, y, out)
    np.testing.assert_array_equal(out, x - np.floor(x / y) * y)


def test_casts_truncate_and_convert_bools():
    f = elementwise("float32", lambda x: x.astype("int32").astype("float32"), n=4, ninputs=1)
    out = np.zeros(4, np.float32)
    interpreter.run(f, np.array([2.7, -2.7, 0.5, -0.5], np.float32), out)
    np.testing.assert_array_equal(out, [2, -2, 0, 0])

    g = elementwise("int32", lambda x: (x > 2).astype("int32") + x.astype("bool").astype("int32"),
                    n=4, ninputs=1)
    out = np.zeros(4, np.int32)
    interpreter.run(g, np.array([0, 1, 3, -4], np.int32), out)
    np.testing.assert_array_equal(out, [0, 1, 2, 1])

    h = elementwise("int8", lambda x: x.astype("int32").__mul__(3).astype("int8"), n=2, ninputs=1)
    out = np.zeros(2, np.int8)
    interpreter.run(h, np.array([100, -100], np.int8), out)
    np.testing.assert_array_equal(out, np.array([300, -300]).astype(np.int8))


def test_intrinsics():
    x = np.array([-2.5, -0.5, 0.5, 1.5, 2.5, 4.0], np.float32)
    cases = [
        (td.sigmoid, lambda v: np.float32(1) / (np.float32(1) + np.exp(-v))),
        (td.rsqrt, lambda v: np.float32(1) / np.sqrt(v)),
        (td.erf, lambda v: np.float32(math.erf(v))),
        (td.round, np.rint),
        (td.exp, np.exp),
        (td.abs, np.abs),
    ]
    for intrin, ref in cases:
        f = elementwise("float32", intrin, n=6, ninputs=1)
        out = np.zeros(6, np.float32)
        interpreter.run(f, x, out)
        with np.errstate(invalid="ignore"):
            np.testing.assert_array_equal(out, np.array([ref(v) for v in x], np.float32),
                                          err_msg=intrin.__name__)
    g = elementwise("int8", td.abs, n=3, ninputs=1)
    out = np.zeros(3, np.int8)
    interpreter.run(g, np.array([-5, 7, -128], np.int8), out)
    np.testing.assert_array_equal(out, [5, 7, -128])  # |-128| wraps in int8


def test_isnan_and_select():
    f = elementwise("float32", lambda x, y: td.if_then_else(td.isnan(x), y, x), n=3)
    out = np.zeros(3, np.float32)
    interpreter.run(f, np.array([1, np.nan, 3], np.float32), np.full(3, -1, np.float32), out)
    np.testing.assert_array_equal(out, [1, -1, 3])


def test_select_evaluates_only_the_chosen_branch():
    # out[i] = A[i - 1] if i >= 1 else 0: A[-1] in the untaken branch must not be read.
    A, out = Buffer("A", (4,), "float32"), Buffer("out", (4,), "float32")
    i = Var("i")
    value = Select(i >= 1, BufferLoad(A, [i - 1]), Const(0.0, "float32"))
    f = func([A, out], loop(i, 4, BufferStore(out, value, [i])))
    res = np.zeros(4, np.float32)
    interpreter.run(f, np.arange(4, dtype=np.float32) + 1, res)
    np.testing.assert_array_equal(res, [0, 1, 2, 3])


def test_let_if_else_and_loop_kinds():
    A, out = Buffer("A", (16,), "int32"), Buffer("out", (16,), "int32")
    o, v, u, x = Var("o"), Var("v"), Var("u"), Var("x", "int32")
    idx = o * 8 + v * 2 + u
    body = LetStmt(x, BufferLoad(A, [idx]) * 2, IfThenElse(
        x % 4 == 0, BufferStore(out, x, [idx]), BufferStore(out, 0 - x, [idx])))
    f = func([A, out], loop(o, 2, loop(v, 4, loop(u, 2, body, UNROLLED), VECTORIZED), PARALLEL))
    a = np.arange(16, dtype=np.int32)
    res = np.zeros(16, np.int32)
    interpreter.run(f, a, res)
    np.testing.assert_array_equal(res, np.where((2 * a) % 4 == 0, 2 * a, -2 * a))


def test_loop_with_nonzero_min_and_symbolic_shapes():
    n = td.var("n")
    A, out = Buffer("A", (2 * n,), "float32"), Buffer("out", (n,), "float32")
    i = Var("i")
    body = For(i, n, n, SERIAL, BufferStore(out, BufferLoad(A, [i]), [i - n]))
    f = func([A, out], body, [n], {n: (1, 0)})
    res = np.zeros(3, np.float32)
    interpreter.run(f, np.arange(6, dtype=np.float32), res)
    np.testing.assert_array_equal(res, [3, 4, 5])


def test_allocations_start_with_garbage():
    out = Buffer("out", (2,), "float32")
    tmp = Buffer("tmp", (2,), "float32", scope="local")
    i = Var("i")
    f = func([out], Allocate(tmp, loop(i, 2, BufferStore(out, BufferLoad(tmp, [i]), [i]))))
    res = np.zeros(2, np.float32)
    interpreter.run(f, res)
    assert np.isnan(res).all()


def test_strided_allocation_and_noncontiguous_arrays(rng):
    # tmp has padded rows (stride 5 for a 4-wide row), like storage_align.
    A, out = Buffer("A", (3, 4), "float32"), Buffer("out", (3, 4), "float32")
    tmp = Buffer("tmp", (3, 4), "float32", strides=(5, 1))
    i, j = Var("i"), Var("j")
    body = Allocate(tmp, SeqStmt([
        loop(i, 3, loop(j, 4, BufferStore(tmp, BufferLoad(A, [i, j]) * 2.0, [i, j]))),
        loop(i, 3, loop(j, 4, BufferStore(out, BufferLoad(tmp, [i, j]), [i, j]))),
    ]))
    f = func([A, out], body)
    a = rng.standard_normal((4, 3), dtype=np.float32).T  # a non-contiguous view
    big = np.zeros((6, 8), np.float32)
    res = big[::2, ::2]  # the output is a strided view too
    interpreter.run(f, a, res)
    np.testing.assert_array_equal(big[::2, ::2], a * 2)
    assert (big[1::2] == 0).all() and (big[:, 1::2] == 0).all()


def test_read_only_inputs_are_not_written_back():
    f = elementwise("float32", lambda x: x + 1.0, n=4, ninputs=1)
    a = np.broadcast_to(np.float32(1), (4,))  # read-only
    res = np.zeros(4, np.float32)
    interpreter.run(f, a, res)
    np.testing.assert_array_equal(res, 2)


class _CopyIntrin:
    """A tensor intrinsic whose fallback copies its input region into its output region."""

    name = "copy4"

    def lower_fallback(self, call):
        (src,), (dst,) = call.inputs, call.outputs
        k = Var("k")
        value = BufferLoad(src.buffer, [src.mins[0] + k])
        return loop(k, 4, BufferStore(dst.buffer, value, [dst.mins[0] + k]))


def test_intrin_call_runs_its_fallback():
    A, out = Buffer("A", (8,), "float32"), Buffer("out", (8,), "float32")
    o = Var("o")
    call = IntrinCall(_CopyIntrin(), [BufferRegion(A, [o * 4], [4])],
                      [BufferRegion(out, [o * 4], [4])], reset=False, update=False)
    f = func([A, out], loop(o, 2, call))
    res = np.zeros(8, np.float32)
    interpreter.run(f, np.arange(8, dtype=np.float32), res)
    np.testing.assert_array_equal(res, np.arange(8))


# ---- GPU kernels --------------------------------------------------------------------------------
def rotate_kernel(with_barrier=True, blocks=4, threads=32):
    """out[b*T + t] = A[b*T + (t+1) % T] through a shared tile (needs a barrier)."""
    A = Buffer("A", (blocks * threads,), "float32")
    out = Buffer("out", (blocks * threads,), "float32")
    tile = Buffer("tile", (threads,), "float32", scope="shared")
    bx, tx, tx2 = Var("blockIdx.x"), Var("threadIdx.x"), Var("threadIdx.x")
    load = bind(tx, threads, "threadIdx.x",
                BufferStore(tile, BufferLoad(A, [bx * threads + tx]), [tx]))
    use = bind(tx2, threads, "threadIdx.x", BufferStore(
        out, BufferLoad(tile, [(tx2 + 1) % threads]) * 10.0, [bx * threads + tx2]))
    stages = [load, Barrier(), use] if with_barrier else [load, use]
    return func([A, out], bind(bx, blocks, "blockIdx.x", Allocate(tile, SeqStmt(stages))))


def expected_rotate(a, blocks=4, threads=32):
    return np.roll(a.reshape(blocks, threads), -1, axis=1).reshape(-1) * 10


def test_gpu_kernel_with_shared_memory_and_barrier(rng):
    f = rotate_kernel()
    a = rng.standard_normal(128, dtype=np.float32)
    res = np.zeros(128, np.float32)
    interpreter.run(f, a, res)
    np.testing.assert_array_equal(res, expected_rotate(a))


def test_gpu_kernel_without_barrier_reads_unwritten_shared_memory(rng):
    f = rotate_kernel(with_barrier=False)
    a = rng.standard_normal(128, dtype=np.float32)
    res = np.zeros(128, np.float32)
    interpreter.run(f, a, res)
    assert np.isnan(res).any()  # thread t read tile[t+1] before thread t+1 wrote it
    assert not np.array_equal(res, expected_rotate(a))


def test_gpu_shared_memory_is_per_block_and_local_per_thread():
    # Every thread adds its index into a per-thread local and shared[0] is per block.
    out = Buffer("out", (3, 4), "int32")
    shared = Buffer("s", (4,), "int32", scope="shared")
    local = Buffer("l", (1,), "int32", scope="local")
    bx, tx = Var("bx"), Var("tx")
    kernel = bind(bx, 3, "blockIdx.x", Allocate(shared, bind(tx, 4, "threadIdx.x", SeqStmt([
        Allocate(local, SeqStmt([
            BufferStore(local, tx.astype("int32") + bx.astype("int32") * 10, [ZERO]),
            BufferStore(shared, BufferLoad(local, [ZERO]), [tx]),
        ])),
        Barrier(),
        BufferStore(out, BufferLoad(shared, [3 - tx]), [bx, tx]),
    ]))))
    res = np.zeros((3, 4), np.int32)
    interpreter.run(func([out], kernel), res)
    np.testing.assert_array_equal(res, [[3, 2, 1, 0], [13, 12, 11, 10], [23, 22, 21, 20]])


def test_gpu_thread_loop_shorter_than_launch_extent_is_skipped():
    # The second stage binds threadIdx.x with an extent that depends on a loop inside the
    # kernel; indices >= that extent skip the body.
    out = Buffer("out", (2, 8), "int32")
    tx, tx2, s = Var("tx"), Var("tx"), Var("s")
    kernel = bind(tx, 8, "threadIdx.x", SeqStmt([
        BufferStore(out, Const(-1, "int32"), [ZERO, tx]),
        BufferStore(out, Const(-1, "int32"), [ZERO + 1, tx]),
        Barrier(),
        loop(s, 2, bind(tx2, 4 + s * 4, "threadIdx.x",
                        BufferStore(out, tx2.astype("int32"), [s, tx2]))),
    ]))
    res = np.zeros((2, 8), np.int32)
    interpreter.run(func([out], kernel), res)
    np.testing.assert_array_equal(res, [[0, 1, 2, 3, -1, -1, -1, -1], list(range(8))])


def test_virtual_thread_loops_iterate():
    out = Buffer("out", (2, 4), "int32")
    vt, tx = Var("vt"), Var("tx")
    kernel = bind(tx, 4, "threadIdx.x", For(vt, 0, 2, ForKind.THREAD_BINDING, BufferStore(
        out, (vt * 10 + tx).astype("int32"), [vt, tx]), ThreadTag.VTHREAD))
    res = np.zeros((2, 4), np.int32)
    interpreter.run(func([out], kernel), res)
    np.testing.assert_array_equal(res, [[0, 1, 2, 3], [10, 11, 12, 13]])


def test_gpu_barrier_not_reached_by_all_threads():
    out = Buffer("out", (8,), "float32")
    tx = Var("tx")
    body = bind(tx, 8, "threadIdx.x", IfThenElse(tx < 4, SeqStmt([
        Barrier(), BufferStore(out, Const(1.0, "float32"), [tx])])))
    with pytest.raises(LoweringError, match="barrier not reached by all threads"):
        interpreter.run(func([out], body), np.zeros(8, np.float32))


def test_gpu_inconsistent_thread_extents():
    out = Buffer("out", (64,), "float32")
    t1, t2 = Var("tx"), Var("tx")
    body = SeqStmt([bind(t1, 32, "threadIdx.x", BufferStore(out, Const(1.0, "float32"), [t1]))])
    body = bind(Var("bx"), 1, "blockIdx.x", SeqStmt([
        body, bind(t2, 64, "threadIdx.x", BufferStore(out, Const(2.0, "float32"), [t2]))]))
    with pytest.raises(LoweringError, match="threadIdx.x"):
        interpreter.run(func([out], body), np.zeros(64, np.float32))


def test_barrier_outside_kernel_is_an_error():
    out = Buffer("out", (1,), "float32")
    body = SeqStmt([Barrier(), BufferStore(out, Const(1.0, "float32"), [ZERO])])
    with pytest.raises(LoweringError, match="outside a GPU kernel"):
        interpreter.run(func([out], body), np.zeros(1, np.float32))


# ---- errors -------------------------------------------------------------------------------------
def test_out_of_bounds_load_and_store_raise():
    A, out = Buffer("A", (4,), "float32"), Buffer("out", (4,), "float32")
    i = Var("i")
    f = func([A, out], loop(i, 4, BufferStore(out, BufferLoad(A, [i + 1]), [i])))
    with pytest.raises(LoweringError, match=r"'A'.*\[4\]"):
        interpreter.run(f, np.zeros(4, np.float32), np.zeros(4, np.float32))
    g = func([A, out], loop(i, 5, BufferStore(out, Const(0.0, "float32"), [i])))
    with pytest.raises(LoweringError, match=r"'out'.*\[4\]"):
        interpreter.run(g, np.zeros(4, np.float32), np.zeros(4, np.float32))


def test_out_of_bounds_in_one_dimension_is_caught_even_if_flat_index_fits():
    A, out = Buffer("A", (2, 4), "float32"), Buffer("out", (1,), "float32")
    f = func([A, out], BufferStore(out, BufferLoad(A, [Const(0, "int64"), Const(5, "int64")]),
                                   [Const(0, "int64")]))
    with pytest.raises(LoweringError, match="out-of-bounds"):
        interpreter.run(f, np.zeros((2, 4), np.float32), np.zeros(1, np.float32))


def test_argument_checks():
    f = matmul_func()
    b = np.zeros((32, 24), np.float32)
    with pytest.raises(DTypeError, match="'A'.*float32.*float64"):
        interpreter.run(f, np.zeros((2, 32)), b, np.zeros((2, 24), np.float32))
    with pytest.raises(ShapeError, match="'B' dimension 1"):
        interpreter.run(f, np.zeros((2, 32), np.float32), np.zeros((32, 25), np.float32),
                        np.zeros((2, 24), np.float32))
    with pytest.raises(ShapeError, match="'C' dimension 0"):  # n bound to 2 from A
        interpreter.run(f, np.zeros((2, 32), np.float32), b, np.zeros((3, 24), np.float32))
    with pytest.raises(ShapeError, match="'A'.*2 dimension"):
        interpreter.run(f, np.zeros(32, np.float32), b, np.zeros((2, 24), np.float32))
    with pytest.raises(ShapeError, match="3 arrays"):
        interpreter.run(f, np.zeros((2, 32), np.float32), b)


def test_variable_out_of_scope_is_an_error():
    out = Buffer("out", (4,), "float32")
    i = Var("i")
    f = func([out], BufferStore(out, Const(0.0, "float32"), [i]))
    with pytest.raises(LoweringError, match="'i'"):
        interpreter.run(f, np.zeros(4, np.float32))


def test_nan_and_inf_to_int_casts_saturate():
    # docs/ir.md: a data-dependent value, not an error: NaN -> 0, +-inf -> the range's ends
    f = elementwise("float32", lambda x: x.astype("int32").astype("float32"), n=3, ninputs=1)
    out = np.zeros(3, np.float32)
    interpreter.run(f, np.array([np.nan, np.inf, -np.inf], np.float32), out)
    np.testing.assert_array_equal(out, np.array([0, 2**31 - 1, -2**31], np.float32))


def test_evaluate_statement_runs():
    out = Buffer("out", (1,), "float32")
    f = func([out], SeqStmt([Evaluate(Const(0, "int32")),
                             BufferStore(out, Const(1.0, "float32"), [ZERO])]))
    res = np.zeros(1, np.float32)
    interpreter.run(f, res)
    assert res[0] == 1


# ---- limits of the generated Python -------------------------------------------------------------
def test_deep_loop_nests_and_expressions():
    # 24 nested loops exceed CPython's 20 nested blocks; a 300-term sum its 200 brackets.
    A, out = Buffer("A", (4,), "float32"), Buffer("out", (1,), "float32")
    loops = [Var(f"l{d}") for d in range(24)]
    i = Var("i")
    total = BufferLoad(A, [ZERO])
    for t in range(300):
        total = total + BufferLoad(A, [Const(t % 4, "int64")])
    index = ZERO
    for v in loops:
        index = index * 1 + v  # int64 arithmetic nested 48 deep, always 0
    body = BufferStore(out, total, [index])
    for v in reversed(loops):
        body = loop(v, 1, body)
    f = func([A, out], loop(i, 2, body))
    res = np.zeros(1, np.float32)
    interpreter.run(f, np.ones(4, np.float32), res)
    assert res[0] == 301


def test_barrier_inside_a_deep_loop_nest_of_a_kernel():
    out = Buffer("out", (4,), "int32")
    tile = Buffer("tile", (4,), "int32", scope="shared")
    tx = Var("tx")
    loops = [Var(f"l{d}") for d in range(20)]
    body = SeqStmt([BufferStore(tile, tx.astype("int32"), [tx]), Barrier(),
                    BufferStore(out, BufferLoad(tile, [3 - tx]), [tx])])
    for v in reversed(loops):
        body = loop(v, 1, body)
    kernel = bind(tx, 4, "threadIdx.x", Allocate(tile, body))
    res = np.zeros(4, np.int32)
    interpreter.run(func([out], kernel), res)
    np.testing.assert_array_equal(res, [3, 2, 1, 0])
