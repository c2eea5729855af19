#!/usr/bin/env python
"""conv2d + relu in NCHW vs NHWC, alone (``ops.schedule`` defaults, untuned), for the
layout pass's rule (``tdsl.graph.passes.layout``).

    python benchmarks/layout_probe.py [--quick] [--threads 1 2] [--transposes]

Each shape is ``(batch, Cin, H=W, Cout, k, stride, groups)``, padding ``k // 2``.  Columns:
one thread, the kernel's thread CPU time (median of 7, ``clock="thread"``), and two threads,
wall time; "r1"/"r2" are NHWC time / NCHW time.  The two layouts are timed back to back
per shape, so they see the same machine load.
"""
from __future__ import annotations

import argparse
import os

import numpy as np

import tdsl as td
from tdsl import ops

#: ResNet-18 3x3 layers, MobileNetV2 depthwise layers, the stem; batches 1 and 8.
SHAPES = [
    (1, 64, 56, 64, 3, 1, 1), (8, 64, 56, 64, 3, 1, 1),
    (1, 64, 56, 128, 3, 2, 1), (8, 64, 56, 128, 3, 2, 1),
    (1, 128, 28, 128, 3, 1, 1), (8, 128, 28, 128, 3, 1, 1),
    (1, 128, 28, 256, 3, 2, 1), (1, 256, 14, 256, 3, 1, 1), (8, 256, 14, 256, 3, 1, 1),
    (1, 256, 14, 512, 3, 2, 1), (1, 512, 7, 512, 3, 1, 1), (8, 512, 7, 512, 3, 1, 1),
    (1, 3, 224, 64, 7, 2, 1), (8, 3, 224, 64, 7, 2, 1), (1, 3, 224, 32, 3, 2, 1),
    (1, 32, 112, 32, 3, 1, 32), (8, 32, 112, 32, 3, 1, 32),
    (1, 96, 112, 96, 3, 2, 96), (1, 144, 56, 144, 3, 1, 144), (8, 144, 56, 144, 3, 1, 144),
    (1, 144, 56, 144, 3, 2, 144), (1, 192, 28, 192, 3, 1, 192), (8, 192, 28, 192, 3, 1, 192),
    (1, 192, 28, 192, 3, 2, 192), (1, 384, 14, 384, 3, 1, 384), (8, 384, 14, 384, 3, 1, 384),
    (1, 576, 14, 576, 3, 1, 576), (1, 576, 14, 576, 3, 2, 576), (1, 960, 7, 960, 3, 1, 960),
    (8, 960, 7, 960, 3, 1, 960),
    # pointwise convolutions that passes.pointwise keeps as convolutions, and strided ones
    (1, 96, 14, 576, 1, 1, 1), (1, 576, 14, 96, 1, 1, 1), (1, 160, 7, 960, 1, 1, 1),
    (1, 960, 7, 160, 1, 1, 1), (8, 320, 7, 1280, 1, 1, 1), (1, 64, 56, 128, 1, 2, 1),
    (1, 256, 14, 512, 1, 2, 1),
]
#: (batch, channels, H=W) of the transposes timed by ``--transposes``.
TRANSPOSES = [(1, 64, 56), (1, 64, 112), (1, 3, 224), (1, 144, 56), (1, 384, 14), (1, 960, 7),
              (8, 64, 56), (1, 256, 14)]


def build(n: int, c: int, h: int, f: int, k: int, s: int, groups: int, layout: str
          ) -> tuple:
    """conv2d + relu of one shape in ``layout``, built, and random arrays for it."""
    p = k // 2
    if layout == "NCHW":   # the graph's form: dense weights pre-packed HWIO (passes.prepack)
        X = td.placeholder((n, c, h, h), "float32", name="X")
        kl = "HWIO" if groups == 1 else "OIHW"
        wshape = (k, k, c, f) if groups == 1 else (f, c // groups, k, k)
        W = td.placeholder(wshape, "float32", name="W")
        Y = ops.conv2d(X, W, stride=s, padding=p, groups=groups, kernel_layout=kl)
    else:
        X = td.placeholder((n, h, h, c), "float32", name="X")
        W = td.placeholder((k, k, c // groups, f), "float32", name="W")
        Y = ops.conv2d(X, W, stride=s, padding=p, groups=groups, layout="NHWC")
    Y = ops.relu(Y)
    m = td.build(ops.schedule(Y, "llvm"), [X, W, Y], target="llvm")
    rng = np.random.default_rng(0)
    arrs = [rng.standard_normal([int(d) for d in t.shape]).astype("float32") for t in (X, W, Y)]
    return m, arrs


def transpose_module(n: int, c: int, h: int, perm: tuple) -> tuple:
    """``ops.transpose`` NCHW -> NHWC (perm (0, 2, 3, 1)) or back, built, and arrays."""
    shape = (n, c, h, h) if perm == (0, 2, 3, 1) else (n, h, h, c)
    X = td.placeholder(shape, "float32", name="X")
    Y = ops.transpose(X, perm)
    m = td.build(ops.schedule(Y, "llvm"), [X, Y], target="llvm")
    rng = np.random.default_rng(0)
    return m, [rng.standard_normal([int(d) for d in t.shape]).astype("float32") for t in (X, Y)]


def timed(m, arrs, clock: str) -> float:
    ev = m.time_evaluator(number=1, repeat=7, min_repeat_ms=30, clock=clock)
    return float(np.median(ev(*arrs).results)) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="batch 1 only")
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--transposes", action="store_true",
                    help="time the transposes (one thread, CPU time) instead")
    args = ap.parse_args()
    if args.transposes:
        os.environ["TDSL_NUM_THREADS"] = "1"
        for n, c, h in TRANSPOSES:
            a = timed(*transpose_module(n, c, h, (0, 2, 3, 1)), "thread")
            b = timed(*transpose_module(n, c, h, (0, 3, 1, 2)), "thread")
            per = 1e6 / (n * c * h * h)
            print(f"transpose {(n, c, h, h)}: to NHWC {a:.4f} ms ({a * per:.2f} ns/elem), "
                  f"back {b:.4f} ms ({b * per:.2f} ns/elem)", flush=True)
        return
    print("shape (n, cin, hw, cout, k, s, g) | 1T cpu ms NCHW NHWC r1 | 2T wall ms NCHW NHWC r2")
    for sh in SHAPES:
        if args.quick and sh[0] != 1:
            continue
        cells = []
        for t in args.threads:
            os.environ["TDSL_NUM_THREADS"] = str(t)   # read when scheduling and running
            clock = "thread" if t == 1 else "wall"
            a_m = build(*sh, "NCHW")
            b_m = build(*sh, "NHWC")
            a, b = timed(*a_m, clock), timed(*b_m, clock)
            a2, b2 = timed(*a_m, clock), timed(*b_m, clock)   # twice, interleaved
            a, b = min(a, a2), min(b, b2)
            cells.append(f"{a:8.3f} {b:8.3f} {b / a:5.2f}")
        print(sh, " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
