"""TVM's tensor intrinsics: ``te.decl_tensor_intrin`` with its buffers, and the intrinsic
applied to slices inside ``te.compute`` (TVM's TensorComputeOp).

``decl_tensor_intrin`` declares one ``tir.Buffer`` per input and output (``binds=``, else
``default_buffer_params``) and calls the intrinsic's function once with them, as TVM
does: its result is kept as ``body`` (or ``body``, ``reduce_init``, ``reduce_update`` when
it returns three).  tdsl does not run those calls: a tensorized region runs the
intrinsic's declared computation (tdsl's tensorize, ``schedule/tensorize.py``), on every
backend, so the result equals the computation the intrinsic says it performs.

``te.compute((n, 16), lambda i: intrin(A[i, 0:16], B[i, 0:16]))`` becomes an ordinary
compute over all the axes whose inner ones hold the intrinsic's declared body (its inputs
read from the slices), with the intrinsic's reduction axes after the ``reduce_axis=``
given; its schedule starts with those inner loops tensorized by the intrinsic
(``ComputeOp.intrin_region``), so loops outside them can be scheduled as usual.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence

import tdsl
from tdsl.errors import ScheduleError, ShapeError
from tdsl.expr import Const, Expr, Reduce, TensorLoad, Var
from tdsl.schedule.tensorize import TensorIntrin as _CoreIntrin
from tdsl.schedule.tensorize import decl_tensor_intrin as _core_decl
from tdsl.tensor import IterKind, IterVar, Range, Tensor, TensorRegion
from tdsl.visitor import substitute, transform

from .buffer import Buffer, BufferError, check_matches, compact_strides, decl_buffer


class TensorIntrin(_CoreIntrin):
    """tdsl's intrinsic plus TVM's fields: ``buffers`` (inputs then outputs), ``body``,
    ``reduce_init``, ``reduce_update`` (what the declared function returned) and
    ``scalar_params``; calling it on slices inside ``te.compute`` applies it there."""

    buffers: Sequence[Buffer] = ()
    body: Any = None
    reduce_init: Any = None
    reduce_update: Any = None
    scalar_params: Sequence[Any] = ()
    #: per buffer: the layout fields lowering checks (None: all, for a buffer given in
    #: ``binds``; for a default one, only those ``default_buffer_params`` set)
    checked: Sequence[Any] = ()

    def check_call(self, call: Any, where: str) -> None:
        """At lowering: each region the call reads or writes must fit the buffer declared
        for it, as TVM's buffer binding requires (``check_region``)."""
        regions = list(call.inputs) + list(call.outputs)
        for reg, buf, fields in zip(regions, self.buffers, self.checked):
            check_region(reg, buf, self.size_map(), f"{where}: intrinsic '{self.name}'", fields)

    def __call__(self, *args: Any, reduce_axis: Any = None, **kwargs: Any) -> "IntrinApplication":
        if kwargs:
            raise ShapeError(f"tensor intrinsic '{self.name}': unknown argument(s) "
                             f"{sorted(kwargs)} (only slices and reduce_axis=)")
        return IntrinApplication(self, args, reduce_axis)


def decl_tensor_intrin(op: Any, fcompute: "Callable | None" = None,
                       name: str = "tensor_intrin", binds: "dict | None" = None,
                       scalar_params: Any = None,
                       default_buffer_params: "dict | None" = None) -> TensorIntrin:
    """TVM's ``te.decl_tensor_intrin`` (see the module docstring)."""
    core = _core_decl(op, None, name=name, scalar_params=scalar_params)
    intrin = TensorIntrin(core.name, core.op, core.impls, core.warp_collective)
    tensors = list(intrin.inputs) + list(intrin.op.outputs)
    binds = dict(binds or {})
    for t in binds:
        if not any(t is u for u in tensors):
            raise BufferError(f"decl_tensor_intrin '{name}': binds names '{getattr(t, 'name', t)}'"
                              f", which is not an input or output of the intrinsic")
    params = dict(default_buffer_params or {})
    buffers, checked = [], []
    for t in tensors:
        buf = next((b for u, b in binds.items() if u is t), None)
        if buf is None:
            buf = decl_buffer(t.shape, t.dtype.value, t.op.name, **params)
            checked.append(frozenset(params))
        else:
            checked.append(None)
        check_matches(buf, t, f"decl_tensor_intrin '{name}'")
        buffers.append(buf)
    intrin.buffers = buffers
    intrin.checked = checked
    if fcompute is not None:
        n_in = len(intrin.inputs)
        result = fcompute(buffers[:n_in], buffers[n_in:])
        if isinstance(result, (tuple, list)) and len(result) == 3:
            intrin.body, intrin.reduce_init, intrin.reduce_update = result
        else:
            intrin.body = result
    return intrin


