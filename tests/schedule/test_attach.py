"""compute_at, compute_inline, compute_root: differential tests against NumPy."""
import numpy as np
import pytest

import tdsl as td
from tdsl.interpreter import run
from tests.workloads import check_sizes, conv2d, interpreter_runner, pipeline, random_array

SIZES = [pytest.param(16, id="divisible"), pytest.param(13, id="tail"),
         pytest.param("sym", id="symbolic")]


def pipe(size):
    return pipeline(H=size or 9, W=10, symbolic_h=size is None)


def conv(size):
    return conv2d(CI=2, H=size or 6, W=5, CO=2, symbolic_h=size is None)


def conv_size(size):
    """conv heights: 8 (split factor 2 divides it) and 7 (it doesn't)."""
    return {16: 8, 13: 7}.get(size, size)


# ---- compute_at ------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("where", ["outer", "inner", "j"])
def test_compute_at_pipeline(size, where):
    def sched(wl):
        s = wl.schedule()
        B, C = s[wl.main["B"]], s[wl.main["C"]]
        io, ii = C.split(C.op.axis[0], factor=4)
        loop = {"outer": io, "inner": ii, "j": C.op.axis[1]}[where]
        B.compute_at(C, loop)
        return s
    check_sizes(pipe, sched, size)


@pytest.mark.parametrize("size", SIZES)
def test_compute_at_with_producer_split(size):
    """The attached stage has its own (tail-carrying) split."""
    def sched(wl):
        s = wl.schedule()
        B, C = s[wl.main["B"]], s[wl.main["C"]]
        io, ii = C.split(C.op.axis[0], factor=5)
        B.split(B.op.axis[1], factor=3)
        B.compute_at(C, io)
        return s
    check_sizes(pipe, sched, size)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("loop", [0, 1, 2, 3])
def test_compute_at_halo_region(size, loop):
    """The padded input of a conv attached inside the output's loops: a halo region."""
    def sched(wl):
        s = wl.schedule()
        P, Y = s[wl.main["P"]], s[wl.main["Y"]]
        b, o, y, x = Y.op.axis
        yo, yi = Y.split(y, factor=2)
        Y.reorder(b, yo, o, yi, x)
        P.compute_at(Y, Y.leaf_iter_vars[loop + 1])
        return s
    check_sizes(conv, sched, conv_size(size))


