"""Static report of tdsl's default CUDA kernels (no GPU needed).

For each default kernel (``tdsl.ops`` + ``ops.schedule(..., "cuda")``): registers per thread,
stack frame and spill bytes (ptxas ``-v`` through NVRTC), shared memory per block, threads
per block, blocks per launch (a symbolic grid dimension counts 1), outputs per thread (the
local accumulator), global loads per thread and per FMA
(elements, a float4 counting 4; counted in
the lowered IR per thread: loads of global buffers and multiply-adds, each weighted by the
trip counts of the serial loops around it; thread- and block-bound loops count once), and
the checks of ``tdsl.backends.cuda.static`` (issue 26): the worst shared-memory bank
conflict of a warp request ("bank": ways, 1 = none; for the tensor-core templates, whose
ldmatrix and cp.async addresses the IR walk cannot see, counted by emulating a small
instance of the same kernel: ``CUDAModule.emulate_bank_use``), the worst global request's 32-byte
sectors over the fewest possible ("sect": 1 = coalesced; "ld sect": the same over the global
loads only, the fetches' reads), resident blocks per SM on sm_80
and sm_90, and the tensor-core / async-copy instructions expected and found in the PTX
("instr": m = mma, c = cp.async, l = ldmatrix, v = 16-byte global loads of a float4 fetch into
shared memory; upper case found, lower case missing).
Every finding is listed under the table.

    python benchmarks/cuda_static.py [--arch sm_90] [--json] [--only NAME,...]

It exits non-zero when the matmul default computes fewer than 16 outputs per thread or
has no shared-memory tiles (the "done when" of issue 13), or when a default kernel spills.
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings
from dataclasses import asdict, dataclass
from typing import Any, Callable

import tdsl as td
from tdsl import ops
from tdsl.expr import Add, BufferLoad, Const, Mul
from tdsl.stmt import Allocate, BufferStore, For, ForKind, IntrinCall, StorageScope
from tdsl.visitor import children


@dataclass
class Row:
    kernel: str
    launch: str
    registers: int
    frame_bytes: int
    spill_bytes: int
    shared_bytes: int
    threads: int
    blocks: int
    outputs_per_thread: int
    loads_per_thread: "int | str"     # a str for a template kernel: 16-byte loads per k tile
    #                                   (attention: per key block, "/kb")
    loads_per_fma: float
    bank_ways: int = 0
    sector_ratio: float = 0.0
    blocks_sm80: int = 0
    blocks_sm90: int = 0
    instructions: str = ""
    findings: "list[str] | None" = None
    load_sector_ratio: float = 0.0    # the worst global *load* request (a fetch's reads)


def _workloads() -> dict[str, Callable[[], tuple[list, Any]]]:
    def matmul():
        A, B = td.placeholder((1024, 1024), name="A"), td.placeholder((1024, 1024), name="B")
        return [A, B], ops.matmul(A, B)

    def matmul_fp16():
        A = td.placeholder((1024, 1024), "float16", name="A")
        B = td.placeholder((1024, 1024), "float16", name="B")
        return [A, B], ops.matmul(A, B, out_dtype="float32")

    def dense():
        X, W = td.placeholder((1024, 1024), name="X"), td.placeholder((1024, 1024), name="W")
        b = td.placeholder((1024,), name="b")
        return [X, W, b], ops.dense(X, W, b, activation="relu")

    def batch_matmul():
        P, Q = td.placeholder((8, 512, 512), name="P"), td.placeholder((8, 512, 512), name="Q")
        return [P, Q], ops.batch_matmul(P, Q)

    def conv2d():
        D = td.placeholder((1, 64, 56, 56), name="D")
        K = td.placeholder((64, 64, 3, 3), name="K")
        return [D, K], ops.conv2d(D, K, padding=1)

    def conv2d_s2():
        D = td.placeholder((1, 64, 56, 56), name="D")
        K = td.placeholder((128, 64, 3, 3), name="K")
        return [D, K], ops.conv2d(D, K, stride=2, padding=1)

    def matmul_tail():          # sizes the 128 x 128 x 8 tiles do not divide
        A, B = td.placeholder((1000, 1000), name="A"), td.placeholder((1000, 1000), name="B")
        return [A, B], ops.matmul(A, B)

    def matmul_odd():           # odd row strides: scalar fetches, a k tail
        A, B = td.placeholder((1023, 517), name="A"), td.placeholder((517, 1021), name="B")
        return [A, B], ops.matmul(A, B)

    def dense_small_m():        # batch-16 inference: 8 tiles, split-K
        X, W = td.placeholder((16, 4096), name="X"), td.placeholder((1024, 4096), name="W")
        b = td.placeholder((1024,), name="b")
        return [X, W, b], ops.dense(X, W, b, activation="relu")

    def conv2d_tail():          # 30 x 30 outputs: the 8 x 8 pixel tiles have a tail
        D = td.placeholder((1, 64, 30, 30), name="D")
        K = td.placeholder((64, 64, 3, 3), name="K")
        return [D, K], ops.conv2d(D, K, padding=1)

    def conv2d_late():          # a late 7 x 7 layer: 32 tiles, split-K
        D = td.placeholder((1, 512, 7, 7), name="D")
        K = td.placeholder((512, 512, 3, 3), name="K")
        return [D, K], ops.conv2d(D, K, padding=1)

    def conv2d_fp16():          # a ResNet layer on tensor cores: an implicit GEMM, B gathered
        D = td.placeholder((1, 64, 56, 56), "float16", name="D")
        K = td.placeholder((64, 64, 3, 3), "float16", name="K")
        return [D, K], ops.conv2d(D, K, padding=1, out_dtype="float32")

    def softmax():
        X = td.placeholder((4096, 1024), name="X")
        return [X], ops.softmax(X)

    def layernorm():
        X = td.placeholder((4096, 1024), name="X")
        g, b = td.placeholder((1024,), name="g"), td.placeholder((1024,), name="b")
        return [X, g, b], ops.layernorm(X, g, b)

    def attention():            # causal, 12 heads x 1024 x 64: a thread per query
        Q, K, V = (td.placeholder((1, 12, 1024, 64), name=n) for n in "QKV")
        return [Q, K, V], ops.attention(Q, K, V, causal=True)

    def attention_fp16_mask():  # tensor cores, causal and a boolean (B, 1, Sq, Sk) mask
        Q, K, V = (td.placeholder((1, 12, 1024, 64), "float16", name=n) for n in "QKV")
        M = td.placeholder((1, 1, 1024, 1024), "bool", name="M")
        return [Q, K, V, M], ops.attention(Q, K, V, causal=True, mask=M)

    def elementwise():
        X, Y = td.placeholder((4096, 1024), name="X"), td.placeholder((4096, 1024), name="Y")
        return [X, Y], ops.gelu(ops.add(X, Y))

    return {"matmul": matmul, "matmul_fp16": matmul_fp16, "dense": dense,
            "batch_matmul": batch_matmul, "conv2d": conv2d,
            "conv2d_s2": conv2d_s2, "matmul_tail": matmul_tail, "matmul_odd": matmul_odd,
            "dense_small_m": dense_small_m, "conv2d_tail": conv2d_tail, "conv2d_late": conv2d_late,
            "conv2d_fp16": conv2d_fp16,
            "softmax": softmax, "layernorm": layernorm, "attention": attention,
            "attention_fp16_mask": attention_fp16_mask, "elementwise": elementwise}


def _tc_instances() -> dict[str, Callable[[], tuple[list, Any]]]:
    """Small instances of the tensor-core workloads (the same template kernels, fewer tiles),
    emulated for their shared-memory bank use: the IR walk does not see into the templates."""
    def matmul_fp16():
        A = td.placeholder((256, 128), "float16", name="A")
        B = td.placeholder((128, 256), "float16", name="B")
        return [A, B], ops.matmul(A, B, out_dtype="float32")

    def conv2d_fp16():
        D = td.placeholder((1, 16, 20, 20), "float16", name="D")
        K = td.placeholder((24, 16, 3, 3), "float16", name="K")
        return [D, K], ops.conv2d(D, K, padding=1, out_dtype="float32")

    def attention_fp16_mask():
        Q, K, V = (td.placeholder((1, 2, 128, 64), "float16", name=n) for n in "QKV")
        M = td.placeholder((1, 1, 128, 128), "bool", name="M")
        return [Q, K, V, M], ops.attention(Q, K, V, causal=True, mask=M)

    return {"matmul_fp16": matmul_fp16, "conv2d_fp16": conv2d_fp16,
            "attention_fp16_mask": attention_fp16_mask}


def emulated_bank_use(name: str, arch: str) -> "dict | None":
    """The bank use (``CUDAModule.emulate_bank_use``) of workload ``name``'s small
    tensor-core instance on random inputs; None without one or without g++."""
    import shutil
    import numpy as np
    make = _tc_instances().get(name)
    if make is None or shutil.which("g++") is None:
        return None
    ins, out = make()
    f = td.build(ops.schedule(out, "cuda"), [*ins, out], target=f"cuda -arch={arch}")
    rng = np.random.default_rng(0)
    arrays = []
    for t in [*ins, out]:
        shape = tuple(int(x) for x in t.shape)
        if str(t.dtype) == "bool":
            arrays.append(rng.random(shape) < 0.8)
        else:
            arrays.append(rng.standard_normal(shape).astype(str(t.dtype)))
    return f.emulate_bank_use(*arrays)


def _count(node: Any, weight: int, acc: dict) -> None:
    """Global loads and multiply-adds per thread under ``node`` (``weight`` = trips)."""
    if isinstance(node, For):
        serial = node.kind is not ForKind.THREAD_BINDING
        ext = int(node.extent.value) if isinstance(node.extent, Const) else 1
        for c in children(node):
            _count(c, weight * (ext if serial else 1), acc)
        return
    if isinstance(node, IntrinCall):      # warp-collective (WMMA): a lane's share
        total = 1
        for e in node.intrin.extents:       # the intrinsic's loop extents (ints)
            total *= int(e)
        acc["fma"] += weight * total // 32
        acc["frag"] = max(acc.get("frag", 1), 256 // 32)
        for r in node.inputs:
            if r.buffer.scope in (None, StorageScope.GLOBAL):
                size = 1
                for e in r.extents:
                    size *= int(e.value)
                acc["loads"] += weight * size // 32
        return
    if isinstance(node, BufferLoad) and node.buffer.scope in (None, StorageScope.GLOBAL):
        acc["loads"] += weight
    if isinstance(node, BufferStore) and isinstance(node.value, Add) and \
            (isinstance(node.value.a, Mul) or isinstance(node.value.b, Mul)):
        acc["fma"] += weight
    if isinstance(node, Allocate) and node.buffer.scope is StorageScope.LOCAL and \
            all(isinstance(d, Const) for d in node.buffer.shape):
        total = 1
        for d in node.buffer.shape:
            total *= int(d.value)
        acc["local"].append((node.buffer.name, total))
    for c in children(node):
        if not isinstance(c, (str, int, float)):
            _count(c, weight, acc)


def _instr(expected: set, found: set) -> str:
    out = ""
    for key, ch in (("mma", "m"), ("cp.async", "c"), ("ldmatrix", "l"), ("ld.v4", "v")):
        if key in expected or key in found:
            out += ch.upper() if key in found else ch
    return out or "-"


def _load_sectors(kernel: Any) -> float:
    """The worst sectors / fewest of the kernel's global load requests."""
    from tdsl.backends.cuda.static import sectors, warp_accesses
    worst = 0.0
    for site in warp_accesses(kernel):
        if site.store or site.buffer.scope.value != "global":
            continue
        for q in site.requests:
            got, fewest = sectors(q)
            worst = max(worst, got / fewest if fewest else 0.0)
    return round(worst, 3)


