"""The build cache: compiled kernels in memory and object files on disk.

In memory: the ``$TDSL_JIT_CACHE_ENTRIES`` most recently used kernels (default
``DEFAULT_MEMORY_ENTRIES``; ``0`` keeps none), plus every kernel a live module still holds
(a weak index, so a rebuild shares it instead of linking it again).  Each JIT-linked kernel
holds about three memory mappings until released; an evicted kernel is released once no
module, launcher or function pointer uses it any more (see ``jit.py``), so a long tuning run
or test session holds a bounded number of them.

Keys come from ``key_function`` (swap it with ``set_key_function``); the default
is the structural hash of the lowered program (so a hit skips code generation)
with the names the module exposes, the target, the machine it resolves to, and
the llvmlite version; ``ir_text_key`` hashes the generated LLVM IR instead.  The disk
cache is ``llvm/<key>.o`` plus ``llvm/<key>.json`` (entry name, flags, the IR text) under
the cache root of ``tdsl.disk_cache`` (``$TDSL_CACHE_DIR``, else ``$XDG_CACHE_HOME/tdsl``,
else ``~/.cache/tdsl``); ``TDSL_CACHE_DIR=off`` disables it.  It is capped in size
(``TDSL_CACHE_MAX_SIZE``): each write evicts the least recently used objects, each hit
marks its object used.  Writes are atomic (temporary file + rename), so concurrent builds
cannot leave a torn object behind.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
import weakref
from pathlib import Path
from typing import Any, Callable

import llvmlite

from tdsl import disk_cache
from tdsl.lru import LRU, env_entries
from tdsl.stmt import PrimFunc
from tdsl.target import Target

from .machine import MachineSpec

@functools.lru_cache(maxsize=1)
def backend_fingerprint() -> str:
    """A hash of the code generator's own source (this package and the runtime), so that
    a disk-cached object built by another version of tdsl is never reused."""
    h = hashlib.sha256()
    import tdsl.runtime
    for root in (Path(__file__).parent, Path(tdsl.runtime.__file__).parent):
        for f in sorted(root.glob("*.py")):
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


ENV_MEMORY_ENTRIES = "TDSL_JIT_CACHE_ENTRIES"
DEFAULT_MEMORY_ENTRIES = 256

KeyFunction = Callable[[PrimFunc, Target, MachineSpec, Callable[[], str]], str]


def ir_text_key(func: PrimFunc, target: Target, spec: MachineSpec,
                ir_text: Callable[[], str]) -> str:
    """The default key: a hash of the LLVM IR text, target and resolved machine."""
    h = hashlib.sha256()
    for part in (backend_fingerprint(), llvmlite.__version__, str(target), spec.key(), ir_text()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:40]


def structural_key(func: PrimFunc, target: Target, spec: MachineSpec,
                   ir_text: Callable[[], str]) -> str:
    """The default key: the lowered program's structural hash, its exposed names,
    the target and resolved machine -- computed without generating code."""
    from tdsl.structural import structural_hash
    h = hashlib.sha256()
    names = [func.name] + [b.name for b in func.params] + [v.name for v in func.size_vars]
    for part in (backend_fingerprint(), llvmlite.__version__, str(target), spec.key(),
                 structural_hash(func), json.dumps(names), json.dumps(sorted(map(str, func.attrs.items())))):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:40]


key_function: KeyFunction = structural_key


def set_key_function(fn: KeyFunction) -> KeyFunction:
    """Use ``fn(func, target, spec, ir_text_thunk) -> str`` for cache keys; returns
    the previous one.  A key function that does not call the thunk lets a cache hit
    skip code generation entirely."""
    global key_function
    old, key_function = key_function, fn
    return old


# ---- memory ----------------------------------------------------------------------------------
def memory_entries() -> int:
    """How many kernels the in-memory cache keeps (``$TDSL_JIT_CACHE_ENTRIES``)."""
    return env_entries(ENV_MEMORY_ENTRIES, DEFAULT_MEMORY_ENTRIES)


_memory: "LRU[str, Any]" = LRU(memory_entries)
_live: "weakref.WeakValueDictionary[str, Any]" = weakref.WeakValueDictionary()
stats = {"memory_hits": 0, "disk_hits": 0, "misses": 0}


def memory_get(key: str) -> Any:
    item = _memory.get(key)
    if item is None:
        item = _live.get(key)        # evicted, but a module still holds it
        if item is not None:
            _memory.put(key, item)
    return item


def memory_put(key: str, item: Any) -> None:
    _live[key] = item
    _memory.put(key, item)


def clear_memory() -> None:
    """Forget every in-memory kernel (modules already built stay usable)."""
    _memory.clear()
    _live.clear()


# ---- disk --------------------------------------------------------------------------------------
def cache_dir() -> "Path | None":
    """The disk cache folder, or None when disabled."""
    return disk_cache.folder("llvm")


def disk_get(key: str) -> "tuple[bytes, dict[str, Any]] | None":
    d = cache_dir()
    if d is None:
        return None
    try:
        meta = json.loads((d / f"{key}.json").read_text())
        obj = (d / f"{key}.o").read_bytes()
    except (OSError, ValueError):
        return None
    if len(obj) != meta.get("size"):
        return None
    disk_cache.touch(d / f"{key}.json", d / f"{key}.o")
    return obj, meta


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def disk_put(key: str, obj: bytes, meta: dict[str, Any]) -> None:
    """Store an object file (best effort: an unwritable cache is skipped silently)."""
    d = cache_dir()
    if d is None:
        return
    try:
        d.mkdir(parents=True, exist_ok=True)
        _atomic_write(d / f"{key}.o", obj)
        _atomic_write(d / f"{key}.json", json.dumps({**meta, "size": len(obj)}).encode())
        disk_cache.prune(d)
    except OSError:
        pass
