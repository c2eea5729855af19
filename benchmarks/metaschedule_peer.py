#!/usr/bin/env python
"""tdsl's tuner against TVM 0.27's MetaSchedule, the same workloads and trial budget, one thread.

    python benchmarks/metaschedule_peer.py [--trials 64] [--only matmul512 nhwc56]
                                           [--rounds 9] [--trace] [--ms-timeout 120]
    python benchmarks/metaschedule_peer.py --tdsl-only [--seed 0] [--work-dir DIR] [--only ...]
                                           [--l1d-bytes N]
    python benchmarks/metaschedule_peer.py --compare DIR_A DIR_B [--only ...] [--rounds 9]
    python benchmarks/metaschedule_peer.py --retime DIR [--only ...] [--rounds 9]

For each workload (matmul 512³ and 384x3072·3072x768; conv2d NCHW and NHWC at ResNet-18's
3x3 layer shapes, batch 1) both tuners get a fresh database and ``--trials`` measured
candidates: tdsl's ``XGBTuner`` on ``autotune.create_auto_task`` of the ``tdsl.ops`` form
(candidates timed by the worker thread's CPU time, ``LocalRunner(n_threads=1)``),
MetaSchedule's ``tune_tir`` (evolutionary search, XGBoost model) on ``te.create_prim_func``
of the same computation, target llvm with the host's ``mcpu`` and ``num-cores=1`` (MS's
own build and export functions, run in this process: see ``in_process_builder``).  Each
side's tuning wall time is recorded (on a shared machine it includes waiting for the CPU:
read it with the load average printed beside it).  Then both best kernels are built, checked
against NumPy / PyTorch on random inputs, and timed side by side on one thread in interleaved
rounds (``timing.interleaved``: one sample of each per round, medians).

The table: workload, tdsl ms, MetaSchedule ms, ratio (MS ms / tdsl ms: above 1 tdsl is
faster), each side's tuning seconds.  ``--trace`` prints MetaSchedule's best schedule trace
for every workload; it is printed anyway for a workload tdsl loses.

``--tdsl-only`` tunes and times tdsl's side alone (no TVM needed): each best kernel is checked,
timed by the thread's CPU time, and printed beside MetaSchedule's figure from an earlier full
run (``PREVIOUS_MS``, labelled as such: re-timed by thread CPU time, not measured now), with the
best config.  ``--compare A B`` re-times the best kernels of two ``--tdsl-only`` work dirs
(before and after a change) interleaved, by thread CPU time, after checking both.
``--retime DIR`` re-times both sides' best kernels of a full run's work dir (no tuning), by
wall clock and by thread CPU time: a run made on a loaded machine, measured again when quiet.

Optional peer: exits 0 with a message when ``import tvm`` fails.  MetaSchedule 0.27 crashes
(segfault in ``ToJSONGraph``) with ``apache-tvm-ffi`` 0.1.15.post2; 0.1.14.post1 works.
Not imported by the test suite.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

# One thread everywhere, set before tdsl, TVM, NumPy or PyTorch start their pools (TVM's
# runtime and MetaSchedule's runner processes read TVM_NUM_THREADS).
for _var in ("TDSL_NUM_THREADS", "TVM_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
for _p in (HERE, HERE.parent):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))


@dataclass(frozen=True)
class Workload:
    """One computation: ``kind`` "matmul" (m, k, n) or "nchw"/"nhwc" (c, size, f, k, stride)."""
    name: str
    kind: str
    dims: tuple

    @property
    def flops(self) -> float:
        if self.kind == "matmul":
            m, k, n = self.dims
            return 2.0 * m * k * n
        c, size, f, kh, s = self.dims
        out = (size + 2 * (kh // 2) - kh) // s + 1
        return 2.0 * out * out * f * c * kh * kh


WORKLOADS = [
    Workload("matmul512", "matmul", (512, 512, 512)),
    Workload("matmul384x3072x768", "matmul", (384, 3072, 768)),
    Workload("nchw56", "nchw", (64, 56, 64, 3, 1)),
    Workload("nchw28", "nchw", (128, 28, 128, 3, 1)),
    Workload("nchw14", "nchw", (256, 14, 256, 3, 1)),
    Workload("nchw56s2", "nchw", (64, 56, 128, 3, 2)),
    Workload("nhwc56", "nhwc", (64, 56, 64, 3, 1)),
    Workload("nhwc28", "nhwc", (128, 28, 128, 3, 1)),
    Workload("nhwc14", "nhwc", (256, 14, 256, 3, 1)),
    Workload("nhwc56s2", "nhwc", (64, 56, 128, 3, 2)),
]


#: MetaSchedule's best kernel, ms, from the full run of 2026-11-28 (TVM 0.27.0.post1, tvm-ffi
#: 0.1.14.post1; 64 trials, one thread; a 2-core AMD EPYC znver4 VM), for ``--tdsl-only``'s
#: table: re-timed by ``--retime`` on the quiet machine (load 0.4-1.3) by the thread's CPU
#: time, the clock ``--tdsl-only`` times tdsl by.
PREVIOUS_MS = {"matmul512": 2.436, "matmul384x3072x768": 24.980, "nchw56": 3.065,
               "nchw28": 3.679, "nchw14": 2.332, "nchw56s2": 1.475, "nhwc56": 2.717,
               "nhwc28": 2.054, "nhwc14": 2.174, "nhwc56s2": 1.229}


# ---- inputs and reference ----------------------------------------------------------------------
def arrays(w: Workload, rng: np.random.Generator) -> tuple[list[np.ndarray], np.ndarray]:
    """Random inputs (A, B / data, weight in the workload's layout) and the reference output."""
    import torch
    import torch.nn.functional as F
    if w.kind == "matmul":
        m, k, n = w.dims
        a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
        b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
        return [a, b], (a.astype(np.float64) @ b).astype(np.float32)
    c, size, f, kh, s = w.dims
    x = rng.uniform(-1, 1, (1, c, size, size)).astype(np.float32)
    wt = rng.uniform(-1, 1, (f, c, kh, kh)).astype(np.float32)
    ref = F.conv2d(torch.from_numpy(x).double(), torch.from_numpy(wt).double(), stride=s,
                   padding=kh // 2).float().numpy()
    if w.kind == "nchw":
        return [x, wt], ref
    return ([np.ascontiguousarray(x.transpose(0, 2, 3, 1)),
             np.ascontiguousarray(wt.transpose(2, 3, 1, 0))],
            np.ascontiguousarray(ref.transpose(0, 2, 3, 1)))


def check(name: str, got: np.ndarray, ref: np.ndarray, depth: int) -> None:
    """Raise when ``got`` is not ``ref`` (fp32 sums of ``depth`` products)."""
    tol = 1e-4 * depth ** 0.5 + 1e-4
    err = float(np.abs(got - ref).max())
    if not np.isfinite(err) or err > tol:
        raise SystemExit(f"{name}: WRONG ANSWER, max abs error {err:.3g} > {tol:.3g}")


def depth(w: Workload) -> int:
    return w.dims[1] if w.kind == "matmul" else w.dims[0] * w.dims[3] ** 2


# ---- tdsl --------------------------------------------------------------------------------------
def tdsl_args(w: Workload) -> list:
    import tdsl as td
    from tdsl import ops
    if w.kind == "matmul":
        m, k, n = w.dims
        A = td.placeholder((m, k), "float32", name="A")
        B = td.placeholder((k, n), "float32", name="B")
        return [A, B, ops.matmul(A, B)]
    c, size, f, kh, s = w.dims
    if w.kind == "nchw":
        X = td.placeholder((1, c, size, size), "float32", name="X")
        W = td.placeholder((f, c, kh, kh), "float32", name="W")
        return [X, W, ops.conv2d(X, W, stride=s, padding=kh // 2)]
    X = td.placeholder((1, size, size, c), "float32", name="X")
    W = td.placeholder((kh, kh, c, f), "float32", name="W")
    return [X, W, ops.conv2d(X, W, stride=s, padding=kh // 2, layout="NHWC",
                             kernel_layout="HWIO")]


def tune_tdsl(w: Workload, trials: int, work_dir: str, seed: int = 0,
              best: "list | None" = None, **sketch: Any) -> tuple[Callable, float, int]:
    """tdsl's tuned kernel (a callable on NumPy arrays), tuning seconds, trials measured.
    Candidates are timed on one thread by its CPU time (``LocalRunner(n_threads=1)``);
    ``best``, when given, gets the best record; ``sketch``: ``SketchSource`` options."""
    import tdsl as td
    from tdsl import autotune
    from tdsl.autotune.dispatch import schedule_from_record
    args = tdsl_args(w)
    t0 = time.perf_counter()
    task = autotune.create_auto_task(args, "llvm", **sketch)
    opt = autotune.measure_option(runner=autotune.LocalRunner(n_threads=1))
    res = autotune.XGBTuner(task, seed=seed).tune(trials, measure_option=opt, db=autotune.Database(
        os.path.join(work_dir, f"tdsl-{w.name}.db")))
    seconds = time.perf_counter() - t0
    if res.best is None:
        raise SystemExit(f"{w.name}: tdsl found no valid candidate: {res.errors}")
    if best is not None:
        best.append(res.best)
    return td.build(schedule_from_record(res.best, task.outputs), args), seconds, res.trials


# ---- MetaSchedule ------------------------------------------------------------------------------
def host_target() -> Any:
    import tvm
    try:
        import llvmlite.binding as llvm
        llvm.initialize_native_target()
        cpu = llvm.get_host_cpu_name()
    except Exception:
        cpu = "generic"
    return tvm.target.Target({"kind": "llvm", "mcpu": cpu, "num-cores": 1})


def te_func(w: Workload) -> Any:
    """The workload as a TE PrimFunc: padding stage, then the reduction, as TOPI writes it."""
    from tvm import te
    if w.kind == "matmul":
        m, k, n = w.dims
        A = te.placeholder((m, k), name="A")
        B = te.placeholder((k, n), name="B")
        r = te.reduce_axis((0, k), name="k")
        C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
        return te.create_prim_func([A, B, C])
    c, size, f, kh, s = w.dims
    p = kh // 2
    out = (size + 2 * p - kh) // s + 1
    rc = te.reduce_axis((0, c), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kh), name="rx")

    def inside(y: Any, x: Any) -> Any:
        return te.all(y >= p, y < size + p, x >= p, x < size + p)
    if w.kind == "nchw":
        X = te.placeholder((1, c, size, size), name="X")
        W = te.placeholder((f, c, kh, kh), name="W")
        P = te.compute((1, c, size + 2 * p, size + 2 * p), lambda n, ci, y, x: te.if_then_else(
            inside(y, x), X[n, ci, y - p, x - p], 0.0), name="pad")
        Y = te.compute((1, f, out, out), lambda n, o, y, x: te.sum(
            P[n, rc, y * s + ry, x * s + rx] * W[o, rc, ry, rx], axis=[rc, ry, rx]), name="Y")
    else:
        X = te.placeholder((1, size, size, c), name="X")
        W = te.placeholder((kh, kh, c, f), name="W")
        P = te.compute((1, size + 2 * p, size + 2 * p, c), lambda n, y, x, ci: te.if_then_else(
            inside(y, x), X[n, y - p, x - p, ci], 0.0), name="pad")
        Y = te.compute((1, out, out, f), lambda n, y, x, o: te.sum(
            P[n, y * s + ry, x * s + rx, rc] * W[ry, rx, rc, o], axis=[ry, rx, rc]), name="Y")
    return te.create_prim_func([X, W, Y])


def in_process_builder() -> Any:
    """A MetaSchedule builder that compiles in this process with MS's own build and export
    functions.  ``LocalBuilder`` starts a fresh worker pool for every batch, and each worker's
    first build imports ``tvm.s_tir.tensor_intrin`` (which parses every tensor intrinsic's
    TVMScript): about 20 s on an idle machine, over 100 s on a loaded 2-core one, where even
    a 120 s timeout killed every build.  Here that import happens once, up front."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
    from tvm.s_tir.meta_schedule.builder.local_builder import default_build, default_export

    @derived_object
    class InProcessBuilder(PyBuilder):
        def build(self, build_inputs: list) -> list:
            out = []
            for bi in build_inputs:
                try:
                    out.append(BuilderResult(default_export(default_build(bi.mod, bi.target,
                                                                          None)), None))
                except Exception as e:      # MS records it as this candidate's build error
                    out.append(BuilderResult(None, f"{type(e).__name__}: {e}"))
            return out
    return InProcessBuilder()


def tune_ms(w: Workload, trials: int, work_dir: str, timeout_s: float) -> tuple[Any, Any, float]:
    """MetaSchedule's best schedule, its compiled function, tuning seconds."""
    import tvm
    from tvm.s_tir import meta_schedule as ms
    func, target = te_func(w), host_target()
    t0 = time.perf_counter()
    db = ms.tune_tir(mod=func, target=target, work_dir=os.path.join(work_dir, f"ms-{w.name}"),
                     max_trials_global=trials, num_trials_per_iter=min(trials, 64),
                     builder=in_process_builder(),
                     runner=ms.runner.LocalRunner(timeout_sec=timeout_s),
                     num_tuning_cores=1)
    seconds = time.perf_counter() - t0
    sch = ms.tir_integration.compile_tir(db, func, target)
    if sch is None:
        raise SystemExit(f"{w.name}: MetaSchedule found no valid candidate (see "
                         f"{work_dir}/ms-{w.name}/logs)")
    return sch, tvm.compile(sch.mod, target=target)["main"], seconds


# ---- the comparison ----------------------------------------------------------------------------
@dataclass
class Row:
    w: Workload
    tdsl_s: float = 0.0
    ms_s: float = 0.0
    tdsl_tune: float = 0.0
    ms_tune: float = 0.0
    tdsl_trials: int = 0
    trace: str = ""
    loads: list = field(default_factory=list)


def run_one(w: Workload, trials: int, rounds: int, work_dir: str, ms_timeout: float) -> Row:
    row = Row(w)
    row.loads.append(os.getloadavg()[0])
    kernel, row.tdsl_tune, row.tdsl_trials = tune_tdsl(w, trials, work_dir)
    row.loads.append(os.getloadavg()[0])
    sch, fn, row.ms_tune = tune_ms(w, trials, work_dir, ms_timeout)
    row.loads.append(os.getloadavg()[0])
    row.trace = str(sch.trace)
    row.tdsl_s, row.ms_s = side_by_side(w, kernel, fn, rounds)
    return row


def side_by_side(w: Workload, kernel: Callable, fn: Any, rounds: int,
                 clock: Callable[[], float] = time.perf_counter) -> tuple[float, float]:
    """Both best kernels checked against the reference on the same random inputs, then
    timed interleaved on this thread (medians, seconds): tdsl's, MetaSchedule's."""
    import tvm
    import timing
    ins, ref = arrays(w, np.random.default_rng(0))
    out = np.zeros_like(ref)
    kernel(*ins, out)
    check(f"{w.name} tdsl", out, ref, depth(w))
    dev = tvm.cpu(0)
    tins = [tvm.runtime.tensor(a, dev) for a in ins]
    tout = tvm.runtime.tensor(np.zeros_like(ref), dev)
    fn(*tins, tout)
    check(f"{w.name} MetaSchedule", tout.numpy(), ref, depth(w))
    res = timing.interleaved({"tdsl": lambda: kernel(*ins, out),
                              "ms": lambda: fn(*tins, tout)}, rounds, 0.05, clock=clock)
    return res["tdsl"]["median_s"], res["ms"]["median_s"]


def retime(todo: list[Workload], work_dir: str, rounds: int) -> None:
    """Both sides' best kernels of a full run's work dir (tdsl's database, MetaSchedule's),
    checked and timed again interleaved, by wall clock and by the thread's CPU time (one
    thread each: TVM's runtime runs a one-thread pool's work on the calling thread), with no
    tuning: for re-measuring a run made on a loaded machine once it is quiet."""
    import tvm
    from tvm.s_tir import meta_schedule as ms
    print(f"best kernels of {work_dir}, re-timed interleaved, {rounds} rounds; load "
          f"{os.getloadavg()[0]:.1f}")
    head = (f"{'workload':<20}{'tdsl ms':>9}{'MS ms':>9}{'MS/tdsl':>9}{'tdsl cpu':>10}"
            f"{'MS cpu':>9}{'MS/tdsl':>9}")
    print(head)
    print("-" * len(head), flush=True)
    for w in todo:
        kernel = best_kernel(w, work_dir)[0]
        func, target = te_func(w), host_target()
        db = ms.database.JSONDatabase(work_dir=os.path.join(work_dir, f"ms-{w.name}"))
        sch = ms.tir_integration.compile_tir(db, func, target)
        if sch is None:
            print(f"{w.name:<20} no MetaSchedule record in {work_dir}/ms-{w.name}")
            continue
        fn = tvm.compile(sch.mod, target=target)["main"]
        wall = side_by_side(w, kernel, fn, rounds)
        cpu = side_by_side(w, kernel, fn, rounds, clock=time.thread_time)
        print(f"{w.name:<20}{wall[0] * 1e3:>9.3f}{wall[1] * 1e3:>9.3f}{wall[1] / wall[0]:>9.2f}"
              f"{cpu[0] * 1e3:>10.3f}{cpu[1] * 1e3:>9.3f}{cpu[1] / cpu[0]:>9.2f}", flush=True)


def run_tdsl_only(w: Workload, trials: int, rounds: int, work_dir: str, seed: int,
                  **sketch: Any) -> None:
    """Tune tdsl's side alone, check it, time it by thread CPU time; print it beside
    MetaSchedule's figure from an earlier run (``PREVIOUS_MS``)."""
    import timing
    ins, ref = arrays(w, np.random.default_rng(0))
    load = os.getloadavg()[0]
    best: list = []
    kernel, tune_s, _ = tune_tdsl(w, trials, work_dir, seed, best, **sketch)
    out = np.zeros_like(ref)
    kernel(*ins, out)
    check(f"{w.name} tdsl", out, ref, depth(w))
    res = timing.interleaved({"tdsl": lambda: kernel(*ins, out)}, rounds, 0.05,
                             clock=time.thread_time)
    ms = res["tdsl"]["median_s"] * 1e3
    prev = PREVIOUS_MS.get(w.name)
    old = f"{prev:>19.3f}{prev / ms:>9.2f}" if prev else f"{'-':>19}{'-':>9}"
    print(f"{w.name:<20}{ms:>9.3f}{old}{w.flops / ms / 1e6:>10.1f}{tune_s:>12.1f}"
          f"{load:>8.1f}", flush=True)
    print(f"    best config: {best[0].config}", flush=True)


def best_kernel(w: Workload, work_dir: str) -> tuple[Callable, Any]:
    """The best kernel of ``w`` in a ``--tdsl-only`` work dir's database, and its record."""
    import tdsl as td
    from tdsl import autotune
    from tdsl.autotune.dispatch import schedule_from_record
    args = tdsl_args(w)
    task = autotune.create_auto_task(args, "llvm")
    path = os.path.join(work_dir, f"tdsl-{w.name}.db")
    if not os.path.exists(path):
        raise SystemExit(f"{w.name}: no database {path}")
    best = autotune.Database(path).best(task.key)
    if not best:
        raise SystemExit(f"{w.name}: no valid record in {path}")
    return td.build(schedule_from_record(best[0], task.outputs), args), best[0]


def compare(todo: list[Workload], dirs: list[str], rounds: int) -> None:
    """The best kernels of two work dirs, checked, then timed interleaved (thread CPU time)."""
    import timing
    a, b = dirs
    print(f"best kernels of A={a} and B={b}, interleaved, {rounds} rounds, thread CPU time")
    print(f"{'workload':<20}{'A ms':>9}{'B ms':>9}{'A/B':>7}  configs")
    for w in todo:
        ins, ref = arrays(w, np.random.default_rng(0))
        (ka, ra), (kb, rb) = best_kernel(w, a), best_kernel(w, b)
        outs = [np.zeros_like(ref), np.zeros_like(ref)]
        for k, o, tag in ((ka, outs[0], "A"), (kb, outs[1], "B")):
            k(*ins, o)
            check(f"{w.name} {tag}", o, ref, depth(w))
        res = timing.interleaved({"A": lambda: ka(*ins, outs[0]), "B": lambda: kb(*ins, outs[1])},
                                 rounds, 0.05, clock=time.thread_time)
        ta, tb = res["A"]["median_s"] * 1e3, res["B"]["median_s"] * 1e3
        print(f"{w.name:<20}{ta:>9.3f}{tb:>9.3f}{ta / tb:>7.2f}  A {ra.config}\n"
              f"{'':<47}B {rb.config}", flush=True)


def print_rows(rows: list[Row]) -> None:
    head = (f"{'workload':<20}{'tdsl ms':>9}{'MS ms':>9}{'MS/tdsl':>9}{'tdsl GF/s':>10}"
            f"{'tdsl tune s':>12}{'MS tune s':>10}{'load':>16}")
    print(head)
    print("-" * len(head))
    for r in rows:
        gf = r.w.flops / r.tdsl_s / 1e9
        load = "/".join(f"{v:.1f}" for v in r.loads)
        print(f"{r.w.name:<20}{r.tdsl_s * 1e3:>9.3f}{r.ms_s * 1e3:>9.3f}{r.ms_s / r.tdsl_s:>9.2f}"
              f"{gf:>10.1f}{r.tdsl_tune:>12.1f}{r.ms_tune:>10.1f}{load:>16}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=9, help="interleaved timing rounds")
    ap.add_argument("--only", nargs="*", default=[], help="workload names (default: all)")
    ap.add_argument("--trace", action="store_true", help="print every MetaSchedule trace")
    ap.add_argument("--ms-timeout", type=float, default=120.0,
                    help="MetaSchedule runner timeout, seconds (its default: 30)")
    ap.add_argument("--work-dir", default=None, help="databases and MS logs (default: /tmp/...)")
    ap.add_argument("--tdsl-only", action="store_true",
                    help="tune and time tdsl alone (no TVM); MS figures from an earlier run")
    ap.add_argument("--seed", type=int, default=0, help="tdsl tuner's seed")
    ap.add_argument("--l1d-bytes", type=int, default=None,
                    help="--tdsl-only: the L1 data cache the sketch bounds accumulators by "
                         "(default: the host's; 1073741824: no bound)")
    ap.add_argument("--compare", nargs=2, metavar="DIR",
                    help="re-time the best kernels of two --tdsl-only work dirs, interleaved")
    ap.add_argument("--retime", metavar="DIR",
                    help="re-time both sides' best kernels of a full run's work dir (no tuning)")
    opts = ap.parse_args()
    if opts.compare:
        known = {w.name: w for w in WORKLOADS}
        names = opts.only or [w.name for w in WORKLOADS
                              if os.path.exists(os.path.join(opts.compare[0],
                                                             f"tdsl-{w.name}.db"))]
        bad = [n for n in names if n not in known]
        if bad:
            raise SystemExit(f"unknown workload(s) {bad}; known: {', '.join(known)}")
        compare([known[n] for n in names], opts.compare, opts.rounds)
        return
    if opts.tdsl_only:
        tdsl_only(opts)
        return
    try:
        import tvm
        from tvm.s_tir import meta_schedule  # noqa: F401
    except Exception as e:          # an optional peer: nothing to compare against
        print(f"metaschedule_peer: TVM with MetaSchedule is not importable ({e}); skipped "
              f"(pip install apache-tvm)")
        return
    if opts.retime:
        opts.work_dir = opts.retime
        retime(selected(opts)[0], opts.retime, opts.rounds)
        return
    todo, work_dir = selected(opts)
    try:
        import tvm_ffi
        ffi = getattr(tvm_ffi, "__version__", "?")
    except ImportError:
        ffi = "?"
    print(f"TVM {tvm.__version__} (tvm-ffi {ffi}), target {host_target()}; {opts.trials} trials "
          f"each, one thread; work dir {work_dir}; load at start {os.getloadavg()} on "
          f"{os.cpu_count()} CPUs", flush=True)
    t0 = time.perf_counter()
    import tvm.s_tir.tensor_intrin  # noqa: F401  (MS's builds need it; a one-time cost)
    print(f"import tvm.s_tir.tensor_intrin (once, not in MS's tune s): "
          f"{time.perf_counter() - t0:.1f} s", flush=True)
    rows = []
    for w in todo:
        rows.append(run_one(w, opts.trials, opts.rounds, work_dir, opts.ms_timeout))
        print_rows(rows[-1:])
        r = rows[-1]
        if opts.trace or r.ms_s < r.tdsl_s:
            print(f"--- MetaSchedule's best schedule for {w.name}:\n{r.trace}\n---")
        sys.stdout.flush()
    print()
    print_rows(rows)
    print("(MS/tdsl above 1: tdsl's kernel is faster; tune s: wall seconds, load: 1-minute load "
          "average before tdsl's tuning / before MS's / after)")


def selected(opts: Any) -> "tuple[list, str]":
    """The workloads ``--only`` names (all by default) and the work folder (made)."""
    known = {w.name: w for w in WORKLOADS}
    bad = [n for n in opts.only if n not in known]
    if bad:
        raise SystemExit(f"unknown workload(s) {bad}; known: {', '.join(known)}")
    todo = [known[n] for n in opts.only] if opts.only else WORKLOADS
    work_dir = opts.work_dir or tempfile.mkdtemp(prefix="ms-peer-")
    os.makedirs(work_dir, exist_ok=True)
    return todo, work_dir


def tdsl_only(opts: Any) -> None:
    todo, work_dir = selected(opts)
    print(f"tdsl only: {opts.trials} trials, seed {opts.seed}, one thread, thread CPU time; "
          f"work dir {work_dir}; MS figures: an earlier full run's, re-timed by thread CPU "
          f"time (PREVIOUS_MS), not measured now")
    head = (f"{'workload':<20}{'tdsl ms':>9}{'MS ms (prev, cpu)':>19}{'MS/tdsl':>9}"
            f"{'tdsl GF/s':>10}{'tdsl tune s':>12}{'load':>8}")
    print(head)
    print("-" * len(head), flush=True)
    for w in todo:
        sketch = {"l1d_bytes": opts.l1d_bytes} if opts.l1d_bytes else {}
        run_tdsl_only(w, opts.trials, opts.rounds, work_dir, opts.seed, **sketch)


if __name__ == "__main__":
    main()
