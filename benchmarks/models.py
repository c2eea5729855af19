#!/usr/bin/env python
"""Whole-model benchmark: PyTorch eager vs Inductor vs tdsl (untuned and tuned) on CPU.

    python benchmarks/models.py [--models NAME ...] [--threads 1 2] [--batch 1 8]
                                [--repeats 7] [--db PATH] [--quick] [--out PATH]

Models come from ``tdsl.testing.models`` (random weights, BatchNorm with non-trivial running
statistics, eval mode; nothing downloaded), plus torchvision's resnet18 and mobilenet_v2 when
torchvision imports.  For each model, thread count and batch the contenders are:

* ``eager``: the module under ``torch.no_grad()``;
* ``inductor``: ``torch.compile(model)``;
* ``tdsl``: ``torch.compile(model, backend="tdsl")`` (or ``tdsl.compile(model, inputs)``
  when the Dynamo backend is not registered; 'n/a' when neither exists);
* ``tuned``: the same with ``options={"db": PATH}`` when ``--db`` is given ('n/a' otherwise).

Every contender runs at the same thread count (``torch.set_num_threads`` and
``TDSL_NUM_THREADS``), is compiled afresh for it (Inductor bakes the count into its code), and
is timed in interleaved rounds (``timing.interleaved``: each round takes one sample of every
contender on the same inputs, after a rest that lets the previous one's threads go idle);
the table shows medians.  "compile s" is the first call's time (tracing and compiling)
less one eager call.  "err" is max |out - eager| / max |eager| over the outputs.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from timing import interleaved

ROOT = Path(__file__).resolve().parent
CONTENDERS = ("eager", "inductor", "tdsl", "tuned")
TORCHVISION = ("tv_resnet18", "tv_mobilenet_v2")


# ---- models -------------------------------------------------------------------------------------
def torchvision_available() -> "tuple[bool, str]":
    try:
        import torchvision  # noqa: F401
    except Exception as e:  # ImportError, or a broken install (operator registration errors)
        return False, f"{type(e).__name__}: {e}"
    return True, ""


def build(name: str, size: str, batch: int, seed: int = 0):
    """(model, example inputs) for a zoo name or a torchvision one (tv_*)."""
    import torch
    from tdsl.testing import models
    if name in TORCHVISION:
        import torchvision
        ctor = getattr(torchvision.models, name[3:])
        model = models.randomize(ctor(weights=None), seed)
        image = 224 if size == "bench" else 32
        g = torch.Generator().manual_seed(seed + 1)
        return model, (torch.randn(batch, 3, image, image, generator=g),)
    return models.make(name, size, batch=batch, seed=seed)


# ---- the tdsl entry points ----------------------------------------------------------------------
def tdsl_backend() -> "tuple[Optional[Any], str]":
    """What ``torch.compile(backend=...)`` takes for tdsl: "tdsl" when Dynamo lists it (the
    entry point is installed), else the frontend's backend function; (None, why) if absent."""
    try:
        from torch._dynamo import list_backends
        if "tdsl" in list_backends(exclude_tags=()):
            return "tdsl", ""
    except Exception:
        pass
    why = "no 'tdsl' Dynamo backend registered"
    try:
        import importlib
        for mod in ("tdsl.frontend", "tdsl.frontend.dynamo", "tdsl.frontend.torch",
                    "tdsl.frontend.backend"):
            try:
                m = importlib.import_module(mod)
            except ImportError:
                continue
            fn = getattr(m, "backend", None)
            if callable(fn):
                return fn, ""
        why += "; tdsl.frontend has no backend"
    except Exception as e:
        why += f"; tdsl.frontend: {type(e).__name__}: {e}"
    return None, why


def tdsl_direct() -> "Optional[Callable]":
    """``tdsl.compile`` when it exists."""
    try:
        import tdsl
        fn = getattr(tdsl, "compile", None)
        return fn if callable(fn) else None
    except Exception:
        return None


