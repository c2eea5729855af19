"""``tvm.tir.decl_buffer`` and the minimal ``tvm.tir.ir_builder``: what a TVM tensor
intrinsic's function receives (one buffer per input and output) and builds its call with.

A ``Buffer`` describes memory: shape, dtype, strides (symbolic ones mean "any row
stride"), an element offset and its alignment factor, a scope.  A tensor intrinsic's
buffers are checked against the tensors they stand for when declared (same shape and
dtype) and against each tensorized region when lowered (scope, strides, offset:
``tensor_intrin.check_region``).  ``binds=`` of ``tvm.lower``/``build`` accepts only
buffers that describe the compact argument tdsl passes (``check_bind``): another layout,
an offset or another scope is refused, naming the buffer and the tensor.
"""
from __future__ import annotations

from typing import Any, Sequence

import tdsl
from tdsl.dtype import INDEX
from tdsl.errors import TDSLError
from tdsl.expr import Const, Expr, Var, convert
from tdsl.extern_op import ExternBuffer


class BufferError(TDSLError):
    """A ``decl_buffer`` or ``binds=`` that tdsl cannot honour (named in the message)."""


class Buffer(ExternBuffer):
    """TVM's ``tir.Buffer`` as declared by ``decl_buffer``: pass it (or ``.data`` /
    ``.access_ptr(mask)``) to a call; ``shape``, ``strides``, ``elem_offset`` read back."""

    def __init__(self, shape: Sequence[Any], dtype: str = "float32", name: str = "buffer",
                 strides: "Sequence[Any] | None" = None, elem_offset: Any = None,
                 scope: str = "", data_alignment: int = -1, offset_factor: int = 0):
        self.tensor = None
        self.name = name
        self.shape = tuple(_index(d, name, "shape")
                           for d in (shape if isinstance(shape, (list, tuple)) else (shape,)))
        self.dtype = tdsl.dtype.as_dtype(dtype)
        self.ndim = len(self.shape)
        self.strides = tuple(_index(s, name, "strides") for s in (strides or ()))
        if self.strides and len(self.strides) != self.ndim:
            raise BufferError(f"decl_buffer '{name}': {len(self.strides)} strides for "
                              f"{self.ndim} dimension(s)")
        if not isinstance(offset_factor, int) or offset_factor < 0:
            raise BufferError(f"decl_buffer '{name}': offset_factor must be an int >= 0, got "
                              f"{offset_factor!r}")
        self.offset_factor = offset_factor
        if elem_offset is None:     # TVM: a free offset, a multiple of offset_factor
            elem_offset = (Var(f"{name}_elem_offset", "int64") if offset_factor
                           else Const(0, "int64"))
        self.elem_offset = _index(elem_offset, name, "elem_offset")
        self.scope = scope or "global"
        self.data_alignment = data_alignment

    def scope_name(self) -> str:
        return self.scope

    def __repr__(self) -> str:
        return f"Buffer({self.name}, {list(self.shape)}, {self.dtype})"


def _index(value: Any, name: str, what: str) -> Expr:
    """An integer expression of a buffer's ``what`` (BufferError naming it otherwise)."""
    try:
        e = value if isinstance(value, Expr) else convert(value, INDEX)
    except Exception:
        e = None
    if e is None or not e.dtype.is_int:
        raise BufferError(f"decl_buffer '{name}': {what} holds {value!r}, not an integer "
                          f"expression")
    return e


def decl_buffer(shape: Any, dtype: str = "float32", name: str = "buffer", data: Any = None,
                strides: Any = None, elem_offset: Any = None, scope: str = "",
                data_alignment: int = -1, offset_factor: int = 0, buffer_type: str = "",
                axis_separators: Any = None, span: Any = None) -> Buffer:
    """A buffer description (TVM's ``tir.decl_buffer``); ``data=``, ``buffer_type=`` other
    than the default and ``axis_separators=`` are refused (tdsl has no such layouts)."""
    if data is not None:
        raise BufferError(f"decl_buffer '{name}': data= (a buffer over another buffer's "
                          f"pointer) is not supported by tdsl.compat")
    if buffer_type not in ("", "default"):
        raise BufferError(f"decl_buffer '{name}': buffer_type={buffer_type!r} is not "
                          f"supported by tdsl.compat (only the default)")
    if axis_separators:
        raise BufferError(f"decl_buffer '{name}': axis_separators= is not supported by "
                          f"tdsl.compat (buffers are flat)")
    return Buffer(shape, dtype, name, strides, elem_offset, scope, data_alignment,
                  offset_factor)


