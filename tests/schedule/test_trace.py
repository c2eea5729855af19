"""Traces: a schedule's primitive calls, serialized to JSON and replayed on a fresh
schedule of the same computation, give the identical lowered IR."""
import dataclasses
import json

import pytest
from hypothesis import given, settings

import tdsl as td
from tdsl.schedule import Trace
from tdsl.structural import structural_equal, structural_hash
from tests.schedule.test_bind import shared_matmul_schedule
from tests.schedule.test_tensorize import intrin_gemv
from tests.workloads import conv2d, interpreter_runner, matmul, pipeline, random_schedule


def replay_same(sch, outputs, args, intrinsics=None):
    """JSON round trip of ``sch``'s trace, replayed on a fresh schedule: same IR."""
    text = sch.trace.to_json()
    data = json.loads(text)
    assert isinstance(data, list) and len(data) == len(sch.trace)
    tr = Trace.from_json(text)
    assert tr.to_json() == text
    assert [s.to_dict() for s in tr.steps] == data
    fresh = td.create_schedule(outputs)
    tr.apply(fresh, intrinsics=intrinsics)
    assert fresh.trace.to_json() == text           # replaying records the same steps
    f1, f2 = td.lower(sch, args), td.lower(fresh, args)
    assert str(f1) == str(f2)
    assert structural_equal(f1, f2) and structural_hash(f1) == structural_hash(f2)
    return fresh


def test_trace_design_brief_matmul():
    n = td.var("n")
    A = td.placeholder((n, 16), name="A")
    B = td.placeholder((16, 12), name="B")
    k = td.reduce_axis((0, 16), name="k")
    C = td.compute((n, 12), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = td.create_schedule(C.op)
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, x_factor=8, y_factor=4)
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=4)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    s[C].vectorize(ji)
    s[C].parallel(io)
    assert [st.primitive for st in s.trace.steps] == ["tile", "split", "reorder", "vectorize",
                                                     "parallel"]
    assert str(s.trace.steps[0]) == "s[#2 'C'].tile(#0 'i', #1 'j', x_factor=8, y_factor=4)"
    replay_same(s, [C.op], [A, B, C])


def test_trace_caches_and_attach():
    wl = matmul(M=13, N=8, K=10)
    s = wl.schedule()
    C = wl.main["C"]
    CL = s.cache_write(C, "local")
    AA = s.cache_read(wl.main["A"], "shared", [CL])
    io, jo, ii, ji = s[C].tile(*s[C].op.axis, 4, 4)
    s[CL].compute_at(s[C], jo)
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=3)
    s[AA].compute_at(s[CL], ko)
    s[AA].storage_align(s[AA].op.axis[0], 8, 1)
    s[C].unroll(ji)
    s[C].pragma(io, "auto_unroll_max_step", 8)
    fresh = replay_same(s, [C.op], wl.args)
    wl.case(fresh).check_with(interpreter_runner)


def test_trace_inline_root_and_scope():
    wl = pipeline(H=9, W=7)
    s = wl.schedule()
    B, C = s[wl.main["B"]], s[wl.main["C"]]
    B.compute_inline()
    B.compute_root()
    B.set_scope("global")
    io, ii = C.split(C.op.axis[0], nparts=2)
    f = C.fuse(ii, C.op.axis[1])
    B.compute_at(C, io)
    replay_same(s, [wl.main["C"].op], wl.args)


def test_trace_rfactor():
    n = td.var("n")
    A = td.placeholder((3, n), name="A")
    k = td.reduce_axis((0, n), name="k")
    S = td.compute((3,), lambda r: td.sum(A[r, k], axis=k), name="S")
    s = td.create_schedule(S.op)
    ko, ki = s[S].split(k, factor=4)
    SF = s.rfactor(S, ki, factor_axis=1)
    r, v = s[SF].op.axis
    s[SF].reorder(r, s[SF].op.reduce_axis[0], v)
    s[SF].vectorize(v)
    s[SF].compute_at(s[S], S.op.axis[0])
    replay_same(s, [S.op], [A, S])


def test_trace_gpu_shared_matmul_with_binds():
    wl = matmul(M=13, N=9, K=8)
    s = shared_matmul_schedule(wl)
    assert any(st.primitive == "bind" and dict(st.kwargs)["thread"] == "threadIdx.y"
               for st in s.trace.steps)
    fresh = replay_same(s, [wl.main["C"].op], wl.args)
    wl.case(fresh).check_with(interpreter_runner)


def test_trace_double_buffer():
    wl = matmul(M=8, N=8, K=8)
    s = shared_matmul_schedule(wl, kf=2)
    s.stage_by_name("A.shared").double_buffer()
    replay_same(s, [wl.main["C"].op], wl.args)


