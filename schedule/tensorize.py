"""decl_tensor_intrin and tensorize: replace a loop nest by a hardware intrinsic.

The intrinsic declares the computation it performs (a compute over
placeholders); ``tensorize`` checks, eagerly, that the loops from the chosen
loop inward compute exactly that (same loop extents in the same roles, the
same expression up to index offsets) and refuses otherwise.  Lowering turns the
region into an ``IntrinCall``; a backend uses the intrinsic's implementation
for its target, or the declared computation itself (``lower_fallback``).
Reductions are initialized by the stage's ordinary init nest, so an intrinsic
call only ever performs the update.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

from tdsl.errors import ScheduleError
from tdsl.expr import BufferLoad, Const, Expr, Reduce, TensorLoad, Var
from tdsl.stmt import BufferRegion, BufferStore, For, ForKind, IntrinCall, Stmt
from tdsl.tensor import ComputeOp, IterKind, IterVar, PlaceholderOp
from tdsl.visitor import children, free_vars, substitute, transform

from .relations import Split

if TYPE_CHECKING:
    from .stage import Stage


class TensorIntrin:
    """A declared computation plus optional per-target implementations.

    ``impls`` maps a target kind (``"llvm"``, ``"cuda"``) to a callable that the
    backend invokes with the ``IntrinCall``; its contract is backend-specific.
    """

    def __init__(self, name: str, op: ComputeOp, impls: "Mapping[str, Callable] | None" = None,
                 warp_collective: bool = False):
        self.name = name
        self.op = op
        #: the lanes of a GPU warp execute one call together (WMMA), rather than each thread
        self.warp_collective = warp_collective
        self.inputs = op.input_tensors
        self.impls = dict(impls or {})
        self.axes = list(op.axis) + list(op.reduce_axis)
        self.extents = []
        for iv in self.axes:
            if not isinstance(iv.dom.extent, Const):
                raise ScheduleError("decl_tensor_intrin", name, f"axis '{iv.name}' has a symbolic "
                                    f"extent; an intrinsic has a fixed shape")
            self.extents.append(iv.dom.extent.value)

    def __repr__(self) -> str:
        return f"TensorIntrin({self.name})"

    def implementation(self, target_kind: str, call: IntrinCall) -> Stmt:
        """The statement a loop-IR backend compiles for ``call``: the target's own
        implementation (``impls[kind](call) -> Stmt``), else a TVM-style ``fcompute``
        (``impls["default"](inputs, outputs) -> Stmt``), else the declared computation."""
        impl = self.impls.get(target_kind)
        if impl is not None:
            stmt = impl(call)
        elif "default" in self.impls:
            stmt = self.impls["default"](list(call.inputs), list(call.outputs))
        else:
            return self.lower_fallback(call)
        if not isinstance(stmt, Stmt):
            raise ScheduleError("tensorize", self.name, f"the {target_kind!r} implementation "
                                f"returned {type(stmt).__name__}, not a loop-IR statement")
        return stmt

    def lower_fallback(self, call: IntrinCall) -> Stmt:
        """The declared computation over the call's regions, as plain loops (update only)."""
        loop_vars = [Var(f"{self.name}_{iv.name}", "int64") for iv in self.axes]
        amap = {iv.var: v for iv, v in zip(self.axes, loop_vars)}
        spatial_vars = loop_vars[:len(self.op.axis)]

        def region_index(reg: BufferRegion, intrin_idx: list[Expr]) -> list[Expr]:
            return [m + intrin_idx[a] if a is not None else m for m, a in zip(reg.mins, reg.axes)]

        def pre(n: Any) -> Any:
            if isinstance(n, TensorLoad):
                k = self.inputs.index(next(t for t in self.inputs if t is n.tensor))
                idx = [transform(substitute(i, amap), pre=pre) for i in n.indices]
                return BufferLoad(call.inputs[k].buffer, region_index(call.inputs[k], idx))
            return None

        stores = []
        for o, b in enumerate(self.op.body):
            reg = call.outputs[o]
            idx = region_index(reg, list(spatial_vars))
            if isinstance(b, Reduce):
                src = [transform(substitute(s, amap), pre=pre) for s in b.source]
                acc = [BufferLoad(call.outputs[i].buffer, idx) for i in range(len(self.op.body))]
                val = b.combiner.combine(acc, src)[o]
            else:
                val = transform(substitute(b, amap), pre=pre)
            stores.append(BufferStore(reg.buffer, val, idx))
        from tdsl.lowering.nest import seq
        stmt: Stmt = seq(stores)
        for v, e in reversed(list(zip(loop_vars, self.extents))):
            stmt = For(v, Const(0, "int64"), Const(e, "int64"), ForKind.SERIAL, stmt)
        return stmt


