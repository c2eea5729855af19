"""The sketch space of a hand-written tuple reduction (an argmax as ``td.comm_reducer``
over (index, value), not ``tdsl.ops``) offers the shape the default schedule gives
``ops.argmax``: several register-wide chains of partial results (``Form.RF_CHAINS``);
every point of the space builds and matches NumPy through LLVM and the interpreter."""
import numpy as np
import pytest

import tdsl as td
import tdsl.interpreter
from tdsl import autotune
from tdsl.autotune.replay import replay
from tdsl.autotune.sketch import Form


def _argmax_by_hand(rows, cols):
    def fcombine(x, y):
        take = (y[1] > x[1]) | ((y[1] == x[1]) & (y[0] < x[0]))
        return td.if_then_else(take, y[0], x[0]), td.if_then_else(take, y[1], x[1])

    def fidentity(t0, t1):
        return td.const(2 ** 31 - 1, t0), td.min_value(t1)
    am = td.comm_reducer(fcombine, fidentity, name="am")
    X = td.placeholder((rows, cols), "float32", name="X")
    k = td.reduce_axis((0, cols), name="k")
    idx, _ = td.compute((rows,), lambda i: am((k.var.astype("int32"), X[i, k]), axis=k),
                        name="AM")
    return X, idx


@pytest.mark.parametrize("cols", [64, 100])
def test_hand_written_argmax_space_has_chains_and_every_point_is_right(cols):
    X, idx = _argmax_by_hand(5, cols)
    task = autotune.create_auto_task([X, idx])
    forms = [tuple(e.value) for e in task.space.knobs["AM.form"].entities]
    chains = [f for f in forms if f[0] == Form.RF_CHAINS]
    assert chains, forms
    # one vector wider than a register selects badly: tuple reductions get register-wide
    # RF_VECTOR only
    assert all(f[1] <= 16 for f in forms if f[0] == Form.RF_VECTOR), forms
    a = np.round(np.random.default_rng(cols).standard_normal((5, cols)) * 2).astype("float32")
    exp = a.argmax(axis=1).astype("int32")
    for i in range(len(forms)):
        c = task.candidate([i if n == "AM.form" else 0 for n in task.space.names])
        assert c.valid, (c.config, c.error)
        sch = replay(c.trace, task.outputs)
        out = np.full(5, 7, "int32")
        td.build(sch, task.args, target="llvm")(a, out)
        np.testing.assert_array_equal(out, exp, err_msg=str(c.config))
        out = np.full(5, 7, "int32")
        tdsl.interpreter.run(td.lower(sch, task.args), a, out)
        np.testing.assert_array_equal(out, exp, err_msg=str(c.config))


def test_argmax_over_every_axis_gets_vector_forms_on_its_last_axis():
    """A reduction over two axes (ops.argmax(axis=None)): the partial-result forms split
    the last (contiguous) reduction axis (before, only one-axis reductions had them)."""
    from tdsl import ops
    X = td.placeholder((6, 48), "float32", name="X")
    y = ops.argmax(X, axis=None)
    task = autotune.create_auto_task([X, y])
    (name,) = [n for n in task.space.names if n.endswith(".form")]
    forms = [tuple(e.value) for e in task.space.knobs[name].entities]
    assert any(f[0] == Form.RF_CHAINS for f in forms), forms
    a = np.round(np.random.default_rng(0).standard_normal((6, 48)) * 2).astype("float32")
    for i, f in enumerate(forms):
        c = task.candidate([i if n == name else 0 for n in task.space.names])
        assert c.valid, (c.config, c.error)
        out = np.full(1, 7, "int64")
        td.build(replay(c.trace, task.outputs), task.args, target="llvm")(a, out)
        assert out[0] == np.argmax(a), (f, c.config)
