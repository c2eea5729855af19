"""AutoTVM as TVM users wrote it (autotvm_matmul_x86.py): templates by name, task.create,
config_space, define_*, tuners with callbacks, JSON-lines logs, apply_history_best."""
import json

import numpy as np
import pytest

import tvm
import tvm.testing
from tvm import autotvm, te
from tdsl import autotune


@autotvm.template("compat_test/matmul")
def matmul(N, L, M, dtype):
    A = te.placeholder((N, L), name="A", dtype=dtype)
    B = te.placeholder((L, M), name="B", dtype=dtype)
    k = te.reduce_axis((0, L), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    y, x = s[C].op.axis
    k = s[C].op.reduce_axis[0]
    cfg = autotvm.get_config()
    cfg.define_split("tile_y", cfg.axis(y), num_outputs=2)
    cfg.define_split("tile_x", x, num_outputs=2)
    cfg.define_knob("unroll_k", [0, 1])
    yo, yi = cfg["tile_y"].apply(s, C, y)
    xo, xi = cfg["tile_x"].apply(s, C, x)
    s[C].reorder(yo, xo, k, yi, xi)
    if cfg["unroll_k"].val:
        s[C].unroll(yi)
    cfg.define_annotate("ann", [xi], policy="try_vec")
    cfg["ann"].apply(s, C, [xi])
    return s, [A, B, C]


def _fast():
    return autotvm.measure_option(builder=autotvm.LocalBuilder(n_parallel=1),
                                  runner=autotvm.LocalRunner(number=1, repeat=1, timeout=20))


def _check(func, n, rng):
    a, b = rng.random((n, n)).astype("float32"), rng.random((n, n)).astype("float32")
    c = tvm.nd.empty((n, n))
    func(tvm.nd.array(a), tvm.nd.array(b), c)
    tvm.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4)


def test_task_create_and_config_space():
    task = autotvm.task.create("compat_test/matmul", args=(16, 16, 16, "float32"), target="llvm")
    space = task.config_space
    # 5 splits of 16 each, 2 unroll choices, 2 annotations of the last axis
    assert len(space) == 5 * 5 * 2 * 2
    text = str(space)
    assert text.startswith(f"ConfigSpace (len={len(space)}") and "tile_y: Split(" in text
    cfg = space.get(7)
    assert cfg.index == 7 and cfg["tile_y"].size[0] * cfg["tile_y"].size[1] == 16
    s, args = task.instantiate(cfg)
    assert len(args) == 3
    with pytest.raises(tvm.TVMError):
        autotvm.task.create("compat_test/nope", args=(), target="llvm")


def test_annotate_policies():
    from tdsl.compat.tvm.autotvm.space import AnnotateSpace
    assert len(AnnotateSpace(2, "try_unroll")) == 4
    assert len(AnnotateSpace(2, "try_unroll_vec")) == 6
    with pytest.raises(tvm.TVMError):
        AnnotateSpace(1, "locate_cache")


@pytest.mark.parametrize("tuner_cls", [autotvm.tuner.RandomTuner, autotvm.tuner.GridSearchTuner,
                                       autotvm.tuner.GATuner, autotvm.tuner.XGBTuner])
def test_tune_log_and_apply_history_best(tmp_path, rng, tuner_cls):
    n = 16
    task = autotvm.task.create("compat_test/matmul", args=(n, n, n, "float32"), target="llvm")
    log = str(tmp_path / "matmul.log")
    kw = {"pop_size": 8, "elite_num": 2} if tuner_cls is autotvm.tuner.GATuner else {}
    tuner = tuner_cls(task, **kw)
    seen = []
    tuner.tune(n_trial=6, measure_option=_fast(),
               callbacks=[autotvm.callback.progress_bar(6, prefix="test"),
                          autotvm.callback.log_to_file(log),
                          lambda t, i, r: seen.extend(r)])
    assert len(seen) >= 6
    lines = [json.loads(x) for x in open(log)]
    assert len(lines) == len(seen)
    first = lines[0]
    assert first["input"][1] == "compat_test/matmul" and first["input"][2] == [n, n, n, "float32"]
    assert {e[0] for e in first["config"]["entity"]} == {"tile_y", "tile_x", "unroll_k", "ann"}
    best = min((x for x in lines if x["result"][1] == 0), key=lambda x: np.mean(x["result"][0]))
    records = list(autotvm.record.load_from_file(log))
    assert len(records) == len(lines)
    with autotvm.apply_history_best(log):
        with tvm.target.Target("llvm"):
            s, arg_bufs = matmul(n, n, n, "float32")
            func = tvm.build(s, arg_bufs)
    _check(func, n, rng)
    # the config used is the best of the log
    from tdsl.compat.tvm.autotvm.record import current_best
    with autotvm.apply_history_best(log):
        point = current_best(matmul, (n, n, n, "float32"))
    space = task.config_space.space
    from tdsl.compat.tvm.autotvm.space import ConfigEntity
    assert ConfigEntity(space, [point[k] for k in space.names]).index == best["config"]["index"]