def decl_tensor_intrin(op: Any, fcompute: "Callable | None" = None, name: str = "tensor_intrin",
                       impls: "Mapping[str, Callable] | None" = None, warp_collective: bool = False,
                       **_: Any) -> TensorIntrin:
    """Declare a tensor intrinsic from the operation it computes (TVM's decl_tensor_intrin).

    ``fcompute`` is accepted for TVM compatibility and stored as the implementation
    for every target that has none in ``impls``.
    """
    op = op.op if hasattr(op, "op") and not isinstance(op, ComputeOp) else op
    if not isinstance(op, ComputeOp):
        raise ScheduleError("decl_tensor_intrin", name, "expects the compute operation the "
                            "intrinsic performs")
    for t in op.input_tensors:
        if not isinstance(t.op, PlaceholderOp):
            raise ScheduleError("decl_tensor_intrin", name, f"input '{t.name}' must be a placeholder")
    intrin = TensorIntrin(name, op, impls, warp_collective)
    if fcompute is not None:
        intrin.impls.setdefault("default", fcompute)
    return intrin


@dataclass
class Match:
    """How a stage's loops and loads line up with an intrinsic's."""

    axis_of_leaf: dict          # inner leaf IterVar -> intrinsic axis index
    load_order: list            # per load (traversal order): (intrin input index, dim map)
    out_dims: list              # per stage output dim: intrinsic output dim or None


def _leaf_root(stage: "Stage", leaf: IterVar) -> tuple[IterVar, Optional[int]]:
    """The root axis a tensorized leaf runs along, and its constant extent (None where
    only lowering knows it: the region of an attached stage, checked then)."""
    if leaf in stage.root_iter_vars:
        e = leaf.dom.extent
        if stage.attach_type.value == "scope" and leaf.kind is not IterKind.REDUCE:
            return leaf, None
        return leaf, (e.value if isinstance(e, Const) else None)
    for rel in stage.relations:
        if isinstance(rel, Split) and rel.inner is leaf and rel.parent in stage.root_iter_vars \
                and rel.factor is not None and isinstance(rel.factor, Const):
            return rel.parent, rel.factor.value
    raise ScheduleError("tensorize", stage.name, f"loop '{leaf.name}' under the tensorize point must be "
                        f"an axis or the inner part of a constant split of one", leaf.name)


def _load_list(e: Any, out: list) -> None:
    if isinstance(e, TensorLoad):
        out.append(e)
    for c in children(e):
        _load_list(c, out)