def compile_tdsl(model, inputs, api: str, db: Optional[str], threads: int
                 ) -> "tuple[Callable, list]":
    """A callable running ``model`` through tdsl (``api``: "dynamo" or "direct"), and the
    list its compile reports land in (one per graph Dynamo captures)."""
    import torch
    options: dict = {"num_threads": threads}
    if db:
        options["db"] = db
    if api == "dynamo":
        backend, why = tdsl_backend()
        if backend is None:
            raise RuntimeError(why)
        try:
            from tdsl.frontend import Backend   # records each compile's report
            recorder = Backend(options)
            return torch.compile(model, backend=recorder), recorder.compiles
        except ImportError:
            return torch.compile(model, backend=backend, options=options), []
    fn = tdsl_direct()
    if fn is None:
        raise RuntimeError("tdsl.compile does not exist")
    compiled = fn(model, inputs, options=options)
    return compiled, [compiled.report] if hasattr(compiled, "report") else []


def summarize_reports(reports: list) -> str:
    """Kernels, fallbacks and eagerly run graphs over a model's compile reports."""
    kernels, tuned, fallbacks, eager = 0, 0, {}, []
    for r in reports:
        g = getattr(r, "graph", None)
        kernels += getattr(g, "kernels", 0) or 0
        tuned += len(getattr(g, "tuned", None) or [])
        for op, n in (getattr(r, "fallbacks", None) or {}).items():
            fallbacks[op] = fallbacks.get(op, 0) + n
        eager += list(getattr(r, "eager", []) or [])
    parts = [f"{len(reports)} graph(s), {kernels} kernels"
             + (f" ({tuned} built from tuning records)" if tuned else "")]
    if fallbacks:
        parts.append("fallbacks: " + ", ".join(f"{k} x{v}" for k, v in sorted(fallbacks.items())))
    if eager:
        parts.append("run eagerly: " + "; ".join(str(e)[:120] for e in eager))
    return "; ".join(parts)


def pick_api(requested: str) -> "tuple[Optional[str], str]":
    if requested in ("auto", "dynamo"):
        backend, why = tdsl_backend()
        if backend is not None:
            return "dynamo", ""
        if requested == "dynamo":
            return None, why
    if tdsl_direct() is not None:
        return "direct", ""
    return None, "tdsl.compile does not exist and " + tdsl_backend()[1]


# ---- one configuration --------------------------------------------------------------------------
@dataclass
class Cell:
    """One contender's figures in one configuration (None: not run)."""

    ms: Optional[float] = None
    compile_s: Optional[float] = None
    err: Optional[float] = None
    note: str = ""          # 'n/a: why' or 'fail: why'
    report: str = ""        # tdsl: kernels, fallbacks, graphs run eagerly


@dataclass
class Row:
    model: str
    threads: int
    batch: int
    cells: dict = field(default_factory=dict)


def _flat(out) -> list:
    import torch
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _flat(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in _flat(o)]
    return []


def rel_error(out, ref) -> float:
    """max |out - ref| / max |ref| over all output tensors (inf if the structure differs)."""
    a, b = _flat(out), _flat(ref)
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
        return math.inf
    num = max((float((x.float() - y.float()).abs().max()) for x, y in zip(a, b)), default=0.0)
    den = max((float(y.float().abs().max()) for y in b), default=0.0)
    return num / den if den > 0 else num


