"""The auto-scheduling suite of ``bench_tuning.py --suite``: 12 operators, each tuned with a
fresh database, then timed side by side with its untuned schedules and with NumPy and
PyTorch (interleaved rounds, medians, the same thread count for everyone).

Each entry of ``SUITE`` builds ``(args, peers)``: the tdsl argument list (inputs, then the
output) from ``tdsl.ops`` (so ``ops.schedule``'s schedule is among the untuned programs
measured in the first batch) and the peers as ``{name: make(inputs) -> callable}``.
"""
from __future__ import annotations

import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

import timing
import tdsl as td
from tdsl import autotune, ops
from tdsl.tensor import PlaceholderOp

try:
    import torch
    import torch.nn.functional as F
except ImportError:      # the PyTorch column stays empty
    torch = None


def _t(a: np.ndarray) -> Any:
    return torch.from_numpy(a)


def matmul():
    A = td.placeholder((1024, 1024), "float32", name="A")
    B = td.placeholder((1024, 1024), "float32", name="B")
    return [A, B, ops.matmul(A, B)], {
        "numpy": lambda a, b: (lambda: np.matmul(a, b)),
        "torch": lambda a, b: (lambda ta=_t(a), tb=_t(b): torch.mm(ta, tb))}


def dense():
    X = td.placeholder((1, 4096), "float32", name="X")
    W = td.placeholder((4096, 4096), "float32", name="W")
    return [X, W, ops.dense(X, W)], {
        "numpy": lambda x, w: (lambda: x @ w.T),
        "torch": lambda x, w: (lambda tx=_t(x), tw=_t(w): F.linear(tx, tw))}


def batch_matmul():
    A = td.placeholder((16, 256, 64), "float32", name="A")
    B = td.placeholder((16, 64, 256), "float32", name="B")
    return [A, B, ops.batch_matmul(A, B)], {
        "numpy": lambda a, b: (lambda: np.matmul(a, b)),
        "torch": lambda a, b: (lambda ta=_t(a), tb=_t(b): torch.bmm(ta, tb))}


def _np_conv(x: np.ndarray, w: np.ndarray, groups: int = 1) -> Callable:
    from numpy.lib.stride_tricks import sliding_window_view
    kh = w.shape[2]

    def run() -> np.ndarray:
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        if groups == 1:
            win = sliding_window_view(xp, (kh, kh), axis=(2, 3))      # n c h w kh kw
            return np.tensordot(w, win, axes=([1, 2, 3], [1, 4, 5])).transpose(1, 0, 2, 3)
        h, wd = x.shape[2], x.shape[3]
        out = np.zeros(x.shape, x.dtype)
        for dy in range(kh):
            for dx in range(kh):
                out += xp[:, :, dy:dy + h, dx:dx + wd] * w[None, :, 0, dy, dx, None, None]
        return out
    return run


def conv2d():
    X = td.placeholder((1, 64, 56, 56), "float32", name="X")
    W = td.placeholder((64, 64, 3, 3), "float32", name="W")
    return [X, W, ops.conv2d(X, W, padding=1)], {
        "numpy": lambda x, w: _np_conv(x, w),
        "torch": lambda x, w: (lambda tx=_t(x), tw=_t(w): F.conv2d(tx, tw, padding=1))}


def depthwise():
    X = td.placeholder((1, 128, 56, 56), "float32", name="X")
    W = td.placeholder((128, 1, 3, 3), "float32", name="W")
    return [X, W, ops.conv2d(X, W, padding=1, groups=128)], {
        "numpy": lambda x, w: _np_conv(x, w, groups=128),
        "torch": lambda x, w: (lambda tx=_t(x), tw=_t(w): F.conv2d(tx, tw, padding=1, groups=128))}


def _np_maxpool(x: np.ndarray) -> Callable:
    def run() -> np.ndarray:
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
        h, w = x.shape[2] // 2, x.shape[3] // 2
        out = xp[:, :, 0:2 * h:2, 0:2 * w:2].copy()
        for dy in range(3):
            for dx in range(3):
                np.maximum(out, xp[:, :, dy:dy + 2 * h:2, dx:dx + 2 * w:2], out=out)
        return out
    return run