def check_tensorize(stage: "Stage", var: IterVar, intrin: TensorIntrin) -> Match:
    if not isinstance(intrin, TensorIntrin):
        raise ScheduleError("tensorize", stage.name, "the second argument must come from "
                            "td.decl_tensor_intrin", getattr(var, "name", None))
    var = stage.find_leaf("tensorize", var)
    op = stage.op
    if not isinstance(op, ComputeOp):
        raise ScheduleError("tensorize", stage.name, "only a compute stage can be tensorized", var.name)
    inner = stage.leaf_iter_vars[stage.leaf_iter_vars.index(var):]
    roots = {}
    for leaf in inner:
        root, ext = _leaf_root(stage, leaf)
        if root in roots:
            raise ScheduleError("tensorize", stage.name, f"axis '{root.name}' appears twice under the "
                                f"tensorize point", leaf.name)
        roots[root] = (leaf, ext)
    order = [r for r in stage.root_iter_vars if r in roots]
    if len(order) != len(intrin.axes):
        raise ScheduleError("tensorize", stage.name, f"{len(order)} loop(s) under '{var.name}' but the "
                            f"intrinsic '{intrin.name}' has {len(intrin.axes)} axes", var.name)
    vmap: dict[Var, Expr] = {}
    axis_of_leaf = {}
    for j, (r, iax) in enumerate(zip(order, intrin.axes)):
        leaf, ext = roots[r]
        if (r.kind is IterKind.REDUCE) != (iax.kind is IterKind.REDUCE):
            raise ScheduleError("tensorize", stage.name, f"loop '{leaf.name}' is a "
                                f"{r.kind.value} loop but the intrinsic's axis '{iax.name}' is "
                                f"{iax.kind.value}", leaf.name)
        if ext is not None and ext != intrin.extents[j] or \
                ext is None and stage.attach_type.value != "scope":
            raise ScheduleError("tensorize", stage.name, f"loop '{leaf.name}' has extent {ext} but the "
                                f"intrinsic's axis '{iax.name}' has {intrin.extents[j]}", leaf.name)
        vmap[r.var] = Var(f"base_{r.name}", "int64") + iax.var
        axis_of_leaf[leaf] = j
    for r in stage.root_iter_vars:
        vmap.setdefault(r.var, Var(f"base_{r.name}", "int64"))
    if len(op.body) != len(intrin.op.body):
        raise ScheduleError("tensorize", stage.name, "the stage and the intrinsic produce different "
                            "numbers of outputs", var.name)
    axis_vars = frozenset(iv.var for iv in intrin.axes)
    loads: list = []
    for sb, ib in zip(op.body, intrin.op.body):
        _match(stage, var, sb, ib, vmap, axis_vars, intrin, loads)
    out_dims = []
    spatial = list(intrin.op.axis)
    for iv in op.axis:
        out_dims.append(next((j for j, r in enumerate(order) if r is iv), None))
    out_dims = [d if d is None or d < len(spatial) else None for d in out_dims]
    return Match(axis_of_leaf, loads, out_dims)


def _fail(stage: "Stage", var: IterVar, intrin: TensorIntrin, why: str) -> ScheduleError:
    return ScheduleError("tensorize", stage.name, f"the loop body does not match intrinsic "
                         f"'{intrin.name}': {why}", var.name)