@pytest.mark.parametrize("size", SIZES)
def test_compute_at_reduction_producer(size):
    """A reduction stage (row max, row sum) attached inside its consumer's row loop."""
    def make(h):
        H = td.var("h") if h is None else h
        A = td.placeholder((H, 7), name="A")
        k = td.reduce_axis((0, 7), name="k")
        M = td.compute((H,), lambda i: td.max(A[i, k], axis=k), name="M")
        k2 = td.reduce_axis((0, 7), name="k2")
        S = td.compute((H,), lambda i: td.sum(td.exp(A[i, k2] - M[i]), axis=k2), name="S")
        O = td.compute((H, 7), lambda i, j: td.exp(A[i, j] - M[i]) / S[i], name="O")
        return A, M, S, O

    def ref(a):
        e = np.exp(a.astype(np.float64) - a.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    A, M, S, O = make(None if size == "sym" else size)
    s = td.create_schedule(O.op)
    io, ii = s[O].split(O.op.axis[0], factor=4)
    s[S].compute_at(s[O], ii)
    s[M].compute_at(s[O], ii)
    f = td.lower(s, [A, O])
    rng = np.random.default_rng(0)
    for h in ((3, 16, 21) if size == "sym" else (size,)):
        a = random_array(rng, (h, 7))
        o = np.full((h, 7), np.nan, "float32")
        run(f, a, o)
        np.testing.assert_allclose(o, ref(a), rtol=1e-5, atol=1e-6)


def test_compute_at_two_consumers_common_loop():
    """B is read by C and D; D reads C; B attached in D's loop that encloses both uses."""
    n = td.var("n")
    A = td.placeholder((n, 6), name="A")
    B = td.compute((n, 6), lambda i, j: A[i, j] * 3.0, name="B")
    C = td.compute((n, 6), lambda i, j: B[i, j] + 1.0, name="C")
    D = td.compute((n, 6), lambda i, j: C[i, j] * B[i, (j + 1) % 6], name="D")
    s = td.create_schedule(D.op)
    io, ii = s[D].split(D.op.axis[0], factor=4)
    s[C].compute_at(s[D], io)
    s[B].compute_at(s[D], io)
    f = td.lower(s, [A, D])
    rng = np.random.default_rng(1)
    for v in (3, 8, 13):
        a = random_array(rng, (v, 6))
        d = np.full((v, 6), np.nan, "float32")
        run(f, a, d)
        b = a * np.float32(3)
        np.testing.assert_allclose(d, (b + 1) * np.roll(b, -1, axis=1), rtol=1e-6)


@pytest.mark.parametrize("n", [16, 13])
def test_compute_at_producer_before_its_reader_tvm_order(n):
    """TVM's opt_conv_cuda order: the shared copy AA is attached to BL's loop before its
    reader AL is; the call is accepted (the final schedule decides) and the result is right."""
    A, W = td.placeholder((n, 12), name="A"), td.placeholder((12, 8), name="W")
    k = td.reduce_axis((0, 12), name="k")
    C = td.compute((n, 8), lambda i, j: td.sum(A[i, k] * W[k, j], axis=k), name="C")
    s = td.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [C])
    AL = s.cache_read(AA, "local", [C])
    CL = s.cache_write(C, "local")
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[CL].compute_at(s[C], io)
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=4)
    s[AA].compute_at(s[CL], ko)      # AA's only reader, AL, is still at root here
    s[AL].compute_at(s[CL], ki)
    rng = np.random.default_rng(3)
    a, w = random_array(rng, (n, 12)), random_array(rng, (12, 8))
    want = a.astype("float64") @ w
    got_i = np.full((n, 8), np.nan, "float32")
    run(td.lower(s, [A, W, C]), a, w, got_i)
    got_l = np.full((n, 8), np.nan, "float32")
    td.build(s, [A, W, C], target="llvm")(a, w, got_l)
    np.testing.assert_allclose(got_i, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_l, want, rtol=1e-5, atol=1e-5)


def test_compute_at_still_missing_its_use_is_refused_at_lowering():
    """The same order with the reader left at root: lowering names the stage and the loop."""
    A = td.placeholder((8, 12), name="A")
    k = td.reduce_axis((0, 12), name="k")
    C = td.compute((8,), lambda i: td.sum(A[i, k], axis=k), name="C")
    s = td.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [C])
    AL = s.cache_read(AA, "local", [C])
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=4)
    s[AA].compute_at(s[C], ko)
    with pytest.raises(td.LoweringError, match=r"compute_at: stage 'A.shared', loop 'k.outer': "
                       r"loop 'k.outer' of stage 'C' is not an ancestor of any use of "
                       r"'A.shared' \(it is read by: A.shared.local\)"):
        td.lower(s, [A, C])
    s[AL].compute_at(s[C], ki)
    a, c = random_array(np.random.default_rng(4), (8, 12)), np.zeros(8, "float32")
    run(td.lower(s, [A, C]), a, c)
    np.testing.assert_allclose(c, a.sum(axis=1), rtol=1e-5)


