"""Jobs of many tasks: share one trial budget among a model's kernels (``extract.py`` finds them).

::

    h = ops.dense(x, w1, b1, activation="relu")
    y = ops.softmax(ops.dense(h, w2, b2))
    tasks, weights = autotune.extract_tasks([h, y])        # one kernel per listed tensor
    job = autotune.tune_tasks(tasks, trials=400, time_budget=600, db="model.db",
                              weights=weights)
    with autotune.apply_history_best("model.db"): ...

``extract_tasks(outputs)`` makes one task per tensor listed -- a model's forward pass
written as ``tdsl.ops`` calls, listing the result of each call that ends a kernel.
A kernel reaches back to the placeholders and to the *other* listed tensors, which
become its inputs; tensors between two listed ones are fused into the later kernel.
Kernels of the same computation at the same sizes (the same task key: names do not
matter) are one task, whose weight counts how many times the model runs it.

``TaskScheduler`` (``tune_tasks``) does what Ansor's task scheduler does: each
round it measures one batch of the task whose improvement is expected to lower
the job's objective -- the weighted total latency ``sum(weight * best seconds)`` --
the most.  After a round-robin warm-up (each task's untuned programs: the default
schedule and ``ops.schedule``'s, a baseline for all at little cost), task ``i``'s
gradient is
``weight_i * (alpha * backward + (1 - alpha) * forward)``: ``backward`` is how much
its best latency fell per round over the last ``backward_window`` rounds,
``forward`` an optimistic guess of the next round's gain -- the larger of
``(best - floor) / rounds`` (latency falling as 1/rounds towards the task's floor; Ansor's
``best / rounds`` when no floor is known) and the gap to the latency at
``1 / beta`` of the best throughput among similar tasks (the same output operator
tag and an arithmetic intensity within 2x: a GEMV is not held to a matmul's FLOP/s)
divided by the rounds since the task last improved, never going below the floor, the
task's roofline, the larger of two:

* memory: the task's memory traffic (its inputs read once, its outputs written once,
  which costs a read and a write) at the rate it can hope for -- for data larger than the
  last-level cache the memory's bandwidth, else the cache's: ``STREAM_FRACTION`` of a
  streaming kernel's rate counted the same way (``stream_bandwidth``, measured when the job
  starts), or a higher rate a task of the job reached;
* compute: its floating-point operations at ``PEAK_FRACTION`` of the CPU's measured FMA
  peak with the job's threads (``backends/llvm/peak.py``), or at a higher rate a task of
  the job reached (a peak measured on a busy machine reads low).

A task at its floor is expected to gain nothing, and one near it little, less with each
round: without the memory floor the heaviest elementwise task of a 12-task job took 58-80
of 192 trials and gained nothing; without the compute floor a matmul at 87% of the peak
took 66, and with a floor but no decay towards it, 74.  The most
negative gradient wins; with probability ``eps_greedy`` a random task does; a
task whose space is exhausted (or that stopped early) is left out.  Every task's
records go to one database, so a killed job resumes where it was.
"""
from __future__ import annotations

import math
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from tdsl.errors import TuningError
from tdsl.keywords import check_keywords
from tdsl.runtime.threads import default_num_threads

from .database import Database, Record, open_database
from .measure import MeasureOption, measure_option as _measure_option
from .roofline import (_PEAK_SHARE, PEAK_FRACTION, STREAM_FRACTION, _bandwidth, _bytes, _peak,
                       _similar, last_level_cache_bytes)
from .task import Task



