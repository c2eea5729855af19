"""Measurement: inputs, results with an error enum, and the local builder and runner.

``measure_option(builder=LocalBuilder(), runner=LocalRunner())`` says how the
tuner measures a batch of candidates:

1. the builder replays each candidate's trace and compiles it, in parallel
   worker processes (``LocalBuilder(n_parallel=)``), exporting a shared library;
2. the runner times each built candidate, one at a time, in an isolated worker
   process with a timeout: a kernel that segfaults or hangs kills only that
   process (``RUN_CRASH`` / ``RUN_TIMEOUT``) and the next candidate gets a new one.

Correctness: the reference output (the default schedule's, on random inputs drawn
from a fixed ``seed``) is computed once per task, in the runner's worker process
before its first candidate, under its own ``reference_timeout`` (never inside a
candidate's ``timeout``), and cached on disk under ``reference_dir`` keyed by task
(workload, target, sizes) and seed, so a resumed job or a replacement worker
loads it.  The first run of every candidate is compared with it; a mismatch is
``WRONG_ANSWER``.

Timing: a warm run after the checked one, then ``time_evaluator(number, repeat,
min_repeat_ms)``; a result keeps every sample (``costs``), its figure is the median
and ``spread`` their relative range.  A CPU candidate timed on one thread
(``LocalRunner(n_threads=1)``) is timed by the worker thread's CPU time, which a busy
machine's other processes do not inflate (wall time put a kernel 1.6x slower on a loaded
machine than in the model); every other candidate by wall time.  The clock is one of the
result's ``notes`` ("timing: thread-cpu clock" / "timing: wall clock"), kept in its record.  ``MeasureOption.remeasure`` times a few
candidates again, round-robin over several rounds (the tuner's final top-k).

Nothing of the tuner runs while a candidate is timed: ``measure`` blocks until the
whole batch is done (the parent only waits on pipes and writes each record as it
arrives), the builder's processes are idle while the runner's worker times, and
the tuner trains its cost model only between batches (``Tuner.tune``).

The worker-side functions live in ``measure_jobs``.
"""
from __future__ import annotations

import enum
import os
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from tdsl.errors import TuningError
from tdsl.keywords import check_keywords
from tdsl.runtime.module import timing_clock
from tdsl.runtime.threads import default_num_threads

from . import measure_jobs
from .phases import PhaseTimes
from .workers import JobOutcome, JobResult, WorkerPool


class MeasureErrorNo(enum.IntEnum):
    """Why a measurement has no valid cost (``NO_ERROR``: it has one)."""

    NO_ERROR = 0
    INSTANTIATION_ERROR = 1   # illegal schedule: ScheduleError / LoweringError at replay or lower
    COMPILE_HOST = 2          # the backend failed to compile
    COMPILE_DEVICE = 3
    RUNTIME_DEVICE = 4        # the kernel raised at run time
    WRONG_ANSWER = 5          # the first run differs from the reference
    BUILD_TIMEOUT = 6
    RUN_TIMEOUT = 7           # hung: killed after the runner's timeout
    RUN_CRASH = 8             # the process running it died (segfault, abort)
    BUILD_CRASH = 9
    UNKNOWN_ERROR = 10


@dataclass(frozen=True)
class MeasureInput:
    """What to measure: a task and one of its candidates (by trace)."""

    task: Any
    config: dict
    trace: str
    prog_hash: str
    size: int = 0       # the code it makes (``codesize.emitted_nodes``): builds start largest first


