"""``compile_graph``: passes, fusion, kernel builds; ``CompiledGraph``: runs them.

A call binds the symbolic sizes from the inputs' shapes, takes (or makes, once per distinct
binding) an ``Executable``: the memory plan and, for each kernel, its native function and
argument list checked once (``Module.bind``: shapes, dtypes, alignment, overlap).  A call
then only patches the pointers of the inputs and of the fresh output arrays into those
lists and calls each function -- a few microseconds per kernel.

Fallback (``torch``) nodes run PyTorch on zero-copy tensors of the buffers
(``torch.from_numpy``); before one runs, tdsl's idle pool workers are told to sleep instead
of spinning (``rest_pool``): they would otherwise take the cores PyTorch's own threads need.
"""
from __future__ import annotations

import contextvars
import ctypes
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import numpy as np

from tdsl.errors import DTypeError, ShapeError, TDSLError
from tdsl.expr import Expr, Var
from tdsl.lru import env_entries
from tdsl.runtime.shape_eval import eval_shape_expr
from tdsl.runtime.threads import available_cpus

from . import opset
from .ir import Graph, GraphError, Value
from .kernels import Kernel, compile_kernel, declare_kernel
from .passes import Alias, Fallback, Group, PassStats, optimize
from .passes.layout import DEFAULT_LAYOUT
from .passes.fusion import fuse
from .passes.rewrite import map_pytree
from .plan import MemoryPlan, Root, make_plan
from .profile import GraphProfile, StepLabel, summarize


@dataclass
class CompileReport:
    """What ``compile_graph`` made."""

    kernels: int = 0
    built: int = 0                   # compiled this time (the others came from the cache)
    fused: list = field(default_factory=list)        # [(kernel name, [ops])]
    fallbacks: dict = field(default_factory=dict)    # torch target name -> count
    aliases: int = 0
    passes: PassStats = field(default_factory=PassStats)
    compile_s: float = 0.0
    build_s: float = 0.0
    notes: list = field(default_factory=list)        # kernels not built as scheduled, why
    #: kernels built from a tuning record of ``db`` (their output stage names); empty
    #: without ``db``
    tuned: list = field(default_factory=list)
    #: kernels ``db`` has no (replayable) record for: built with their default schedules
    #: (said here once rather than warned per kernel)
    untuned: list = field(default_factory=list)
    #: of ``untuned``: kernels whose records were all timed with other thread counts
    other_threads: list = field(default_factory=list)

    def __str__(self) -> str:
        changed = ", ".join(f"{k.replace('_', ' ')} {v}"
                            for k, v in vars(self.passes).items() if v)
        lines = [f"kernels: {self.kernels} ({self.built} built now, "
                 f"{self.kernels - self.built} from the cache), {self.aliases} views; "
                 f"build {self.build_s:.2f} s of {self.compile_s:.2f} s",
                 f"passes: {changed or 'nothing changed'}"]
        if self.fallbacks:
            lines.append("run by PyTorch: " + ", ".join(f"{k} x{n}"
                                                       for k, n in self.fallbacks.items()))
        if self.tuned or self.untuned:
            lines.append(f"built from tuning records: {len(self.tuned)} of "
                         f"{len(self.tuned) + len(self.untuned)} kernels (the others: no "
                         f"record for their shapes and thread count, default schedules)")
        if self.other_threads:
            lines.append(f"  of those, {len(self.other_threads)} have records timed with other "
                         f"thread counts only (a tuned program answers for its own count: "
                         f"tune with the threads the model runs with)")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


