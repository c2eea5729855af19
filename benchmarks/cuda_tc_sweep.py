"""Every tensor-core tile shape of ``tc_config.CONFIGS`` timed on the GPU at hand.

    python benchmarks/cuda_tc_sweep.py [--sizes 4096 8192] [--dtype float16] [--only KEY]
                                       [--variants] [--build-only]

For each matmul size and each checked tile shape (block tile, warp tile, pipeline depth) it
builds ``ops.matmul`` (fp32 accumulation and output) with the default CUDA schedule given
that shape, checks the result against PyTorch in fp32, and times it (CUDA graph replay,
median of 5) beside PyTorch's own half-precision product, interleaved.  One row per shape:
time, TFLOP/s, ratio to PyTorch; the fastest shape per size last.  It is how the default
shape (``tc_config.DEFAULT``) is chosen.  ``--variants`` times every shape once per
mainloop (``tc_config.MAINLOOPS``: the default "frag" and the first, "basic", whose keys end
in ``/basic``), the two rows side by side, and the fastest shape per mainloop last: the
comparison of the two mainloops in one run.  ``--build-only`` builds every shape for sm_90
without a GPU (a check that the script runs).  Exits 2 without a GPU.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from contextlib import contextmanager
from typing import Any, Iterator


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


def main(argv: "list[str] | None" = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="*", default=[4096, 8192])
    p.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    p.add_argument("--build-only", action="store_true")
    p.add_argument("--only", default="", help="the tile shapes whose key contains this")
    p.add_argument("--variants", action="store_true",
                   help="each shape with every mainloop (tc_config.MAINLOOPS), side by side")
    a = p.parse_args(argv)
    from dataclasses import replace

    from tdsl.ops.schedules.tc_config import CONFIGS, MAINLOOPS
    loops = MAINLOOPS if a.variants else (CONFIGS[0].mainloop,)
    CONFIGS = [replace(c, mainloop=m) for c in CONFIGS for m in loops]
    CONFIGS = [c for c in CONFIGS if a.only in c.key()]
    if a.build_only:
        for cfg in CONFIGS:
            build(a.sizes[0], a.dtype, cfg, "sm_90").cubin()
            print(f"{cfg.key():<28} built", flush=True)
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
        best: dict = {}
        for cfg in CONFIGS:
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
                if cfg.mainloop not in best or mo < best[cfg.mainloop][0]:
                    best[cfg.mainloop] = (mo, cfg.key())
            except Exception as e:  # noqa: BLE001 - report the shape and go on
                print(f"{n:>6} {cfg.key():<28} FAILED: {type(e).__name__}: {e}".splitlines()[0],
                      flush=True)
        for mo, key in best.values():
            print(f"best {n}: {key} {mo * 1e3:.3f} ms {2 * n ** 3 / mo / 1e12:.1f} TFLOP/s",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
