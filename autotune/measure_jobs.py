"""The functions worker processes run: build one candidate, run and time one candidate.

They are module-level (picklable by reference) and return plain tuples
``(value, error_kind, message)``; errors tdsl raises on purpose are classified
here, anything else propagates to the worker loop, which reports it with its
traceback.  Each worker memoizes the unpickled computation, its random inputs and
the reference outputs per task key, for the ``$TDSL_TUNE_TASK_CACHE`` (default
``DEFAULT_TASK_ENTRIES``) most recently used tasks, so a worker serving a long multi-task
run holds a bounded amount (an evicted task's data is reloaded from the reference cache on
disk, or recomputed); ``reference_job`` makes them resident once per
task (before any candidate, under its own timeout) and writes the outputs to an
on-disk cache, from which a replacement process (after a crash) or a resumed job
loads them instead of recomputing.  A Dask worker runs the same jobs in its own
isolated processes (``measure_worker.measure_isolated``: builds in one, the reference step
and timings in the other).
"""
from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from tdsl.errors import BuildError, LoweringError, ScheduleError, ShapeError, TDSLError
from tdsl.keywords import check_keywords
from tdsl.lru import LRU, env_entries
from tdsl.runtime.module import timing_clock
from tdsl.tensor import PlaceholderOp, Tensor

from .irutil import eval_int
from .replay import fresh_schedule, replay

INTERPRETER = "interpreter"
_ILLEGAL = (ScheduleError, LoweringError, ShapeError)

ENV_TASK_ENTRIES = "TDSL_TUNE_TASK_CACHE"
DEFAULT_TASK_ENTRIES = 16


def task_entries() -> int:
    """How many tasks a worker keeps in memory (``$TDSL_TUNE_TASK_CACHE``)."""
    return env_entries(ENV_TASK_ENTRIES, DEFAULT_TASK_ENTRIES)


_computations: "LRU[str, list[Tensor]]" = LRU(task_entries)
_data: "LRU[tuple, tuple[list[np.ndarray], dict[int, np.ndarray]]]" = LRU(task_entries)


def task_args(payload: bytes, key: str) -> list[Tensor]:
    args = _computations.get(key)
    if args is None:
        args = pickle.loads(payload)
        _computations.put(key, args)
    return args


def _outputs(args: Sequence[Tensor]) -> list:
    outs = []
    for t in args:
        if not isinstance(t.op, PlaceholderOp) and t.op not in outs:
            outs.append(t.op)
    return outs


class InterpreterModule:
    """A lowered function run by the reference interpreter, with a time evaluator."""

    def __init__(self, func: Any):
        self.func = func

    def __call__(self, *arrays: Any) -> None:
        from tdsl.interpreter import run
        run(self.func, *arrays)

    @check_keywords
    def time_evaluator(self, func_name: "str | None" = None, dev: Any = None, number: int = 1,
                       repeat: int = 1, min_repeat_ms: float = 0, clock: str = "wall",
                       rotate_bytes: int = 0) -> Callable[..., Any]:
        """As ``Module.time_evaluator``; ``rotate_bytes`` is accepted and ignored (the
        interpreter's own data dwarfs the kernel's)."""
        from tdsl.runtime import measure
        read = timing_clock(clock)

        def evaluate(*arrays: Any) -> Any:
            return measure(lambda: self(*arrays), number, repeat, min_repeat_ms, clock=read)
        return evaluate


def compile_schedule(sch: Any, args: Sequence[Tensor], target: str, name: str) -> Any:
    """A callable module for ``sch`` (the interpreter when ``target`` is ``"interpreter"``)."""
    import tdsl as td
    if target == INTERPRETER:
        return InterpreterModule(td.lower(sch, list(args), name=name))
    return td.build(sch, list(args), target=target, name=name)


def build_job(payload: bytes, key: str, trace: str, target: str, path: str, name: str
              ) -> tuple[Any, Any, str, list[str]]:
    """Replay, compile and export one candidate: (library path, error kind, message, LLVM's
    remarks on the build -- the module's ``llvm:`` notes, kept in the candidate's record)."""
    args = task_args(payload, key)
    try:
        sch = replay(trace, _outputs(args))
        mod = compile_schedule(sch, args, target, name)
    except _ILLEGAL as e:
        return None, "illegal", f"{type(e).__name__}: {e}", []
    except BuildError as e:
        return None, "compile", f"{type(e).__name__}: {e}", []
    notes = [n for n in getattr(mod, "notes", ()) if n.startswith("llvm: ")]
    try:
        mod.export_library(path)
    except (NotImplementedError, BuildError, OSError):
        return None, None, "", notes  # the runner compiles it again in its own process
    return path, None, "", notes


