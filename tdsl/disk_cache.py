"""Where tdsl's on-disk caches live, how large they may grow, and how they are pruned.

Two caches share one root folder: the LLVM build cache (``llvm/``: object files and their
metadata) and the CUDA emulator's compiled harnesses (``cuda-emu/``).  The root is
``$TDSL_CACHE_DIR`` when set, else ``$XDG_CACHE_HOME/tdsl``, else ``~/.cache/tdsl``.
``TDSL_CACHE_DIR=off`` turns the build cache off; the emulator, which must write its shared
objects somewhere, then uses a folder in the temporary directory.

Each cache folder is capped at ``$TDSL_CACHE_MAX_SIZE`` (bytes, or with a K/M/G suffix;
default 256M; ``0``: no cap).  After every write the least recently used entries are
deleted until the folder fits; a cache hit refreshes its entry's time.  An entry is every
file sharing a name up to the first dot (``<key>.o`` and ``<key>.json``), so an object never
loses its metadata.  Entries used in the last ``GRACE_S`` seconds are never evicted: another
process may be writing or loading them.

The environment is read here and nowhere else, at each call (tests and tools can change it).
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ENV_DIR = "TDSL_CACHE_DIR"
ENV_MAX_SIZE = "TDSL_CACHE_MAX_SIZE"
DEFAULT_MAX_BYTES = 256 * 2**20
GRACE_S = 60.0
#: the cache folders under the root, and what each holds
FOLDERS = {"llvm": "LLVM build cache (object files)",
           "cuda-emu": "CUDA emulator (compiled harnesses)"}
_OFF = ("off", "0", "none", "false")
_UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def disabled() -> bool:
    """Whether ``TDSL_CACHE_DIR`` turns the build cache off."""
    value = os.environ.get(ENV_DIR)
    return value is not None and value.strip().lower() in _OFF


def root() -> Path:
    """The root of the cache folders (see the module docstring)."""
    value = os.environ.get(ENV_DIR, "").strip()
    if value and value.lower() not in _OFF:
        return Path(value).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    # The XDG spec: a relative XDG_CACHE_HOME is invalid and must be ignored.
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "tdsl"


def folder(name: str) -> "Path | None":
    """The folder of cache ``name`` (a key of ``FOLDERS``); None for the build cache when
    it is turned off.  The folder may not exist yet."""
    if name not in FOLDERS:
        raise KeyError(f"unknown cache {name!r}; caches: {', '.join(FOLDERS)}")
    if disabled():
        if name == "cuda-emu":
            return Path(tempfile.gettempdir()) / f"tdsl-cuda-emu-{os.getuid()}"
        return None
    return root() / name


def max_bytes() -> int:
    """The size cap of each cache folder, from ``TDSL_CACHE_MAX_SIZE`` (0: no cap)."""
    text = os.environ.get(ENV_MAX_SIZE, "").strip().upper().removesuffix("IB").removesuffix("B")
    if not text:
        return DEFAULT_MAX_BYTES
    unit = text[-1] if text[-1] in _UNITS else ""
    number = text[:-1] if unit else text
    try:
        value = float(number) * _UNITS[unit]
    except ValueError:
        from tdsl.errors import TDSLError
        raise TDSLError(f"{ENV_MAX_SIZE}={os.environ[ENV_MAX_SIZE]!r}: expected a size in "
                        f"bytes, optionally with K, M or G (e.g. 512M)") from None
    return max(int(value), 0)


@dataclass(frozen=True)
class Entry:
    """The files of one cached item: same name up to the first dot."""

    key: str
    paths: tuple[Path, ...]
    size: int
    last_used: float


def entries(path: "Path | None") -> list[Entry]:
    """The entries of a cache folder, least recently used first."""
    if path is None or not path.is_dir():
        return []
    groups: dict[str, list[tuple[Path, int, float]]] = {}
    with os.scandir(path) as it:
        for e in it:
            try:
                if not e.is_file(follow_symlinks=False):
                    continue
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue   # removed meanwhile by another process
            groups.setdefault(e.name.split(".", 1)[0], []).append(
                (Path(e.path), st.st_size, st.st_mtime))
    out = [Entry(k, tuple(p for p, _, _ in fs), sum(s for _, s, _ in fs),
                 max(t for _, _, t in fs)) for k, fs in groups.items()]
    out.sort(key=lambda en: (en.last_used, en.key))
    return out


def touch(*paths: "str | Path") -> None:
    """Mark files as just used (best effort), so LRU eviction keeps them."""
    for p in paths:
        try:
            os.utime(p)
        except OSError:
            pass


def _remove(en: Entry) -> int:
    freed = 0
    for p in en.paths:
        try:
            size = p.stat().st_size
            p.unlink()
            freed += size
        except OSError:
            pass
    return freed


def prune(path: "Path | None", limit: "int | None" = None,
          keep: Callable[[str], bool] = lambda key: False, now: "float | None" = None) -> int:
    """Delete least recently used entries of ``path`` until it holds at most ``limit``
    bytes (default ``max_bytes()``; 0: no cap).  Entries used in the last ``GRACE_S``
    seconds, and those whose key ``keep`` accepts, stay.  Returns the bytes freed."""
    limit = max_bytes() if limit is None else limit
    if path is None or limit <= 0:
        return 0
    found = entries(path)
    total = sum(en.size for en in found)
    now = time.time() if now is None else now
    freed = 0
    for en in found:
        if total - freed <= limit:
            break
        if now - en.last_used < GRACE_S or keep(en.key):
            continue
        freed += _remove(en)
    return freed


def usage(path: "Path | None") -> tuple[int, int]:
    """(files, bytes) in a cache folder."""
    found = entries(path)
    return sum(len(en.paths) for en in found), sum(en.size for en in found)


def clear(path: "Path | None") -> tuple[int, int]:
    """Delete every file of a cache folder; returns the (files, bytes) removed."""
    files, size = usage(path)
    if path is not None and path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    return files, size


def info() -> list[dict]:
    """One dict per cache: name, what it holds, folder, files, bytes, cap."""
    out = []
    for name, what in FOLDERS.items():
        path = folder(name)
        files, size = usage(path)
        out.append({"name": name, "description": what,
                    "path": str(path) if path is not None else None,
                    "enabled": path is not None, "files": files, "bytes": size,
                    "max_bytes": max_bytes()})
    return out