class KernelGraph:
    """The kernel-level graph: steps in order (what ``print(cg.graph)`` shows)."""

    def __init__(self, graph: Graph, steps: list, kernels: dict):
        self.source = graph
        self.steps = steps
        self.kernels = kernels

    def __str__(self) -> str:
        def names(vs: Sequence[Value]) -> str:
            return ", ".join(f"%{v.name}" for v in vs if not opset.is_scalar(v))
        lines = [f"kernel graph({names(self.source.inputs)}):"]
        for s in self.steps:
            if isinstance(s, Group):
                k = self.kernels[id(s)]
                tag = " (cached)" if k.cached else ""
                lines.append(f"  %{k.output.name}: {k.output.dtype}{list(k.output.shape)} = "
                             f"{k.name}({names(k.inputs)})  # fused: {' + '.join(k.ops)}{tag}")
            elif isinstance(s, Alias):
                o = s.node.outputs[0]
                lines.append(f"  %{o.name} = view(%{s.node.inputs[0].name}, "
                             f"{list(o.shape)})  # alias, no kernel")
            else:
                n = s.node
                lines.append(f"  {', '.join('%' + v.name for v in n.outputs)} = "
                             f"torch.{n.attrs.get('name', 'op')}({names(n.inputs)})  # fallback")
        lines.append(f"  return {', '.join('%' + v.name for v in self.source.outputs)}")
        return "\n".join(lines)

    __repr__ = __str__


def _pool_rest() -> tuple[Callable[[], None], Callable[[], None]]:
    """(sleep, wake): put tdsl's idle workers to sleep now, restore their spin later."""
    from tdsl.runtime.threads import _started_pool
    saved: list = []

    def sleep() -> None:
        pool = _started_pool()
        if pool is not None and pool.spin_ms > 0:
            saved.append(pool.spin_ms)
            pool.spin_ms = 0.0

    def wake() -> None:
        if saved:
            pool = _started_pool()
            if pool is not None:
                pool.spin_ms = saved.pop()
            saved.clear()
    return sleep, wake


def _address(a: np.ndarray) -> int:
    """The data address of a C-contiguous array (``ctypes.c_char.from_buffer`` where the
    array is writable: several times cheaper than ``a.ctypes.data``)."""
    if a.flags.writeable and a.nbytes:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    return a.ctypes.data


