#!/usr/bin/env python
"""Whole models with the convolutions' layout chosen by ``passes.layout`` ("auto") against
PyTorch's NCHW (and every convolution NHWC, for reference), in one process, interleaved.

    python benchmarks/layout_ab.py [--models resnet18 mobilenet_v2] [--batch 1 8]
                                   [--threads 1 2] [--rounds 7] [--modes NCHW auto NHWC]

Models from ``tdsl.testing.models`` (benchmarks/models.py's zoo definitions, "bench" size,
224x224).  One thread is timed in the calling thread's CPU time (the shared machine's other
processes do not count), two threads in wall time; each cell is the median over ``--rounds``
interleaved rounds (``timing.interleaved``).  "err" is max |out - eager| / max |eager|.
"""
from __future__ import annotations

import argparse
import os
import time

from timing import interleaved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["resnet18", "mobilenet_v2"])
    ap.add_argument("--batch", nargs="+", type=int, default=[1, 8])
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--modes", nargs="+", default=["NCHW", "auto", "NHWC"])
    ap.add_argument("--min-sample-s", type=float, default=0.2)
    args = ap.parse_args()
    import torch

    import tdsl
    from tdsl.testing import models
    print("| model | batch | threads (clock) | " + " | ".join(f"{m} ms" for m in args.modes)
          + " | auto/NCHW | NHWC convs (auto) | max err |")
    print("|---|---|---|" + "---|" * (len(args.modes) + 3))
    for name in args.models:
        for batch in args.batch:
            model, inputs = models.make(name, "bench", batch=batch)
            with torch.no_grad():
                ref = model(*inputs)
            for threads in args.threads:
                os.environ["TDSL_NUM_THREADS"] = str(threads)
                torch.set_num_threads(threads)
                fns, errs, nhwc = {}, [], 0
                for mode in args.modes:
                    c = tdsl.compile(model, inputs,
                                     options={"layout": mode, "num_threads": threads})
                    out = c(*inputs)
                    errs.append(float((out - ref).abs().max() / ref.abs().max()))
                    if mode == "auto":
                        nhwc = c.report.graph.passes.nhwc_convs
                    fns[mode] = (lambda f: lambda: f(*inputs))(c)
                clock = time.thread_time if threads == 1 else time.perf_counter
                res = interleaved(fns, rounds=args.rounds, min_sample_s=args.min_sample_s,
                                  clock=clock)
                ms = {m: res[m]["median_s"] * 1e3 for m in args.modes}
                ratio = (f"{ms['auto'] / ms['NCHW']:.3f}"
                         if "auto" in ms and "NCHW" in ms else "-")
                cells = " | ".join(f"{ms[m]:.2f}" for m in args.modes)
                kind = "1 (cpu)" if threads == 1 else f"{threads} (wall)"
                print(f"| {name} | {batch} | {kind} | {cells} | {ratio} | {nhwc} | "
                      f"{max(errs):.1e} |", flush=True)


if __name__ == "__main__":
    main()
