"""The sketch rules per operator class: which rule and knobs each class gets, and every
sampled point of each space built and compared with NumPy (LLVM and the interpreter), at
sizes that do and don't divide the tiles."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import tdsl as td
from tdsl import autotune, ops
from tdsl.autotune.replay import replay
from tdsl.autotune.sketch import AUTO_UNROLL, Form, Place, Rule
from tdsl.tensor import PlaceholderOp

from tests.autotune.helpers import check_schedule


def gemv_bias_tanh(n=48, k=40):
    A = td.placeholder((n, k), "float32", name="A")
    x = td.placeholder((k,), "float32", name="x")
    b = td.placeholder((n,), "float32", name="b")
    r = td.reduce_axis((0, k), name="r")
    y = td.compute((n,), lambda i: td.sum(A[i, r] * x[r], axis=r), name="y")
    out = td.compute((n,), lambda i: td.tanh(y[i] + b[i]), name="out")
    return [A, x, b, out], lambda a, xv, bv: np.tanh(a.astype("float64") @ xv + bv)


def dense1(k=64, n=48):
    X = td.placeholder((1, k), "float32", name="X")
    W = td.placeholder((n, k), "float32", name="W")
    return [X, W, ops.dense(X, W)], lambda x, w: x.astype("float64") @ w.T


def max_pool(c=4, h=14, w=14):
    X = td.placeholder((1, c, h, w), "float32", name="X")
    return [X, ops.max_pool2d(X, 3, 2, padding=1)], lambda x: _np_maxpool(x)


def _np_maxpool(x):
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    h = (x.shape[2] + 2 - 3) // 2 + 1
    w = (x.shape[3] + 2 - 3) // 2 + 1
    out = np.full(x.shape[:2] + (h, w), -np.inf, np.float32)
    for dy in range(3):
        for dx in range(3):
            out = np.maximum(out, xp[:, :, dy:dy + 2 * h:2, dx:dx + 2 * w:2][:, :, :h, :w])
    return out


def col_sum(m=24, n=40):
    X = td.placeholder((m, n), "float32", name="X")
    r = td.reduce_axis((0, m), name="r")
    S = td.compute((n,), lambda j: td.sum(X[r, j], axis=r), name="S")
    return [X, S], lambda x: x.astype("float64").sum(axis=0)


def row_argmax(m=12, n=40):
    X = td.placeholder((m, n), "float32", name="X")
    return [X, ops.argmax(X, axis=1)], lambda x: x.argmax(axis=1)


def transpose(m=40, n=24):
    X = td.placeholder((m, n), "float32", name="X")
    return [X, ops.transpose(X)], lambda x: x.T


def softmax(m=6, n=40):
    X = td.placeholder((m, n), "float32", name="X")

    def ref(x):
        z = np.exp(x - x.max(axis=1, keepdims=True))
        return z / z.sum(axis=1, keepdims=True)
    return [X, ops.softmax(X)], ref


def layernorm(m=6, n=40):
    X = td.placeholder((m, n), "float32", name="X")
    G = td.placeholder((n,), "float32", name="G")
    B = td.placeholder((n,), "float32", name="B")

    def ref(x, g, b):
        mu = x.mean(axis=1, keepdims=True)
        v = ((x - mu) ** 2).mean(axis=1, keepdims=True)
        return (x - mu) / np.sqrt(v + 1e-5) * g + b
    return [X, G, B, ops.layernorm(X, G, B)], ref


def triad(n=1000):
    A, B, C, D = (td.placeholder((n,), "float32", name=s) for s in "ABCD")
    E = td.compute((n,), lambda i: D[i] + (A[i] + B[i]) * C[i], name="E")
    return [A, B, C, D, E], lambda a, b, c, d: d + (a + b) * c


def matmul(n=24, m=40, k=20):
    A = td.placeholder((n, k), "float32", name="A")
    B = td.placeholder((k, m), "float32", name="B")
    r = td.reduce_axis((0, k), name="r")
    C = td.compute((n, m), lambda i, j: td.sum(A[i, r] * B[r, j], axis=r), name="C")
    return [A, B, C], lambda a, b: a.astype("float64") @ b


CLASSES = {"gemv_bias_tanh": gemv_bias_tanh, "dense1": dense1, "max_pool": max_pool,
           "col_sum": col_sum, "row_argmax": row_argmax, "transpose": transpose,
           "softmax": softmax, "layernorm": layernorm, "triad": triad, "matmul": matmul}


def _task(name, **kw):
    args, ref = CLASSES[name](**kw)
    return autotune.create_auto_task(args), args, ref


def _plan(task, rule):
    return [p for p in task.source.plans if p.rule is rule]


def _inputs(args, rng):
    return [rng.uniform(-1, 1, [int(s.value) for s in t.shape]).astype("float32")
            for t in args if isinstance(t.op, PlaceholderOp)]


def _check_point(task, args, ref, point, seed=0, interpreter=False):
    c = task.candidate(point)
    if not c.valid:
        assert c.error.split(":")[0] in ("ScheduleError", "LoweringError", "CodeSizeError"), c.error
        return False
    rng = np.random.default_rng(seed)
    ins = _inputs(args, rng)
    sch = replay(c.trace, task.outputs)
    check_schedule(sch, task, ins, np.asarray(ref(*ins)), interpreter, str(c.config))
    return True


# ---- which rule, which knobs -------------------------------------------------------------------
def test_memory_bound_reductions_get_the_reduce_rule_and_never_pack_a_matrix_read_once():
    for name in ("gemv_bias_tanh", "dense1", "col_sum", "row_argmax", "max_pool"):
        task, _, _ = _task(name)
        assert not _plan(task, Rule.TILE), name
        assert not any(".pack." in k for k in task.space.names), (name, task.space.names)
        assert len(task.space) > 1, f"{name}: a space of one point"


def test_gemv_offers_vector_partial_sums_and_pool_a_vectorized_spatial_axis():
    task, _, _ = _task("gemv_bias_tanh", n=64, k=256)
    forms = {tuple(e.value)[0] for e in task.space.knobs["y.form"].entities}
    assert Form.RF_VECTOR in forms
    task, _, _ = _task("max_pool", c=8, h=32, w=32)
    (p,) = _plan(task, Rule.REDUCE)
    forms = {tuple(e.value)[0] for e in task.space.knobs[f"{p.name}.form"].entities}
    assert Form.SPATIAL_VECTOR in forms
    assert [e.value for e in task.space.knobs[f"{p.name}.auto_unroll"].entities] == AUTO_UNROLL


def test_matmul_packs_only_reused_inputs_and_has_the_unroll_pragma():
    task, _, _ = _task("matmul")
    (p,) = _plan(task, Rule.TILE)
    assert {k for k in task.space.names if ".pack." in k} == {f"{p.name}.pack.A",
                                                              f"{p.name}.pack.B"}
    assert [e.value for e in task.space.knobs[f"{p.name}.auto_unroll"].entities] == AUTO_UNROLL
    # innermost factors up to 64
    assert max(e.value[-1] for e in task.space.knobs[f"{p.name}.S1"].entities) == 40
    big, _, _ = _task("matmul", n=128, m=128, k=128)
    assert max(e.value[-1] for e in big.space.knobs[f"{p.name}.S1"].entities) == 64
    assert max(e.value[-1] for e in big.space.knobs[f"{p.name}.R0"].entities) == 64


def test_expensive_producer_read_twice_is_not_inlined_by_default():
    task, _, _ = _task("softmax")
    (p,) = _plan(task, Rule.MATERIALIZE)
    assert "exp" in p.name
    at = [e.value for e in task.space.knobs[f"{p.name}.at"].entities]
    assert at == [Place.ROW, Place.ROOT, Place.INLINE]
    c = task.candidate(task.space.default())
    assert c.valid, c.error
    text = str(c.func)
    assert text.count("exp(") == 1, text


def test_transpose_gets_a_2d_tile_knob():
    task, _, _ = _task("transpose")
    (p,) = _plan(task, Rule.ROOT)
    assert p.transpose
    assert [e.value for e in task.space.knobs[f"{p.name}.tile2d"].entities] == [0, 8, 16]


def test_vector_lanes_and_cores_come_from_the_target():
    args, _ = matmul()
    wide = autotune.create_auto_task(args, target="llvm -mcpu=skylake-avx512")
    narrow = autotune.create_auto_task(args, target="llvm -mcpu=x86-64")
    assert wide.source.lanes(32) == 16 and narrow.source.lanes(32) == 4
    x4 = autotune.create_auto_task(args, target="llvm -num-threads=3")
    assert x4.source.cores == 3


# ---- correctness of sampled points ------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(CLASSES))
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_sampled_points_match_numpy(name, data):
    task, args, ref = _task(name)
    point = tuple(data.draw(st.integers(0, d - 1), label=k) for k, d in
                  zip(task.space.names, task.space.dims))
    _check_point(task, args, ref, point)


@pytest.mark.parametrize("name,kw", [("gemv_bias_tanh", dict(n=64, k=256)),
                                     ("max_pool", dict(c=3, h=16, w=16)),
                                     ("col_sum", dict(m=16, n=64)),
                                     ("row_argmax", dict(m=4, n=64)),
                                     ("softmax", dict(m=4, n=64)),
                                     ("transpose", dict(m=64, n=32)),
                                     ("layernorm", dict(m=4, n=64))])
def test_every_form_and_placement_matches_numpy(name, kw):
    """Each choice of the form/at/tile2d/auto_unroll knobs (others at their defaults) is
    legal (rfactor of argmax's tuple reduction included) and right, through LLVM and the
    interpreter."""
    task, args, ref = _task(name, **kw)
    names = task.space.names
    for i, k in enumerate(names):
        if not k.endswith((".form", ".at", ".tile2d", ".auto_unroll")):
            continue
        for j in range(task.space.dims[i]):
            point = tuple(j if n == i else 0 for n in range(len(names)))
            assert _check_point(task, args, ref, point, interpreter=(j % 2 == 0)), \
                task.candidate(point).error


def test_auto_unroll_pragma_unrolls_small_loops_only():
    A = td.placeholder((64, 4, 4), "float32", name="A")
    k = td.reduce_axis((0, 4), name="k")
    C = td.compute((64, 4), lambda i, j: td.sum(A[i, j, k], axis=k), name="C")
    s = td.create_schedule(C.op)
    s[C].pragma(C.op.axis[0], "auto_unroll_max_step", 32)
    text = str(td.lower(s, [A, C]))
    assert "for i in range(64" in text and text.count("unrolled(4)") == 2
    for limit, n_unrolled in ((16, 1), (0, 0)):
        s = td.create_schedule(C.op)
        s[C].pragma(C.op.axis[0], "auto_unroll_max_step", limit)
        # j leaves 4 x (1 + 4) = 20 statements: over 16, so only k (4) is unrolled
        assert str(td.lower(s, [A, C])).count("unrolled(") == n_unrolled
    a = np.random.default_rng(0).uniform(-1, 1, (64, 4, 4)).astype("float32")
    c = np.zeros((64, 4), np.float32)
    td.build(s, [A, C], target="llvm")(a, c)
    np.testing.assert_allclose(c, a.sum(-1), rtol=1e-5, atol=1e-5)


# ---- CUDA: static resource checks, no timing without a GPU -------------------------------------
def _big_matmul(n=1024):
    A = td.placeholder((n, n), "float32", name="A")
    B = td.placeholder((n, n), "float32", name="B")
    r = td.reduce_axis((0, n), name="r")
    return [A, B, td.compute((n, n), lambda i, j: td.sum(A[i, r] * B[r, j], axis=r), name="C")]


def test_cuda_candidates_over_the_gpu_limits_are_illegal_before_any_build(monkeypatch):
    """Shared memory, threads and registers are checked on the lowered candidate: an illegal
    point becomes an invalid candidate without NVRTC (the CUDA code generator is not even
    called), and every point that passes builds."""
    import random
    import tdsl.backends.cuda.codegen as codegen
    task = autotune.create_auto_task(_big_matmul(), target="cuda")
    calls = []
    real = codegen.generate
    monkeypatch.setattr(codegen, "generate", lambda *a, **k: calls.append(1) or real(*a, **k))
    rng = random.Random(0)
    cands = [task.candidate(task.space.random(rng)) for _ in range(30)]
    bad = [c for c in cands if not c.valid]
    assert all(c.error.startswith("GPUResourceError") for c in bad), bad[:1]
    # the space's GPU bounds keep most random points legal
    assert len(bad) <= 10, [c.error[:120] for c in bad]
    # a hand-made schedule staging 256 x 512 tiles of A and B in shared memory
    A, B, C = task.args
    s = td.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=256)
    jo, ji = s[C].split(j, factor=256)
    s[C].reorder(io, jo, ii, ji)
    s[C].bind(s[C].fuse(io, jo), td.thread_axis("blockIdx.x"))
    t, _ = s[C].split(s[C].fuse(ii, ji), nparts=256)
    s[C].bind(t, td.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], t)
    ko, _ = s[CL].split(CL.op.reduce_axis[0], factor=512)
    for inp in (A, B):
        sh = s.cache_read(inp, "shared", [CL])
        s[sh].compute_at(s[CL], ko)
    huge = task.lower_trace(s.trace.to_json())
    assert not huge.valid and "shared memory" in huge.error, huge.error[:200]
    assert not calls
    for c in [c for c in cands if c.valid][:3]:
        td.build(replay(c.trace, task.outputs), task.args, target="cuda")


def test_cuda_tuning_without_a_gpu_says_it_cannot_time(monkeypatch):
    import tdsl.backends.cuda as cuda
    monkeypatch.setattr(cuda, "has_device", lambda: False)
    args, _ = matmul()
    with pytest.raises(td.errors.TuningError, match="cannot be timed"):
        autotune.auto_schedule(args, target="cuda", trials=4)
    task = autotune.create_auto_task(args, target="cuda")
    rep = autotune.verify_candidates(task, n=2)
    assert rep["checked"] == 2 and rep["mismatch"] == []


@pytest.mark.parametrize("pack_at", [0, 1])
def test_packed_inputs_at_either_location_match_numpy(pack_at):
    """Both inputs of a matmul copied per parallel tile or per outer reduction step, at
    sizes the tiles don't divide (tails), through LLVM and the interpreter."""
    task, args, ref = _task("matmul", n=20, m=36, k=22)
    values = {n: task.space.knobs[n].entities[0].value for n in task.space.names}
    values.update({"C.pack.A": 1, "C.pack.B": 1, "C.pack_at": pack_at, "C.auto_unroll": 64})
    values["C.R0"] = next(e.value for e in task.space.knobs["C.R0"].entities if e.value[1] > 1)
    assert _check_point(task, args, ref, task.space.point_of(values), interpreter=True)


@pytest.mark.parametrize("name,kw", [("gemv_bias_tanh", dict(n=32, k=64)),
                                     ("max_pool", dict(c=2, h=8, w=8)),
                                     ("row_argmax", dict(m=4, n=32)),
                                     ("transpose", dict(m=32, n=16)),
                                     ("softmax", dict(m=4, n=32)),
                                     ("triad", dict(n=256))])
def test_cuda_rules_for_each_class_emulate_correctly(name, kw):
    """The GPU versions of the rules (thread-bound reductions, roots, materialized producers)
    compile and compute the default schedule's answer under the CPU emulator."""
    args, _ = CLASSES[name](**kw)
    task = autotune.create_auto_task(args, target="cuda")
    rep = autotune.verify_candidates(task, n=2, seed=1)
    assert rep["checked"] >= 1 and rep["mismatch"] == [], rep


@pytest.mark.parametrize("name", ["gemv_bias_tanh", "softmax", "row_argmax", "max_pool"])
def test_symbolic_rows_every_form_matches_numpy_at_other_sizes(name):
    """A space made for a representative size of a symbolic dimension: every form and
    placement builds and is right at that size and at sizes that don't divide its tiles."""
    n = td.var("n")
    build = {"gemv_bias_tanh": lambda: gemv_bias_tanh(n=n, k=64),
             "softmax": lambda: softmax(m=n, n=48),
             "row_argmax": lambda: row_argmax(m=n, n=48),
             "max_pool": lambda: max_pool(c=n, h=12, w=12)}[name]
    args, ref = build()
    task = autotune.create_auto_task(args, sizes={"n": 16})
    names = task.space.names
    rng = np.random.default_rng(3)
    checked = 0
    for i, k in enumerate(names):
        if not k.endswith((".form", ".at")):
            continue
        for j in range(task.space.dims[i]):
            c = task.candidate(tuple(j if q == i else 0 for q in range(len(names))))
            if not c.valid:
                continue
            f = td.build(replay(c.trace, task.outputs), task.args, target="llvm")
            for size in (16, 7):
                shapes = [[size if not isinstance(s, td.expr.Const) else int(s.value)
                           for s in t.shape] for t in args]
                ins = [rng.uniform(-1, 1, sh).astype("float32")
                       for sh, t in zip(shapes, args) if isinstance(t.op, PlaceholderOp)]
                expect = np.asarray(ref(*ins))
                out = np.zeros(expect.shape, str(args[-1].dtype))
                f(*ins, out)
                np.testing.assert_allclose(out, expect, rtol=2e-4, atol=2e-4,
                                           err_msg=f"{c.config} n={size}")
            checked += 1
    assert checked >= 2


def _emulate_point(task, args, ref, values, seed=0):
    """Build the point with ``values`` (other knobs at their first entity) for CUDA and
    compare its emulated result with NumPy; returns the candidate's CUDA source."""
    point_values = {n: task.space.knobs[n].entities[0].value for n in task.space.names}
    point_values.update(values)
    c = task.candidate(task.space.point_of(point_values))
    assert c.valid, c.error
    ins = _inputs(args, np.random.default_rng(seed))
    expect = np.asarray(ref(*ins))
    out = np.zeros(expect.shape, str(task.args[-1].dtype))
    f = td.build(replay(c.trace, task.outputs), task.args, target="cuda")
    f.emulate(*ins, out)
    np.testing.assert_allclose(out, expect, rtol=2e-4, atol=2e-4, err_msg=str(c.config))
    return f.get_source()


@pytest.mark.parametrize("name,kw,stage", [("gemv_bias_tanh", dict(n=12, k=100), "y"),
                                           ("row_argmax", dict(m=6, n=70), None),
                                           ("col_sum", dict(m=40, n=6), None)])
def test_cuda_cross_thread_reduction_forms_emulate_correctly(name, kw, stage):
    """The GPU REDUCE rule offers reductions across 32..256 threads (the bound output rows
    over blocks and threadIdx.y): each form builds and matches NumPy under emulation, at
    reduction lengths the thread counts don't divide."""
    args, ref = CLASSES[name](**kw)
    task = autotune.create_auto_task(args, target="cuda")
    plan = _plan(task, Rule.REDUCE)[0]
    forms = [e.value for e in task.space.knobs[f"{plan.name}.form"].entities]
    cross = [f for f in forms if f[0] == Form.CROSS_THREAD]
    assert [f[1] for f in cross] == [32, 64, 128, 256][:len(cross)] and cross, forms
    for form in cross[:3]:
        src = _emulate_point(task, args, ref, {f"{plan.name}.form": form})
        assert "threadIdx.x" in src and ("__shfl" in src or "__shared__" in src), src[:400]


def test_cuda_cooperative_fetch_is_vectorized_by_its_knob():
    """A tiled matmul's shared-memory fetch loads 1, 2 or 4 consecutive elements per thread
    (float4 where aligned), correct under emulation, also where the fetched tile's size is
    not a multiple of the vector (24 x 40 x 20: rows of 3 and 5 elements per thread)."""
    for n, m, k in ((64, 64, 64), (24, 40, 20)):
        args, ref = matmul(n=n, m=m, k=k)
        task = autotune.create_auto_task(args, target="cuda")
        assert [e.value for e in task.space.knobs["C.fetch_vec"].entities] == [1, 2, 4]

        def pick(knob, ok):
            return next(e.value for e in task.space.knobs[knob].entities if ok(e.value))
        tiles = {"C.S0": pick("C.S0", lambda e: e[2] in (4, 8) and e[3] * e[4] > 1),
                 "C.S1": pick("C.S1", lambda e: e[2] in (4, 8) and e[3] * e[4] > 1),
                 "C.R0": pick("C.R0", lambda e: e[1] * e[2] >= 4)}
        for vec in (2, 4):
            src = _emulate_point(task, args, ref, {**tiles, "C.fetch_vec": vec})
            if n == 64 and vec == 4:
                assert "float4" in src, "a 4-element fetch of aligned rows should be a float4"


@pytest.mark.parametrize("m,n", [(64, 96), (40, 24)])
def test_cuda_transpose_stages_square_tiles_in_padded_shared_memory(m, n):
    """A GPU transpose reads its input along rows into a shared tile (rows padded by one
    element: no bank conflicts when it is read down a column) and writes the output along
    rows: both global accesses coalesced.  Right at sizes the tiles don't divide."""
    args, ref = transpose(m=m, n=n)
    task = autotune.create_auto_task(args, target="cuda")
    tiles = [e.value for e in task.space.knobs["T_transpose.tile2d"].entities]
    assert tiles[0] == 0 and 16 in tiles
    for t in tiles[1:]:
        src = _emulate_point(task, args, ref, {"T_transpose.tile2d": t})
        assert "__shared__" in src and f"* {t + 1} +" in src, src[-900:]


@pytest.mark.parametrize("lanes", [4, 8, 16])
def test_spatial_vector_widths_narrower_than_a_register_on_any_cpu(lanes):
    """An output row of 10 float32s gets a 2-lane spatial vector whatever the register width:
    on an AVX-512 machine (16 lanes) the narrower widths once stopped at 4, leaving max
    pooling with a single form (the space then differed between CI machines)."""
    from tdsl.autotune.sketch import SketchSource
    n = td.var("n")
    args, _ = max_pool(c=n, h=12, w=12)
    src = SketchSource([args[-1]], td.target.as_target("llvm"), {"n": 16}, lanes=lanes)
    assert src._vector_widths(10, 32) == [2]
    assert src._vector_widths(12, 32) == [4]
