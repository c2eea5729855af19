"""``lower``: a schedule to a PrimFunc, as a linear list of named steps."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..arith import Analyzer
from ..errors import LoweringError, ShapeError
from ..expr import Const, SizeVar, Var
from ..keywords import check_keywords
from ..stmt import Allocate, Buffer, IfThenElse, PrimFunc
from ..tensor import PlaceholderOp, Tensor
from ..visitor import free_vars
from .bound import infer_bounds
from .inline import inlined_bodies
from .read_bounds import check_reads
from .nest import NestBuilder
from .storage import Storage, aligned_strides, allocated_storage  # noqa: F401 (re-exported)
from .idle_iterations import skip_idle_iterations
from .passes import check_loops, check_scope, check_thread_extents, simplify_stmt
from .unroll import auto_unroll
from .single_store import predicate_redundant_stores
from ..deep import deep_recursion

if TYPE_CHECKING:
    from tdsl.schedule import Schedule, Stage


def _storage(sch: "Schedule", bounds: dict, params: dict, ana: Analyzer) -> dict:
    from tdsl.schedule.stage import AttachType
    storage: dict["Stage", Storage] = {}
    for st in sch.stages:
        if st.is_placeholder:
            t = st.op.outputs[0]
            if id(st) in params:
                storage[st] = Storage([params[id(st)][0]], [Const(0, "int64")] * t.ndim, False)
            continue
        if st not in bounds:
            continue
        zeros = [Const(0, "int64")] * len(st.op.axis)
        if id(st) in params:
            # an argument attached with compute_at (as in TVM) writes the region each
            # iteration needs straight into the argument's buffer, at its global indices
            bufs = params[id(st)]
            storage[st] = Storage(bufs, zeros, False)
            continue
        storage[st] = allocated_storage(st, bounds, ana)
    return storage


def _params(sch: "Schedule", args: Sequence[Any]) -> tuple[list[Buffer], dict, list[Buffer], dict]:
    """Parameter buffers, the buffers of each argument stage, and scratch buffers for the
    outputs of a multi-output stage that the arguments leave out."""
    if not isinstance(args, (list, tuple)):
        raise LoweringError(f"args must be a list of tensors, got {type(args).__name__}")
    buffers: list[Buffer] = []
    by_stage: dict[int, list[Buffer]] = {}
    unused: set[int] = set()   # ids of input ops passed but not read
    scalars: dict[Var, Buffer] = {}
    ana = Analyzer()   # shapes like ``h + 2 - 3 + 1`` print (and bind) as ``h``
    for a in args:
        if isinstance(a, Var):         # a scalar parameter: a 1-element buffer, a number at call time
            if a in scalars:
                raise LoweringError(f"scalar '{a.name}' appears twice in the argument list")
            scalars[a] = Buffer(a.name, [1], a.dtype)
            buffers.append(scalars[a])
            continue
        if not isinstance(a, Tensor):
            raise LoweringError(f"argument {a!r} is not a tensor nor a scalar td.var (symbolic "
                                f"sizes are taken from the tensors' shapes)")
        st = sch.stage_map.get(id(a.op))
        if st is None:
            if not isinstance(a.op, PlaceholderOp):
                raise LoweringError(f"argument '{a.name}' is not part of this schedule (not an output "
                                    f"nor something an output depends on)")
            # an input nothing reads (TVM accepts it): a parameter the body never touches
            if id(a.op) in unused:
                raise LoweringError(f"tensor '{a.name}' appears twice in the argument list")
            buf = Buffer(a.name, [ana.simplify(d) for d in a.shape], a.dtype)
            unused.add(id(a.op))
            buffers.append(buf)
            continue
        cur = st.op.outputs[a.value_index] if not st.is_placeholder else a
        buf = Buffer(a.name, [ana.simplify(d) for d in cur.shape], cur.dtype)
        buffers.append(buf)
        lst = by_stage.setdefault(id(st), [None] * st.op.num_outputs)  # type: ignore[list-item]
        if lst[a.value_index] is not None:
            raise LoweringError(f"tensor '{a.name}' appears twice in the argument list")
        lst[a.value_index] = buf
    for st in sch.stages:
        if st.is_placeholder and id(st) not in by_stage and sch.consumers(st):
            raise LoweringError(f"input '{st.name}' is read but is not in the argument list")
    for op in sch.outputs:
        st = sch[op]
        if id(st) not in by_stage:
            raise LoweringError(f"output '{st.name}' is not in the argument list; its result would "
                                f"be lost")
    scratch: list[Buffer] = []
    for sid, lst in by_stage.items():
        st = next(s for s in sch.stages if id(s) == sid)
        for i, b in enumerate(lst):
            if b is None:
                t = st.op.outputs[i]
                lst[i] = Buffer(t.name, t.shape, t.dtype)
                scratch.append(lst[i])
    return buffers, by_stage, scratch, scalars


def _check_scalars_listed(sch: "Schedule", scalars: dict) -> None:
    """A float/bool ``td.var`` read by a stage is a scalar parameter: it must be in args."""
    for st in sch.stages:
        if st.is_placeholder:
            continue
        for b in st.op.body:
            missing = [v for v in free_vars(b)
                       if type(v) is Var and not v.dtype.is_int and v not in scalars]
            if missing:   # the first in creation order: the same message in every run
                v = min(missing, key=lambda v: v.seq)
                raise LoweringError(f"stage '{st.name}' reads the scalar parameter "
                                    f"'{v.name}' ({v.dtype}), which is not in the argument "
                                    f"list; add it to args (it is passed as a number)")


def _shape_scalars(params: list[Buffer], scalars: dict) -> dict:
    """The integer scalar parameters that a shape mentions (TVM's ``(m, n // x)`` with ``x``
    in ``args``): sizes bound from the number passed at call time, not from a dimension."""
    in_shapes: set = set()
    for b in params:
        for d in b.shape:
            in_shapes |= free_vars(d)
    return {v: b for v, b in scalars.items() if v in in_shapes and v.dtype.is_int}


def _substitute_scalars(body: Any, params: list[Buffer], scalars: dict,
                        sizes: dict) -> tuple[Any, dict]:
    """Reads of each scalar parameter's variable become loads of its 1-element buffer, except
    those of the scalars in ``sizes``, which stay size variables (loop extents and strides
    on the host need them as numbers)."""
    if not scalars:
        return body, {}
    from ..expr import BufferLoad
    from ..runtime.args import SCALAR_PARAMS_ATTR
    from ..visitor import substitute
    body = substitute(body, {v: BufferLoad(b, [Const(0, "int64")]) for v, b in scalars.items()
                             if v not in sizes})
    idx = [i for i, p in enumerate(params) if any(p is b for b in scalars.values())]
    return body, {SCALAR_PARAMS_ATTR: idx}


def _bind_sizes(params: list[Buffer], body: Any, name: str,
                sizes: "dict | None" = None) -> tuple[list[Var], dict]:
    """Each symbolic size and where a call reads it: ``(param, dim)`` for a dimension of an
    argument, ``(param, SCALAR_VALUE)`` for the value of a scalar parameter in ``sizes``
    (that one wins over any dimension, which the call then checks against it)."""
    from ..runtime.args import SCALAR_VALUE
    bindings: dict[Var, tuple[int, int]] = {}
    for v, b in (sizes or {}).items():
        bindings[v] = (next(i for i, p in enumerate(params) if p is b), SCALAR_VALUE)
    for pi, buf in enumerate(params):
        for d, s in enumerate(buf.shape):
            if isinstance(s, Var) and s not in bindings:
                bindings[s] = (pi, d)
    used: set[Var] = set()
    for buf in params:
        for s in buf.shape:
            used |= free_vars(s)
    used |= {v for v in free_vars(body) if isinstance(v, SizeVar)}
    for v in sorted(used, key=lambda v: (v.name, v.seq)):
        if isinstance(v, SizeVar) and v not in bindings:
            raise ShapeError(f"lower '{name}': symbolic size '{v.name}' is not a dimension of any "
                             f"argument, so no call can bind it; add a tensor with dimension "
                             f"'{v.name}', or '{v.name}' itself (a scalar), to the arguments")
    size_vars = sorted(bindings, key=lambda v: bindings[v])
    return size_vars, bindings


@deep_recursion
@check_keywords
def lower(sch: "Schedule", args: Sequence[Any], name: str = "main", simple_mode: bool = False,
          dump: "Callable[[str, Any], None] | None" = None) -> PrimFunc:
    """Lower a schedule to the loop IR (``print`` it to read the loop nest).

    ``dump(step_name, ir)``, when given, is called after each step.
    """
    from tdsl.schedule import Schedule
    if not isinstance(sch, Schedule):
        raise LoweringError(f"lower: expected a Schedule (td.create_schedule(...)), got "
                            f"{type(sch).__name__}")
    params, by_stage, scratch, scalars = _params(sch, args)
    _check_scalars_listed(sch, scalars)
    body = _lower_nest(sch, by_stage, scratch, dump)
    for cond, alt in reversed(sch.variants):   # the first variant is tested first
        alt_params, alt_by_stage, alt_scratch, _ = _params(alt, args)
        same = {id(b2): b for b2, b in zip(alt_params, params)}
        alt_by_stage = {sid: [same.get(id(b), b) for b in lst] for sid, lst in alt_by_stage.items()}
        body = IfThenElse(cond, _lower_nest(alt, alt_by_stage, alt_scratch, dump), body)
    sizes = _shape_scalars(params, scalars)
    body, attrs = _substitute_scalars(body, params, scalars, sizes)
    size_vars, bindings = _bind_sizes(params, body, name, sizes)
    check_scope(body, set(bindings), name)
    reads = [c for c in check_reads(sch) if _evaluable(c, bindings)]
    if reads:
        from ..runtime.read_checks import READ_CHECKS_ATTR
        attrs[READ_CHECKS_ATTR] = reads
    return PrimFunc(name, params, body, size_vars, bindings, attrs)


def _evaluable(check: Any, bindings: dict) -> bool:
    """A read check the argument check can evaluate: shape arithmetic (what
    ``eval_shape_expr`` and exported metadata know) of sizes bound from the arguments."""
    from ..expr import Add, FloorDiv, FloorMod, Max, Min, Mul, Sub
    from ..visitor import post_order_visit
    kinds = (Const, Var, Add, Sub, Mul, FloorDiv, FloorMod, Min, Max)
    bad: list = []
    fv: set = set()
    for e in (check.lo, check.hi, check.size, *check.extents):
        fv |= free_vars(e)
        post_order_visit(e, lambda n: None if isinstance(n, kinds) else bad.append(n))
    return not bad and fv <= set(bindings)


def _lower_nest(sch: "Schedule", by_stage: dict, scratch: list[Buffer],
                dump: "Callable[[str, Any], None] | None") -> Any:
    """The loop nest of one schedule, its buffers allocated, simplified and checked."""
    from tdsl.schedule.attach import check_attachments
    from tdsl.schedule.stage import AttachType
    check_attachments(sch)
    ana = Analyzer()
    bodies = inlined_bodies(sch)
    # An inlined stage that is also an argument: its consumers read the inlined expression,
    # and its buffer is written at root as well (the caller asked for its values).
    materialize = frozenset(st for st in sch.stages
                            if st.attach_type is AttachType.INLINE and id(st) in by_stage)
    arguments = frozenset(st for st in sch.stages if id(st) in by_stage)
    bounds = infer_bounds(sch, bodies, ana, materialize, arguments)
    storage = _storage(sch, bounds, by_stage, ana)
    builder = NestBuilder(sch, bodies, bounds, storage, ana)
    body = builder.build_root()
    if dump:
        dump("build_nest", body)
    for st in reversed(sch.stages):
        stor = storage.get(st)
        if stor is not None and stor.allocated and st.attach_type.value == "root":
            for buf in reversed(stor.buffers):
                body = Allocate(buf, body)
    for buf in scratch:
        body = Allocate(buf, body)
    body = simplify_stmt(body, Analyzer()) or _empty()
    if dump:
        dump("simplify", body)
    body = skip_idle_iterations(body)
    if dump:
        dump("skip_idle_iterations", body)
    body = auto_unroll(body)
    if dump:
        dump("auto_unroll", body)
    check_loops(body)
    body = predicate_redundant_stores(body)
    check_thread_extents(body)
    return body


def _empty():
    from ..stmt import SeqStmt
    return SeqStmt([])
