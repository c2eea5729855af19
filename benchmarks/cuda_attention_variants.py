"""The CUDA schedules of ``ops.attention`` side by side, against PyTorch's SDPA.

    python benchmarks/cuda_attention_variants.py [--build-only] [--arch sm_90] [--quick]
                                                 [--seq 1024 ...] [--heads 12] [--d 64]

Contenders (``CONTENDERS``): the default schedule ("staged": score / probability tiles in
shared memory, a thread per (query, 4 columns of d), 1 query x up to 16 keys of the score
tile per thread) with its default tiles, with the scores' loop over d unrolled by the
compiler ("unroll": more registers), with 2 queries per thread of the score tile ("q2"), also with 8 columns ("c8q2"), at key blocks of 128 and 64 rather than the
declaration's default, and the first schedule ("thread": a thread per query, K / V tiles in
shared memory; ``schedule_attention(variant="thread")``).  Each case (batch 1, ``--heads`` x
``--seq`` x ``--d`` fp32, causal and not) is built for every contender and checked against
``torch.nn.functional.scaled_dot_product_attention`` (max error <= 1e-3 x max |ref|); then
the contenders and SDPA are timed interleaved (``--rounds`` rounds; each a CUDA-graph replay
of 10 launches for tdsl, CUDA events around 10 calls for PyTorch) and the medians printed
with their ratio to SDPA.  Every row also gives the kernel's static figures (ptxas registers,
stack frame, spill bytes, shared memory, resident blocks per SM, worst bank conflict and
sectors per request: ``tdsl.backends.cuda.static``).

``--build-only`` builds every contender with NVRTC and prints the static figures, with no GPU
and no PyTorch (a dry run).  Exits 2 without a GPU (unless ``--build-only``), 1 when a
contender is wrong or fails to build.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any

#: (label, schedule variant, key block or None for the declaration's default, staged tiles
#: as (columns per thread, queries per thread of the score tile, unroll the dot product's
#: loop) or None for the default).
CONTENDERS = (("staged", "staged", None, None), ("staged unroll", "staged", None, (4, 1, True)),
              ("staged q2", "staged", None, (4, 2)),
              ("staged c8q2", "staged", None, (8, 2)), ("staged bk128", "staged", 128, None),
              ("staged bk64", "staged", 64, None), ("thread", "thread", None, None))


def build(heads: int, seq: int, d: int, causal: bool, variant: str,
          block_k: "int | None", tiles: "tuple | None", arch: str) -> Any:
    """The attention of one case built with ``variant``'s schedule for ``arch``."""
    import tdsl as td
    from tdsl import ops
    from tdsl.ops.schedules.cuda_attention import StagedTiles, attention_schedule
    Q, K, V = (td.placeholder((1, heads, seq, d), name=n) for n in "QKV")
    out = ops.attention(Q, K, V, causal=causal, block_k=block_k, target="cuda")
    sch = attention_schedule(out, variant, StagedTiles(*tiles) if tiles else None)
    return td.build(sch, [Q, K, V, out], target=f"cuda -arch={arch}")


def static_figures(f: Any, arch: str) -> str:
    """ptxas and layout figures of the module's one kernel, as a short string."""
    from tdsl.backends.cuda.static import analyze
    (ks,) = analyze(f, arch)
    k = f.kernels[0]
    return (f"regs {ks.registers} frame {ks.frame_bytes} spill {ks.spill_bytes} "
            f"smem {ks.shared_bytes} thr {k.threads_per_block or k.max_threads} "
            f"blk/SM {ks.occupancy[arch].blocks_per_sm} bank {ks.bank_ways} "
            f"sect {ks.sector_ratio}")