def report(arch: str = "sm_90", only: "list[str] | None" = None) -> list[Row]:
    from tdsl.backends.cuda.static import CUDASpillWarning, analyze
    from tdsl.backends.cuda.tc_attention import FaPlan
    rows = []
    for name, make in _workloads().items():
        if only and name not in only:
            continue
        ins, out = make()
        with warnings.catch_warnings():      # a spill is a row of the table (and fails)
            warnings.simplefilter("ignore", CUDASpillWarning)
            f = td.build(ops.schedule(out, "cuda"), [*ins, out], target=f"cuda -arch={arch}")
        stat = {s.kernel: s for s in analyze(f, arch)}
        for k in f.kernels:
            acc: dict = {"loads": 0, "fma": 0, "local": []}
            _count(k.root, 1, acc)
            outs = [n for b, n in acc["local"] if not b.endswith("shared.local") and
                    "pack.local" not in b]
            r = stat[k.name]
            grid, block = (tuple(int(x.value) if isinstance(x, Const) else str(x) for x in dims)
                           for dims in (k.grid, k.block))
            blocks = 1
            for g in grid:
                blocks = blocks * g if isinstance(g, int) else blocks
            shared, per_thread = k.shared_bytes, max(outs + [acc.get("frag", 1)])
            loads, per_fma = acc["loads"], (round(acc["loads"] / acc["fma"], 4) if acc["fma"]
                                            else float("nan"))
            if isinstance(k.tc, FaPlan):    # the attention microkernel: per key block
                from tdsl.backends.cuda import tc_attention_kernel as fa
                shared = k.shared_bytes + k.tc.smem_bytes
                per_thread = fa.BQ * k.tc.d // fa.THREADS
                chunks = 2 * fa.BKV * k.tc.d * 2 // 16 // fa.THREADS      # K and V tiles
                loads = f"{chunks}/kb"
                per_fma = round(chunks / (2 * fa.BQ * fa.BKV * k.tc.d / fa.THREADS), 5)
            elif k.tc is not None:   # the tensor-core template: its figures, not the IR nest's
                from tdsl.backends.cuda import tc_kernel as tk
                from tdsl.ops.schedules.tc_config import BK
                shared = k.shared_bytes + k.tc.smem_bytes
                per_thread = tk.BM * tk.BN // tk.THREADS
                chunks = (tk.BM * BK + BK * tk.BN) * 2 // 16 // tk.THREADS   # per k tile
                loads = f"{chunks}/kt"
                per_fma = round(chunks / (tk.BM * tk.BN * BK / tk.THREADS), 5)
            seen: list[str] = []
            for fd in r.findings:
                if str(fd) not in seen:
                    seen.append(str(fd))
            notes = [x.split(": ", 1)[1] for x in seen]
            bank_ways = r.bank_ways
            if k.tc is not None and (use := emulated_bank_use(name, arch)):
                bank_ways = max(u.worst for u in use.values())
                notes += [f"{kind}: {u.ways:.2f}-way bank conflicts on average, worst phase "
                          f"{u.worst}-way (emulated)" for kind, u in use.items() if u.worst > 1]
            rows.append(Row(f"{name}:{k.name}", f"grid {grid} block {block}", r.registers,
                            r.frame_bytes, r.spill_bytes, shared,
                            k.threads_per_block or k.max_threads, blocks, per_thread,
                            loads, per_fma,
                            bank_ways, r.sector_ratio, r.occupancy["sm_80"].blocks_per_sm,
                            r.occupancy["sm_90"].blocks_per_sm, _instr(r.expected, r.found),
                            notes, _load_sectors(k)))
    return rows


