"""compute_at, compute_inline, compute_root: where a stage's loop nest goes.

``P.compute_at(s[C], jo)`` before/after::

    for i in range(n):                    for io in range(n // 4):
      P[i] = A[i] * 2                        for jo in range(...):
    for io in range(n // 4):        ->         for i in range(io*4, io*4 + 4):   # just what C needs
      for jo in ...:                              P[i - io*4] = A[i] * 2
        C[...] = P[...] + 1                     C[...] = P[... - io*4] + 1
"""
from __future__ import annotations

from tdsl.errors import LoweringError, ScheduleError
from tdsl.expr import Reduce
from tdsl.tensor import ComputeOp, IterVar

from .stage import AttachType, Stage
from .tensorize import check_regions_still_match, region_loops, tensorized_loop


def check_compute_at_args(stage: Stage, parent: object, scope: object) -> None:
    """Argument types: ``parent`` a stage of this schedule, ``scope`` a loop (IterVar)."""
    if not isinstance(parent, Stage) or parent._sch is not stage._sch:
        raise ScheduleError("compute_at", stage.name, f"the parent must be a stage of the same schedule "
                            f"(s[T]), got {type(parent).__name__} {parent!r}")
    if not isinstance(scope, IterVar):
        raise ScheduleError("compute_at", stage.name, f"the scope must be a loop (IterVar) of stage "
                            f"'{parent.name}', got {type(scope).__name__} {scope!r}")


def check_compute_at(stage: Stage, parent: Stage, scope: IterVar, final: bool = False) -> IterVar:
    """The checks of ``compute_at`` that the call alone decides.  Whether the loop encloses
    a use of the stage depends on where its consumers end up, which later calls may change
    (TVM's opt_conv_cuda attaches the shared copies before their local readers): that one
    runs here only with ``final`` (else at lowering, ``check_attachments``)."""
    sch = stage._sch
    check_compute_at_args(stage, parent, scope)
    if stage.is_placeholder:
        raise ScheduleError("compute_at", stage.name, "an input has no loop nest to move")
    if not isinstance(stage.op, ComputeOp):
        raise ScheduleError("compute_at", stage.name, f"a {stage.op.kind} stage computes its "
                            f"whole output at root; it cannot be attached to a loop")
    defer = sch.defer_attach_errors
    if not defer:
        _raise_conflict(stage, parent, scope, early=True)
    if not isinstance(parent.op, ComputeOp) and not parent.is_placeholder:
        raise ScheduleError("compute_at", stage.name, f"the {parent.op.kind} stage "
                            f"'{parent.name}' reads whole tensors from memory, so nothing can be "
                            f"attached inside its loops; compute '{stage.name}' at root",
                            loop=getattr(scope, "name", None))
    if not any(v is scope for v in parent.leaf_iter_vars):
        owner = sch.owner_of(scope)
        where = f" (it belongs to stage '{owner.name}')" if owner is not None and owner is not parent else ""
        raise ScheduleError("compute_at", stage.name, f"'{getattr(scope, 'name', scope)}' is not a "
                            f"current loop of stage '{parent.name}'{where}",
                            loop=getattr(scope, "name", None))
    if final:
        reason = missed_uses(stage, parent, scope)
        if reason:
            raise ScheduleError("compute_at", stage.name, reason, loop=scope.name)
    if not defer:
        _raise_conflict(stage, parent, scope, early=False)
    region = region_loops(parent)
    if scope in region:
        raise ScheduleError("compute_at", stage.name, f"loop '{scope.name}' of stage '{parent.name}' is "
                            f"inside the region tensorized at '{region[0].name}', which one intrinsic "
                            f"call replaces; attach outside it", loop=scope.name)
    return scope


def attach_conflict(stage: Stage, parent: Stage, scope: IterVar, early: "bool | None" = None
                    ) -> "str | None":
    """Why attaching ``stage`` at ``scope`` of ``parent`` is invalid whatever else the
    schedule does: an output, the stage itself, or a cycle (None when it is none of them).
    ``early`` picks the checks that come before (True) or after (False) the loop checks."""
    if early is not False:
        if stage.is_output:
            return "an output must be computed whole (at root)"
        if parent is stage:
            return "cannot attach a stage to its own loop"
    if early is not True:
        p, seen = parent, set()
        while p is not None and id(p) not in seen:
            if p is stage:
                return (f"stage '{parent.name}' is itself attached inside '{stage.name}': that "
                        f"would be a cycle")
            seen.add(id(p))
            p = p.attach_stage
    return None


def _raise_conflict(stage: Stage, parent: Stage, scope: IterVar, early: bool) -> None:
    reason = attach_conflict(stage, parent, scope, early)
    if reason:
        raise ScheduleError("compute_at", stage.name, reason,
                            loop=None if early else getattr(scope, "name", None))


def missed_uses(stage: Stage, parent: Stage, scope: IterVar) -> "str | None":
    """Why loop ``scope`` of ``parent`` encloses no use of ``stage`` (None when it does)."""
    sch = stage._sch
    consumers = sch.consumers(stage)
    if parent in consumers or any(sch.is_attached_under(c, parent) for c in consumers):
        return None
    names = sorted(c.name for c in consumers) or ["none"]
    return (f"loop '{scope.name}' of stage '{parent.name}' is not an ancestor of any use of "
            f"'{stage.name}' (it is read by: {', '.join(names)})")