def max_pool():
    X = td.placeholder((1, 64, 112, 112), "float32", name="X")
    return [X, ops.max_pool2d(X, 3, 2, padding=1)], {
        "numpy": lambda x: _np_maxpool(x),
        "torch": lambda x: (lambda tx=_t(x): F.max_pool2d(tx, 3, 2, padding=1))}


def softmax():
    X = td.placeholder((4096, 1024), "float32", name="X")

    def np_softmax(x):
        def run():
            z = np.exp(x - x.max(axis=1, keepdims=True))
            return z / z.sum(axis=1, keepdims=True)
        return run
    return [X, ops.softmax(X)], {
        "numpy": np_softmax,
        "torch": lambda x: (lambda tx=_t(x): torch.softmax(tx, 1))}


def layernorm():
    X = td.placeholder((4096, 1024), "float32", name="X")
    G = td.placeholder((1024,), "float32", name="G")
    B = td.placeholder((1024,), "float32", name="B")

    def np_ln(x, g, b):
        def run():
            mu = x.mean(axis=1, keepdims=True)
            v = ((x - mu) ** 2).mean(axis=1, keepdims=True)
            return (x - mu) / np.sqrt(v + 1e-5) * g + b
        return run
    return [X, G, B, ops.layernorm(X, G, B)], {
        "numpy": np_ln,
        "torch": lambda x, g, b: (lambda tx=_t(x), tg=_t(g), tb=_t(b):
                                  F.layer_norm(tx, (1024,), tg, tb))}


def gemv_bias_tanh():
    A = td.placeholder((2048, 2048), "float32", name="A")
    x = td.placeholder((2048,), "float32", name="x")
    b = td.placeholder((2048,), "float32", name="b")
    k = td.reduce_axis((0, 2048), name="k")
    y = td.compute((2048,), lambda i: td.sum(A[i, k] * x[k], axis=k), name="y")
    out = td.compute((2048,), lambda i: td.tanh(y[i] + b[i]), name="out")
    return [A, x, b, out], {
        "numpy": lambda a, xv, bv: (lambda: np.tanh(a @ xv + bv)),
        "torch": lambda a, xv, bv: (lambda ta=_t(a), tx=_t(xv), tb=_t(bv):
                                    torch.tanh(torch.addmv(tb, ta, tx)))}


def row_argmax():
    X = td.placeholder((4096, 1024), "float32", name="X")
    return [X, ops.argmax(X, axis=1)], {
        "numpy": lambda x: (lambda: x.argmax(axis=1)),
        "torch": lambda x: (lambda tx=_t(x): torch.argmax(tx, 1))}


def transpose():
    X = td.placeholder((4096, 1024), "float32", name="X")

    def np_t(x):
        out = np.empty(x.T.shape, x.dtype)
        return lambda: np.copyto(out, x.T)

    def torch_t(x):
        tx = _t(x)
        out = torch.empty(tx.t().shape)
        return lambda: out.copy_(tx.t())
    return [X, ops.transpose(X)], {"numpy": np_t, "torch": torch_t}


def triad():
    n = 1 << 24
    A, B, C, D = (td.placeholder((n,), "float32", name=s) for s in "ABCD")
    E = ops.add(D, ops.multiply(ops.add(A, B), C))
    return [A, B, C, D, E], {
        "numpy": lambda a, b, c, d: (lambda: d + (a + b) * c),
        "torch": lambda a, b, c, d: (lambda ta=_t(a), tb=_t(b), tc=_t(c), tdd=_t(d):
                                     tdd + (ta + tb) * tc)}


SUITE = {"matmul": matmul, "dense": dense, "batch_matmul": batch_matmul, "conv2d": conv2d,
         "depthwise": depthwise, "max_pool": max_pool, "softmax": softmax,
         "layernorm": layernorm, "gemv_bias_tanh": gemv_bias_tanh, "row_argmax": row_argmax,
         "transpose": transpose, "triad": triad}