def check_region(reg: Any, buf: Buffer, sizes: dict, where: str,
                 fields: "frozenset | None" = None) -> None:
    """``reg`` (a window of a tdsl buffer) must fit ``buf`` (TVM's binding rules): the same
    scope; along the intrinsic's dimensions, the region's strides equal the buffer's
    constant strides, or its compact ones when it declares none (a symbolic stride takes
    any); the region's first element a provable multiple of ``offset_factor``.  A
    LoweringError naming the buffer otherwise.  ``fields`` limits the checks to those
    layout fields (a default buffer: what ``default_buffer_params`` set); None: all."""
    from tdsl.arith import Analyzer
    from tdsl.errors import LoweringError
    ana = Analyzer()
    actual = reg.buffer.effective_strides()
    scope = getattr(reg.buffer.scope, "value", reg.buffer.scope)
    if (fields is None or "scope" in fields) and buf.scope != scope:
        raise LoweringError(f"{where}: buffer '{buf.name}' is declared in scope '{buf.scope}' "
                            f"but the region {reg.buffer.name} is in '{scope}' (cache it there, "
                            f"or declare the buffer's scope)")
    shape = [ana.simplify(substitute(d, sizes)) for d in buf.shape]
    want = [ana.simplify(substitute(x, sizes)) for x in buf.strides] if buf.strides \
        else [ana.simplify(x) for x in compact_strides(shape)]
    for d, j in enumerate(reg.axes):
        if fields is not None and "strides" not in fields:
            break
        if j is None or (not buf.strides and _is_one(shape[j])):
            continue
        w = ana.simplify(want[j])
        if buf.strides and not isinstance(w, Const):
            continue                    # a symbolic stride: any row stride is accepted
        if not ana.can_prove(ana.simplify(actual[d] - w) == 0):
            kind = "its strides" if buf.strides else "compact strides (no strides= given)"
            raise LoweringError(f"{where}: buffer '{buf.name}' declares {kind} "
                                f"{[str(x) for x in want]} but the region of "
                                f"'{reg.buffer.name}' has stride {ana.simplify(actual[d])} "
                                f"along its dimension {j}; declare strides=[te.var(...), ...]")
    if (fields is None or "offset_factor" in fields) and buf.offset_factor > 1:
        offset = ana.simplify(sum((m * s for m, s in zip(reg.mins, actual)), Const(0, "int64")))
        if not ana.can_prove(ana.simplify(offset % buf.offset_factor) == 0):
            raise LoweringError(f"{where}: buffer '{buf.name}' declares offset_factor="
                                f"{buf.offset_factor} but the region of '{reg.buffer.name}' "
                                f"starts at element {offset}, not provably a multiple of it")


def _is_one(e: Any) -> bool:
    return isinstance(e, Const) and e.value == 1


