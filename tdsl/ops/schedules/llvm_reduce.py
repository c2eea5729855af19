"""Default CPU schedules of reductions (sum, max, pooling, argmax...) and of row groups
(softmax, layernorm, mean...: the output's rows in parallel, each row's reductions computed
just before it)."""
from __future__ import annotations

from tdsl.lowering.inline import inlined_bodies
from tdsl.schedule import Schedule, Stage
from tdsl.schedule.rfactor import first_output as _first
from tdsl.tensor import ComputeOp, IterKind, IterVar
from tdsl.visitor import free_vars

from .cpu import CPU, _ext, _fuse, _out_dtype, _total, _vector_split, vector_tile
from .graph import RowGroup, innermost_use, reduce_source_loads, uses_in_last_index


def schedule_reduction(s: Schedule, st: Stage, cpu: CPU, bodies: dict,
                       attach: "tuple[Stage, IterVar] | None" = None, chunk: bool = False) -> None:
    """A reduction at root (``attach`` None) or computed inside ``attach`` = (stage, loop),
    where it computes one output (``chunk`` False) or a vector of outputs along its last
    axis (``chunk`` True).

    * reducing along the contiguous axis of its input: ``lanes`` partial results (rfactor),
      vectorized, then combined;
    * else, when the output's last axis is the contiguous one: reduction loops outside, a
      vector of outputs inside (4 vectors wide at root: whole cache lines per row);
    * else plain loops, outer ones in parallel.
    """
    split = _split_across_threads(s, st, cpu) if _total(st) == 1 else None
    if split is not None:
        bodies = split
    op = st.op
    lanes = cpu.lanes(_out_dtype(st))
    # the streamed operands: loads that move with a reduction variable
    rvars = {iv.var for iv in op.reduce_axis}
    loads = [(p, idx) for p, idx in reduce_source_loads(s, st, bodies)
             if any(v in rvars for e in idx for v in free_vars(e))]
    spatial = list(op.axis)
    k_last, kext = _contiguous_reduce_axis(s, st, loads, lanes)
    j_last = spatial[-1] if spatial and (_ext(spatial[-1]) or 2) > 1 else None
    fused = k_last not in op.reduce_axis     # trailing axes fused: a contiguous run
    inner_reduce = ((fused or innermost_use(loads, k_last.var))
                    and (j_last is None or not uses_in_last_index(loads, j_last.var))
                    and (kext is None or kext >= lanes))
    if inner_reduce:
        chains = select_chains(op, kext, lanes)
        if chains > 1:
            rf, merge = rfactor_chains(s, st, k_last, lanes, chains, len(spatial))
        else:
            ko, ki = st.split(k_last, factor=partial_lanes(kext, lanes))
            rf_out = s.rfactor(op.outputs[0], ki, factor_axis=len(spatial))
            rf, merge = s[_first(rf_out)], None
        if attach is not None:
            st.compute_at(*attach)
            for t in (merge, rf):
                if t is not None:
                    t.compute_at(*attach)
        else:
            root = _fuse(st, list(st.op.axis))
            if _total(st) is None or _total(st) > 1:
                st.parallel(root)
            for t in (merge, rf):
                if t is not None:
                    t.compute_at(st, root)
        if merge is not None:
            lane = merge.op.axis[-1]
            merge.reorder(*([iv for iv in merge.leaf_iter_vars if iv is not lane] + [lane]))
            merge.vectorize(lane)
            chain, lane = rf.op.axis[-2:]
            rf.reorder(*([iv for iv in rf.leaf_iter_vars if iv not in (chain, lane)]
                         + [chain, lane]))
            rf.unroll(chain)
        else:
            lane = rf.op.axis[-1]
            rf.reorder(*([iv for iv in rf.leaf_iter_vars if iv is not lane] + [lane]))
        rf.vectorize(lane)
        return
    if j_last is not None and uses_in_last_index(loads, j_last.var) and (attach is None or chunk):
        jext = _ext(j_last)
        if attach is None and (jext is None or jext >= 2 * lanes) and split is None:
            _column_chunks(s, st, lanes, cpu.threads)
            return
        narrow = attach is not None or (jext is not None and jext < 8 * lanes)
        width = lanes if narrow else 4 * lanes
        jo, ji = _vector_split(st, j_last, width)
        outer = [iv for iv in spatial if iv is not j_last]
        if attach is not None:
            # a chunk of several vectors of outputs (``chunk_width``): the reduction loops
            # outside them, so that they are independent chains reading whole lines
            st.reorder(*(outer + list(op.reduce_axis) + [jo, ji]))
            st.unroll(jo)
        else:
            st.reorder(*(outer + [jo] + list(op.reduce_axis) + [ji]))
        st.vectorize(ji)
        if attach is not None:
            st.compute_at(*attach)
        else:
            st.parallel(_fuse(st, outer + [jo]))
        return
    if attach is not None:
        st.compute_at(*attach)
    elif spatial:
        st.parallel(_fuse(st, spatial))


