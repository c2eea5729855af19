"""decl_tensor_intrin and tensorize: replace a loop nest by a hardware intrinsic.

The intrinsic declares the computation it performs (a compute over
placeholders).  ``match_intrin`` checks that the loops from the chosen loop
inward compute exactly that (same loop extents in the same roles, the same
expression up to index offsets).  ``tensorize`` runs it when called, as an
early error; lowering runs it again on the final loop order and the body with
inlined producers substituted (tdsl/lowering/tensorize.py), since primitives
called later change both, and only then builds the ``IntrinCall``.  Loop
primitives that would certainly break the region (split/fuse inside it, a
reorder that moves loops into or out of it) are refused when called.
A backend uses the intrinsic's implementation
for its target, or the declared computation itself (``lower_fallback``).
Reductions are initialized by the stage's ordinary init nest, so an intrinsic
call only ever performs the update.
"""
from __future__ import annotations

import copy
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
        #: per axis: an int, or an expression of the intrinsic's sizes (``te.var("n")``),
        #: fixed where it is tensorized by the loops it replaces (``specialized``)
        self.extents: list = []
        for iv in self.axes:
            e = iv.dom.extent
            if not isinstance(iv.dom.min, Const) or iv.dom.min.value != 0:
                raise ScheduleError("decl_tensor_intrin", name, f"axis '{iv.name}' starts at "
                                    f"{iv.dom.min!r}; an intrinsic's axes start at 0")
            self.extents.append(e.value if isinstance(e, Const) else e)
        #: the sizes this copy was specialized to (``specialized``)
        self.sizes: dict = {}

    def __repr__(self) -> str:
        return f"TensorIntrin({self.name})"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise ScheduleError("decl_tensor_intrin", self.name, "an intrinsic is applied with "
                            "s[stage].tensorize(loop, intrin), not called inside a compute")

    @property
    def symbolic(self) -> bool:
        """True if some axis extent is an expression of sizes, not a number."""
        return any(not isinstance(e, int) for e in self.extents)

    def bind_sizes(self, stage: "Stage", loops: list) -> dict:
        """The intrinsic's sizes fixed by ``loops`` (``(axis index, loop name, constant
        extent or None)``): an axis whose extent is a size takes the loop's extent; every
        other symbolic extent must then be a number.  ScheduleError on a conflict."""
        from tdsl.arith import Analyzer
        sizes: dict = {}
        for j, name, ext in loops:
            want = self.extents[j]
            if isinstance(want, Var) and ext is not None:
                have = sizes.setdefault(want, ext)
                if have != ext:
                    raise ScheduleError("tensorize", stage.name, f"the intrinsic's size "
                                        f"'{want.name}' would be both {have} and {ext} (loop "
                                        f"'{name}')", name)
        for j, name, ext in loops:
            want = self.extents[j]
            if isinstance(want, int) or ext is None:
                continue
            got = Analyzer().simplify(substitute(want, {v: Const(n, v.dtype)
                                                        for v, n in sizes.items()}))
            if not isinstance(got, Const):
                raise ScheduleError("tensorize", stage.name, f"the extent {want!r} of the "
                                    f"intrinsic's axis '{self.axes[j].name}' is not fixed by the "
                                    f"loops it replaces (an axis whose extent is a bare size "
                                    f"fixes that size)", name)
            if got.value != ext:
                raise ScheduleError("tensorize", stage.name, f"loop '{name}' has extent {ext} "
                                    f"but the intrinsic's axis '{self.axes[j].name}' has "
                                    f"{want!r} = {got.value}", name)
        return sizes

    def specialized(self, sizes: dict) -> "TensorIntrin":
        """This intrinsic with its sizes fixed (every extent a number): what a tensorized
        region calls.  The same object when it has no sizes."""
        if not self.symbolic:
            return self
        key = tuple(sorted((v.name, id(v), n) for v, n in sizes.items()))
        cache = self.__dict__.setdefault("_specialized", {})
        if key not in cache:
            from tdsl.arith import Analyzer
            ana = Analyzer()
            cmap = {v: Const(n, v.dtype) for v, n in sizes.items()}
            twin = copy.copy(self)
            twin.__dict__.pop("_specialized", None)
            twin.extents = []
            for iv, e in zip(self.axes, self.extents):
                e = e if isinstance(e, int) else ana.simplify(substitute(e, cmap))
                if not isinstance(e, (int, Const)):
                    raise ScheduleError("tensorize", self.name, f"axis '{iv.name}' of the "
                                        f"intrinsic has extent {e!r} once its sizes are fixed")
                twin.extents.append(e if isinstance(e, int) else e.value)
            twin.sizes = dict(sizes)
            cache[key] = twin
        return cache[key]

    def size_map(self) -> dict:
        """Each size this copy was specialized to, as a constant (for its shapes)."""
        return {v: Const(n, v.dtype) for v, n in self.sizes.items()}

    def implementation(self, target_kind: str, call: IntrinCall) -> Stmt:
        """The statement a loop-IR backend compiles for ``call``: the target's own
        implementation (``impls[kind](call) -> Stmt``), else a TVM-style ``fcompute``
        (``impls["default"](inputs, outputs) -> Stmt``), else the declared computation."""
        impl = self.impls.get(target_kind)
        if impl is not None:
            stmt = impl(call)
        elif "default" in self.impls:
            try:
                stmt = self.impls["default"](list(call.inputs), list(call.outputs))
            except (AttributeError, TypeError) as e:
                # a TVM-style function (ins[0].access_ptr, ir_builder) given to the core API
                raise ScheduleError(
                    "tensorize", self.name,
                    f"its function failed on tdsl's buffer regions ({type(e).__name__}: {e}): "
                    f"the core decl_tensor_intrin calls it with BufferRegion inputs and "
                    f"outputs and expects a loop-IR statement; a TVM-style function (buffers "
                    f"with access_ptr, tir.ir_builder) belongs to "
                    f"tdsl.compat.tvm.te.decl_tensor_intrin") from e
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
                       scalar_params: Any = None, **_: Any) -> TensorIntrin:
    """Declare a tensor intrinsic from the operation it computes (TVM's decl_tensor_intrin).

    ``fcompute`` is accepted for TVM compatibility and stored as the implementation
    for every target that has none in ``impls``.  TVM's buffer options (``binds``,
    ``default_buffer_params``) are ignored: tdsl's regions are compact.
    """
    if scalar_params:
        raise ScheduleError("decl_tensor_intrin", name, "scalar_params (an intrinsic called "
                            "with scalar arguments inside a compute) are not supported; "
                            "declare the scalars as inputs, or tensorize a stage that "
                            "computes them")
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
class LoadMatch:
    """A load of the stage body that stands for one of the intrinsic's inputs."""

    load: TensorLoad            # the stage's load
    input: int                  # index of the intrinsic input it stands for
    dims: list                  # per dim of the loaded tensor: the intrinsic input dim, or None
    origin: list                # per dim: the index at the region's origin, over ``Match.base``


