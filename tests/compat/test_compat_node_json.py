"""``tvm.ir.save_json`` / ``load_json`` and pickling of tensors, operations and schedules:
what comes back builds and computes what the original does (checked against NumPy on random
data at symbolic sizes bound to several values), and bad strings are refused clearly."""
import base64
import json
import pickle

import numpy as np
import pytest

import tvm
from tvm import te

from tdsl.errors import ArgumentError, TDSLError


def _scheduled():
    """B = A + 1 computed at C's outer loop, C = row sums of 2 B via a local cache."""
    m, n = te.size_var("m"), te.size_var("n")
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] + 1.0, name="B")
    k = te.reduce_axis((0, n), "k")
    C = te.compute((m,), lambda i: te.sum(B[i, k] * 2.0, axis=k), name="C")
    s = te.create_schedule(C.op)
    xo, _ = s[C].split(C.op.axis[0], factor=4)
    s[B].compute_at(s[C], xo)
    s.cache_write(C, "local")
    return s, [A, C]


def _check_rowsum(rng, f, sizes=((6, 5), (9, 16), (1, 3))):
    for m, n in sizes:
        a = rng.standard_normal((m, n)).astype("float32")
        c = np.zeros(m, "float32")
        f(a, c)
        np.testing.assert_allclose(c, ((a + 1) * 2).sum(axis=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("how", ["json", "pickle"])
def test_schedule_round_trip_builds_the_same_function(rng, how):
    s, args = _scheduled()
    if how == "json":
        text = tvm.ir.save_json([s, args])
        assert isinstance(json.loads(text), dict)
        s2, args2 = tvm.ir.load_json(text)
    else:
        s2, args2 = pickle.loads(pickle.dumps([s, args]))
    assert isinstance(s2, te.schedule.Schedule)
    assert s2[args2[1]].name == "C" and str(s2.outputs[0].body) == str(s.outputs[0].body)
    assert str(tvm.lower(s2, args2)) == str(tvm.lower(s, args))
    _check_rowsum(rng, tvm.build(s2, args2, "llvm"))
    # the copy is a schedule of its own: scheduling it leaves the original alone
    C2 = args2[1]
    s2[C2].split(s2[C2].op.axis[0], factor=2)
    assert str(tvm.lower(s2, args2)) != str(tvm.lower(s, args))


def test_tensor_and_expression_round_trip(rng):
    m, n = te.size_var("m"), te.size_var("n")
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n), "k")
    C = te.compute((m,), lambda i: te.sum((A[i, k] + 1.0) * 2.0, axis=k), name="C")
    C2 = tvm.ir.load_json(tvm.ir.save_json(C))
    assert isinstance(C2, te.tensor.Tensor) and str(C2) == str(C)
    body = tvm.ir.load_json(tvm.ir.save_json(C.op.body[0]))
    assert str(body) == str(C.op.body[0])
    A2 = C2.op.input_tensors[0]
    _check_rowsum(rng, tvm.build(te.create_schedule(C2.op), [A2, C2], "llvm"))


def test_scan_op_round_trip(rng):
    m, n = te.size_var("m"), te.size_var("n")
    X = te.placeholder((m, n), name="X")
    S = te.placeholder((m, n), name="S")
    init = te.compute((1, n), lambda _, i: X[0, i], name="init")
    update = te.compute((m, n), lambda t, i: S[t - 1, i] * 0.5 + X[t, i], name="update")
    R = te.scan(init, update, S)
    op2 = tvm.ir.load_json(tvm.ir.save_json(R.op))
    assert isinstance(op2, te.ScanOp) and isinstance(op2, te.tensor.ScanOp)
    R2 = op2.output(0)
    X2 = [t for t in te.create_schedule(op2).stages if t.name == "X"][0].op.output(0)
    f = tvm.build(te.create_schedule(op2), [X2, R2], "llvm")
    for rows, cols in ((4, 3), (7, 8)):
        x = rng.standard_normal((rows, cols)).astype("float32")
        want = x.copy()
        for t in range(1, rows):
            want[t] = want[t - 1] * 0.5 + x[t]
        r = np.zeros_like(x)
        f(x, r)
        np.testing.assert_allclose(r, want, rtol=1e-5, atol=1e-5)


def _doc(payload: bytes) -> str:
    return json.dumps({"format": "tdsl.compat.tvm.node", "version": 1,
                       "pickle": base64.b64encode(payload).decode()})


class _Boom:
    def __reduce__(self):
        import os
        return (os.system, ("echo pwned",))


def test_bad_strings_are_refused():
    with pytest.raises(ArgumentError, match="load_json: not JSON"):
        tvm.ir.load_json("{nope")
    with pytest.raises(ArgumentError, match="TVM's own node JSON cannot be loaded"):
        tvm.ir.load_json(json.dumps({"root": 1, "nodes": [{"type_key": ""}], "attrs": {}}))
    with pytest.raises(ArgumentError, match="version 7"):
        tvm.ir.load_json(json.dumps({"format": "tdsl.compat.tvm.node", "version": 7}))
    with pytest.raises(ArgumentError, match="damaged"):
        tvm.ir.load_json(_doc(pickle.dumps(te.var("x"))[:-5]))
    with pytest.raises(ArgumentError, match="expected a str"):
        tvm.ir.load_json(b"{}")
    # a string that would call os.system when unpickled is refused, not run
    with pytest.raises(TDSLError, match=r"names (posix|os|nt)\.system.*refused") as e:
        tvm.ir.load_json(_doc(pickle.dumps(_Boom())))
    assert isinstance(e.value, RuntimeError)
    with pytest.raises(TDSLError, match="save_json: cannot save function"):
        tvm.ir.save_json(lambda i: i)


class _ByGetattr:
    """Pickles as ``getattr(owner, name)``, as some Pythons (3.11.2) pickle enum members."""

    def __init__(self, owner, name):
        self.owner, self.name = owner, name

    def __reduce__(self):
        return (getattr, (self.owner, self.name))


def _as_json(obj) -> str:
    from tdsl.compat.tvm.node_json import FORMAT, VERSION
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return json.dumps({"format": FORMAT, "version": VERSION,
                       "pickle": base64.b64encode(data).decode("ascii")})


def test_getattr_in_a_string_gives_enum_members_only():
    from tdsl.dtype import DType
    from tdsl.expr import Var
    assert tvm.ir.load_json(_as_json(_ByGetattr(DType, "FLOAT32"))) is DType.FLOAT32
    # a general getattr would walk from an allowed class to any function
    for owner, name in ((Var, "__init__"), (DType, "__class__"), (DType, "mro")):
        with pytest.raises(TDSLError, match="not an enum member"):
            tvm.ir.load_json(_as_json(_ByGetattr(owner, name)))