class IntrinApplication:
    """``intrin(A[i, 0:16], ..., reduce_axis=k)``: the body of a TensorComputeOp; only
    ``te.compute`` reads it (any other use is a ShapeError)."""

    def __init__(self, intrin: TensorIntrin, args: Sequence[Any], reduce_axis: Any):
        self.intrin = intrin
        self.regions = []
        for a in args:
            if isinstance(a, Tensor):
                a = TensorRegion(a, (slice(None),) * a.ndim)
            if not isinstance(a, TensorRegion):
                raise ShapeError(f"tensor intrinsic '{intrin.name}': arguments are slices of "
                                 f"tensors (A[i, 0:16]), got {a!r}")
            self.regions.append(a)
        if len(self.regions) != len(intrin.inputs):
            raise ShapeError(f"tensor intrinsic '{intrin.name}' takes {len(intrin.inputs)} "
                             f"input(s), got {len(self.regions)}")
        axes = [] if reduce_axis is None else (
            list(reduce_axis) if isinstance(reduce_axis, (list, tuple)) else [reduce_axis])
        for k in axes:
            if not (isinstance(k, IterVar) and k.kind is IterKind.REDUCE):
                raise ShapeError(f"tensor intrinsic '{intrin.name}': reduce_axis must be "
                                 f"te.reduce_axis variables, got {k!r}")
        self.reduce_axis = axes

    def incomplete_index(self) -> ShapeError:
        """The error of using the application as a value (``convert`` raises it)."""
        return ShapeError(f"tensor intrinsic '{self.intrin.name}' applied to slices is the "
                          f"whole body of a te.compute over more axes than the lambda takes; "
                          f"it is not a value to compute with")


def lambda_arity(fcompute: Any) -> "int | None":
    """The number of positional parameters of ``fcompute`` (None for ``*args``)."""
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return None
    return len([p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)])


def _const(e: Any) -> "int | None":
    e = tdsl.arith.Analyzer().simplify(tdsl.expr.convert(e))
    return e.value if isinstance(e, Const) else None


def tensor_compute(shape: tuple, fcompute: Callable, name: str, tag: str,
                   attrs: Any) -> Tensor:
    """The compute of an intrinsic applied to slices (module docstring)."""
    k = lambda_arity(fcompute)
    params = list(inspect.signature(fcompute).parameters)[:k]
    outer = [IterVar(Range(0, s), n, IterKind.DATA_PAR) for n, s in zip(params, shape[:k])]
    app = fcompute(*[iv.var for iv in outer])
    if not isinstance(app, IntrinApplication):
        raise ShapeError(f"te.compute '{name}': the shape has {len(shape)} dimension(s) but the "
                         f"lambda takes {k}; with fewer, its body must apply a tensor intrinsic "
                         f"to slices (intrin(A[i, 0:16], ...)), got {type(app).__name__}")
    intrin = app.intrin
    where = f"te.compute '{name}': intrinsic '{intrin.name}'"
    iop = intrin.op
    inner_shape = shape[k:]
    if len(inner_shape) != len(iop.axis):
        raise ShapeError(f"{where} computes a {len(iop.axis)}-d block but the shape leaves "
                         f"{list(inner_shape)} after the lambda's {k} axes")
    smap = _bind_sizes(app, inner_shape, where) if intrin.symbolic else {}

    def fixed(e: Any) -> "int | None":
        return _const(substitute(e, smap))
    if any(_const(a) != fixed(b.dom.extent) for a, b in zip(inner_shape, iop.axis)):
        raise ShapeError(f"{where} computes a {[fixed(iv.dom.extent) for iv in iop.axis]} "
                         f"block but the shape leaves {list(inner_shape)} after the lambda's "
                         f"{k} axes")
    inner = [IterVar(Range(0, s), f"{iv.name}.i", IterKind.DATA_PAR)
             for s, iv in zip(inner_shape, iop.axis)]
    ired = [IterVar(Range(0, fixed(iv.dom.extent)), f"{iv.name}.i", IterKind.REDUCE)
            for iv in iop.reduce_axis]
    amap = {iv.var: v.var for iv, v in zip(list(iop.axis) + list(iop.reduce_axis),
                                           inner + ired)}
    amap.update(smap)
    loads = _region_loads(app, where, smap)

    def pre(n: Any) -> Any:
        if isinstance(n, TensorLoad):
            idx = [transform(substitute(i, amap), pre=pre) for i in n.indices]
            return loads[_index_of(intrin.inputs, n.tensor)](idx)
        return None

    body: list[Expr] = []
    for b in iop.body:
        if isinstance(b, Reduce):
            if b.init:
                raise ShapeError(f"{where}: a reduction with init= cannot be applied inside "
                                 f"te.compute")
            src = [transform(substitute(s, amap), pre=pre) for s in b.source]
            cond = transform(substitute(b.condition, amap), pre=pre)
            body.append(Reduce(b.combiner, src, list(app.reduce_axis) + ired, cond,
                               b.value_index))
        else:
            if app.reduce_axis:
                raise ShapeError(f"{where} is not a reduction, so reduce_axis= has nothing to "
                                 f"reduce")
            body.append(transform(substitute(b, amap), pre=pre))
    from tdsl.compute_body import make_compute
    op = make_compute(name, tag, dict(attrs or {}), outer + inner, body)
    if len(op.reduce_axis) != len(app.reduce_axis) + len(ired):
        raise ShapeError(f"{where}: the reduction could not stay at the top of the compute")
    order = outer + list(op.reduce_axis[:len(app.reduce_axis)]) + inner + \
        list(op.reduce_axis[len(app.reduce_axis):])
    op.intrin_region = (intrin, order, (inner + list(op.reduce_axis[len(app.reduce_axis):]))[0])
    return op.outputs[0] if len(op.outputs) == 1 else list(op.outputs)


