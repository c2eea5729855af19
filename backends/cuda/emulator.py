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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from tdsl import disk_cache
from tdsl.errors import BuildError
from tdsl.lru import LRU, env_entries
from tdsl.runtime.shared_lib import open_library
from tdsl.stmt import Buffer

from .errors import EmulationError, GlobalMemoryRaceError, SharedMemoryRaceError
from .host import LaunchConfig, execute

HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "emu.h")
#: The harness's parts, concatenated into the one header a translation unit includes.
HEADER_PARTS = (HEADER, os.path.join(os.path.dirname(HEADER), "emu_tc.h"))


def header_bytes() -> bytes:
    """The harness (emu.h, then emu_tc.h: the tensor-core GEMM primitives)."""
    out = []
    for part in HEADER_PARTS:
        with open(part, "rb") as f:
            out.append(f.read())
    return b"\n".join(out)
CXX_FLAGS = ("-std=c++20", "-O2", "-shared", "-fPIC", "-fwrapv", "-fno-strict-aliasing",
             "-fvisibility=hidden", "-w")
_MSG_LEN = 4096
_LOCK = threading.Lock()
#: Compiled harnesses, by source hash: the most recent ``TDSL_EMU_CACHE_ENTRIES`` (default
#: 64) stay loaded; an evicted one is closed once no launch holds it (each keeps ~5 memory
#: mappings: an unbounded cache filled a test session's address space).
_LIBS: "LRU[str, ctypes.CDLL]" = LRU(lambda: env_entries("TDSL_EMU_CACHE_ENTRIES", 64))
_SYNC_WORDS = re.compile(r"__syncthreads|__syncwarp|__shfl|tdsl_wmma|tdsl_tc_|tdsl_fa<|__trap")


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


def _global_params(source: str, kernels: Sequence[Any]) -> str:
    """``source`` with each kernel's global-buffer parameters declared ``emu::Global<T>``
    (a pointer that goes through the harness's shadow tracking) instead of ``T*``; the
    body is unchanged (it indexes, offsets and aligns them as pointers)."""
    for k in kernels:
        old = ", ".join(f"{p.c_decl} {p.name}" for p in k.params)
        new = ", ".join(
            f"emu::Global<{p.c_decl.replace('__restrict__', '').replace('*', '').strip()}> {p.name}"
            if p.buffer is not None else f"{p.c_decl} {p.name}" for p in k.params)
        head = f"{k.name}({old})"
        if head not in source:
            raise BuildError(f"CUDA emulation: the signature of kernel '{k.name}' is not in the "
                             f"given source")
        source = source.replace(head, f"{k.name}({new})", 1)
    return source