# ---- the scheduler
@dataclass
class JobResult:
    """What a ``tune_tasks`` job did."""

    tasks: list[Task]
    weights: list[float]
    best: list[Optional[Record]]
    trials: list[int]                      # measured now, per task
    rounds: list[int] = field(default_factory=list)   # the task chosen in each round
    seconds: float = 0.0
    curve: list = field(default_factory=list)   # (elapsed s, trials measured, weighted latency)
    #: each task's roofline floor (seconds; 0: none known) at the end: how far its best is
    #: from what its memory traffic and FLOPs allow (the scheduler's reason to stop)
    floors: list[float] = field(default_factory=list)
    #: after each round: (elapsed s, trials measured, the task, its best record then) --
    #: what a benchmark re-times to draw the job's curve with comparable figures
    best_at: list = field(default_factory=list)
    #: seconds spent on each task (its rounds and its final re-timing)
    task_seconds: list[float] = field(default_factory=list)

    @property
    def weighted_latency(self) -> float:
        """``sum(weight * best seconds)`` (``inf`` while a task has no valid record)."""
        return weighted_latency(self.best, self.weights)

    def summary(self) -> str:
        """A table, a line per task: its weight, trials, best and floor latencies, GFLOP/s
        and share of the job's time; then the weighted latency."""
        lines = [f"{'task':<28} {'weight':>6} {'trials':>6} {'best ms':>10} {'GFLOP/s':>8} "
                 f"{'floor ms':>9} {'time %':>6}"]
        floors = self.floors or [0.0] * len(self.tasks)
        spent = self.task_seconds or [0.0] * len(self.tasks)
        for t, w, b, n, f, sec in zip(self.tasks, self.weights, self.best, self.trials, floors,
                                      spent):
            ms = f"{b.cost * 1e3:.4f}" if b is not None else "-"
            gf = f"{b.gflops:.1f}" if b is not None else "-"
            fl = f"{f * 1e3:.4f}" if f > 0 else "-"
            share = f"{100 * sec / self.seconds:.1f}" if self.seconds > 0 else "-"
            lines.append(f"{t.name[:28]:<28} {w:>6g} {n:>6} {ms:>10} {gf:>8} {fl:>9} "
                         f"{share:>6}")
        lines.append(f"weighted latency {self.weighted_latency * 1e3:.4f} ms  "
                     f"({sum(self.trials)} trials in {self.seconds:.1f} s)")
        return "\n".join(lines)


def weighted_latency(best: Sequence[Optional[Record]], weights: Sequence[float]) -> float:
    total = 0.0
    for b, w in zip(best, weights):
        if b is None or not b.valid:
            return math.inf
        total += w * b.cost
    return total


#: how ``TaskScheduler`` shares the trials among the tasks
STRATEGIES = ("gradient", "round-robin", "sequential")


