"""Tensors and the operations that produce them: placeholder, compute, reductions."""
from __future__ import annotations

import enum
import inspect
from typing import Any, Callable, Sequence

from .dtype import INDEX, DType, as_dtype
from .errors import DTypeError, ShapeError, TDSLError
from .expr import Const, Expr, Reduce, SizeVar, TensorLoad, Var, convert, creation_seq
from .stmt import ThreadTag
from .visitor import post_order_visit


class Range:
    """The half-open interval ``[min, min + extent)`` of an iteration variable."""

    __slots__ = ("min", "extent", "alloc_bound", "full_extent")

    def __init__(self, min: Any, extent: Any):
        self.min = _index(min)
        self.extent = _index(extent)
        self.alloc_bound: "int | None" = None   # a constant upper bound of extent, when known
        self.full_extent: "Expr | None" = None  # the extent before clamping to a domain

    @staticmethod
    def from_min_extent(min: Any, extent: Any) -> "Range":
        return Range(min, extent)

    def __repr__(self) -> str:
        return f"range(min={self.min}, ext={self.extent})"


class IterKind(enum.Enum):
    """The role of an iteration variable."""

    DATA_PAR = "spatial"
    REDUCE = "reduce"
    THREAD = "thread"


class IterVar(Expr):
    """A loop of a stage: a variable, its domain and its kind.

    It can be used directly in expressions (``A[i, k]`` with ``k`` a reduce axis),
    where it stands for its variable.
    """

    __slots__ = ("var", "dom", "kind", "thread_tag", "owner")

    # TVM's iteration-type codes (``IterVar.Vectorized``...), the values of
    # ``Stage.iter_var_attrs[iv].iter_type``
    DataPar, ThreadIndex, CommReduce, Ordered, DimInfo = 0, 1, 2, 3, 4
    Unrolled, Vectorized, Parallelized, Tensorized = 5, 6, 7, 8

    def __init__(self, dom: "Range | None", var: "Var | str", kind: IterKind,
                 thread_tag: "ThreadTag | None" = None):
        self.var = var if isinstance(var, Var) else Var(var, INDEX)
        self.dom = dom
        self.kind = kind
        self.thread_tag = thread_tag
        self.dtype = self.var.dtype
        #: a weak reference to the ComputeOp whose reduction claimed this reduce axis
        self.owner: "Any" = None

    @property
    def name(self) -> str:
        return self.var.name

    def as_expr(self) -> Var:
        return self.var

    def __getstate__(self) -> dict:
        # ``owner`` is a weak reference (not picklable); it only matters while computes are
        # being declared, so a copied axis starts unclaimed.
        return {k: getattr(self, k) for k in ("var", "dom", "kind", "thread_tag", "dtype")}

    def __setstate__(self, state: dict) -> None:
        for k, v in state.items():
            object.__setattr__(self, k, v)
        self.owner = None

    def __repr__(self) -> str:
        tag = f", {self.thread_tag}" if self.thread_tag else ""
        return f"IterVar({self.name}, {self.dom}, {self.kind.value}{tag})"


def _index(value: Any) -> Expr:
    e = convert(value, INDEX)
    if not e.dtype.is_int:
        raise DTypeError(f"a size or index must be an integer, got {e.dtype} ({e!r})")
    return e


class Operation:
    """Something that produces tensors."""

    name: str

    @property
    def num_outputs(self) -> int:
        return 1

    def output(self, index: int) -> "Tensor":
        return self.outputs[index]

    @property
    def input_tensors(self) -> list["Tensor"]:
        return []

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"


class PlaceholderOp(Operation):
    """An input tensor."""

    def __init__(self, name: str, shape: Sequence[Expr], dtype: DType):
        self.name = name
        self.shape = tuple(shape)
        self.dtype = dtype
        self.outputs = (Tensor(self, 0, self.shape, dtype, name),)