def _plus(begin: Expr, i: Expr) -> Expr:
    return i if isinstance(begin, Const) and begin.value == 0 else begin + i


def _index_of(tensors: Sequence[Tensor], t: Tensor) -> int:
    return next(n for n, u in enumerate(tensors) if u is t)


def _bind_sizes(app: IntrinApplication, inner_shape: Sequence[Any], where: str) -> dict:
    """The sizes (``te.var``) of an intrinsic declared over them, fixed by this application:
    an output axis or input dimension whose extent is a bare size takes the compute's
    inner extent or the slice's; every extent must then be a number (ShapeError)."""
    intrin = app.intrin
    pairs = [(iv.dom.extent, s) for iv, s in zip(intrin.op.axis, inner_shape)]
    for reg, t in zip(app.regions, intrin.inputs):
        pairs += list(zip(t.shape, [e for e in reg.extents if e is not None]))
    sizes: dict = {}
    for want, got in pairs:
        n = _const(got)
        if isinstance(want, Var) and n is not None and sizes.setdefault(want, n) != n:
            raise ShapeError(f"{where}: its size '{want.name}' would be both {sizes[want]} "
                             f"and {n}")
    try:
        return intrin.specialized(sizes).size_map()
    except ScheduleError as e:
        raise ShapeError(f"{where}: {e.reason}; applied inside te.compute, the slices and "
                         f"the shape must fix every size of the intrinsic") from None


def _region_loads(app: IntrinApplication, where: str, smap: dict) -> list:
    """Per intrinsic input: a function from the intrinsic's indices to the load of its
    slice; each slice's ranged dimensions, in order, are the input's dimensions."""
    out = []
    for reg, t in zip(app.regions, app.intrin.inputs):
        ranged = [e for e in reg.extents if e is not None]
        if reg.tensor.dtype != t.dtype:
            raise ShapeError(f"{where}: slice {reg!r} is {reg.tensor.dtype} but input "
                             f"'{t.name}' is {t.dtype}")
        want = [_const(substitute(b, smap)) for b in t.shape]
        if len(ranged) != t.ndim or any(_const(a) != b for a, b in zip(ranged, want)):
            raise ShapeError(f"{where}: slice {reg!r} has extents {list(ranged)} but input "
                             f"'{t.name}' has shape {want}")

        def load(idx: list, reg: TensorRegion = reg) -> TensorLoad:
            it = iter(idx)
            full = [b if e is None else _plus(b, next(it)) for b, e in zip(reg.begins,
                                                                           reg.extents)]
            return reg.tensor(*full)
        out.append(load)
    return out