def test_compute_at_nested_chain():
    """A -> B -> C -> D with B attached inside C, which is attached inside D."""
    A = td.placeholder((11, 9), name="A")
    B = td.compute((11, 9), lambda i, j: A[i, j] + 1.0, name="B")
    C = td.compute((11, 9), lambda i, j: B[i, j] * B[i, j], name="C")
    D = td.compute((11, 9), lambda i, j: C[i, j] - 2.0, name="D")
    s = td.create_schedule(D.op)
    io, ii = s[D].split(D.op.axis[0], factor=4)
    s[C].compute_at(s[D], io)
    s[B].compute_at(s[C], s[C].op.axis[1])
    a = random_array(np.random.default_rng(2), (11, 9))
    d = np.full((11, 9), np.nan, "float32")
    run(td.lower(s, [A, D]), a, d)
    np.testing.assert_allclose(d, (a + 1) ** 2 - 2, rtol=1e-6)


# ---- compute_inline --------------------------------------------------------------------------------
@pytest.mark.parametrize("size", SIZES)
def test_compute_inline_pipeline(size):
    def sched(wl):
        s = wl.schedule()
        s[wl.main["B"]].compute_inline()
        C = s[wl.main["C"]]
        C.split(C.op.axis[0], factor=4)
        return s
    check_sizes(pipe, sched, size)


@pytest.mark.parametrize("size", SIZES)
def test_compute_inline_padding(size):
    def sched(wl):
        s = wl.schedule()
        s[wl.main["P"]].compute_inline()
        return s
    check_sizes(conv, sched, conv_size(size))


def test_compute_inline_chain_of_three():
    n = td.var("n")
    A = td.placeholder((n,), name="A")
    B = td.compute((n,), lambda i: A[i] * 2.0, name="B")
    C = td.compute((n,), lambda i: B[i] + A[i], name="C")
    D = td.compute((n,), lambda i: C[i] * B[i], name="D")
    E = td.compute((n,), lambda i: D[i] - C[i], name="E")
    s = td.create_schedule(E.op)
    for T in (B, C, D):
        s[T].compute_inline()
    f = td.lower(s, [A, E])
    assert "allocate" not in str(f)
    rng = np.random.default_rng(3)
    for v in (1, 5, 17):
        a = random_array(rng, (v,))
        e = np.full(v, np.nan, "float32")
        run(f, a, e)
        b = a * 2
        c = b + a
        np.testing.assert_allclose(e, c * b - c, rtol=1e-5)


# ---- compute_root ------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("first", ["inline", "at"])
def test_compute_root_undoes(size, first):
    def sched(wl):
        s = wl.schedule()
        B, C = s[wl.main["B"]], s[wl.main["C"]]
        io, ii = C.split(C.op.axis[0], factor=4)
        if first == "inline":
            B.compute_inline()
        else:
            B.compute_at(C, ii)
        B.compute_root()
        B.split(B.op.axis[0], factor=3)
        return s
    check_sizes(pipe, sched, size)
    wl = pipe(7)
    s = sched(wl)
    f = str(td.lower(s, wl.args))
    # B is its own nest at root again: allocated whole before C's loop
    assert f.index('B = allocate((7, 10)') < f.index("for i.outer")


def test_compute_at_then_root_then_at_other_loop():
    wl = pipe(13)
    s = wl.schedule()
    B, C = s[wl.main["B"]], s[wl.main["C"]]
    io, ii = C.split(C.op.axis[0], factor=4)
    B.compute_at(C, ii)
    B.compute_root()
    B.compute_at(C, io)
    wl.case(s).check_with(interpreter_runner)


@pytest.mark.parametrize("size", SIZES)
def test_split_and_fuse_after_compute_at_move_the_attached_stage(size):
    """Transforming the loop a stage is attached to moves the stage to the loop that now
    holds the body (the inner part of a split, the fused loop)."""
    def sched(wl):
        s = wl.schedule()
        B, C = s[wl.main["B"]], s[wl.main["C"]]
        i, j = C.op.axis
        B.compute_at(C, i)
        io, ii = C.split(i, factor=4)
        assert B.attach_ivar is ii
        f = C.fuse(ii, j)
        assert B.attach_ivar is f
        return s
    check_sizes(pipe, sched, size)