def run_config(name: str, threads: int, batch: int, args, api: Optional[str], api_why: str
               ) -> Row:
    import torch
    torch.set_num_threads(threads)
    os.environ["TDSL_NUM_THREADS"] = str(threads)
    torch._dynamo.reset()
    row = Row(name, threads, batch)
    model, inputs = build(name, args.size, batch)
    fns: dict[str, Callable] = {}
    with torch.no_grad():
        ref = model(*inputs)
        t0 = time.perf_counter()
        model(*inputs)
        eager_s = time.perf_counter() - t0
        fns["eager"] = lambda: model(*inputs)
        row.cells["eager"] = Cell(err=0.0)
        plans: dict[str, Optional[Callable[[], Callable]]] = {
            "inductor": None if args.no_inductor else (lambda: torch.compile(model)),
            "tdsl": None if api is None
            else (lambda: compile_tdsl(model, inputs, api, None, threads)),
            "tuned": None if (api is None or not args.db)
            else (lambda: compile_tdsl(model, inputs, api, args.db, threads)),
        }
        for key, make in plans.items():
            if make is None:
                why = ("skipped (--no-inductor)" if key == "inductor" else
                       api_why if api is None else "no --db given")
                row.cells[key] = Cell(note="n/a: " + why)
                continue
            try:
                t0 = time.perf_counter()
                made = make()
                fn, reports = made if isinstance(made, tuple) else (made, None)
                out = fn(*inputs)
                compile_s = max(0.0, time.perf_counter() - t0 - eager_s)
                row.cells[key] = Cell(compile_s=compile_s, err=rel_error(out, ref))
                if reports is not None:
                    row.cells[key].report = summarize_reports(reports)
                fns[key] = (lambda f: lambda: f(*inputs))(fn)
            except Exception as e:
                msg = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                row.cells[key] = Cell(note="fail: " + msg[:300])
                if args.verbose:
                    traceback.print_exc()
        clock = time.thread_time if args.cpu_time else time.perf_counter
        times = interleaved(fns, rounds=args.repeats, min_sample_s=args.min_sample_s,
                            clock=clock)
    for key, t in times.items():
        row.cells[key].ms = t["median_s"] * 1e3
    return row


