"""tdsl's default CUDA kernels against PyTorch (cuBLAS / cuDNN) on the GPU at hand.

    python benchmarks/cuda_vs_torch.py [--quick]

Cases: matmul 1024 and 4096 fp32 (TF32 off on both sides), matmul 4096 fp16 (PyTorch on
tensor cores; tdsl's default), softmax 4096 x 1024, conv2d 1x64x56x56 3x3.  Each case is
checked against PyTorch first; the contenders are timed interleaved (CUDA events around a
loop of launches: tdsl's time_evaluator replays a captured CUDA graph) and the medians
compared.  Prints time per call and tdsl / PyTorch ratios.  Exits 2 without a GPU.
"""
from __future__ import annotations

import argparse
import statistics
import sys


def main(argv: "list[str] | None" = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer repeats")
    a = p.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("cuda_vs_torch: PyTorch is not installed", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("cuda_vs_torch: no CUDA device (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    import tdsl as td
    from tdsl import ops
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    rounds = 3 if a.quick else 7
    name = torch.cuda.get_device_name()
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}"
    print(f"device: {name} ({arch}); PyTorch {torch.__version__}; TF32 off")

    def case_matmul(n, dtype):
        A = td.placeholder((n, n), dtype, name="A")
        B = td.placeholder((n, n), dtype, name="B")
        # fp16: tdsl accumulates and stores fp32 (its tensor-core default); PyTorch's fp16
        # matmul accumulates in fp32 and stores fp16
        C = ops.matmul(A, B, out_dtype="float32" if dtype == "float16" else None)
        x, y = (torch.randn(n, n, device=dev, dtype=getattr(torch, dtype)) for _ in range(2))
        return [A, B], C, [x, y], lambda x, y: x @ y, 2 * n ** 3

    def case_softmax():
        X = td.placeholder((4096, 1024), name="X")
        x = torch.randn(4096, 1024, device=dev)
        return [X], ops.softmax(X), [x], lambda x: torch.softmax(x, -1), None

    def case_conv():
        D = td.placeholder((1, 64, 56, 56), name="D")
        K = td.placeholder((64, 64, 3, 3), name="K")
        d, k = torch.randn(1, 64, 56, 56, device=dev), torch.randn(64, 64, 3, 3, device=dev)
        return ([D, K], ops.conv2d(D, K, padding=1), [d, k],
                lambda d, k: torch.nn.functional.conv2d(d, k, padding=1), 2 * 64 * 64 * 9 * 56 * 56)

    cases = {"matmul 1024 fp32": lambda: case_matmul(1024, "float32"),
             "matmul 4096 fp32": lambda: case_matmul(4096, "float32"),
             "matmul 4096 fp16": lambda: case_matmul(4096, "float16"),
             "softmax 4096x1024": case_softmax,
             "conv2d 64x56x56 3x3": case_conv}
    events = [torch.cuda.Event(enable_timing=True) for _ in range(2)]

    def torch_time(fn, args, number):
        fn(*args)
        events[0].record()
        for _ in range(number):
            fn(*args)
        events[1].record()
        torch.cuda.synchronize()
        return events[0].elapsed_time(events[1]) / 1e3 / number

    print(f"{'case':<22}{'tdsl ms':>10}{'torch ms':>10}{'tdsl/torch':>12}{'tdsl TFLOP/s':>14}")
    failed = False
    for label, make in cases.items():
        ins, out, targs, ref, flops = make()
        try:
            f = td.build(ops.schedule(out, "cuda"), [*ins, out], target=f"cuda -arch={arch}")
            res = torch.empty(tuple(int(d.value) for d in out.shape), device=dev,
                              dtype=getattr(torch, str(out.dtype)))
            f(*targs, res)
            torch.cuda.synchronize()
            want = ref(*targs)
            tol = 2e-2 if "fp16" in label else 1e-3
            if not torch.allclose(res.float(), want.float(), rtol=tol, atol=tol * 10):
                print(f"{label:<22} WRONG: max error {(res.float() - want.float()).abs().max():.3g}")
                failed = True
                continue
            timer = f.time_evaluator(number=10, repeat=1)
            ours, theirs = [], []
            for _ in range(rounds):          # interleaved
                ours.append(timer(*targs, res).mean)
                theirs.append(torch_time(ref, targs, 10))
            mo, mt = statistics.median(ours), statistics.median(theirs)
            tf = f"{flops / mo / 1e12:14.2f}" if flops else f"{'':>14}"
            print(f"{label:<22}{mo * 1e3:10.3f}{mt * 1e3:10.3f}{mo / mt:12.2f}{tf}")
        except Exception as e:  # noqa: BLE001 - report the case and go on
            print(f"{label:<22} FAILED: {type(e).__name__}: {e}".splitlines()[0])
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
