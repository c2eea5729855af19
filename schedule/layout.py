"""``Stage.transform_layout``: store a stage's output with its dimensions permuted or
blocked.

TVM's ``s[B].transform_layout(lambda i, j: [j, i])`` for the cases schedules need: each new
index is an axis (``j``), or one axis split into blocks of a constant ``f`` by the pair
``i // f`` (which block) and ``i % f`` (where in it) -- NCHW's ``[n, c // 16, h, w,
c % 16]``.  The stage then computes ``B'[j, i]`` -- its loops run in the new order, so the
writes are contiguous along the new last axis -- and every stage that read ``B[i, j]``
reads ``B'[j, i]``.  Where ``f`` does not divide the axis, the last block's tail is zeros.
A hand-written GEMM whose B is read transposed (``x[i, k] * w[j, k]``) copies B's panels
through a cache stage laid out ``[k, j]`` this way, as ``ops.dense`` declares its PACK
stage: the micro-kernel then loads whole vectors of one k row.  The CPU convolution packs
its filter ``[co // b, ci, kh, kw, co % b]``: each panel of ``b`` output channels one
contiguous run (``ops/schedules/llvm_conv.py``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from tdsl.errors import ScheduleError
from tdsl.expr import Const, FloorDiv, FloorMod, Reduce, TensorLoad, Var
from tdsl.intrin import if_then_else
from tdsl.tensor import ComputeOp, IterKind, IterVar, Range
from tdsl.visitor import substitute, transform

from .cache import map_body

if TYPE_CHECKING:
    from .stage import Stage


@dataclass(frozen=True)
class Dim:
    """One dimension of the new layout: axis ``axis`` of the stage whole (``split`` ""),
    its blocks of ``factor`` (``"/"``: ``axis // factor``) or the position in a block
    (``"%"``: ``axis % factor``).  ``str``: the trace's ``"3"``, ``"3/16"``, ``"3%16"``."""

    axis: int
    split: str = ""
    factor: int = 1

    def __str__(self) -> str:
        return f"{self.axis}{self.split}{self.factor}" if self.split else str(self.axis)


def _const_int(e: Any) -> "int | None":
    return e.value if isinstance(e, Const) and isinstance(e.value, int) else None


def dims_of(stage: "Stage", mapping: Callable[..., Any]) -> list[Dim]:
    """The layout ``mapping`` (a function of the stage's axis variables returning the new
    index list) gives; a ScheduleError for an index that is no axis, ``axis // f`` or
    ``axis % f``."""
    axes = list(stage.op.axis) if isinstance(stage.op, ComputeOp) else []
    if not axes:
        raise ScheduleError("transform_layout", stage.name, "only a compute stage's layout "
                            "can be transformed")
    try:
        out = mapping(*[a.var for a in axes])
    except TypeError as e:
        raise ScheduleError("transform_layout", stage.name, f"the mapping must take one "
                            f"argument per axis ({len(axes)}): {e}") from None
    out = list(out) if isinstance(out, (list, tuple)) else [out]

    def axis_of(v: Any) -> "int | None":
        return next((d for d, a in enumerate(axes) if v is a.var), None)

    dims = []
    for idx in out:
        split, var, factor = "", idx, 1
        if isinstance(idx, (FloorDiv, FloorMod)) and _const_int(idx.b) is not None:
            split = "/" if isinstance(idx, FloorDiv) else "%"
            var, factor = idx.a, _const_int(idx.b)
        d = axis_of(var) if isinstance(var, Var) else None
        if d is None:
            raise ScheduleError("transform_layout", stage.name, f"the new index {idx!r} is "
                                f"not an axis, nor an axis // or % a constant: only "
                                f"permutations and blockings of the axes are supported")
        dims.append(Dim(d, split, factor))
    return dims


def parse_axes(stage: "Stage", axes: Any) -> list[Dim]:
    """``axes`` (a sequence of axis numbers or ``Dim``s, or the trace's ``"3/16,0,3%16"``)
    as a list of ``Dim``."""
    items = axes.split(",") if isinstance(axes, str) else list(axes)
    try:
        dims = []
        for a in items:
            if isinstance(a, Dim):
                dims.append(a)
                continue
            text = str(a).strip()
            for split in "/%":
                if split in text:
                    axis, factor = text.split(split)
                    dims.append(Dim(int(axis), split, int(factor)))
                    break
            else:
                dims.append(Dim(int(text)))
        return dims
    except (TypeError, ValueError):
        raise ScheduleError("transform_layout", stage.name, f"axes must be axis numbers "
                            f"(or 'axis/factor', 'axis%factor' pairs), got {axes!r}") from None


def check(stage: "Stage", axes: Sequence[Any]) -> list[Dim]:
    """``axes`` (``Dim``s or axis numbers) as a layout the stage can take, or a
    ScheduleError saying why not."""
    op = stage.op
    name = stage.name
    if not isinstance(op, ComputeOp):
        raise ScheduleError("transform_layout", name, "only a compute stage's layout can be "
                            "transformed")
    dims = [d if isinstance(d, Dim) else Dim(d) for d in axes]
    n = len(op.axis)
    if not all(isinstance(d.axis, int) and 0 <= d.axis < n for d in dims):
        raise ScheduleError("transform_layout", name, f"axes {[str(d) for d in dims]} name "
                            f"an axis the stage's {n} axes do not have")
    for a in range(n):
        kinds = sorted((d.split, d.factor) for d in dims if d.axis == a)
        whole = [("", 1)]
        blocked = len(kinds) == 2 and kinds[0][0] == "%" and kinds[1][0] == "/" \
            and kinds[0][1] == kinds[1][1] >= 1
        if kinds != whole and not blocked:
            raise ScheduleError("transform_layout", name, f"axes {[str(d) for d in dims]} "
                                f"is not a permutation of the stage's {n} axes (axis {a}: "
                                f"once whole, or once as 'a/f' and once as 'a%f')")
        if blocked:
            iv, f = op.axis[a], kinds[0][1]
            if _const_int(iv.dom.min) != 0:
                raise ScheduleError("transform_layout", name, f"axis {iv.name} does not "
                                    f"start at 0: it cannot be blocked")
            extent = _const_int(iv.dom.extent)
            if (extent is None or extent % f) and any(isinstance(b, Reduce) for b in op.body):
                raise ScheduleError("transform_layout", name, f"a reduction's axis {iv.name} "
                                    f"can only be blocked by a factor that divides it, not "
                                    f"{f}")
    if op.num_outputs != 1:
        raise ScheduleError("transform_layout", name, "the operation has several outputs")
    if stage.is_output:
        raise ScheduleError("transform_layout", name, "an output's layout is the caller's: "
                            "transform a cache stage of it instead")
    if stage.is_scheduled() or stage.attach_type.value != "root":
        raise ScheduleError("transform_layout", name, "call transform_layout before the "
                            "stage's loops are transformed or attached")
    sch = stage._sch
    for r in sch.readers(stage):
        if not isinstance(r.op, ComputeOp):
            raise ScheduleError("transform_layout", name, f"its reader '{r.name}' is a "
                                f"{r.op.kind} stage, which reads the tensor whole")
    return dims


def _new_axes(op: ComputeOp, dims: list[Dim]) -> tuple[list[IterVar], dict, list]:
    """The new layout's axes, the substitution of each blocked axis by ``outer * f +
    inner``, and the conditions ``axis < extent`` of blockings that do not divide."""
    new, blocks = [], {}
    for d in dims:
        iv = op.axis[d.axis]
        if not d.split:
            new.append(iv)
            continue
        extent, const = iv.dom.extent, _const_int(iv.dom.extent)
        blocks_of = -(-const // d.factor) if const is not None else \
            (extent + (d.factor - 1)) // d.factor
        e = blocks_of if d.split == "/" else d.factor
        part = "outer" if d.split == "/" else "inner"
        nv = IterVar(Range(0, e), f"{iv.name}.{part}", IterKind.DATA_PAR)
        blocks.setdefault(d.axis, {"f": d.factor})[d.split] = nv
        new.append(nv)
    vmap, guards = {}, []
    for a, pair in blocks.items():
        iv, f = op.axis[a], pair["f"]
        vmap[iv.var] = pair["/"].var * f + pair["%"].var
        const = _const_int(iv.dom.extent)
        if const is None or const % f:
            guards.append(vmap[iv.var] < iv.dom.extent)
    return new, vmap, guards


def transform_layout(stage: "Stage", dims: list[Dim]) -> None:
    """Rewrite ``stage`` to compute its output in the layout ``dims`` and its readers to
    read it there (``check`` has passed)."""
    sch = stage._sch
    old = stage.op
    readers = sch.readers(stage)
    axes, vmap, guards = _new_axes(old, dims)
    body = old.body[0]
    if vmap:
        body = substitute(body, vmap)
        for g in guards:
            body = if_then_else(g, body, Const(0, body.dtype))
    new = ComputeOp(old.name, old.tag, dict(old.attrs), axes, [body])
    stage.op = new
    stage.leaf_iter_vars = list(stage.root_iter_vars)
    stage.all_iter_vars = list(stage.root_iter_vars)
    sch.register(stage, new)
    target = new.outputs[0]

    def index(idx: list, d: Dim) -> Any:
        i = idx[d.axis]
        return i if not d.split else (i // d.factor if d.split == "/" else i % d.factor)

    def pre(n: Any) -> Any:
        if isinstance(n, TensorLoad) and sch[n.tensor] is stage:
            idx = [transform(i, pre=pre) for i in n.indices]
            return TensorLoad(target, tuple(index(idx, d) for d in dims))
        return None

    for r in readers:
        r.op = r.op.with_body(map_body(r.op.body, pre))
        sch.register(r, r.op)
