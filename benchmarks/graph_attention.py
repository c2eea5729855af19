#!/usr/bin/env python
"""The graph's ``attention`` op, fused (``ops.attention``) vs decomposed (matmul/softmax/matmul).

    python benchmarks/graph_attention.py [--seqs 128 256 512] [--threads 1] [--repeats 7]

Each case is the attention of a transformer layer as the frontend imports it: q, k, v are
(batch, seq, heads * d) projections viewed as (batch, seq, heads, d) and permuted to
(batch, heads, seq, d), the result permuted back and flattened; the graph is compiled with
the node's ``impl`` attr "fused" and "decomposed" and timed in interleaved rounds (medians).
Shapes: BERT-base (12 heads, d 64, not causal) and GPT-2 small (causal), batch 1.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from timing import interleaved


def graph(seq: int, heads: int, d: int, causal: bool, impl: str, batch: int = 1):
    from tdsl.graph.builder import Builder
    b = Builder()
    qkv = []
    for nm in "qkv":
        x = b.input((batch, seq, heads * d), name=nm)
        x = b.op("reshape", x, shape=(batch, seq, heads, d))
        qkv.append(b.op("transpose", x, axes=(0, 2, 1, 3)))
    y = b.op("attention", *qkv, causal=causal, scale=None, impl=impl)
    y = b.op("transpose", y, axes=(0, 2, 1, 3))
    b.output(b.op("reshape", y, shape=(batch, seq, heads * d)))
    return b.graph


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seqs", nargs="+", type=int, default=[128, 256])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--min-sample-s", type=float, default=0.2)
    a = p.parse_args()
    os.environ["TDSL_NUM_THREADS"] = str(a.threads)
    from tdsl.graph import compile_graph
    rng = np.random.default_rng(0)
    print(f"command: python {' '.join(sys.argv)}")
    print("| seq | causal | fused ms | decomposed ms | decomposed / fused | max diff |")
    print("|---|---|---|---|---|---|")
    for seq in a.seqs:
        for causal in (False, True):
            ins = [rng.standard_normal((1, seq, 768)).astype(np.float32) for _ in range(3)]
            cgs = {impl: compile_graph(graph(seq, 12, 64, causal, impl), num_threads=a.threads)
                   for impl in ("fused", "decomposed")}
            outs = {k: cg(*ins)[0] for k, cg in cgs.items()}
            diff = float(np.abs(outs["fused"] - outs["decomposed"]).max())
            res = interleaved({k: (lambda cg=cg: cg(*ins)) for k, cg in cgs.items()},
                              a.repeats, a.min_sample_s)
            f, dcm = res["fused"]["median_s"] * 1e3, res["decomposed"]["median_s"] * 1e3
            print(f"| {seq} | {causal} | {f:.3f} | {dcm:.3f} | {dcm / f:.2f} | {diff:.1e} |",
                  flush=True)


if __name__ == "__main__":
    main()