class TaskScheduler:
    """Shares a trial budget among ``tasks`` by gradient (see the module docstring).

    ``weights``: how often each task's kernel runs (default 1 each);
    ``batch_size``: candidates measured per round; ``tuner``: ``"xgb"`` or
    ``"random"``; ``alpha``, ``beta``, ``backward_window``, ``eps_greedy``: the
    gradient's parameters; ``strategy``: ``"gradient"``, ``"round-robin"`` or
    ``"sequential"`` (after the warm-up, each task in turn until it has had its equal share of
    the trials and of the time: tuning the tasks one after another, the baseline a scheduler
    must beat);
    ``early_stopping``: a task stops after that many trials without a better one;
    ``callbacks``: ``cb(scheduler, task_index, inputs, results)`` after each round;
    ``transfer``: each task's model also trains on the other tasks' records of the job;
    ``pretrained``: the tuners' pre-trained cost model (``XGBTuner``; default ``"auto"``);
    ``memory_bandwidth``, ``cache_bandwidth`` (bytes/s) and ``peak_flops`` (the float32
    FLOP/s of the kernels' threads): the roofs of the tasks' floors (None: measured when
    tuning starts, on a worker when measuring on a cluster; 0: no floor of that kind);
    ``client``: measure on a Dask cluster -- a ``distributed.Client`` or a scheduler address
    (``"tcp://host:8786"``): each candidate is built on a worker and timed there under its
    machine's timing lease (``distributed.dask_option``), with ``measure_option``'s
    settings; the records still go to ``db`` and the choices are the scheduler's.
    """

    @check_keywords
    def __init__(self, tasks: Sequence[Task], weights: "Sequence[float] | None" = None,
                 db: "Database | str | None" = None,
                 measure_option: "MeasureOption | None" = None, tuner: str = "xgb",
                 seed: int = 0, batch_size: int = 8, alpha: float = 0.2, beta: float = 2.0,
                 backward_window: int = 3, eps_greedy: float = 0.05,
                 strategy: str = "gradient", early_stopping: "int | None" = None,
                 callbacks: Sequence[Callable] = (), transfer: bool = False,
                 pretrained: Any = "auto", memory_bandwidth: "float | None" = None,
                 cache_bandwidth: "float | None" = None, peak_flops: "float | None" = None,
                 client: Any = None):
        self.tasks = list(tasks)
        if not self.tasks:
            raise TuningError("TaskScheduler: no task to tune")
        for t in self.tasks:
            if not isinstance(t, Task):
                raise TuningError(f"TaskScheduler: tasks must be autotune.Task objects "
                                  f"(create_auto_task, extract_tasks), got {type(t).__name__}")
        self.weights = [1.0] * len(self.tasks) if weights is None else [float(w) for w in weights]
        if len(self.weights) != len(self.tasks) or \
                any(not (w > 0 and math.isfinite(w)) for w in self.weights):
            raise TuningError(f"TaskScheduler: weights must be one finite positive number per "
                              f"task ({len(self.tasks)}), got {list(self.weights)}")
        if strategy not in STRATEGIES:
            raise TuningError(f"TaskScheduler: strategy must be one of {STRATEGIES}, "
                              f"got {strategy!r}")
        if tuner not in ("xgb", "random"):
            raise TuningError(f"TaskScheduler: tuner must be 'xgb' or 'random', got {tuner!r}")
        self.database = open_database(db)
        self.own_option = measure_option is None or client is not None
        if client is not None:
            from .distributed import dask_option
            self.mopt = dask_option(client, measure_option)
        else:
            self.mopt = measure_option or _measure_option()
        self.tuner_kind = tuner
        self.seed = seed
        self.batch_size = batch_size
        self.alpha = alpha
        self.beta = beta
        self.backward_window = backward_window
        self.eps_greedy = eps_greedy
        self.strategy = strategy
        self.early_stopping = early_stopping
        self.callbacks = list(callbacks)
        self.transfer = transfer
        self.pretrained = pretrained
        self.rng = random.Random(seed)
        self.similar = _similar(self.tasks)
        self.bytes = [_bytes(t, written_twice=True) for t in self.tasks]   # memory traffic
        #: the roofs (None: measured when tuning starts; 0: no such floor): bytes/s of a
        #: kernel whose data does not fit in the last-level cache, bytes/s of one whose data
        #: does (``STREAM_FRACTION`` of ``stream_bandwidth``'s), and the CPU's float32 FMA
        #: peak (FLOP/s) with the job's threads
        self.memory_bandwidth = memory_bandwidth
        self.cache_bandwidth = cache_bandwidth
        self.peak_flops = peak_flops
        self.cache_bytes = last_level_cache_bytes()
        #: each live task's gradient at the last choice by gradient (for ``callbacks``)
        self.gradients: dict[int, float] = {}
        #: "sequential": each task's share of the trials and seconds, and its seconds so far
        self.share_trials: float = math.inf
        self.share_time: float = math.inf
        self.spent = [0.0] * len(self.tasks)

    def _tuner(self, i: int) -> Any:
        from .tuner import RandomTuner, XGBTuner
        task = self.tasks[i]
        if self.tuner_kind == "random":
            return RandomTuner(task, seed=self.seed + i)
        return XGBTuner(task, seed=self.seed + i,
                        transfer_from=self.database if self.transfer else None,
                        pretrained=self.pretrained)

    def tune(self, trials: "int | None" = None, time_budget: "float | None" = None,
             remeasure_top: int = 3, remeasure_rounds: int = 3,
             progress: bool = True) -> JobResult:
        """Run rounds until ``trials`` (in total, records already in the database count)
        are measured or ``time_budget`` seconds have passed; then re-time each task's
        ``remeasure_top`` fastest programs (``remeasure_rounds`` interleaved rounds)."""
        if trials is None and time_budget is None:
            raise TuningError("tune_tasks: give trials=, time_budget= or both")
        from .tuner import _timing_lease
        t0 = time.perf_counter()
        n = len(self.tasks)
        if self.strategy == "gradient":
            self._measure_roofs()
        budget = trials if trials is not None else sys.maxsize
        lease = _timing_lease(None, self.database, self.mopt)
        tuners = [self._tuner(i) for i in range(n)]
        sessions = [tuners[i].session(budget, self.mopt, db=self.database,
                                      early_stopping=self.early_stopping,
                                      batch_size=self.batch_size,
                                      lease=lease if lease is not None else False,
                                      callbacks=[self._callback(i)])
                    for i in range(n)]
        result = JobResult(self.tasks, self.weights, [None] * n, [0] * n)
        history: list[list[float]] = [[s.best_cost] for s in sessions]
        rounds = [0] * n
        alive = [True] * n
        bar = _Bar(trials, time_budget, progress)
        self.share_trials = budget / n if trials is not None else math.inf
        self.share_time = time_budget / n if time_budget is not None else math.inf
        self.spent = [0.0] * n

        def over() -> bool:
            job_done = sum(s.done for s in sessions)
            return job_done >= budget or \
                (time_budget is not None and time.perf_counter() - t0 >= time_budget)

        try:
            # warm-up: one round of each task without a valid record yet, round-robin
            # (a resumed task with a valid record needs none)
            queue = [i for i in range(n) if not math.isfinite(sessions[i].best_cost)]
            while any(alive) and not over():
                i = queue.pop(0) if queue else self._choose(sessions, history, rounds, alive)
                if not alive[i]:
                    continue
                before = sessions[i].res.trials
                started = time.perf_counter()
                # a warm-up round measures just the untuned programs: a baseline for every
                # task at little cost, before the budget goes where it gains the most
                size = len(sessions[i].defaults) if not rounds[i] and sessions[i].defaults \
                    else self.batch_size
                if not sessions[i].step(min(size, budget - sum(s.done for s in sessions))):
                    alive[i] = False
                    continue
                rounds[i] += 1
                self.spent[i] += time.perf_counter() - started
                history[i].append(sessions[i].best_cost)
                result.rounds.append(i)
                result.trials[i] = sessions[i].res.trials
                result.best[i] = tuners[i].best_record
                wl = weighted_latency(result.best, self.weights)
                result.curve.append((time.perf_counter() - t0, sum(result.trials), wl))
                result.best_at.append((time.perf_counter() - t0, sum(result.trials), i,
                                       result.best[i]))
                bar.update(sessions[i].res.trials - before, self.tasks[i].name, wl,
                           time.perf_counter() - t0)
            if remeasure_top > 0 and remeasure_rounds > 0:
                for i, s in enumerate(sessions):
                    started = time.perf_counter()
                    s.remeasure(remeasure_top, remeasure_rounds)
                    self.spent[i] += time.perf_counter() - started
        finally:
            bar.close()
            for s in sessions:
                s.close()
            if self.own_option:
                self.mopt.close()
            if lease is not None:
                lease.close()
        for i, t in enumerate(tuners):
            result.best[i] = t.best_record
            result.trials[i] = sessions[i].res.trials
        best = [t.best_cost for t in tuners]
        rates = self._bandwidths(best)
        reached = self._flops_reached(best)
        result.floors = [min(best[i], self._floor(i, *rates, reached)) for i in range(n)]
        result.task_seconds = list(self.spent)
        result.seconds = time.perf_counter() - t0
        return result

    def _measure_roofs(self) -> None:
        """Measure the roofs not given (about 0.2 s) with the threads kernels are timed with,
        where they are timed: on a worker of a remote runner (``DaskRunner.call``)."""
        call = getattr(self.mopt.runner, "call", None)
        if call is not None:
            self.cache_bytes = call(last_level_cache_bytes)       # the workers' cache
        threads = getattr(self.mopt.runner, "n_threads", None)
        if call is None:
            threads = threads or default_num_threads()

            def call(f: Callable, *args: Any) -> Any:
                return f(*args)
        if self.memory_bandwidth is None:
            self.memory_bandwidth = STREAM_FRACTION * call(_bandwidth, 8 * self.cache_bytes,
                                                           threads)
        if self.cache_bandwidth is None:
            self.cache_bandwidth = STREAM_FRACTION * call(_bandwidth, self.cache_bytes // 4,
                                                          threads)
        if self.peak_flops is None:
            self.peak_flops = call(_peak, threads)

    def _bandwidths(self, best: Sequence[float]) -> tuple[float, float]:
        """(bytes/s in memory, in cache) the tasks can hope for, given their best seconds:
        the measured roofs, or the best rates tasks reached (a measured roof is only an
        estimate) -- in memory, of tasks whose data exceeds the last-level cache."""
        rates = {j: self.bytes[j] / b for j, b in enumerate(best) if math.isfinite(b) and b > 0}
        in_cache = max([self.cache_bandwidth or 0.0] + list(rates.values()))
        in_memory = max([self.memory_bandwidth or 0.0] + [r for j, r in rates.items()
                                                          if self.bytes[j] > self.cache_bytes])
        return in_memory, in_cache

    def _flops_reached(self, best: Sequence[float]) -> float:
        """The highest float32-equivalent FLOP/s a task of the job reached (0: none).  The
        peak is measured once, on a machine that may be busy: on a shared 2-core machine
        it read 47 GFLOP/s while MobileNetV2's pointwise convolutions ran at 97, and every
        task above that "floor" was expected to gain nothing -- 30 of 32 tasks were never
        tuned.  A rate a kernel reached is one the others may hope for."""
        top = 0.0
        for t, b in zip(self.tasks, best):
            share = _PEAK_SHARE.get(str(t.outputs[-1].outputs[0].dtype), 0.0)
            if share > 0 and t.flop > 0 and math.isfinite(b) and b > 0:
                top = max(top, t.flop / b / share)
        return top

    def _floor(self, i: int, in_memory: float, in_cache: float,
               flops_reached: float = 0.0) -> float:
        """Task ``i``'s roofline floor in seconds (0: none known); ``flops_reached``
        (``_flops_reached``) raises the compute roof above the measured peak's share."""
        rate = in_memory if self.bytes[i] > self.cache_bytes else in_cache
        memory = self.bytes[i] / rate if rate > 0 else 0.0
        roof = max(self.peak_flops * PEAK_FRACTION, flops_reached) if self.peak_flops else 0.0
        peak = roof * _PEAK_SHARE.get(str(self.tasks[i].outputs[-1].outputs[0].dtype), 0.0)
        compute = self.tasks[i].flop / peak if peak > 0 else 0.0
        return max(memory, compute)

    def _callback(self, i: int) -> Callable:
        def cb(tuner: Any, inputs: Any, results: Any) -> None:
            for f in self.callbacks:
                f(self, i, inputs, results)
        return cb

    def _choose(self, sessions: Sequence[Any], history: Sequence[list[float]],
                rounds: Sequence[int], alive: Sequence[bool]) -> int:
        """The task of the next round (see the module docstring)."""
        live = [i for i in range(len(sessions)) if alive[i]]
        if self.strategy == "sequential":
            for i in live:
                if sessions[i].done < self.share_trials and self.spent[i] < self.share_time:
                    return i
            # every share used up (a task ended early, or rounding): the rest round-robin
        if self.strategy != "gradient":
            return min(live, key=lambda i: (rounds[i], i))
        if self.rng.random() < self.eps_greedy:
            return self.rng.choice(live)
        best = [s.best_cost for s in sessions]
        in_memory, in_cache = self._bandwidths(best)
        reached = self._flops_reached(best)
        grads = {}
        for i in live:
            c = best[i]
            if not math.isfinite(c):
                return i        # no valid program yet: anything found is a gain
            h = history[i]
            w = self.backward_window
            backward = (h[-1] - h[-1 - w]) / w if len(h) > w and math.isfinite(h[-1 - w]) \
                else 0.0
            # the next round's latency if it falls as 1/rounds towards the task's floor
            floor = min(c, self._floor(i, in_memory, in_cache, reached))
            g_next = c - (c - floor) / max(1, rounds[i])
            # the best throughput (FLOP/s) reached by a similar task: the gap to it, less
            # with each round the task has not improved (without that fading, a MobileNetV2
            # convolution at a sixth of a similar one's rate, 2x over its compute floor, won
            # 266 of a 32-task job's 368 trials and gained nothing after its fifth round)
            top = max((self.tasks[j].flop / best[j] for j in self.similar[i]
                       if math.isfinite(best[j]) and best[j] > 0), default=0.0)
            if top > 0 and self.tasks[i].flop > 0:
                target = self.beta * self.tasks[i].flop / top
                g_next = min(g_next, c - (c - target) / _rounds_since_gain(h))
            g_next = max(g_next, floor)
            forward = g_next - c
            grads[i] = self.weights[i] * (self.alpha * backward + (1 - self.alpha) * forward)
        self.gradients = grads
        low = min(grads.values())
        return self.rng.choice([i for i, g in grads.items() if g == low])


