"""The loop IR: statements, buffers and lowered functions.

This is the one IR every backend consumes.  ``tdsl.lower`` produces a ``PrimFunc``
whose body is a tree of these statements; loads and stores address ``Buffer``s
with one index per dimension (backends flatten with the buffer's strides).
"""
from __future__ import annotations

import enum
from typing import Any, Mapping, Sequence

from .dtype import DType, as_dtype
from .expr import Const, Expr, Var, convert, creation_seq


class ForKind(enum.Enum):
    """How a loop runs."""

    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"
    THREAD_BINDING = "thread_binding"

    def __str__(self) -> str:
        return self.value


class ThreadTag(str, enum.Enum):
    """A GPU hardware index a loop can be bound to (TVM's thread tags)."""

    BLOCK_X = "blockIdx.x"; BLOCK_Y = "blockIdx.y"; BLOCK_Z = "blockIdx.z"
    THREAD_X = "threadIdx.x"; THREAD_Y = "threadIdx.y"; THREAD_Z = "threadIdx.z"
    VTHREAD = "vthread"

    def __str__(self) -> str:
        return self.value

    @property
    def is_block(self) -> bool:
        return self.value.startswith("blockIdx")

    @property
    def is_thread(self) -> bool:
        return self.value.startswith("threadIdx")


class StorageScope(str, enum.Enum):
    """Where a buffer lives: device memory, block-shared memory, or per-thread registers."""

    GLOBAL = "global"
    SHARED = "shared"
    LOCAL = "local"

    def __str__(self) -> str:
        return self.value


class Buffer:
    """A multi-dimensional memory region. Identity-compared.

    ``strides`` are in elements; ``None`` means compact row-major.  ``seq`` numbers
    buffers in creation order (a deterministic tie-break, like ``Var.seq``).
    """

    __slots__ = ("name", "shape", "dtype", "strides", "scope", "align", "seq")

    def __init__(self, name: str, shape: Sequence[Any], dtype: "DType | str",
                 strides: "Sequence[Any] | None" = None,
                 scope: "StorageScope | str" = StorageScope.GLOBAL, align: int = 64):
        self.name = name
        self.shape = tuple(convert(s) for s in shape)
        self.dtype = as_dtype(dtype)
        self.strides = None if strides is None else tuple(convert(s) for s in strides)
        self.scope = StorageScope(scope)
        self.align = align
        self.seq = creation_seq()

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def effective_strides(self) -> tuple[Expr, ...]:
        """Strides in elements, computing row-major ones when none were set."""
        if self.strides is not None:
            return self.strides
        strides: list[Expr] = []
        acc: Expr = Const(1, self.shape[0].dtype if self.shape else "int64")
        for extent in reversed(self.shape):
            strides.append(acc)
            acc = acc * extent
        return tuple(reversed(strides))

    def __repr__(self) -> str:
        return f"Buffer({self.name}, {list(self.shape)}, {self.dtype}, {self.scope})"


