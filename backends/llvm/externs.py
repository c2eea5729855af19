"""Extern stages in LLVM code: C functions by symbol, packed functions through trampolines.

A ``call_extern`` becomes a call of the C symbol (declared with a pointer per buffer and
a C scalar per number), resolved at link time in the process (libraries loaded with
``RTLD_GLOBAL``).  A ``call_packed`` becomes a call of ``i32 tdsl_packed_<name>_<hash>(i64*
slots)``: one 8-byte slot per argument (a buffer's address, an integer, a double), then
each buffer's dimensions.  The symbol is a ctypes trampoline, made at link time, that
rebuilds NumPy arrays over those addresses and calls the function registered under the
name; an exception it raises is kept and re-raised by the module call that ran it.
"""
from __future__ import annotations

import ctypes
import hashlib
import threading
from typing import Any

import llvmlite.ir as ir
import numpy as np

from tdsl.errors import BuildError
from tdsl.stmt import Buffer, ExternCall, PrimFunc
from tdsl.visitor import post_order_visit

from .lltypes import I8, I32, I64, scalar_type

_SLOT = ctypes.c_uint64
_TRAMPOLINE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.POINTER(_SLOT))
#: symbol -> trampoline (kept alive: LLVM code holds its address); a cache, not state: a
#: trampoline looks its function up by name at each call
_TRAMPOLINES: dict[str, Any] = {}
_PENDING = threading.local()


def _spec(s: ExternCall) -> tuple:
    return tuple(("array", a.dtype.value, a.ndim) if isinstance(a, Buffer)
                 else ("float" if a.dtype.is_float else "int", a.dtype.value) for a in s.args)


def packed_symbol(s: ExternCall) -> str:
    """The trampoline symbol of a packed call (its name and argument kinds)."""
    h = hashlib.sha1(repr((s.func, _spec(s))).encode()).hexdigest()[:12]
    safe = "".join(c if c.isalnum() else "_" for c in s.func)
    return f"tdsl_packed_{safe}_{h}"


def emit(cg: Any, s: ExternCall) -> None:
    """The call of an extern stage's function."""
    b = cg.b
    if not s.packed:
        types, values = [], []
        for a in s.args:
            if isinstance(a, Buffer):
                p = cg.buffer_ptr(a)
                types.append(p.type)
                values.append(p)
            else:
                v = cg.scalar(a)
                if a.dtype.is_bool:
                    v = b.zext(v, I8)
                types.append(v.type)
                values.append(v)
        ret = scalar_type(s.dtype) if not s.dtype.is_bool else I8
        fn = cg.module.globals.get(s.func)
        if fn is None:
            fn = ir.Function(cg.module, ir.FunctionType(ret, types), s.func)
        elif list(fn.function_type.args) != types:
            raise BuildError(f"call_extern: '{s.func}' is called with different argument "
                             f"types in one function")
        b.call(fn, values)
        return
    slots: list[ir.Value] = []
    dims: list[ir.Value] = []
    for a in s.args:
        if isinstance(a, Buffer):
            slots.append(b.ptrtoint(cg.buffer_ptr(a), I64))
            dims += [cg.scalar(d) for d in a.shape]
        elif a.dtype.is_float:
            v = cg.scalar(a)
            if v.type != ir.DoubleType():
                v = b.fpext(v, ir.DoubleType())
            slots.append(b.bitcast(v, I64))
        else:
            v = cg.scalar(a)
            w = v.type.width
            slots.append(v if w == 64 else (b.zext(v, I64) if a.dtype.is_bool or not
                                            a.dtype.is_signed else b.sext(v, I64)))
    slots += [d if d.type == I64 else b.sext(d, I64) for d in dims]
    with b.goto_block(cg.st.entry):   # one stack array, allocated at function entry
        arr = b.alloca(ir.ArrayType(I64, max(len(slots), 1)))
    for k, v in enumerate(slots):
        b.store(v, b.gep(arr, [ir.Constant(I32, 0), ir.Constant(I32, k)]))
    name = packed_symbol(s)
    fn = cg.module.globals.get(name) or ir.Function(
        cg.module, ir.FunctionType(I32, [I64.as_pointer()]), name)
    b.call(fn, [b.bitcast(arr, I64.as_pointer())])


def _trampoline(func: str, spec: tuple) -> Any:
    from tdsl.dtype import as_dtype
    from tdsl.extern_op import get_global_func

    def run(slots: Any) -> int:
        try:
            values: list[Any] = []
            arrays = []
            for k, entry in enumerate(spec):
                raw = int(slots[k])
                if entry[0] == "array":
                    arrays.append((len(values), raw, entry))
                    values.append(None)
                elif entry[0] == "float":
                    values.append(float(np.array(raw, np.uint64).view(np.float64)))
                else:
                    values.append(int(np.array(raw, np.uint64).view(np.int64)))
            pos = len(spec)
            for where, addr, (_, dtype, ndim) in arrays:
                shape = tuple(int(np.array(slots[pos + d], np.uint64).view(np.int64))
                              for d in range(ndim))
                pos += ndim
                dt = as_dtype(dtype).numpy
                count = int(np.prod(shape)) if shape else 1
                raw_mem = (ctypes.c_uint8 * (count * dt.itemsize)).from_address(addr) \
                    if count else bytearray()
                values[where] = np.frombuffer(raw_mem, dtype=dt, count=count).reshape(shape)
            get_global_func(func)(*values)
            return 0
        except BaseException as e:   # noqa: BLE001 (re-raised by the module call)
            _PENDING.error = e
            return -1
    return _TRAMPOLINE(run)


def symbols(func: PrimFunc) -> dict[str, int]:
    """Addresses of the trampolines ``func``'s packed calls need (made on first use)."""
    out: dict[str, int] = {}

    def visit(n: Any) -> None:
        if isinstance(n, ExternCall) and n.packed:
            name = packed_symbol(n)
            t = _TRAMPOLINES.get(name)
            if t is None:
                t = _TRAMPOLINES[name] = _trampoline(n.func, _spec(n))
            out[name] = ctypes.cast(t, ctypes.c_void_p).value or 0
    post_order_visit(func.body, visit)
    return out


def raise_pending() -> None:
    """Re-raise the exception a packed function raised during the last call, if any."""
    err = getattr(_PENDING, "error", None)
    if err is not None:
        _PENDING.error = None
        raise err


def packed_calls(func: PrimFunc) -> set[str]:
    """Names of the packed functions ``func`` calls."""
    out: set[str] = set()
    post_order_visit(func.body, lambda n: out.add(n.func) if isinstance(n, ExternCall)
                     and n.packed else None)
    return out


def uses_extern(func: PrimFunc) -> bool:
    found: list = []
    post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, ExternCall) else None)
    return bool(found)
