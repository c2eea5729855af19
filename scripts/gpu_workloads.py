"""tdsl's default CUDA kernels run once each on the GPU at small sizes, checked against NumPy.

    python scripts/gpu_workloads.py [--list]

The workload compute-sanitizer watches in ``scripts/gpu_check.sh`` (racecheck, memcheck,
synccheck): every default schedule family (matmul fp32 with tails, fp16 on tensor cores,
split-K dense, conv2d with tails, softmax, layernorm, attention causal), sizes small enough
that the instrumented run takes seconds.  Prints one line per workload and a last line
``gpu_workloads: N run, F failed``; exits 1 when one is wrong or fails, 2 without a GPU.
"""
from __future__ import annotations

import sys
from typing import Callable

import numpy as np


def workloads() -> dict[str, Callable[[np.random.Generator], tuple]]:
    """Name -> maker of (tdsl inputs, tdsl output, NumPy arrays, NumPy reference, tolerance)."""
    import tdsl as td
    from tdsl import ops

    def matmul(g):
        A, B = td.placeholder((200, 72), name="A"), td.placeholder((72, 136), name="B")
        a, b = g.standard_normal((200, 72), "float32"), g.standard_normal((72, 136), "float32")
        return [A, B], ops.matmul(A, B), [a, b], a @ b, 1e-4

    def matmul_fp16(g):
        A = td.placeholder((64, 64), "float16", name="A")
        B = td.placeholder((64, 64), "float16", name="B")
        a, b = (g.standard_normal((64, 64)).astype("float16") for _ in range(2))
        return ([A, B], ops.matmul(A, B, out_dtype="float32"), [a, b],
                a.astype("float32") @ b.astype("float32"), 1e-3)

    def dense_split_k(g):
        X, W = td.placeholder((16, 1024), name="X"), td.placeholder((64, 1024), name="W")
        x, w = g.standard_normal((16, 1024), "float32"), g.standard_normal((64, 1024), "float32")
        return [X, W], ops.dense(X, W), [x, w], x @ w.T, 1e-3

    def conv2d(g):
        D = td.placeholder((1, 16, 10, 10), name="D")
        K = td.placeholder((24, 16, 3, 3), name="K")
        d = g.standard_normal((1, 16, 10, 10), "float32")
        k = g.standard_normal((24, 16, 3, 3), "float32")
        p = np.pad(d, ((0, 0), (0, 0), (1, 1), (1, 1)))
        ref = np.zeros((1, 24, 10, 10), "float32")
        for dy in range(3):
            for dx in range(3):
                ref += np.einsum("nchw,oc->nohw", p[:, :, dy:dy + 10, dx:dx + 10], k[:, :, dy, dx])
        return [D, K], ops.conv2d(D, K, padding=1), [d, k], ref, 1e-3

    def softmax(g):
        X = td.placeholder((33, 130), name="X")
        x = g.standard_normal((33, 130), "float32")
        e = np.exp(x - x.max(-1, keepdims=True))
        return [X], ops.softmax(X), [x], e / e.sum(-1, keepdims=True), 1e-5

    def layernorm(g):
        X = td.placeholder((37, 96), name="X")
        G, B = td.placeholder((96,), name="g"), td.placeholder((96,), name="b")
        x = g.standard_normal((37, 96), "float32")
        gg, bb = g.standard_normal(96, "float32"), g.standard_normal(96, "float32")
        m, v = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        ref = (x - m) / np.sqrt(v + 1e-5) * gg + bb
        return [X, G, B], ops.layernorm(X, G, B), [x, gg, bb], ref, 1e-4

    def attention(g):
        shape = (1, 2, 70, 32)
        Q, K, V = (td.placeholder(shape, name=n) for n in "QKV")
        q, k, v = (g.standard_normal(shape, "float32") for _ in range(3))
        s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(32)
        s = np.where(np.tril(np.ones((70, 70), bool)), s, -np.inf)
        e = np.exp(s - s.max(-1, keepdims=True))
        return [Q, K, V], ops.attention(Q, K, V, causal=True), [q, k, v], \
            (e / e.sum(-1, keepdims=True)) @ v, 1e-4

    return {"matmul": matmul, "matmul_fp16": matmul_fp16, "dense_split_k": dense_split_k,
            "conv2d": conv2d, "softmax": softmax, "layernorm": layernorm,
            "attention_causal": attention}


def main(argv: "list[str] | None" = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--list" in argv:
        print(" ".join(workloads()))
        return 0
    import tdsl as td
    from tdsl import ops
    from tdsl.backends.cuda import driver
    ok, why = driver.device_status()
    if not ok:
        print(f"gpu_workloads: no GPU: {why}", file=sys.stderr)
        return 2
    arch = driver.get_driver().arch
    g = np.random.default_rng(26)
    failed = 0
    for name, make in workloads().items():
        try:
            ins, out, arrays, ref, tol = make(g)
            f = td.build(ops.schedule(out, "cuda"), [*ins, out], target=f"cuda -arch={arch}")
            res = np.full(tuple(int(d.value) for d in out.shape), np.nan, str(out.dtype))
            f(*arrays, res)
            err = float(np.abs(res.astype("float64") - ref).max())
            scale = max(float(np.abs(ref).max()), 1.0)
            good = err <= tol * scale
            failed += not good
            print(f"{name:<18} {'ok' if good else 'WRONG'}  max error {err:.3g}", flush=True)
        except Exception as e:  # noqa: BLE001 - report it and go on
            failed += 1
            print(f"{name:<18} FAILED: {type(e).__name__}: {e}".splitlines()[0], flush=True)
    print(f"gpu_workloads: {len(workloads())} run, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