def check_attachments(sch: object) -> None:
    """The attachment checks that only the final schedule decides (see ``check_compute_at``),
    run by ``lower``: a ``LoweringError`` with the message the call used to raise.  Under
    ``Schedule.defer_attach_errors`` that includes the conflicts ``compute_at`` recorded."""
    for st in sch.stages:   # type: ignore[attr-defined]
        if st.attach_error:
            raise LoweringError(str(ScheduleError("compute_at", st.name, st.attach_error)))
    for st in sch.stages:   # type: ignore[attr-defined]
        if st.attach_type is AttachType.SCOPE:
            reason = missed_uses(st, st.attach_stage, st.attach_ivar)
            if reason:
                raise LoweringError(str(ScheduleError("compute_at", st.name, reason,
                                                      loop=st.attach_ivar.name)))


def compute_at(stage: Stage, parent: Stage, scope: IterVar) -> None:
    scope = check_compute_at(stage, parent, scope)
    stage.placed = True
    if stage._sch.defer_attach_errors:
        # the attachment is not made (the stage stays where it was, so the attach chains stay
        # acyclic); lowering refuses the schedule unless a later call places the stage again
        stage.attach_error = attach_conflict(stage, parent, scope)
        if stage.attach_error:
            return
    _attach(stage, parent, scope)


def _attach(stage: Stage, parent: Stage, scope: IterVar) -> None:
    stage.attach_type = AttachType.SCOPE
    stage.attach_stage = parent
    stage.attach_ivar = scope
    for f in followers(stage):
        try:
            check_compute_at(f, parent, scope, final=True)
        except ScheduleError:
            continue   # left where it is: lowering names the stage if that is wrong
        _attach(f, parent, scope)


def followers(stage: Stage) -> list[Stage]:
    """The stages that move with ``stage``: the reductions ``td.compute`` lifted out of a
    body (``<name>.red0``) that only ``stage`` reads (once inlined stages are substituted),
    and that the user has not placed themselves.

    A lifted stage is part of the computation the user wrote as one stage, so it goes where
    that stage goes: ``compute_at`` attaches it at the same loop (before the stage, which
    reads it), ``compute_root`` takes it back to root.  ``compute_inline`` of its reader
    leaves it where it is (the reader's consumers then read it there).  Loop transformations
    (split, reorder...) of the reader do not apply to it: its loops are its own (only the
    data axes the reduction uses), schedule them through ``s[T.op.input_tensors...]``."""
    sch = stage._sch
    out = []
    for st in sch.stages:
        if (st is not stage and getattr(st.origin_op, "lifted", False) and not st.placed
                and sch.consumers(st) == [stage]):
            out.append(st)
    return out


def compute_inline(stage: Stage) -> None:
    if not isinstance(stage.op, ComputeOp):
        what = "an input" if stage.is_placeholder else f"a {stage.op.kind} stage"
        raise ScheduleError("compute_inline", stage.name, f"{what} cannot be inlined")
    from tdsl.opaque import is_opaque
    for r in stage._sch.readers(stage):
        if is_opaque(r.op):
            raise ScheduleError("compute_inline", stage.name, f"it is read by the {r.op.kind} "
                                f"stage '{r.name}', which reads whole tensors from memory")
    # a body that is a Reduce is a reduction even with no reduce axis left (the stage rfactor
    # makes when it factors out the only reduce axis): it has no value to substitute
    if stage.op.reduce_axis or any(isinstance(b, Reduce) for b in stage.op.body):
        raise ScheduleError("compute_inline", stage.name, "a reduction cannot be inlined into its "
                            "consumers; use compute_at instead")
    if stage.is_output:
        raise ScheduleError("compute_inline", stage.name, "an output of the schedule cannot be inlined")
    for other in stage._sch.stages:
        if other.attach_stage is stage:
            raise ScheduleError("compute_inline", stage.name, f"stage '{other.name}' is attached to a "
                                f"loop of this stage; move it first")
    t = tensorized_loop(stage)
    if t is not None:
        raise ScheduleError("compute_inline", stage.name, f"loop '{t.name}' of the stage is tensorized; "
                            f"an inlined stage has no loops", t.name)
    before = (stage.attach_type, stage.attach_stage, stage.attach_ivar)
    stage.placed = True
    stage.attach_type = AttachType.INLINE
    stage.attach_stage = None
    stage.attach_ivar = None
    try:
        check_regions_still_match("compute_inline", stage)
    except ScheduleError:
        stage.attach_type, stage.attach_stage, stage.attach_ivar = before
        raise
    stage.attach_error = None


def compute_root(stage: Stage) -> None:
    if stage.is_placeholder:
        raise ScheduleError("compute_root", stage.name, "an input has no loop nest")
    stage.placed = True
    stage.attach_error = None
    _to_root(stage)


def _to_root(stage: Stage) -> None:
    for f in followers(stage):
        _to_root(f)
    stage.attach_type = AttachType.ROOT
    stage.attach_stage = None
    stage.attach_ivar = None