def test_trace_tensorize_needs_and_uses_intrinsics():
    A = td.placeholder((6, 12), name="A")
    B = td.placeholder((8, 12), name="B")
    k = td.reduce_axis((0, 12), name="k")
    C = td.compute((6, 8), lambda i, j: td.sum(A[i, k] * B[j, k], axis=k), name="C")
    s = td.create_schedule(C.op)
    x, y = C.op.axis
    yo, yi = s[C].split(y, factor=4)
    s[C].reorder(x, yo, yi, k)
    g = intrin_gemv(4, 12)
    s[C].tensorize(yi, g)
    replay_same(s, [C.op], [A, B, C], intrinsics={"gemv": g})
    with pytest.raises(td.ScheduleError, match=r"tensorize.*needs the tensor intrinsic 'gemv'"):
        Trace.from_json(s.trace.to_json()).apply(td.create_schedule(C.op))


def test_trace_conv2d_compute_at():
    wl = conv2d(CI=2, H=6, W=5, CO=2, symbolic_h=True)
    s = wl.schedule()
    P, Y = s[wl.main["P"]], s[wl.main["Y"]]
    b, o, y, x = Y.op.axis
    yo, yi = Y.split(y, factor=2)
    Y.reorder(b, yo, o, yi, x)
    rc, ry, rx = Y.op.reduce_axis
    Y.fuse(ry, rx)
    P.compute_at(Y, yo)
    fresh = replay_same(s, [wl.main["Y"].op], wl.args)
    for h in (3, 8):
        wl.case(fresh, H=h).check_with(interpreter_runner)


def test_trace_from_bad_json():
    with pytest.raises(td.TuningError, match="not valid JSON"):
        Trace.from_json("[{")
    with pytest.raises(td.TuningError, match="unknown primitive 'frobnicate'"):
        Trace.from_json('[{"primitive": "frobnicate", "stage": 0}]')
    with pytest.raises(td.TuningError, match="old name-based trace format"):
        Trace.from_json('[{"primitive": "split", "stage": "C", "loops": ["i"]}]')
    with pytest.raises(td.TuningError, match="must be a list"):
        Trace.from_json('{"primitive": "split"}')


def test_trace_replay_on_wrong_computation_names_the_loop():
    wl = matmul(M=4, N=4, K=4)                # a stage 'C' with loops i, j, k
    s = wl.schedule()
    C = s[wl.main["C"]]
    io, ii = C.split(C.op.axis[0], factor=2)
    C.split(io, factor=2)                     # loop #3 of C: i.outer
    tr = Trace.from_json(s.trace.to_json())
    tr.steps = tr.steps[1:]                   # a fresh C has no loop #3
    with pytest.raises(td.ScheduleError, match=r"split: stage 'C', loop '#3': replay: the stage has "
                                              r"no loop #3"):
        tr.apply(wl.schedule())
    tr.steps = [dataclasses.replace(tr.steps[0], stage=7)]
    with pytest.raises(td.ScheduleError, match=r"replay: the schedule has no stage #7"):
        tr.apply(wl.schedule())


@settings(max_examples=25)
@given(case=random_schedule())
def test_trace_replay_random_schedules(case):
    """Every random legal schedule replays (through JSON) to the same lowered IR."""
    outputs = [t.op for t in case.args[-1:]]
    replay_same(case.sch, outputs, case.args)


# ---- identity, not names (regressions) ----------------------------------------------------------
def _run_both(sch, args, arrays):
    """Outputs of ``sch`` through the interpreter and LLVM (arrays are copied)."""
    from tdsl import interpreter
    outs = []
    for mode in ("interp", "llvm"):
        arrs = [a.copy() for a in arrays]
        if mode == "interp":
            interpreter.run(td.lower(sch, args), *arrs)
        else:
            td.build(sch, args, target="llvm")(*arrs)
        outs.append(arrs)
    return outs


def test_replay_with_two_stages_of_the_same_name():
    """Two stages both called 'compute' each keep their own schedule on replay."""
    A = td.placeholder((13,), name="A")
    B = td.compute((13,), lambda i: A[i] * 2.0)
    C = td.compute((13,), lambda i: B[i] + 1.0)
    assert B.op.name == C.op.name
    s = td.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[C].vectorize(ii)
    s2 = Trace.from_json(s.trace.to_json()).apply(td.create_schedule(C.op))
    assert [v.name for v in s2[B].leaf_iter_vars] == ["i"]
    assert [v.name for v in s2[C].leaf_iter_vars] == ["i.outer", "i.inner"]
    replay_same(s, [C.op], [A, C])


def test_replay_cache_read_of_second_output():
    """cache_read of output 1 of a multi-output op replays onto output 1, not output 0."""
    import numpy as np
    A = td.placeholder((13,), name="A")
    B0, B1 = td.compute((13,), lambda i: (A[i] * 2.0, A[i] - 1.0), name="B")
    C = td.compute((13,), lambda i: B0[i] * B1[i], name="C")
    s = td.create_schedule(C.op)
    BB = s.cache_read(B1, "local", [C])
    assert [t.name for t in s[BB].op.input_tensors] == [B1.name]
    s2 = replay_same(s, [C.op], [A, C])
    cache = [st for st in s2.stages if st.name.endswith(".local")][0]
    assert [t.value_index for t in cache.op.input_tensors] == [1]
    a = np.random.default_rng(1).uniform(-3, 3, 13).astype("float32")
    for _, c in _run_both(s2, [A, C], [a, np.full(13, np.nan, "float32")]):
        np.testing.assert_allclose(c, (a * 2) * (a - 1), rtol=1e-5)


