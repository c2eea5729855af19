"""The operator classes CNNs and transformers spend their time in, side by side with NumPy
and PyTorch (issue 23 point 7): pointwise (1x1) convolutions in NCHW, depthwise 3x3 convolutions
(MobileNetV2's, stride 1 and 2), 3x3 convolutions (ResNet-18's), batched matmuls with a
transposed operand, matmuls whose sizes do not divide the register tile, dense layers with
one input row (GEMV: the batch-1 MLP), global average pooling, column reductions and cumsum.

    python benchmarks/model_kernels.py [--threads 1] [--repeat 7] [--only conv1x1,dwconv,bmm]
                                       [--cpu-time]

Every contender runs at the same thread count (tdsl modules' ``set_num_threads``, NumPy's
BLAS through threadpoolctl, ``torch.set_num_threads``); rounds are interleaved and the
medians reported (``tdsl.testing.benchmark``).  tdsl runs its default schedule
(``ops.schedule``, untuned).  The machine may be shared: re-run surprising figures.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from typing import Any, Callable

import numpy as np

import tdsl as td
from tdsl import ops
from tdsl.testing.benchmark import benchmark


@dataclasses.dataclass
class Case:
    """One row: a tdsl build (placeholders -> output), NumPy and PyTorch equivalents."""

    group: str
    name: str
    build: Callable[[], tuple[list, Any]]        # () -> ([placeholders...], output tensor)
    shapes: list[tuple[int, ...]]
    numpy_fn: Callable[..., Any]
    torch_fn: Callable[..., Any]


def _rand(shape: tuple, rng: np.random.Generator) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def conv1x1(n: int, c: int, hw: int, co: int, stride: int = 1) -> Case:
    def build() -> tuple[list, Any]:
        x = td.placeholder((n, c, hw, hw), name="x")
        w = td.placeholder((co, c, 1, 1), name="w")
        b = td.placeholder((co,), name="b")
        return [x, w, b], ops.conv2d(x, w, stride=stride, bias=b, activation="relu")

    def np_fn(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
        xs = x[:, :, ::stride, ::stride] if stride > 1 else x
        nn, cc, h, ww = xs.shape
        y = np.matmul(w.reshape(co, c), xs.reshape(nn, cc, h * ww))
        y += b[:, None]
        return np.maximum(y, 0, out=y).reshape(nn, co, h, ww)

    def torch_fn(x: Any, w: Any, b: Any) -> Any:
        import torch
        return torch.relu(torch.nn.functional.conv2d(x, w, b, stride=stride))

    return Case("conv1x1", f"{n}x{c}x{hw}x{hw}->{co} s{stride}", build,
                [(n, c, hw, hw), (co, c, 1, 1), (co,)], np_fn, torch_fn)


def _conv_np(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int, pad: int,
             groups: int) -> np.ndarray:
    """NCHW convolution (bias, then ReLU) by shifted windows: one matmul per filter tap."""
    n, c, h, ww = x.shape
    co, cig, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (ww + 2 * pad - kw) // stride + 1
    out = np.zeros((n, co, oh, ow), np.float32)
    opg = co // groups
    for ry in range(kh):
        for rx in range(kw):
            win = xp[:, :, ry:ry + stride * oh:stride, rx:rx + stride * ow:stride]
            if groups == 1:
                out += np.einsum("oc,nchw->nohw", w[:, :, ry, rx], win)
            else:     # depthwise-style: output channel o reads input channel o // opg
                out += win[:, np.arange(co) // opg] * w[:, 0, ry, rx][None, :, None, None]
    out += b[None, :, None, None]
    return np.maximum(out, 0, out=out)


def conv3x3(n: int, c: int, hw: int, co: int, stride: int = 1, groups: int = 1) -> Case:
    """A 3x3 convolution, padding 1, bias and ReLU (``groups == c``: depthwise)."""
    cig = c // groups

    def build() -> tuple[list, Any]:
        x = td.placeholder((n, c, hw, hw), name="x")
        w = td.placeholder((co, cig, 3, 3), name="w")
        b = td.placeholder((co,), name="b")
        return [x, w, b], ops.conv2d(x, w, stride=stride, padding=1, groups=groups, bias=b,
                                     activation="relu")

    def torch_fn(x: Any, w: Any, b: Any) -> Any:
        import torch
        return torch.relu(torch.nn.functional.conv2d(x, w, b, stride=stride, padding=1,
                                                     groups=groups))

    group = "dwconv" if groups > 1 else "conv3x3"
    return Case(group, f"{n}x{c}x{hw}x{hw}->{co} s{stride}", build,
                [(n, c, hw, hw), (co, cig, 3, 3), (co,)],
                lambda x, w, b: _conv_np(x, w, b, stride, 1, groups), torch_fn)


def bmm(b: int, m: int, n: int, k: int, ta: bool, tb: bool) -> Case:
    sa = (b, k, m) if ta else (b, m, k)
    sb = (b, n, k) if tb else (b, k, n)

    def build() -> tuple[list, Any]:
        x = td.placeholder(sa, name="a")
        y = td.placeholder(sb, name="b")
        return [x, y], ops.batch_matmul(x, y, transpose_a=ta, transpose_b=tb)

    def np_fn(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.matmul(x.transpose(0, 2, 1) if ta else x, y.transpose(0, 2, 1) if tb else y)

    def torch_fn(x: Any, y: Any) -> Any:
        import torch
        return torch.bmm(x.transpose(1, 2) if ta else x, y.transpose(1, 2) if tb else y)

    tag = ("A^T" if ta else "A") + "." + ("B^T" if tb else "B")
    return Case("bmm", f"{tag} {b}x{m}x{n}x{k}", build, [sa, sb], np_fn, torch_fn)


def dense(m: int, k: int, n: int) -> Case:
    def build() -> tuple[list, Any]:
        x = td.placeholder((m, k), name="x")
        w = td.placeholder((n, k), name="w")
        bias = td.placeholder((n,), name="bias")
        return [x, w, bias], ops.dense(x, w, bias)

    def torch_fn(x: Any, w: Any, bias: Any) -> Any:
        import torch
        return torch.nn.functional.linear(x, w, bias)

    return Case("dense", f"{m}x{k} @ ({n}x{k})^T +b", build, [(m, k), (n, k), (n,)],
                lambda x, w, bias: x @ w.T + bias, torch_fn)


def matmul(m: int, k: int, n: int) -> Case:
    def build() -> tuple[list, Any]:
        a = td.placeholder((m, k), name="a")
        b = td.placeholder((k, n), name="b")
        return [a, b], ops.matmul(a, b)

    def torch_fn(a: Any, b: Any) -> Any:
        import torch
        return torch.mm(a, b)

    return Case("matmul", f"{m}x{k} @ {k}x{n}", build, [(m, k), (k, n)],
                lambda a, b: a @ b, torch_fn)


def reduce_case(group: str, shape: tuple, axis: Any, kind: str) -> Case:
    def build() -> tuple[list, Any]:
        x = td.placeholder(shape, name="x")
        f = ops.mean if kind == "mean" else ops.sum
        return [x], f(x, axis=axis)

    def np_fn(x: np.ndarray) -> np.ndarray:
        return x.mean(axis=axis) if kind == "mean" else x.sum(axis=axis)

    def torch_fn(x: Any) -> Any:
        return x.mean(dim=axis) if kind == "mean" else x.sum(dim=axis)

    dims = "x".join(map(str, shape))
    return Case(group, f"{kind} {dims} axis={axis}", build, [shape], np_fn, torch_fn)


def cumsum_case(shape: tuple) -> Case:
    """cumsum over axis 0, written as ``td.scan`` (ops has no cumsum: the scan's state row
    t is row t-1 plus x[t]; ``ops.schedule`` leaves a scan's loops as declared)."""
    def build() -> tuple[list, Any]:
        x = td.placeholder(shape, name="x")
        state = td.placeholder(shape, name="state")
        init = td.compute((1, shape[1]), lambda _, j: x[0, j], name="init")
        update = td.compute(shape, lambda t, j: state[t - 1, j] + x[t, j], name="update")
        return [x], td.scan(init, update, state)

    def torch_fn(x: Any) -> Any:
        import torch
        return torch.cumsum(x, dim=0)

    dims = "x".join(map(str, shape))
    return Case("cumsum", f"cumsum {dims} axis=0 (td.scan)", build, [shape],
                lambda x: np.cumsum(x, axis=0), torch_fn)


def cases() -> list[Case]:
    return [
        conv1x1(1, 64, 56, 256), conv1x1(8, 64, 56, 256), conv1x1(1, 512, 7, 2048),
        conv1x1(8, 512, 7, 2048), conv1x1(1, 256, 56, 512, stride=2),
        conv1x1(8, 1024, 14, 2048, stride=2), conv1x1(1, 144, 56, 24), conv1x1(1, 96, 14, 576),
        conv1x1(1, 320, 7, 1280),
        conv3x3(1, 96, 112, 96, 2, groups=96), conv3x3(1, 144, 56, 144, 2, groups=144),
        conv3x3(1, 576, 14, 576, 2, groups=576), conv3x3(1, 144, 56, 144, 1, groups=144),
        conv3x3(1, 32, 112, 32, 1, groups=32),
        conv3x3(1, 512, 7, 512), conv3x3(1, 256, 14, 256), conv3x3(1, 64, 56, 64),
        bmm(12, 128, 128, 64, False, True), bmm(12, 512, 512, 64, False, True),
        bmm(12, 128, 64, 128, False, False), bmm(12, 64, 128, 128, True, False),
        matmul(100, 300, 200),
        matmul(1, 4096, 4096), matmul(1, 1280, 1000),   # the graph's dense (weight pre-transposed)
        dense(1, 768, 3072), dense(1, 4096, 4096),
        dense(1, 1024, 4096), dense(1, 4096, 1024), dense(128, 768, 2304), dense(197, 768, 768),
        reduce_case("gap", (8, 512, 7, 7), (2, 3), "mean"),
        reduce_case("gap", (1, 1280, 7, 7), (2, 3), "mean"),
        reduce_case("colred", (4096, 1024), 0, "sum"),
        reduce_case("colred", (8, 512, 768), 1, "mean"),
        cumsum_case((4096, 1024)),
    ]


def cpu_medians(fns: list, repeat: int, min_sample_s: float = 0.02) -> list[float]:
    """Median CPU seconds per call of each function (one thread each, NumPy's BLAS limited
    to one), samples interleaved: on a shared machine CPU time is not inflated by the
    time the process waits for a core, which wall time is."""
    from threadpoolctl import threadpool_limits
    with threadpool_limits(limits=1, user_api="blas"):
        counts = []
        for fn in fns:
            fn()
            t0 = time.process_time()
            fn()
            counts.append(max(1, int(min_sample_s / max(time.process_time() - t0, 1e-6))))
        samples: list[list[float]] = [[] for _ in fns]
        for r in range(repeat):
            for i in [(r + q) % len(fns) for q in range(len(fns))]:
                t0 = time.process_time()
                for _ in range(counts[i]):
                    fns[i]()
                samples[i].append((time.process_time() - t0) / counts[i])
    return [statistics.median(x) for x in samples]


def run_case(case: Case, threads: int, repeat: int,
             cpu_time: bool = False) -> "dict[str, float] | None":
    import torch
    rng = np.random.default_rng(0)
    arrays = [_rand(s, rng) for s in case.shapes]
    try:
        phs, out = case.build()
    except ImportError as e:          # an operator this tdsl does not have
        print(f"  {case.group:8s} {case.name:34s} skipped: {e}", flush=True)
        return None
    s = ops.schedule(out, "llvm")
    f = td.build(s, phs + [out], target="llvm")
    res = np.empty([int(d) for d in out.shape], str(out.dtype))
    f(*arrays, res)
    want = case.numpy_fn(*arrays)
    err = float(np.max(np.abs(res - want)) / max(1e-30, float(np.max(np.abs(want)))))
    tens = [torch.from_numpy(a) for a in arrays]
    torch.set_num_threads(threads)
    if cpu_time:
        f.set_num_threads(1)
        t, n, p = (x * 1e3 for x in cpu_medians(
            [lambda: f(*arrays, res), lambda: case.numpy_fn(*arrays),
             lambda: case.torch_fn(*tens)], repeat))
    else:
        r = benchmark({"tdsl": (f, arrays + [res]), "numpy": lambda: case.numpy_fn(*arrays),
                       "torch": lambda: case.torch_fn(*tens)},
                      threads=threads, repeat=repeat, min_repeat_ms=15, warmup_ms=20,
                      settle_ms=100)
        t, n, p = (r.median(k) * 1e3 for k in ("tdsl", "numpy", "torch"))
    print(f"  {case.group:8s} {case.name:34s} {t:9.3f} {n:9.3f} {p:9.3f} "
          f"{n / t:7.2f}x {p / t:7.2f}x  err {err:.1e}", flush=True)
    return {"tdsl": t, "numpy": n, "torch": p}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--only", default="", help="comma-separated groups (default: all)")
    ap.add_argument("--cpu-time", action="store_true",
                    help="one thread: median CPU time per call instead of wall time (robust "
                         "on a machine shared with other jobs)")
    opt = ap.parse_args()
    if opt.cpu_time and opt.threads != 1:
        ap.error("--cpu-time measures one thread: use --threads 1")
    os.environ["TDSL_NUM_THREADS"] = str(opt.threads)
    groups = {g for g in opt.only.split(",") if g}
    what = "CPU time" if opt.cpu_time else "wall time, interleaved"
    print(f"{opt.threads} thread(s); medians ({what}) in ms; speedup = other / tdsl")
    print(f"  {'group':8s} {'case':34s} {'tdsl':>9s} {'numpy':>9s} {'torch':>9s} "
          f"{'vs np':>8s} {'vs torch':>8s}")
    for case in cases():
        if not groups or case.group in groups:
            run_case(case, opt.threads, opt.repeat, opt.cpu_time)


if __name__ == "__main__":
    sys.exit(main())