def random_arrays(args: Sequence[Tensor], sizes: Mapping[str, int], seed: int = 0
                  ) -> list[np.ndarray]:
    """Inputs filled with random values, outputs with zeros (shapes bound by ``sizes``)."""
    rng = np.random.default_rng(seed)
    arrays = []
    for t in args:
        shape = tuple(max(1, eval_int(s, sizes, 1)) for s in t.shape)
        dt = np.dtype(str(t.dtype)) if str(t.dtype) != "bool" else np.dtype(bool)
        if not isinstance(t.op, PlaceholderOp):
            arrays.append(np.zeros(shape, dt))
        elif dt.kind == "f":
            arrays.append(rng.uniform(-1, 1, shape).astype(dt))
        elif dt.kind == "b":
            arrays.append(rng.random(shape) < 0.5)
        else:
            arrays.append(rng.integers(-4, 5, shape).astype(dt))
    return arrays


def reference_key(task_key: str, target: str, seed: int) -> str:
    """File-name-safe key of a task's reference outputs: the workload (task key), the
    target that computes them and the input seed."""
    h = hashlib.blake2b(digest_size=12)
    h.update(f"{task_key}|{target}|{seed}".encode())
    return h.hexdigest()


def _save_reference(path: str, ref: Mapping[int, np.ndarray]) -> None:
    """Write atomically (another tuner may read the same file)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".ref-", suffix=".npz", dir=os.path.dirname(path) or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **{f"out{i}": a for i, a in ref.items()})
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _load_reference(path: str, args: Sequence[Tensor], arrays: Sequence[np.ndarray]
                    ) -> "dict[int, np.ndarray] | None":
    """The cached reference outputs, or None when absent or not of the expected shapes."""
    try:
        with np.load(path) as z:
            ref = {int(k[3:]): z[k] for k in z.files}
    except (OSError, ValueError, KeyError):
        return None
    want = {i for i, t in enumerate(args) if not isinstance(t.op, PlaceholderOp)}
    if set(ref) != want or any(ref[i].shape != arrays[i].shape or ref[i].dtype != arrays[i].dtype
                               for i in want):
        return None
    return ref


def _compute_reference(args: Sequence[Tensor], arrays: Sequence[np.ndarray], target: str,
                       name: str) -> dict[int, np.ndarray]:
    """Run the unscheduled program on ``arrays``: the outputs every candidate must
    reproduce.  A CUDA task's reference runs on the CPU (llvm) with ``ops.schedule``'s
    CPU program -- independent of the CUDA code generator, and fast: the unscheduled
    program has no loops bound to GPU threads (a CUDA build of several stages refuses it)
    and on the CPU takes minutes at GPU sizes (a 4096^3 fp16 product: past the device
    machine's 4-minute slot, so tuning on a GPU never timed a candidate)."""
    schedule = fresh_schedule(_outputs(args))
    ref_target = target
    if target != INTERPRETER:
        from tdsl.target import TargetKind, as_target
        if as_target(target).kind is TargetKind.CUDA:
            ref_target = "llvm"
            schedule = _cpu_default(args) or schedule
    mod = compile_schedule(schedule, args, ref_target, name + "_reference")
    mod(*arrays)
    return {i: a.copy() for i, (t, a) in enumerate(zip(args, arrays))
            if not isinstance(t.op, PlaceholderOp)}


def _cpu_default(args: Sequence[Tensor]) -> Any:
    """``ops.schedule``'s CPU schedule of the task's outputs, or None where it has none."""
    from tdsl.ops import schedule as ops_schedule
    try:
        return ops_schedule([op.output(0) for op in _outputs(args)], "llvm")
    except TDSLError:
        return None


def reference_job(payload: bytes, key: str, sizes: Mapping[str, int], target: str, name: str,
                  seed: int, path: "str | None",
                  pre_run: "Callable[[dict], None] | None" = None) -> tuple[bool, float]:
    """Make the task's inputs and reference outputs resident in this worker (and on disk at
    ``path``): loaded from ``path`` when cached there, else computed.  Runs once per task,
    before any candidate and under its own timeout.  Returns (computed now, seconds)."""
    t0 = time.perf_counter()
    if pre_run is not None:
        pre_run({"__reference__": True})
    args = task_args(payload, key)
    arrays = random_arrays(args, sizes, seed)
    ref = _load_reference(path, args, arrays) if path and os.path.exists(path) else None
    computed = ref is None
    if ref is None:
        ref = _compute_reference(args, arrays, target, name)
        if path:
            _save_reference(path, ref)
    _data.put((key, target, seed), (arrays, ref))
    return computed, time.perf_counter() - t0


def _task_data(payload: bytes, key: str, sizes: Mapping[str, int], target: str, check: bool,
               name: str, seed: int = 0, path: "str | None" = None
               ) -> tuple[list[np.ndarray], dict[int, np.ndarray]]:
    """(arrays, reference outputs by argument index): from this process's memory, else the
    reference cache at ``path``, else computed here (when the reference step failed or
    its cache is gone)."""
    got = _data.get((key, target, seed))
    if got is not None and (got[1] or not check):
        return got
    args = task_args(payload, key)
    arrays = random_arrays(args, sizes, seed)
    ref: "dict[int, np.ndarray] | None" = None
    if check:
        ref = _load_reference(path, args, arrays) if path and os.path.exists(path) else None
        if ref is None:
            ref = _compute_reference(args, arrays, target, name)
    _data.put((key, target, seed), (arrays, ref or {}))
    return arrays, ref or {}


def load_candidate(artifact: "str | None", payload: bytes, key: str, trace: str, target: str,
                   name: str) -> Any:
    if artifact and artifact != INTERPRETER:
        import tdsl as td
        return td.load_module(artifact)
    args = task_args(payload, key)
    sch = replay(trace, _outputs(args))
    return compile_schedule(sch, args, INTERPRETER if artifact == INTERPRETER else target, name)


def mismatch(out: np.ndarray, ref: np.ndarray, rtol: float) -> str:
    """'' when ``out`` matches ``ref``, else a short description of the worst difference."""
    if out.dtype.kind != "f":
        bad = np.argwhere(out != ref)
        return "" if not len(bad) else \
            f"{len(bad)} element(s) differ, first at {tuple(int(i) for i in bad[0])}"
    scale = max(1.0, float(np.nanmax(np.abs(ref))) if ref.size and not np.all(np.isnan(ref)) else 1.0)
    close = np.isclose(out, ref, rtol=rtol, atol=rtol * scale, equal_nan=True)
    if close.all():
        return ""
    idx = tuple(int(i) for i in np.argwhere(~close)[0])
    return (f"{int((~close).sum())} element(s) differ, first at {idx}: got {float(out[idx])!r}, "
            f"expected {float(ref[idx])!r}")


def run_job(payload: bytes, key: str, sizes: Mapping[str, int], target: str,
            artifact: "str | None", trace: str, config: dict, opts: dict, best_cost: float,
            pre_run: "Callable[[dict], None] | None", name: str,
            clock: "Callable[[], float] | None" = None) -> tuple[Any, Any, str]:
    """Check then time one candidate: (costs in seconds, error kind, message).

    The first run is checked against the reference; a second, warm run decides whether
    the candidate is worth timing (``reject_factor`` times slower than ``best_cost``,
    confirmed by a third run: those warm runs are its costs); otherwise
    ``time_evaluator`` takes ``repeat`` samples of at least ``min_repeat_ms`` each, or,
    when that would not fit in what is left of ``opts["timeout"]`` (a slow kernel),
    single warm runs are the samples, as many as fit.

    ``opts["clock"]`` names the clock of the costs (``tdsl.runtime.module.CLOCKS``: the
    runner asks for "thread", the calling thread's CPU time, when the candidate runs on
    one thread) and ``opts["rotate_bytes"]`` how many bytes of argument copies the runs
    take turns over (cold operands); both go to ``time_evaluator``, and the clock also
    times the warm runs.  The timeout is always wall time.  ``clock`` (seconds), when
    given, replaces both (tests pass one they drive).
    """
    timing = opts.get("clock", "wall")
    rotate = int(opts.get("rotate_bytes", 0))
    run_clock = clock or timing_clock(timing)
    clock = clock or time.perf_counter
    started = clock()
    try:
        mod = load_candidate(artifact, payload, key, trace, target, name)
        ref_target = INTERPRETER if artifact == INTERPRETER else target
        arrays, ref = _task_data(payload, key, sizes, ref_target, opts["check"], name,
                                 opts.get("seed", 0), opts.get("ref_path"))
    except _ILLEGAL as e:
        return None, "illegal", f"{type(e).__name__}: {e}"
    except BuildError as e:
        return None, "compile", f"{type(e).__name__}: {e}"
    if pre_run is not None:
        pre_run(config)
    for i in ref:
        arrays[i].fill(0)
    try:
        mod(*arrays)
    except TDSLError as e:
        return None, "runtime", f"{type(e).__name__}: {e}"
    for i, r in ref.items():
        msg = mismatch(arrays[i], r, opts["rtol"])
        if msg:
            return None, "wrong", f"output {i}: {msg}"
    warm = [_time_once(mod, arrays, run_clock)]   # the first run was cold: never a cost
    if warm[0] > opts["reject_factor"] * best_cost:
        warm.append(_time_once(mod, arrays, run_clock))
        if min(warm) > opts["reject_factor"] * best_cost:
            return warm, None, ""
    per_repeat = max(min(warm), opts["min_repeat_ms"] / 1e3)
    timeout = opts.get("timeout", float("inf"))
    left = timeout - (clock() - started)
    if per_repeat * (opts["repeat"] + 1) <= 0.6 * left:
        # the defaults are not passed: a module type without these options still times
        extra = {**({"clock": timing} if timing != "wall" else {}),
                 **({"rotate_bytes": rotate} if rotate > 0 else {})}
        res = mod.time_evaluator(number=opts["number"], repeat=opts["repeat"],
                                 min_repeat_ms=opts["min_repeat_ms"], **extra)(*arrays)
        return list(res.results), None, ""
    # a slow kernel: single warm runs are the samples, as many as fit in the timeout
    samples = list(warm)
    while len(samples) < opts["repeat"] and \
            clock() - started + 1.5 * max(samples) < 0.8 * timeout:
        samples.append(_time_once(mod, arrays, run_clock))
    return samples, None, ""


def _time_once(mod: Any, arrays: Sequence[np.ndarray], clock: Callable[[], float]) -> float:
    t0 = clock()
    mod(*arrays)
    return clock() - t0