@dataclass(frozen=True)
class MeasureResult:
    """Seconds per run (one per repeat), or an error; ``all_cost`` is the wall time spent."""

    costs: tuple[float, ...]
    error_no: MeasureErrorNo
    error_msg: str = ""
    all_cost: float = 0.0
    timestamp: float = field(default_factory=time.time)
    notes: tuple[str, ...] = ()     # LLVM's remarks on the candidate's build (``bound_notes``)
    threads: int = 0                # CPU threads it ran with (0: not known, or a GPU task)

    @property
    def valid(self) -> bool:
        return self.error_no is MeasureErrorNo.NO_ERROR and bool(self.costs)

    @property
    def mean(self) -> float:
        return sum(self.costs) / len(self.costs) if self.costs else float("inf")

    @property
    def median(self) -> float:
        """The figure a candidate is ranked by (``inf`` when invalid)."""
        return median(self.costs) if self.valid else float("inf")

    @property
    def spread(self) -> float:
        """(slowest - fastest sample) / median: how much the samples disagree."""
        return spread(self.costs)


#: The unscheduled program (``Tuner.default_candidates``: config ``{"__default__": "default"}``)
#: is timed after the rest of its batch, under a timeout of this many times the best cost
#: known by then (at least ``NAIVE_MIN_TIMEOUT`` s, at most the runner's ``timeout``): a
#: naive dense or convolution runs 100-1000x slower than ``ops.schedule``'s program (1 s to
#: 10 s a run), and timing it to the runner's timeout spent half of a model's budget.
NAIVE_TIMEOUT_FACTOR = 100.0
NAIVE_MIN_TIMEOUT = 2.0


def is_naive(config: dict) -> bool:
    """Whether a candidate is the unscheduled program (``Tuner.default_candidates``)."""
    return config.get("__default__") == "default"


def naive_timeout(best_cost: float, timeout: float) -> float:
    """The timeout of the unscheduled program once ``best_cost`` (seconds) is known."""
    if not best_cost < float("inf"):
        return timeout
    return min(timeout, max(NAIVE_MIN_TIMEOUT, NAIVE_TIMEOUT_FACTOR * best_cost))


#: At most this many lines and bytes of a candidate's notes are kept (a record stays small).
MAX_NOTE_LINES = 50
MAX_NOTE_BYTES = 8192


def bound_notes(lines: Sequence[str]) -> tuple[str, ...]:
    """``lines`` cut to ``MAX_NOTE_LINES`` lines and ``MAX_NOTE_BYTES`` bytes (UTF-8), a last
    line saying how many were left out."""
    out: list[str] = []
    size = 0
    for i, line in enumerate(lines):
        line = str(line)[:1000]
        more = len(lines) - i
        if (len(out) == MAX_NOTE_LINES - 1 and more > 1) or \
                size + len(line.encode()) + 1 > MAX_NOTE_BYTES - 64:
            out.append(f"... {more} more note(s) left out")
            break
        out.append(line)
        size += len(line.encode()) + 1
    return tuple(out)


