"""tdsl's default CUDA kernels against PyTorch (cuBLAS / cuDNN) on the GPU at hand.

    python benchmarks/cuda_vs_torch.py [--quick] [--only SUBSTRING] [--sizes 1024 2048 ...]
                                       [--tune TRIALS]

Cases (``cases()``): matmul fp32 (TF32 off on both sides), fp16 and bf16 (tdsl accumulates
and stores fp32; PyTorch's half-precision matmul accumulates fp32 and stores the input
dtype) at 1024, 2048, 4096 and 8192; the 3x3 convolutions of ResNet-50's four stages
(batch 1), and at 64x56x56 batch 8, stride 2 (-> 128 channels) and a 1x1 (256 -> 1024 at
14x14), and fp16 3x3 ones (tensor cores; fp32 accumulation and output, cuDNN in fp16);
softmax and layernorm of 4096 x 1024; attention (1 x 12 heads x 1024 x 64, not causal and
causal).  Each case is checked first (against PyTorch in fp32 from the same
inputs); the contenders are then timed interleaved (CUDA events around a loop of launches:
tdsl's time_evaluator replays a captured CUDA graph) and the medians compared.  Prints one
row per case as it finishes (time per call, tdsl / PyTorch, tdsl TFLOP/s) and a last line
``cuda_vs_torch: N cases, W wrong, F failed, S skipped``.  Exits 2 without a GPU, 1 when a case is
wrong or fails.  bf16 operands go to tdsl as NumPy (ml_dtypes) arrays copied per call
(PyTorch does not export bf16 through ``__cuda_array_interface__``); the timing replays the
launches only, so the copies are not timed; without ml_dtypes the bf16 cases are skipped.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any, Callable

MATMUL_SIZES = (1024, 2048, 4096, 8192)


class Skip(Exception):
    """A case that cannot run here (its reason is printed; not a failure)."""

#: ResNet-50's 3x3 convolutions, one per stage: (channels, height = width).
RESNET_3X3 = ((64, 56), (128, 28), (256, 14), (512, 7))


def cases(torch: Any, dev: Any, sizes: tuple = MATMUL_SIZES) -> dict[str, Callable]:
    """Case name -> a maker returning (tdsl inputs, tdsl output, torch args, tdsl args,
    torch function timed, fp32 reference, tolerance, FLOPs or None)."""
    import tdsl as td
    from tdsl import ops

    def case_matmul(n: int, dtype: str):
        A = td.placeholder((n, n), dtype, name="A")
        B = td.placeholder((n, n), dtype, name="B")
        C = ops.matmul(A, B, out_dtype=None if dtype == "float32" else "float32")
        tdt = getattr(torch, dtype)
        x, y = (torch.randn(n, n, device=dev).to(tdt) for _ in range(2))
        args = [x, y]
        if dtype == "bfloat16":
            try:
                import ml_dtypes
            except ImportError:
                raise Skip("ml_dtypes is not installed (tdsl's bf16 NumPy arrays)") from None
            args = [t.float().cpu().numpy().astype(ml_dtypes.bfloat16) for t in (x, y)]
        tol = {"float32": 1e-3, "float16": 1e-2, "bfloat16": 1e-2}[dtype]
        return ([A, B], C, [x, y], args, lambda x, y: x @ y,
                lambda x, y: x.float() @ y.float(), tol, 2 * n ** 3)

    def case_conv(c: int, hw: int, n: int = 1, co: "int | None" = None, ks: int = 3,
                  stride: int = 1, dtype: str = "float32"):
        # fp16: tdsl's tensor-core implicit GEMM (fp32 accumulation and output) against
        # cuDNN in fp16 (timed) and in fp32 on the same inputs (checked)
        co = co or c
        pad = ks // 2
        D = td.placeholder((n, c, hw, hw), dtype, name="D")
        K = td.placeholder((co, c, ks, ks), dtype, name="K")
        tdt = getattr(torch, dtype)
        d = torch.randn(n, c, hw, hw, device=dev).to(tdt)
        k = torch.randn(co, c, ks, ks, device=dev).to(tdt)
        conv = torch.nn.functional.conv2d
        fn = lambda d, k: conv(d, k, stride=stride, padding=pad)  # noqa: E731
        ref = lambda d, k: conv(d.float(), k.float(), stride=stride, padding=pad)  # noqa: E731
        ohw = (hw + 2 * pad - ks) // stride + 1
        half = dtype != "float32"
        C = ops.conv2d(D, K, stride=stride, padding=pad, out_dtype="float32" if half else None)
        return ([D, K], C, [d, k], [d, k], fn, ref, 1e-2 if half else 1e-3,
                2 * n * co * c * ks * ks * ohw * ohw)

    def case_softmax():
        X = td.placeholder((4096, 1024), name="X")
        x = torch.randn(4096, 1024, device=dev)
        fn = lambda x: torch.softmax(x, -1)  # noqa: E731
        return [X], ops.softmax(X), [x], [x], fn, fn, 1e-4, None

    def case_layernorm():
        X = td.placeholder((4096, 1024), name="X")
        g, b = td.placeholder((1024,), name="g"), td.placeholder((1024,), name="b")
        x, gg, bb = (torch.randn(*s, device=dev) for s in ((4096, 1024), (1024,), (1024,)))
        fn = lambda x, g, b: torch.nn.functional.layer_norm(x, (1024,), g, b)  # noqa: E731
        return [X, g, b], ops.layernorm(X, g, b), [x, gg, bb], [x, gg, bb], fn, fn, 1e-3, None

    def case_attention(causal: bool, dtype: str = "float32"):
        # fp16: the tensor-core kernel (backends/cuda/tc_attention.py), against SDPA in fp16
        # (timed) and in fp32 on the same inputs (checked)
        shape = (1, 12, 1024, 64)
        Q, K, V = (td.placeholder(shape, dtype, name=n) for n in "QKV")
        q, k, v = (torch.randn(*shape, device=dev).to(getattr(torch, dtype)) for _ in range(3))
        sdpa = torch.nn.functional.scaled_dot_product_attention
        fn = lambda q, k, v: sdpa(q, k, v, is_causal=causal)  # noqa: E731
        ref = lambda q, k, v: sdpa(q.float(), k.float(), v.float(),  # noqa: E731
                                   is_causal=causal)
        flops = 4 * 12 * 1024 * 1024 * 64 // (2 if causal else 1)
        return ([Q, K, V], ops.attention(Q, K, V, causal=causal, target="cuda"), [q, k, v],
                [q, k, v], fn, ref,
                1e-3 if dtype == "float32" else 2e-2, flops)

    out: dict[str, Callable] = {}
    for dtype, short in (("float32", "fp32"), ("float16", "fp16"), ("bfloat16", "bf16")):
        for n in sizes:
            out[f"matmul {n} {short}"] = lambda n=n, d=dtype: case_matmul(n, d)
    for c, hw in RESNET_3X3:
        out[f"conv2d {c}x{hw}x{hw} 3x3"] = lambda c=c, hw=hw: case_conv(c, hw)
    # the implicit GEMM's other paths: batch 8 (no split-K, 64 channels x 64 pixels a
    # block), stride 2, 1x1
    out["conv2d 8x64x56x56 3x3"] = lambda: case_conv(64, 56, n=8)
    out["conv2d 64x56x56 3x3 s2 ->128"] = lambda: case_conv(64, 56, co=128, stride=2)
    out["conv2d 256x14x14 1x1 ->1024"] = lambda: case_conv(256, 14, co=1024, ks=1)
    # fp16 on tensor cores (the implicit GEMM of ops/schedules/cuda_tc_conv.py)
    out["conv2d 64x56x56 3x3 fp16"] = lambda: case_conv(64, 56, dtype="float16")
    out["conv2d 8x64x56x56 3x3 fp16"] = lambda: case_conv(64, 56, n=8, dtype="float16")
    out["conv2d 256x14x14 3x3 fp16"] = lambda: case_conv(256, 14, dtype="float16")
    out["softmax 4096x1024"] = case_softmax
    out["layernorm 4096x1024"] = case_layernorm
    out["attention 12x1024x64"] = lambda: case_attention(False)
    out["attention causal"] = lambda: case_attention(True)
    out["attention fp16"] = lambda: case_attention(False, "float16")
    out["attention causal fp16"] = lambda: case_attention(True, "float16")
    return out


def tuned_kernel(td: Any, ins: list, out: Any, arch: str, trials: int, res: Any,
                 call_args: list, want: Any, tol: float, torch: Any) -> "Callable | None":
    """Tune the case's computation on this GPU for ``trials`` trials; check the tuned kernel
    against the fp32 reference like the default one, and return a timer of it (seconds per
    call), or None (printed why) where tuning found nothing or the result is wrong."""
    from tdsl.autotune import auto_schedule
    try:
        import xgboost  # noqa: F401  (the GPU machine may lack it)
        tuner = "xgb"
    except ImportError:
        tuner = "random"
    try:
        s, args = auto_schedule([*ins, out], target=f"cuda -arch={arch}", trials=trials,
                                tuner=tuner)
        f = td.build(s, args, target=f"cuda -arch={arch}")
        f(*call_args)
        torch.cuda.synchronize()
        if not isinstance(call_args[-1], torch.Tensor):     # NumPy operands (bf16)
            res.copy_(torch.from_numpy(call_args[-1]))
        err = (res.float() - want).abs().max().item()
        if not err <= tol * max(want.abs().max().item(), 1.0):
            print(f"  tuned kernel WRONG: max error {err:.3g}", flush=True)
            return None
    except Exception as e:  # noqa: BLE001 - report and go on with the default's row
        print(f"  tuning FAILED: {type(e).__name__}: {e}".splitlines()[0], flush=True)
        return None
    timer = f.time_evaluator(number=10, repeat=1)
    return lambda: timer(*call_args).mean


def main(argv: "list[str] | None" = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer repeats")
    p.add_argument("--only", default="", help="run the cases whose name contains this")
    p.add_argument("--sizes", type=int, nargs="*", default=list(MATMUL_SIZES),
                   help="matmul sizes")
    p.add_argument("--tune", type=int, default=0, metavar="TRIALS",
                   help="also tune each case with auto_schedule(target='cuda') for TRIALS "
                        "trials (XGBoost tuner where xgboost imports, else random) and time "
                        "the tuned kernel in the same rounds ('tuned ms' column)")
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
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}"
    print(f"device: {torch.cuda.get_device_name()} ({arch}); PyTorch {torch.__version__}; "
          f"TF32 off", flush=True)
    events = [torch.cuda.Event(enable_timing=True) for _ in range(2)]

    def torch_time(fn, args, number):
        fn(*args)
        events[0].record()
        for _ in range(number):
            fn(*args)
        events[1].record()
        torch.cuda.synchronize()
        return events[0].elapsed_time(events[1]) / 1e3 / number

    tuned_head = f"{'tuned ms':>10}{'tuned/torch':>12}" if a.tune else ""
    print(f"{'case':<24}{'tdsl ms':>10}{'torch ms':>10}{'tdsl/torch':>12}{'tdsl TFLOP/s':>14}"
          f"{tuned_head}", flush=True)
    wrong = failed = ran = skipped = 0
    for label, make in cases(torch, dev, tuple(a.sizes)).items():
        if a.only and a.only not in label:
            continue
        ran += 1
        try:
            ins, out, targs, ours_args, timed, ref, tol, flops = make()
            f = td.build(ops.schedule(out, "cuda"), [*ins, out], target=f"cuda -arch={arch}")
            shape = tuple(int(d.value) for d in out.shape)
            res = torch.empty(shape, device=dev, dtype=getattr(torch, str(out.dtype)))
            if any(not isinstance(x, torch.Tensor) for x in ours_args):   # NumPy operands
                import numpy as np
                host = np.empty(shape, str(out.dtype))
                f(*ours_args, host)
                res.copy_(torch.from_numpy(host))
                call_args = [*ours_args, host]
            else:
                f(*ours_args, res)
                call_args = [*ours_args, res]
            torch.cuda.synchronize()
            want = ref(*targs).float()
            err = (res.float() - want).abs().max().item()
            scale = want.abs().max().item()
            if not err <= tol * max(scale, 1.0):
                print(f"{label:<24} WRONG: max error {err:.3g} (max |ref| {scale:.3g})",
                      flush=True)
                wrong += 1
                continue
            timer = f.time_evaluator(number=10, repeat=1)
            tuned_timer = tuned_kernel(td, ins, out, arch, a.tune, res, call_args, want, tol,
                                       torch) if a.tune else None
            ours, theirs, tuned = [], [], []
            for _ in range(rounds):          # interleaved
                ours.append(timer(*call_args).mean)
                theirs.append(torch_time(timed, targs, 10))
                if tuned_timer is not None:
                    tuned.append(tuned_timer())
            mo, mt = statistics.median(ours), statistics.median(theirs)
            tf = f"{flops / mo / 1e12:14.2f}" if flops else f"{'':>14}"
            tcol = ""
            if a.tune:
                mu = statistics.median(tuned) if tuned else None
                tcol = (f"{mu * 1e3:10.3f}{mu / mt:12.2f}" if mu is not None
                        else f"{'n/a':>10}{'':>12}")
            print(f"{label:<24}{mo * 1e3:10.3f}{mt * 1e3:10.3f}{mo / mt:12.2f}{tf}{tcol}",
                  flush=True)
        except Skip as e:
            print(f"{label:<24} SKIPPED: {e}", flush=True)
            skipped += 1
        except Exception as e:  # noqa: BLE001 - report the case and go on
            print(f"{label:<24} FAILED: {type(e).__name__}: {e}".splitlines()[0], flush=True)
            failed += 1
        finally:
            torch.cuda.empty_cache()
    print(f"cuda_vs_torch: {ran} cases, {wrong} wrong, {failed} failed, {skipped} skipped",
          flush=True)
    return 1 if wrong or failed else 0


if __name__ == "__main__":
    sys.exit(main())
