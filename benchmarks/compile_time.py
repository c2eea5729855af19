#!/usr/bin/env python
"""Cold compile time of the model zoo, per phase.

    python benchmarks/compile_time.py [--models resnet18 bert ...] [--size bench]
                                      [--batch 1] [--warm] [--profile DIR] [--json PATH]

Each model compiles with ``tdsl.compile(model, inputs)`` (no tuning records) in a fresh
Python process whose disk build cache is an empty temporary folder (``TDSL_CACHE_DIR``), so
both the process-wide and the on-disk caches start empty ("cold").  ``--warm`` adds a second
process on the same cache folder (the disk cache then holds every kernel).

The phases (seconds):

* ``imports``: the modules a process's first compile imports (PyTorch's export stack,
  tdsl's compiler), imported before the clock of the other phases starts;
* ``export``: ``torch.export.export``; ``decomp``: ``run_decompositions`` (both PyTorch's,
  outside tdsl's control); ``import``: the FX import;
* ``passes``: the graph passes (``optimize``); ``fusion``; ``declare``: each group's compute
  declaration and structural hash;
* ``build``: the wall time of building the distinct kernels (on the build pool's threads);
  the columns after it split that time by stage, **summed over the pool's threads** (so
  they may add up to more than ``build``): ``sched`` (``ops.schedule``), ``lower``,
  ``prep`` (the LLVM backend's ``prepare``), ``key`` (cache key), ``cgen`` (LLVM IR
  generation), ``parse``, ``opt`` (LLVM's pipeline), ``emit`` (machine code), ``jit``
  (linking);
* ``plan``: the first call's memory plan and launch lists; ``total``: compile plus the
  first call (without ``imports``), wall seconds; ``cpu``: the CPU seconds of the whole
  process meanwhile (all threads: less sensitive to other processes' load than ``total``).

``--cpu`` measures every phase in CPU seconds of the thread running it (``time.thread_time``)
instead of wall seconds: with other processes on the cores, wall times mostly measure the
wait for a core.  It implies ``--serial`` and runs tdsl's deep-recursion passes on the calling
thread (so that each phase's work is on the thread that times it).

``--profile DIR`` writes a cProfile of each model's compile to ``DIR/<model>.prof`` (with
``--serial``, which builds on one thread, it includes the kernel builds).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parent
MODELS = ("resnet18", "mobilenet_v2", "bert", "gpt2", "mlp")
HEAD = ("export", "decomp", "import", "passes", "fusion", "declare", "build")
STAGES = ("sched", "lower", "prep", "key", "cgen", "parse", "opt", "emit", "jit")
TAIL = ("plan", "total", "cpu")


class Timers:
    """Inclusive seconds per phase, summed over threads; a phase re-entered on the same
    thread (recursion) counts once."""

    def __init__(self, clock: Any = time.perf_counter) -> None:
        self.clock = clock
        self.seconds: dict[str, float] = {}
        self._lock = threading.Lock()
        self._local = threading.local()

    def wrap(self, phase: str, fn: Any) -> Any:
        def timed(*a: Any, **kw: Any) -> Any:
            active = getattr(self._local, "active", None)
            if active is None:
                active = self._local.active = set()
            if phase in active:
                return fn(*a, **kw)
            active.add(phase)
            t0 = self.clock()
            try:
                return fn(*a, **kw)
            finally:
                dt = self.clock() - t0
                active.discard(phase)
                with self._lock:
                    self.seconds[phase] = self.seconds.get(phase, 0.0) + dt
        return timed


@contextmanager
def instrumented(t: Timers) -> Iterator[None]:
    """Wrap the functions of each phase where their callers look them up."""
    import torch
    import tdsl
    import tdsl.lowering
    import tdsl.ops
    import importlib
    lb, lc, lj, lp = (importlib.import_module(f"tdsl.backends.llvm.{m}")
                      for m in ("build", "cache", "jit", "prepare"))
    from tdsl.frontend import api
    from tdsl.graph import runtime as rt
    ep_cls = torch.export.ExportedProgram
    spots = [(torch.export, "export", "export"), (ep_cls, "run_decompositions", "decomp"),
             (api, "import_fx", "import"), (rt, "optimize", "passes"), (rt, "fuse", "fusion"),
             (rt, "declare_kernel", "declare"), (rt.CompiledGraph, "_build_all", "build"),
             (tdsl.ops, "schedule", "sched"), (tdsl.lowering, "lower", "lower"),
             (lp, "prepare", "prep"), (lc, "key_function", "key"), (lb, "generate", "cgen"),
             (lb, "parse", "parse"), (lb, "optimize", "opt"), (lb, "emit_object", "emit"),
             (lj, "link", "jit"), (rt.CompiledGraph, "plan", "plan")]
    saved = []
    for obj, name, phase in spots:
        fn = getattr(obj, name)
        saved.append((obj, name, fn))
        setattr(obj, name, t.wrap(phase, fn))
    try:
        yield
    finally:
        for obj, name, fn in reversed(saved):
            setattr(obj, name, fn)


def preimport() -> None:
    """Import what the first compile of a process would import (PyTorch's export and
    functorch stack, tdsl's frontend and LLVM backend): a one-off cost of a fresh process,
    reported as its own column and not in ``export``."""
    import importlib
    for m in ("torch._dynamo", "torch.export._trace", "torch._functorch.aot_autograd",
              "torch._decomp", "tdsl.frontend", "tdsl.graph", "tdsl.backends.llvm",
              "tdsl.ops.schedules.llvm", "tdsl.lowering", "llvmlite.binding"):
        importlib.import_module(m)


def measure(name: str, size: str, batch: int, profile: "str | None", serial: bool = False,
            cpu: bool = False) -> dict:
    """Compile ``name`` once in this process; its phases, kernel counts and total.
    ``serial``: build the kernels on one thread (cProfile sees only the calling thread)."""
    import torch
    import tdsl
    if serial or cpu:
        from tdsl.graph import runtime
        runtime.available_cpus = lambda: 1
        if profile or cpu:   # no worker thread for deep recursion (these models are shallow)
            import tdsl.deep
            tdsl.deep._run_deep = lambda fn, a, kw: fn(*a, **kw)
    from tdsl.testing import models
    torch.manual_seed(0)
    model, inputs = models.make(name, size, batch=batch)
    clock = time.thread_time if cpu else time.perf_counter
    t = Timers(clock)
    t0 = clock()
    preimport()
    t.seconds["imports"] = clock() - t0
    prof = None
    if profile:
        import cProfile
        prof = cProfile.Profile()
    with instrumented(t):
        t0, c0 = time.perf_counter(), time.process_time()
        if prof is not None:
            prof.enable()
        cm = tdsl.compile(model, inputs)
        cm(*inputs)            # the first call makes the memory plan
        if prof is not None:
            prof.disable()
        total = time.perf_counter() - t0
        cpu_s = time.process_time() - c0
    if prof is not None:
        Path(profile).mkdir(parents=True, exist_ok=True)
        prof.dump_stats(str(Path(profile) / f"{name}.prof"))
    rep = cm.report.graph
    row = {k: t.seconds.get(k, 0.0) for k in ("imports", *HEAD, *STAGES, "plan")}
    row.update(model=name, total=total, cpu=cpu_s, kernels=rep.kernels, built=rep.built)
    return row


def child(args: argparse.Namespace) -> None:
    row = measure(args.child, args.size, args.batch, args.profile, args.serial, args.cpu)
    print("ROW " + json.dumps(row))


def run_one(name: str, args: argparse.Namespace, cache_dir: str) -> dict:
    env = dict(os.environ, TDSL_CACHE_DIR=cache_dir)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", name,
           "--size", args.size, "--batch", str(args.batch)]
    if args.profile:
        cmd += ["--profile", args.profile]
    if args.serial:
        cmd += ["--serial"]
    if args.cpu:
        cmd += ["--cpu"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    rows = [ln[4:] for ln in r.stdout.splitlines() if ln.startswith("ROW ")]
    if r.returncode != 0 or not rows:
        raise SystemExit(f"{name}: failed (rc {r.returncode})\n{r.stderr[-3000:]}")
    return json.loads(rows[-1])


def table(rows: list) -> str:
    cols = ("model", "mode", "kern", "built", "imports", *HEAD, *STAGES, *TAIL)
    out = [" ".join(f"{c:>8}" if i else f"{c:<13}" for i, c in enumerate(cols))]
    for r in rows:
        cells = [f"{r['model']:<13}", f"{r['mode']:>8}", f"{r['kernels']:>8}",
                 f"{r['built']:>8}"]
        cells += [f"{r[c]:>8.2f}" for c in ("imports", *HEAD, *STAGES, *TAIL)]
        out.append(" ".join(cells))
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="+", default=list(MODELS))
    p.add_argument("--size", default="bench")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--warm", action="store_true", help="also a second run on the same cache")
    p.add_argument("--profile", help="folder for cProfile dumps (one per model)")
    p.add_argument("--serial", action="store_true",
                   help="build on one thread (for --profile: cProfile sees one thread)")
    p.add_argument("--cpu", action="store_true",
                   help="phases in CPU seconds of the threads running them (load-robust)")
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} (1, 5 min); "
          f"cpus: {os.cpu_count()}", flush=True)
    rows = []
    for name in args.models:
        with tempfile.TemporaryDirectory(prefix="tdsl-cold-") as d:
            modes = ("cold", "warm") if args.warm else ("cold",)
            for mode in modes:
                row = run_one(name, args, d)
                row["mode"] = mode
                rows.append(row)
                print(f"{name} {mode}: {row['total']:.1f} s", file=sys.stderr, flush=True)
    print(table(rows))
    print(f"load after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