# ---- where the time goes ------------------------------------------------------------------------
def profile_eager(name: str, threads: int, batch: int, size: str, top: int = 8) -> str:
    """The eager model's op mix: the ``top`` ATen ops by self CPU time (torch profiler, a few
    calls after warm-up), as markdown lines."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    torch.set_num_threads(threads)
    model, inputs = build(name, size, batch)
    with torch.no_grad():
        for _ in range(2):
            model(*inputs)
        calls = 3
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(calls):
                model(*inputs)
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events) or 1.0
    lines = [f"{name} thr={threads} batch={batch}: eager {total / calls / 1e3:.2f} ms per call"]
    for e in events[:top]:
        lines.append(f"  {e.key:<32} {e.self_cpu_time_total / calls / 1e3:8.2f} ms "
                     f"{100 * e.self_cpu_time_total / total:5.1f} %  x{e.count // calls}")
    return "\n".join(lines)


def profile_tdsl(name: str, threads: int, batch: int, size: str, calls: int = 7,
                 top: int = 10, db: Optional[str] = None) -> str:
    """Where a tdsl-compiled model's time goes (``tdsl.compile(...).profile``): each
    kernel's and fallback's own time, the median over ``calls`` calls (thread CPU time at one
    thread, else wall time), the ``top`` ones, the time per anchor op, and the runtime's
    overhead (the whole call less the sum of its steps); ``db``: built with those tuning
    records (the tuned column's build)."""
    import torch
    torch.set_num_threads(threads)
    fn = tdsl_direct()
    if fn is None:
        return f"{name}: tdsl.compile does not exist"
    model, inputs = build(name, size, batch)
    t0 = time.perf_counter()
    compiled = fn(model, inputs, options={"num_threads": threads, **({"db": db} if db else {})})
    compile_s = time.perf_counter() - t0
    # one thread: CPU time of this thread, which a busy machine's preemptions do not inflate
    with torch.no_grad():
        prof = compiled.profile(*inputs, repeat=calls, clock="cpu" if threads == 1 else "wall")
    n = len(prof.steps)
    head = (f"{name} thr={threads} batch={batch}{' tuned' if db else ''}: tdsl "
            f"{prof.call_s * 1e3:.2f} ms per call (compile {compile_s:.1f} s), {n} steps, "
            f"runtime overhead {(prof.call_s - prof.total_s) * 1e6 / max(n, 1):.1f} us per step")
    total = prof.total_s or 1e-12
    by_op = ", ".join(f"{op} {100 * x / total:.0f} %" for op, x in prof.by_op().items())
    return f"{head}\n{prof.table(top)}\nby anchor op: {by_op}"


# ---- the table ----------------------------------------------------------------------------------
def _fmt(v: Optional[float], spec: str) -> str:
    return "" if v is None else format(v, spec)


def _err(v: Optional[float]) -> str:
    return "" if v is None else ("0" if v == 0 else f"{v:.1e}")


def table(rows: list[Row]) -> str:
    head = ["model", "thr", "batch", "eager ms",
            "inductor ms", "×eager", "compile s", "err",
            "tdsl ms", "×eager", "×ind", "compile s", "err",
            "tuned ms", "×eager", "×ind", "compile s", "err"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    notes: list[str] = []
    for r in rows:
        e, i = r.cells["eager"], r.cells["inductor"]
        cols = [r.model, str(r.threads), str(r.batch), _fmt(e.ms, ".2f")]
        for key in ("inductor", "tdsl", "tuned"):
            c = r.cells[key]
            if c.ms is None:
                short = c.note.split(":")[0] if c.note else ""
                if c.note.startswith("fail"):
                    notes.append(f"{r.model} thr={r.threads} batch={r.batch} {key}: {c.note}")
                    short = f"fail [{len(notes)}]"
                cols += [short] + [""] * (3 if key == "inductor" else 4)
                continue
            cols += [_fmt(c.ms, ".2f"), _fmt(e.ms / c.ms, ".2f")]
            if key != "inductor":
                cols.append(_fmt(i.ms / c.ms, ".2f") if i.ms else "")
            cols += [_fmt(c.compile_s, ".1f"), _err(c.err)]
        lines.append("| " + " | ".join(cols) + " |")
    for key in ("inductor", "tdsl", "tuned"):
        ok = [r for r in rows if r.cells[key].ms]
        if ok:
            ge = statistics.geometric_mean([r.cells["eager"].ms / r.cells[key].ms for r in ok])
            line = f"geomean {key} vs eager: {ge:.2f}× over {len(ok)} rows"
            ind = [r for r in ok if r.cells["inductor"].ms]
            if key != "inductor" and ind:
                gi = statistics.geometric_mean([r.cells["inductor"].ms / r.cells[key].ms
                                                for r in ind])
                line += f"; vs inductor: {gi:.2f}×"
            lines.append("\n" + line)
    na = sorted({f"{k}: {r.cells[k].note}" for r in rows for k in CONTENDERS
                 if r.cells[k].note.startswith("n/a")})
    lines += ["", *na] if na else []
    reps = [f"{r.model} thr={r.threads} batch={r.batch} {k}: {r.cells[k].report}"
            for r in rows for k in ("tdsl", "tuned") if r.cells[k].report]
    lines += ["", "tdsl compiles:", *reps] if reps else []
    lines += ["", *[f"[{n}] {t}" for n, t in enumerate(notes, 1)]] if notes else []
    return "\n".join(lines)


# ---- main ---------------------------------------------------------------------------------------
def parse(argv: Optional[list[str]] = None) -> argparse.Namespace:
    from tdsl.testing.models import MODELS
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=None,
                   help=f"of {', '.join(MODELS + TORCHVISION)} (default: all; tv_* only "
                        "when torchvision imports)")
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    p.add_argument("--batch", nargs="+", type=int, default=[1, 8])
    p.add_argument("--repeats", type=int, default=7, help="interleaved rounds (medians)")
    p.add_argument("--min-sample-s", type=float, default=0.2,
                   help="each sample repeats the call to last at least this long")
    p.add_argument("--size", choices=("bench", "tiny"), default="bench")
    p.add_argument("--db", default=None, help="tuning records for the 'tuned' column")
    p.add_argument("--api", choices=("auto", "dynamo", "direct"), default="auto",
                   help="tdsl through torch.compile (dynamo) or tdsl.compile (direct)")
    p.add_argument("--no-inductor", action="store_true", help="skip Inductor (slow compiles)")
    p.add_argument("--cpu-time", action="store_true",
                   help="time by the calling thread's CPU time (one thread only: eager, "
                        "Inductor and tdsl then all run on the calling thread; on a shared "
                        "machine wall time also counts the other processes' turns)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: tiny models, 1 thread, batch 1, 3 rounds")
    p.add_argument("--out", default=None, help="also write the rows as JSON here")
    p.add_argument("--profile", action="store_true",
                   help="print each eager model's op mix (torch profiler) and each tdsl "
                   "kernel's time instead of the table")
    p.add_argument("--verbose", action="store_true", help="print tracebacks of failures")
    args = p.parse_args(argv)
    if args.quick:
        args.size, args.threads, args.batch = "tiny", [1], [1]
        args.repeats, args.min_sample_s = 3, 0.02
    known = MODELS + TORCHVISION
    for m in args.models or ():
        if m not in known:
            p.error(f"unknown model {m!r}; known: {', '.join(known)}")
    if args.repeats < 1 or min(args.threads) < 1 or min(args.batch) < 1:
        p.error("--repeats, --threads and --batch must be >= 1")
    if args.cpu_time and args.threads != [1]:
        p.error("--cpu-time needs --threads 1: with more threads the work runs on other "
                "threads, whose CPU time the calling thread's clock does not see")
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse(argv)
    import torch
    from tdsl.testing.models import MODELS
    tv_ok, tv_why = torchvision_available()
    names = list(args.models or (MODELS + TORCHVISION))
    if not tv_ok and any(n in TORCHVISION for n in names):
        print(f"torchvision does not import ({tv_why}): skipping "
              f"{', '.join(n for n in names if n in TORCHVISION)}")
        names = [n for n in names if n not in TORCHVISION]
    api, api_why = pick_api(args.api)
    print("command: python " + " ".join(shlex.quote(a) for a in
                                        ["benchmarks/models.py", *sys.argv[1:]]))
    print(f"torch {torch.__version__}; tdsl via {api or 'n/a (' + api_why + ')'}; "
          f"size {args.size}; cpus {len(os.sched_getaffinity(0))}; "
          f"loadavg at start {os.getloadavg()[0]:.2f}; clock "
          f"{'thread CPU time' if args.cpu_time else 'wall'}", flush=True)
    if args.profile:
        for threads in args.threads:
            for batch in args.batch:
                for name in names:
                    print(profile_eager(name, threads, batch, args.size), flush=True)
                    if api is not None:
                        print(profile_tdsl(name, threads, batch, args.size), flush=True)
                    if api is not None and args.db:
                        print(profile_tdsl(name, threads, batch, args.size, db=args.db),
                              flush=True)
        return 0
    rows: list[Row] = []
    for threads in args.threads:
        for batch in args.batch:
            for name in names:
                t0 = time.perf_counter()
                row = run_config(name, threads, batch, args, api, api_why)
                rows.append(row)
                print(f"  {name} thr={threads} batch={batch}: "
                      + ", ".join(f"{k} {c.ms:.2f} ms" if c.ms else f"{k} {c.note[:60]}"
                                  for k, c in row.cells.items())
                      + f" ({time.perf_counter() - t0:.0f} s)", flush=True)
    print()
    print(table(rows))
    print(f"\nloadavg at end {os.getloadavg()[0]:.2f} (a shared machine: timings are noisy)")
    if args.out:
        Path(args.out).write_text(json.dumps({"argv": sys.argv, "rows": [
            {"model": r.model, "threads": r.threads, "batch": r.batch,
             "cells": {k: asdict(c) for k, c in r.cells.items()}} for r in rows]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