def translation_unit(source: str, kernels: Sequence[Any], header: str = HEADER) -> str:
    """The C++ that g++ compiles: harness, the kernel source (global-buffer parameters as
    tracked ``emu::Global`` pointers, the body unchanged), launchers."""
    parts = [f'#include "{header}"', '#line 1 "tdsl_kernels.cu"', _global_params(source, kernels),
             "", "// ---- launchers (tdsl emulator) ----"]
    for k in kernels:
        wrap, args = [], []
        for i, p in enumerate(k.params):
            if p.buffer is not None:
                elem = p.c_decl.replace('__restrict__', '').replace('*', '').strip()
                wrap.append(f"  auto g{i} = emu::global<{elem}>(args[{i}], nbytes[{i}], "
                            f'"{p.name}");')
                args.append(f"g{i}")
            else:
                args.append(f"*(const long long*)args[{i}]")
        parts.append(
            f'extern "C" __attribute__((visibility("default"))) int tdsl_emu_{k.name}('
            f"const long long* dims, void** args, const long long* nbytes, int flags, char* msg, "
            f"int msglen) {{\n" + "".join(w + "\n" for w in wrap) +
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
    Returns the header path to include (the copy alone when precompiling fails)."""
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
            return path     # the whole harness, parsed with the translation unit
        os.replace(tmp, gch)
    return path


def _compile(source: str, kernels: Sequence[Any], cxx: str, header: bytes, so: str) -> None:
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


def load(source: str, kernels: Sequence[Any]) -> ctypes.CDLL:
    """The compiled emulation library of ``source`` (from the on-disk cache when possible)."""
    header = header_bytes()
    cxx = _compiler()
    tu = translation_unit(source, kernels)
    key = hashlib.sha256(header + tu.encode() + " ".join((cxx,) + CXX_FLAGS).encode()).hexdigest()
    lib = _LIBS.get(key)
    if lib is not None:
        return lib
    so = os.path.join(cache_dir(), f"{key[:32]}.so")
    # another process's prune may delete the file between its compile (or our existence
    # check) and dlopen: compile again once then; prune only after our own dlopen
    for attempt in (0, 1):
        built = not os.path.exists(so)
        if built:
            _compile(source, kernels, cxx, header, so)
        else:
            disk_cache.touch(so)
        try:
            lib = open_library(so)
        except OSError:
            if attempt or os.path.exists(so):
                raise
            continue
        if built:
            disk_cache.prune(Path(cache_dir()), keep=_keep)
        break
    for k in kernels:
        fn = getattr(lib, f"tdsl_emu_{k.name}")
        fn.argtypes = [ctypes.POINTER(ctypes.c_longlong), ctypes.POINTER(ctypes.c_void_p),
                       ctypes.POINTER(ctypes.c_longlong), ctypes.c_int, ctypes.c_char_p,
                       ctypes.c_int]
        fn.restype = ctypes.c_int
    _LIBS.put(key, lib)
    return lib


def kernel_text(source: str, name: str) -> str:
    """The text of kernel ``name`` in ``source`` (to the next kernel or the end)."""
    m = re.search(rf"\b{re.escape(name)}\s*\(", source)
    if m is None:
        raise BuildError(f"CUDA emulation: kernel '{name}' is not defined in the given source")
    nxt = source.find('extern "C"', m.end())
    return source[m.start():] if nxt < 0 else source[m.start():nxt]


class _Backend:
    """Host memory and launches for ``host.execute`` under emulation.

    ``regions`` maps the start address of every buffer a kernel can reach (the caller's
    arrays and the plan's allocations) to its bytes: a launch gets each buffer's size (for
    the bounds check), and with ``check_races`` a launch of more than one block runs twice,
    blocks in order and in reverse order from the same memory, and the two results must
    agree (blocks of a launch run in no fixed order on a GPU)."""

    def __init__(self, lib: ctypes.CDLL, source: str, check_races: bool,
                 regions: "dict[int, np.ndarray]"):
        self.lib = lib
        self.source = source
        self.check = check_races
        self.memory: dict[int, np.ndarray] = {}
        self.regions = regions

    def alloc(self, buffer: Buffer, nbytes: int) -> int:
        raw = np.full(nbytes + 256, 0xFF, dtype=np.uint8)  # garbage: NaN floats, -1 ints
        ptr = raw.ctypes.data
        start = (-ptr) % 256
        ptr += start
        self.memory[ptr] = raw
        self.regions[ptr] = raw[start:start + nbytes]
        return ptr

    def free(self, ptr: int) -> None:
        self.memory.pop(ptr, None)
        self.regions.pop(ptr, None)

    def launch(self, kernel: Any, cfg: LaunchConfig) -> None:
        holders: list[Any] = []
        n = max(1, len(kernel.params))
        slots = (ctypes.c_void_p * n)()
        nbytes = (ctypes.c_longlong * n)()
        for i, (p, value) in enumerate(zip(kernel.params, cfg.args)):
            if p.buffer is not None:
                slots[i] = value
                region = self.regions.get(value)
                nbytes[i] = -1 if region is None else region.nbytes
            else:
                h = ctypes.c_longlong(value)
                holders.append(h)
                slots[i] = ctypes.addressof(h)
        stack = 128 * 1024 + 2 * kernel.local_bytes   # fiber stacks hold local arrays
        dims = (ctypes.c_longlong * 7)(*cfg.grid, *cfg.block, stack)
        fibers = bool(_SYNC_WORDS.search(kernel_text(self.source, kernel.name))
                      or _SYNC_WORDS.search(getattr(kernel, "device_code", "")))
        flags = int(fibers) | (2 if self.check else 0)
        blocks = cfg.grid[0] * cfg.grid[1] * cfg.grid[2]
        before = {p: r.copy() for p, r in self.regions.items()} \
            if self.check and blocks > 1 else None
        self._run(kernel, dims, slots, nbytes, flags)
        if before is None:
            return
        forward = {p: r.copy() for p, r in self.regions.items()}
        for p, r in self.regions.items():
            r[...] = before[p]
        self._run(kernel, dims, slots, nbytes, flags | 4)
        for p, r in self.regions.items():
            if not np.array_equal(r, forward[p]):
                bad = int(np.flatnonzero(r != forward[p])[0])
                name = next((q.name for q, v in zip(kernel.params, cfg.args)
                             if q.buffer is not None and v == p), "a buffer")
                raise EmulationError(
                    f"kernel '{kernel.name}': the result depends on the order the blocks run "
                    f"in (blocks in order and in reverse order leave '{name}' different at "
                    f"byte {bad}): blocks of one launch run in no fixed order on a GPU, so one "
                    f"block reads or overwrites what another writes (a cross-block race)")

    def _run(self, kernel: Any, dims: Any, slots: Any, nbytes: Any, flags: int) -> None:
        msg = ctypes.create_string_buffer(_MSG_LEN)
        rc = getattr(self.lib, f"tdsl_emu_{kernel.name}")(dims, slots, nbytes, flags, msg,
                                                          _MSG_LEN)
        if rc != 0:
            raise _error(kernel, self.source, msg.value.decode(errors="replace"))


def run(plan: Any, kernels: Sequence[Any], source: str, params: Sequence[Buffer],
        arrays: Sequence[np.ndarray], sizes: dict, check_races: bool = True) -> None:
    """Run ``plan`` on ``arrays`` (checked NumPy arrays, written in place)."""
    lib = load(source, kernels)
    with _LOCK:
        _execute(lib, plan, source, params, arrays, sizes, check_races)


def _execute(lib: ctypes.CDLL, plan: Any, source: str, params: Sequence[Buffer],
             arrays: Sequence[np.ndarray], sizes: dict, check_races: bool) -> None:
    """The host plan on ``arrays`` with ``lib``'s kernels (the caller holds ``_LOCK``)."""
    pointers = {id(b): a.ctypes.data for b, a in zip(params, arrays)}
    regions = {a.ctypes.data: a.reshape(-1).view(np.uint8) for a in arrays
               if a.flags.c_contiguous and a.size}
    execute(plan, dict(sizes), pointers, _Backend(lib, source, check_races, regions))


# ---- reports ------------------------------------------------------------------------------------
#: The shared accesses whose bank use the harness counts (emu_tc.h's ``bank_use`` kinds).
BANK_KINDS = ("ldmatrix", "ldmatrix.trans", "cp.async.16", "st.shared")


@dataclass(frozen=True)
class BankUse:
    """Bank use of one kind of shared access over an emulated run: ``phases`` judged,
    ``wavefronts`` they took (one each when conflict free) and the ``worst`` phase's."""
    phases: int
    wavefronts: int
    worst: int

    @property
    def ways(self) -> float:
        """Mean wavefronts per phase (1.0: conflict free)."""
        return self.wavefronts / self.phases if self.phases else 0.0


def bank_use(plan: Any, kernels: Sequence[Any], source: str, params: Sequence[Buffer],
             arrays: Sequence[np.ndarray], sizes: dict) -> "dict[str, BankUse]":
    """Run ``plan`` as ``run`` does (no race tracking) and return, per kind of access the
    tensor-core primitives make (``BANK_KINDS``; kinds the kernels never made are left out),
    the bank use the harness counted from the addresses the kernels computed."""
    lib = load(source, kernels)
    counts = (ctypes.c_ulonglong * (3 * len(BANK_KINDS)))()
    with _LOCK:
        lib.tdsl_emu_bank_use(counts, 1)                   # reset, count from here
        try:
            _execute(lib, plan, source, params, arrays, sizes, False)
        finally:
            lib.tdsl_emu_bank_use(counts, 0)               # read, and stop counting
    out = {}
    for i, kind in enumerate(BANK_KINDS):
        use = BankUse(*(int(counts[3 * i + j]) for j in range(3)))
        if use.phases:
            out[kind] = use
    return out


def _thread(actor: int, bdim: tuple) -> tuple:
    if actor >= 1024:
        w = actor - 1024
        return ("warp", w)
    bx, by, _ = bdim
    return (actor % bx, (actor // bx) % by, actor // (bx * by))


def _fmt_thread(t: tuple) -> str:
    if t and t[0] == "warp":
        return f"warp {t[1]} (a warp-collective operation: WMMA, ldmatrix)"
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
    if kind == "grace":
        return _global_race(kernel, info, bdim, more)
    who = _fmt_thread(_thread(int(info.get("thread", "0")), bdim))
    if kind == "goob":
        return EmulationError(
            f"{where}: {who} accessed global buffer '{info.get('gname')}' at byte "
            f"{info.get('byte')}, outside its {info.get('nbytes')} bytes (out of bounds){more}")
    if kind == "async":
        buf = _shared_name(kernel, source, int(info["line"]))
        return EmulationError(
            f"{where}: {who} accessed shared array {buf} at {info.get('offset')} while a "
            f"cp.async copy into it was in flight (its thread had not waited for it with "
            f"cp.async.wait before this access){more}")
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


def _block(lin: int, grid: tuple) -> tuple:
    gx, gy = grid[0], grid[1]
    return (lin % gx, lin // gx % gy, lin // (gx * gy))


def _global_race(kernel: Any, info: dict, bdim: tuple, more: str) -> GlobalMemoryRaceError:
    grid = tuple(int(x) for x in info.get("grid", "1,1,1").split(","))
    b1 = _block(int(info["first_block"]), grid)
    b2 = _block(int(info["second_block"]), grid)
    t1 = _thread(int(info["first"]), bdim)
    t2 = _thread(int(info["second"]), bdim)
    race = info["race"]
    verb = {"read-after-write": ("written", "read"), "write-after-read": ("read", "written"),
            "write-after-write": ("written", "written again")}[race]
    buf, off = info.get("gname", "?"), int(info.get("byte", "0"))
    ir = next((p.buffer.name for p in kernel.params if p.buffer is not None and p.name == buf),
              buf)
    name = f"'{buf}'" if ir == buf else f"'{buf}' (buffer '{ir}')"
    why = ("another block of the same launch (blocks run in no fixed order and cannot wait "
           "for each other)" if b1 != b2 else "with no __syncthreads() between them")
    text = (f"global-memory race in kernel '{kernel.name}': {name} at byte {off} was "
            f"{verb[0]} by block {b1} {_fmt_thread(t1)} and then {verb[1]} by block {b2} "
            f"{_fmt_thread(t2)}, {why} ({race}){more}")
    return GlobalMemoryRaceError(text, buffer=buf, offset=off, kind=race, first=(b1, t1),
                                 second=(b2, t2), kernel=kernel.name)
