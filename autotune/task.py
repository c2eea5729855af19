"""A tuning task: one computation, one target, a knob space, and how to make candidates.

A candidate is a point of the space (one choice per knob).  ``Task.candidate``
turns it into what gets measured: a schedule *trace* (JSON), replayed on a fresh
schedule of the task's computation and lowered; an illegal point
(``ScheduleError``/``LoweringError`` at replay or lower) becomes an invalid
candidate, recorded and never retried.  For a CUDA target a lowered candidate is
also checked against the GPU's limits (``check_gpu_resources``: threads, shared
memory, local memory, registers) before anything is compiled; one over a limit is
illegal too (``GPUResourceError``), so it costs no NVRTC run.  On a CPU target a
candidate whose unrolled loops would make the code generator emit more than
``MAX_EMITTED_NODES`` IR nodes (``codesize.emitted_nodes``) is illegal
(``CodeSizeError``): its build takes many seconds, up to the builder's timeout
(``BUILD_TIMEOUT``), and megabytes of straight-line code are never fast.

The task key is the structural hash of the computation, the target and the
representative sizes of its symbolic dimensions, so records of one task are
found again for the same computation built anywhere.
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence

from tdsl.errors import BuildError, LoweringError, ScheduleError, ShapeError, TuningError
from tdsl.expr import Reduce
from tdsl.keywords import check_keywords
from tdsl.lowering import lower
from tdsl.stmt import PrimFunc
from tdsl.structural import structural_hash
from tdsl.target import Target, TargetKind, as_target
from tdsl.tensor import ComputeOp, PlaceholderOp, Tensor

from .codesize import emitted_nodes
from .irutil import count_ops, eval_int, float_flops
from .replay import name_signature, replay
from .space import ConfigSpace
from .template import Template

#: Errors that make a candidate illegal (and not the tuner's fault).
ILLEGAL = (ScheduleError, LoweringError, ShapeError)

#: Largest code a candidate may make (``codesize.emitted_nodes``).  Build time grows
#: about linearly, ~0.1 ms per node on one quiet core (so this is ~5 s; 190k-node conv2d
#: tiles hit the builder's 30 s timeout on a loaded machine).  In five 64-trial conv2d
#: runs (1x64x56x56, 3x3) the best kernels made 350-7,000 nodes, and the best candidate
#: over 50k was 1.4-9.7x slower than the run's best: straight-line code that large is
#: not fast.  About 7% of conv2d's random points, 3% of batch_matmul's, none of matmul's.
MAX_EMITTED_NODES = 50_000


class CandidateSource(Protocol):
    """Where a task's candidates come from: a template or generated sketches."""

    space: ConfigSpace

    def schedule(self, point: Sequence[int]) -> Any:
        """A schedule (any computation structurally equal to the task's) for ``point``."""


@dataclass
class Candidate:
    """One point of a task's space, as a trace and (when legal) a lowered function."""

    point: tuple[int, ...]
    config: dict
    trace: str
    func: Optional[PrimFunc] = None
    prog_hash: str = ""
    error: str = ""

    @property
    def valid(self) -> bool:
        return self.func is not None


def _ops(args: Sequence[Tensor]) -> list:
    """The output operations among ``args`` (tensors not produced by a placeholder)."""
    outs = []
    for t in args:
        if not isinstance(t, Tensor):
            raise TuningError(f"task arguments must be tensors, got {type(t).__name__}")
        if not isinstance(t.op, PlaceholderOp) and t.op not in outs:
            outs.append(t.op)
    if not outs:
        raise TuningError("task arguments contain no computed tensor (list inputs, then outputs)")
    return outs


def count_flops(outputs: Sequence[Any], sizes: Mapping[str, int]) -> float:
    """Floating-point operations of the computation (a reduction's combine counts as one)."""
    seen: set[int] = set()
    total = 0.0

    def visit(op: Any) -> None:
        nonlocal total
        if id(op) in seen or not isinstance(op, ComputeOp):
            return
        seen.add(id(op))
        points = math.prod(max(1, eval_int(iv.dom.extent, sizes, 1)) for iv in op.axis)
        work = 0
        for b in op.body:
            if isinstance(b, Reduce):
                inner = math.prod(max(1, eval_int(r.dom.extent, sizes, 1)) for r in b.axis)
                per = float_flops(count_ops(b)) + (1 if b.dtype.is_float else 0)
                work += inner * per
            else:
                work += float_flops(count_ops(b))
        total += points * work
        for t in op.input_tensors:
            visit(t.op)
    for op in outputs:
        visit(op)
    return float(total)


