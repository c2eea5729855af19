"""``extern``: a stage computed by an external function (TVM's ``te.extern``).

``extern(shape, inputs, fcompute)`` declares outputs that a function outside tdsl fills
from whole input tensors.  ``fcompute(ins, outs)`` gets one ``ExternBuffer`` per input and
output and returns the call: ``call_packed("name", ...)`` for a Python function registered
with ``register_func`` (it receives NumPy arrays and numbers), or ``call_extern(dtype,
"symbol", ...)`` for a C function of the process (a shared library loaded with
``ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)``; it receives a pointer per buffer and a C
scalar per number).  The stage has no loops; its consumers see an ordinary tensor.

On CUDA, ``call_extern(dtype, "f", ..., source=CUDA_C, grid=G, block=B)`` names a
``__device__`` function ``f`` defined in ``source``: tdsl launches a kernel of ``G`` blocks
of ``B`` threads (ints or size expressions, or tuples of up to three) in which every thread
calls ``f`` with a ``T*`` per buffer and a C scalar per number; ``f`` finds its part with
``blockIdx``/``threadIdx``.  The CPU backends still call the C symbol ``f`` (the source is
CUDA's only).  Packed functions are Python functions on the host: CUDA cannot call them.

The packed-function table is process-wide by design (TVM's ``tvm.register_func``): a name
names one function everywhere, whichever module calls it.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from .dtype import as_dtype
from .errors import LoweringError, TDSLError
from .expr import Expr, convert
from .opaque import OpaqueOp
from .stmt import Buffer, ExternCall
from .tensor import Tensor, _shape

if TYPE_CHECKING:
    from .lowering.nest import NestBuilder
    from .stmt import Stmt
    from tdsl.schedule import Stage

_PACKED: dict[str, Callable] = {}


def register_func(name: Any, f: "Callable | None" = None, override: bool = False) -> Any:
    """Register ``f`` as the packed function ``name`` (usable as a decorator, as in TVM)."""
    if callable(name) and f is None:
        return register_func(name.__name__, name, override)

    def do(func: Callable) -> Callable:
        if not isinstance(name, str) or not name:
            raise TDSLError(f"register_func: the name must be a non-empty string, got {name!r}")
        if name in _PACKED and not override:
            raise TDSLError(f"register_func: '{name}' is already registered; pass override=True")
        _PACKED[name] = func
        return func
    return do(f) if f is not None else do


def get_global_func(name: str, allow_missing: bool = False) -> "Callable | None":
    """The packed function registered as ``name``."""
    f = _PACKED.get(name)
    if f is None and not allow_missing:
        raise TDSLError(f"no packed function '{name}' is registered (tdsl.register_func)")
    return f


def list_global_func_names() -> list[str]:
    return sorted(_PACKED)


def c_symbol(name: str) -> Any:
    """The C function ``name`` from the process's global symbols, or raise."""
    try:
        return getattr(ctypes.CDLL(None), name)
    except AttributeError:
        raise LoweringError(f"call_extern: no C symbol '{name}' in the process; load its "
                            f"library with ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)") from None


_C_SCALARS = {"int8": ctypes.c_int8, "uint8": ctypes.c_uint8, "int16": ctypes.c_int16,
              "uint16": ctypes.c_uint16, "int32": ctypes.c_int32, "uint32": ctypes.c_uint32,
              "int64": ctypes.c_int64, "uint64": ctypes.c_uint64, "bool": ctypes.c_bool,
              "float32": ctypes.c_float, "float64": ctypes.c_double}


def call_with_arrays(func: str, packed: bool, values: list) -> None:
    """Call ``func`` the way the interpreter runs an extern stage: a packed function gets
    the arrays (written in place) and numbers; a C function a pointer per array and a C
    scalar per number (typed by the number's dtype)."""
    import numpy as np
    if packed:
        get_global_func(func)(*values)
        return
    cargs = []
    for v in values:
        if isinstance(v, np.ndarray):
            cargs.append(ctypes.c_void_p(v.ctypes.data))
        else:
            dt = np.asarray(v).dtype.name
            cargs.append(_C_SCALARS.get(dt, ctypes.c_double)(v.item() if hasattr(v, "item")
                                                            else v))
    c_symbol(func)(*cargs)


