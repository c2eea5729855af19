"""Running a CUDA module's kernels on the CPU: g++ and the harness in ``emu.h``.

The CUDA C source is compiled unchanged: a translation unit includes ``emu.h``,
then the source (after ``#line 1`` so reports point into it), then one small
``extern "C"`` launcher per kernel.  Shared objects are cached by the hash of everything
that goes into them in the ``cuda-emu`` folder of ``tdsl.disk_cache`` (which honours
``TDSL_CACHE_DIR``/``XDG_CACHE_HOME`` and caps its size), so a source is compiled once per
machine (about a second with g++ -O2).  The host plan runs in Python
with NumPy memory; problems the harness finds (races, divergent barriers,
out-of-bounds shared indices, uninitialized shared reads, traps) become
``EmulationError``/``SharedMemoryRaceError``.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from tdsl import disk_cache
from tdsl.errors import BuildError
from tdsl.stmt import Buffer

from .errors import EmulationError, SharedMemoryRaceError
from .host import LaunchConfig, execute

HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "emu.h")
CXX_FLAGS = ("-std=c++20", "-O2", "-shared", "-fPIC", "-fwrapv", "-fno-strict-aliasing",
             "-fvisibility=hidden", "-w")
_MSG_LEN = 4096
_LOCK = threading.Lock()
_LIBS: dict[str, ctypes.CDLL] = {}
_SYNC_WORDS = re.compile(r"__syncthreads|__syncwarp|__shfl|tdsl_wmma|__trap")


def cache_dir() -> str:
    """The emulator's cache folder (created on demand)."""
    path = str(disk_cache.folder("cuda-emu"))
    os.makedirs(path, exist_ok=True)
    return path


def _keep(key: str) -> bool:
    """The harness header and its precompiled form are shared by every compile: never
    evicted (they are one entry, a few MB)."""
    return key.startswith("emu-")


def _compiler() -> str:
    cxx = os.environ.get("CXX") or shutil.which("g++")
    if not cxx:
        raise BuildError("CUDA emulation needs a C++20 compiler (g++) on PATH, and none was found")
    return cxx


def translation_unit(source: str, kernels: Sequence[Any], header: str = HEADER) -> str:
    """The C++ that g++ compiles: harness, unchanged kernel source, launchers."""
    parts = [f'#include "{header}"', '#line 1 "tdsl_kernels.cu"', source, "",
             "// ---- launchers (tdsl emulator) ----"]
    for k in kernels:
        args = []
        for i, p in enumerate(k.params):
            if p.buffer is not None:
                args.append(f"({p.c_decl.replace('__restrict__', '').strip()})args[{i}]")
            else:
                args.append(f"*(const long long*)args[{i}]")
        parts.append(
            f'extern "C" __attribute__((visibility("default"))) int tdsl_emu_{k.name}('
            f"const long long* dims, void** args, int flags, char* msg, int msglen) {{\n"
            f"  return emu::launch(dims, flags, msg, msglen, [&]() {{ {k.name}({', '.join(args)}); }});\n"
            f"}}")
    return "\n".join(parts) + "\n"


def _atomic_write(path: str, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path))
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def precompiled_header(cxx: str, header: bytes) -> str:
    """A copy of emu.h in the cache directory with its precompiled form beside it (g++ then
    skips parsing the harness and the C++ library headers: about half of a compile).
    Returns the header path to include (the original when precompiling fails)."""
    tag = hashlib.sha256(header + " ".join((cxx,) + CXX_FLAGS).encode()).hexdigest()[:16]
    path = os.path.join(cache_dir(), f"emu-{tag}.h")
    gch = path + ".gch"
    if not os.path.exists(gch):
        if not os.path.exists(path):
            _atomic_write(path, header)
        fd, tmp = tempfile.mkstemp(suffix=".gch", dir=cache_dir())
        os.close(fd)
        flags = [f for f in CXX_FLAGS if f != "-shared"]
        proc = subprocess.run([cxx, *flags, "-x", "c++-header", path, "-o", tmp],
                              capture_output=True)
        if proc.returncode != 0:
            os.unlink(tmp)
            return HEADER
        os.replace(tmp, gch)
    return path


