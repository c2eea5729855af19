"""TVM idioms users write at home: ``te.thread_axis((0, n), tag)``, tensor arithmetic
(``A + B``, ``A * 2``: topi's broadcast operators), ``A[i][j]``, ``te.tag_scope``, the
division helpers under ``te``, ``split(disable_predication=)``, ``tir.call_pure_extern``,
``topi.utils.get_const_tuple``, ``tvm.topi.testing``, ``apply_history_best(None)`` and
``LocalRPCMeasureContext`` (checked against NumPy on random data)."""
import shutil

import numpy as np
import pytest

import tdsl.interpreter
import tvm
import tvm.topi.testing
from tvm import autotvm, te, tir, topi

from tdsl.errors import LoweringError, ShapeError, TDSLError


def _build_run(s, args, arrays):
    """LLVM and the interpreter on copies of ``arrays``; both outputs."""
    ref = [a.copy() for a in arrays]
    tdsl.interpreter.run(tvm.lower(s, args), *ref)
    got = [a.copy() for a in arrays]
    tvm.build(s, args, "llvm")(*got)
    return ref, got


@pytest.mark.parametrize("n", [8, 13])
def test_tensor_arithmetic_is_topi_broadcast(rng, n):
    A = te.placeholder((n, 6), name="A")
    B = te.placeholder((6,), name="B")
    C = (A + B) * 2 - 1.5 / (A * A + 1.0)
    D = 3.0 - (-C) // 2.0
    s = te.create_schedule(D.op)
    a = rng.standard_normal((n, 6)).astype("float32")
    b = rng.standard_normal(6).astype("float32")
    c = (a + b) * 2 - np.float32(1.5) / (a * a + 1)
    want = 3 - np.floor(-c / 2)
    for out in _build_run(s, [A, B, D], [a, b, np.zeros((n, 6), "float32")]):
        np.testing.assert_allclose(out[2], want, rtol=1e-5, atol=1e-5)


def test_chained_indexing_and_its_misuse(rng):
    A = te.placeholder((5, 7), name="A")
    B = te.compute((5, 7), lambda i, j: A[i][j] * 2.0 + A[i][(j + 1) % 7], name="B")
    s = te.create_schedule(B.op)
    a = rng.standard_normal((5, 7)).astype("float32")
    for out in _build_run(s, [A, B], [a, np.zeros((5, 7), "float32")]):
        np.testing.assert_allclose(out[1], a * 2 + np.roll(a, -1, axis=1), rtol=1e-6)
    with pytest.raises(ShapeError, match=r"tensor 'A' has 2 dimension\(s\).*indexed with 1"):
        te.compute((5,), lambda i: A[i] * 2.0)
    with pytest.raises(ShapeError, match=r"indexed with 1"):
        te.compute((5,), lambda i: A[i])
    with pytest.raises(ShapeError, match=r"indexed with 3"):
        te.compute((5,), lambda i: A[i][0, 1])


def test_tag_scope_context_and_decorator():
    A = te.placeholder((4,), name="A")
    with te.tag_scope("ewise"):
        B = te.compute((4,), lambda i: A[i] + 1.0)
        C = te.compute((4,), lambda i: A[i] + 1.0, tag="mine")
    D = te.compute((4,), lambda i: A[i] + 1.0)

    @te.tag_scope(tag="bcast")
    def f():
        return te.compute((4,), lambda i: A[i] * 2.0)
    assert (B.op.tag, C.op.tag, D.op.tag, f().op.tag) == ("ewise", "mine", "", "bcast")


@pytest.mark.parametrize("name,ref", [("floordiv", np.floor_divide), ("floormod", np.mod),
                                      ("indexdiv", np.floor_divide), ("indexmod", np.mod),
                                      ("truncdiv", lambda a, b: np.trunc(a / b)),
                                      ("truncmod", np.fmod)])
def test_te_division_helpers(rng, name, ref):
    A = te.placeholder((20,), "int32", name="A")
    B = te.compute((20,), lambda i: getattr(te, name)(A[i], 3), name="B")
    s = te.create_schedule(B.op)
    a = rng.integers(-50, 50, 20).astype("int32")
    for out in _build_run(s, [A, B], [a, np.zeros(20, "int32")]):
        np.testing.assert_array_equal(out[1], ref(a, 3).astype("int32"))


@pytest.mark.parametrize("n", [16, 13])
def test_split_disable_predication_is_accepted_and_correct(rng, n):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=4, disable_predication=True)
    a = rng.standard_normal(n).astype("float32")
    for out in _build_run(s, [A, B], [a, np.zeros(n, "float32")]):
        np.testing.assert_allclose(out[1], a + 1, rtol=1e-6)


def test_call_pure_extern_math(rng):
    A = te.placeholder((9,), name="A")
    B = te.compute((9,), lambda i: tir.call_pure_extern("float32", "expf", A[i])
                   + tir.call_pure_extern("float32", "__powf", A[i], 2.0)
                   + tir.call_pure_extern("float32", "fabsf", A[i]), name="B")
    s = te.create_schedule(B.op)
    a = rng.standard_normal(9).astype("float32")
    for out in _build_run(s, [A, B], [a, np.zeros(9, "float32")]):
        np.testing.assert_allclose(out[1], np.exp(a) + a ** 2 + np.abs(a), rtol=1e-5)
    with pytest.raises(TDSLError, match="'my_fn' is not a C math function"):
        tir.call_pure_extern("float32", "my_fn", A[0])