@dataclass
class Match:
    """How a stage's loops and loads line up with an intrinsic's."""

    axis_of_leaf: dict          # region leaf IterVar -> intrinsic axis index
    loads: list                 # LoadMatch per load of the body, in traversal order
    out_dims: list              # per stage output dim: intrinsic output dim or None
    base: dict                  # root IterVar -> Var: the root's value at the region's origin
    sizes: dict                 # the intrinsic's size Var -> the int the loops fix it to


def tensorized_loop(stage: "Stage") -> Optional[IterVar]:
    """The outermost leaf loop of ``stage`` that carries a tensor intrinsic, if any."""
    return next((iv for iv in stage.leaf_iter_vars
                 if stage.iter_attrs.get(iv) is not None and stage.iter_attrs[iv].tensor_intrin is not None),
                None)


def region_loops(stage: "Stage", leaves: "list[IterVar] | None" = None) -> list[IterVar]:
    """The loops the intrinsic replaces: the tensorized loop and every loop under it."""
    leaves = list(stage.leaf_iter_vars) if leaves is None else leaves
    t = tensorized_loop(stage)
    return [] if t is None else leaves[leaves.index(t):]


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


def match_intrin(stage: "Stage", var: IterVar, intrin: TensorIntrin, body: tuple,
                 leaves: list[IterVar]) -> Match:
    """Check that the loops ``leaves[leaves.index(var):]`` over ``body`` compute what
    ``intrin`` declares; ScheduleError naming the mismatch otherwise.

    Used when ``tensorize`` is called (an early error) and again by lowering, on the
    final loop order and the body with every inlined producer substituted in (the
    authority: primitives called after ``tensorize`` can change both).
    """
    op = stage.op
    if not isinstance(op, ComputeOp):
        raise ScheduleError("tensorize", stage.name, "only a compute stage can be tensorized", var.name)
    inner = leaves[leaves.index(var):]
    for other in stage._sch.stages:
        if other.attach_stage is stage and other.attach_ivar in inner:
            raise ScheduleError("tensorize", stage.name, f"stage '{other.name}' is attached to loop "
                                f"'{other.attach_ivar.name}', inside the tensorized region; attach it "
                                f"outside '{var.name}'", var.name)
    roots: dict = {}
    for leaf in inner:
        root, ext = _leaf_root(stage, leaf)
        if root in roots:
            raise ScheduleError("tensorize", stage.name, f"axis '{root.name}' appears twice under the "
                                f"tensorize point", leaf.name)
        roots[root] = (leaf, ext)
    order = [r for r in stage.root_iter_vars if r in roots]
    if len(order) != len(intrin.axes):
        raise ScheduleError("tensorize", stage.name, f"{len(order)} loop(s) under '{var.name}' "
                            f"({', '.join(iv.name for iv in inner)}) but the intrinsic "
                            f"'{intrin.name}' has {len(intrin.axes)} axes", var.name)
    base = {r: Var(f"base_{r.name}", "int64") for r in stage.root_iter_vars}
    vmap: dict[Var, Expr] = {r.var: base[r] for r in stage.root_iter_vars}
    axis_of_leaf = {}
    sizes = intrin.bind_sizes(stage, [(j, roots[r][0].name, roots[r][1])
                                      for j, r in enumerate(order)])
    fixed = intrin.specialized(sizes) if all(roots[r][1] is not None for r in order) else intrin
    for j, (r, iax) in enumerate(zip(order, intrin.axes)):
        leaf, ext = roots[r]
        if (r.kind is IterKind.REDUCE) != (iax.kind is IterKind.REDUCE):
            raise ScheduleError("tensorize", stage.name, f"loop '{leaf.name}' is a "
                                f"{r.kind.value} loop but the intrinsic's axis '{iax.name}' is "
                                f"{iax.kind.value}", leaf.name)
        want = fixed.extents[j]     # a number, or a size expression bind_sizes checked
        if ext is not None and isinstance(want, int) and ext != want or \
                ext is None and stage.attach_type.value != "scope":
            raise ScheduleError("tensorize", stage.name, f"loop '{leaf.name}' has extent {ext} but the "
                                f"intrinsic's axis '{iax.name}' has {intrin.extents[j]}", leaf.name)
        vmap[r.var] = base[r] + iax.var
        axis_of_leaf[leaf] = j
    if len(body) != len(intrin.op.body):
        raise ScheduleError("tensorize", stage.name, "the stage and the intrinsic produce different "
                            "numbers of outputs", var.name)
    for t, it in zip(op.outputs, intrin.op.outputs):
        if t.dtype != it.dtype:
            raise _fail(stage, var, intrin, f"output '{t.name}' is {t.dtype} but the intrinsic's "
                        f"'{it.name}' is {it.dtype}")
    m = _Matcher(stage, var, intrin, vmap, frozenset(iv.var for iv in intrin.axes))
    for sb, ib in zip(body, intrin.op.body):
        m.match(sb, ib)
    out_dims = [next((j for j, r in enumerate(order) if r is iv), None) for iv in op.axis]
    return Match(axis_of_leaf, m.loads, out_dims, base, sizes)


