"""``auto_scheduler`` as TVM users wrote it: register_workload, SearchTask, TuningOptions with
RecordToFile, task.tune/apply_best/print_best, checked against NumPy."""
import pytest

import tvm
import tvm.testing
from tvm import auto_scheduler, autotvm, te


@auto_scheduler.register_workload
def compat_matmul_add(N, L, M, dtype):
    A = te.placeholder((N, L), name="A", dtype=dtype)
    B = te.placeholder((L, M), name="B", dtype=dtype)
    C = te.placeholder((N, M), name="C", dtype=dtype)
    k = te.reduce_axis((0, L), name="k")
    mm = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="matmul")
    out = te.compute((N, M), lambda i, j: mm[i, j] + C[i, j], name="out")
    return [A, B, C, out]


def test_search_task_tune_apply_best(tmp_path, rng):
    n = 24
    target = tvm.target.Target("llvm")
    task = auto_scheduler.SearchTask(func=compat_matmul_add, args=(n, n, n, "float32"),
                                     target=target)
    assert "matmul" in str(task.compute_dag)
    log = str(tmp_path / "ansor.json")
    opt = auto_scheduler.TuningOptions(
        num_measure_trials=4, verbose=0,
        runner=autotvm.LocalRunner(number=1, repeat=1, timeout=20),
        measure_callbacks=[auto_scheduler.RecordToFile(log)])
    task.tune(opt)
    sch, args = task.apply_best(log)
    f = tvm.build(sch, args, target)
    a, b, c = (rng.random((n, n)).astype("float32") for _ in range(3))
    out = tvm.nd.empty((n, n))
    f(tvm.nd.array(a), tvm.nd.array(b), tvm.nd.array(c), out)
    tvm.testing.assert_allclose(out.numpy(), a @ b + c, rtol=1e-4)
    assert isinstance(task.print_best(log), str)
    assert "define" in task.print_best(log, print_mode="llvm")
    assert auto_scheduler.load_best_record(log) is not None
    # by name, as registered
    again = auto_scheduler.SearchTask(func="compat_matmul_add", args=(n, n, n, "float32"),
                                      target="llvm")
    s2, args2 = again.apply_best(log)
    f2 = tvm.build(s2, args2, "llvm")
    out2 = tvm.nd.empty((n, n))
    f2(tvm.nd.array(a), tvm.nd.array(b), tvm.nd.array(c), out2)
    tvm.testing.assert_allclose(out2.numpy(), a @ b + c, rtol=1e-4)


def test_unknown_workload_and_missing_log(tmp_path):
    with pytest.raises(tvm.TVMError):
        auto_scheduler.SearchTask(func="nope", args=(), target="llvm")
    task = auto_scheduler.SearchTask(func=compat_matmul_add, args=(8, 8, 8, "float32"),
                                     target="llvm")
    with pytest.raises(tvm.TVMError):
        task.apply_best(str(tmp_path / "none.json"))