def test_apply_history_best_reads_tvm_written_lines(tmp_path, rng):
    """A log line as TVM v0.19 writes it (target with -keys, outer split -1)."""
    line = {"input": ["llvm -keys=cpu", "compat_test/matmul", [16, 16, 16, "float32"], {}],
            "config": {"index": 3, "code_hash": None,
                       "entity": [["tile_y", "sp", [-1, 4]], ["tile_x", "sp", [-1, 8]],
                                  ["unroll_k", "ot", 1], ["ann", "an", ["vec"]]]},
            "result": [[1e-5], 0, 0.1, 1700000000.0], "version": 0.2, "tvm_version": "0.19.0"}
    log = tmp_path / "tvm.log"
    log.write_text(json.dumps(line) + "\n\n")
    with autotvm.apply_history_best(str(log)):
        s, args = matmul(16, 16, 16, "float32")
    text = str(tvm.lower(s, args, simple_mode=True))
    assert "vectorized" in text or "vectorize" in text
    _check(tvm.build(s, args, "llvm"), 16, rng)
    bad = tmp_path / "bad.log"
    bad.write_text("{not json\n")
    with pytest.raises(tvm.TVMError):
        autotvm.apply_history_best(str(bad))


def test_apply_history_best_reads_a_tdsl_database(tmp_path, rng):
    """A tdsl database (tuned with tdsl's own API) makes tvm.build use its best record."""
    n = 16
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    db = str(tmp_path / "tune.db")
    autotune.auto_schedule([C], target="llvm", trials=3, db=db, measure_option=_fast())
    s = te.create_schedule(C.op)
    with autotvm.apply_history_best(db) as ctx:
        f = tvm.build(s, [A, B, C], "llvm")
    assert ctx._tdsl_ctx.hits
    _check(f, n, rng)


def test_measure_option_forms():
    m = autotvm.measure_option(builder="local", runner=autotvm.LocalRunner(number=5, repeat=2,
                                                                          timeout=4))
    assert m.runner.number == 5 and m.runner.repeat == 2 and m.runner.timeout == 4
    m.close()
    with pytest.raises(tvm.TVMError):
        autotvm.RPCRunner("key", "host", 9190)
    with pytest.raises(tvm.TVMError):
        autotvm.LocalBuilder(build_func="custom")


def test_tuner_needs_a_compat_task():
    with pytest.raises(tvm.TVMError):
        autotvm.tuner.RandomTuner("not a task")


def test_query_target_workload(tmp_path):
    """TVM's ``dispatch_context.query(task.target, task.workload)``: the best logged config
    as a ConfigEntity, or the template's default marked ``is_fallback``."""
    task = autotvm.task.create("compat_test/matmul", args=(16, 16, 16, "float32"), target="llvm")
    line = {"input": ["llvm -keys=cpu", "compat_test/matmul", [16, 16, 16, "float32"], {}],
            "config": {"index": 3, "code_hash": None,
                       "entity": [["tile_y", "sp", [-1, 4]], ["tile_x", "sp", [-1, 8]],
                                  ["unroll_k", "ot", 1], ["ann", "an", ["vec"]]]},
            "result": [[1e-5], 0, 0.1, 1700000000.0], "version": 0.2, "tvm_version": "0.19.0"}
    log = tmp_path / "q.log"
    log.write_text(json.dumps(line) + "\n")
    cfg = autotvm.apply_history_best(str(log)).query(task.target, task.workload)
    assert not cfg.is_fallback
    assert cfg["tile_y"].size[-1] == 4 and cfg["tile_x"].size[-1] == 8
    assert cfg["unroll_k"].val == 1
    assert autotvm.apply_history_best(None).query(task.target, task.workload).is_fallback
    # a record for llvm is not the best config for cuda
    other = autotvm.apply_history_best(str(log)).query(tvm.target.Target("cuda"), task.workload)
    assert other.is_fallback
    # the (task name, args) form still gives the log record
    rec = autotvm.apply_history_best(str(log)).query("compat_test/matmul",
                                                     (16, 16, 16, "float32"))
    assert rec.costs == (1e-5,)
    with pytest.raises(tvm.TVMError, match="no template named"):
        autotvm.apply_history_best(None).query(task.target, ("nope/none", 1))


@pytest.mark.skipif(tvm.cuda(0).exist, reason="checks the notice given where no GPU is present")
def test_cuda_tuning_without_gpu_is_skipped_with_a_notice(tmp_path):
    task = autotvm.task.create("compat_test/matmul", args=(16, 16, 16, "float32"), target="cuda")
    log = tmp_path / "cuda.log"
    tuner = autotvm.tuner.RandomTuner(task)
    with pytest.warns(autotvm.tuner.NoGPUTuningWarning, match="no CUDA device"):
        assert tuner.tune(n_trial=3, measure_option=_fast(),
                          callbacks=[autotvm.callback.log_to_file(str(log))]) is None
    assert log.exists() and log.read_text() == ""
    assert autotvm.apply_history_best(str(log)).query(task.target, task.workload).is_fallback


def test_cuda_reference_output_runs_on_the_cpu(rng):
    """The tuner's reference for a CUDA task is the unscheduled program, which has no GPU
    bindings: it is computed on the CPU (a padding stage made the CUDA build refuse it)."""
    from tdsl.autotune import measure_jobs
    X = te.placeholder((3, 5), name="X")
    P = te.compute((3, 7), lambda i, j: tvm.tir.if_then_else(
        tvm.tir.all(j >= 1, j < 6), X[i, j - 1], 0.0), name="P")
    k = te.reduce_axis((0, 3), name="k")
    Y = te.compute((3, 5), lambda i, j: te.sum(P[i, j + k], axis=k), name="Y")
    x = rng.standard_normal((3, 5)).astype("float32")
    ref = measure_jobs._compute_reference([X, Y], [x, np.zeros((3, 5), "float32")], "cuda", "t")
    xp = np.pad(x, ((0, 0), (1, 1)))
    np.testing.assert_allclose(ref[1], xp[:, :5] + xp[:, 1:6] + xp[:, 2:7], rtol=1e-5)