class ComputeOp(Operation):
    """A tensor defined elementwise by ``body`` over ``axis`` (and ``reduce_axis``).

    ``body`` has one expression per output; reductions appear only at its top.
    """

    #: True for a stage ``td.compute`` lifted out of another compute's body (``<name>.red0``):
    #: the schedule moves it with the stage that reads it (``schedule/attach.py``)
    lifted: bool = False
    #: ``(intrin, loops, at)`` for a compute whose inner axes one tensor intrinsic computes
    #: (TVM's TensorComputeOp, built by ``tdsl.compat.tvm``): a new schedule puts its loops
    #: in the order ``loops`` and tensorizes them from ``at`` inward with ``intrin``
    intrin_region: Any = None

    def __init__(self, name: str, tag: str, attrs: dict, axis: Sequence[IterVar],
                 body: Sequence[Expr], output_names: "Sequence[str] | None" = None):
        self.name = name
        self.tag = tag
        self.attrs = dict(attrs or {})
        self.axis = tuple(axis)
        self.body = tuple(body)
        first = self.body[0]
        self.reduce_axis = tuple(first.axis) if isinstance(first, Reduce) else ()
        shape = tuple(iv.dom.extent for iv in self.axis)
        names = output_names or ([name] if len(self.body) == 1
                                 else [f"{name}.v{i}" for i in range(len(self.body))])
        self.outputs = tuple(Tensor(self, i, shape, b.dtype, names[i])
                             for i, b in enumerate(self.body))

    @property
    def num_outputs(self) -> int:
        return len(self.body)

    @property
    def shape(self) -> tuple[Expr, ...]:
        return self.outputs[0].shape

    @property
    def input_tensors(self) -> list["Tensor"]:
        seen: dict[int, Tensor] = {}

        def fn(n: Any) -> None:
            if isinstance(n, TensorLoad):
                seen.setdefault(id(n.tensor), n.tensor)
        for b in self.body:
            post_order_visit(b, fn)
        return list(seen.values())

    def with_body(self, body: Sequence[Expr]) -> "ComputeOp":
        """The same operation (same axes and output names) with a new body."""
        return ComputeOp(self.name, self.tag, self.attrs, self.axis, body,
                         [t.name for t in self.outputs])


class Tensor:
    """The ``value_index``-th output of ``op``; index it to read an element.

    ``seq`` numbers tensors in creation order: placeholders are listed in the order the
    user declared them, and equal names are ordered without memory addresses.
    """

    __slots__ = ("op", "value_index", "shape", "dtype", "name", "seq")

    def __init__(self, op: Operation, value_index: int, shape: Sequence[Expr],
                 dtype: DType, name: str):
        self.op = op
        self.value_index = value_index
        self.shape = tuple(shape)
        self.dtype = dtype
        self.name = name
        self.seq = creation_seq()

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, indices: Any) -> "TensorLoad | TensorSlice | TensorRegion":
        """``A[i, j]``; ``A[i]`` of a 2-d tensor is a ``TensorSlice`` that ``[j]`` completes
        (TVM's ``A[i][j]``); ``A[i, 0:16]`` is a ``TensorRegion``, the argument of a tensor
        intrinsic applied inside a compute (TVM's TensorComputeOp)."""
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) == self.ndim and any(isinstance(i, slice) for i in indices):
            return TensorRegion(self, indices)
        if 0 < len(indices) < self.ndim and not any(isinstance(i, slice) for i in indices):
            return TensorSlice(self, indices)
        return self(*indices)

    def __call__(self, *indices: Any) -> TensorLoad:
        if len(indices) == 1 and isinstance(indices[0], (list, tuple)):
            indices = tuple(indices[0])
        if len(indices) != self.ndim:
            raise ShapeError(
                f"tensor '{self.name}' has {self.ndim} dimension(s) "
                f"{tuple(self.shape)} but is indexed with {len(indices)} index(es)")
        conv = []
        for d, ix in enumerate(indices):
            if isinstance(ix, slice):
                raise ShapeError(f"tensor '{self.name}': slices are not supported in indices; "
                                 f"index each element with loop variables")
            e = convert(ix, INDEX)
            if not e.dtype.is_int:
                raise DTypeError(f"tensor '{self.name}': index {d} has dtype {e.dtype}; "
                                 f"indices must be integers (cast with .astype('int64'))")
            conv.append(e)
        return TensorLoad(self, conv)

    def __len__(self) -> int:
        raise TDSLError("len() of a tdsl tensor is undefined; use .shape")

    def __iter__(self):
        raise TDSLError(f"tensor '{self.name}' is not iterable; index it with [i, j]")

    def __repr__(self) -> str:
        return f"Tensor(name={self.name}, shape={list(self.shape)}, dtype={self.dtype})"


