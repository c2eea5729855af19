"""An IterVar used in an expression stands for its variable (tdsl/tensor.py): ``k.astype``,
arithmetic, comparisons, ``td.minimum``/``td.max(a, b)``/``td.if_then_else``/``td.cast`` on
an axis, and a node built directly around an IterVar (``Cast(k, ...)``), so that passes
renaming a reduce axis by substitution (rfactor, the fresh copy a second compute gets,
lifting) see every use.  Checked against NumPy through the interpreter and LLVM."""
import numpy as np
import pytest

import tdsl as td
from tdsl.expr import Cast, Var
from tdsl.visitor import post_order_visit
from tests.workloads import random_array
from tests.tdsl.test_compute_body import both

N, M = 5, 7

# each: (weight built from reduce axis k, NumPy weight over ks = arange(M))
_WEIGHTS = {
    "astype": (lambda k: k.astype("float32"), lambda ks: ks.astype("float32")),
    "astype_same_dtype": (lambda k: (k.astype("int64") * 2).astype("float32"),
                          lambda ks: (ks * 2).astype("float32")),
    "td_cast": (lambda k: td.cast(k, "float32") + 1.0, lambda ks: ks + 1.0),
    "raw_cast_node": (lambda k: Cast(k, "float32"), lambda ks: ks.astype("float32")),
    "arith": (lambda k: ((k + 1) * 2 - k // 2 + k % 3 - (-k) + abs(k)).astype("float32"),
              lambda ks: ((ks + 1) * 2 - ks // 2 + ks % 3 + ks + ks).astype("float32")),
    "reflected": (lambda k: (10 - k + 3 * k).astype("float32"),
                  lambda ks: (10 + 2 * ks).astype("float32")),
    "compare": (lambda k: td.if_then_else(k < 3, 1.0, 0.5) + td.if_then_else(k.equal(4), 2.0, 0.0),
                lambda ks: np.where(ks < 3, 1.0, 0.5) + np.where(ks == 4, 2.0, 0.0)),
    "minmax": (lambda k: (td.minimum(k, 3) + td.max(k, 2) + td.min(4, k + 0)).astype("float32"),
               lambda ks: (np.minimum(ks, 3) + np.maximum(ks, 2) + np.minimum(4, ks))
               .astype("float32")),
    "select": (lambda k: td.if_then_else(k >= 2, k, 7).astype("float32"),
               lambda ks: np.where(ks >= 2, ks, 7).astype("float32")),
}


def _no_itervar_in_body(op) -> None:
    for b in op.body:
        post_order_visit(b, lambda n: pytest.fail(f"IterVar {n} in the body of {op.name}")
                         if isinstance(n, td.IterVar) else None)


@pytest.mark.parametrize("case", sorted(_WEIGHTS))
def test_weight_of_reduce_axis_rfactor(rng, case):
    weight, ref = _WEIGHTS[case]
    B = td.placeholder((N, M), name="B")
    k = td.reduce_axis((0, M), name="k")
    C = td.compute((N,), lambda i: td.sum(B[i, k] * weight(k), axis=k), name="C")
    _no_itervar_in_body(C.op)
    b = random_array(rng, (N, M))
    want = (b * ref(np.arange(M))).sum(1)
    s = td.create_schedule(C.op)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=3)        # 7 does not divide by 3
    s.rfactor(C, ki)
    for out in both(s, [B, C], [b, np.zeros(N, "float32")], 1):
        np.testing.assert_allclose(out, want, rtol=1e-5)


@pytest.mark.parametrize("case", sorted(_WEIGHTS))
def test_weight_of_shared_reduce_axis(rng, case):
    """A second compute using the same reduce axis gets a fresh copy of it."""
    weight, ref = _WEIGHTS[case]
    B = td.placeholder((N, M), name="B")
    k = td.reduce_axis((0, M), name="k")
    C1 = td.compute((N,), lambda i: td.sum(B[i, k] * weight(k), axis=k), name="C1")
    C2 = td.compute((N,), lambda i: td.sum(B[i, k] * weight(k), axis=k) + C1[i], name="C2")
    _no_itervar_in_body(C2.op)
    b = random_array(rng, (N, M))
    want = 2 * (b * ref(np.arange(M))).sum(1)
    for out in both(td.create_schedule(C2.op), [B, C2], [b, np.zeros(N, "float32")], 1):
        np.testing.assert_allclose(out, want, rtol=1e-5)


def test_astype_on_data_axis_and_symbolic_range(rng):
    n = td.var("n")
    B = td.placeholder((n, M), name="B")
    k = td.reduce_axis((0, n), name="k")

    def body(i, j):
        return td.sum(B[k, j] * (k.astype("float32") - i.astype("float32")), axis=k) * 0.5
    C = td.compute((n, M), body, name="C")
    for size in (1, 4, 6):
        b = random_array(rng, (size, M))
        ks = np.arange(size, dtype="float32")
        want = 0.5 * ((b * ks[:, None]).sum(0)[None, :] - ks[:, None] * b.sum(0)[None, :])
        s = td.create_schedule(C.op)
        (R,) = [t for t in C.op.input_tensors if t.name == "C.red0"]    # lifted: * 0.5
        s.rfactor(R, R.op.reduce_axis[0])
        for out in both(s, [B, C], [b, np.zeros((size, M), "float32")], 1):
            np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)


def test_astype_of_an_itervar_is_a_cast_of_its_var():
    k = td.reduce_axis((0, 4), name="k")
    c = k.astype("float32")
    assert isinstance(c, Cast) and c.value is k.var
    assert k.astype(k.dtype) is k.var and isinstance(k.astype(k.dtype), Var)
