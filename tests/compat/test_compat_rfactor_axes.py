"""rfactor's reduce axes as TVM makes them (``tvm.te.create_schedule``): the untouched
root axes stay the user's IterVars and come first, the rebuilt loops share the split
loops' variables; tdsl's own schedules keep the loop order.  Results against NumPy."""
import numpy as np
import pytest

import tdsl as td
import tdsl.interpreter
from tdsl import ops
from tdsl.errors import ScheduleError
from tvm import te

from .helpers import run_both


def _red_stage(out):
    return out.op.input_tensors[0]


@pytest.mark.parametrize("shape", [(6, 9), (8, 8), (13, 5)])
def test_argmax_rfactor_in_tvm_order_keeps_the_first_index_on_ties(rng, shape):
    """k0 split, rfactor of its inner part: TVM's order runs k1 outside ko, not the
    points' order, so the partial argmax must compare indices (many ties here)."""
    X = te.placeholder(shape, dtype="int32", name="X")
    Y = ops.argmax(X, axis=None)
    R = _red_stage(Y)
    s = te.create_schedule(Y.op)
    k0, k1 = R.op.reduce_axis
    ko, ki = s[R].split(k0, factor=4)
    RF = s.rfactor(R, ki)[0]        # a tuple reduction: one tensor per output
    assert RF.op.reduce_axis[0] is k1 and RF.op.reduce_axis[1].var is ko.var
    x = rng.integers(0, 3, size=shape).astype("int32")
    x[0, -1] = x[4, 0] = 9      # the max twice: row 4 (ko 1) comes first in k1-major order
    for out in run_both(s, [X, Y], [x, np.zeros(1, "int64")]):
        assert out[1][0] == np.argmax(x)


@pytest.mark.parametrize("m", [7, 16])
def test_tdsl_rfactor_keeps_the_loop_order(rng, m):
    """tdsl's own schedule: the rebuilt loops stay where they were (ko before k1), the
    untouched axis is still the user's object, and the argmax stays the first index."""
    X = td.placeholder((m, 10), dtype="int32", name="X")
    Y = ops.argmax(X, axis=None)
    R = _red_stage(Y)
    s = td.create_schedule(Y.op)
    k0, k1 = R.op.reduce_axis
    ko, ki = s[R].split(k0, factor=4)
    RF = s.rfactor(R, ki)[0]        # a tuple reduction: one tensor per output
    assert RF.op.reduce_axis[0].var is ko.var and RF.op.reduce_axis[1] is k1
    x = rng.integers(0, 3, size=(m, 10)).astype("int32")
    for out in run_both(s, [X, Y], [x, np.zeros(1, "int64")]):
        assert out[1][0] == np.argmax(x)


@pytest.mark.parametrize("n", [12, 17])
def test_rfactor_of_a_fused_reduction_keeps_the_other_axis(rng, n):
    """k1 and k2 fused and split: both are rebuilt (touched), k3 is kept; the stage's
    loops can then be scheduled through the kept axis."""
    N = te.size_var("n")
    A = te.placeholder((N, 4, 5, 3), name="A")
    k1 = te.reduce_axis((0, 4), name="k1")
    k2 = te.reduce_axis((0, 5), name="k2")
    k3 = te.reduce_axis((0, 3), name="k3")
    B = te.compute((N,), lambda i: te.sum(A[i, k1, k2, k3], axis=[k1, k2, k3]), name="B")
    s = te.create_schedule(B.op)
    f = s[B].fuse(k1, k2)
    fo, fi = s[B].split(f, factor=3)
    BF = s.rfactor(B, fi)
    assert BF.op.reduce_axis[0] is k3 and BF.op.reduce_axis[1].var is fo.var
    s[BF].unroll(k3)
    a = rng.standard_normal((n, 4, 5, 3)).astype("float32")
    for out in run_both(s, [A, B], [a, np.zeros(n, "float32")]):
        np.testing.assert_allclose(out[1], a.sum(axis=(1, 2, 3)), rtol=1e-4, atol=1e-4)


def test_rfactor_of_a_loop_of_another_stage_is_refused():
    A = te.placeholder((8, 8), name="A")
    k = te.reduce_axis((0, 8), name="k")
    B = te.compute((8,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=4)
    BF = s.rfactor(B, ki)
    with pytest.raises(ScheduleError, match="rfactor"):
        s.rfactor(B, ko)          # ko was rebuilt into BF; B now reduces over ki.v
    assert isinstance(BF, te.Tensor)