class TensorSlice:
    """A tensor indexed with fewer indices than it has dimensions (``A[i]`` of a 2-d ``A``):
    index it again to read an element (``A[i][j]``, as TVM allows); any other use is the
    error of indexing with too few indices."""

    __slots__ = ("tensor", "indices")

    def __init__(self, tensor: Tensor, indices: tuple):
        self.tensor = tensor
        self.indices = tuple(indices)

    def __getitem__(self, more: Any) -> "TensorLoad | TensorSlice":
        return self.tensor[self.indices + (more if isinstance(more, tuple) else (more,))]

    def incomplete_index(self) -> ShapeError:
        """The error of using the slice as a value (``convert`` raises it)."""
        t = self.tensor
        return ShapeError(f"tensor '{t.name}' has {t.ndim} dimension(s) {tuple(t.shape)} but is "
                          f"indexed with {len(self.indices)} index(es)")

    def _misuse(self, *_: Any) -> Any:
        raise self.incomplete_index()

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _misuse
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _misuse
    __pow__ = __rpow__ = __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = _misuse
    __neg__ = __pos__ = __abs__ = __invert__ = __bool__ = astype = _misuse
    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _misuse
    __hash__ = None    # type: ignore[assignment]  # compared only to raise

    def __repr__(self) -> str:
        return f"TensorSlice({self.tensor.name}, {len(self.indices)} of {self.tensor.ndim})"


class TensorRegion:
    """A rectangular window of a tensor, ``A[i, 0:16]``: per dimension a fixed index or a
    slice ``begin:end``.  Only an argument of a tensor intrinsic applied inside a compute
    (``intrin(A[i, 0:16], ...)``); any other use is a ShapeError."""

    __slots__ = ("tensor", "begins", "extents")

    def __init__(self, tensor: Tensor, indices: tuple):
        self.tensor = tensor
        #: per dimension: the first index read
        self.begins: list[Expr] = []
        #: per dimension: the slice's length, or None for a fixed index
        self.extents: "list[Expr | None]" = []
        for d, ix in enumerate(indices):
            if not isinstance(ix, slice):
                self.begins.append(_region_index(tensor, d, ix))
                self.extents.append(None)
                continue
            if ix.step is not None and not (isinstance(ix.step, int) and ix.step == 1):
                raise ShapeError(f"tensor '{tensor.name}': slice {d} has step {ix.step!r}; "
                                 f"a region's slices are contiguous (step 1)")
            begin = _region_index(tensor, d, 0 if ix.start is None else ix.start)
            end = tensor.shape[d] if ix.stop is None else _region_index(tensor, d, ix.stop)
            from .arith import Analyzer
            self.begins.append(begin)
            self.extents.append(Analyzer().simplify(end - begin))

    def misuse(self) -> ShapeError:
        """The error of using the region as a value (``convert`` raises it)."""
        return ShapeError(f"tensor '{self.tensor.name}' is sliced ({self!r}): a slice is only an "
                          f"argument of a tensor intrinsic applied inside a compute "
                          f"(intrin(A[i, 0:16], ...)); index each element with loop variables")

    def incomplete_index(self) -> ShapeError:
        return self.misuse()

    def _misuse(self, *_: Any) -> Any:
        raise self.misuse()

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _misuse
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _misuse
    __neg__ = __bool__ = astype = __getitem__ = _misuse
    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _misuse
    __hash__ = None    # type: ignore[assignment]  # compared only to raise

    def __repr__(self) -> str:
        from .arith import Analyzer
        ana = Analyzer()
        parts = [repr(b) if e is None else f"{b!r}:{ana.simplify(b + e)!r}"
                 for b, e in zip(self.begins, self.extents)]
        return f"{self.tensor.name}[{', '.join(parts)}]"


def _region_index(tensor: Tensor, d: int, ix: Any) -> Expr:
    e = convert(ix, INDEX)
    if not e.dtype.is_int:
        raise DTypeError(f"tensor '{tensor.name}': index {d} has dtype {e.dtype}; indices "
                         f"must be integers")
    return e


def _elementwise(name: str, op: str, swap: bool = False) -> Callable[[Tensor, Any], Any]:
    """A ``Tensor`` operator as TVM's: ``A + B``, ``A * 2``, ``1 - A`` are ``tdsl.ops``'s
    broadcast operators (a new stage).  A 0-d tensor stays what it was in expressions, its
    one element (``s + A[i]``, as ``convert`` reads it); beside an element expression
    (``A + A[i]``) an n-d tensor defers to the expression, whose error names the misuse."""
    dunder = f"__{'r' if swap else ''}{name}__"

    def method(self: Tensor, other: Any) -> Any:
        if self.ndim == 0:
            return getattr(convert(self), dunder)(other)
        if isinstance(other, Expr):
            return NotImplemented
        from . import ops
        return getattr(ops, op)(other, self) if swap else getattr(ops, op)(self, other)
    method.__name__ = dunder
    return method


for _name, _op in (("add", "add"), ("sub", "subtract"), ("mul", "multiply"),
                   ("truediv", "divide"), ("floordiv", "floor_divide"), ("mod", "mod")):
    setattr(Tensor, f"__{_name}__", _elementwise(_name, _op))
    setattr(Tensor, f"__r{_name}__", _elementwise(_name, _op, swap=True))