def median(costs: Sequence[float]) -> float:
    """The median of ``costs`` (the upper middle one for an even count; ``inf`` if empty)."""
    if not costs:
        return float("inf")
    c = sorted(costs)
    return c[len(c) // 2]


def spread(costs: Sequence[float]) -> float:
    if not costs:
        return 0.0
    m = median(costs)
    return (max(costs) - min(costs)) / m if m > 0 else 0.0


@dataclass(frozen=True)
class BuildResult:
    """A compiled candidate: a library path (or None: the runner compiles it), or an error."""

    artifact: Optional[str]
    error_no: MeasureErrorNo
    error_msg: str = ""
    seconds: float = 0.0
    notes: tuple[str, ...] = ()     # LLVM's remarks on the build (``bound_notes``)


class LocalBuilder:
    """Compiles candidates in ``n_parallel`` worker processes (default: all CPUs).

    ``backend="interpreter"`` skips compilation: the runner executes the lowered
    function with the reference interpreter (slow; for checking correctness on
    small shapes, or where no compiler is available).  ``longest_first``: start the
    builds of the largest candidates (``MeasureInput.size``) first, so the processes
    finish a batch together.
    """

    @check_keywords
    def __init__(self, n_parallel: "int | None" = None, timeout: float = 30.0,
                 backend: str = "native", build_dir: "str | None" = None,
                 longest_first: bool = True):
        if backend not in ("native", "interpreter"):
            raise TuningError(f"LocalBuilder: backend must be 'native' or 'interpreter', got "
                              f"{backend!r}")
        self.n_parallel = n_parallel or max(1, len(os.sched_getaffinity(0)))
        self.timeout = timeout
        self.backend = backend
        self.longest_first = longest_first
        self._dir = build_dir
        self._tmp: Any = None
        self._pool: "WorkerPool | None" = None

    @property
    def build_dir(self) -> str:
        if self._dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="tdsl-tune-")
            self._dir = self._tmp.name
        return self._dir

    def build(self, inputs: Sequence[MeasureInput]) -> list[BuildResult]:
        if not inputs:
            return []
        if self.backend == "interpreter":
            return [BuildResult(measure_jobs.INTERPRETER, MeasureErrorNo.NO_ERROR) for _ in inputs]
        if self._pool is None:
            self._pool = WorkerPool(min(self.n_parallel, max(1, len(inputs))))
        # the largest first: a big candidate started last would compile alone at the end
        # while the other processes sit idle (the batch takes as long as its last build)
        order = sorted(range(len(inputs)), key=lambda i: -inputs[i].size) \
            if self.longest_first else list(range(len(inputs)))
        jobs = [(inp.task.payload(), inp.task.args_key, inp.trace, str(inp.task.target),
                 os.path.join(self.build_dir, f"{inp.prog_hash or i}.so"), inp.task.name)
                for i, inp in ((i, inputs[i]) for i in order)]
        out: list = [None] * len(inputs)
        for i, r in zip(order, self._pool.map(measure_jobs.build_job, jobs, self.timeout)):
            out[i] = _build_result(r)
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
            self._dir = None


def _build_result(r: JobResult) -> BuildResult:
    if r.outcome is JobOutcome.OK:
        path, err_kind, msg = r.value[:3]
        notes = bound_notes(r.value[3]) if len(r.value) > 3 else ()
        if err_kind is None:
            return BuildResult(path, MeasureErrorNo.NO_ERROR, "", r.seconds, notes)
        no = MeasureErrorNo.INSTANTIATION_ERROR if err_kind == "illegal" else MeasureErrorNo.COMPILE_HOST
        return BuildResult(None, no, msg, r.seconds)
    no = {JobOutcome.TIMEOUT: MeasureErrorNo.BUILD_TIMEOUT, JobOutcome.CRASHED: MeasureErrorNo.BUILD_CRASH,
          JobOutcome.ERROR: MeasureErrorNo.COMPILE_HOST}[r.outcome]
    return BuildResult(None, no, str(r.value)[-2000:], r.seconds)


