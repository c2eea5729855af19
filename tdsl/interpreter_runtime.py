"""What the interpreter's generated code calls at run time (``interpreter.py`` writes the
code): the scalar semantics of docs/ir.md (integer wrapping, floor division and modulo with
``x // 0 == 0``, saturating float -> int, garbage in fresh memory), storage shared by the
threads of a block, and the block-by-block, barrier-to-barrier GPU kernel launch."""
from __future__ import annotations

import itertools
import math
from typing import Any, Callable, Sequence

import numpy as np

from .arith.constfold import float_to_int
from .dtype import DType
from .errors import DTypeError, LoweringError
from .expr import Intrinsic
from .stmt import ThreadTag

#: Threads a CUDA block may have; a bigger launch fails on hardware, so here too.
MAX_THREADS_PER_BLOCK = 1024

_HW_TAGS = (ThreadTag.BLOCK_X, ThreadTag.BLOCK_Y, ThreadTag.BLOCK_Z,
            ThreadTag.THREAD_X, ThreadTag.THREAD_Y, ThreadTag.THREAD_Z)
_HW_INDEX = {tag: k for k, tag in enumerate(_HW_TAGS)}


# ---- scalar semantics used by the generated code --------------------------------------------
_INT_BOUNDS = {d: (int(np.iinfo(d.numpy).min), int(np.iinfo(d.numpy).max))
               for d in DType if d.is_int}
_GARBAGE_BYTE = 0x93  # what uninitialized integer memory holds (like a 0x93 memset)


def _make_wrap(dtype: DType) -> Callable[[int], int]:
    lo, hi = _INT_BOUNDS[dtype]
    span = hi - lo + 1
    return lambda x: (x - lo) % span + lo


def _garbage(dtype: DType) -> Any:
    if dtype.is_float:
        return dtype.numpy.type("nan")
    if dtype.is_bool:
        return True
    pattern = int.from_bytes(bytes([_GARBAGE_BYTE]) * dtype.itemsize, "little")
    return _make_wrap(dtype)(pattern)


def _float_to_int(dtype: DType) -> Callable[[Any], int]:
    """Float -> ``dtype`` as docs/ir.md defines it: truncating, saturating, NaN -> 0."""
    return lambda x: float_to_int(x, dtype)


def _floor_mod(a: Any, b: Any) -> Any:
    """Float ``%`` as docs/ir.md defines it: ``a - floor(a/b)*b``, rounding each step."""
    return a - np.floor(a / b) * b


def _int_floordiv(a: int, b: int) -> int:
    """Integer ``//`` as docs/ir.md defines it: floor division, and ``x // 0 == 0``."""
    return a // b if b else 0


def _int_floormod(a: int, b: int) -> int:
    """Integer ``%`` as docs/ir.md defines it: floor modulo, and ``x % 0 == 0``."""
    return a % b if b else 0


def _sigmoid(x: Any) -> Any:
    one = type(x)(1)
    return one / (one + np.exp(-x))


def _rsqrt(x: Any) -> Any:
    return type(x)(1) / np.sqrt(x)


def _erf(x: Any) -> Any:
    return type(x)(math.erf(x))


def _isnan(x: Any) -> bool:
    return bool(np.isnan(x))


_FLOAT_INTRIN = {
    Intrinsic.EXP: "_np.exp", Intrinsic.EXP2: "_np.exp2", Intrinsic.LOG: "_np.log",
    Intrinsic.LOG2: "_np.log2", Intrinsic.LOG10: "_np.log10", Intrinsic.SQRT: "_np.sqrt",
    Intrinsic.RSQRT: "_rsqrt", Intrinsic.TANH: "_np.tanh", Intrinsic.SIGMOID: "_sigmoid",
    Intrinsic.ERF: "_erf", Intrinsic.ABS: "abs", Intrinsic.FLOOR: "_np.floor",
    Intrinsic.CEIL: "_np.ceil", Intrinsic.ROUND: "_np.rint", Intrinsic.TRUNC: "_np.trunc",
    Intrinsic.POW: "_np.power", Intrinsic.SIN: "_np.sin", Intrinsic.COS: "_np.cos",
    Intrinsic.ISNAN: "_isnan",
}
#: integer bit operations on Python ints (wrapped to the dtype afterwards; Python's >> is
#: arithmetic, and an unsigned value is never negative, so it is logical there)
_BIT_CODE = {
    Intrinsic.BITWISE_AND: "(({0}) & ({1}))", Intrinsic.BITWISE_OR: "(({0}) | ({1}))",
    Intrinsic.BITWISE_XOR: "(({0}) ^ ({1}))", Intrinsic.BITWISE_NOT: "(~({0}))",
    Intrinsic.SHIFT_LEFT: "(({0}) << ({1}))", Intrinsic.SHIFT_RIGHT: "(({0}) >> ({1}))",
}


def _oob(name: str, indices: tuple, shape: tuple) -> Any:
    raise LoweringError(f"out-of-bounds access to buffer '{name}': index {list(indices)} "
                        f"outside shape {list(shape)}")


def _unavailable(error: Exception) -> Any:
    def fail(*_: Any) -> Any:
        raise error
    return fail


