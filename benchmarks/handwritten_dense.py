"""A hand-written dense (``x[i, k] * w[j, k]``, bias, activation) under the CPU default
schedule, beside ``ops.dense``'s default and the generic reduction schedule it had before
``Stage.transform_layout`` (its weight panels now copied laid out ``[k, j]``).

    python benchmarks/handwritten_dense.py [--rounds 9] [--threads 1]

The BERT-base encoder layer's four projections at seq 128 (``model_jobs.bert_layers``).
Each is checked against NumPy, then the three programs are timed interleaved (medians of
``--rounds`` rounds; at one thread by the thread's CPU time, which a busy machine disturbs
least).  Prints ms and the ratios to ``ops.dense``.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
import time

import numpy as np


@contextlib.contextmanager
def generic_for_transposed_b():
    """The schedule before: a hand-written transposed-B GEMM above small M was not matched
    as a GEMM (so the generic reduction schedule ran)."""
    from tdsl.ops.schedules import llvm as cpu
    real = cpu.gemm_form

    def old(op):
        g = real(op)
        return None if g is not None and g.transpose_b else g
    cpu.gemm_form = old
    try:
        yield
    finally:
        cpu.gemm_form = real


def reference(layer, arrays: dict) -> np.ndarray:
    """NumPy's ``act(x @ w.T + b) (+ res)`` in float64."""
    import math
    x, w, b = (arrays[n].astype("f8") for n in ("x", "w", "b"))
    y = x @ w.T + b
    if layer.act == "gelu":
        y = 0.5 * y * (1.0 + np.vectorize(math.erf)(y / math.sqrt(2.0)))
    elif layer.act == "relu":
        y = np.maximum(y, 0.0)
    return y + arrays["res"] if layer.residual else y


def main(argv: "list[str] | None" = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    os.environ["TDSL_NUM_THREADS"] = str(a.threads)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import tdsl as td
    from tdsl import ops
    from tdsl.autotune.auto_schedule import create_auto_task
    from model_jobs import Dense, bert_layers, build_handwritten, build_ops
    from timing import interleaved
    clock = "thread" if a.threads == 1 else "wall"
    print(f"{'layer':<34}{'before ms':>10}{'hand ms':>10}{'ops ms':>10}"
          f"{'before/ops':>11}{'hand/ops':>9}  ({a.threads} thread(s), {clock} clock)")
    for layer in [x for x in bert_layers() if isinstance(x, Dense)]:
        rng = np.random.default_rng(0)
        mods = {}
        for name in ("before", "hand", "ops"):
            out = build_ops(layer) if name == "ops" else build_handwritten(layer)
            args = create_auto_task([out], "llvm", None).args
            if name == "before":
                with generic_for_transposed_b():
                    s = ops.schedule(out, "llvm")
            else:
                s = ops.schedule(out, "llvm")
            mods[name] = (td.build(s, args), args)
        arrays = {}
        for t in mods["hand"][1][:-1]:
            arrays[t.name] = rng.standard_normal([int(d.value) for d in t.shape]).astype("f4")
        want = reference(layer, arrays)
        for name, (f, args) in mods.items():
            ins = [arrays[t.name] for t in args[:-1]]
            out = np.zeros([int(d.value) for d in args[-1].shape], "f4")
            f(*ins, out)
            np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-3 * layer.k ** 0.5)
            mods[name] = (f, ins + [out])
        res = interleaved({k: functools.partial(f, *args) for k, (f, args) in mods.items()},
                          a.rounds, 0.05, clock=time.thread_time if a.threads == 1
                          else time.perf_counter)
        ms = {k: r["median_s"] * 1e3 for k, r in res.items()}
        print(f"{layer.name:<34}{ms['before']:10.3f}{ms['hand']:10.3f}{ms['ops']:10.3f}"
              f"{ms['before'] / ms['ops']:11.2f}{ms['hand'] / ms['ops']:9.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
