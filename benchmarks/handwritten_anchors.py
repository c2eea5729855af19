"""Hand-written dense layers and convolutions under the CPU default schedule, beside
``ops.dense`` / ``ops.conv2d``'s default and the generic reduction schedule they had before
they were recognized (``ops/schedules/recognize.py``).

    python benchmarks/handwritten_anchors.py [--model bert] [--rounds 9] [--threads 1]

``--model bert``: the BERT-base encoder layer's four projections at seq 128
(``x[i, k] * w[j, k]``, bias, activation; "before" is the schedule a transposed-B GEMM had
before ``Stage.transform_layout``).  ``--model resnet18`` / ``mobilenet_v2``: the model's
distinct convolutions at batch 1 (NCHW, OIHW, bias, activation, residual; "before": not
recognized as convolutions).  Each is checked against NumPy, then the three programs are
timed interleaved (medians of ``--rounds`` rounds; at one thread by the thread's CPU time,
which a busy machine disturbs least).  Prints ms and the ratios to the ``tdsl.ops`` form.
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
def unrecognized(kind: str):
    """The schedule before: a hand-written transposed-B GEMM (``kind`` "dense") was not
    matched as a GEMM, a convolution ("conv") not at all, so the generic reduction schedule
    ran."""
    from tdsl.ops.schedules import llvm as cpu
    name = "gemm_form" if kind == "dense" else "conv_form"
    real = getattr(cpu, name)

    def old(op):
        g = real(op)
        return None if g is not None and (kind == "conv" or g.transpose_b) else g
    setattr(cpu, name, old)
    try:
        yield
    finally:
        setattr(cpu, name, real)


def _act(y: np.ndarray, act: "str | None") -> np.ndarray:
    import math
    if act == "gelu":
        return 0.5 * y * (1.0 + np.vectorize(math.erf)(y / math.sqrt(2.0)))
    if act == "relu":
        return np.maximum(y, 0.0)
    if act == "relu6":
        return np.clip(y, 0.0, 6.0)
    return y


def reference(layer, arrays: dict) -> np.ndarray:
    """NumPy's ``act(x @ w.T + b) (+ res)`` or ``act(conv(x, w) + b (+ res))``, float64."""
    from tdsl.testing.reference import conv2d_nchw
    from model_jobs import Conv
    x, w, b = (arrays[n].astype("f8") for n in ("x", "w", "b"))
    if isinstance(layer, Conv):
        y = conv2d_nchw(x, w, (layer.stride,) * 2, (layer.pad,) * 4, (1, 1), layer.groups)
        y = y + b[None, :, None, None]
        return _act(y + arrays["res"] if layer.residual else y, layer.act)
    y = _act(x @ w.T + b, layer.act)
    return y + arrays["res"] if layer.residual else y


def main(argv: "list[str] | None" = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--model", choices=("bert", "resnet18", "mobilenet_v2"), default="bert")
    a = p.parse_args(argv)
    os.environ["TDSL_NUM_THREADS"] = str(a.threads)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import tdsl as td
    from tdsl import ops
    from tdsl.autotune.auto_schedule import create_auto_task
    from model_jobs import (Conv, Dense, bert_layers, build_handwritten, build_ops, distinct,
                            mobilenet_v2_layers, resnet18_layers)
    from timing import interleaved
    clock = "thread" if a.threads == 1 else "wall"
    print(f"{'layer':<34}{'before ms':>10}{'hand ms':>10}{'ops ms':>10}"
          f"{'before/ops':>11}{'hand/ops':>9}  ({a.threads} thread(s), {clock} clock)")
    if a.model == "bert":
        kind, layers = "dense", [x for x in bert_layers() if isinstance(x, Dense)]
    else:
        model = resnet18_layers() if a.model == "resnet18" else mobilenet_v2_layers()
        kind, layers = "conv", [x for x, _ in distinct(model) if isinstance(x, Conv)]
    for layer in layers:
        rng = np.random.default_rng(0)
        mods = {}
        for name in ("before", "hand", "ops"):
            out = build_ops(layer) if name == "ops" else build_handwritten(layer)
            args = create_auto_task([out], "llvm", None).args
            if name == "before":
                with unrecognized(kind):
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
            np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-3 * ins[1][0].size ** 0.5)
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