def _same(a: Any, b: Any) -> bool:
    from tdsl.arith import Analyzer
    ana = Analyzer()
    return ana.can_prove(ana.simplify(convert(a) - convert(b)) == 0)


def check_matches(buf: Buffer, tensor: Any, where: str) -> None:
    """``buf`` must describe ``tensor``: same dtype and shape (BufferError naming both)."""
    if not isinstance(buf, Buffer):
        raise BufferError(f"{where}: the buffer bound to '{tensor.name}' must come from "
                          f"tvm.tir.decl_buffer, got {type(buf).__name__}")
    if buf.dtype != tensor.dtype:
        raise BufferError(f"{where}: buffer '{buf.name}' is {buf.dtype} but tensor "
                          f"'{tensor.name}' is {tensor.dtype}")
    if buf.ndim != len(tensor.shape) or not all(_same(a, b) for a, b in
                                                zip(buf.shape, tensor.shape)):
        raise BufferError(f"{where}: buffer '{buf.name}' has shape {list(buf.shape)} but "
                          f"tensor '{tensor.name}' has {list(tensor.shape)}")


def compact_strides(shape: Sequence[Any]) -> list:
    """Row-major element strides of ``shape``."""
    out: list = []
    acc: Any = Const(1, "int64")
    for d in reversed(list(shape)):
        out.insert(0, acc)
        acc = acc * d
    return out


def check_bind(tensor: Any, buf: Any, where: str) -> None:
    """A ``binds=`` entry of ``lower``/``build``: tdsl passes each argument as a compact
    row-major array at offset 0, so the buffer must say exactly that."""
    check_matches(buf, tensor, where)
    if buf.strides and not all(_same(a, b) for a, b in
                               zip(buf.strides, compact_strides(buf.shape))):
        raise BufferError(f"{where}: buffer '{buf.name}' bound to '{tensor.name}' has strides "
                          f"{list(buf.strides)}; tdsl's arguments are compact row-major arrays "
                          f"(no strides, or {list(compact_strides(buf.shape))})")
    if buf.offset_factor or not _same(buf.elem_offset, 0):
        raise BufferError(f"{where}: buffer '{buf.name}' bound to '{tensor.name}' has an element "
                          f"offset (elem_offset/offset_factor); tdsl's arguments start at "
                          f"element 0")
    if buf.scope not in ("", "global"):
        raise BufferError(f"{where}: buffer '{buf.name}' bound to '{tensor.name}' is in scope "
                          f"'{buf.scope}'; an argument is in global memory")


class IRBuilder:
    """``tvm.tir.ir_builder.create()`` as a tensor intrinsic's function uses it: ``emit``
    calls and ``get`` them back.  Loops, allocation and element access are TIR
    statements tdsl does not build (a BufferError naming the method)."""

    def __init__(self) -> None:
        self._seq: list = []

    def emit(self, stmt: Any) -> None:
        self._seq.append(stmt)

    def get(self) -> Any:
        if not self._seq:
            raise BufferError("tir.ir_builder: get() with nothing emitted")
        return self._seq[0] if len(self._seq) == 1 else list(self._seq)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise BufferError(f"tir.ir_builder: '{name}' is not supported by tdsl.compat (it builds "
                          f"TIR statements; only emit() of calls and get() are)")


class _IRBuilderModule:
    """``tvm.tir.ir_builder``: ``create()`` only."""

    IRBuilder = IRBuilder

    @staticmethod
    def create() -> IRBuilder:
        return IRBuilder()


ir_builder = _IRBuilderModule()

__all__ = ["Buffer", "BufferError", "decl_buffer", "check_bind", "check_matches", "ir_builder",
           "IRBuilder"]
