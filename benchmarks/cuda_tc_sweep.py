"""Every tensor-core tile shape of ``tc_config.CONFIGS`` timed on the GPU at hand.

    python benchmarks/cuda_tc_sweep.py [--sizes 4096 8192] [--dtype float16] [--only KEY]
                                       [--variants] [--build-only]

For each matmul size and each checked tile shape (block tile, warp tile, pipeline depth) it
builds ``ops.matmul`` (fp32 accumulation and output) with the default CUDA schedule given
that shape, checks the result against PyTorch in fp32, and times it (CUDA graph replay,
median of 5) beside PyTorch's own half-precision product, interleaved.  One row per shape:
time, TFLOP/s, ratio to PyTorch; the fastest shape per size last.  It is how the default
shape (``tc_config.DEFAULT``) is chosen.  ``--variants`` times only ``VARIANTS``: the
default and the candidates the next GPU run should compare with it (a short run).
``--build-only`` needs no GPU: it assembles each shape for sm_80 and sm_90 (NVRTC) and
prints its static figures (registers, spilled bytes, shared memory per block, threads,
blocks and warps per SM and what limits them: ``backends/cuda/static``).  Exits 2 without
a GPU otherwise.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from contextlib import contextmanager
from typing import Any, Iterator

from tdsl.ops.schedules.tc_config import CONFIGS, DEFAULT, TcConfig

#: The default and the shapes to time beside it on the next GPU run (issue 26: HGEMM at
#: 0.51x cuBLAS at 4096^3).  8 warps (256 threads) of 64 x 64 on a 128 x 256 block tile at
#: 4 and 3 stages: each A tile feeds 4 warp columns (a quarter less global->shared traffic
#: per MMA than 128 x 128), but not more warps per SM: a 64 x 64 warp tile holds ~240-255
#: registers per thread and the register file holds 8 such warps (README.md: static table).
#: More resident warps need smaller warp tiles: 64 x 128 with 32 x 64 warp tiles, 3 blocks
#: of 4 warps per SM.  A 256 x 128 block of 8 warps is not expressible (a block has one
#: thread per column).
VARIANTS = [DEFAULT, TcConfig(128, 256, 64, 64, 4), TcConfig(128, 256, 64, 64, 3),
            TcConfig(64, 128, 32, 64, 4)]


@contextmanager
def tile_shape(cfg: Any) -> Iterator[None]:
    """The default CUDA schedule uses ``cfg`` for tensor-core products inside the block."""
    from tdsl.ops.schedules import cuda_tc
    saved = cuda_tc.schedule_tc.__defaults__
    cuda_tc.schedule_tc.__defaults__ = (cfg,)
    try:
        yield
    finally:
        cuda_tc.schedule_tc.__defaults__ = saved


def build(n: int, dtype: str, cfg: Any, arch: str) -> Any:
    import tdsl as td
    from tdsl import ops
    A = td.placeholder((n, n), dtype, name="A")
    B = td.placeholder((n, n), dtype, name="B")
    C = ops.matmul(A, B, out_dtype="float32")
    with tile_shape(cfg):
        s = ops.schedule(C, "cuda")
    return td.build(s, [A, B, C], target=f"cuda -arch={arch}")


def static_row(cfg: TcConfig, f: Any, arch: str) -> str:
    """One row of the static figures of ``f`` (the matmul built with ``cfg`` for ``arch``)."""
    from tdsl.backends.cuda.static import analyze
    (ks,) = analyze(f, arch, occupancy_archs=(arch,))
    occ = ks.occupancy[arch]
    return (f"{cfg.key():<22}{arch:>6}{ks.registers:>6}{ks.spill_bytes:>8}{ks.shared_bytes:>8}"
            f"{ks.threads:>8}{occ.blocks_per_sm:>7}{occ.warps_per_sm:>9}  {occ.limiter}")


def main(argv: "list[str] | None" = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="*", default=[4096, 8192])
    p.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    p.add_argument("--build-only", action="store_true")
    p.add_argument("--only", default="", help="the tile shapes whose key contains this")
    p.add_argument("--variants", action="store_true",
                   help="only the default and the candidate shapes (VARIANTS)")
    a = p.parse_args(argv)
    configs = [c for c in (VARIANTS if a.variants else CONFIGS) if a.only in c.key()]
    if a.build_only:
        print(f"{'tile shape':<22}{'arch':>6}{'regs':>6}{'spill B':>8}{'smem B':>8}"
              f"{'threads':>8}{'blk/SM':>7}{'warps/SM':>9}  limiter", flush=True)
        for cfg in configs:
            for arch in ("sm_80", "sm_90"):
                print(static_row(cfg, build(a.sizes[0], a.dtype, cfg, arch), arch), flush=True)
        return 0
    import torch
    if not torch.cuda.is_available():
        print("cuda_tc_sweep: no CUDA device", file=sys.stderr)
        return 2
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}"
    dev = torch.device("cuda")
    tdt = getattr(torch, a.dtype)
    events = [torch.cuda.Event(enable_timing=True) for _ in range(2)]

    def torch_time(x: Any, y: Any, number: int = 10) -> float:
        x @ y
        events[0].record()
        for _ in range(number):
            x @ y
        events[1].record()
        torch.cuda.synchronize()
        return events[0].elapsed_time(events[1]) / 1e3 / number

    print(f"device: {torch.cuda.get_device_name()} ({arch}); {a.dtype}", flush=True)
    print(f"{'size':>6} {'tile shape':<28}{'ms':>9}{'TFLOP/s':>9}{'torch ms':>10}{'ratio':>7}",
          flush=True)
    for n in a.sizes:
        x, y = (torch.randn(n, n, device=dev).to(tdt) for _ in range(2))
        want = x.float() @ y.float()
        best: "tuple[float, str] | None" = None
        for cfg in configs:
            try:
                f = build(n, a.dtype, cfg, arch)
                res = torch.empty(n, n, device=dev)
                f(x, y, res)
                torch.cuda.synchronize()
                err = (res - want).abs().max().item()
                if not err <= 1e-2 * max(want.abs().max().item(), 1.0):
                    print(f"{n:>6} {cfg.key():<28} WRONG: max error {err:.3g}", flush=True)
                    continue
                timer = f.time_evaluator(number=10, repeat=1)
                ours, theirs = [], []
                for _ in range(5):
                    ours.append(timer(x, y, res).mean)
                    theirs.append(torch_time(x, y))
                mo, mt = statistics.median(ours), statistics.median(theirs)
                print(f"{n:>6} {cfg.key():<28}{mo * 1e3:9.3f}{2 * n ** 3 / mo / 1e12:9.1f}"
                      f"{mt * 1e3:10.3f}{mo / mt:7.2f}", flush=True)
                if best is None or mo < best[0]:
                    best = (mo, cfg.key())
            except Exception as e:  # noqa: BLE001 - report the shape and go on
                print(f"{n:>6} {cfg.key():<28} FAILED: {type(e).__name__}: {e}".splitlines()[0],
                      flush=True)
        if best is not None:
            mo, key = best
            print(f"best {n}: {key} {mo * 1e3:.3f} ms {2 * n ** 3 / mo / 1e12:.1f} TFLOP/s",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