# ---- timing ------------------------------------------------------------------------------------
#: A contender slower than this per call (a naive default schedule) is sampled in the
#: first ``SLOW_ROUNDS`` rounds only: it cannot be close to the others, and nine rounds of
#: a 3-second naive matmul would take longer than tuning.
SLOW_SECONDS = 0.5
SLOW_ROUNDS = 3


def interleaved(contenders: dict, rounds: int, min_ms: float = 20.0) -> dict:
    """Median seconds per call of each contender (``timing.interleaved``); a contender
    slower than ``SLOW_SECONDS`` per call gets one call per sample, ``SLOW_ROUNDS`` samples."""
    numbers, slow = {}, {}
    for name, fn in contenders.items():
        t0 = time.perf_counter()
        fn()
        if time.perf_counter() - t0 > SLOW_SECONDS:
            numbers[name], slow[name] = 1, SLOW_ROUNDS
    res = timing.interleaved(contenders, rounds, min_ms / 1e3, numbers=numbers,
                             max_rounds=slow)
    return {n: r["median_s"] for n, r in res.items()}


@dataclass
class Row:
    name: str
    seconds: float = 0.0
    trials: int = 0
    tuned: float = 0.0
    default: float = 0.0
    ops_schedule: float = 0.0
    peers: "dict | None" = None
    recorded: float = 0.0
    note: str = ""

    @property
    def vs_default(self) -> float:
        return self.default / self.tuned

    @property
    def best_peer(self) -> tuple[str, float]:
        name = min(self.peers, key=self.peers.get) if self.peers else ""
        return name, (self.peers[name] if name else float("nan"))

    @property
    def vs_peer(self) -> float:
        return self.best_peer[1] / self.tuned if self.peers else float("nan")


def _arrays(args: list, rng: np.random.Generator) -> tuple[list, list]:
    ins = [rng.uniform(-1, 1, [int(s.value) for s in t.shape]).astype(str(t.dtype))
           for t in args if isinstance(t.op, PlaceholderOp)]
    outs = [np.zeros([int(s.value) for s in t.shape], str(t.dtype))
            for t in args if not isinstance(t.op, PlaceholderOp)]
    return ins, outs


def run_one(name: str, trials: int, rounds: int, target: str, db_path: str) -> Row:
    from tdsl.autotune.dispatch import schedule_from_record
    from tdsl.ops import schedule as ops_schedule
    args, peers = SUITE[name]()
    row = Row(name)
    task = autotune.create_auto_task(args, target)
    db = autotune.Database(db_path)
    tuner = autotune.XGBTuner(task)
    bar = autotune.progress_bar(trials, desc=name)
    try:
        res = tuner.tune(trials, db=db, callbacks=[bar])
    finally:
        bar.close()
    row.seconds, row.trials = res.seconds, res.trials
    if res.best is None:
        row.note = f"no valid candidate: {res.errors}"
        return row
    row.recorded = res.best.cost
    outs = [t for t in args if not isinstance(t.op, PlaceholderOp)]
    ins, bufs = _arrays(args, np.random.default_rng(0))
    kernels = {"tuned": td.build(schedule_from_record(res.best, task.outputs), args, target=target),
               "default": td.build(td.create_schedule([t.op for t in outs]), args, target=target)}
    try:
        kernels["ops.schedule"] = td.build(ops_schedule(outs, target), args, target=target)
    except td.errors.TDSLError:
        pass
    ref = [b.copy() for b in bufs]
    kernels["default"](*ins, *ref)
    got = [b.copy() for b in bufs]
    kernels["tuned"](*ins, *got)
    for g, r in zip(got, ref):
        if not np.allclose(g, r, rtol=1e-3, atol=1e-3):
            row.note = "WRONG ANSWER from the tuned kernel"
    contenders = {k: (lambda f=f, o=[b.copy() for b in bufs]: f(*ins, *o))
                  for k, f in kernels.items()}
    for peer, make in peers.items():
        if peer == "torch" and torch is None:
            continue
        contenders[peer] = make(*ins)
    times = interleaved(contenders, rounds)
    row.tuned, row.default = times["tuned"], times["default"]
    row.ops_schedule = times.get("ops.schedule", 0.0)
    row.peers = {k: times[k] for k in peers if k in times}
    return row