def _runtime_namespace() -> dict[str, Any]:
    """Globals of the generated code: helpers, dtype constructors, wrap functions."""
    ns: dict[str, Any] = {
        "_np": np, "_floor_mod": _floor_mod, "_int_floordiv": _int_floordiv,
        "_int_floormod": _int_floormod, "_sigmoid": _sigmoid, "_rsqrt": _rsqrt,
        "_erf": _erf, "_isnan": _isnan, "_oob": _oob, "_alloc": _alloc,
        "_kernel_alloc": _kernel_alloc, "_launch": _launch, "_thread_extent": _thread_extent,
        "_allreduce_table": _allreduce_table, "_extern_call": _extern_call,
        "__builtins__": __builtins__,
    }
    for d in DType:
        try:
            ns[f"_T_{d.value}"] = d.numpy.type
        except DTypeError as e:      # bfloat16 without ml_dtypes: an error where it is used
            ns[f"_T_{d.value}"] = _unavailable(e)
        if d.is_int:
            ns[f"_wrap_{d.value}"] = _make_wrap(d)
            ns[f"_f2i_{d.value}"] = _float_to_int(d)
    return ns


def _extern_call(func: str, packed: bool, args: list) -> None:
    """Run an extern stage's call: each buffer (a storage list with its dims and strides)
    becomes a NumPy array for the call and is copied back after it."""
    from .extern_op import call_with_arrays
    arrays, values = [], []
    for data, shape, strides, dtype in args:
        if shape is None:
            values.append(data)
            continue
        flat = np.array(data, dtype=dtype.numpy)
        arr = np.lib.stride_tricks.as_strided(
            flat, shape, [int(t) * flat.itemsize for t in strides]) if flat.size else \
            np.empty(shape, dtype.numpy)
        arrays.append((data, flat, arr))
        values.append(arr)
    call_with_arrays(func, packed, values)
    for data, flat, _ in arrays:
        data[:] = list(flat) if flat.dtype.kind in "fV" else flat.tolist()


# ---- storage ---------------------------------------------------------------------------------
def _alloc(dtype: DType, size: int) -> list:
    """Fresh storage of ``size`` elements, filled with garbage (NaN for floats)."""
    return [_garbage(dtype)] * max(int(size), 0)


def _kernel_alloc(table: dict, seen: dict, alloc_id: int, dtype: DType, size: int) -> list:
    """Storage shared by the threads that reach one Allocate (shared: per block).

    Each thread counts its visits to the Allocate; the first thread to make its
    k-th visit creates the storage, the others get the same list.
    """
    count = seen[alloc_id] = seen.get(alloc_id, 0) + 1
    key = (alloc_id, count)
    data = table.get(key)
    if data is None:
        data = table[key] = _alloc(dtype, size)
    return data


def _allreduce_table(table: dict, seen: dict, site: int) -> dict:
    """The per-block table of one all-reduce (the k-th time a thread reaches ``site``
    meets the other threads' k-th time), like ``_kernel_alloc``."""
    count = seen[site] = seen.get(site, 0) + 1
    return table.setdefault(("all_reduce", site, count), {})


# ---- GPU kernels -----------------------------------------------------------------------------
def _launch(kernel: Callable, extents: Sequence[tuple[str, int]]) -> None:
    """Run a kernel: every block in turn, inside a block every thread round-robin.

    ``extents`` lists (tag, extent) of the kernel's thread-bound loops whose extent
    is known at launch; loops binding one tag must agree, but for loops of extent 1 (they
    run on the first index only).
    """
    dims = [1] * len(_HW_TAGS)
    seen: dict[str, int] = {}
    wide = {tag for tag, ext in extents if int(ext) != 1}
    for tag, ext in extents:
        ext = int(ext)
        if ext == 1 and tag in wide:   # runs on the first index only
            continue
        if seen.setdefault(tag, ext) != ext:
            raise LoweringError(f"thread tag {tag}: loops in one kernel bind it with different "
                                f"extents ({seen[tag]} and {ext})")
        if ext < 1:
            raise LoweringError(f"thread tag {tag}: launch extent {ext} (must be >= 1)")
        dims[_HW_INDEX[ThreadTag(tag)]] = ext
    if dims[3] * dims[4] * dims[5] > MAX_THREADS_PER_BLOCK:
        raise LoweringError(f"kernel launches {dims[3]}x{dims[4]}x{dims[5]} threads per block; "
                            f"at most {MAX_THREADS_PER_BLOCK} are allowed")
    launch_mem: dict = {}
    for bz, by, bx in itertools.product(range(dims[2]), range(dims[1]), range(dims[0])):
        shared: dict = {}
        threads = [kernel((bx, by, bz, tx, ty, tz), tuple(dims), shared, launch_mem)
                   for tz, ty, tx in itertools.product(range(dims[5]), range(dims[4]),
                                                       range(dims[3]))]
        _run_block(threads, (bx, by, bz))


def _run_block(threads: list, block: tuple) -> None:
    """Advance all threads of a block from barrier to barrier until they finish."""
    active = threads
    while active:
        waiting, barriers, finished = [], set(), 0
        for t in active:
            try:
                barriers.add(next(t))
            except StopIteration:
                finished += 1
            else:
                waiting.append(t)
        if waiting and finished:
            raise LoweringError(f"barrier not reached by all threads: in block {block}, "
                                f"{finished} thread(s) finished while {len(waiting)} wait at "
                                f"sync_threads()")
        if len(barriers) > 1:
            raise LoweringError(f"threads of block {block} wait at different barriers "
                                f"(divergent sync_threads())")
        active = waiting


def _thread_extent(tag: str, extent: int, launched: int) -> int:
    """Check a thread loop whose extent is only known inside the kernel."""
    if extent > launched:
        raise LoweringError(f"thread tag {tag}: loop extent {extent} exceeds the launch "
                            f"extent {launched}")
    return extent
