#!/usr/bin/env python
"""Side-by-side benchmarks: tdsl's default operator schedules vs NumPy, PyTorch and TVM.

    python benchmarks/run.py [--quick] [--threads N] [--rounds R] [--out PATH] [--only NAME ...]

Every contender of a benchmark runs in the same process, in interleaved rounds (one sample
of each contender per round), with the same thread count; the table shows medians and the
ratio peer time / tdsl time (> 1: tdsl is faster).  Results also go to
benchmarks/results/<timestamp>.json for later comparison.  See benchmarks/README.md.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from timing import SETTLE_S, interleaved, rest

# OpenBLAS settings some machines export (a forced core type, a small L2 size) slow NumPy's
# kernels down; peers must run at their best, so the script re-executes itself without them.
_STRIP_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
_REEXEC_FLAG = "TDSL_BENCH_REEXEC"


def _reexec_without_blas_overrides() -> None:
    found = [k for k in _STRIP_ENV if k in os.environ]
    if found and not os.environ.get(_REEXEC_FLAG):
        env = {k: v for k, v in os.environ.items() if k not in _STRIP_ENV}
        env[_REEXEC_FLAG] = ",".join(f"{k}={os.environ[k]}" for k in found)
        os.execve(sys.executable, [sys.executable, *sys.argv], env)


ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results"


# ---- timing ------------------------------------------------------------------------------------
def measure(contenders: dict[str, Callable[[], Any]], rounds: int, min_sample_s: float
            ) -> dict[str, dict]:
    """Interleaved rounds (``timing.interleaved``): each round takes one sample (``number``
    calls, after a rest that lets the previous contender's threads go idle) of every
    contender."""
    return interleaved(contenders, rounds, min_sample_s)


# ---- environment --------------------------------------------------------------------------------
def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(threads: int) -> dict:
    import numpy as np
    env: dict[str, Any] = {
        "python": platform.python_version(), "numpy": np.__version__, "cpu": _cpu_model(),
        "cpus_available": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "threads": threads, "loadavg_start": list(os.getloadavg()),
        "removed_env": os.environ.get(_REEXEC_FLAG, ""),
    }
    try:
        from threadpoolctl import threadpool_info
        env["blas"] = [{k: d.get(k) for k in ("internal_api", "version", "architecture",
                                              "num_threads", "threading_layer")}
                       for d in threadpool_info() if d.get("user_api") == "blas"]
    except ImportError:
        env["blas"] = "threadpoolctl not installed: BLAS kernel unknown"
    try:
        from tdsl.backends.llvm.machine import host_info
        env["llvm_host"] = {"triple": host_info()[0], "cpu": host_info()[1]}
    except Exception as e:  # pragma: no cover - reported, not fatal
        env["llvm_host"] = f"unavailable: {e}"
    return env


def limit_threads(threads: int) -> Any:
    """Give NumPy's BLAS and PyTorch ``threads`` threads; returns what keeps the limit alive."""
    keep = None
    import numpy  # noqa: F401  (threadpoolctl only sees BLAS libraries already loaded)
    _torch()
    try:
        from threadpoolctl import threadpool_limits
        keep = threadpool_limits(threads)
    except ImportError:
        pass
    try:
        import torch
        torch.set_num_threads(threads)
    except ImportError:
        pass
    return keep


def _torch():
    try:
        import torch
        return torch
    except ImportError:
        return None


def _tvm():
    try:
        import tvm  # noqa: F401
        return tvm
    except Exception:
        return None


# ---- the benchmarks -------------------------------------------------------------------------------
class Suite:
    def __init__(self, args: argparse.Namespace):
        import numpy as np
        import tdsl as td
        from tdsl import ops
        self.np, self.td, self.ops = np, td, ops
        self.args = args
        self.threads = args.threads
        self.target = f"llvm -num-threads={self.threads}"
        self.rounds = args.rounds
        self.min_sample = 0.02 if args.quick else 0.05
        self.rng = np.random.default_rng(0)
        self.rows: list[dict] = []
        self.extra: dict[str, Any] = {}

    # helpers
    def rand(self, *shape: int) -> Any:
        return self.rng.standard_normal(shape, dtype=self.np.float32)

    def build(self, outs: list, args: list) -> Any:
        s = self.ops.schedule(outs, self.target)
        return self.td.build(s, args, target=self.target)

    @staticmethod
    def round_ratio(res: dict, name: str) -> float:
        """Median over rounds of (peer sample / tdsl sample): samples of one round are taken
        back to back, so this cancels slow swings of the machine's load."""
        return statistics.median(p / q for p, q in zip(res[name]["samples_s"], res["tdsl"]["samples_s"]))

    def record(self, bench: str, res: dict, work: float, unit: str, notes: "dict | None" = None) -> None:
        base = res["tdsl"]["median_s"]
        for name, r in res.items():
            row = {"bench": bench, "contender": name, "median_s": r["median_s"], "min_s": r["min_s"],
                   "samples_s": r["samples_s"], "rate": work / r["median_s"], "unit": unit,
                   "peer_over_tdsl": r["median_s"] / base,
                   "peer_over_tdsl_per_round": self.round_ratio(res, name)}
            if notes and name in notes:
                row["note"] = notes[name]
            self.rows.append(row)
        self.print_block(bench, res, work, unit, notes or {})

    def print_block(self, bench: str, res: dict, work: float, unit: str, notes: dict) -> None:
        print(f"\n{bench}")
        for name, r in res.items():
            ratio = self.round_ratio(res, name)
            tag = "" if name == "tdsl" else f"{ratio:6.2f}x"
            note = f"  ({notes[name]})" if name in notes else ""
            print(f"  {name:22s} {r['median_s'] * 1e3:9.3f} ms  {work / r['median_s']:8.1f} {unit:7s} "
                  f"{tag:>8s}{note}")
        sys.stdout.flush()

    # matmul
    def matmul(self, n: int) -> None:
        np, td, ops = self.np, self.td, self.ops
        A = td.placeholder((n, n), name="A")
        B = td.placeholder((n, n), name="B")
        C = ops.matmul(A, B)
        f = self.build([C], [A, B, C])
        a, b = self.rand(n, n), self.rand(n, n)
        c, cn = np.empty((n, n), np.float32), np.empty((n, n), np.float32)
        f(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3 * n ** 0.5)
        cont = {"tdsl": lambda: f(a, b, c), "numpy": lambda: np.matmul(a, b, out=cn)}
        torch = _torch()
        if torch is not None:
            ta, tb, tc = torch.from_numpy(a), torch.from_numpy(b), torch.empty(n, n)
            cont["torch"] = lambda: torch.mm(ta, tb, out=tc)
        notes = {}
        tvm_f = self.tvm_matmul(n, a, b)
        if isinstance(tvm_f, str):
            notes["tvm"] = tvm_f
        elif tvm_f is not None:
            cont["tvm"] = tvm_f
        res = measure(cont, self.rounds, self.min_sample)
        self.record(f"matmul {n}x{n}x{n} fp32", res, 2.0 * n ** 3 / 1e9, "GFLOP/s",
                    {k: v for k, v in notes.items() if k in res})
        for k, v in notes.items():
            if k not in res:
                print(f"  {k:22s} skipped: {v}")

    def tvm_matmul(self, n: int, a: Any, b: Any) -> Any:
        """TVM's matmul with a hand schedule (packed B, tiles, vectorize, parallel), or None
        when apache-tvm is not installed, or a string saying why it could not run."""
        tvm = _tvm()
        if tvm is None or self.args.no_tvm:
            return None
        if str(ROOT) not in sys.path:
            sys.path.insert(0, str(ROOT))
        from tvm_peer import tvm_matmul  # type: ignore
        try:
            return tvm_matmul(n, a, b, self.threads)
        except Exception as e:   # TVM's API moves between releases: report, do not fail
            return f"failed: {type(e).__name__}: {str(e).splitlines()[0][:100]}"

    # conv2d
    def conv2d(self) -> None:
        np, td, ops = self.np, self.td, self.ops
        N, C, H, W, K = 1, 64, 56, 56, 64
        D = td.placeholder((N, C, H, W), name="D")
        Wt = td.placeholder((K, C, 3, 3), name="W")
        O = ops.conv2d(D, Wt, padding=1)
        f = self.build([O], [D, Wt, O])
        d, w = self.rand(N, C, H, W), self.rand(K, C, 3, 3)
        o = np.empty((N, K, H, W), np.float32)
        f(d, w, o)
        ref = _im2col_conv(np, d, w)
        np.testing.assert_allclose(o, ref, rtol=1e-3, atol=1e-2)
        cont = {"tdsl": lambda: f(d, w, o)}
        torch = _torch()
        if torch is not None:
            tdd, tw = torch.from_numpy(d), torch.from_numpy(w)
            cont["torch"] = lambda: torch.nn.functional.conv2d(tdd, tw, padding=1)
        cont["numpy im2col"] = lambda: _im2col_conv(np, d, w)
        res = measure(cont, self.rounds, self.min_sample)
        self.record("conv2d NCHW 1x64x56x56, 64x3x3, pad 1", res, 2.0 * N * K * C * 9 * H * W / 1e9,
                    "GFLOP/s")

    # softmax
    def softmax(self) -> None:
        np, td, ops = self.np, self.td, self.ops
        n, m = 4096, 1024
        X = td.placeholder((n, m), name="X")
        Y = ops.softmax(X)
        f = self.build([Y], [X, Y])
        x = self.rand(n, m)
        y = np.empty_like(x)
        f(x, y)
        e = np.exp(x - x.max(1, keepdims=True))
        np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-4, atol=1e-6)

        def np_softmax() -> Any:
            e = np.exp(x - x.max(1, keepdims=True))
            e /= e.sum(1, keepdims=True)
            return e
        cont = {"tdsl": lambda: f(x, y)}
        torch = _torch()
        if torch is not None:
            tx = torch.from_numpy(x)
            cont["torch"] = lambda: torch.softmax(tx, -1)
        cont["numpy"] = np_softmax
        res = measure(cont, self.rounds, self.min_sample)
        self.record(f"softmax rows {n}x{m} fp32", res, 2.0 * n * m * 4 / 1e9, "GB/s",
                    {"tdsl": "GB/s: one read + one write of the matrix"})

    # fused elementwise vs bandwidth
    def elementwise(self) -> None:
        np, td, ops = self.np, self.td, self.ops
        n = 1 << 24
        A, B, C, D = (td.placeholder((n,), name=nm) for nm in "ABCD")
        E = ops.add(D, ops.multiply(ops.add(A, B), C))
        f = self.build([E], [A, B, C, D, E])
        a, b, c, d = (self.rand(n) for _ in range(4))
        e, en = np.empty(n, np.float32), np.empty(n, np.float32)
        f(a, b, c, d, e)
        np.testing.assert_allclose(e, d + (a + b) * c, rtol=1e-5, atol=1e-5)
        # bandwidth probes, same thread count: a tdsl copy and triad, NumPy's copy (1 thread)
        X = td.placeholder((n,), name="X")
        Y = ops.identity(X)
        fcopy = self.build([Y], [X, Y])
        P, Q = td.placeholder((n,), name="P"), td.placeholder((n,), name="Q")
        R = ops.add(P, ops.multiply(Q, 3.0))
        ftriad = self.build([R], [P, Q, R])
        cont = {"tdsl": lambda: f(a, b, c, d, e),
                "numpy (unfused)": lambda: np.add(d, (a + b) * c, out=en)}
        torch = _torch()
        if torch is not None:
            ta, tb, tc, tdd, te = (torch.from_numpy(v) for v in (a, b, c, d, en))
            cont["torch eager"] = lambda: torch.add(tdd, (ta + tb) * tc, out=te)
        cont["bw: tdsl copy"] = lambda: fcopy(a, e)
        cont["bw: tdsl triad"] = lambda: ftriad(a, b, e)
        cont["bw: numpy copy"] = lambda: np.copyto(en, a)
        res = measure(cont, self.rounds, self.min_sample)
        nbytes = {"bw: tdsl copy": 2 * 4 * n, "bw: tdsl triad": 3 * 4 * n, "bw: numpy copy": 2 * 4 * n}
        bw = {k: nbytes[k] / res[k]["median_s"] / 1e9 for k in nbytes}
        best = max(bw.values())
        fused_bw = 5 * 4 * n / res["tdsl"]["median_s"] / 1e9
        self.extra["bandwidth_GBps"] = {**bw, "best": best}
        self.extra["fused_elementwise"] = {"effective_GBps": fused_bw, "fraction_of_best": fused_bw / best}
        # rate column: bytes the expression must move (4 reads + 1 write), for every contender
        work = 5 * 4 * n / 1e9
        rows = {k: v for k, v in res.items() if not k.startswith("bw:")}
        self.record("fused E = D + (A + B) * C, 2^24 fp32", rows, work, "GB/s",
                    {"tdsl": f"{fused_bw / best:.0%} of the best measured bandwidth"})
        print("  memory bandwidth probes: " + ", ".join(f"{k[4:]} {v:.1f} GB/s" for k, v in bw.items()))
        for k in nbytes:
            self.rows.append({"bench": "memory bandwidth", "contender": k[4:],
                              "median_s": res[k]["median_s"], "min_s": res[k]["min_s"],
                              "samples_s": res[k]["samples_s"], "rate": bw[k], "unit": "GB/s"})

    # every operator's default schedule vs PyTorch / NumPy
    def operators(self) -> None:
        np, ops = self.np, self.ops
        torch = _torch()
        F = torch.nn.functional if torch is not None else None
        cases = []

        def case(name, outs_fn, shapes, torch_fn=None, np_fn=None):
            cases.append((name, outs_fn, shapes, torch_fn, np_fn))

        case("dense+bias+gelu 512x1024 @ 1024x1024", lambda X, W, b: ops.dense(X, W, b, "gelu"),
             [(512, 1024), (1024, 1024), (1024,)],
             lambda x, w, b: F.gelu(F.linear(x, w, b)), None)
        case("batch_matmul 16x256x64 @ 16x64x256", ops.batch_matmul, [(16, 256, 64), (16, 64, 256)],
             lambda a, b: torch.bmm(a, b), lambda a, b: np.matmul(a, b))
        case("conv2d NHWC 1x56x56x64, 3x3x64x64", lambda d, w: ops.conv2d(d, w, padding=1, layout="NHWC"),
             [(1, 56, 56, 64), (3, 3, 64, 64)], None, None)
        case("conv2d depthwise 1x128x56x56, 3x3", lambda d, w: ops.conv2d(d, w, padding=1, groups=128),
             [(1, 128, 56, 56), (128, 1, 3, 3)], lambda d, w: F.conv2d(d, w, padding=1, groups=128), None)
        case("conv2d 3x3 stride 2 1x64x56x56 -> 128", lambda d, w: ops.conv2d(d, w, stride=2, padding=1),
             [(1, 64, 56, 56), (128, 64, 3, 3)], lambda d, w: F.conv2d(d, w, stride=2, padding=1), None)
        case("max_pool2d 3x3/2 1x64x112x112", lambda d: ops.max_pool2d(d, 3, 2, 1), [(1, 64, 112, 112)],
             lambda d: F.max_pool2d(d, 3, 2, 1), None)
        case("avg_pool2d 2x2 1x64x112x112", lambda d: ops.avg_pool2d(d, 2), [(1, 64, 112, 112)],
             lambda d: F.avg_pool2d(d, 2), None)
        case("layernorm 4096x1024", lambda x, g, b: ops.layernorm(x, g, b), [(4096, 1024), (1024,), (1024,)],
             lambda x, g, b: F.layer_norm(x, (1024,), g, b), None)
        case("rmsnorm 4096x1024", lambda x, g: ops.rmsnorm(x, g), [(4096, 1024), (1024,)],
             lambda x, g: F.rms_norm(x, (1024,), g, eps=1e-5), None)
        case("log_softmax 4096x1024", ops.log_softmax, [(4096, 1024)],
             lambda x: torch.log_softmax(x, -1), None)
        case("sum rows 4096x1024", lambda x: ops.sum(x, axis=1), [(4096, 1024)],
             lambda x: x.sum(1), lambda x: x.sum(1))
        case("sum cols 4096x1024", lambda x: ops.sum(x, axis=0), [(4096, 1024)],
             lambda x: x.sum(0), lambda x: x.sum(0))
        cases.extend(self.argmax_cases())
        case("transpose 4096x1024", ops.transpose, [(4096, 1024)],
             lambda x: x.t().contiguous(), lambda x: np.ascontiguousarray(x.T))
        case("broadcast add 4096x1024 + 1024", ops.add, [(4096, 1024), (1024,)],
             lambda x, y: x + y, lambda x, y: x + y)
        print("\noperators: default schedules (peer time / tdsl time per column)")
        self.run_cases(cases)

    def argmax_cases(self) -> list:
        """Arg-reductions of a 4096x1024 float32 matrix: along rows (independent chains of
        vector lanes), along columns (chunks of several vectors), and over everything."""
        ops = self.ops
        return [
            ("argmax rows 4096x1024", lambda x: ops.argmax(x, axis=1), [(4096, 1024)],
             lambda x: x.argmax(1), lambda x: x.argmax(1)),
            ("argmin rows 4096x1024", lambda x: ops.argmin(x, axis=1), [(4096, 1024)],
             lambda x: x.argmin(1), lambda x: x.argmin(1)),
            ("argmax cols 4096x1024", lambda x: ops.argmax(x, axis=0), [(4096, 1024)],
             lambda x: x.argmax(0), lambda x: x.argmax(0)),
            ("argmax all 4096x1024", lambda x: ops.argmax(x), [(4096, 1024)],
             lambda x: x.argmax(), lambda x: x.argmax()),
        ]

    def argmax(self) -> None:
        print("\narg-reductions: default schedules (peer time / tdsl time per column)")
        self.run_cases(self.argmax_cases())

    def run_cases(self, cases: list) -> None:
        """Each (name, outputs_fn, input shapes, torch_fn, numpy_fn): tdsl's default schedule
        against the peers, interleaved."""
        np, td = self.np, self.td
        torch = _torch()
        T = (lambda *xs: [torch.from_numpy(x) for x in xs]) if torch is not None else None
        for name, outs_fn, shapes, torch_fn, np_fn in cases:
            phs = [td.placeholder(s, name=f"in{i}") for i, s in enumerate(shapes)]
            out = outs_fn(*phs)
            f = self.build([out], phs + [out])
            arrs = [self.rand(*s) for s in shapes]
            res_arr = np.empty([int(d.value) for d in out.shape], out.dtype.numpy)
            f(*arrs, res_arr)
            cont = {"tdsl": (lambda f=f, arrs=arrs, r=res_arr: f(*arrs, r))}
            if torch is not None and torch_fn is not None:
                targs = T(*arrs)
                cont["torch"] = (lambda fn=torch_fn, a=targs: fn(*a))
            if np_fn is not None:
                cont["numpy"] = (lambda fn=np_fn, a=arrs: fn(*a))
            res = measure(cont, max(3, self.rounds // 2), self.min_sample)
            cols = "  ".join(f"{k} {self.round_ratio(res, k):5.2f}x" for k in res if k != "tdsl")
            print(f"  {name:40s} tdsl {res['tdsl']['median_s'] * 1e3:8.3f} ms   {cols}")
            for k, r in res.items():
                self.rows.append({"bench": f"op: {name}", "contender": k, "median_s": r["median_s"],
                                  "min_s": r["min_s"], "samples_s": r["samples_s"],
                                  "peer_over_tdsl_per_round": self.round_ratio(res, k)})
            sys.stdout.flush()

    # ---- issue 12: kernels where users hit walls --------------------------------------------------
    def peak_bandwidth(self) -> float:
        """The machine's read bandwidth (GB/s) at this thread count, measured once: the best
        of a NumPy sum (read), a NumPy copy (read + write) and a tdsl row-sum kernel over
        256 MiB -- far larger than any cache."""
        key = f"peak_GBps_{self.threads}t"
        if key in self.extra:
            return self.extra[key]["best"]
        np, td, ops = self.np, self.td, self.ops
        rows, cols = 16384, 4096
        big = self.rand(rows, cols)
        dst = np.empty_like(big)
        X = td.placeholder((rows, cols), name="X")
        S = ops.sum(X, axis=1)
        fsum = self.build([S], [X, S])
        out = np.empty(rows, np.float32)
        cont = {"numpy sum": lambda: big.sum(), "numpy copy": lambda: np.copyto(dst, big),
                "tdsl row sums": lambda: fsum(big, out)}
        res = measure(cont, max(3, self.rounds // 2), self.min_sample)
        nbytes = {"numpy sum": big.nbytes, "numpy copy": 2 * big.nbytes, "tdsl row sums": big.nbytes}
        bw = {k: nbytes[k] / res[k]["median_s"] / 1e9 for k in cont}
        best = max(bw.values())
        self.extra[key] = {**bw, "best": best}
        print(f"\nmemory bandwidth probes ({self.threads} threads, 256 MiB): "
              + ", ".join(f"{k} {v:.1f} GB/s" for k, v in bw.items()))
        del big, dst
        return best

    def bandwidth_line(self, bench: str, res: dict, nbytes: float) -> None:
        """GB/s each contender moves (``nbytes`` per call) against the measured peak."""
        peak = self.peak_bandwidth()
        parts = []
        for k, r in res.items():
            gbs = nbytes / r["median_s"] / 1e9
            parts.append(f"{k} {gbs:.1f} GB/s ({gbs / peak:.0%})")
            self.rows.append({"bench": f"bandwidth: {bench}", "contender": k, "rate": gbs,
                              "unit": "GB/s", "fraction_of_peak": gbs / peak, "peak_GBps": peak})
        print(f"  bandwidth vs measured peak {peak:.1f} GB/s: " + ", ".join(parts))

    def dense(self, m: int, k: int = 4096, n: int = 4096, bias_gelu: bool = False) -> None:
        np, td, ops = self.np, self.td, self.ops
        X = td.placeholder((m, k), name="X")
        Wt = td.placeholder((n, k), name="W")
        b = td.placeholder((n,), name="b")
        Y = ops.dense(X, Wt, b, activation="gelu") if bias_gelu else ops.dense(X, Wt)
        ins = [X, Wt, b] if bias_gelu else [X, Wt]
        f = self.build([Y], ins + [Y])
        x, w, bb = self.rand(m, k), self.rand(n, k), self.rand(n)
        y, yn = np.empty((m, n), np.float32), np.empty((m, n), np.float32)
        args = [x, w, bb] if bias_gelu else [x, w]
        f(*args, y)
        torch = _torch()
        cont = {"tdsl": lambda: f(*args, y)}
        if bias_gelu:
            if torch is not None:
                F = torch.nn.functional
                tx, tw, tb = (torch.from_numpy(v) for v in (x, w, bb))
                np.testing.assert_allclose(y, F.gelu(F.linear(tx, tw, tb)).numpy(), rtol=1e-3, atol=1e-3)
                cont["torch"] = lambda: F.gelu(F.linear(tx, tw, tb))
            cont["numpy (no gelu)"] = lambda: np.add(np.matmul(x, w.T, out=yn), bb, out=yn)
        else:
            np.testing.assert_allclose(y, x @ w.T, rtol=1e-3, atol=1e-3 * k ** 0.5)
            cont["numpy"] = lambda: np.matmul(x, w.T, out=yn)
            if torch is not None:
                F = torch.nn.functional
                tx, tw = torch.from_numpy(x), torch.from_numpy(w)
                cont["torch"] = lambda: F.linear(tx, tw)
        res = measure(cont, self.rounds, self.min_sample)
        name = f"dense {m}x{k} @ {n}x{k}^T" + (" + bias + gelu" if bias_gelu else "") + " fp32"
        self.record(name, res, 2.0 * m * n * k / 1e9, "GFLOP/s")
        if m <= 16:                     # bandwidth-bound: one pass over the weight
            self.bandwidth_line(name, res, 4.0 * (n * k + m * k + m * n))

    def op_row(self, name: str, outs_fn: Callable, shapes: list, torch_fn: Any = None,
               np_fn: Any = None, work: float = 0.0, unit: str = "", nbytes: float = 0.0,
               ref: Any = None) -> None:
        """One operator against PyTorch / NumPy: a checked result, interleaved medians."""
        np, td = self.np, self.td
        torch = _torch()
        phs = [td.placeholder(s, name=f"in{i}") for i, s in enumerate(shapes)]
        out = outs_fn(*phs)
        f = self.build([out], phs + [out])
        arrs = [self.rand(*s) for s in shapes]
        res_arr = np.empty([int(d.value) for d in out.shape], out.dtype.numpy)
        f(*arrs, res_arr)
        cont = {"tdsl": (lambda: f(*arrs, res_arr))}
        if torch is not None and torch_fn is not None:
            targs = [torch.from_numpy(a) for a in arrs]
            expect = torch_fn(*targs).numpy()
            np.testing.assert_allclose(res_arr, expect, rtol=1e-3, atol=1e-3)
            cont["torch"] = (lambda: torch_fn(*targs))
        if np_fn is not None:
            cont["numpy"] = (lambda: np_fn(*arrs))
        res = measure(cont, self.rounds, self.min_sample)
        self.record(name, res, work or 1.0, unit or "calls")
        if nbytes:
            self.bandwidth_line(name, res, nbytes)

    def shape_ops(self, which: set) -> None:
        ops = self.ops
        torch = _torch()
        F = torch.nn.functional if torch is not None else None
        np = self.np
        if "depthwise" in which:
            self.op_row("conv2d depthwise 3x3 1x128x56x56, pad 1",
                        lambda d, w: ops.conv2d(d, w, padding=1, groups=128),
                        [(1, 128, 56, 56), (128, 1, 3, 3)],
                        (lambda d, w: F.conv2d(d, w, padding=1, groups=128)) if F else None,
                        work=2.0 * 128 * 9 * 56 * 56 / 1e9, unit="GFLOP/s")
        if "batch_matmul" in which:
            self.op_row("batch_matmul 16x256x64 @ 16x64x256", ops.batch_matmul,
                        [(16, 256, 64), (16, 64, 256)],
                        (lambda a, b: torch.bmm(a, b)) if torch else None,
                        lambda a, b: np.matmul(a, b), work=2.0 * 16 * 256 * 256 * 64 / 1e9,
                        unit="GFLOP/s")
        if "conv2d_s2" in which:
            self.op_row("conv2d 3x3 stride 2 1x64x56x56 -> 128, pad 1",
                        lambda d, w: ops.conv2d(d, w, stride=2, padding=1),
                        [(1, 64, 56, 56), (128, 64, 3, 3)],
                        (lambda d, w: F.conv2d(d, w, stride=2, padding=1)) if F else None,
                        work=2.0 * 128 * 64 * 9 * 28 * 28 / 1e9, unit="GFLOP/s")
        if "transpose" in which:
            self.op_row("transpose 4096x1024 fp32", ops.transpose, [(4096, 1024)],
                        (lambda x: x.t().contiguous()) if torch else None,
                        lambda x: np.ascontiguousarray(x.T), work=2 * 4.0 * 4096 * 1024 / 1e9,
                        unit="GB/s", nbytes=2 * 4.0 * 4096 * 1024)

    def vecmath(self) -> None:
        """erf, tanh, log, sin over 2^22 floats (elements per second)."""
        n = 1 << 22
        torch = _torch()
        np = self.np
        try:
            from scipy.special import erf as np_erf
        except ImportError:
            np_erf = None
        table = {"erf": (self.ops.erf, np_erf, "erf"), "tanh": (self.ops.tanh, np.tanh, "tanh"),
                 "log": (self.ops.log, np.log, "log"), "sin": (self.ops.sin, np.sin, "sin")}
        for name, (op, npf, tname) in table.items():
            X = self.td.placeholder((n,), name="X")
            Y = op(X)
            f = self.build([Y], [X, Y])
            x = self.rand(n)
            if name == "log":
                x = np.abs(x) + 1e-3
            y, yn = np.empty_like(x), np.empty_like(x)
            f(x, y)
            cont = {"tdsl": lambda f=f, x=x, y=y: f(x, y)}
            if torch is not None:
                tx, ty = torch.from_numpy(x), torch.empty(n)
                tf = getattr(torch, tname)
                np.testing.assert_allclose(y, tf(tx).numpy(), rtol=1e-5, atol=1e-6)
                cont["torch"] = lambda tf=tf, tx=tx, ty=ty: tf(tx, out=ty)
            if npf is not None:
                cont["numpy (1 thread)"] = lambda npf=npf, x=x, yn=yn: npf(x, out=yn)
            res = measure(cont, self.rounds, self.min_sample)
            self.record(f"{name} over 2^22 fp32", res, n / 1e9, "Gelem/s")

    def idle(self) -> None:
        """Single-call latency of a 512^3 matmul after a gap of 0, 1, 10, 200 ms: real callers
        do not call one kernel back to back.  Contenders interleaved; medians per gap."""
        import dataclasses
        np, td, ops = self.np, self.td, self.ops
        n = 512
        A = td.placeholder((n, n), name="A")
        B = td.placeholder((n, n), name="B")
        C = ops.matmul(A, B)
        f = self.build([C], [A, B, C])
        a, b = self.rand(n, n), self.rand(n, n)
        c, cn = np.empty((n, n), np.float32), np.empty((n, n), np.float32)
        cont = {"tdsl": lambda: f(a, b, c), "numpy": lambda: np.matmul(a, b, out=cn)}
        # the same object code on libgomp's fork-join, for comparison
        try:
            from tdsl.backends.llvm import jit
            from tdsl.backends.llvm.module import LLVMModule
            old = os.environ.get("TDSL_PARALLEL_RUNTIME")
            os.environ["TDSL_PARALLEL_RUNTIME"] = "gomp"
            try:
                comp = f.compiled
                lib = jit.link(comp.obj, comp.exports(), comp.uses_parallel,
                               needs_workspace=comp.uses_workspace)
            finally:
                if old is None:
                    del os.environ["TDSL_PARALLEL_RUNTIME"]
                else:
                    os.environ["TDSL_PARALLEL_RUNTIME"] = old
            fg = LLVMModule(f.func, f.target, dataclasses.replace(comp, library=lib, cfunc=None,
                                                                 threads_written=None))
            cg = np.empty_like(c)
            fg(a, b, cg)
            cont["tdsl on libgomp"] = lambda: fg(a, b, cg)
        except Exception as e:   # pragma: no cover - reported, not fatal
            print(f"  (libgomp comparison skipped: {type(e).__name__}: {e})")
        torch = _torch()
        if torch is not None:
            ta, tb, tc = torch.from_numpy(a), torch.from_numpy(b), torch.empty(n, n)
            cont["torch"] = lambda: torch.mm(ta, tb, out=tc)
        for fn in cont.values():
            fn()
            fn()
        gaps = (0.0, 0.001, 0.01, 0.2)
        reps = max(5, self.rounds)
        samples: dict = {(k, g): [] for k in cont for g in gaps}
        # Each round gives every contender its own stretch of the machine: a rest first
        # (timing.SETTLE_S: the previous contender's threads stop spinning), then one call
        # per gap.  Interleaving contenders call by call would time each after the others'
        # spinning threads (OpenBLAS's spin ~0.1 s), not after its own idle gap.
        for r in range(reps):
            names = list(cont)
            for k in names[r % len(names):] + names[:r % len(names)]:
                fn = cont[k]
                rest(SETTLE_S)
                for g in gaps:
                    if g:
                        time.sleep(g)
                    else:
                        fn()                      # back to back: the previous call just ended
                    t0 = time.perf_counter()
                    fn()
                    samples[k, g].append(time.perf_counter() - t0)
        print(f"\nmatmul 512^3 single-call latency after a gap ({self.threads} threads; "
              f"median of {reps}; ratio: numpy / tdsl, and tdsl / tdsl back to back)")
        med = {key: statistics.median(v) for key, v in samples.items()}
        for g in gaps:
            cols = "  ".join(f"{k} {med[k, g] * 1e3:7.3f} ms" for k in cont)
            print(f"  gap {g * 1e3:5.0f} ms: {cols}   numpy/tdsl {med['numpy', g] / med['tdsl', g]:5.2f}x"
                  f"  tdsl vs back-to-back {med['tdsl', g] / med['tdsl', 0.0]:5.2f}x")
            for k in cont:
                self.rows.append({"bench": f"idle gap {g * 1e3:.0f} ms: matmul 512^3", "contender": k,
                                  "median_s": med[k, g], "samples_s": samples[k, g]})

    # compile and import time
    def compile_time(self) -> None:
        td, ops = self.td, self.ops
        times, simple = [], []
        for i in range(3):
            n = 1024 + 8 * (i + 1)          # distinct shapes: no cache hit
            A = td.placeholder((n, n), name="A")
            B = td.placeholder((n, n), name="B")
            C = ops.matmul(A, B)
            t0 = time.perf_counter()
            s = ops.schedule(C, self.target)
            td.build(s, [A, B, C], target=self.target)
            times.append(time.perf_counter() - t0)
            k = td.reduce_axis((0, n), name="k")
            C2 = td.compute((n, n), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k), name="C")
            s2 = td.create_schedule(C2.op)
            io, jo, ii, ji = s2[C2].tile(*s2[C2].op.axis, x_factor=32, y_factor=32)
            ko, ki = s2[C2].split(s2[C2].op.reduce_axis[0], factor=4)
            s2[C2].reorder(io, jo, ko, ii, ki, ji)
            s2[C2].vectorize(ji)
            s2[C2].parallel(io)
            t0 = time.perf_counter()
            td.build(s2, [A, B, C2], target=self.target)
            simple.append(time.perf_counter() - t0)
        self.extra["compile_s"] = {"ops.matmul default schedule (schedule+lower+build)": times,
                                   "README tiled matmul (lower+build)": simple}
        print("\ncompile time (no cache; median of 3 shapes)")
        print(f"  ops.matmul 1024 default schedule: {statistics.median(times) * 1e3:7.1f} ms "
              f"(schedule + lower + LLVM O3 + link)")
        print(f"  README tiled matmul:              {statistics.median(simple) * 1e3:7.1f} ms")

    def import_time(self) -> None:
        code = ("import time; t = time.perf_counter(); import tdsl; "
                "print(time.perf_counter() - t)")
        ts = []
        for _ in range(3):
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 check=True)
            ts.append(float(out.stdout.strip()))
        prof = subprocess.run([sys.executable, "-X", "importtime", "-c", "import tdsl"],
                              capture_output=True, text=True)
        top = []
        for line in prof.stderr.splitlines():
            parts = line.split("|")
            if len(parts) == 3 and parts[1].strip().isdigit():
                top.append((int(parts[1].strip()), parts[2].rstrip()))
        top.sort(reverse=True)
        heavy = [(us / 1e6, name.strip()) for us, name in top
                 if name.strip() == name.strip().split(".")[0]     # top-level packages
                 and not name.strip().startswith(("tdsl", "encodings"))][:3]
        self.extra["import_s"] = {"samples": ts, "heaviest_dependencies": heavy}
        print(f"\nimport tdsl: {statistics.median(ts) * 1e3:.0f} ms (median of 3 fresh processes); "
              f"heaviest imported packages: "
              + ", ".join(f"{n} {s * 1e3:.0f} ms" for s, n in heavy))


def _im2col_conv(np: Any, d: Any, w: Any) -> Any:
    """NCHW conv2d, stride 1, pad 1, via im2col and one matmul (the NumPy peer)."""
    n, c, h, wd = d.shape
    k = w.shape[0]
    p = np.pad(d, ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(p, (3, 3), axis=(2, 3))   # n c h w 3 3
    cols = win.transpose(0, 2, 3, 1, 4, 5).reshape(n * h * wd, c * 9)
    out = cols @ w.reshape(k, c * 9).T
    return out.reshape(n, h, wd, k).transpose(0, 3, 1, 2)


SHAPE_OPS = ("depthwise", "batch_matmul", "conv2d_s2", "transpose")


def run_suite(suite: Suite, args: argparse.Namespace, want: Callable[[str], bool]) -> None:
    if want("matmul"):
        for n in ((512, 1024) if args.quick else (512, 1024, 2048)):
            suite.matmul(n)
    if want("conv2d"):
        suite.conv2d()
    if want("softmax"):
        suite.softmax()
    if want("elementwise"):
        suite.elementwise()
    if want("operators"):
        suite.operators()
    elif want("argmax"):
        suite.argmax()
    for m in (1, 8):
        if want(f"dense{m}"):
            suite.dense(m)
    if want("dense512"):
        suite.dense(512, 1024, 1024)
    if want("dense_gelu"):
        suite.dense(512, 1024, 1024, bias_gelu=True)
    shape = {k for k in SHAPE_OPS if want(k)}
    if shape:
        suite.shape_ops(shape)
    if want("vecmath"):
        suite.vecmath()
    if want("idle"):
        suite.idle()
    if want("compile"):
        suite.compile_time()
    if want("import"):
        suite.import_time()


def main(argv: "list[str] | None" = None) -> int:
    _reexec_without_blas_overrides()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer rounds, no 2048^3 matmul")
    ap.add_argument("--threads", default="0", help="threads for every contender, or a "
                    "comma list run one after the other, e.g. 1,2 (default: all available CPUs)")
    ap.add_argument("--rounds", type=int, default=0, help="samples per contender (default 15, "
                    "quick 5)")
    ap.add_argument("--only", nargs="*", default=None,
                    help="run only these: matmul conv2d softmax elementwise operators compile "
                    "import argmax (the arg-reduction rows of operators); issue 12 rows: dense1 dense8 dense512 dense_gelu depthwise "
                    "batch_matmul conv2d_s2 transpose vecmath idle")
    ap.add_argument("--no-tvm", action="store_true", help="skip TVM even when installed")
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/<time>.json)")
    args = ap.parse_args(argv)
    ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    args.thread_counts = [int(x) or ncpu for x in str(args.threads).split(",")]
    args.threads = args.thread_counts[0]
    args.rounds = args.rounds or (5 if args.quick else 15)
    os.environ.setdefault("TDSL_CACHE_DIR", "off")       # measure real compiles
    os.environ["TDSL_NUM_THREADS"] = str(args.threads)
    os.environ["TVM_NUM_THREADS"] = str(args.threads)      # TVM's runtime thread pool
    t_start = time.perf_counter()
    keep = limit_threads(args.threads)  # noqa: F841  (the limit lasts while this lives)
    env = environment(args.threads)
    rows: list = []
    extra: dict = {}
    print(f"tdsl benchmarks: {env['cpu']}, {env['cpus_available']} CPUs, {args.threads} threads "
          f"for every contender, load average {env['loadavg_start'][0]:.2f}")
    if env["removed_env"]:
        print(f"  (re-executed without {env['removed_env']}: they slow NumPy's OpenBLAS down)")
    if isinstance(env["blas"], list):
        for d in env["blas"]:
            print(f"  NumPy BLAS: {d['internal_api']} {d['version']}, kernel {d['architecture']}, "
                  f"{d['num_threads']} threads")
    else:
        print(f"  NumPy BLAS: {env['blas']}")
    torch = _torch()
    print(f"  PyTorch: {torch.__version__ + f' ({torch.get_num_threads()} threads)' if torch else 'not installed'}"
          f"; TVM: {'installed' if _tvm() else 'not installed'}")
    print("  ratio column: peer time / tdsl time, median over interleaved rounds (> 1: tdsl faster)")
    only = set(args.only) if args.only else None

    def want(name: str) -> bool:
        return only is None or name in only
    for threads in args.thread_counts:
        args.threads = threads
        if len(args.thread_counts) > 1:
            print(f"\n==== {threads} thread(s) for every contender ====")
        os.environ["TDSL_NUM_THREADS"] = str(threads)
        os.environ["TVM_NUM_THREADS"] = str(threads)
        keep = limit_threads(threads)  # noqa: F841  (the limit lasts while this lives)
        suite = Suite(args)
        run_suite(suite, args, want)
        rows.extend({**r, "threads": threads} for r in suite.rows)
        extra.update({f"{k}@{threads}t": v for k, v in suite.extra.items()})
    env["loadavg_end"] = list(os.getloadavg())
    env["wall_s"] = time.perf_counter() - t_start
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else RESULTS / f"{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"timestamp": stamp, "quick": args.quick, "environment": env,
                               "results": rows, **extra}, indent=1))
    print(f"\nload average at the end {env['loadavg_end'][0]:.2f}; {env['wall_s']:.0f} s; "
          f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