def main(argv: "list[str] | None" = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build-only", action="store_true",
                   help="build every contender and print its static figures (no GPU)")
    p.add_argument("--arch", default=None, help="default: the GPU's (sm_90 with --build-only)")
    p.add_argument("--seq", type=int, nargs="*", default=[1024])
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--quick", action="store_true", help="3 rounds")
    a = p.parse_args(argv)
    torch = None
    if not a.build_only:
        try:
            import torch
        except ImportError:
            print("cuda_attention_variants: PyTorch is not installed", file=sys.stderr)
            return 2
        if not torch.cuda.is_available():
            print("cuda_attention_variants: no CUDA device", file=sys.stderr)
            return 2
        torch.backends.cuda.matmul.allow_tf32 = False
        major, minor = torch.cuda.get_device_capability()
        arch = a.arch or f"sm_{major}{minor}"
        print(f"device: {torch.cuda.get_device_name()} ({arch}); PyTorch {torch.__version__}",
              flush=True)
    else:
        arch = a.arch or "sm_90"
    rounds = 3 if a.quick else a.rounds
    bad = 0
    for seq in a.seq:
        for causal in (False, True):
            case = f"1x{a.heads}x{seq}x{a.d}{' causal' if causal else ''}"
            built = {}
            for label, variant, bk, tiles in CONTENDERS:
                try:
                    f = build(a.heads, seq, a.d, causal, variant, bk, tiles, arch)
                    built[label] = f
                    print(f"{case:<22}{label:<14}{static_figures(f, arch)}", flush=True)
                except Exception as e:  # noqa: BLE001 - report the contender and go on
                    print(f"{case:<22}{label:<14}BUILD FAILED: {type(e).__name__}: {e}"
                          .splitlines()[0], flush=True)
                    bad += 1
            if a.build_only:
                continue
            bad += _time_case(torch, case, built, a.heads, seq, a.d, causal, rounds)
    print(f"cuda_attention_variants: {bad} wrong or failed", flush=True)
    return 1 if bad else 0


def _time_case(torch: Any, case: str, built: dict, heads: int, seq: int, d: int,
               causal: bool, rounds: int) -> int:
    """Check every built contender against SDPA, then time them and SDPA interleaved;
    returns how many were wrong or failed."""
    dev = torch.device("cuda")
    q, k, v = (torch.randn(1, heads, seq, d, device=dev) for _ in range(3))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    want = sdpa(q, k, v, is_causal=causal)
    scale = want.abs().max().item()
    bad = 0
    timers = {}
    for label, f in built.items():
        try:
            # not full_like: SDPA's output on the GPU is a permuted (non-contiguous) view
            res = torch.full(tuple(want.shape), 7.0, device=dev)
            f(q, k, v, res)
            torch.cuda.synchronize()
            err = (res - want).abs().max().item()
            if not err <= 1e-3 * max(scale, 1.0):
                print(f"{case:<22}{label:<14}WRONG: max error {err:.3g}", flush=True)
                bad += 1
                continue
            timer = f.time_evaluator(number=10, repeat=1)
            timers[label] = (lambda t=timer, r=res: t(q, k, v, r).mean)
        except Exception as e:  # noqa: BLE001
            print(f"{case:<22}{label:<14}FAILED: {type(e).__name__}: {e}".splitlines()[0],
                  flush=True)
            bad += 1
    events = [torch.cuda.Event(enable_timing=True) for _ in range(2)]

    def torch_time() -> float:
        sdpa(q, k, v, is_causal=causal)
        events[0].record()
        for _ in range(10):
            sdpa(q, k, v, is_causal=causal)
        events[1].record()
        torch.cuda.synchronize()
        return events[0].elapsed_time(events[1]) / 1e3 / 10

    times: dict = {label: [] for label in timers}
    times["torch sdpa"] = []
    for _ in range(rounds):              # interleaved
        for label, t in timers.items():
            times[label].append(t())
        times["torch sdpa"].append(torch_time())
    ref = statistics.median(times["torch sdpa"])
    flops = 4 * heads * seq * seq * d // (2 if causal else 1)
    for label, ts in times.items():
        m = statistics.median(ts)
        print(f"{case:<22}{label:<14}{m * 1e3:9.3f} ms {m / ref:7.2f}x sdpa "
              f"{flops / m / 1e12:7.2f} TFLOP/s", flush=True)
    return bad


if __name__ == "__main__":
    sys.exit(main())
