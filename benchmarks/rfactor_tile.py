"""rfactor inside multi-level tiling: a matmul with few outputs and a long reduction
(default 16 x 16 x 65536) tuned with the ``rf`` knob and without it (``RFACTOR_PARTS``
emptied), then both tuned kernels and NumPy timed interleaved (medians).

    python benchmarks/rfactor_tile.py [M N K] [--trials 32]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np                 # noqa: E402

import tuning_suite                # noqa: E402
import tdsl as td                  # noqa: E402
from tdsl import autotune          # noqa: E402
from tdsl.autotune import sketch   # noqa: E402
from tdsl.autotune.dispatch import schedule_from_record   # noqa: E402


def matmul(m: int, n: int, k: int) -> list:
    A = td.placeholder((m, k), "float32", name="A")
    B = td.placeholder((k, n), "float32", name="B")
    r = td.reduce_axis((0, k), name="r")
    return [A, B, td.compute((m, n), lambda i, j: td.sum(A[i, r] * B[r, j], axis=r), name="C")]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("shape", nargs="*", type=int, default=[16, 16, 65536])
    p.add_argument("--trials", type=int, default=32)
    a = p.parse_args()
    m, n, k = a.shape
    threads = len(os.sched_getaffinity(0))
    os.environ.setdefault("TDSL_NUM_THREADS", str(threads))
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(threads)
    except ImportError:
        pass
    x = np.random.rand(m, k).astype("float32")
    y = np.random.rand(k, n).astype("float32")
    contenders = {}
    parts = sketch.RFACTOR_PARTS
    for label, offered in (("with rf", parts), ("without rf", ())):
        sketch.RFACTOR_PARTS = offered
        args = matmul(m, n, k)
        task = autotune.create_auto_task(args)
        res = autotune.XGBTuner(task).tune(a.trials, db=os.path.join(tempfile.mkdtemp(), "t.db"))
        print(f"{label}: tuned in {res.seconds:.1f} s, recorded {res.best.cost * 1e3:.3f} ms, "
              f"rf={res.best.config.get('C.rf')}")
        f = td.build(schedule_from_record(res.best, task.outputs), args, target="llvm")
        out = np.zeros((m, n), "float32")
        f(x, y, out)
        np.testing.assert_allclose(out, x @ y, rtol=1e-3, atol=1e-2)
        contenders[label] = (lambda f=f, out=out: f(x, y, out))
    sketch.RFACTOR_PARTS = parts
    contenders["numpy"] = lambda: x @ y
    for name, s in tuning_suite.interleaved(contenders, rounds=9).items():
        print(f"{name}: {s * 1e3:.3f} ms (interleaved median)")


if __name__ == "__main__":
    main()
