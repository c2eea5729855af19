"""Loading compiled objects into this process with LLVM's ORC LLJIT.

One LLJIT instance serves the process, linking with JITLink (see ``engine``); each kernel
object is linked as its own JIT library, a ``JitLibrary`` that owns the library's
``ResourceTracker``: when the last reference to the ``JitLibrary`` goes, LLVM unmaps the code
and data (each library holds about three memory mappings, and Linux allows a process 65530).
So whatever calls into a library must hold it: ``JitLibrary.function`` and ``JitLibrary.cell``
return ctypes objects that do, and a library holds the libraries its code calls (the thread
pool).  Libraries linked once per process (the pool) are ``keep_forever``.  External symbols
resolve against the process (libc, libm); a parallel kernel's ``GOMP_parallel`` binds to
tdsl's thread pool (``threadpool.py``), or to libgomp's with ``TDSL_PARALLEL_RUNTIME=gomp``.
A missing symbol raises ``BuildError`` (LLJIT reports it; it never crashes the process as
MCJIT would).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import itertools
import threading
import weakref
from typing import Any

import llvmlite.binding as llvm

from tdsl.errors import BuildError

from . import workspace
from .machine import LLVM_LOCK, ensure_initialized

_engine: Any = None
_names = itertools.count()
_lock = threading.Lock()

GOMP_SYMBOLS = ("GOMP_parallel",)


def engine() -> Any:
    """The process-wide LLJIT (created on first use), linking with JITLink.

    Objects are small-code-model PIC: their code reaches its constants, GOT and stubs with
    32-bit PC-relative offsets, so all sections of one object must lie within 2 GiB of each
    other.  JITLink maps each object in one contiguous block.  llvmlite's other linker,
    RuntimeDyld, maps code, constants and GOT separately (its ``SectionMemoryManager``, one
    per object); once freed kernels leave holes across a large address space, the sections
    land gigabytes apart and LLVM aborts the process (``RuntimeDyldELF ...
    resolveX86_64Relocation: Assertion `isInt<32>(RealOffset)' failed``).  Calls and data
    references to other libraries go through JITLink's 64-bit GOT entries, whatever the
    distance.  RuntimeDyld is used only where llvmlite has no JITLink (Windows).
    """
    global _engine
    with _lock:
        if _engine is None:
            ensure_initialized()
            try:
                _engine = llvm.create_lljit_compiler(use_jit_link=True)
            except RuntimeError:   # "JITLink is not currently available on Windows"
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


class JitLibrary:
    """A linked library: its exported symbols' addresses, valid while this object lives.

    Its memory is released (LLVM's ``ResourceTracker`` removed) once nothing references it;
    ``keep`` holds what its code calls into (another ``JitLibrary``), so that goes last.
    """

    def __init__(self, name: str, tracker: Any, addresses: dict[str, int],
                 keep: tuple = ()):
        self.name = name
        self.addresses = addresses
        self.keep = keep
        self.permanent = False
        self._tracker = tracker
        self._release = weakref.finalize(self, _release, tracker)
        self._release.atexit = False   # at exit the process goes anyway (pool threads run)

    def __getitem__(self, symbol: str) -> int:
        """The raw address of ``symbol``: valid only while this library is referenced."""
        return self.addresses[symbol]

    def function(self, symbol: str, prototype: Any) -> Any:
        """``symbol`` as a ctypes function of type ``prototype`` that keeps this library
        mapped for as long as it exists."""
        fn = prototype(self.addresses[symbol])
        fn.jit_library = self
        return fn

    def cell(self, symbol: str, ctype: Any) -> Any:
        """The global variable ``symbol`` as a ctypes ``ctype`` object over the library's
        memory that keeps this library mapped for as long as it exists."""
        value = ctype.from_address(self.addresses[symbol])
        value.jit_library = self
        return value

    def keep_forever(self) -> "JitLibrary":
        """Never release this library (one linked once per process, whose code may run on
        threads until the process ends)."""
        self._release.detach()
        self._tracker.detach()
        self.permanent = True
        return self


def _release(tracker: Any) -> None:
    with LLVM_LOCK:   # serialized with linking, like every other use of LLVM
        tracker.close()


def link(obj: bytes, exports: list[str], needs_gomp: bool,
         imports: "dict[str, int] | None" = None, needs_workspace: bool = False) -> JitLibrary:
    """Link object code into the JIT and return the addresses of ``exports``; ``imports``
    gives addresses of symbols the code calls (extern stages' trampolines);
    ``needs_workspace``: its heap temporaries come from the process's workspace cache."""
    builder = llvm.JITLibraryBuilder().add_object_img(obj).add_current_process()
    keep: tuple = ()
    if needs_workspace and workspace.enabled():   # (else its weak references stay null)
        imports = {**workspace.workspace_runtime().symbols, **(imports or {})}
    if needs_gomp:
        from .threadpool import parallel_runtime
        pool = parallel_runtime()
        if pool is not None:               # tdsl's own pool (see threadpool.py)
            builder.import_symbol("GOMP_parallel", pool.parallel)
            keep = (pool.library,)
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
    lljit = engine()   # before LLVM_LOCK: engine() takes its own lock, then LLVM_LOCK
    with LLVM_LOCK:
        try:
            tracker = builder.link(lljit, name)
        except RuntimeError as e:
            raise BuildError(f"JIT linking failed: {e}") from None
    return JitLibrary(name, tracker, {s: tracker[s] for s in exports}, keep)