class LocalRunner:
    """Times built candidates one at a time in an isolated process.

    ``timeout``: seconds for one candidate (check + timing); ``number``,
    ``repeat``, ``min_repeat_ms``: as ``time_evaluator``; ``check_correctness``:
    compare the first run with the reference; ``reject_factor``: a candidate whose
    first run is that many times slower than the best so far is not timed further
    (its first run is its cost); ``pre_run``: a picklable function called in the
    isolated process with the candidate's config before it runs (a test hook).
    ``n_threads`` sets ``TDSL_NUM_THREADS`` for the worker (default: all CPUs).
    ``seed``: of the random inputs; ``reference_timeout``: seconds for computing a
    task's reference output (once per task; when it fails, candidates of that task are
    timed unchecked, with a warning); ``reference_dir``: where references are cached
    (default ``$TDSL_REFERENCE_DIR``, else ``tdsl-reference-<uid>`` in the temp
    folder).  ``pre_run`` is also called before the reference is computed, with
    ``{"__reference__": True}``.  ``reference_log`` lists ``(task key, computed,
    seconds)`` for each reference made resident (computed, or loaded from the cache).
    ``clock``: "thread" or "wall" (``tdsl.runtime.module.CLOCKS``); default (None) "thread"
    for a CPU task when ``n_threads`` is 1, else "wall" (a GPU task always "wall").
    ``rotate_bytes``: consecutive runs take turns over copies of the arguments spanning
    that many bytes, so the operands come from memory as they do inside a model
    (``Module.time_evaluator``); 0, the default: the same arrays each run.
    """

    @check_keywords
    def __init__(self, timeout: float = 10.0, number: int = 1, repeat: int = 5,
                 min_repeat_ms: float = 25.0, check_correctness: bool = True,
                 reject_factor: float = 3.0, pre_run: "Callable[[dict], None] | None" = None,
                 n_threads: "int | None" = None, rtol: float = 1e-3, seed: int = 0,
                 reference_timeout: float = 900.0, reference_dir: "str | None" = None,
                 clock: "str | None" = None, rotate_bytes: int = 0):
        if clock is not None:
            timing_clock(clock)                 # an unknown name fails here, not in a worker
        self.timeout = timeout
        self.clock = clock
        self.rotate_bytes = int(rotate_bytes)
        self.seed = seed
        self.reference_timeout = reference_timeout
        self.reference_dir = reference_dir or os.environ.get("TDSL_REFERENCE_DIR") or \
            os.path.join(tempfile.gettempdir(), f"tdsl-reference-{os.getuid()}")
        self.reference_log: list[tuple[str, bool, float]] = []
        self._references: dict[tuple, "str | None"] = {}   # (task key, target) -> cache path
        self.number = number
        self.repeat = repeat
        self.min_repeat_ms = min_repeat_ms
        self.check_correctness = check_correctness
        self.reject_factor = reject_factor
        self.pre_run = pre_run
        self.rtol = rtol
        env = {"TDSL_NUM_THREADS": str(n_threads)} if n_threads else None
        self.n_threads = n_threads
        self._env = env
        self._pool: "WorkerPool | None" = None

    def options(self) -> dict:
        return {"number": self.number, "repeat": self.repeat, "min_repeat_ms": self.min_repeat_ms,
                "check": self.check_correctness, "rtol": self.rtol,
                "reject_factor": self.reject_factor, "timeout": self.timeout, "seed": self.seed,
                "rotate_bytes": self.rotate_bytes}

    def clock_for(self, target: Any) -> str:
        """The clock this runner times a candidate for ``target`` by (see ``__init__``)."""
        from tdsl.target import TargetKind, as_target
        if str(target) != measure_jobs.INTERPRETER and \
                as_target(target).kind is TargetKind.CUDA:
            return "wall"          # the work runs on the device: the host thread idles
        if self.clock is not None:
            return self.clock
        return "thread" if self.n_threads == 1 else "wall"

    def threads_for(self, target: Any) -> int:
        """The CPU threads a candidate for ``target`` runs with here (its worker inherits
        this process's environment and CPUs); 0 for a GPU task."""
        return cpu_threads(target, self.n_threads or default_num_threads())

    def _reference(self, inp: MeasureInput, artifact: "str | None") -> "str | None":
        """Make the task's reference resident in the worker (computed or loaded), once per
        task and runner, under ``reference_timeout``; its cache path (None: unchecked)."""
        task = inp.task
        target = measure_jobs.INTERPRETER if artifact == measure_jobs.INTERPRETER \
            else str(task.target)
        if (task.args_key, target) in self._references:
            return self._references[(task.args_key, target)]
        path = os.path.join(self.reference_dir,
                            measure_jobs.reference_key(task.args_key, target, self.seed) + ".npz")
        r = self._pool.map(measure_jobs.reference_job,
                           [(task.payload(), task.args_key, task.sizes, target, task.name, self.seed,
                             path, self.pre_run)], self.reference_timeout)[0]
        if r.outcome is JobOutcome.OK:
            computed, seconds = r.value
            self.reference_log.append((task.args_key, computed, seconds))
        else:
            warnings.warn(f"task {task.name!r}: computing the reference output failed "
                          f"({r.outcome.name}: {str(r.value)[-300:]}); its candidates are timed "
                          f"without a correctness check", stacklevel=3)
            path = None
        self._references[(task.args_key, target)] = path
        return path

    def run(self, inputs: Sequence[MeasureInput], builds: Sequence[BuildResult],
            best_cost: float = float("inf"),
            on_result: "Callable[[int, MeasureResult], None] | None" = None) -> list[MeasureResult]:
        if self._pool is None:
            self._pool = WorkerPool(1, self._env)
        results: list[Optional[MeasureResult]] = [None] * len(inputs)
        todo = []
        for i, (inp, b) in enumerate(zip(inputs, builds)):
            if b.error_no is not MeasureErrorNo.NO_ERROR:
                results[i] = MeasureResult((), b.error_no, b.error_msg, b.seconds)
                if on_result:
                    on_result(i, results[i])
            else:
                todo.append(i)
        # the unscheduled program last, with a timeout scaled to the best known by then
        todo = [i for i in todo if not is_naive(inputs[i].config)] + \
            [i for i in todo if is_naive(inputs[i].config)]
        jobs = []
        for i in todo:
            opts = self.options()
            opts["clock"] = self.clock_for(inputs[i].task.target)
            if self.check_correctness:
                opts["ref_path"] = self._reference(inputs[i], builds[i].artifact)
                opts["check"] = opts["ref_path"] is not None
            jobs.append((inputs[i].task.payload(), inputs[i].task.args_key, inputs[i].task.sizes,
                         str(inputs[i].task.target), builds[i].artifact, inputs[i].trace,
                         inputs[i].config, opts, best_cost, self.pre_run, inputs[i].task.name))
        best = [best_cost]

        def done(j: int, r: JobResult) -> None:
            i = todo[j]
            note = clock_note(jobs[j][7]["clock"])
            results[i] = _run_result(r, builds[i].seconds, (note, *builds[i].notes),
                                     self.threads_for(inputs[i].task.target))
            if results[i].valid:
                best[0] = min(best[0], results[i].median)
            if on_result:
                on_result(i, results[i])
        n_first = sum(not is_naive(inputs[i].config) for i in todo)
        self._pool.map(measure_jobs.run_job, jobs[:n_first], self.timeout, done)
        for j in range(n_first, len(jobs)):
            limit = naive_timeout(best[0], self.timeout)
            jobs[j][7]["timeout"] = limit
            jobs[j] = jobs[j][:8] + (best[0],) + jobs[j][9:]
            self._pool.map(measure_jobs.run_job, [jobs[j]], limit,
                           lambda _, r, j=j: done(j, r))
        return [r for r in results if r is not None]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None