class ExternBuffer:
    """An input or output tensor of an extern stage, as ``fcompute`` sees it: pass it (or
    its ``.data`` / ``.access_ptr()``) to the call; ``.shape`` gives its sizes."""

    def __init__(self, tensor: Tensor):
        self.tensor = tensor
        self.name = tensor.name
        self.shape = tensor.shape
        self.dtype = tensor.dtype
        self.ndim = tensor.ndim

    @property
    def data(self) -> "ExternBuffer":
        return self

    def access_ptr(self, access_mask: Any = "rw", *args: Any, **kwargs: Any) -> "ExternBuffer":
        return self

    def vload(self, *args: Any, **kwargs: Any) -> Any:
        raise TDSLError(f"extern buffer '{self.name}': element access (vload) needs TVM's IR "
                        f"builder, which tdsl does not have; pass the buffer to a call")

    def __repr__(self) -> str:
        return f"ExternBuffer({self.name}, {list(self.shape)}, {self.dtype})"


@dataclass(frozen=True)
class DeviceCode:
    """A CUDA ``__device__`` function for an extern call: its source and the launch that
    runs it (every thread of ``grid`` x ``block`` calls it)."""

    source: str
    grid: tuple      # three size expressions (x, y, z)
    block: tuple


def _launch_dims(value: Any, what: str, func: str) -> tuple:
    dims = list(value) if isinstance(value, (list, tuple)) else [value]
    if not 1 <= len(dims) <= 3:
        raise TDSLError(f"call_extern '{func}': {what} needs 1 to 3 sizes, got {value!r}")
    out = []
    for d in dims + [1] * (3 - len(dims)):
        e = _scalar(d, func)
        if not e.dtype.is_int:
            raise TDSLError(f"call_extern '{func}': {what} sizes must be integers, got {d!r}")
        out.append(e if e.dtype.value == "int64" else e.astype("int64"))
    return tuple(out)


def device_code(func: str, source: Any, grid: Any, block: Any) -> "DeviceCode | None":
    """Check ``call_extern``'s CUDA arguments: all or none of source, grid and block."""
    if source is None and grid is None and block is None:
        return None
    if not isinstance(source, str) or grid is None or block is None:
        raise TDSLError(f"call_extern '{func}': a CUDA device function needs source= (CUDA C "
                        f"defining __device__ ... {func}(...)), grid= and block= together")
    if func not in source:
        raise TDSLError(f"call_extern '{func}': the given CUDA source does not define '{func}'")
    return DeviceCode(source, _launch_dims(grid, "grid", func), _launch_dims(block, "block", func))


class ExternCallSpec:
    """What ``fcompute`` returns: which function, packed or C, and its arguments."""

    def __init__(self, func: str, packed: bool, dtype: Any, args: Sequence[Any],
                 device: "DeviceCode | None" = None):
        if not isinstance(func, str) or not func:
            raise TDSLError(f"extern call: the function name must be a string, got {func!r}")
        self.func = func
        self.packed = packed
        self.dtype = as_dtype(dtype)
        self.args = [a if isinstance(a, ExternBuffer) else _scalar(a, func) for a in args]
        self.device = device


def _scalar(a: Any, func: str) -> Expr:
    if isinstance(a, Tensor):
        raise TDSLError(f"call to '{func}': pass the extern stage's buffers (the ins/outs "
                        f"given to fcompute), not the tensor '{a.name}'")
    try:
        e = convert(a)
    except Exception:
        raise TDSLError(f"call to '{func}': argument {a!r} is neither a buffer nor a "
                        f"number") from None
    from .visitor import post_order_visit
    from .expr import TensorLoad
    loads: list = []
    post_order_visit(e, lambda n: loads.append(n) if isinstance(n, TensorLoad) else None)
    if loads:
        raise TDSLError(f"call to '{func}': a scalar argument cannot read a tensor ({e!r})")
    return e


def call_packed(name: str, *args: Any) -> ExternCallSpec:
    """A call of the packed function ``name`` (``register_func``) from an extern stage."""
    return ExternCallSpec(name, True, "int32", args)


