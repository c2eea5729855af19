"""The IntrinCall that replaces a tensorized region of a stage's loop nest.

The match made when ``tensorize`` was called describes the loops and the body of
that moment; reorders, inlined producers and cache stages added afterwards change
them.  So the intrinsic is matched again here, against the final leaf loops and
the body with every inlined producer substituted in, and the call's regions are
built from that match.  A region that no longer matches is a LoweringError naming
tensorize, the stage, the loop and the reason.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from ..errors import LoweringError, ScheduleError
from ..expr import Const, TensorLoad, Var
from ..stmt import BufferRegion, IntrinCall
from ..tensor import IterVar
from ..visitor import substitute

if TYPE_CHECKING:
    from tdsl.schedule import Stage


def intrin_call(builder: Any, st: "Stage", leaves: list[IterVar], tpos: int,
                vmap: dict[Var, Any]) -> IntrinCall:
    """The call replacing ``leaves[tpos:]`` of ``st``; ``vmap`` maps each root variable
    to its value over the leaf loops."""
    from tdsl.schedule.tensorize import Match, TensorIntrin, match_intrin
    var = leaves[tpos]
    intrin: TensorIntrin = st.iter_attrs[var].tensor_intrin
    inner = leaves[tpos:]
    for iv in inner[1:]:
        a = st.iter_attrs.get(iv)
        if a is not None and a.tensor_intrin is not None:
            raise LoweringError(f"tensorize: stage '{st.name}', loop '{iv.name}' is tensorized inside "
                                f"the region already tensorized at '{var.name}'")
        if a is not None and a.thread_tag is not None:
            raise LoweringError(f"tensorize: stage '{st.name}', loop '{iv.name}' is bound to "
                                f"{a.thread_tag} but lies inside the region tensorized at "
                                f"'{var.name}', which one intrinsic call replaces")
    try:
        match: Match = match_intrin(st, var, intrin, builder.bodies[st], list(leaves))
    except ScheduleError as e:
        raise LoweringError(f"tensorize: stage '{st.name}', loop '{var.name}': the loop nest as finally "
                            f"scheduled (loops {[iv.name for iv in inner]}, inlined producers "
                            f"substituted) no longer matches: {e.reason}") from None
    extents = builder.bounds[st].extents
    # an intrinsic declared over sizes (te.var) is called with them fixed by these loops
    loops = []
    for leaf, j in match.axis_of_leaf.items():
        lo, hi = builder.ana.const_int_bound(extents[leaf])
        loops.append((j, leaf.name, lo if lo == hi else None))
    try:
        intrin = intrin.specialized(intrin.bind_sizes(st, loops))
    except ScheduleError as e:
        raise LoweringError(f"tensorize: stage '{st.name}', loop '{var.name}': {e.reason}") from None
    for leaf, j in match.axis_of_leaf.items():
        got = builder.ana.const_int_bound(extents[leaf])
        if got != (intrin.extents[j], intrin.extents[j]):
            raise LoweringError(f"tensorize: stage '{st.name}', loop '{leaf.name}' runs over "
                                f"{extents[leaf]!r} iterations here, but the intrinsic "
                                f"'{intrin.name}' covers {intrin.extents[j]}")
    sizes = intrin.size_map()
    # each root's value at the region's origin: the region's loops at 0
    zero = {iv.var: Const(0, iv.var.dtype) for iv in inner}
    at_origin = {bv: substitute(vmap[r.var], zero) for r, bv in match.base.items()}
    inputs: list[Optional[BufferRegion]] = [None] * len(intrin.inputs)
    for lm in match.loads:
        if inputs[lm.input] is not None:
            continue          # the match checked that every such load reads the same region
        origin = builder.lower_expr(TensorLoad(lm.load.tensor, lm.origin), at_origin)
        shape = [builder.ana.simplify(substitute(d, sizes)) for d in intrin.inputs[lm.input].shape]
        ext = [shape[j] if j is not None else Const(1, "int64") for j in lm.dims]
        loose = [d for d in ext if not isinstance(d, Const)]
        if loose:
            raise LoweringError(f"tensorize: stage '{st.name}', loop '{var.name}': the "
                                f"intrinsic's input '{intrin.inputs[lm.input].name}' has extent "
                                f"{loose[0]!r}, a size that no loop of the region fixes")
        inputs[lm.input] = BufferRegion(origin.buffer, origin.indices, ext, lm.dims)
    stor = builder.storage[st]
    base = {r.var: substitute(vmap[r.var], zero) for r in match.base}
    outputs = []
    for buf in stor.buffers:
        idx = builder.out_indices(st, base, stor)
        ext = [Const(intrin.extents[j], intrin.op.axis[j].dom.extent.dtype) if j is not None
               else Const(1, "int64") for j in match.out_dims]
        outputs.append(BufferRegion(buf, idx, ext, match.out_dims))
    call = IntrinCall(intrin, inputs, outputs, reset=False, update=True)
    check = getattr(intrin, "check_call", None)     # an intrinsic with declared buffers
    if check is not None:
        check(call, f"tensorize: stage '{st.name}', loop '{var.name}'")
    return call