def load(source: str, kernels: Sequence[Any]) -> ctypes.CDLL:
    """The compiled emulation library of ``source`` (from the on-disk cache when possible)."""
    with open(HEADER, "rb") as f:
        header = f.read()
    cxx = _compiler()
    tu = translation_unit(source, kernels)
    key = hashlib.sha256(header + tu.encode() + " ".join((cxx,) + CXX_FLAGS).encode()).hexdigest()
    lib = _LIBS.get(key)
    if lib is not None:
        return lib
    so = os.path.join(cache_dir(), f"{key[:32]}.so")
    if not os.path.exists(so):
        fd, src_path = tempfile.mkstemp(suffix=".cc", dir=cache_dir())
        with os.fdopen(fd, "w") as f:
            f.write(translation_unit(source, kernels, precompiled_header(cxx, header)))
        tmp_so = src_path[:-3] + ".so"
        try:
            proc = subprocess.run([cxx, *CXX_FLAGS, "-o", tmp_so, src_path],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                log = "\n".join(proc.stderr.splitlines()[:60])
                raise BuildError(f"CUDA emulation: g++ could not compile the kernel source:\n{log}")
            os.replace(tmp_so, so)
        finally:
            for p in (src_path, tmp_so):
                if os.path.exists(p):
                    os.unlink(p)
        disk_cache.prune(Path(cache_dir()), keep=_keep)
    else:
        disk_cache.touch(so)
    lib = ctypes.CDLL(so)
    for k in kernels:
        fn = getattr(lib, f"tdsl_emu_{k.name}")
        fn.argtypes = [ctypes.POINTER(ctypes.c_longlong), ctypes.POINTER(ctypes.c_void_p),
                       ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        fn.restype = ctypes.c_int
    _LIBS[key] = lib
    return lib


def kernel_text(source: str, name: str) -> str:
    """The text of kernel ``name`` in ``source`` (to the next kernel or the end)."""
    m = re.search(rf"\b{re.escape(name)}\s*\(", source)
    if m is None:
        raise BuildError(f"CUDA emulation: kernel '{name}' is not defined in the given source")
    nxt = source.find('extern "C"', m.end())
    return source[m.start():] if nxt < 0 else source[m.start():nxt]


class _Backend:
    """Host memory and launches for ``host.execute`` under emulation."""

    def __init__(self, lib: ctypes.CDLL, source: str, check_races: bool):
        self.lib = lib
        self.source = source
        self.check = check_races
        self.memory: dict[int, np.ndarray] = {}

    def alloc(self, buffer: Buffer, nbytes: int) -> int:
        raw = np.full(nbytes + 256, 0xFF, dtype=np.uint8)  # garbage: NaN floats, -1 ints
        ptr = raw.ctypes.data
        ptr += (-ptr) % 256
        self.memory[ptr] = raw
        return ptr

    def free(self, ptr: int) -> None:
        self.memory.pop(ptr, None)

    def launch(self, kernel: Any, cfg: LaunchConfig) -> None:
        holders: list[Any] = []
        slots = (ctypes.c_void_p * max(1, len(kernel.params)))()
        for i, (p, value) in enumerate(zip(kernel.params, cfg.args)):
            if p.buffer is not None:
                slots[i] = value
            else:
                h = ctypes.c_longlong(value)
                holders.append(h)
                slots[i] = ctypes.addressof(h)
        stack = 128 * 1024 + 2 * kernel.local_bytes   # fiber stacks hold local arrays
        dims = (ctypes.c_longlong * 7)(*cfg.grid, *cfg.block, stack)
        fibers = bool(_SYNC_WORDS.search(kernel_text(self.source, kernel.name)))
        flags = int(fibers) | (2 if self.check else 0)
        msg = ctypes.create_string_buffer(_MSG_LEN)
        rc = getattr(self.lib, f"tdsl_emu_{kernel.name}")(dims, slots, flags, msg, _MSG_LEN)
        if rc != 0:
            raise _error(kernel, self.source, msg.value.decode(errors="replace"))


def run(plan: Any, kernels: Sequence[Any], source: str, params: Sequence[Buffer],
        arrays: Sequence[np.ndarray], sizes: dict, check_races: bool = True) -> None:
    """Run ``plan`` on ``arrays`` (checked NumPy arrays, written in place)."""
    lib = load(source, kernels)
    pointers = {id(b): a.ctypes.data for b, a in zip(params, arrays)}
    with _LOCK:
        execute(plan, dict(sizes), pointers, _Backend(lib, source, check_races))


# ---- reports ------------------------------------------------------------------------------------
def _thread(actor: int, bdim: tuple) -> tuple:
    if actor >= 1024:
        w = actor - 1024
        return ("warp", w)
    bx, by, _ = bdim
    return (actor % bx, (actor // bx) % by, actor // (bx * by))


def _fmt_thread(t: tuple) -> str:
    if t and t[0] == "warp":
        return f"warp {t[1]} (a warp-collective WMMA operation)"
    return f"thread ({t[0]}, {t[1]}, {t[2]})"


def _shared_name(kernel: Any, source: str, line: int) -> str:
    lines = source.splitlines()
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    m = re.search(r"tdsl_shared<[^;]*>\s*(\w+)\s*;", text)
    cname = m.group(1) if m else f"<shared array at line {line}>"
    ir = getattr(kernel, "c_names", {}).get(cname)
    return f"'{cname}'" + (f" (buffer '{ir}')" if ir and ir != cname else "")


def _error(kernel: Any, source: str, msg: str) -> EmulationError:
    info = dict(line.split("=", 1) for line in msg.splitlines() if "=" in line)
    kind = info.get("kind", "internal")
    block = tuple(int(x) for x in info.get("block", "0,0,0").split(","))
    bdim = tuple(int(x) for x in info.get("bdim", "1,1,1").split(","))
    count = int(info.get("count", "1"))
    more = f" ({count} problems in this launch; the first is shown)" if count > 1 else ""
    where = f"kernel '{kernel.name}', block {block}"
    if kind == "race":
        first = _thread(int(info["first"]), bdim)
        second = _thread(int(info["second"]), bdim)
        race = info["race"]
        buf = _shared_name(kernel, source, int(info["line"]))
        offset = int(info["offset"])
        verb = {"read-after-write": ("written", "read"), "write-after-read": ("read", "written"),
                "write-after-write": ("written", "written again")}[race]
        text = (f"shared-memory race in {where}: {buf}[{offset}] was {verb[0]} by "
                f"{_fmt_thread(first)} and then {verb[1]} by {_fmt_thread(second)} with no "
                f"__syncthreads() between them ({race}){more}")
        return SharedMemoryRaceError(text, buffer=buf, offset=offset, kind=race, first=first,
                                     second=second, block=block, kernel=kernel.name)
    who = _fmt_thread(_thread(int(info.get("thread", "0")), bdim))
    if kind in ("oob", "uninit"):
        buf = _shared_name(kernel, source, int(info["line"]))
        offset = int(info["offset"])
        if kind == "oob":
            text = (f"{where}: {who} indexed shared array {buf} at {offset}, outside its "
                    f"{info.get('size')} elements{more}")
        else:
            text = (f"{where}: {who} read {buf}[{offset}], which no thread of the block has "
                    f"written (uninitialized shared memory){more}")
        return EmulationError(text)
    return EmulationError(f"{where}: {info.get('text', msg)}{more}")