def _fail(stage: "Stage", var: IterVar, intrin: TensorIntrin, why: str) -> ScheduleError:
    return ScheduleError("tensorize", stage.name, f"the loop body does not match intrinsic "
                         f"'{intrin.name}': {why}", var.name)


def _is_true(e: Any) -> bool:
    return isinstance(e, Const) and bool(e.value)


class _Matcher:
    """Structural match of a stage expression against the intrinsic's, collecting loads."""

    def __init__(self, stage: "Stage", var: IterVar, intrin: TensorIntrin, vmap: dict,
                 axis_vars: frozenset):
        from tdsl.arith import Analyzer
        self.stage, self.var, self.intrin = stage, var, intrin
        self.vmap, self.axis_vars = vmap, axis_vars
        self.ana = Analyzer()
        self.loads: list[LoadMatch] = []

    def fail(self, why: str) -> ScheduleError:
        return _fail(self.stage, self.var, self.intrin, why)

    def match(self, s: Any, i: Any) -> None:
        if isinstance(s, Reduce) or isinstance(i, Reduce):
            if not (isinstance(s, Reduce) and isinstance(i, Reduce)):
                raise self.fail("one is a reduction and the other is not")
            if s.combiner.name != i.combiner.name or len(s.source) != len(i.source):
                raise self.fail(f"reducer '{s.combiner.name}' vs '{i.combiner.name}'")
            if not (_is_true(s.condition) and _is_true(i.condition)):
                raise self.fail("a reduction with a condition (where=) cannot be tensorized: the "
                                "intrinsic would not apply it")
            for a, b in zip(s.source, i.source):
                self.match(a, b)
            return
        if isinstance(i, TensorLoad):
            if not isinstance(s, TensorLoad):
                raise self.fail(f"the intrinsic reads its input '{i.tensor.name}' where the stage "
                                f"computes {s!r}, not a load of a tensor (was a producer inlined into "
                                f"the stage?); compute that producer at root, or at a loop outside the "
                                f"tensorized region")
            self.match_load(s, i)
            return
        if type(s) is not type(i) or s.dtype != i.dtype:
            raise self.fail(f"{type(s).__name__} vs {type(i).__name__}")
        if isinstance(s, Const) and s.value != i.value:
            raise self.fail(f"constant {s.value} vs {i.value}")
        if isinstance(s, Var):
            if s is not i:
                raise self.fail(f"variable '{s.name}' vs '{i.name}' outside an index")
            return
        if getattr(s, "func", None) != getattr(i, "func", None):
            raise self.fail(f"call {s.func} vs {i.func}")
        sc, ic = list(children(s)), list(children(i))
        if len(sc) != len(ic):
            raise self.fail(f"{type(s).__name__} with {len(sc)} vs {len(ic)} operands")
        for a, b in zip(sc, ic):
            self.match(a, b)

    def match_load(self, s: TensorLoad, i: TensorLoad) -> None:
        """``s`` must run over the intrinsic's axes exactly as ``i`` does (up to an offset
        that the loops outside the region fix), dimension by dimension in order."""
        if s.dtype != i.dtype:
            raise self.fail(f"'{s.tensor.name}' is {s.dtype} but the intrinsic's "
                            f"'{i.tensor.name}' is {i.dtype}")
        k = next(n for n, t in enumerate(self.intrin.inputs) if t is i.tensor)
        ana, axis_vars = self.ana, self.axis_vars
        sidx = [ana.simplify(substitute(e, self.vmap)) for e in s.indices]
        s_free = [d for d, e in enumerate(sidx) if free_vars(e) & axis_vars]
        i_free = [j for j, e in enumerate(i.indices) if free_vars(e) & axis_vars]
        if len(s_free) != len(i_free):
            raise self.fail(f"'{s.tensor.name}' is indexed along {len(s_free)} of the intrinsic's "
                            f"loops but the intrinsic's '{i.tensor.name}' along {len(i_free)}")
        dims: list = [None] * len(sidx)
        origin = list(sidx)
        for d, j in zip(s_free, i_free):
            diff = ana.simplify(sidx[d] - i.indices[j])
            if free_vars(diff) & axis_vars:
                raise self.fail(f"index {d} of '{s.tensor.name}' ({s.indices[d]!r}) does not run like "
                                f"index {j} of '{i.tensor.name}' ({i.indices[j]!r})")
            dims[d], origin[d] = j, diff
        for prev in self.loads:
            if prev.input != k:
                continue
            same = prev.load.tensor is s.tensor and prev.dims == dims and all(
                ana.can_prove(ana.simplify(a - b) == 0) for a, b in zip(prev.origin, origin))
            if not same:
                raise self.fail(f"the intrinsic's input '{i.tensor.name}' stands for "
                                f"{prev.load!r} in one place and {s!r} in another")
        self.loads.append(LoadMatch(s, k, dims, origin))