def size_vars(args: Sequence[Tensor]) -> list[str]:
    """Names of the symbolic dimensions of the arguments, in order of appearance."""
    from tdsl.expr import Var
    from tdsl.visitor import free_vars
    names: list[str] = []
    for t in args:
        for s in t.shape:
            for v in sorted(free_vars(s), key=lambda v: v.name):
                if isinstance(v, Var) and v.name not in names:
                    names.append(v.name)
    return names


def task_key(outputs: Sequence[Any], target: Target, sizes: Mapping[str, int]) -> str:
    h = hashlib.blake2b(digest_size=12)
    h.update(structural_hash(list(outputs)).encode())
    h.update(str(target).encode())
    h.update(json.dumps(sorted(sizes.items())).encode())
    return h.hexdigest()


def _args_key(key: str, args: Sequence[Tensor]) -> str:
    h = hashlib.blake2b(digest_size=12)
    for part in (key, structural_hash(list(args)), compiler_fingerprint()):
        h.update(part.encode())
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def compiler_fingerprint() -> str:
    """A hash of the compiler's own source (core, schedule, backends), so that reference
    outputs cached on disk by another version of tdsl are never reused."""
    import tdsl
    import tdsl.backends
    import tdsl.schedule
    h = hashlib.sha256()
    for pkg in (tdsl, tdsl.schedule, tdsl.backends):
        root = Path(pkg.__file__).parent
        for f in sorted(root.rglob("*.py")):
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def workload_key(outputs: Sequence[Any], target: Target) -> str:
    """The computation and target, whatever the sizes of its symbolic dimensions."""
    return task_key(outputs, target, {})


def describe(args: Sequence[Tensor]) -> str:
    return ", ".join(f"{t.name}{tuple(str(s) for s in t.shape)}:{t.dtype}".replace("'", "")
                     for t in args)


class Task:
    """What to tune: ``args`` (inputs then outputs), ``target``, and a candidate source."""

    def __init__(self, name: str, args: Sequence[Tensor], target: Any, source: CandidateSource,
                 sizes: "Mapping[str, int] | None" = None, flop: "float | None" = None):
        self.name = name
        self.args = list(args)
        self.outputs = _ops(self.args)
        self.target = as_target(target)
        self.source = source
        self.sizes = dict(sizes or {})
        missing = [v for v in size_vars(self.args) if v not in self.sizes]
        if missing:
            raise TuningError(f"task {name!r}: symbolic dimension(s) {missing} need representative "
                              f"sizes (sizes={{'{missing[0]}': 256}})")
        self.key = task_key(self.outputs, self.target, self.sizes)
        #: the key of this exact argument list (``key`` ignores names, so ``A - B`` and
        #: ``B - A`` over args ``[A, B, C]`` share it): what measurement workers cache
        #: a task's tensors, inputs and reference outputs under
        self.args_key = _args_key(self.key, self.args)
        self.workload = workload_key(self.outputs, self.target)
        self.flop = float(flop) if flop else count_flops(self.outputs, self.sizes)
        self.signature = name_signature(self.outputs)
        #: candidates making more code than this are illegal (None: no limit)
        self.max_emitted_nodes: "int | None" = MAX_EMITTED_NODES
        self._payload: "bytes | None" = None

    @property
    def space(self) -> ConfigSpace:
        return self.source.space

    @property
    def description(self) -> str:
        sz = f" sizes={self.sizes}" if self.sizes else ""
        return f"{self.name}({describe(self.args)}){sz}"

    def payload(self) -> bytes:
        """The computation, pickled, for worker processes."""
        if self._payload is None:
            self._payload = pickle.dumps(self.args)
        return self._payload

    def candidate(self, point: Sequence[int]) -> Candidate:
        """The candidate of ``point``: its trace, lowered function and program hash."""
        point = tuple(point)
        config = self.space.values(point)
        try:
            sch = self.source.schedule(point)
            trace = sch.trace.to_json()
        except ILLEGAL as e:
            return Candidate(point, config, "[]", error=f"{type(e).__name__}: {e}")
        if len(sch.outputs) == len(self.outputs) and \
                all(a is b for a, b in zip(sch.outputs, self.outputs)):
            # a schedule of this task's own tensors (the sketch rules') is lowered as it
            # is: its trace replays to the same program (test_autotune_replay_fidelity.py),
            # and replaying it here too doubled the search's cost per candidate
            c = self._lower(lambda: sch, trace, point, config)
        else:
            # a template builds its own tensors: its trace is replayed onto the task's
            c = self.lower_trace(trace, point, config)
        # the LLVM backend emits every copy of an unrolled loop (CUDA leaves it to NVRTC)
        cpu = self.target.kind is not TargetKind.CUDA
        return _check_code_size(c, self.max_emitted_nodes if cpu else None)

    def lower_trace(self, trace: str, point: tuple = (), config: "dict | None" = None) -> Candidate:
        return self._lower(lambda: replay(trace, self.outputs), trace, point, config)

    def _lower(self, schedule: Callable[[], Any], trace: str, point: tuple,
               config: "dict | None") -> Candidate:
        try:
            sch = schedule()
            func = lower(sch, self.args, name=_symbol(self.name))
            if self.target.kind is TargetKind.CUDA:
                check_gpu_resources(func, self.target)
        except ILLEGAL as e:
            return Candidate(point, config or {}, trace, error=f"{type(e).__name__}: {e}")
        except BuildError as e:
            return Candidate(point, config or {}, trace, error=f"GPUResourceError: {e}")
        return Candidate(point, config or {}, trace, func, structural_hash(func))

    def __repr__(self) -> str:
        return f"Task({self.description}, target={self.target}, space={len(self.space)})"


