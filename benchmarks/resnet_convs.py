"""ResNet-18's and MobileNetV2's convolutions one at a time: tdsl's default schedule (the
graph's form: HWIO weight, bias, ReLU fused) vs ``torch.nn.functional.conv2d`` (+ bias) at
the same thread count, interleaved medians, sorted by the time tdsl loses.

    python benchmarks/resnet_convs.py [--batch 8] [--threads 1] [--repeat 5] [--model resnet18]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import tdsl as td
from tdsl import ops
from tdsl.testing.benchmark import benchmark

# (name, cin, cout, k, stride, pad, size, groups, count in the model)
RESNET18 = [
    ("conv1 7x7 s2", 3, 64, 7, 2, 3, 224, 1, 1),
    ("l1 3x3 64", 64, 64, 3, 1, 1, 56, 1, 4),
    ("l2 3x3 s2 64-128", 64, 128, 3, 2, 1, 56, 1, 1),
    ("l2 3x3 128", 128, 128, 3, 1, 1, 28, 1, 3),
    ("l2 1x1 s2 ds", 64, 128, 1, 2, 0, 56, 1, 1),
    ("l3 3x3 s2 128-256", 128, 256, 3, 2, 1, 28, 1, 1),
    ("l3 3x3 256", 256, 256, 3, 1, 1, 14, 1, 3),
    ("l3 1x1 s2 ds", 128, 256, 1, 2, 0, 28, 1, 1),
    ("l4 3x3 s2 256-512", 256, 512, 3, 2, 1, 14, 1, 1),
    ("l4 3x3 512", 512, 512, 3, 1, 1, 7, 1, 3),
    ("l4 1x1 s2 ds", 256, 512, 1, 2, 0, 14, 1, 1),
]

MOBILENET_V2 = [
    ("stem 3x3 s2", 3, 32, 3, 2, 1, 224, 1, 1),
    ("dw 32 112", 32, 32, 3, 1, 1, 112, 32, 1),
    ("pw 32-16 112", 32, 16, 1, 1, 0, 112, 1, 1),
    ("pw 16-96 112", 16, 96, 1, 1, 0, 112, 1, 1),
    ("dw 96 s2 112", 96, 96, 3, 2, 1, 112, 96, 1),
    ("pw 96-24 56", 96, 24, 1, 1, 0, 56, 1, 1),
    ("pw 24-144 56", 24, 144, 1, 1, 0, 56, 1, 2),
    ("dw 144 56", 144, 144, 3, 1, 1, 56, 144, 1),
    ("pw 144-24 56", 144, 24, 1, 1, 0, 56, 1, 1),
    ("dw 144 s2 56", 144, 144, 3, 2, 1, 56, 144, 1),
    ("pw 144-32 28", 144, 32, 1, 1, 0, 28, 1, 1),
    ("pw 32-192 28", 32, 192, 1, 1, 0, 28, 1, 3),
    ("dw 192 28", 192, 192, 3, 1, 1, 28, 192, 2),
    ("pw 192-32 28", 192, 32, 1, 1, 0, 28, 1, 2),
    ("dw 192 s2 28", 192, 192, 3, 2, 1, 28, 192, 1),
    ("pw 192-64 14", 192, 64, 1, 1, 0, 14, 1, 1),
    ("pw 64-384 14", 64, 384, 1, 1, 0, 14, 1, 4),
    ("dw 384 14", 384, 384, 3, 1, 1, 14, 384, 4),
    ("pw 384-64 14", 384, 64, 1, 1, 0, 14, 1, 3),
    ("pw 384-96 14", 384, 96, 1, 1, 0, 14, 1, 1),
    ("pw 96-576 14", 96, 576, 1, 1, 0, 14, 1, 3),
    ("dw 576 14", 576, 576, 3, 1, 1, 14, 576, 2),
    ("pw 576-96 14", 576, 96, 1, 1, 0, 14, 1, 2),
    ("dw 576 s2 14", 576, 576, 3, 2, 1, 14, 576, 1),
    ("pw 576-160 7", 576, 160, 1, 1, 0, 7, 1, 1),
    ("pw 160-960 7", 160, 960, 1, 1, 0, 7, 1, 3),
    ("dw 960 7", 960, 960, 3, 1, 1, 7, 960, 3),
    ("pw 960-160 7", 960, 160, 1, 1, 0, 7, 1, 2),
    ("pw 960-320 7", 960, 320, 1, 1, 0, 7, 1, 1),
    ("pw 320-1280 7", 320, 1280, 1, 1, 0, 7, 1, 1),
]


def build(n: int, cin: int, cout: int, k: int, stride: int, pad: int, size: int, groups: int):
    """A tdsl module in the graph layer's form and its arrays; the torch callable."""
    import torch
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, cin, size, size)).astype(np.float32)
    w = rng.standard_normal((cout, cin // groups, k, k)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    X = td.placeholder(x.shape, name="x")
    if groups == 1:
        wk = np.ascontiguousarray(w.transpose(2, 3, 1, 0))
        W = td.placeholder(wk.shape, name="w")
        y = ops.conv2d(X, W, stride=stride, padding=pad, kernel_layout="HWIO", bias=None,
                       activation=None)
    else:
        wk = w
        W = td.placeholder(wk.shape, name="w")
        y = ops.conv2d(X, W, stride=stride, padding=pad, groups=groups)
    B = td.placeholder((cout,), name="b")
    y = ops.relu(ops.add(y, ops.reshape(B, (1, cout, 1, 1))))
    f = td.build(ops.schedule(y), [X, W, B, y])
    out = np.empty(tuple(int(d) for d in y.shape), np.float32)
    tx, tw, tb = (torch.from_numpy(a) for a in (x, w, b))
    ref = torch.relu(torch.nn.functional.conv2d(tx, tw, tb, stride, pad, 1, groups)).numpy()
    f(x, wk, b, out)
    err = float(np.abs(out - ref).max() / max(1e-6, np.abs(ref).max()))
    tfn = lambda: torch.relu(torch.nn.functional.conv2d(tx, tw, tb, stride, pad, 1, groups))
    gemm = None
    if (k, stride, pad, groups) == (1, 1, 0, 1):
        gemm = _gemm_form(x, w, b, out.shape, ref)
        err = max(err, gemm[1])
    return (f, [x, wk, b, out]), tfn, err, (gemm[0] if gemm else None)


def _gemm_form(x, w, b, shape, ref):
    """A pointwise convolution as the graph's ``passes.pointwise`` rewrites it: the batched
    GEMM ``w (1, co, ci) @ x (n, ci, h * w)``, bias and ReLU fused (one kernel)."""
    n, cin, h, wd = x.shape
    cout = w.shape[0]
    X = td.placeholder((n, cin, h * wd), name="x")
    W = td.placeholder((1, cout, cin), name="w")
    B = td.placeholder((cout, 1), name="b")
    y = ops.relu(ops.add(ops.batch_matmul(W, X), B))
    f = td.build(ops.schedule(y), [X, W, B, y])
    args = [x.reshape(n, cin, h * wd), np.ascontiguousarray(w.reshape(1, cout, cin)),
            b.reshape(cout, 1).copy(), np.empty((n, cout, h * wd), np.float32)]
    f(*args)
    err = float(np.abs(args[3].reshape(shape) - ref).max() / max(1e-6, np.abs(ref).max()))
    return (f, args), err


def main() -> None:
    import torch
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--model", default="resnet18", choices=("resnet18", "mobilenet_v2"))
    p.add_argument("--only", default="", help="substring of the case names to run")
    p.add_argument("--gemm", action="store_true",
                   help="also time 1x1 stride-1 convolutions as the batched GEMM")
    p.add_argument("--tiles", default="",
                   help="width,vectors,rows[,unroll_taps[,narrow_width]]: override the "
                        "conv tiles (both the AVX-512 and the 16-register ones)")
    args = p.parse_args()
    if args.tiles:
        from tdsl.ops.schedules import llvm_conv
        tiles = llvm_conv.ConvTiles(*(int(t) for t in args.tiles.split(",")))
        llvm_conv.CONV_TILES = llvm_conv.CONV_TILES_16REGS = tiles
    torch.set_num_threads(args.threads)
    cases = RESNET18 if args.model == "resnet18" else MOBILENET_V2
    rows = []
    # one thread: this thread's CPU time (preemptions on a shared machine do not count)
    clock = time.thread_time if args.threads == 1 else time.perf_counter
    for name, *shape, count in cases:
        if args.only and args.only not in name:
            continue
        t0 = time.perf_counter()
        tdf, tfn, err, gemm = build(args.batch, *shape)
        contenders = {"tdsl": tdf, "torch": tfn}
        if gemm is not None and args.gemm:
            contenders["gemm"] = gemm
        r = benchmark(contenders, threads=args.threads, repeat=args.repeat,
                      min_repeat_ms=20, warmup_ms=20, settle_ms=20,
                      clock=clock)
        ms = {k: r.median(k) * 1e3 for k in contenders}
        lost = (ms["tdsl"] - ms["torch"]) * count
        rows.append((lost, name, count, ms["tdsl"], ms["torch"], err))
        print(f"{name:<20} x{count} tdsl {ms['tdsl']:8.3f} ms torch {ms['torch']:8.3f} ms "
              f"{ms['torch'] / ms['tdsl']:5.2f}x lost {lost:7.2f} ms err {err:.1e} "
              + (f" gemm {ms['gemm']:8.3f} ms" if "gemm" in ms else "")
              + f" ({time.perf_counter() - t0:.0f} s)", flush=True)
    print("\nby lost time (ms, x count):")
    for lost, name, count, a, b, _ in sorted(rows, reverse=True):
        print(f"  {lost:8.2f}  {name:<20} x{count}  {b / a:5.2f}x")
    print(f"total tdsl {sum(r[3] * r[2] for r in rows):.1f} ms, "
          f"torch {sum(r[4] * r[2] for r in rows):.1f} ms")


if __name__ == "__main__":
    main()