class Executable:
    """One memory plan with each kernel's native function and argument list ready."""

    def __init__(self, cg: "CompiledGraph", plan: MemoryPlan):
        from tdsl.backends.llvm.cabi import raise_status
        self.plan = plan
        self.runs: list[Callable[[], None]] = []
        self.labels: list[StepLabel] = []          # what each of ``runs`` is (profiles)
        self.patches: list[tuple[list, int, str, int]] = []  # (args, pos, "input"/"output", i)
        g = cg.optimized
        self.out_shapes = [plan.shapes[id(v)] for v in g.outputs]
        self.out_dtypes = [np.dtype(v.dtype) for v in g.outputs]
        self.copy_out = [(j, v) for j, v in enumerate(g.outputs)
                         if plan.roots[id(v)] != Root("output", j)]
        self.arrays: dict = {}     # per call: ("input"/"output", i) -> array
        self._keep: list = []
        self._lock = threading.Lock()
        generic = False
        for s in cg.steps:
            if isinstance(s, Group):
                k = cg.kernels[id(s)]
                generic |= self._kernel(k, cg.num_threads, raise_status)
                self.labels.append(StepLabel(k.name, "kernel", tuple(k.ops),
                                             tuple(plan.shapes[id(k.output)])))
            elif isinstance(s, Fallback):
                self._fallback(s, cg.rest_pool)
                name = s.node.attrs.get("name", "op")
                self.labels.append(StepLabel(f"torch.{name}", "torch", (name,), tuple(
                    plan.shapes[id(s.node.outputs[0])]) if s.node.outputs else ()))
        # the per-call arrays by root: for fallbacks, generic launches and copied outputs
        self.needs_arrays = generic or bool(self.copy_out) or any(
            isinstance(s, Fallback) for s in cg.steps)

    # -- arrays of values ---------------------------------------------------------------------
    def _static(self, v: Value) -> "np.ndarray | None":
        r = self.plan.roots[id(v)]
        if r.kind == "const":
            return v.const
        if r.kind == "buffer":
            return self.plan.view(v, v.dtype)
        return None

    def _dynamic(self, v: Value) -> np.ndarray:
        r = self.plan.roots[id(v)]
        a = self._static(v)
        if a is not None:
            return a
        return self.arrays[(r.kind, r.index)].reshape(self.plan.shapes[id(v)])

    def _kernel(self, k: Kernel, num_threads: Optional[int], raise_status: Any) -> bool:
        """Prepare ``k``'s launch; True when it takes the generic (per-call array) path."""
        mod = k.module
        vals = list(k.inputs) + [k.output]
        arrays = []
        dyn = []
        for pos, v in enumerate(vals):
            a = self._static(v)
            if a is None:
                r = self.plan.roots[id(v)]
                a = np.empty(self.plan.shapes[id(v)], v.dtype)   # stands in for the check
                dyn.append((pos, r.kind, r.index))
            arrays.append(a)
        arrs, sizes, ptrs = mod.bind(arrays)
        args = list(ptrs) + [int(sizes[sv]) for sv in mod.func.size_vars]
        for pos, kind, idx in dyn:
            self.patches.append((args, pos, kind, idx))
        if getattr(mod, "_calls_extern", False) or not hasattr(mod, "native_launcher"):
            def run(mod=mod, vals=vals) -> None:   # generic path (externs, other targets)
                mod(*[self._dynamic(v) for v in vals])
            self.runs.append(run)
            return True
        self._keep.append(arrs)
        entry = k.name
        self.runs.append(mod.native_launcher(
            args, num_threads, lambda st, _: raise_status(st, entry)))
        return False

    def _fallback(self, s: Fallback, rest_pool: bool) -> None:
        import torch
        node = s.node
        target = node.attrs["target"]
        sleep, wake = _pool_rest() if rest_pool else (lambda: None, lambda: None)
        name = node.attrs.get("name", "op")

        def run() -> None:
            def tensor(v: Value) -> Any:
                return torch.from_numpy(self._dynamic(v))
            args = map_pytree(node.attrs.get("args", ()), tensor)
            kwargs = map_pytree(node.attrs.get("kwargs", {}), tensor)
            sleep()
            try:
                with torch.no_grad():
                    res = target(*args, **kwargs)
            finally:
                wake()
            results = list(res) if isinstance(res, (tuple, list)) else [res]
            if len(results) < len(node.outputs):
                raise GraphError(f"fallback torch.{name} returned {len(results)} tensor(s), "
                                 f"the graph expects {len(node.outputs)}")
            for v, r in zip(node.outputs, results):
                dst = self._dynamic(v)
                if not isinstance(r, torch.Tensor):
                    r = torch.as_tensor(r)
                if tuple(r.shape) != dst.shape:
                    raise ShapeError(f"fallback torch.{name}: result %{v.name} has shape "
                                     f"{tuple(r.shape)}, the graph expects {dst.shape}")
                np.copyto(dst, r.detach().cpu().numpy(), casting="same_kind")
        self.runs.append(run)

    # -- a call -------------------------------------------------------------------------------
    def __call__(self, inputs: list) -> list:
        with self._lock:    # the argument lists are patched in place: one call at a time
            return self._run(inputs)

    def profile(self, inputs: list, repeat: int, warmup: int,
                clock: Callable[[], float]) -> tuple[list, list]:
        """Per-step seconds of ``repeat`` calls (``samples[i]``: step i's), and the seconds
        of as many whole calls, interleaved, after ``warmup`` untimed calls."""
        samples: list = [[] for _ in self.runs]
        calls: list = []
        with self._lock:
            for _ in range(warmup):
                self._run(inputs)
            for _ in range(repeat):
                self._run(inputs, samples, clock)
                t0 = clock()
                self._run(inputs)
                calls.append(clock() - t0)
        return samples, calls

    def _run(self, inputs: list, samples: "list | None" = None,
             clock: Callable[[], float] = time.perf_counter) -> list:
        arrays = self.arrays
        outs = [np.empty(s, d) for s, d in zip(self.out_shapes, self.out_dtypes)]
        ptr_in = [_address(a) for a in inputs]
        ptr_out = [_address(o) for o in outs]
        if self.needs_arrays:
            for i, a in enumerate(inputs):
                arrays[("input", i)] = a
            for i, o in enumerate(outs):
                arrays[("output", i)] = o
        for args, pos, kind, idx in self.patches:
            args[pos] = ptr_in[idx] if kind == "input" else ptr_out[idx]
        try:
            if samples is None:
                for run in self.runs:
                    run()
            else:
                for run, times in zip(self.runs, samples):
                    t0 = clock()
                    run()
                    times.append(clock() - t0)
            for j, v in self.copy_out:
                np.copyto(outs[j], self._dynamic(v).reshape(outs[j].shape))
        finally:
            arrays.clear()
        return outs


