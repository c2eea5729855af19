"""Static figures of the default CUDA conv2d (no GPU needed): ResNet-50's four 3x3 stages at
batch 1, a stride-2 3x3 and a 1x1 convolution.

Per kernel: registers, spill bytes, shared memory, threads, blocks, outputs per thread, the
worst bank-conflict ways and global sectors per request (``tdsl.backends.cuda.static``),
global elements loaded per FMA and shared-memory elements read per FMA (per thread, counted
in the lowered IR as ``benchmarks/cuda_static.py`` does), and FLOPs per global byte (2 FLOPs
per FMA over 4 bytes per loaded element; the whole grid's fetches, halos and weight tiles
re-read per block included).

    python benchmarks/cuda_conv_static.py [--arch sm_90]
"""
from __future__ import annotations

import argparse
import sys
import warnings
from typing import Any

import tdsl as td
from tdsl import ops
from tdsl.expr import Add, BufferLoad, Const, Mul
from tdsl.stmt import BufferStore, For, ForKind, StorageScope
from tdsl.visitor import children

#: (name, batch, input channels, size, output channels, kernel, stride, padding)
SHAPES = (
    ("res2 64x56² 3x3", 1, 64, 56, 64, 3, 1, 1),
    ("res3 128x28² 3x3", 1, 128, 28, 128, 3, 1, 1),
    ("res4 256x14² 3x3", 1, 256, 14, 256, 3, 1, 1),
    ("res5 512x7² 3x3", 1, 512, 7, 512, 3, 1, 1),
    ("64x56² 3x3 s2 ->128", 1, 64, 56, 128, 3, 2, 1),
    ("256x14² 1x1 ->1024", 1, 256, 14, 1024, 1, 1, 0),
    ("res2 batch 8", 8, 64, 56, 64, 3, 1, 1),
    ("res3 batch 8", 8, 128, 28, 128, 3, 1, 1),
)


def _count(node: Any, weight: int, acc: dict) -> None:
    """Global and shared elements loaded and FMAs per thread under ``node``."""
    if isinstance(node, For):
        serial = node.kind is not ForKind.THREAD_BINDING
        ext = int(node.extent.value) if isinstance(node.extent, Const) else 1
        for c in children(node):
            _count(c, weight * (ext if serial else 1), acc)
        return
    if isinstance(node, BufferLoad):
        if node.buffer.scope in (None, StorageScope.GLOBAL):
            acc["gld"] += weight
        elif node.buffer.scope is StorageScope.SHARED:
            acc["lds"] += weight
    if isinstance(node, BufferStore) and isinstance(node.value, Add) and \
            (isinstance(node.value.a, Mul) or isinstance(node.value.b, Mul)):
        acc["fma"] += weight
    for c in children(node):
        if not isinstance(c, (str, int, float)):
            _count(c, weight, acc)


def rows(arch: str) -> list[dict]:
    from tdsl.backends.cuda.static import CUDASpillWarning, analyze
    out = []
    for name, n, c, hw, co, k, stride, pad in SHAPES:
        D = td.placeholder((n, c, hw, hw), name="D")
        K = td.placeholder((co, c, k, k), name="K")
        C = ops.conv2d(D, K, stride=stride, padding=pad)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CUDASpillWarning)
            f = td.build(ops.schedule(C, "cuda"), [D, K, C], target=f"cuda -arch={arch}")
        stat = {s.kernel: s for s in analyze(f, arch)}
        for kern in f.kernels:
            acc = {"gld": 0, "lds": 0, "fma": 0}
            _count(kern.root, 1, acc)
            r = stat[kern.name]
            blocks = 1
            for g in kern.grid:
                blocks *= int(g.value) if isinstance(g, Const) else 1
            fma = acc["fma"]
            out.append({
                "case": name, "kernel": kern.name.replace("default_function_", ""),
                "regs": r.registers, "spill": r.spill_bytes, "smem": kern.shared_bytes,
                "threads": kern.threads_per_block or kern.max_threads, "blocks": blocks,
                "bank": r.bank_ways, "sect": r.sector_ratio,
                "blk/SM": r.occupancy[arch].blocks_per_sm,
                "gld/FMA": round(acc["gld"] / fma, 4) if fma else float("nan"),
                "lds/FMA": round(acc["lds"] / fma, 3) if fma else float("nan"),
                "FLOP/B": round(2 * fma / (4 * acc["gld"]), 1) if fma and acc["gld"] else 0,
                "findings": sorted({str(x).split(": ", 1)[-1] for x in r.findings}),
            })
    return out


def main(argv: "list[str] | None" = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", default="sm_90")
    a = p.parse_args(argv)
    rs = rows(a.arch)
    cols = [k for k in rs[0] if k != "findings"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rs:
        print("| " + " | ".join(str(r[k]) for k in cols) + " |")
    for r in rs:
        for fd in r["findings"]:
            print(f"  {r['case']} {r['kernel']}: {fd}")
    return 1 if any(r["spill"] for r in rs) else 0


if __name__ == "__main__":
    sys.exit(main())