class Stmt:
    """Base class of statements."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()

    def __repr__(self) -> str:
        from .printer import stmt_to_str
        return stmt_to_str(self)


class For(Stmt):
    """``for var in range(min, min + extent)`` run as ``kind``.

    A ``THREAD_BINDING`` loop is not iterated: ``var`` is the hardware index
    ``thread_tag`` (and the body is skipped where that index >= extent).
    """

    __slots__ = ("var", "min", "extent", "kind", "body", "thread_tag", "annotations")
    _fields = ("min", "extent", "body")

    def __init__(self, var: Var, min: Expr, extent: Expr, kind: ForKind, body: Stmt,
                 thread_tag: "ThreadTag | None" = None,
                 annotations: "Mapping[str, Any] | None" = None):
        self.var = var
        self.min = convert(min)
        self.extent = convert(extent)
        self.kind = kind
        self.body = body
        self.thread_tag = thread_tag
        self.annotations = dict(annotations or {})


class SeqStmt(Stmt):
    __slots__ = ("stmts",)
    _fields = ("stmts",)

    def __init__(self, stmts: Sequence[Stmt]):
        self.stmts = tuple(stmts)


class IfThenElse(Stmt):
    __slots__ = ("cond", "then_case", "else_case")
    _fields = ("cond", "then_case", "else_case")

    def __init__(self, cond: Expr, then_case: Stmt, else_case: "Stmt | None" = None):
        self.cond = cond
        self.then_case = then_case
        self.else_case = else_case


class BufferStore(Stmt):
    __slots__ = ("buffer", "value", "indices")
    _fields = ("value", "indices")

    def __init__(self, buffer: Buffer, value: Expr, indices: Sequence[Expr]):
        self.buffer = buffer
        self.value = value
        self.indices = tuple(indices)


class Allocate(Stmt):
    """Storage for ``buffer`` (in ``buffer.scope``) that lives while ``body`` runs."""

    __slots__ = ("buffer", "body")
    _fields = ("body",)

    def __init__(self, buffer: Buffer, body: Stmt):
        self.buffer = buffer
        self.body = body


class LetStmt(Stmt):
    __slots__ = ("var", "value", "body")
    _fields = ("value", "body")

    def __init__(self, var: Var, value: Expr, body: Stmt):
        self.var = var
        self.value = value
        self.body = body


class Barrier(Stmt):
    """All threads of a block wait here (``__syncthreads``); shared writes become visible."""

    __slots__ = ()


class ExternCall(Stmt):
    """A call of an external function by name, on whole buffers (``td.extern``).

    ``packed``: a function registered with ``tdsl.register_func`` (it receives NumPy arrays
    and Python numbers); otherwise a C symbol of the process (it receives a pointer per
    buffer and a C scalar per expression).  ``args`` holds ``Buffer``s and expressions;
    ``device`` the CUDA ``__device__`` function the CUDA backend launches instead.
    """

    __slots__ = ("func", "packed", "dtype", "args", "device")
    _fields = ("func", "packed", "dtype", "args")

    def __init__(self, func: str, packed: bool, dtype: Any, args: Sequence[Any],
                 device: Any = None):
        self.func = func
        self.packed = packed
        self.dtype = as_dtype(dtype)
        self.args = tuple(args)
        #: ``extern_op.DeviceCode`` (CUDA source and launch) or None
        self.device = device


class Evaluate(Stmt):
    __slots__ = ("value",)
    _fields = ("value",)

    def __init__(self, value: Expr):
        self.value = value


class AllReduce(Stmt):
    """A reduction across the threads of a block (TVM's ``tvm_thread_allreduce``).

    Every thread of the block must reach it (like a ``Barrier``).  Threads that agree on
    the thread indices *not* in ``tags`` form a group; each contributes ``values`` where
    ``cond`` holds (else nothing), and afterwards every thread of the group holds the
    ``combiner`` reduction of its group's contributions in ``results[i][0]`` (local
    buffers of shape (1,), one per value).  The order in which contributions combine is
    unspecified (the combiner is commutative), so float results can differ in the last
    bits between backends.
    """

    __slots__ = ("combiner", "values", "cond", "results", "tags")
    _fields = ("values", "cond")

    def __init__(self, combiner: Any, values: Sequence[Expr], cond: Expr,
                 results: Sequence[Buffer], tags: Sequence[ThreadTag]):
        self.combiner = combiner
        self.values = tuple(convert(v) for v in values)
        self.cond = convert(cond)
        self.results = tuple(results)
        self.tags = tuple(ThreadTag(t) for t in tags)


class BufferRegion:
    """A rectangular window of a buffer: one (min, extent) per dimension.

    ``axes[d]`` names the dimension of the intrinsic's own tensor that buffer
    dimension ``d`` runs along (None: a fixed index, extent 1).
    """

    __slots__ = ("buffer", "mins", "extents", "axes")
    _fields = ("mins", "extents")

    def __init__(self, buffer: Buffer, mins: Sequence[Expr], extents: Sequence[Expr],
                 axes: "Sequence[int | None] | None" = None):
        self.buffer = buffer
        self.mins = tuple(convert(m) for m in mins)
        self.extents = tuple(convert(e) for e in extents)
        self.axes = tuple(axes) if axes is not None else tuple(range(len(self.mins)))


class IntrinCall(Stmt):
    """A tensorized region: ``intrin`` computes ``outputs`` from ``inputs``.

    ``reset`` is true where the call also initializes a reduction (TVM's
    reduce_reset); backends use the intrinsic's own implementation for their target
    and fall back to its declared computation.
    """

    __slots__ = ("intrin", "inputs", "outputs", "reset", "update")
    _fields = ("inputs", "outputs")

    def __init__(self, intrin: Any, inputs: Sequence[BufferRegion],
                 outputs: Sequence[BufferRegion], reset: bool, update: bool):
        self.intrin = intrin
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        self.reset = reset
        self.update = update


class PrimFunc:
    """A lowered function: parameter buffers (inputs then outputs) and a body.

    ``size_vars`` are the symbolic dimensions, bound at call time from the
    parameters' shapes (``bindings`` maps each to the first (param, dim) naming it).
    """

    __slots__ = ("name", "params", "body", "size_vars", "bindings", "attrs")

    def __init__(self, name: str, params: Sequence[Buffer], body: Stmt,
                 size_vars: Sequence[Var], bindings: Mapping[Var, tuple[int, int]],
                 attrs: "Mapping[str, Any] | None" = None):
        self.name = name
        self.params = tuple(params)
        self.body = body
        self.size_vars = tuple(size_vars)
        self.bindings = dict(bindings)
        self.attrs = dict(attrs or {})

    def __repr__(self) -> str:
        from .printer import func_to_str
        return func_to_str(self)

    def _repr_html_(self) -> str:
        from .printer import func_to_str, to_html
        return to_html(func_to_str(self))

    def script(self) -> str:
        from .printer import func_to_str
        return func_to_str(self)

