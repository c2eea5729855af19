"""Checking and binding call arguments against a PrimFunc's parameter buffers.

Every compiled kernel (LLVM or CUDA) runs ``bind_arguments`` before any native
code: a wrong count, dtype, rank, shape, layout, alignment or a read-only output
raises a ``ShapeError``/``DTypeError`` here, so bad input never reaches the kernel.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..errors import DTypeError, ShapeError
from ..expr import Const, Var
from ..stmt import BufferStore, IntrinCall, PrimFunc
from ..visitor import post_order_visit
from .read_checks import READ_CHECKS_ATTR, run_read_checks
from .shape_eval import eval_shape_expr, format_shape_expr

#: ``PrimFunc.attrs`` key listing the indices of written parameters, for functions
#: whose body is not available (a kernel loaded back from an exported library).
WRITTEN_PARAMS_ATTR = "tdsl.written_params"
#: ``PrimFunc.attrs`` key listing the indices of scalar parameters (``td.var`` in ``args``):
#: each is a 1-element buffer in the IR and a Python number at call time.
SCALAR_PARAMS_ATTR = "tdsl.scalar_params"
#: the ``dim`` of a binding ``(param, dim)`` that reads a size from the value of a scalar
#: parameter (TVM's ``x`` in ``args`` with an output of shape ``(m, n // x)``)
SCALAR_VALUE = -1


def bound_value(arr: np.ndarray, dim: int) -> int:
    """The value of a size bound at ``(param, dim)``, given the param's array."""
    return int(arr.reshape(-1)[0]) if dim == SCALAR_VALUE else int(arr.shape[dim])


def binding_text(func: PrimFunc, pi: int, dim: int) -> str:
    """Where a size is read from, for messages: ``A.shape[0]`` or ``the scalar x``."""
    name = func.params[pi].name
    return f"the scalar '{name}'" if dim == SCALAR_VALUE else f"{name}.shape[{dim}]"


def scalar_params(func: PrimFunc) -> frozenset[int]:
    return frozenset(int(i) for i in func.attrs.get(SCALAR_PARAMS_ATTR, ()))


def scalars_as_arrays(func: PrimFunc, values: Sequence[Any]) -> list[Any]:
    """``values`` with each scalar parameter's number turned into its 1-element array."""
    out = list(values)
    for i in scalar_params(func):
        if i < len(out):
            out[i] = scalar_as_array(func, i, out[i])
    return out


def scalar_as_array(func: PrimFunc, i: int, v: Any) -> Any:
    """The 1-element array of scalar parameter ``i`` holding the number ``v``.

    A number (or a 0-d or 1-element array holding one) must fit the parameter's dtype
    (an integer for an int parameter, which, being a ``td.var``, must be >= 1: the
    compiler assumes it).
    """
    p = func.params[i]
    if isinstance(v, np.ndarray) and v.size == 1 and v.ndim <= 1:
        v = v.reshape(()).item()
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, bool) and not p.dtype.is_bool or not isinstance(v, (int, float, bool)):
        raise DTypeError(f"{_describe(func, i)} is a scalar of dtype {p.dtype}: pass a Python "
                         f"number, got {type(v).__name__} {v!r}")
    if p.dtype.is_int:
        if isinstance(v, float) and not v.is_integer():
            raise DTypeError(f"{_describe(func, i)} is an integer scalar, got {v!r}")
        info = np.iinfo(p.dtype.numpy)
        if not info.min <= int(v) <= info.max:
            raise DTypeError(f"{_describe(func, i)}: {v} does not fit {p.dtype}")
        if int(v) < 1:
            raise ShapeError(f"{_describe(func, i)} is a td.var (a size, >= 1), got {v}")
    return np.array([v], dtype=p.dtype.numpy)


def written_params(func: PrimFunc) -> frozenset[int]:
    """Indices of the parameters the kernel writes (outputs and in-place buffers)."""
    if WRITTEN_PARAMS_ATTR in func.attrs:
        return frozenset(int(i) for i in func.attrs[WRITTEN_PARAMS_ATTR])
    index = {id(b): i for i, b in enumerate(func.params)}
    out: set[int] = set()

    def visit(node: Any) -> None:
        if isinstance(node, BufferStore):
            i = index.get(id(node.buffer))
            if i is not None:
                out.add(i)
        elif isinstance(node, IntrinCall):
            for region in node.outputs:
                i = index.get(id(region.buffer))
                if i is not None:
                    out.add(i)
    post_order_visit(func.body, visit)
    return frozenset(out)


def _describe(func: PrimFunc, i: int) -> str:
    return f"argument {i} ('{func.params[i].name}') of '{func.name}'"