def test_get_const_tuple():
    n = te.var("n")
    A = te.placeholder((4, n, 2 * 3), name="A")
    shape = topi.utils.get_const_tuple(A.shape)
    assert shape[0] == 4 and shape[2] == 6 and shape[1] is A.shape[1]
    assert topi.utils.get_const_int(tir.const(7)) == 7
    with pytest.raises(TDSLError, match="not a constant"):
        topi.utils.get_const_int(n)


@pytest.mark.parametrize("stride,padding,groups", [(1, 1, 1), (2, 0, 1), (1, (1, 2), 2)])
def test_topi_testing_conv_reference_matches_topi(rng, stride, padding, groups):
    a = rng.standard_normal((2, 4, 7, 6)).astype("float32")
    w = rng.standard_normal((6, 4 // groups, 3, 3)).astype("float32")
    ref = tvm.topi.testing.conv2d_nchw_python(a, w, stride, padding, groups)
    # a direct loop over every output element
    pt, pl = (padding, padding) if isinstance(padding, int) else padding
    ap = np.pad(a, ((0, 0), (0, 0), (pt, pt), (pl, pl)))
    oh = (7 + 2 * pt - 3) // stride + 1
    ow = (6 + 2 * pl - 3) // stride + 1
    want = np.zeros((2, 6, oh, ow), "float64")
    og, cg = 6 // groups, 4 // groups
    for o in range(6):
        g = o // og
        for y in range(oh):
            for x in range(ow):
                win = ap[:, g * cg:(g + 1) * cg, y * stride:y * stride + 3,
                         x * stride:x * stride + 3]
                want[:, o, y, x] = np.tensordot(win, w[o], axes=([1, 2, 3], [0, 1, 2]))
    np.testing.assert_allclose(ref, want, rtol=1e-4, atol=1e-4)
    if groups == 1:
        hw = tvm.topi.testing.conv2d_hwcn_python(a.transpose(2, 3, 1, 0),
                                                 w.transpose(2, 3, 1, 0), stride, padding)
        np.testing.assert_allclose(hw, want.transpose(2, 3, 1, 0), rtol=1e-4, atol=1e-4)


def test_topi_testing_softmax(rng):
    a = rng.standard_normal((3, 5)).astype("float32")
    sm = tvm.topi.testing.softmax_python(a)
    np.testing.assert_allclose(sm.sum(axis=1), 1, rtol=1e-6)
    np.testing.assert_allclose(np.log(sm), tvm.topi.testing.log_softmax_python(a), rtol=1e-5,
                               atol=1e-6)


def test_apply_history_best_none_uses_defaults():
    @autotvm.template("tdsl_test/idioms_scale")
    def scale(n):
        A = te.placeholder((n,), name="A")
        B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
        s = te.create_schedule(B.op)
        cfg = autotvm.get_config()
        cfg.define_split("tile", B.op.axis[0], num_outputs=2)
        cfg["tile"].apply(s, B, B.op.axis[0])
        return s, [A, B]
    with autotvm.apply_history_best(None):
        with pytest.warns(UserWarning, match="default config"):
            s, args = scale(12)
    a = np.arange(12, dtype="float32") - 5.5
    b = np.zeros(12, "float32")
    tvm.build(s, args)(a, b)
    np.testing.assert_allclose(b, a * 2)


def test_local_rpc_measure_context_is_local_measurement():
    ctx = autotvm.LocalRPCMeasureContext(n_parallel=1, timeout=5, number=2, repeat=1)
    opt = autotvm.measure_option(builder=autotvm.LocalBuilder(), runner=ctx.runner)
    assert type(ctx.runner).__name__ == "LocalRunner"
    assert ctx.runner.number == 2 and opt is not None


@pytest.mark.skipif(shutil.which("g++") is None, reason="CUDA emulation needs g++")
def test_thread_axis_with_a_range(rng):
    A = te.placeholder((40,), name="A")
    B = te.compute((40,), lambda i: A[i] * 3.0, name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=8)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis((0, 8), "threadIdx.x"))
    f = tvm.build(s, [A, B], "cuda")
    a = rng.standard_normal(40).astype("float32")
    b = np.zeros(40, "float32")
    f.emulate(a, b)
    np.testing.assert_allclose(b, a * 3, rtol=1e-6)
    s2 = te.create_schedule(B.op)
    bx, tx = s2[B].split(B.op.axis[0], factor=16)
    s2[B].bind(bx, te.thread_axis("blockIdx.x"))
    s2[B].bind(tx, te.thread_axis((0, 8), "threadIdx.x"))
    with pytest.raises(LoweringError, match=r"16 iterations but is bound to threadIdx.x, "
                       r"declared with extent 8"):
        tvm.lower(s2, [A, B])
    with pytest.raises(TDSLError, match="starts at 0"):
        te.thread_axis((2, 8), "threadIdx.x")
    # a symbolic loop bound to it: refused unless provably short enough
    n = te.var("n")
    C = te.placeholder((n,), name="C")
    D = te.compute((n,), lambda i: C[i] + 1.0, name="D")
    s3 = te.create_schedule(D.op)
    s3[D].bind(D.op.axis[0], te.thread_axis((0, 8), "threadIdx.x"))
    with pytest.raises(LoweringError, match=r"n iterations, which cannot be proven at most 8"):
        tvm.lower(s3, [C, D])
    s4 = te.create_schedule(D.op)
    bx, tx = s4[D].split(D.op.axis[0], factor=8)
    s4[D].bind(bx, te.thread_axis("blockIdx.x"))
    s4[D].bind(tx, te.thread_axis((0, 8), "threadIdx.x"))
    tvm.lower(s4, [C, D])          # 8 per block: proven