def partial_lanes(kext: "int | None", lanes: int) -> int:
    """Lanes of partial results for a reduction along a contiguous run of ``kext``: the
    run's vectors are one dependent chain of adds and the lanes are then combined one by one,
    so about ``ceil(kext / w) + w`` adds wait on each other; a short run (global average
    pooling's 49 points) takes fewer lanes than a register holds (8 for 49: 15 steps, not 20)."""
    if kext is None:
        return lanes
    best = lanes
    w = lanes
    while w > 2:
        w //= 2
        if -(-kext // w) + w < -(-kext // best) + best:
            best = w
    return best


def _contiguous_reduce_axis(s: Schedule, st: Stage, loads: list, lanes: int
                            ) -> "tuple[IterVar, int | None]":
    """The innermost reduction axis and its extent -- or, when it is shorter than ``lanes``
    and the innermost reduction axes walk the trailing dimensions of every streamed input
    whole (``x[n, c, k2, k3]`` over all of an ``H x W`` plane: global average pooling),
    those axes fused into one (their points are one contiguous run, which vectorizes)."""
    axes = list(st.op.reduce_axis)
    k_last = axes[-1]
    kext = _ext(k_last)
    if kext is None or kext >= lanes or len(axes) < 2:
        return k_last, kext
    group = [k_last]
    total = kext
    for k in reversed(axes[:-1]):
        if total >= lanes:
            break
        e = _ext(k)
        if e is None or not _walks_trailing_dims(s, loads, group, k):
            break
        group.insert(0, k)
        total *= e
    if len(group) < 2:
        return k_last, kext
    return st.fuse(*group), total


def _walks_trailing_dims(s: Schedule, loads: list, group: list, k: IterVar) -> bool:
    """Whether every load indexes its last ``len(group) + 1`` dimensions by exactly ``k``
    then ``group``'s variables, each of ``group``'s dimensions as long as its axis (so that
    ``k`` moving by one moves the load by the whole run of ``group``)."""
    want = [k] + group
    for p, idx in loads:
        if len(idx) < len(want):
            return False
        tail = idx[len(idx) - len(want):]
        if any(e is not iv.var for e, iv in zip(tail, want)):
            return False
        shape = p.op.outputs[0].shape
        for d, iv in zip(range(len(idx) - len(group), len(idx)), group):
            dim = shape[d]
            if getattr(dim, "value", None) != _ext(iv):
                return False
    return bool(loads)


#: Independent vectors of partial results a column reduction in a row group (mean over a
#: non-contiguous axis) keeps per chunk of outputs at least: one vector waits on each add's latency.
COLUMN_CHAINS = 4


#: Vectors of outputs per parallel chunk of a column reduction at root (at most): the
#: input is read in runs of that many vectors per row.  Sum over axis 0 of 4096x1024, one
#: thread (AVX-512): 1.2-1.6 ms with 4 vectors (256-byte runs 4 KiB apart), 0.77 with 8
#: to 32 (NumPy 0.56: it reads whole rows).
COLUMN_BLOCK_VECTORS = 16


#: The same in a row group (mean over a non-contiguous axis), where the vectors are
#: unrolled chains in registers: 8 (mean over axis 0 of 4096x1024: 1.1 ms with 4, 0.69
#: with 8, 0.96 with 16; AVX-512, one thread).
COLUMN_CHUNK_VECTORS = 8


def column_vectors(jext: "int | None", lanes: int, threads: int,
                   most: int = COLUMN_BLOCK_VECTORS) -> int:
    """Vectors of outputs per chunk of a column reduction over ``jext`` outputs: up to
    ``most``, fewer (down to ``COLUMN_CHAINS``) to leave at least two chunks per thread."""
    vectors = most
    while vectors > COLUMN_CHAINS and jext is not None and jext < 2 * threads * vectors * lanes:
        vectors //= 2
    return vectors


def _column_chunks(s: Schedule, st: Stage, lanes: int, threads: int) -> None:
    """A column reduction at root (the output's contiguous axis streams along the input's):
    chunks of up to ``COLUMN_BLOCK_VECTORS`` vectors of outputs in parallel (at least two
    per thread), each accumulated in a local stage (in L1, or in registers as independent
    chains when the chunk is ``COLUMN_CHAINS`` vectors or fewer), then written out."""
    local = s[s.cache_write(st.op.outputs[0], "local")]
    axes = list(st.op.axis)
    outer, last = axes[:-1], axes[-1]
    jext = _ext(last)
    width = vector_tile(jext, lanes, column_vectors(jext, lanes, threads))
    vec = min(width, lanes)
    jo, ji = st.split(last, factor=width)
    vo, vi = st.split(ji, factor=vec)
    st.reorder(*(outer + [jo, vo, vi]))
    st.vectorize(vi)
    par = _fuse(st, outer + [jo])
    st.parallel(par)
    local.compute_at(st, par)
    l_axes = list(local.op.axis)
    lo, li = local.split(l_axes[-1], factor=vec)
    local.reorder(*(l_axes[:-1] + list(local.op.reduce_axis) + [lo, li]))
    if width <= COLUMN_CHAINS * lanes:
        local.unroll(lo)
    local.vectorize(li)


#: Independent vectors of partial results a select-based reduction (argmax: compare,
#: then select the value and the index) keeps per row: each update waits for the last
#: one's compare and select (~6 cycles), so one vector of lanes runs at the latency of the
#: chain; four run at the throughput of the loop (row argmax 4096x1024 float32, AVX2, one
#: thread: 1.6 ms with one chain, 0.74 ms with four, both with the full combiner).
SELECT_CHAINS = 4


def select_chains(op: ComputeOp, kext: "int | None", lanes: int) -> int:
    """How many vectors of ``lanes`` partial results (chains) to keep for reduction ``op``
    along a reduced axis of ``kext`` (None: symbolic): ``SELECT_CHAINS`` for a tuple
    reduction (its combiner selects; a sum or max stays one chain: its one instruction
    per update and the load keep pace with memory), fewer when the axis is short."""
    if len(getattr(op, "body", ())) < 2:
        return 1
    chains = SELECT_CHAINS
    while chains > 1 and kext is not None and kext < chains * lanes:
        chains //= 2
    return chains


def rfactor_chains(s: Schedule, st: Stage, k: IterVar, lanes: int, chains: int,
                    at: int) -> tuple[Stage, Stage]:
    """``k`` split into ``(ko, chain, lane)``; partial results ``rf[..., chain, lane]``
    over ``ko`` (independent chains), merged to ``merge[..., lane]`` over ``chain`` (vector
    combines), then ``st`` combines the lanes.  Returns ``(rf, merge)``.

    The chains see their elements in increasing index order, and the merges keep the
    combiner's own tie rules, so the result is the sequential one for any combiner that
    is commutative and associative (``comm_reducer``'s contract)."""
    ko, ki = st.split(k, factor=chains * lanes)
    kc, kl = st.split(ki, factor=lanes)
    merge = s[_first(s.rfactor(st.op.outputs[0], kl, factor_axis=at))]
    # merge reduces (ko, chain) -- rfactor keeps the order of the remaining loops
    kc_m = [iv for iv in merge.leaf_iter_vars if iv.kind is IterKind.REDUCE][-1]
    rf = s[_first(s.rfactor(merge.op.outputs[0], kc_m, factor_axis=at))]
    return rf, merge


#: A tuple reduction to one output over at least this many points is split into parts
#: reduced in parallel (``_split_across_threads``).
PARTS_MIN = 1 << 16


def _split_across_threads(s: Schedule, st: Stage, cpu: CPU) -> "dict | None":
    """A tuple reduction with one output (``argmax(axis=None)``) and many points: its
    outermost reduction axis in ``4 x threads`` parts, each reduced (chains of lanes) in
    parallel, then the parts combined -- else one thread does it all.  Returns the
    schedule's inlined bodies after the split (the parts are scheduled here), or None
    when it did not split ``st``."""
    op = st.op
    if cpu.threads < 2 or select_chains(op, None, cpu.lanes(_out_dtype(st))) < 2:
        return None
    k0 = op.reduce_axis[0]
    points = 1
    for iv in op.reduce_axis:
        e = _ext(iv)
        points = None if e is None or points is None else points * e
    e0 = _ext(k0)
    parts = 4 * cpu.threads
    if (points is not None and points < PARTS_MIN) or (e0 is not None and e0 < 2 * parts):
        return None
    po, _ = st.split(k0, nparts=parts)
    part = s[_first(s.rfactor(op.outputs[0], po, factor_axis=0))]
    bodies = inlined_bodies(s)
    schedule_reduction(s, part, cpu, bodies)
    return bodies


def chunk_width(s: Schedule, g: RowGroup, cpu: CPU, bodies: dict) -> int:
    """Outputs per iteration of a row group whose reductions are indexed by every output
    axis (a vector of outputs is a "row"): for a reduction that streams along the outputs'
    contiguous axis, ``column_vectors`` vectors (up to ``COLUMN_CHUNK_VECTORS``;
    ``select_chains`` for a tuple reduction): independent chains, whole lines read (a
    column argmax with 4 columns per chunk read 16 bytes of each 64-byte line and ran one
    dependent chain: 4.5x slower; a column mean with one vector per chunk waited on each
    add); 1 otherwise."""
    width = 1
    for st in g.reductions:
        spatial = list(st.op.axis)
        if not spatial:
            continue
        rvars = {iv.var for iv in st.op.reduce_axis}
        loads = [(p, idx) for p, idx in reduce_source_loads(s, st, bodies)
                 if any(v in rvars for e in idx for v in free_vars(e))]
        if uses_in_last_index(loads, spatial[-1].var):
            lanes = cpu.lanes(_out_dtype(st))
            if len(st.op.body) > 1:       # a tuple reduction: its chains in registers
                chains = max(COLUMN_CHAINS, select_chains(st.op, None, lanes))
            else:
                chains = column_vectors(_ext(spatial[-1]), lanes, cpu.threads,
                                        COLUMN_CHUNK_VECTORS)
            width = max(width, chains * lanes)
    return width


# ---- row groups ------------------------------------------------------------------------------
def schedule_row_group(s: Schedule, g: RowGroup, cpu: CPU, bodies: dict) -> None:
    """Rows of the output in parallel; each row's reductions (and temporaries) computed in
    the row's iteration, just before the row is written.  When the reductions are indexed by
    every output axis (mean, argmax, pooling + scale), a vector of outputs is a "row"."""
    y = g.out
    axes = list(y.op.axis)
    lanes = cpu.lanes(_out_dtype(y))
    rows = [axes[p] for p in g.row_axes]
    inner = [iv for iv in axes if iv not in rows]
    if not inner:
        outer, last = axes[:-1], axes[-1]
        lo, li = _vector_split(y, last, max(lanes, chunk_width(s, g, cpu, bodies)))
        y.vectorize(li)
        if outer:
            y.parallel(_fuse(y, outer))
        else:
            y.parallel(lo)
        at = lo
    else:
        y.reorder(*(rows + inner))
        at = _fuse(y, rows)
        y.parallel(at)
        if inner[-1] is axes[-1]:
            lo, li = _vector_split(y, inner[-1], lanes)
            y.vectorize(li)
    members = g.reductions + g.temps
    order = [st for st in reversed(s.stages) if st in members]
    for st in g.temps:
        st.compute_root()
    bodies = inlined_bodies(s)       # the temporaries are loads now, no longer inlined
    for st in order:
        if st in g.temps:
            st.compute_at(y, at)
            t_axes = list(st.op.axis)
            if len(t_axes) == len(axes) and inner and inner[-1] is axes[-1]:
                lo, li = _vector_split(st, t_axes[-1], cpu.lanes(_out_dtype(st)))
                st.vectorize(li)
        else:
            schedule_reduction(s, st, cpu, bodies, attach=(y, at), chunk=not inner)