def main(argv: "list[str] | None" = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", default="sm_90")
    p.add_argument("--json", action="store_true")
    p.add_argument("--only", default="", help="comma-separated workload names")
    a = p.parse_args(argv)
    rows = report(a.arch, [x for x in a.only.split(",") if x] or None)
    if a.json:
        print(json.dumps([asdict(r) for r in rows], indent=1))
    else:
        head = ("kernel", "regs", "frame B", "spill B", "shared B", "threads", "blocks",
                "outs/thr", "gld/thr", "gld/FMA", "bank", "sect", "ld sect", "blk/SM80",
                "blk/SM90", "instr", "launch")
        print(f"{head[0]:<40}" + "".join(f"{h:>9}" for h in head[1:-1]) + f"  {head[-1]}")
        for r in rows:
            print(f"{r.kernel:<40}{r.registers:>9}{r.frame_bytes:>9}{r.spill_bytes:>9}"
                  f"{r.shared_bytes:>9}{r.threads:>9}{r.blocks:>9}{r.outputs_per_thread:>9}"
                  f"{r.loads_per_thread:>9}{r.loads_per_fma:>9}{r.bank_ways:>9}"
                  f"{r.sector_ratio:>9}{r.load_sector_ratio:>9}{r.blocks_sm80:>9}"
                  f"{r.blocks_sm90:>9}{r.instructions:>9}"
                  f"  {r.launch}")
        found = [(r.kernel, f) for r in rows for f in r.findings or []]
        print(f"\nfindings ({len(found)}):" if found else "\nfindings: none")
        for kernel, f in found:
            print(f"  {kernel}: {f}")
    ok = True
    mm = next((r for r in rows if r.kernel.startswith("matmul:")), None)
    if mm is not None:
        done = mm.outputs_per_thread >= 16 and mm.shared_bytes > 0 and mm.spill_bytes == 0
        ok = done
        print(f"\nmatmul default: {mm.outputs_per_thread} outputs per thread, {mm.shared_bytes} "
              f"B shared tiles, {mm.spill_bytes} B spilled: {'OK' if done else 'NOT DONE'}")
    spills = [r for r in rows if r.spill_bytes]
    for r in spills:
        print(f"SPILL: default kernel {r.kernel} spills {r.spill_bytes} B per thread")
    return 0 if ok and not spills else 1


if __name__ == "__main__":
    sys.exit(main())