def _rounds_since_gain(history: Sequence[float]) -> int:
    """1 + the rounds at the end of a task's best-latency ``history`` that did not lower it
    (1: the last round improved)."""
    n = 1
    while n < len(history) and not history[-n] < history[-n - 1]:
        n += 1
    return n


class _Bar:
    """One progress bar over the whole job (tqdm when installed, else a line per round)."""

    def __init__(self, trials: "int | None", time_budget: "float | None", enabled: bool):
        self.enabled = enabled
        self.trials = trials
        self.time_budget = time_budget
        self.done = 0
        self.bar: Any = None
        if enabled:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=trials, desc="tuning job", unit="trial", file=sys.stderr,
                                dynamic_ncols=True)
            except ImportError:
                self.bar = None

    def update(self, n: int, task: str, wl: float, elapsed: float) -> None:
        if not self.enabled:
            return
        self.done += n
        lat = f"{wl * 1e3:.3f} ms" if math.isfinite(wl) else "-"
        if self.bar is not None:
            self.bar.set_postfix_str(f"task {task}  weighted latency {lat}")
            self.bar.update(n)
        else:
            total = f"/{self.trials}" if self.trials else ""
            print(f"[tuning job] {self.done}{total} trials  last {task}  weighted latency {lat}  "
                  f"elapsed {elapsed:.0f}s", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@check_keywords
def tune_tasks(tasks: Sequence[Task], trials: "int | None" = None,
               time_budget: "float | None" = None, db: "Database | str | None" = None,
               weights: "Sequence[float] | None" = None,
               measure_option: "MeasureOption | None" = None, batch_size: int = 8,
               tuner: str = "xgb", seed: int = 0, strategy: str = "gradient",
               early_stopping: "int | None" = None, remeasure_top: int = 3,
               remeasure_rounds: int = 3, progress: bool = True,
               callbacks: Sequence[Callable] = (), transfer: bool = False,
               pretrained: Any = "auto", client: Any = None) -> JobResult:
    """Tune ``tasks`` together under one budget (``trials`` in total and/or
    ``time_budget`` seconds), all records into ``db``; ``client``: measure on a Dask
    cluster (a ``distributed.Client`` or a scheduler address); see ``TaskScheduler``."""
    sched = TaskScheduler(tasks, weights, db, measure_option, tuner=tuner, seed=seed,
                          batch_size=batch_size, strategy=strategy,
                          early_stopping=early_stopping, callbacks=callbacks, transfer=transfer,
                          pretrained=pretrained, client=client)
    return sched.tune(trials, time_budget, remeasure_top, remeasure_rounds, progress)
