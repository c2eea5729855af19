"""A stage: one operation's loop nest as it is being scheduled.

The state of a stage is data (root axes, split/fuse relations, the leaf loop
order, per-loop annotations, where it is attached).  The TVM-named methods
validate their arguments, run the primitive (a check then a rewrite of this
state, in the primitive modules) and record the call in the schedule's trace.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from tdsl.errors import ScheduleError
from tdsl.stmt import ForKind, StorageScope, ThreadTag
from tdsl.tensor import ComputeOp, IterKind, IterVar, Operation, PlaceholderOp

if TYPE_CHECKING:
    from .schedule import Schedule


def position(seq: "list[Any]", x: Any) -> int:
    """The index of the object ``x`` in ``seq`` (by identity; -1 if absent).  Loops are
    found by identity: ``==`` on an IterVar builds a comparison expression, which is
    correct but costs a node per element (it was a sixth of the tuner's search time)."""
    for i, y in enumerate(seq):
        if y is x:
            return i
    return -1


def unique_name(base: str, taken: "set[str]") -> str:
    """``base``, or ``base_1``, ``base_2``, ... -- the first not in ``taken``."""
    if base not in taken:
        return base
    k = 1
    while f"{base}_{k}" in taken:
        k += 1
    return f"{base}_{k}"


class AttachType(enum.Enum):
    ROOT = "root"        # its own loop nest at the top level
    INLINE = "inline"    # substituted into its consumers
    SCOPE = "scope"      # nested inside a loop of another stage (compute_at)


@dataclass
class IterAttr:
    """How one loop runs: its kind, thread binding, pragmas, tensor intrinsic."""

    kind: ForKind = ForKind.SERIAL
    thread_tag: Optional[ThreadTag] = None
    #: the extent declared by ``td.thread_axis(..., extent=)`` (lowering checks the loop's)
    thread_extent: Any = None
    pragmas: dict = field(default_factory=dict)
    tensor_intrin: Any = None


class PragmaKey(str):
    """A pragma name; ``.value`` is the string (TVM's ``StringImm``)."""

    @property
    def value(self) -> str:
        return str(self)


@dataclass(frozen=True)
class IterVarAttrView:
    """TVM's ``IterVarAttr`` of one loop, read-only (``s[C].iter_var_attrs[iv]``):
    ``iter_type`` is one of the ``IterVar.DataPar``... codes."""

    iter_type: int
    bind_thread: Any
    pragma_keys: tuple
    pragma_values: tuple
    tensor_intrin: Any


def _iter_type(iv: IterVar, a: IterAttr) -> int:
    if a.tensor_intrin is not None:
        return IterVar.Tensorized
    if a.thread_tag is not None:
        return IterVar.ThreadIndex
    codes = {ForKind.UNROLLED: IterVar.Unrolled, ForKind.VECTORIZED: IterVar.Vectorized,
             ForKind.PARALLEL: IterVar.Parallelized}
    if a.kind in codes:
        return codes[a.kind]
    return IterVar.CommReduce if iv.kind is IterKind.REDUCE else IterVar.DataPar


class Stage:
    """The schedule of one operation (``s[C]``)."""

    def __init__(self, op: Operation, sch: "Schedule"):
        self.op = op
        self.origin_op = op
        self._sch = sch
        self.relations: list = []
        self.leaf_iter_vars: list[IterVar] = list(self.root_iter_vars)
        self.all_iter_vars: list[IterVar] = list(self.root_iter_vars)
        self.iter_attrs: dict[IterVar, IterAttr] = {}
        self.attach_type = AttachType.ROOT
        self.attach_stage: Optional[Stage] = None
        self.attach_ivar: Optional[IterVar] = None
        #: True once compute_at/compute_root/compute_inline was called on this stage itself;
        #: a lifted reduction stage not yet placed follows its reader (``attach.followers``)
        self.placed = False
        #: why the last compute_at is invalid, when the schedule defers that error to
        #: ``lower`` (``Schedule.defer_attach_errors``); None otherwise
        self.attach_error: Optional[str] = None
        #: where the output lives; None: global at root, inferred when attached in a kernel
        self.scope: Optional[StorageScope] = None
        self.is_output = False
        self.storage_alignment: dict[int, tuple[int, int]] = {}   # dim -> (factor, offset)
        #: align_region: dim -> (factor, offset) of the attached region's start, (m, r) of
        #: its extent
        self.region_alignment: dict[int, tuple[int, int, tuple[int, int]]] = {}
        self.double_buffered = False
        #: set_store_predicate: only threads whose index ``tag`` equals ``value`` store
        self.store_predicate: tuple[tuple[ThreadTag, int], ...] = ()

    # ---- state queries --------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.op.name

    @property
    def is_placeholder(self) -> bool:
        return isinstance(self.op, PlaceholderOp)

    @property
    def root_iter_vars(self) -> tuple[IterVar, ...]:
        if isinstance(self.op, ComputeOp):
            return self.op.axis + self.op.reduce_axis
        from tdsl.scan_op import ScanOp
        if isinstance(self.op, ScanOp):   # its spatial axes (the scan axis is not a loop)
            return tuple(self.op.spatial_axis)
        return ()

    def attr(self, iv: IterVar) -> IterAttr:
        a = self.iter_attrs.get(iv)
        if a is None:
            a = self.iter_attrs[iv] = IterAttr()
        return a

    @property
    def iter_var_attrs(self) -> dict[IterVar, IterVarAttrView]:
        """TVM's view of the annotated loops: iteration type, thread, pragmas (a copy)."""
        return {iv: IterVarAttrView(_iter_type(iv, a), a.thread_tag,
                                    tuple(PragmaKey(k) for k in a.pragmas),
                                    tuple(a.pragmas.values()), a.tensor_intrin)
                for iv, a in self.iter_attrs.items()}

    def is_scheduled(self) -> bool:
        return bool(self.relations) or self.leaf_iter_vars != list(self.root_iter_vars) \
            or any(a.kind is not ForKind.SERIAL or a.pragmas or a.tensor_intrin is not None
                   for a in self.iter_attrs.values()) or bool(self.store_predicate)

    def find_leaf(self, primitive: str, iv: Any) -> IterVar:
        """Check that ``iv`` is a current loop of this stage; return it."""
        if not isinstance(iv, IterVar):
            raise ScheduleError(primitive, self.name,
                                f"expected a loop (IterVar) of the stage, got {type(iv).__name__} {iv!r}")
        if position(self.leaf_iter_vars, iv) >= 0:
            self._check_scan(primitive, iv)
            return iv
        owner = self._sch.owner_of(iv)
        if owner is not None and owner is not self:
            raise ScheduleError(primitive, self.name,
                                f"loop '{iv.name}' belongs to stage '{owner.name}', not to this stage",
                                loop=iv.name)
        scan_axis = getattr(self.op, "scan_axis", None)
        if scan_axis is not None and iv is scan_axis:
            raise ScheduleError(primitive, self.name, f"'{iv.name}' is the scan axis, which runs "
                                f"sequentially inside the stage's loops; schedule its spatial "
                                f"axes (op.spatial_axis)", loop=iv.name)
        if position(self.all_iter_vars, iv) >= 0:
            raise ScheduleError(primitive, self.name,
                                f"loop '{iv.name}' was already split or fused; use the loops that "
                                f"replaced it: {[v.name for v in self.leaf_iter_vars]}", loop=iv.name)
        raise ScheduleError(primitive, self.name, f"loop '{iv.name}' is not a loop of this stage",
                            loop=iv.name)

    def _check_scan(self, primitive: str, iv: IterVar) -> None:
        """A scan's loops may be scheduled only where its scan loop can run inside them."""
        from tdsl.scan_op import ScanOp
        if not isinstance(self.op, ScanOp):
            return
        if primitive in ("vectorize", "tensorize"):
            raise ScheduleError(primitive, self.name, f"the body of a scan's loop is its "
                                f"sequential loop over the scan axis, which has no SIMD or "
                                f"tensor-intrinsic form", loop=iv.name)
        reason = self.op.spatial_reason()
        if reason is not None:
            raise ScheduleError(primitive, self.name, f"scheduling a scan's loops runs its scan "
                                f"loop inside them, point by point, but {reason}", loop=iv.name)

    def unique_name(self, base: str) -> str:
        return unique_name(base, {iv.name for iv in self.all_iter_vars})

    def new_iter_var(self, name: str, kind: IterKind) -> IterVar:
        iv = IterVar(None, self.unique_name(name), kind)
        self.all_iter_vars.append(iv)
        return iv

    def __repr__(self) -> str:
        return f"stage({self.name}, {[iv.name for iv in self.leaf_iter_vars]})"

    def _run(self, primitive: str, loops: list, kwargs: dict, rewrite: Any, parent: "Stage | None" = None) -> Any:
        """Validate identities and record ``primitive`` (before anything changes), then run
        ``rewrite``; the schedule rolls back if it raises (``Schedule.run_step``)."""
        step = self._sch.trace.step(primitive, self, loops, kwargs, parent=parent)
        return self._sch.run_step(step, rewrite)

    # ---- TVM API: loop transformations ---------------------------------------------------
    def split(self, parent: IterVar, factor: Any = None, nparts: Any = None,
              disable_predication: bool = False) -> tuple[IterVar, IterVar]:
        """Split ``parent`` into (outer, inner) by ``factor`` (inner extent) or ``nparts``.

        ``factor``/``nparts`` may be symbolic (an integer expression of the
        computation's sizes, provably >= 1).  ``disable_predication`` (TVM's) is accepted
        and changes nothing: tdsl guards a tail only where the split leaves one, and
        never computes outside the stage's domain.
        """
        from . import loop_transform
        loop_transform.check_split(self, parent, factor, nparts)
        return self._run("split", [parent], {"factor": factor, "nparts": nparts},
                         lambda: loop_transform.split(self, parent, factor, nparts))

    def fuse(self, *args: IterVar) -> IterVar:
        """Fuse adjacent loops (outermost first) into one."""
        from . import loop_transform
        return self._run("fuse", list(args), {}, lambda: loop_transform.fuse(self, *args))

    def reorder(self, *args: IterVar) -> None:
        """Put the given loops in this order, in the positions they occupy together."""
        from . import loop_transform
        self._run("reorder", list(args), {}, lambda: loop_transform.reorder(self, *args))

    def tile(self, x_parent: IterVar, y_parent: IterVar, x_factor: Any, y_factor: Any
             ) -> tuple[IterVar, IterVar, IterVar, IterVar]:
        """Split two loops and reorder to (x.outer, y.outer, x.inner, y.inner)."""
        from . import loop_transform
        loop_transform.check_tile(self, x_parent, y_parent, x_factor, y_factor)
        return self._run("tile", [x_parent, y_parent], {"x_factor": x_factor, "y_factor": y_factor},
                         lambda: loop_transform.tile(self, x_parent, y_parent, x_factor, y_factor))

    # ---- TVM API: annotations ----------------------------------------------------------------
    def vectorize(self, var: IterVar) -> None:
        """Run the (innermost, constant-extent, spatial) loop as SIMD lanes."""
        from . import annotate
        self._run("vectorize", [var], {}, lambda: annotate.vectorize(self, var))

    def unroll(self, var: IterVar) -> None:
        """Fully unroll a constant-extent loop."""
        from . import annotate
        self._run("unroll", [var], {}, lambda: annotate.unroll(self, var))

    def parallel(self, var: IterVar) -> None:
        """Run the iterations of a spatial loop on several CPU threads."""
        from . import annotate
        self._run("parallel", [var], {}, lambda: annotate.parallel(self, var))

    def bind(self, ivar: IterVar, thread_ivar: IterVar) -> None:
        """Map a loop to a GPU hardware index (``td.thread_axis("threadIdx.x")``)."""
        from . import annotate
        if not isinstance(thread_ivar, IterVar) or thread_ivar.thread_tag is None:
            raise ScheduleError("bind", self.name, "the second argument must be a td.thread_axis("
                                "'blockIdx.x' / 'threadIdx.x' / ...), got "
                                f"{type(thread_ivar).__name__} {thread_ivar!r}", getattr(ivar, "name", None))
        self._run("bind", [ivar], {"thread": str(thread_ivar.thread_tag)},
                  lambda: annotate.bind(self, ivar, thread_ivar))

    def pragma(self, var: IterVar, pragma_type: str, pragma_value: Any = None) -> None:
        """Attach a backend hint to a loop (e.g. ``"unroll_explicit"``)."""
        from . import annotate
        self._run("pragma", [var], {"pragma_type": pragma_type, "pragma_value": pragma_value},
                  lambda: annotate.pragma(self, var, pragma_type, pragma_value))

    annotate = pragma

    def storage_align(self, axis: IterVar, factor: int, offset: int) -> None:
        """Pad this stage's buffer so the stride of ``axis`` is ``k*factor + offset``."""
        from . import annotate
        annotate.check_storage_align(self, axis, factor, offset)
        self._run("storage_align", [axis], {"factor": factor, "offset": offset},
                  lambda: annotate.storage_align(self, axis, factor, offset))

    def align_region(self, axis: IterVar, factor: int, offset: int = 0,
                     span_factor: "int | None" = None, span_offset: int = 0) -> None:
        """Widen the region this attached stage computes along ``axis``: its start rounded
        down to ``k*factor + offset`` and its extent up to ``k*span_factor + span_offset``
        (default: a multiple of ``factor``): a fetch into shared memory can then copy whole
        aligned vectors.  The extra elements are computed like the others (their domain
        still guarded)."""
        from . import annotate
        m = factor if span_factor is None else span_factor
        annotate.check_storage_align(self, axis, factor, offset, "align_region")
        annotate.check_storage_align(self, axis, m, span_offset, "align_region")
        self._run("align_region", [axis], {"factor": factor, "offset": offset,
                                           "span_factor": m, "span_offset": span_offset},
                  lambda: annotate.align_region(self, axis, factor, offset, (m, span_offset)))

    def double_buffer(self) -> None:
        """Keep two copies of this (shared) stage so one loads while the other is read (GPU
        kernels; on a CPU schedule it stays a plain single buffer, without barriers).  On
        sm_80+ the fetch's plain copies from global memory are ``cp.async`` copies."""
        from . import annotate
        self._run("double_buffer", [], {}, lambda: annotate.double_buffer(self))

    def tensorize(self, var: IterVar, tensor_intrin: Any) -> None:
        """Replace the loop nest from ``var`` inward by a tensor intrinsic (checked to match)."""
        from . import tensorize
        name = getattr(tensor_intrin, "name", None)
        if not isinstance(name, str):
            raise ScheduleError("tensorize", self.name, f"expected a tensor intrinsic "
                                f"(td.decl_tensor_intrin), got {type(tensor_intrin).__name__}",
                                getattr(var, "name", None))
        self._run("tensorize", [var], {"intrin": name},
                  lambda: tensorize.tensorize(self, var, tensor_intrin))

    def set_store_predicate(self, predicate: Any) -> None:
        """Store this stage's results only where ``predicate`` holds: a conjunction of
        ``thread_axis.var == constant`` (TVM's ``s[B].set_store_predicate(tx.var.equal(0))``,
        one thread of a cross-thread reduction writing its result)."""
        from . import annotate
        terms = annotate.set_store_predicate(self, predicate)
        text = ",".join(f"{t.value}=={v}" for t, v in terms)
        self._run("set_store_predicate", [], {"predicate": text},
                  lambda: setattr(self, "store_predicate", terms))

    # ---- TVM API: attachment -------------------------------------------------------------------
    def compute_at(self, parent: "Stage", scope: IterVar) -> None:
        """Compute this stage inside loop ``scope`` of stage ``parent``, just the part it needs.

        A stage that is also an argument of the function is computed whole over all the
        iterations (see ``tdsl/lowering/arg_region.py``); the reductions ``td.compute``
        lifted out of its body follow it (``attach.followers``)."""
        from . import attach
        attach.check_compute_at(self, parent, scope)
        self._run("compute_at", [scope], {}, lambda: attach.compute_at(self, parent, scope), parent=parent)

    def compute_inline(self) -> None:
        """Substitute this elementwise stage into its consumers."""
        from . import attach
        self._run("compute_inline", [], {}, lambda: attach.compute_inline(self))

    def compute_root(self) -> None:
        """Give this stage its own top-level loop nest again."""
        from . import attach
        self._run("compute_root", [], {}, lambda: attach.compute_root(self))

    def transform_layout(self, mapping: "Callable[..., Any] | None" = None, *,
                         axes: "Sequence[Any] | str | None" = None) -> None:
        """Store this stage's output with its axes permuted or blocked (TVM's
        ``transform_layout``, for those index maps): ``mapping`` takes the axis variables
        and returns the new indices, each an axis or one axis' ``// f`` and ``% f``
        (``lambda i, j: [j, i]``, ``lambda c, o: [o // 16, c, o % 16]``), or ``axes`` gives
        them as axis numbers and ``"axis/f"``, ``"axis%f"`` (a trace records
        ``"1/16,0,1%16"``).  A block past the axis' end holds zeros.  The stage's loops and
        its readers' loads follow (``schedule/layout.py``)."""
        from . import layout
        if (mapping is None) == (axes is None):
            raise ScheduleError("transform_layout", self.name, "give a mapping or axes=, "
                                "one of them")
        if mapping is not None:
            dims = layout.dims_of(self, mapping)
        else:
            dims = layout.parse_axes(self, axes)
        dims = layout.check(self, dims)
        self._run("transform_layout", [], {"axes": ",".join(map(str, dims))},
                  lambda: layout.transform_layout(self, dims))

    def set_scope(self, scope: str) -> None:
        """Set the storage scope of this stage's output ("global", "shared", "local")."""
        try:
            sc = StorageScope(scope)
        except (ValueError, TypeError):
            raise ScheduleError("set_scope", self.name, f"unknown scope {scope!r}; use "
                                f"'global', 'shared' or 'local'") from None
        self._run("set_scope", [], {"scope": scope}, lambda: setattr(self, "scope", sc))