def _fmt_ms(s: float) -> str:
    return f"{s * 1e3:.3f}" if s else "-"


def print_table(rows: list[Row]) -> None:
    head = (f"{'operator':<16}{'tune s':>8}{'trials':>7}{'tuned ms':>10}{'default ms':>11}"
            f"{'ops.sch ms':>11}{'t/def':>7}{'t/ops':>7}{'best peer':>16}{'vs peer':>8}"
            f"{'rec/now':>8}  note")
    print(head)
    print("-" * len(head))
    for r in rows:
        if not r.tuned:
            print(f"{r.name:<16}{r.seconds:>8.1f}{r.trials:>7}  {r.note}")
            continue
        pn, pt = r.best_peer
        t_ops = f"{r.ops_schedule / r.tuned:>7.2f}" if r.ops_schedule else f"{'-':>7}"
        print(f"{r.name:<16}{r.seconds:>8.1f}{r.trials:>7}{_fmt_ms(r.tuned):>10}"
              f"{_fmt_ms(r.default):>11}{_fmt_ms(r.ops_schedule):>11}{r.vs_default:>7.2f}{t_ops}"
              f"{pn + ' ' + _fmt_ms(pt):>16}{r.vs_peer:>8.2f}{r.recorded / r.tuned:>8.2f}  {r.note}")
    ok = [r for r in rows if r.tuned]
    if ok:
        vs_def = [r.vs_default for r in ok]
        vs_peer = [r.vs_peer for r in ok if r.peers]
        agree = [r.recorded / r.tuned for r in ok]
        print(f"\nmedians over {len(ok)} operators: tuned/default {statistics.median(vs_def):.2f}x "
              f"(min {min(vs_def):.2f}), tuned vs best peer {statistics.median(vs_peer):.2f}x "
              f"(min {min(vs_peer):.2f}; {sum(v < 0.5 for v in vs_peer)} below 0.5x), "
              f"recorded/re-measured {statistics.median(agree):.2f} "
              f"(range {min(agree):.2f}-{max(agree):.2f}); tuning "
              f"{statistics.median([r.seconds for r in ok]):.1f} s median, "
              f"{max(r.seconds for r in ok):.1f} s max")
        print("(ratios above 1: tdsl's tuned kernel is faster; rec/now: the best record's "
              "recorded time over its re-measurement here)")


def run_suite(only: list[str], trials: int, rounds: int, threads: int, db: "str | None") -> list:
    unknown = [n for n in only if n not in SUITE]
    if unknown:
        raise SystemExit(f"unknown operator(s) {unknown}; the suite: {', '.join(SUITE)}")
    names = only or list(SUITE)
    threads = threads or len(os.sched_getaffinity(0))
    if torch is not None:
        torch.set_num_threads(threads)
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(threads)
        blas = f"NumPy BLAS limited to {threads} thread(s)"
    except ImportError:
        blas = "threadpoolctl not installed: NumPy's BLAS keeps its own thread count"
    os.environ["TDSL_NUM_THREADS"] = str(threads)
    target = "llvm"
    print(f"suite: {len(names)} operator(s), {trials} trials each, fresh database each; "
          f"{threads} thread(s) for tdsl and PyTorch; {blas}; load {os.getloadavg()}")
    tmp = tempfile.mkdtemp(prefix="tdsl-suite-")
    rows = []
    for name in names:
        path = os.path.join(tmp, f"{name}.db") if db is None else f"{db}.{name}"
        rows.append(run_one(name, trials, rounds, target, path))
        print_table(rows[-1:])
    print()
    print_table(rows)
    print(f"\nrecords: {tmp if db is None else db + '.*'}")
    return rows
