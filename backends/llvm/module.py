"""``LLVMModule``: a JIT-compiled CPU kernel, callable on NumPy/DLPack arrays."""
from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tdsl.errors import BuildError
from tdsl.expr import Var
from tdsl.keywords import check_keywords
from tdsl.runtime import Module, default_num_threads
from tdsl.runtime.threads import note_thread_pool_use, thread_pool_usable
from tdsl.stmt import PrimFunc
from tdsl.target import Target

from .build import Compiled
from .cabi import raise_status
from .machine import emit_assembly, optimize, parse
from .parallel import thread_count_symbol

SOURCE_FORMATS = ("ll", "ll-opt", "asm")


def _prototype(func: PrimFunc) -> Any:
    return ctypes.CFUNCTYPE(ctypes.c_int32, *([ctypes.c_void_p] * len(func.params)
                                    + [ctypes.c_int64] * len(func.size_vars)))


class LLVMModule(Module):
    """A kernel built by the LLVM backend.

    Call it with one array per parameter (outputs are written in place).  Threads:
    ``set_num_threads(n)`` > the target's ``-num-threads=`` > ``TDSL_NUM_THREADS`` >
    all available CPUs.
    """

    type_key = "llvm"

    def __init__(self, func: PrimFunc, target: Target, compiled: Compiled):
        super().__init__(func, compiled.entry)
        self.target = target
        self.compiled = compiled
        self._num_threads = 0
        from .externs import uses_extern
        self._calls_extern = uses_extern(func)

    # ---- execution -----------------------------------------------------------------------------
    @property
    def runnable(self) -> bool:
        return self.compiled.library is not None

    @property
    def num_threads(self) -> int:
        """Threads the parallel loops will use on the next call."""
        return self._num_threads or self.target.num_threads or default_num_threads()

    def set_num_threads(self, n: int) -> None:
        """Use ``n`` threads for this module's parallel loops (0: back to the default)."""
        if int(n) < 0:
            raise BuildError(f"set_num_threads: expected n >= 0, got {n}")
        self._num_threads = int(n)

    def _cfunc(self) -> Any:
        c = self.compiled
        if c.library is None:
            raise BuildError(f"'{self.entry_name}' was built for {c.spec.triple} "
                             f"(cpu {c.spec.cpu}) and cannot run on this machine: "
                             f"{c.spec.why_not}; use save()/export_library() instead")
        if c.cfunc is None:   # holds the library: a launcher kept alone still has its code
            c.cfunc = c.library.function(c.entry, _prototype(self.func))
        return c.cfunc

    def _launcher(self, arrays: list[np.ndarray], sizes: dict[Var, int],
                  pointers: list[int]) -> Callable[[], None]:
        run = self.native_launcher(pointers + [int(sizes[v]) for v in self.func.size_vars])
        if self._calls_extern:
            inner = run

            def run() -> None:
                from .externs import raise_pending
                inner()
                raise_pending()   # what a packed function raised during the call
        run.arrays = arrays  # type: ignore[attr-defined]  # keeps the memory alive
        return run

    def native_launcher(self, args: list, num_threads: "int | None" = None,
                        on_status: Callable[[int, str], None] = raise_status
                        ) -> Callable[[], None]:
        """A no-argument call of the native entry on ``args`` (buffer pointers, then the
        size variables' values), read at each call: a caller may patch the list in place
        (the model runtime does, for buffers bound per call).  Parallel loops use
        ``num_threads`` (default: this module's count; 1 where the pool is unusable).  A
        nonzero status goes to ``on_status(status, entry)``.  No argument checks: the caller
        checked the arrays once (``bind``); externs' pending errors are not raised."""
        fn = self._cfunc()
        c, entry = self.compiled, self.entry_name
        if not c.uses_parallel:
            def run() -> None:
                status = fn(*args)
                if status:
                    on_status(status, entry)
            return run
        n = (num_threads or self.num_threads) if thread_pool_usable() else 1
        if n > 1:
            note_thread_pool_use()
        cell = c.library.cell(thread_count_symbol(c.entry), ctypes.c_int32)

        def run_parallel() -> None:
            if c.threads_written != n:
                cell.value = n
                c.threads_written = n
            status = fn(*args)
            if status:
                on_status(status, entry)
        return run_parallel

    # ---- inspection ------------------------------------------------------------------------------
    def get_source(self, fmt: str = "ll") -> str:
        """``"ll"``: the generated LLVM IR; ``"ll-opt"``: after the O3 pipeline;
        ``"asm"``: the target assembly."""
        fmt = fmt or "ll"
        if fmt == "ll":
            return self.compiled.ir_text
        if fmt in ("ll-opt", "asm", "s"):
            mod = parse(self.compiled.ir_text)
            optimize(mod, self.compiled.spec)
            return str(mod) if fmt == "ll-opt" else emit_assembly(mod, self.compiled.spec)
        raise BuildError(f"get_source: unknown format {fmt!r}; use one of {SOURCE_FORMATS}")

    @property
    def notes(self) -> list[str]:
        """Code generation remarks (e.g. why a vectorized loop was not widened)."""
        return list(self.compiled.notes)

    # ---- saving and export ------------------------------------------------------------------------
    def save(self, path: str) -> None:
        """Write the object code (``.o``), LLVM IR (``.ll``) or assembly (``.s``)."""
        p = Path(path)
        if p.suffix == ".o":
            p.write_bytes(self.compiled.obj)
        elif p.suffix == ".ll":
            p.write_text(self.get_source("ll"))
        elif p.suffix == ".s":
            p.write_text(self.get_source("asm"))
        else:
            raise BuildError(f"save: unknown file type '{p.suffix}' (use .o, .ll or .s)")

    @check_keywords
    def export_library(self, path: str, cc: str = "gcc",
                       options: "list[str] | None" = None) -> None:
        """Write a shared library ``path`` (``.so``) with a C header and metadata beside
        it; a ``.o`` path writes just the object (any target)."""
        from .export import export_library
        from .externs import packed_calls
        calls = packed_calls(self.func)
        if calls:
            raise BuildError(f"export_library: the function calls packed function(s) "
                             f"{sorted(calls)} (call_packed), which live in this Python "
                             f"process; a shared library cannot call them")
        export_library(self, path, cc=cc, options=options)
