"""Loading compiled objects into this process with LLVM's ORC LLJIT.

One LLJIT instance serves the process; each kernel object is linked as its own
JIT library (kept alive by its ``ResourceTracker``).  External symbols resolve
against the process (libc, libm); a parallel kernel's ``GOMP_parallel`` binds to tdsl's
thread pool (``threadpool.py``), or to libgomp's with ``TDSL_PARALLEL_RUNTIME=gomp``.  A missing symbol raises ``BuildError`` (LLJIT
reports it; it never crashes the process as MCJIT would).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import itertools
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

import llvmlite.binding as llvm

from tdsl.errors import BuildError

from .machine import LLVM_LOCK, ensure_initialized

_engine: Any = None
_names = itertools.count()
_lock = threading.Lock()

GOMP_SYMBOLS = ("GOMP_parallel",)


def engine() -> Any:
    """The process-wide LLJIT (created on first use)."""
    global _engine
    with _lock:
        if _engine is None:
            ensure_initialized()
            _engine = llvm.create_lljit_compiler()
        return _engine


@functools.lru_cache(maxsize=None)
def libgomp() -> "ctypes.CDLL | None":
    """The system OpenMP runtime (``libgomp.so.1``), or None when it is missing."""
    for name in ("libgomp.so.1", ctypes.util.find_library("gomp")):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
            llvm.load_library_permanently(name)
            return lib
        except OSError:
            continue
    return None


#: Compiler-runtime helpers LLVM may call (float16 conversions without hardware support).
LIBGCC_SYMBOLS = ("__truncdfhf2", "__truncsfhf2", "__extendhfsf2", "__extendhfdf2")


@functools.lru_cache(maxsize=None)
def libgcc_symbols() -> dict[str, int]:
    """Addresses of the compiler-runtime helpers found in ``libgcc_s.so.1``."""
    out: dict[str, int] = {}
    try:
        lib = ctypes.CDLL("libgcc_s.so.1")
    except OSError:
        return out
    for sym in LIBGCC_SYMBOLS:
        try:
            out[sym] = ctypes.cast(getattr(lib, sym), ctypes.c_void_p).value or 0
        except AttributeError:
            continue
    return {k: v for k, v in out.items() if v}


def gomp_available() -> bool:
    return libgomp() is not None


#: Trackers of libraries nothing references any more, disposed at the next ``link``
#: (under ``LLVM_LOCK``).  llvmlite disposes a ``ResourceTracker`` when it is collected, in
#: whatever thread the garbage collector runs -- possibly while another thread is inside
#: ORC's ``link`` (ctypes releases the GIL there), and removing a library from the session
#: concurrently with a link aborts the process.  So a library's tracker outlives it here.
_retired: list[Any] = []


def _retire(tracker: Any) -> None:
    _retired.append(tracker)     # list.append is atomic: safe from any thread or finalizer


def dispose_retired() -> int:
    """Free the JIT memory of libraries no module references any more; returns how many."""
    with LLVM_LOCK:
        n = 0
        while _retired:
            _retired.pop().close()
            n += 1
        return n


@dataclass
class JitLibrary:
    """A linked kernel: symbol addresses, valid while this object (and so ``tracker``)
    lives; when it is collected, its tracker is retired (``_retire``), not disposed."""

    name: str
    tracker: Any
    addresses: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        weakref.finalize(self, _retire, self.tracker)

    def __getitem__(self, symbol: str) -> int:
        return self.addresses[symbol]


def link(obj: bytes, exports: list[str], needs_gomp: bool,
         imports: "dict[str, int] | None" = None) -> JitLibrary:
    """Link object code into the JIT and return the addresses of ``exports``; ``imports``
    gives addresses of symbols the code calls (extern stages' trampolines)."""
    builder = llvm.JITLibraryBuilder().add_object_img(obj).add_current_process()
    if needs_gomp:
        from .threadpool import parallel_runtime_address
        pool = parallel_runtime_address()
        if pool is not None:               # tdsl's own pool (see threadpool.py)
            builder.import_symbol("GOMP_parallel", pool)
        else:
            lib = libgomp()
            if lib is None:
                raise BuildError("this kernel has parallel loops but libgomp.so.1 (the OpenMP "
                                 "runtime) was not found")
            for sym in GOMP_SYMBOLS:
                builder.import_symbol(sym, ctypes.cast(getattr(lib, sym), ctypes.c_void_p).value)
    for sym, addr in {**libgcc_symbols(), **(imports or {})}.items():
        builder.import_symbol(sym, addr)
    for sym in exports:
        builder.export_symbol(sym)
    name = f"tdsl_kernel_{next(_names)}"
    with LLVM_LOCK:
        dispose_retired()
        try:
            tracker = builder.link(engine(), name)
        except RuntimeError as e:
            raise BuildError(f"JIT linking failed: {e}") from None
    return JitLibrary(name, tracker, {s: tracker[s] for s in exports})