def _as_array(func: PrimFunc, i: int, value: Any) -> np.ndarray:
    if i in scalar_params(func) and not isinstance(value, np.ndarray):
        value = scalar_as_array(func, i, value)
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "__dlpack__"):
        try:
            return np.from_dlpack(value)
        except (BufferError, TypeError, ValueError, RuntimeError) as e:
            raise DTypeError(
                f"{_describe(func, i)}: cannot read the DLPack tensor {type(value).__name__} "
                f"on the CPU ({e}); pass a CPU tensor or a NumPy array") from None
    raise DTypeError(
        f"{_describe(func, i)} must be a NumPy array or a DLPack tensor (e.g. a PyTorch CPU "
        f"tensor), got {type(value).__name__}")


def bind_arguments(func: PrimFunc, arrays: Sequence[Any],
                   written: "frozenset[int] | None" = None
                   ) -> tuple[list[np.ndarray], dict[Var, int]]:
    """Check ``arrays`` against ``func.params`` and bind the symbolic sizes.

    Returns the arguments as NumPy arrays (sharing memory with the inputs; DLPack
    tensors are wrapped with ``np.from_dlpack``) and a dict from each size variable
    to its value.  ``written`` (the indices of written parameters) defaults to
    ``written_params(func)``; pass it to skip the scan on every call.

    Raises ``ShapeError``/``DTypeError`` (both ``TDSLError``) on: a wrong number of
    arguments, a wrong dtype or rank, a dimension of size 0, a shape that does not
    match (symbolic sizes are taken from ``func.bindings``; every other dimension is
    evaluated and compared), a non C-contiguous array, an output that is read-only,
    a data pointer not aligned to the element size, or an output overlapping another
    argument in memory.
    """
    arrs, env, _ = ArgChecker(func, written).check(arrays)
    return arrs, env


def _bind_slow(func: PrimFunc, arrays: Sequence[Any], written: frozenset[int]
               ) -> tuple[list[np.ndarray], dict[Var, int]]:
    """The full check with detailed messages (``ArgChecker`` falls back to it)."""
    params = func.params
    if len(arrays) != len(params):
        names = ", ".join(p.name for p in params)
        few = "few" if len(arrays) < len(params) else "many"
        raise ShapeError(f"too {few} arguments: '{func.name}' takes {len(params)} "
                         f"({names}), got {len(arrays)}")
    arrs = [_as_array(func, i, a) for i, a in enumerate(arrays)]

    for i, (p, a) in enumerate(zip(params, arrs)):
        want = p.dtype.numpy
        if a.dtype != want:
            raise DTypeError(f"{_describe(func, i)} has dtype {a.dtype}, expected {p.dtype}; "
                             f"convert it with .astype('{p.dtype}')")
        if a.ndim != p.ndim:
            raise ShapeError(f"{_describe(func, i)} has {a.ndim} dimension(s) (shape "
                             f"{a.shape}), expected {p.ndim}")
        if 0 in a.shape:
            raise ShapeError(f"{_describe(func, i)} has shape {a.shape} with a dimension of "
                             f"size 0; tdsl kernels need every dimension >= 1")

    # bind the symbolic sizes, then check every dimension against its expression
    env: dict[Var, int] = {}
    source: dict[Var, tuple[int, int]] = {}
    for var, (pi, dim) in func.bindings.items():
        env[var] = bound_value(arrs[pi], dim)
        source[var] = (pi, dim)
    for var in func.size_vars:
        if var not in env:
            raise ShapeError(f"'{func.name}': symbolic size '{var.name}' is not bound to any "
                             f"argument dimension")
    for i, (p, a) in enumerate(zip(params, arrs)):
        for d, expr in enumerate(p.shape):
            actual = int(a.shape[d])
            if isinstance(expr, Var) and expr in source:
                si, sd = source[expr]
                if (si, sd) == (i, d) or env[expr] == actual:
                    continue
                raise ShapeError(
                    f"inconsistent value of size '{expr.name}' in '{func.name}': "
                    f"{binding_text(func, si, sd)} = {env[expr]} but "
                    f"{p.name}.shape[{d}] = {actual}")
            expected = eval_shape_expr(expr, env)
            if expected != actual:
                bound = ", ".join(f"{v.name} = {env[v]} from {binding_text(func, *s)}"
                                  for v, s in source.items()
                                  if _mentions(expr, v))
                hint = f" ({bound})" if bound else ""
                raise ShapeError(
                    f"{_describe(func, i)}: dimension {d} is {actual}, expected "
                    f"{format_shape_expr(expr)} = {expected}{hint}; full shape {a.shape}")

    for i, (p, a) in enumerate(zip(params, arrs)):
        if not a.flags.c_contiguous:
            raise ShapeError(f"{_describe(func, i)} is not C-contiguous (strides "
                             f"{a.strides}); pass np.ascontiguousarray(x) instead")
        if i in written and not a.flags.writeable:
            raise ShapeError(f"{_describe(func, i)} is written by the kernel but the array is "
                             f"read-only (a DLPack export before DLPack 1.0 is always "
                             f"read-only in NumPy); pass a writable array")
        if a.ctypes.data % p.dtype.itemsize:
            raise ShapeError(f"{_describe(func, i)}: data pointer {a.ctypes.data:#x} is not "
                             f"aligned to its element size ({p.dtype.itemsize} bytes); pass "
                             f"np.ascontiguousarray(x) or a fresh copy")
    if written:
        spans = [(a.ctypes.data, a.ctypes.data + a.nbytes) for a in arrs]
        for i in written:
            lo, hi = spans[i]
            for j, (lo2, hi2) in enumerate(spans):
                if j != i and lo < hi2 and lo2 < hi:
                    raise ShapeError(
                        f"{_describe(func, i)} is written by the kernel and overlaps argument "
                        f"{j} ('{params[j].name}') in memory; tdsl kernels need distinct "
                        f"arrays (pass a copy)")
    return arrs, env