def clock_note(clock: str) -> str:
    """The note a result carries to say which clock timed it."""
    return f"timing: {'thread-cpu' if clock == 'thread' else clock} clock"


def cpu_threads(target: Any, threads: int) -> int:
    """``threads`` for a CPU target, 0 for a GPU one (its records answer for any count)."""
    from tdsl.target import TargetKind, as_target
    if str(target) == measure_jobs.INTERPRETER:
        return threads
    return 0 if as_target(target).kind is TargetKind.CUDA else int(threads)


def timing_threads(runner: Any, target: Any) -> int:
    """The CPU threads ``runner`` times candidates of ``target`` with: what their records
    will say (``Record.threads``; 0 when it cannot be known here, e.g. a remote runner
    using all its workers' CPUs)."""
    if hasattr(runner, "threads_for"):
        return runner.threads_for(target)
    return cpu_threads(target, getattr(runner, "n_threads", None) or 0)


def _run_result(r: JobResult, build_seconds: float, notes: tuple[str, ...] = (),
                threads: int = 0) -> MeasureResult:
    total = build_seconds + r.seconds
    if r.outcome is JobOutcome.OK:
        costs, err_kind, msg = r.value
        if err_kind is None:
            return MeasureResult(tuple(costs), MeasureErrorNo.NO_ERROR, "", total, notes=notes,
                                 threads=threads)
        no = {"wrong": MeasureErrorNo.WRONG_ANSWER, "illegal": MeasureErrorNo.INSTANTIATION_ERROR,
              "compile": MeasureErrorNo.COMPILE_HOST}.get(err_kind, MeasureErrorNo.RUNTIME_DEVICE)
        return MeasureResult((), no, msg, total, notes=notes)
    no = {JobOutcome.TIMEOUT: MeasureErrorNo.RUN_TIMEOUT, JobOutcome.CRASHED: MeasureErrorNo.RUN_CRASH,
          JobOutcome.ERROR: MeasureErrorNo.RUNTIME_DEVICE}[r.outcome]
    return MeasureResult((), no, str(r.value)[-2000:], total, notes=notes)


