"""TVM's schedule record: inside ``PassContext(config={"te.keep_schedule_record": True})`` a
schedule lists "vanilla" and each primitive after it (tile as split, split, reorder), and
the schedule as it was after each; outside, both are empty."""
import numpy as np

import tvm
from tvm import te

from .helpers import run_both


def _matmul(n=24):
    k = te.reduce_axis((0, n), "k")
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    C = te.compute((n, n), lambda m, j: te.sum(A[m, k] * B[k, j], axis=k), name="C")
    return A, B, C, k


def test_record_lists_each_primitive_and_the_schedule_after_it(rng):
    with tvm.transform.PassContext(config={"te.keep_schedule_record": True}):
        A, B, C, k = _matmul()
        s = te.create_schedule(C.op)
        assert s.primitive_record == ["vanilla"] and len(s.schedule_record) == 1
        mo, no, mi, ni = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 5)
        ko, ki = s[C].split(k, factor=7)
        s[C].reorder(mo, ko, no, mi, ki, ni)
        s[C].parallel(mo)
        s.cache_write(C, "local")
    assert s.primitive_record == ["vanilla", "split", "split", "reorder", "split", "reorder",
                                  "parallel", "cache_write"]
    record = s.schedule_record
    assert len(record) == 8
    leaves = [[iv.name for iv in r.stages[-1].leaf_iter_vars] for r in record[:6]]
    assert leaves[0] == ["m", "j", "k"]
    assert leaves[1] == ["m.outer", "m.inner", "j", "k"]
    assert leaves[2] == ["m.outer", "m.inner", "j.outer", "j.inner", "k"]
    assert leaves[3] == ["m.outer", "j.outer", "m.inner", "j.inner", "k"]
    assert leaves[5] == ["m.outer", "k.outer", "j.outer", "m.inner", "k.inner", "j.inner"]
    assert len(record[7].stages) == len(s.stages) == 4 and len(record[6].stages) == 3
    a, b = (rng.standard_normal((24, 24)).astype("float32") for _ in range(2))
    for r in (record[3], record[-1], s):        # each recorded schedule still computes C
        for out in run_both(r, [A, B, C], [a, b, np.full((24, 24), np.nan, "float32")]):
            np.testing.assert_allclose(out[2], a @ b, rtol=1e-4, atol=1e-4)


def test_no_record_outside_the_context_or_after_it():
    A, B, C, _ = _matmul()
    s = te.create_schedule(C.op)
    s[C].split(C.op.axis[0], 4)
    assert len(s.schedule_record) == 0 and s.primitive_record == []
    with tvm.transform.PassContext(config={"te.keep_schedule_record": True}):
        assert tvm.transform.PassContext.current().config["te.keep_schedule_record"]
        with tvm.transform.PassContext(opt_level=3):        # the inner context has no config
            assert len(te.create_schedule(C.op).schedule_record) == 0
        assert len(te.create_schedule([]).schedule_record) == 1
    assert tvm.transform.PassContext.current().config == {}