@pytest.mark.parametrize("kw", ["nparts=n", "factor=n", "nparts=max(n//4,1)", "factor=max(n//3,1)"])
def test_symbolic_split_is_recorded_replayed_and_correct(kw):
    """split by a symbolic factor / nparts: recorded in terms of the computation's sizes,
    replayed on a fresh copy of the computation (other Var objects), right at several n."""
    import numpy as np

    def make():
        n = td.var("n")
        A = td.placeholder((n,), name="A")
        B = td.compute((n,), lambda i: A[i] + 1.0, name="B")
        val = {"nparts=n": ("nparts", n), "factor=n": ("factor", n),
               "nparts=max(n//4,1)": ("nparts", td.maximum(n // 4, 1)),
               "factor=max(n//3,1)": ("factor", td.maximum(n // 3, 1))}[kw]
        return A, B, {val[0]: val[1]}

    A, B, kwargs = make()
    s = td.create_schedule(B.op)
    s[B].split(B.op.axis[0], **kwargs)
    assert len(s.trace) == 1 and "n" in str(s.trace)
    A2, B2, _ = make()                      # the same computation built again
    s2 = Trace.from_json(s.trace.to_json()).apply(td.create_schedule(B2.op))
    assert s2.trace.to_json() == s.trace.to_json()
    for sch, (a_t, b_t) in ((s, (A, B)), (s2, (A2, B2))):
        for m in (1, 5, 9, 16):
            a = np.random.default_rng(m).uniform(-3, 3, m).astype("float32")
            for _, b in _run_both(sch, [a_t, b_t], [a, np.full(m, np.nan, "float32")]):
                np.testing.assert_allclose(b, a + 1)


def test_symbolic_split_by_foreign_or_possibly_zero_size_is_refused_unchanged():
    n, m = td.var("n"), td.var("m")
    A = td.placeholder((n,), name="A")
    B = td.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = td.create_schedule(B.op)
    with pytest.raises(td.ScheduleError, match=r"split: stage 'B'.*'m' is not a size of this computation"):
        s[B].split(B.op.axis[0], factor=m)
    with pytest.raises(td.ScheduleError, match=r"split: stage 'B', loop 'i': nparts=.* may be < 1"):
        s[B].split(B.op.axis[0], nparts=n // 4)
    assert [v.name for v in s[B].leaf_iter_vars] == ["i"] and len(s.trace) == 0
    assert [v.name for v in s[B].all_iter_vars] == ["i"]


def test_failing_primitive_leaves_schedule_and_trace_unchanged():
    """tile splits x, then refuses y's factor: the x split must be undone, nothing recorded."""
    wl = matmul(M=8, N=8, K=4)
    s = wl.schedule()
    C = s[wl.main["C"]]
    i, j = C.op.axis
    C.split(C.op.reduce_axis[0], factor=2)
    before = (list(C.leaf_iter_vars), list(C.all_iter_vars), list(C.relations), len(s.trace),
              list(s.stages))
    with pytest.raises(td.ScheduleError, match="tile: stage 'C', loop 'j': factor must be >= 1"):
        C.tile(i, j, 4, 0)
    assert (list(C.leaf_iter_vars), list(C.all_iter_vars), list(C.relations), len(s.trace),
            list(s.stages)) == before

    def half_done():                         # a rewrite that fails half-way is undone
        C.split(i, factor=2)
        s.cache_write(wl.main["C"], "local")
        raise td.ScheduleError("test", "C", "fails after mutating")
    step = s.trace.step("split", C, [i], {"factor": 2})
    with pytest.raises(td.ScheduleError, match="fails after mutating"):
        s.run_step(step, half_done)
    assert (list(C.leaf_iter_vars), list(C.all_iter_vars), list(C.relations), len(s.trace),
            list(s.stages)) == before
    assert C.op is wl.main["C"].op and not C.iter_attrs
    C.tile(i, j, 4, 2)                       # and the schedule still works
    replay_same(s, [wl.main["C"].op], wl.args)


def test_trace_rfactor_blocked_layout():
    """rfactor's blocked layout (block_axis, block_lanes, block_at) is recorded and
    replayed: the same partial-result stage and IR."""
    A = td.placeholder((6, 8, 12), name="A")
    k = td.reduce_axis((0, 12), name="k")
    S = td.compute((6, 8), lambda r, c: td.sum(A[r, c, k], axis=k), name="S")
    s = td.create_schedule(S.op)
    ko, _ = s[S].split(k, nparts=2)
    SF = s.rfactor(S, ko, block_axis=1, block_lanes=4, block_at=0)
    s[SF].vectorize(s[SF].op.axis[-1])
    fresh = replay_same(s, [S.op], [A, S])
    assert [int(d.value) for d in fresh.stages[1].op.output(0).shape] == [2, 2, 6, 4]
