"""Shared libraries opened with ``dlopen`` and closed again when nothing uses them.

ctypes never closes a library it opened; a process that loads one per kernel (a tuning
worker loading each candidate, the CUDA emulator loading each kernel's harness) keeps about
five memory mappings per library for its life, and Linux allows 65530.
"""
from __future__ import annotations

import _ctypes
import ctypes
import os
import weakref


def open_library(path: "str | os.PathLike") -> ctypes.CDLL:
    """``dlopen`` ``path``; the library is closed when the returned object is collected.
    Every function taken from it (``lib.f``) holds it, so a caller holding a function
    keeps the code mapped."""
    lib = ctypes.CDLL(str(path))
    close = getattr(_ctypes, "dlclose", None)
    if close is not None:
        lib._tdsl_closer = weakref.finalize(lib, close, lib._handle)
        lib._tdsl_closer.atexit = False
    return lib


def keep_open(lib: ctypes.CDLL) -> None:
    """Never close ``lib`` (threads of its own may run its code after a call returns)."""
    closer = getattr(lib, "_tdsl_closer", None)
    if closer is not None:
        closer.detach()
