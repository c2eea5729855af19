"""Fused attention (``ops.attention``) against PyTorch's CPU SDPA and an unfused tdsl
version, side by side (interleaved medians, ``benchmarks/timing.py``).

    python benchmarks/attention.py [--threads 1 2] [--seqs 512 1024 2048 4096] [--rounds 7]
        [--cpu-time] [--causal both|yes|no] [--no-decode] [--unfused-from SEQ] [--block-k N]

Batch 1, 12 heads, d 64; each sequence length causal and not, plus the decode shape
(seq_q 1 against seq_k 4096).  The unfused version is three tdsl kernels with the default
schedules (``batch_matmul`` of Q and Kᵀ, ``softmax`` -- masked first when causal --, then
``batch_matmul`` with V), writing and re-reading the seq_q x seq_k scores; it is built once
per (causal, threads) with symbolic lengths.  The fused kernel is built per shape.
Prints a table of milliseconds per call and the fused kernel's speedups.

``--cpu-time`` times by the calling thread's CPU time (``time.thread_time``) instead of wall
time: on a machine shared with other work, wall time at one thread counts the other
processes' turns on the CPU.  One thread only (a one-thread tdsl kernel and PyTorch with
``torch.set_num_threads(1)`` both run in the calling thread); at 2 threads wall time is all
there is, so the script prints the load average before and after.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tdsl as td  # noqa: E402
from tdsl import ops  # noqa: E402
from timing import interleaved  # noqa: E402

H, D = 12, 64


def fused(sq: int, sk: int, causal: bool, threads: int, block_k: "int | None" = None):
    q = td.placeholder((1, H, sq, D), name="q")
    k = td.placeholder((1, H, sk, D), name="k")
    v = td.placeholder((1, H, sk, D), name="v")
    o = ops.attention(q, k, v, causal=causal, block_k=block_k)
    tgt = f"llvm -num-threads={threads}"
    return td.build(ops.schedule(o, tgt), [q, k, v, o], target=tgt)


def unfused(causal: bool, threads: int):
    """Three kernels (scores, softmax, weighted sum) over symbolic lengths."""
    sq, sk = td.var("sq"), td.var("sk")
    tgt = f"llvm -num-threads={threads}"
    q = td.placeholder((H, sq, D), name="q")
    k = td.placeholder((H, sk, D), name="k")
    s = ops.batch_matmul(q, k, transpose_b=True)
    scaled = td.compute(s.shape, lambda h, i, j: td.if_then_else(
        (j <= i) if causal else td.const(True, "bool"), s[h, i, j] * (1.0 / D ** 0.5),
        td.min_value("float32")), name="scaled")
    f1 = td.build(ops.schedule(scaled, tgt), [q, k, scaled], target=tgt)
    x = td.placeholder((H, sq, sk), name="x")
    p = ops.softmax(x, axis=-1)
    f2 = td.build(ops.schedule(p, tgt), [x, p], target=tgt)
    pp = td.placeholder((H, sq, sk), name="p")
    v = td.placeholder((H, sk, D), name="v")
    o = ops.batch_matmul(pp, v)
    f3 = td.build(ops.schedule(o, tgt), [pp, v, o], target=tgt)
    return f1, f2, f3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--seqs", type=int, nargs="*", default=[512, 1024, 2048, 4096])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--min-sample-s", type=float, default=0.05)
    ap.add_argument("--cpu-time", action="store_true",
                    help="time by the calling thread's CPU time (one thread only)")
    ap.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    ap.add_argument("--no-decode", action="store_true", help="leave out seq_q 1, seq_k 4096")
    ap.add_argument("--unfused-from", type=int, default=0,
                    help="time the unfused version only from this sequence length on")
    ap.add_argument("--block-k", type=int, default=None,
                    help="the fused kernel's key block (default: ops.attention's rule)")
    args = ap.parse_args()
    if args.cpu_time and args.threads != [1]:
        ap.error("--cpu-time measures one thread: give --threads 1")
    clock = time.thread_time if args.cpu_time else time.perf_counter
    import torch
    sdpa = torch.nn.functional.scaled_dot_product_attention
    rng = np.random.default_rng(0)
    causals = {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]
    shapes = [(s, s, c) for s in args.seqs for c in causals]
    if not args.no_decode:
        shapes.append((1, 4096, False))
    print(f"batch 1, {H} heads, d {D}, fp32; ms per call (median of {args.rounds} "
          f"interleaved rounds, {'thread CPU' if args.cpu_time else 'wall'} time); "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'thr':>3} {'seq_q':>5} {'seq_k':>5} {'causal':>6} {'fused':>9} {'torch':>9} "
          f"{'unfused':>9} {'vs torch':>8} {'vs unfused':>10}")
    for threads in args.threads:
        torch.set_num_threads(threads)
        three = {c: unfused(c, threads) for c in {c for _sq, _sk, c in shapes}}
        for sq, sk, causal in shapes:
            q, k, v = (rng.standard_normal((1, H, n, D)).astype("float32")
                       for n in (sq, sk, sk))
            out = np.empty((1, H, sq, D), "float32")
            f = fused(sq, sk, causal, threads, args.block_k)
            tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
            f1, f2, f3 = three[causal]
            with_unfused = sq >= args.unfused_from
            big = (H, sq, sk) if with_unfused else (0, 0, 0)
            sc = np.empty(big, "float32")
            pr = np.empty(big, "float32")
            o3 = np.empty((H, sq, D), "float32")
            q3, k3, v3 = q[0], k[0], v[0]

            def run_unfused():
                f1(q3, k3, sc)
                f2(sc, pr)
                f3(pr, v3, o3)
            f(q, k, v, out)
            ref = sdpa(tq, tk, tv, is_causal=causal).numpy()
            assert np.allclose(out, ref, rtol=1e-4, atol=1e-5), "fused differs from torch"
            if with_unfused:
                run_unfused()
                assert np.allclose(o3, ref[0], rtol=1e-4, atol=1e-5), "unfused differs"
            contenders = {"fused": lambda: f(q, k, v, out),
                          "torch": lambda: sdpa(tq, tk, tv, is_causal=causal)}
            if with_unfused:
                contenders["unfused"] = run_unfused
            res = interleaved(contenders, rounds=args.rounds, min_sample_s=args.min_sample_s,
                              clock=clock)
            ms = {n: r["median_s"] * 1e3 for n, r in res.items()}
            un = ms.get("unfused")
            print(f"{threads:>3} {sq:>5} {sk:>5} {str(causal):>6} {ms['fused']:>9.2f} "
                  f"{ms['torch']:>9.2f} {un if un else float('nan'):>9.2f} "
                  f"{ms['torch'] / ms['fused']:>7.2f}x "
                  f"{un / ms['fused'] if un else float('nan'):>9.2f}x", flush=True)
    print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