@dataclass
class MeasureOption:
    builder: Any
    runner: Any

    def measure(self, inputs: Sequence[MeasureInput], best_cost: float = float("inf"),
                on_result: "Callable[[int, MeasureResult], None] | None" = None,
                phases: "PhaseTimes | None" = None) -> list[MeasureResult]:
        """Build then run a batch; ``on_result`` is called as each result is known;
        ``phases`` (the tuner's ``PhaseTimes``) gets the seconds of ``build`` and ``run``."""
        phases = phases or PhaseTimes()
        if hasattr(self.runner, "measure_batch"):      # builds and runs itself (Dask)
            with phases("run"):
                return self.runner.measure_batch(inputs, best_cost, on_result)
        with phases("build"):
            builds = self.builder.build(inputs)
        with phases("run"):
            return self.runner.run(inputs, builds, best_cost, on_result)

    def remeasure(self, inputs: Sequence[MeasureInput], rounds: int = 3) -> list[MeasureResult]:
        """Time ``inputs`` again, interleaved: ``rounds`` round-robin passes (each starting
        one candidate further on), so a burst of load hits all of them alike.  A
        candidate's result has the samples of all its good rounds; it is an error only
        when every round failed (then: its last error)."""
        if not inputs:
            return []
        builds = None if hasattr(self.runner, "measure_batch") else self.builder.build(inputs)
        samples: list[list[float]] = [[] for _ in inputs]
        last: list[Optional[MeasureResult]] = [None] * len(inputs)
        threads = [0] * len(inputs)
        spent = [0.0] * len(inputs)
        n = len(inputs)
        for rd in range(max(1, rounds)):
            order = [(rd + j) % n for j in range(n)]
            sub = [inputs[i] for i in order]
            if builds is None:
                got = self.runner.measure_batch(sub, float("inf"), None)
            else:
                got = self.runner.run(sub, [builds[i] for i in order], float("inf"), None)
            for i, r in zip(order, got):
                last[i] = r
                spent[i] += r.all_cost
                if r.valid:
                    samples[i].extend(r.costs)
                    threads[i] = r.threads
        out = []
        for i in range(n):
            r = last[i]
            if samples[i]:
                out.append(MeasureResult(tuple(samples[i]), MeasureErrorNo.NO_ERROR, "", spent[i],
                                         notes=r.notes, threads=threads[i]))
            else:
                out.append(MeasureResult((), r.error_no, r.error_msg, spent[i], notes=r.notes))
        return out

    def close(self) -> None:
        for part in (self.builder, self.runner):
            if hasattr(part, "close"):
                part.close()


@check_keywords
def measure_option(builder: Any = None, runner: Any = None) -> MeasureOption:
    """How to measure: ``builder`` (default ``LocalBuilder()``), ``runner`` (``LocalRunner()``)."""
    return MeasureOption(builder or LocalBuilder(), runner or LocalRunner())