def current_body(stage: "Stage") -> tuple:
    """The stage's body with the producers inlined so far substituted in."""
    from tdsl.lowering.inline import inlined_bodies
    return inlined_bodies(stage._sch)[stage]


def check_tensorize(stage: "Stage", var: Any, intrin: Any) -> IterVar:
    if not isinstance(intrin, TensorIntrin):
        raise ScheduleError("tensorize", stage.name, "the second argument must come from "
                            "td.decl_tensor_intrin", getattr(var, "name", None))
    var = stage.find_leaf("tensorize", var)
    if stage.attach_type.value == "inline":
        raise ScheduleError("tensorize", stage.name, "the stage is inlined and has no loops", var.name)
    t = tensorized_loop(stage)
    if t is not None and t is not var:
        raise ScheduleError("tensorize", stage.name, f"loop '{t.name}' is already tensorized; a stage "
                            f"has one tensorized region", var.name)
    a = stage.iter_attrs.get(var)
    if a is not None and a.thread_tag is not None:
        raise ScheduleError("tensorize", stage.name, f"the loop is bound to {a.thread_tag}", var.name)
    match_intrin(stage, var, intrin, current_body(stage), list(stage.leaf_iter_vars))
    return var


def tensorize(stage: "Stage", var: IterVar, intrin: TensorIntrin) -> None:
    var = check_tensorize(stage, var, intrin)
    stage.attr(var).tensor_intrin = intrin


