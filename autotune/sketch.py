"""Sketches: a schedule space generated from the computation, with no per-operator code.

``SketchSource(outputs, target, sizes)`` classifies each stage of the default
schedule (facts from ``sketch_analysis``) and plans one rule per stage:

* ``INLINE`` — an elementwise stage that is not an output: ``compute_inline``;
* ``MATERIALIZE`` — an elementwise stage that is not an output, calls a costly
  math function (exp, tanh, erf...) and is read more than once per point
  (softmax's ``exp``): inlining would compute it twice, so a knob keeps it at
  root (parallel, vectorized), computes it at the row loop of the output that
  consumes it, or inlines it anyway;
* ``TILE`` — a reduction with data reuse worth tiling (some input is read without
  some spatial axis and used many times per element: matmul, batch matmul,
  conv2d, depthwise conv): multi-level tiling, ``SSRSRS`` on the CPU (spatial
  axes in 4 levels, reduction axes in 2; outer levels fused and parallel,
  innermost vectorized, register-tile unroll and ``auto_unroll_max_step`` knobs),
  ``SSSRRSRS`` on the GPU (block / virtual thread / thread levels bound, inputs
  staged through shared memory with cooperative fetching).  The accumulator is a
  ``cache_write(..., "local")`` stage computed at the outer tile (or the stage
  itself, computed at the tile of its elementwise consumer); ``pack`` knobs stage
  an input through a local copy (``cache_read``) made per parallel tile, offered
  per input and only for inputs reused enough to repay the copy, at the parallel
  tile or per step of the outer reduction loop (``pack_at``).  When the spatial
  extent is small next to the reduction (``rfactor_worth``: matmul 16 x 16 x 65536),
  an ``rf`` knob offers ``rfactor``: the first reduction axis split into ``rf``
  parallel parts, a partial-result stage (the parts as its outermost spatial axis)
  tiled as above with the parts fused into its parallel loop, and the parts summed
  by the original stage (spatial axes parallel, innermost vectorized);
  on the CPU the accumulator tile (levels 2 and 3 of every spatial axis: what one step
  of the outer reduction loop reads and writes back) is bounded to ``ACC_L1_SHARE`` of
  the L1 data cache (``AccumulatorFits``, a constraint on the space);
* ``REDUCE`` — a memory-bound reduction (GEMV, row/column reductions, pooling,
  argmax, softmax/layernorm statistics): at root or computed at the row loop of
  its consumer, in one of several forms — plain (spatial axes fused and
  parallel), ``rfactor`` with vectorized partial sums, ``rfactor`` with partial
  sums in parallel (too little spatial parallelism), for a tuple reduction (argmax)
  ``rfactor`` into several register-wide chains of partial results, or the innermost spatial
  axis vectorized with the reduction loops moved inside it (column reductions,
  pooling) — with an ``auto_unroll_max_step`` knob when its loops are short;
* ``FUSED`` — the stages of a composite kernel (attention) that only work scheduled
  together: planned as one, with its default schedule's parameters as knobs
  (``sketch_fused``);
* ``ROOT`` — an elementwise output: outer axes fused and parallel, innermost
  split and vectorized (1-D: parallel, serial and vector levels); transposes
  also get a 2-D tile knob.

Vector lanes and the core count come from the target (``tdsl.target.cpu_facts``).
Knobs (named ``<stage>.<knob>``) hold tile sizes and annotations;
``schedule(point)`` applies the rules to a fresh schedule, recording the trace.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from tdsl.errors import InternalError, ScheduleError
from tdsl.expr import TensorLoad
from tdsl.opaque import is_opaque
from tdsl.target import Target, TargetKind, cpu_facts
from tdsl.tensor import ComputeOp, IterVar
from tdsl.visitor import post_order_visit

from . import sketch_analysis as facts
from .irutil import eval_int
from .replay import fresh_schedule
from .space import ConfigSpace, Constraint, OtherOptionSpace, SplitSpace
from .sketch_fused import attention_knobs, fused_groups

#: ``auto_unroll_max_step`` choices (MetaSchedule's and Ansor's CPU set).
AUTO_UNROLL = [0, 16, 64, 512]
#: The largest innermost tile factor.
MAX_INNER = 64
#: GPU tiling bounds: elements of one spatial axis a block covers, threads along one axis,
#: and the reduction slice staged at a time (so two 128 x 32 float tiles: 32 KiB of shared
#: memory).  Points past the limits that remain are refused by the static check.
GPU_BLOCK_TILE = 128
GPU_AXIS_THREADS = 32
GPU_REDUCE_TILE = 32
#: ``rf`` knob of a TILE stage: into how many parallel parts its reduction may be split.
RFACTOR_PARTS = (2, 4, 8, 16, 32, 64)
#: Each part keeps at least this many steps of the reduction.
RFACTOR_MIN_STEPS = 16
#: A TILE stage whose outputs fill fewer vector registers than this per core (and fewer
#: outputs than reduction steps) gets the ``rf`` knob (Ansor's rfactor condition, in
#: vector registers rather than elements).
RFACTOR_MAX_VECTORS_PER_CORE = 16
#: Share of the L1 data cache (``CPUFacts.l1d_bytes``) a CPU TILE stage's accumulator tile
#: may fill (``AccumulatorFits``).  The whole of it: at half (16 of 32 KiB), conv2d NHWC
#: 1x14x14x256's best program (a 25 KiB accumulator, 9% faster than the next) was left out.
ACC_L1_SHARE = 1.0
#: Threads a GPU reduction may run across (``Form.CROSS_THREAD``); a block holds 128 // T
#: outputs' reductions when T < 128 (threadIdx.y).
GPU_REDUCE_THREADS = (32, 64, 128, 256)
GPU_REDUCE_BLOCK = 128
#: Elements each thread loads at a time in a cooperative fetch to shared memory (4: float4).
GPU_FETCH_VECTOR = [1, 2, 4]
#: A GPU transpose's square tiles, staged in shared memory (rows padded by one element).
GPU_TRANSPOSE_TILES = (16, 32)
#: Rows of such a tile each thread copies (the block is tile x tile / rows threads).
GPU_TRANSPOSE_ROWS = 4


@dataclass(frozen=True)
class AccumulatorFits(Constraint):
    """A CPU TILE stage's accumulator tile fits ``limit_bytes`` (a share of the L1 data cache).

    The accumulator (the ``cache_write`` local stage, or the stage itself computed at its
    consumer's tile) holds levels 2 and 3 of each spatial split (``S<d>`` knobs: outer,
    parallel, level 2, register tile), and every step of the outer reduction loop reads
    and writes all of it back.  When it spills out of L1, each of those sweeps goes to L2.
    In issue 25's 64-trial runs timed by wall clock on a loaded machine, the best programs
    of three workloads kept 49-64 KiB accumulators, where MetaSchedule's stay in registers
    or well inside L1 (0.5-14 KiB); timed by thread CPU time, tdsl's best ones were 1-14 KiB
    too.  Bounding it here spends the trials on tiles that can be fast instead of on
    measurements that, on a noisy machine, may promote a spilling one."""

    knobs: tuple[str, ...]
    element_bytes: int
    limit_bytes: int

    def holds(self, values: Mapping[str, Any]) -> bool:
        return accumulator_bytes([values[n] for n in self.knobs],
                                 self.element_bytes) <= self.limit_bytes

    def describe(self) -> str:
        return f"AccumulatorFits({', '.join(self.knobs)} <= {self.limit_bytes} B)"


def accumulator_bytes(splits: Sequence[Sequence[int]], element_bytes: int) -> int:
    """Bytes of a CPU TILE stage's accumulator tile for its spatial splits (each
    ``[outer, level 1, level 2, register tile]``): levels 2 and 3 of every axis."""
    return element_bytes * math.prod(sz[2] * sz[3] for sz in splits)


class Rule(enum.Enum):
    INLINE = "inline"
    MATERIALIZE = "materialize"
    TILE = "tile"
    REDUCE = "reduce"
    ROOT = "root"
    FUSED = "fused"


class Form(enum.IntEnum):
    """How a REDUCE stage runs (the first element of its ``form`` knob)."""

    PLAIN = 0          # spatial axes fused and parallel, reduction loops inside
    RF_VECTOR = 1      # rfactor: vectorized partial results over the inner reduction part
    RF_PARALLEL = 2    # rfactor: partial results of the outer reduction part in parallel
    SPATIAL_VECTOR = 3  # innermost spatial axis split; its inner part vectorized, reductions inside
    CROSS_THREAD = 4   # GPU: the reduction split over threadIdx.x (warp shuffles, shared memory)
    RF_CHAINS = 5      # rfactor twice: N vectors of partial results (independent chains,
    #                    unrolled), merged to one vector, then across lanes (argmax)


class Place(enum.IntEnum):
    """Where a MATERIALIZE stage is computed (its ``at`` knob)."""

    INLINE = 0
    ROW = 1
    ROOT = 2


@dataclass
class StagePlan:
    name: str
    rule: Rule
    spatial: list[int] = field(default_factory=list)   # extents of the spatial axes
    reduce: list[int] = field(default_factory=list)    # extents of the reduction axes
    dtype_bits: int = 32
    consumer: Optional[str] = None                     # TILE: fused elementwise consumer
    inputs: list[str] = field(default_factory=list)    # TILE: inputs worth packing
    reads: list[str] = field(default_factory=list)     # TILE: every input (GPU shared staging)
    attach_to: Optional[str] = None                    # REDUCE/MATERIALIZE: a ROOT with a row loop
    transpose: bool = False                            # ROOT: reads an input transposed
    outputs: int = 1                                   # REDUCE: a tuple reduction's outputs


def stage_labels(sch: Any) -> dict[int, str]:
    """A unique, deterministic label for each stage (by ``id``): its name, or
    ``name#position`` where several stages share a name (knobs are keyed by label)."""
    names = [st.name for st in sch.stages]
    return {id(st): st.name if names.count(st.name) == 1 else f"{st.name}#{i}"
            for i, st in enumerate(sch.stages)}