def call_extern(dtype: Any, name: str, *args: Any, source: "str | None" = None,
                grid: Any = None, block: Any = None) -> ExternCallSpec:
    """A call of the C function ``name`` (returning ``dtype``, ignored) from an extern stage.

    For CUDA, ``source`` defines ``__device__ void name(...)`` and ``grid``/``block`` the
    launch whose every thread calls it (see the module docstring)."""
    if not isinstance(name, str) or not name:
        raise TDSLError(f"call_extern: the function name must be a string, got {name!r}")
    return ExternCallSpec(name, False, dtype, args, device_code(name, source, grid, block))


class ExternOp(OpaqueOp):
    """Outputs written by one external call over whole tensors."""

    kind = "extern"

    def __init__(self, name: str, tag: str, attrs: "dict | None", shapes: list, dtypes: list,
                 inputs: list[Tensor], fcompute: Callable):
        names = [name] if len(shapes) == 1 else [f"{name}.v{k}" for k in range(len(shapes))]
        super().__init__(name, tag, attrs, shapes, dtypes, names, inputs)
        ins = [ExternBuffer(t) for t in inputs]
        outs = [ExternBuffer(t) for t in self.outputs]
        spec = fcompute(ins, outs)
        if not isinstance(spec, ExternCallSpec):
            raise TDSLError(f"extern '{name}': fcompute must return call_packed(...) or "
                            f"call_extern(...), got {type(spec).__name__}")
        self.call = spec

    def structural_parts(self, canon: Any) -> None:
        """The call (function, kind, arguments) for structural equality and hashing."""
        c = self.call
        canon.visit_all((c.func, c.packed, c.dtype.value))
        if c.device is not None:
            canon.visit(c.device.source)
            canon.visit_all(c.device.grid + c.device.block)
        for a in c.args:
            canon.visit(("buffer", a.tensor) if isinstance(a, ExternBuffer) else a)

    def lower_stmt(self, nest: "NestBuilder", st: "Stage") -> "Stmt":
        args: list[Any] = []
        for a in self.call.args:
            if isinstance(a, ExternBuffer):
                args.append(self._buffer(nest, st, a.tensor))
            else:
                args.append(nest.lower_expr(a, {}))
        return ExternCall(self.call.func, self.call.packed, self.call.dtype, args,
                          device=self.call.device)

    def _buffer(self, nest: "NestBuilder", st: "Stage", t: Tensor) -> Buffer:
        producer = nest.sch[t]
        stor = nest.storage.get(producer)
        if stor is None:
            raise LoweringError(f"extern '{self.name}': its input '{t.name}' is not computed "
                                f"into memory")
        if any(not (getattr(o, "value", None) == 0) for o in stor.offsets):
            raise LoweringError(f"extern '{self.name}': its input '{t.name}' is computed over "
                                f"a region only (compute_at); compute it at root")
        buf = stor.buffers[t.value_index]
        if buf.strides is not None:
            raise LoweringError(f"extern '{self.name}': its input '{t.name}' has padded rows "
                                f"(storage_align); an extern function reads compact arrays")
        return buf


def extern(shape: Any, inputs: Sequence[Tensor], fcompute: Callable, name: str = "extern",
           dtype: Any = None, in_buffers: Any = None, out_buffers: Any = None, tag: str = "",
           attrs: "dict | None" = None) -> Any:
    """Tensors computed by an external function (TVM's ``te.extern``): one per shape when
    ``shape`` is a list of shapes.  ``dtype`` defaults to the first input's."""
    if in_buffers is not None or out_buffers is not None:
        raise TDSLError(f"extern '{name}': custom in_buffers/out_buffers are not supported "
                        f"(tdsl's buffers are compact row-major)")
    multi = isinstance(shape, list) and shape and isinstance(shape[0], (list, tuple))
    shapes = [_shape(s, f"extern '{name}'") for s in (shape if multi else [shape])]
    inputs = list(inputs)
    for t in inputs:
        if not isinstance(t, Tensor):
            raise TDSLError(f"extern '{name}': inputs must be tensors, got {t!r}")
    if dtype is None:
        dtype = inputs[0].dtype if inputs else "float32"
    dtypes = [as_dtype(d) for d in (dtype if isinstance(dtype, list) else [dtype] * len(shapes))]
    if len(dtypes) != len(shapes):
        raise TDSLError(f"extern '{name}': {len(shapes)} output shapes but {len(dtypes)} dtypes")
    op = ExternOp(name, tag, attrs, shapes, dtypes, inputs, fcompute)
    return list(op.outputs) if multi else op.outputs[0]