def _check_code_size(c: Candidate, limit: "int | None") -> Candidate:
    """``c``, or an illegal candidate when its code exceeds ``limit`` emitted IR nodes."""
    if c.func is None or limit is None:
        return c
    n = emitted_nodes(c.func)
    if n <= limit:
        return c
    return Candidate(c.point, c.config, c.trace,
                     error=f"CodeSizeError: the unrolled loops make {n} IR nodes to compile, over "
                           f"the limit of {limit} (Task.max_emitted_nodes): it would take "
                           f"minutes to build and cannot be fast")


#: Registers a thread needs besides its local arrays (indices, addresses, loop counters):
#: a rough allowance, so that a tile whose accumulators alone fill the register file is
#: refused before it is built (ptxas would spill it to local memory).
REGISTER_OVERHEAD = 24


def check_gpu_resources(func: PrimFunc, target: Target) -> None:
    """Every kernel of ``func`` within the GPU's limits, checked statically before anything is
    compiled: block/grid sizes, threads per block, shared memory and local memory (the CUDA
    backend's own build checks), and registers estimated from the per-thread local arrays
    (4 bytes each) plus ``REGISTER_OVERHEAD``: at most ``max_registers_per_thread``, and
    times the threads per block within the block's register file.  Raises ``BuildError``."""
    from tdsl.backends.cuda.kernels import split_kernels
    gpu = target.gpu
    _, kernels = split_kernels(func, target)
    for k in kernels:
        regs = k.local_bytes // 4 + REGISTER_OVERHEAD
        if regs > gpu.max_registers_per_thread:
            raise BuildError(f"CUDA kernel '{k.name}' keeps {k.local_bytes} bytes of local arrays "
                             f"per thread: about {regs} registers, over the "
                             f"{gpu.max_registers_per_thread} a thread may have on sm_{gpu.sm}")
        threads = k.threads_per_block
        if threads is not None and regs * threads > gpu.registers_per_block:
            raise BuildError(f"CUDA kernel '{k.name}': {threads} threads x about {regs} registers "
                             f"= {regs * threads}, over the {gpu.registers_per_block} registers "
                             f"of a block on sm_{gpu.sm}")


def _symbol(name: str) -> str:
    import re
    s = re.sub(r"\W", "_", name) or "kernel"
    return s if not s[0].isdigit() else "k_" + s


class TemplateSource:
    """Candidates from a ``Template`` called with fixed arguments."""

    def __init__(self, tmpl: Template, args: Sequence[Any], sizes: Mapping[str, int]):
        self.template = tmpl
        self.args = tuple(args)
        self.sizes = dict(sizes)
        (sch, tensors), cfg = tmpl.instantiate(self.args, None, self.sizes)
        self.space = cfg.space
        self.default_tensors = list(tensors)
        self.flop = cfg.flop

    def schedule(self, point: Sequence[int]) -> Any:
        names = self.space.names
        (sch, _), _ = self.template.instantiate(self.args, dict(zip(names, point)), self.sizes)
        return sch


@check_keywords
def create_task(func: Template, args: Sequence[Any] = (), target: Any = "llvm",
                sizes: "Mapping[str, int] | None" = None, name: "str | None" = None) -> Task:
    """A task tuning template ``func`` called with ``args`` for ``target``.

    ``sizes`` gives representative values of symbolic dimensions, if any.
    """
    if not isinstance(func, Template):
        raise TuningError(f"create_task expects a function decorated with @autotune.template, got "
                          f"{func!r}; for a plain computation use autotune.auto_schedule")
    source = TemplateSource(func, args, sizes or {})
    return Task(name or func.name, source.default_tensors, target, source, sizes,
                flop=source.flop or None)