def _mentions(expr: Any, var: Var) -> bool:
    found = False

    def visit(n: Any) -> None:
        nonlocal found
        if n is var:
            found = True
    post_order_visit(expr, visit)
    return found


class ArgChecker:
    """A precomputed plan of ``bind_arguments`` for one function: a fast path of
    cheap checks for the common (valid) call, falling back to the detailed checks
    (and their error messages) as soon as something does not match."""

    def __init__(self, func: PrimFunc, written: "frozenset[int] | None" = None):
        self.func = func
        self.written = written_params(func) if written is None else frozenset(written)
        params = func.params
        self.count = len(params)
        self.scalars = scalar_params(func)
        #: reads whose range depends on the sizes (``tdsl.lowering.read_bounds``)
        self.reads = tuple(func.attrs.get(READ_CHECKS_ATTR, ()))
        self.dtypes = [p.dtype.numpy for p in params]
        self.ndims = [p.ndim for p in params]
        self.binds = [(v, pi, d) for v, (pi, d) in func.bindings.items()]
        bound_at = {(pi, d) for _, pi, d in self.binds}
        self.complete = all(v in func.bindings for v in func.size_vars)
        self.checks: list[tuple[int, int, int, Any]] = []
        for pi, p in enumerate(params):
            for d, e in enumerate(p.shape):
                if (pi, d) in bound_at and isinstance(e, Var):
                    if func.bindings.get(e) == (pi, d):
                        continue
                if isinstance(e, Const):
                    self.checks.append((pi, d, 0, int(e.value)))
                elif isinstance(e, Var) and e in func.bindings:
                    self.checks.append((pi, d, 1, e))
                else:
                    self.checks.append((pi, d, 2, e))

    def check(self, arrays: Sequence[Any]
              ) -> tuple[list[np.ndarray], dict[Var, int], list[int]]:
        """Checked arrays, the size bindings, and the arrays' data pointers."""
        if self.scalars:
            arrays = scalars_as_arrays(self.func, arrays)
        out = self._fast(arrays)
        if out is None:
            arrs, env = _bind_slow(self.func, arrays, self.written)
            out = arrs, env, [a.ctypes.data for a in arrs]
        if self.reads:
            run_read_checks(self.reads, out[1])
        return out

    def _fast(self, arrays: Sequence[Any]) -> Any:
        if len(arrays) != self.count or not self.complete:
            return None
        written = self.written
        arrs = []
        for i, a in enumerate(arrays):
            if type(a) is not np.ndarray:
                if not hasattr(a, "__dlpack__") and not isinstance(a, np.ndarray):
                    return None
                try:
                    a = _as_array(self.func, i, a)
                except DTypeError:
                    return None
            if a.dtype != self.dtypes[i] or a.ndim != self.ndims[i] or a.size == 0:
                return None
            flags = a.flags
            if not (flags.c_contiguous and flags.aligned) or (i in written and not flags.writeable):
                return None
            arrs.append(a)
        env = {v: (arrs[pi].shape[d] if d != SCALAR_VALUE else int(arrs[pi].reshape(-1)[0]))
               for v, pi, d in self.binds}
        for pi, d, kind, payload in self.checks:
            if kind == 0:
                want = payload
            elif kind == 1:
                want = env[payload]
            else:
                try:
                    want = eval_shape_expr(payload, env)
                except ShapeError:
                    return None
            if arrs[pi].shape[d] != want:
                return None
        ptrs = [a.ctypes.data for a in arrs]
        for i in written:
            lo, hi = ptrs[i], ptrs[i] + arrs[i].nbytes
            for j, a in enumerate(arrs):
                if j != i and lo < ptrs[j] + a.nbytes and ptrs[j] < hi:
                    return None
        return arrs, env, ptrs