def tensorize_region(stage: "Stage", intrin: TensorIntrin, loops: Any, at: IterVar) -> None:
    """A new stage of a compute whose inner axes ``intrin`` computes (``ComputeOp.
    intrin_region``): order its loops as ``loops`` (a permutation of its axes) and tensorize
    them from ``at`` inward.  Not a recorded primitive: it is the stage's default."""
    loops = list(loops)
    if sorted(map(id, loops)) != sorted(map(id, stage.leaf_iter_vars)):
        raise ScheduleError("tensorize", stage.name, "the intrinsic region's loops are not the "
                            "stage's axes", at.name)
    stage.leaf_iter_vars[:] = loops
    tensorize(stage, at, intrin)


# ---- early refusals for primitives called after tensorize (lowering re-checks) -------------
def check_outside_region(primitive: str, stage: "Stage", loops: list[IterVar]) -> None:
    """Refuse to split or fuse a loop inside a tensorized region: the intrinsic matches
    only axes and inner parts of constant splits, so the region could no longer match."""
    region = region_loops(stage)
    for iv in loops:
        if iv in region:
            raise ScheduleError(primitive, stage.name, f"the loop is inside the region tensorized at "
                                f"'{region[0].name}'; transform loops before tensorize", iv.name)


def check_reorder_keeps_region(stage: "Stage", new_leaves: list[IterVar]) -> None:
    """Refuse a reorder that changes which loops the tensorized loop encloses (loops
    may still be reordered inside the region, or outside it)."""
    t = tensorized_loop(stage)
    if t is None:
        return
    old = region_loops(stage)
    new = new_leaves[new_leaves.index(t):]
    if set(old) != set(new):
        moved_in = [iv.name for iv in new if iv not in old]
        moved_out = [iv.name for iv in old if iv not in new]
        why = "; ".join(x for x in (f"it would move {moved_in} under it" if moved_in else "",
                                    f"it would move {moved_out} out of it" if moved_out else "") if x)
        raise ScheduleError("reorder", stage.name, f"loop '{t.name}' is tensorized over "
                            f"{[iv.name for iv in old]}; {why}. Reorder before tensorize", t.name)


def check_regions_still_match(primitive: str, stage: "Stage") -> None:
    """Re-match every tensorized region of the schedule against the bodies as they are
    now; a mismatch is blamed on ``primitive`` called on ``stage`` (the caller has just
    changed the schedule tentatively and rolls back on error)."""
    sch = stage._sch
    from tdsl.lowering.inline import inlined_bodies
    bodies = None
    for other in sch.stages:
        t = tensorized_loop(other)
        if t is None or other.attach_type.value == "inline":
            continue
        bodies = inlined_bodies(sch) if bodies is None else bodies
        try:
            match_intrin(other, t, other.iter_attrs[t].tensor_intrin, bodies[other],
                         list(other.leaf_iter_vars))
        except ScheduleError as e:
            raise ScheduleError(primitive, stage.name, f"stage '{other.name}' is tensorized at loop "
                                f"'{t.name}' and would no longer match: {e.reason}") from None