def _match(stage, var, s: Any, i: Any, vmap, axis_vars, intrin, loads) -> None:
    from tdsl.arith import Analyzer
    if isinstance(s, Reduce) or isinstance(i, Reduce):
        if not (isinstance(s, Reduce) and isinstance(i, Reduce)):
            raise _fail(stage, var, intrin, "one is a reduction and the other is not")
        if s.combiner.name != i.combiner.name or len(s.source) != len(i.source):
            raise _fail(stage, var, intrin, f"reducer '{s.combiner.name}' vs '{i.combiner.name}'")
        for a, b in zip(s.source, i.source):
            _match(stage, var, a, b, vmap, axis_vars, intrin, loads)
        return
    if isinstance(s, TensorLoad) and isinstance(i, TensorLoad):
        k = next(n for n, t in enumerate(intrin.inputs) if t is i.tensor)
        ana = Analyzer()
        sidx = [ana.simplify(substitute(e, vmap)) for e in s.indices]
        dims: list = []
        free = [d for d, e in enumerate(sidx) if free_vars(e) & axis_vars]
        if len(free) != len(i.indices) and not all(isinstance(x, Const) for x in i.indices):
            if len(free) > len(i.indices):
                raise _fail(stage, var, intrin, f"'{s.tensor.name}' is indexed along more loops than "
                            f"the intrinsic's '{i.tensor.name}'")
        it = iter(range(len(i.indices)))
        for d, e in enumerate(sidx):
            if d in free:
                j = next(it, None)
                if j is None:
                    raise _fail(stage, var, intrin, f"index {d} of '{s.tensor.name}'")
                diff = ana.simplify(e - i.indices[j])
                if free_vars(diff) & axis_vars:
                    raise _fail(stage, var, intrin, f"index {d} of '{s.tensor.name}' ({s.indices[d]!r}) "
                                f"does not run like index {j} of '{i.tensor.name}' ({i.indices[j]!r})")
                dims.append(j)
            else:
                dims.append(None)
        loads.append((k, dims))
        return
    if type(s) is not type(i) or s.dtype != i.dtype:
        raise _fail(stage, var, intrin, f"{type(s).__name__} vs {type(i).__name__}")
    if isinstance(s, Const) and s.value != i.value:
        raise _fail(stage, var, intrin, f"constant {s.value} vs {i.value}")
    if isinstance(s, Var):
        if s is not i:
            raise _fail(stage, var, intrin, f"variable '{s.name}' vs '{i.name}' outside an index")
        return
    if getattr(s, "func", None) != getattr(i, "func", None):
        raise _fail(stage, var, intrin, f"call {s.func} vs {i.func}")
    for a, b in zip(children(s), children(i)):
        _match(stage, var, a, b, vmap, axis_vars, intrin, loads)


def tensorize(stage: "Stage", var: IterVar, intrin: TensorIntrin) -> None:
    match = check_tensorize(stage, var, intrin)
    a = stage.attr(stage.find_leaf("tensorize", var))
    a.tensor_intrin = intrin
    stage.tensorize_match = match  # type: ignore[attr-defined]


def make_intrin_call(builder: Any, st: "Stage", inner: list, vmap: dict) -> IntrinCall:
    """The IntrinCall replacing ``st``'s loops ``inner`` (used by lowering)."""
    intrin: TensorIntrin = st.iter_attrs[inner[0]].tensor_intrin
    match: Match = st.tensorize_match  # type: ignore[attr-defined]
    extents = builder.bounds[st].extents
    for leaf, j in match.axis_of_leaf.items():
        got = builder.ana.const_int_bound(extents[leaf])
        if got != (intrin.extents[j], intrin.extents[j]):
            from tdsl.errors import LoweringError
            raise LoweringError(f"tensorize: stage '{st.name}', loop '{leaf.name}' runs over "
                                f"{extents[leaf]!r} iterations here, but the intrinsic "
                                f"'{intrin.name}' covers {intrin.extents[j]}")
    zero = {iv.var: Const(0, iv.var.dtype) for iv in inner}
    base = {k: substitute(v, zero) for k, v in vmap.items()}
    stor = builder.storage[st]
    loads: list = []
    for b in builder.bodies[st]:
        for src in (b.source if isinstance(b, Reduce) else (b,)):
            _load_list(src, loads)
    inputs: list[Optional[BufferRegion]] = [None] * len(intrin.inputs)
    for load, (k, dims) in zip(loads, match.load_order):
        lowered = builder.lower_expr(load, base)
        shape = intrin.inputs[k].shape
        ext = [shape[j] if j is not None else Const(1, "int64") for j in dims]
        inputs[k] = BufferRegion(lowered.buffer, lowered.indices, ext, dims)
    outputs = []
    for o, buf in enumerate(stor.buffers):
        idx = builder.out_indices(st, base, stor)
        ext = [intrin.op.axis[j].dom.extent if j is not None else Const(1, "int64")
               for j in match.out_dims]
        outputs.append(BufferRegion(buf, idx, ext, match.out_dims))
    return IntrinCall(intrin, inputs, outputs, reset=False, update=True)