#: How many memory plans (distinct size bindings) a CompiledGraph keeps; each holds its
#: intermediate buffers, so the least recently used go beyond it.
PLANS_ENV_VAR = "TDSL_GRAPH_PLANS"


class CompiledGraph:
    """A graph compiled to tdsl kernels: ``cg(*inputs) -> [np.ndarray]``."""

    def __init__(self, graph: Graph, target: Any = "llvm", db: Any = None,
                 num_threads: Optional[int] = None, rest_pool: bool = True,
                 build_threads: Optional[int] = None, layout: str = DEFAULT_LAYOUT):
        t0 = time.perf_counter()
        self.source = graph
        self.target = target
        self.db = db
        self.num_threads = num_threads
        self.rest_pool = rest_pool
        self.optimized, stats = optimize(graph, _layout_for(target, layout))
        self.steps = fuse(self.optimized)
        self.kernels: dict[int, Kernel] = {}
        self.report = CompileReport(passes=stats)
        for s in self.steps:
            if isinstance(s, Group):
                name = f"k{len(self.kernels)}_{s.anchor.op}"
                # with tuning records, no kernel of the process-wide cache (it may have been
                # built with the default schedule, or under other records)
                self.kernels[id(s)] = declare_kernel(name, s.nodes, s.inputs, s.output, target,
                                                     cache=db is None)
            elif isinstance(s, Fallback):
                nm = s.node.attrs.get("name", "op")
                self.report.fallbacks[nm] = self.report.fallbacks.get(nm, 0) + 1
            else:
                self.report.aliases += 1
        with _apply_db(db, num_threads) as records:
            self._build_all(build_threads)
        if records is not None:
            self.report.tuned = list(records.hits)
            self.report.untuned = list(records.misses)
            self.report.other_threads = list(records.other_threads)
        for k in self.kernels.values():
            self.report.fused.append((k.name, k.ops))
            if k.note:
                self.report.notes.append(f"{k.name}: {k.note}")
        self.report.kernels = len(self.kernels)
        self.graph = KernelGraph(self.optimized, self.steps, self.kernels)
        self._vars = self._input_vars()
        # plans hold their intermediate buffers: keep the most recently used bindings only
        self._plans: "OrderedDict[tuple, Executable]" = OrderedDict()
        self._by_shape: dict = {}     # input shapes -> plan (checked once, then trusted)
        self._dtypes = [np.dtype(v.dtype) for v in self.optimized.inputs]
        self.report.compile_s = time.perf_counter() - t0

    def _build_all(self, threads: Optional[int]) -> None:
        """Build each distinct kernel once; several at a time on ``threads`` threads."""
        first: dict = {}
        for k in self.kernels.values():
            if k.module is None:
                first.setdefault(k.key, k)
        todo = list(first.values())
        n = min(len(todo), threads or available_cpus())
        if n > 1:
            # each task in a copy of this context: apply_history_best is a context variable
            with ThreadPoolExecutor(n) as pool:
                futs = [pool.submit(contextvars.copy_context().run, compile_kernel, k,
                                    self.target, self.db is None) for k in todo]
                for f in futs:
                    f.result()
        else:
            for k in todo:
                compile_kernel(k, self.target, self.db is None)
        for k in self.kernels.values():
            if k.module is None:
                k.module, k.cached = first[k.key].module, True
        self.report.built = len(todo)
        self.report.build_s = sum(k.build_s for k in todo)

    def _input_vars(self) -> list:
        seen: list = []
        for v in self.optimized.inputs:
            for d in v.shape:
                if isinstance(d, Var) and all(d is not s for s in seen):
                    seen.append(d)
        return seen

    def _bind(self, arrays: list) -> dict:
        env: dict = {}
        for i, (v, a) in enumerate(zip(self.optimized.inputs, arrays)):
            if a.ndim != v.ndim:
                raise ShapeError(f"compiled graph: input {i} (%{v.name}) has {a.ndim} "
                                 f"dimension(s), expected {v.ndim} ({list(v.shape)})")
            if a.dtype != np.dtype(v.dtype):
                raise DTypeError(f"compiled graph: input {i} (%{v.name}) has dtype {a.dtype}, "
                                 f"expected {v.dtype}")
            for d, s in zip(v.shape, a.shape):
                if isinstance(d, Var) and d not in env:
                    env[d] = int(s)
        for i, (v, a) in enumerate(zip(self.optimized.inputs, arrays)):
            for k, (d, s) in enumerate(zip(v.shape, a.shape)):
                want = int(eval_shape_expr(d, env)) if isinstance(d, Expr) else int(d)
                if want != s:
                    raise ShapeError(f"compiled graph: input {i} (%{v.name}) dimension {k} is "
                                     f"{s}, expected {d} = {want}; shape {a.shape}")
                if s < 1:
                    raise ShapeError(f"compiled graph: input {i} (%{v.name}) has an empty "
                                     f"dimension {k}")
        return env

    def _inputs(self, args: Sequence[Any]) -> list:
        ins = self.optimized.inputs
        if len(args) != len(ins):
            raise ShapeError(f"compiled graph: takes {len(ins)} input(s), got {len(args)}")
        out = []
        for i, a in enumerate(args):
            if not isinstance(a, np.ndarray):
                if hasattr(a, "detach") and hasattr(a, "numpy"):
                    try:
                        a = a.numpy()               # zero-copy; the common case first
                    except (RuntimeError, TypeError):
                        if a.device.type != "cpu":
                            raise DTypeError(f"compiled graph: input {i} is on {a.device}; "
                                             f"pass a CPU tensor") from None
                        a = a.detach().resolve_conj().resolve_neg().numpy()
                else:
                    a = np.asarray(a)
            if not a.flags.c_contiguous:
                a = np.ascontiguousarray(a)
            out.append(a)
        return out

    def plan(self, env: dict) -> Executable:
        key = tuple(int(env[v]) for v in self._vars)
        ex = self._plans.get(key)
        if ex is None:
            ex = Executable(self, make_plan(self.steps, self.optimized.inputs,
                                            self.optimized.outputs, env))
            self._plans[key] = ex
            while len(self._plans) > max(1, env_entries(PLANS_ENV_VAR, 16)):
                self._plans.popitem(last=False)   # its buffers go with it
                self._by_shape.clear()
        else:
            self._plans.move_to_end(key)
        return ex

    def __call__(self, *inputs: Any) -> list:
        arrays = self._inputs(inputs)
        key = tuple(a.shape for a in arrays)
        ex = self._by_shape.get(key)
        if ex is None or any(a.dtype != d for a, d in zip(arrays, self._dtypes)):
            ex = self.plan(self._bind(arrays))     # the full check, then the fast path
            self._by_shape[key] = ex
        return ex(arrays)

    def profile(self, *inputs: Any, repeat: int = 10, warmup: int = 2,
                clock: str = "wall") -> GraphProfile:
        """Time each kernel and PyTorch fallback of a call on ``inputs``: medians of
        ``repeat`` calls (``print`` it: a table, slowest first).  ``clock``: "wall"
        (``time.perf_counter``, right for kernels on several threads) or "cpu" (the calling
        thread's CPU time: with ``num_threads=1`` on a shared machine)."""
        clocks = {"wall": time.perf_counter, "cpu": time.thread_time}
        if clock not in clocks:
            raise TDSLError(f"CompiledGraph.profile: clock must be 'wall' or 'cpu', "
                            f"got {clock!r}")
        if not isinstance(repeat, int) or repeat < 1 or not isinstance(warmup, int) \
                or warmup < 0:
            raise TDSLError(f"CompiledGraph.profile: repeat must be a positive int and "
                            f"warmup a non-negative one, got {repeat!r} and {warmup!r}")
        arrays = self._inputs(inputs)
        ex = self.plan(self._bind(arrays))
        samples, calls = ex.profile(arrays, repeat, warmup, clocks[clock])
        return summarize(ex.labels, samples, calls, clock)

    def tasks(self) -> list:
        """``[(kernel name, [placeholders..., output], weight)]``: the distinct kernels (by
        structure) and how many times each runs per call, for tuning."""
        by_key: dict = {}
        for k in self.kernels.values():
            if k.key in by_key:
                by_key[k.key][2] += 1
            else:
                by_key[k.key] = [k.name, list(k.tensors), 1]
        return [tuple(t) for t in by_key.values()]