def _negate(self: Tensor) -> Any:
    if self.ndim == 0:
        return -convert(self)
    from . import ops
    return ops.negative(self)


Tensor.__neg__ = _negate   # type: ignore[attr-defined]


# ---- the DSL ----------------------------------------------------------------------------
def var(name: str = "n", dtype: "DType | str" = INDEX) -> Var:
    """A symbolic size (an integer >= 1), bound at call time from the arguments' shapes,
    or, listed itself in ``args``, a scalar parameter passed as a Python number.

    With a float or bool ``dtype`` it can only be a scalar parameter.
    """
    dtype = as_dtype(dtype)
    if not dtype.is_int:
        return Var(name, dtype)
    return SizeVar(name, dtype)


size_var = var


def _shape(shape: Any, what: str) -> tuple[Expr, ...]:
    if not isinstance(shape, (tuple, list)):
        shape = (shape,)
    out = []
    for d, s in enumerate(shape):
        e = _index(s)
        if isinstance(e, Const) and e.value < 1:
            raise ShapeError(f"{what}: dimension {d} has size {e.value}; sizes must be >= 1")
        out.append(e)
    return tuple(out)


def placeholder(shape: Any, dtype: "DType | str" = "float32", name: str = "placeholder") -> Tensor:
    """An input tensor of ``shape`` (ints or symbolic sizes)."""
    return PlaceholderOp(name, _shape(shape, f"placeholder '{name}'"), as_dtype(dtype)).outputs[0]


def reduce_axis(dom: Any, name: str = "rv") -> IterVar:
    """A reduction variable over ``dom`` = (min, max) or a Range (TVM's te.reduce_axis)."""
    if isinstance(dom, Range):
        rng = dom
    else:
        lo, hi = dom
        lo_e, hi_e = _index(lo), _index(hi)
        if isinstance(lo_e, Const) and isinstance(hi_e, Const):
            rng = Range(lo_e, hi_e.value - lo_e.value)
        elif isinstance(lo_e, Const) and lo_e.value == 0:
            rng = Range(lo_e, hi_e)      # (0, n): extent n itself, not n - 0
        else:
            rng = Range(lo_e, hi_e - lo_e)
    return IterVar(rng, name, IterKind.REDUCE)


def thread_axis(tag: str = "", name: str = "", extent: Any = None) -> IterVar:
    """A GPU hardware index (``"blockIdx.x"``, ``"threadIdx.y"``, ...) to ``bind`` loops to.

    ``extent``, when given, is the most iterations a loop bound to it may have (TVM's
    ``te.thread_axis((0, n), tag)``); lowering checks it."""
    try:
        t = ThreadTag(tag)
    except ValueError:
        valid = ", ".join(x.value for x in ThreadTag)
        raise TDSLError(f"thread_axis: unknown thread tag {tag!r}; use one of {valid}") from None
    from .expr import ThreadIndexVar
    dom = None if extent is None else Range(Const(0, INDEX), convert(extent, INDEX))
    return IterVar(dom, ThreadIndexVar(name or tag, t), IterKind.THREAD, t)


def _arg_names(fcompute: Callable, ndim: int) -> list[str]:
    try:
        sig = inspect.signature(fcompute)
        params = list(sig.parameters.values())
    except (TypeError, ValueError):
        params = []
    if params and params[0].kind is inspect.Parameter.VAR_POSITIONAL:
        return [f"i{d}" for d in range(ndim)]
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(names) != ndim:
        raise ShapeError(f"compute: the shape has {ndim} dimension(s) but the lambda takes "
                         f"{len(names)} argument(s) {names}")
    return names


def compute(shape: Any, fcompute: Callable, name: str = "compute", tag: str = "",
            attrs: "dict | None" = None) -> Any:
    """A tensor whose element at index ``i`` is ``fcompute(*i)`` (TVM's te.compute).

    If ``fcompute`` returns a tuple, one tensor per value is returned.  A reduction
    used inside a larger expression (``td.sum(X[i, k], axis=k) / n``) becomes a stage
    of its own, ``<name>.red0``, that this one reads (see ``tdsl.compute_body``).
    """
    shape = _shape(shape, f"compute '{name}'")
    names = _arg_names(fcompute, len(shape))
    axis = [IterVar(Range(0, s), n, IterKind.DATA_PAR) for n, s in zip(names, shape)]
    result = fcompute(*[iv.var for iv in axis])
    multi = isinstance(result, (tuple, list))
    body = [convert(b) for b in (result if multi else [result])]
    from .compute_body import make_compute
    op = make_compute(name, tag, attrs or {}, axis, body)
    return list(op.outputs) if multi else op.outputs[0]