def _reads_at_own_axes(consumer: ComputeOp, producer: Any) -> bool:
    """``consumer`` reads the producer only as ``P[i0, i1, ...]`` with its own axes in order."""
    ok = True
    seen = False
    axes = [iv.var for iv in consumer.axis]

    def visit(n: Any) -> None:
        nonlocal ok, seen
        if isinstance(n, TensorLoad) and n.tensor.op is producer:
            seen = True
            if len(n.indices) != len(axes) or any(i is not a and not (hasattr(i, "same_as") and
                                                                       i.same_as(a))
                                                  for i, a in zip(n.indices, axes)):
                ok = False
    for b in consumer.body:
        post_order_visit(b, visit)
    return ok and seen


class SketchSource:
    """The generated space of a computation (a ``CandidateSource`` for ``Task``).

    ``lanes``/``cores``/``l1d_bytes`` override the target's vector lanes (32-bit), core
    count and L1 data cache size.
    """

    def __init__(self, outputs: Sequence[Any], target: Target, sizes: Mapping[str, int],
                 max_vector: int = MAX_INNER, max_inner: int = MAX_INNER, max_reg: int = 8,
                 cores: "int | None" = None, lanes: "int | None" = None,
                 l1d_bytes: "int | None" = None):
        self.outputs = list(outputs)
        self.target = target
        self.gpu = target.kind is TargetKind.CUDA
        self.sizes = dict(sizes)
        cpu = None if self.gpu else cpu_facts(target)
        self.vector_bits = cpu.vector_bits if cpu else 128
        self.lanes32 = lanes or (cpu.lanes(32) if cpu else 4)
        self.l1d_bytes = l1d_bytes or (cpu.l1d_bytes if cpu else 0)
        self.cores = cores or (cpu.cores if cpu else 1)
        self.max_vector = max_vector
        self.max_inner = max_inner
        self.max_reg = max_reg
        self.space = ConfigSpace()
        self.plans: list[StagePlan] = []
        self._analyze()

    def lanes(self, bits: int) -> int:
        return max(1, self.lanes32 * 32 // max(8, bits))

    # ---- analysis ---------------------------------------------------------------------------
    def _ext(self, iv: IterVar) -> int:
        return max(1, eval_int(iv.dom.extent, self.sizes, 1))

    def _classify(self, sch: Any, st: Any) -> Rule:
        op = st.op
        if op.reduce_axis:
            return Rule.TILE if facts.reuse_worth_tiling(op, self.sizes) else Rule.REDUCE
        readers = [r.op for r in sch.readers(st)]
        # an extern/scan stage reads its inputs whole from memory: they are not inlined
        if st.is_output or any(is_opaque(r) for r in readers):
            return Rule.ROOT
        if facts.expensive(op) and facts.read_count(op, readers) > 1:
            return Rule.MATERIALIZE
        return Rule.INLINE

    def _analyze(self) -> None:
        sch = fresh_schedule(self.outputs)
        lab = stage_labels(sch)
        groups = {} if self.gpu else fused_groups(sch)
        claimed = {id(m): a for a, ms in groups.items() for m in ms}
        plans: dict[str, StagePlan] = {}
        for st in sch.stages:
            if st.is_placeholder or is_opaque(st.op):   # extern/scan: nothing to schedule
                continue
            op = st.op
            fused = id(st) in groups or id(st) in claimed
            plans[lab[id(st)]] = StagePlan(
                lab[id(st)], Rule.FUSED if fused else self._classify(sch, st),
                [self._ext(iv) for iv in op.axis],
                [self._ext(iv) for iv in op.reduce_axis], op.output(0).dtype.bits,
                transpose=facts.is_transpose(op), outputs=len(op.body),
                attach_to=lab[claimed[id(st)]] if id(st) in claimed else None)
        for st in sch.stages:
            if lab[id(st)] in plans and plans[lab[id(st)]].rule is Rule.INLINE:
                st.compute_inline()
        for st in sch.stages:
            plan = plans.get(lab[id(st)])
            if plan is None or plan.rule in (Rule.INLINE, Rule.ROOT, Rule.FUSED):
                continue
            cons = sch.consumers(st)
            root_cons = [c for c in cons
                         if plans.get(lab[id(c)]) and plans[lab[id(c)]].rule is Rule.ROOT]
            if plan.rule is Rule.TILE:
                keep = {id(t) for t in facts.packable_inputs(st.op, self.sizes)}
                plan.inputs = [lab[id(sch[t.op])] for t in st.op.input_tensors if id(t) in keep]
                plan.reads = [lab[id(sch[t.op])] for t in st.op.input_tensors]
                if not st.is_output and len(cons) == 1 and root_cons and \
                        plans[lab[id(cons[0])]].spatial == plan.spatial and \
                        _reads_at_own_axes(cons[0].op, st.op):
                    plan.consumer = lab[id(cons[0])]
            elif not st.is_output:
                plan.attach_to = self._row_target(sch, st, plans, lab)
        self.plans = [plans[n] for n in plans]
        self._ops = {lab[id(st)]: st.op for st in sch.stages}
        fused_consumers = {p.consumer for p in self.plans if p.consumer}
        for p in self.plans:
            if p.rule is Rule.TILE:
                self._tile_knobs(p)
            elif p.rule is Rule.REDUCE:
                self._reduce_knobs(p)
            elif p.rule is Rule.MATERIALIZE:
                self._materialize_knobs(p)
            elif p.rule is Rule.ROOT and p.name not in fused_consumers:
                self._root_knobs(p)
            elif p.rule is Rule.FUSED and p.attach_to is None:
                merge = next((q for q in self.plans if q.attach_to == p.name and
                              q.name.startswith("T_attn_merge")), None)
                if merge is None:     # fused_groups() puts the merge in every group
                    raise InternalError(f"sketch: the attention '{p.name}' has no merge stage")
                attention_knobs(self, p.name, self._ops[p.name], merge.reduce[0] or None)

    def _row_target(self, sch: Any, st: Any, plans: dict, lab: dict) -> Optional[str]:
        """The one ROOT output every path from ``st`` ends at (through REDUCE and MATERIALIZE
        stages), when its row loop (all axes but the last) is a prefix of ``st``'s axes."""
        ends: set[str] = set()
        stack, seen = [st], set()
        while stack:
            cur = stack.pop()
            for c in sch.consumers(cur):
                p = plans.get(lab[id(c)])
                if p is None or id(c) in seen:
                    continue
                seen.add(id(c))
                if p.rule is Rule.ROOT:
                    ends.add(p.name)
                elif p.rule in (Rule.REDUCE, Rule.MATERIALIZE):
                    stack.append(c)
                else:
                    return None
        if len(ends) != 1:
            return None
        end = plans[next(iter(ends))]
        me = plans[lab[id(st)]]
        row = end.spatial[:-1]
        if not row or me.spatial[:len(row)] != row or end.transpose:
            return None
        return end.name

    # ---- knobs ------------------------------------------------------------------------------
    def _tile_knobs(self, p: StagePlan) -> None:
        n = len(p.spatial)
        levels = 5 if self.gpu else 4
        lanes = self.lanes(p.dtype_bits)
        for d, e in enumerate(p.spatial):
            last = d == n - 1
            cap = self.max_vector if last and not self.gpu else self.max_reg
            flt = None
            if last and e % lanes == 0 and not self.gpu:
                flt = lambda sz, lanes=lanes: sz[-1] % lanes == 0      # whole vectors
            elif self.gpu:
                # a block's tile of this axis (what it stages in shared memory) and its
                # threads along it: bounded so most points fit the GPU's limits
                flt = lambda sz: math.prod(sz[1:]) <= GPU_BLOCK_TILE and sz[2] <= GPU_AXIS_THREADS
            self.space.add(f"{p.name}.S{d}", SplitSpace(e, levels, max_factor=cap, filter=flt))
        if not self.gpu and n:
            self.space.constrain(AccumulatorFits(
                tuple(f"{p.name}.S{d}" for d in range(n)), max(1, p.dtype_bits // 8),
                int(ACC_L1_SHARE * self.l1d_bytes)))
        for r, e in enumerate(p.reduce):
            flt = (lambda sz: math.prod(sz[1:]) <= GPU_REDUCE_TILE) if self.gpu else None
            self.space.add(f"{p.name}.R{r}", SplitSpace(e, 3 if self.gpu else 2,
                                                       max_factor=self.max_inner, filter=flt))
        if self.gpu:
            from .sketch_tc import tc_knobs
            tc_knobs(self, p.name, self._ops[p.name])     # the tensor-core microkernel
        if self.gpu and p.reads:
            # cooperative fetch into shared memory: elements per thread and load (float4...)
            self.space.add(f"{p.name}.fetch_vec", OtherOptionSpace(GPU_FETCH_VECTOR))
        if not self.gpu:
            self.space.add(f"{p.name}.unroll", OtherOptionSpace([0, 1, 2]))
            self.space.add(f"{p.name}.auto_unroll", OtherOptionSpace(AUTO_UNROLL))
            self.space.add(f"{p.name}.par", OtherOptionSpace([1, 2]))
            for inp in p.inputs:
                self.space.add(f"{p.name}.pack.{inp}", OtherOptionSpace([0, 1]))
            if p.inputs and p.reduce:
                # where the copies are made: per parallel tile, or per step of the outer
                # reduction loop (a panel of the reduction at a time)
                self.space.add(f"{p.name}.pack_at", OtherOptionSpace([0, 1]))
            if self.rfactor_worth(p):
                parts = [f for f in RFACTOR_PARTS if f * RFACTOR_MIN_STEPS <= p.reduce[0]]
                if parts:
                    self.space.add(f"{p.name}.rf", OtherOptionSpace([0] + parts))

    def rfactor_worth(self, p: StagePlan) -> bool:
        """A TILE stage with too few outputs to keep the cores busy with register tiles
        (fewer than ``RFACTOR_MAX_VECTORS_PER_CORE`` vectors per core) and more reduction
        steps than outputs: splitting the reduction into parallel parts may pay."""
        space, red = math.prod(p.spatial), math.prod(p.reduce)
        lanes = self.lanes(p.dtype_bits)
        return bool(p.reduce) and space <= red and \
            space <= RFACTOR_MAX_VECTORS_PER_CORE * self.cores * lanes

    def _vector_widths(self, extent: int, bits: int) -> list[int]:
        """Vector lengths (multiples of the register width, up to ``max_vector``) that divide
        ``extent``; narrower powers of two when no whole register does."""
        lanes = self.lanes(bits)
        out = [v for v in (lanes, 2 * lanes, 4 * lanes, 8 * lanes)
               if v <= max(self.max_vector, lanes) and v <= extent and extent % v == 0]
        if not out:   # every power of two below a register down to 2 (AVX-512: 8, 4, 2)
            narrower = [lanes >> s for s in range(1, lanes.bit_length())]
            out = [v for v in narrower if v >= 2 and v <= extent and extent % v == 0][:1]
        return out

    def _reduce_knobs(self, p: StagePlan) -> None:
        opts: list = [[int(Form.PLAIN), 0]]
        lanes = self.lanes(p.dtype_bits)
        if self.gpu:
            # one thread per output, or the reduction across T threads of a block (GEMV,
            # row sums, softmax's max/sum: lanes read consecutive elements)
            e = math.prod(p.reduce)
            opts += [[int(Form.CROSS_THREAD), t] for t in GPU_REDUCE_THREADS if t <= max(32, e)]
        elif p.reduce:
            # partial results over the last (innermost, contiguous) reduction axis
            e = p.reduce[-1]
            if p.outputs > 1:
                # a tuple reduction (argmax) selects: a vector wider than a register is
                # legalized badly (its compare masks are repacked), and one vector of
                # lanes runs at the latency of its compare-select chain; several
                # register-wide vectors (chains) run at the loop's throughput
                opts += [[int(Form.RF_VECTOR), lanes]] if lanes < e else []
                opts += [[int(Form.RF_CHAINS), c] for c in (2, 4, 8) if c * lanes <= e]
            else:
                opts += [[int(Form.RF_VECTOR), f] for f in sorted({8, 16, 32, 64, lanes, 2 * lanes})
                         if 2 <= f < e and e % f == 0]
            if math.prod(p.spatial) < 2 * self.cores and not self.gpu:
                # parts of the first (outermost) reduction axis in parallel
                e0 = p.reduce[0]
                opts += [[int(Form.RF_PARALLEL), f] for f in (2, 4, 8, 16) if f < e0 and e0 % f == 0]
        if not self.gpu and p.spatial and p.spatial[-1] > 1:
            opts += [[int(Form.SPATIAL_VECTOR), v]
                     for v in self._vector_widths(p.spatial[-1], p.dtype_bits)]
        self.space.add(f"{p.name}.form", OtherOptionSpace(opts))
        if p.attach_to is not None:
            self.space.add(f"{p.name}.at", OtherOptionSpace([1, 0]))
        if not self.gpu and math.prod(p.reduce) <= max(AUTO_UNROLL):
            self.space.add(f"{p.name}.auto_unroll", OtherOptionSpace(AUTO_UNROLL))

    def _materialize_knobs(self, p: StagePlan) -> None:
        opts = [int(Place.ROOT)]
        if p.attach_to is not None and not self.gpu:
            opts.insert(0, int(Place.ROW))
        opts.append(int(Place.INLINE))
        self.space.add(f"{p.name}.at", OtherOptionSpace(opts))
        self._root_knobs(p)

    def _root_knobs(self, p: StagePlan) -> None:
        if not p.spatial:
            return              # a 0-d result: one point, nothing to split
        one_d = len(p.spatial) == 1 and not self.gpu
        self.space.add(f"{p.name}.inner", SplitSpace(p.spatial[-1], 3 if one_d else 2,
                                                     max_factor=self.max_vector))
        if p.transpose:
            sizes = GPU_TRANSPOSE_TILES if self.gpu else (8, 16, 32, 64)
            tiles = [0] + [t for t in sizes if t <= p.spatial[-1] and t <= p.spatial[-2]]
            self.space.add(f"{p.name}.tile2d", OtherOptionSpace(tiles))

    # ---- applying ---------------------------------------------------------------------------
    def schedule(self, point: Sequence[int]) -> Any:
        broken = self.space.violated(point)
        if broken is not None:      # a point from elsewhere (a record, a hand-made config)
            raise ScheduleError("sketch", None, f"the point breaks the space's "
                                f"{broken.describe()}")
        cfg = {name: knob.entities[i] for (name, knob), i in zip(self.space.knobs.items(), point)}
        from .sketch_apply import Apply
        return Apply(self, cfg).run()