class _NoDb:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *a: Any) -> None:
        return None


def _apply_db(db: Any, num_threads: Optional[int]) -> Any:
    """The tuning records' context (``tdsl.autotune.apply_history_best``) when ``db`` is
    given, else nothing: records timed with the threads the kernels will run with."""
    if db is None:
        return _NoDb()
    from tdsl import autotune
    # a model's kernels without records (shapes not tuned, elementwise glue) are normal:
    # the compile report counts them instead of one warning each
    return autotune.apply_history_best(db, warn_missing=False, threads=num_threads)


def _layout_for(target: Any, layout: str) -> str:
    """``layout``, except that "auto" keeps NCHW for a GPU target: ``passes.layout``'s rule
    is measured on the CPU kernels."""
    from tdsl.target import TargetKind, as_target
    if layout != "auto":
        return layout
    try:
        kind = as_target(target).kind
    except TDSLError:
        return layout               # not a target: compile_kernel says what is wrong
    return layout if kind is TargetKind.LLVM else "NCHW"


def compile_graph(graph: Graph, target: Any = "llvm", db: Any = None,
                  num_threads: Optional[int] = None, rest_pool: bool = True,
                  build_threads: Optional[int] = None, layout: str = DEFAULT_LAYOUT
                  ) -> CompiledGraph:
    """Optimize ``graph`` (folding, CSE, DCE), fuse it into kernels, build them, and return
    a callable that runs it (see ``CompiledGraph``).  The input graph is not changed.

    ``num_threads``: threads of the kernels' parallel loops (default: tdsl's default);
    ``rest_pool``: put tdsl's idle workers to sleep while a PyTorch fallback runs;
    ``build_threads``: kernels built at once (default: the available CPUs);
    ``layout``: the convolutions' data layout, "auto", "NCHW" or "NHWC" (``passes.optimize``).
    """
    if not isinstance(graph, Graph):
        raise GraphError(f"compile_graph: expected a tdsl.graph.Graph, got "
                         f"{type(graph).__name__}")
    return CompiledGraph(graph, target, db, num_threads, rest_pool, build_threads, layout)
