"""What ptxas gave each kernel, read from a cubin without a GPU.

The driver reports registers per thread (``cuFuncGetAttribute``) only after loading
the module, which needs a GPU.  The same figures are in the cubin: an ELF file whose
``.nv.info`` section holds, per kernel symbol, attributes such as EIATTR_REGCOUNT
(registers per thread) and EIATTR_FRAME_SIZE (stack frame: local arrays and spills,
bytes per thread).  Each attribute is ``(format: u8, attribute: u8, ...)``; the
``EIFMT_SVAL`` format is followed by a u16 size and that many bytes, here
``(symbol index: u32, value: u32)``.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from .errors import NVRTCError

_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL, _EIFMT_SVAL = 1, 2, 3, 4
_EIATTR_FRAME_SIZE = 0x11
_EIATTR_REGCOUNT = 0x2F
_SHT_SYMTAB = 2


@dataclass(frozen=True)
class KernelResources:
    """Per-thread resources of one kernel as assembled."""

    name: str
    registers: int
    frame_bytes: int = 0      # local memory per thread: local arrays and register spills


def kernel_resources(cubin: bytes) -> dict[str, KernelResources]:
    """Registers and stack frame of every kernel in ``cubin``, by kernel name."""
    try:
        sections, symbols = _elf(cubin)
    except (struct.error, IndexError, ValueError) as e:
        raise NVRTCError(f"cannot read the cubin NVRTC produced (not a 64-bit ELF?): {e}") from None
    regs: dict[int, int] = {}
    frame: dict[int, int] = {}
    for name, data in sections:
        if name != ".nv.info":
            continue
        pos = 0
        while pos + 2 <= len(data):
            fmt, attr = data[pos], data[pos + 1]
            if fmt == _EIFMT_SVAL:
                (size,) = struct.unpack_from("<H", data, pos + 2)
                payload = data[pos + 4:pos + 4 + size]
                pos += 4 + size
                if size == 8 and attr in (_EIATTR_REGCOUNT, _EIATTR_FRAME_SIZE):
                    sym, value = struct.unpack("<II", payload)
                    (regs if attr == _EIATTR_REGCOUNT else frame)[sym] = value
            elif fmt in (_EIFMT_BVAL, _EIFMT_HVAL):
                pos += 4
            elif fmt == _EIFMT_NVAL:
                pos += 2
            else:
                raise NVRTCError(f"cannot read the cubin's .nv.info section: unknown attribute "
                                 f"format {fmt:#x} at byte {pos}")
    return {symbols[i]: KernelResources(symbols[i], r, frame.get(i, 0))
            for i, r in regs.items() if i < len(symbols)}


def _elf(blob: bytes) -> tuple[list[tuple[str, bytes]], list[str]]:
    """(name, contents) of each section, and the symbol names by index."""
    if blob[:4] != b"\x7fELF" or blob[4] != 2 or blob[5] != 1:
        raise ValueError("not a little-endian 64-bit ELF file")
    shoff, = struct.unpack_from("<Q", blob, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", blob, 0x3A)
    headers = []
    for i in range(shnum):
        name, typ, _flags, _addr, off, size, link, _info, _align, entsize = struct.unpack_from(
            "<IIQQQQIIQQ", blob, shoff + i * shentsize)
        headers.append((name, typ, off, size, link, entsize))

    def contents(i: int) -> bytes:
        _, _, off, size, _, _ = headers[i]
        return blob[off:off + size]

    def cstr(table: bytes, at: int) -> str:
        return table[at:table.index(b"\0", at)].decode(errors="replace")
    names = contents(shstrndx)
    sections = [(cstr(names, h[0]), contents(i)) for i, h in enumerate(headers)]
    symbols: list[str] = []
    for i, (_, typ, _, _, link, entsize) in enumerate(headers):
        if typ == _SHT_SYMTAB:
            table, strtab = contents(i), contents(link)
            for j in range(len(table) // (entsize or 24)):
                (st_name,) = struct.unpack_from("<I", table, j * (entsize or 24))
                symbols.append(cstr(strtab, st_name))
            break
    return sections, symbols


def check_assembled(kernels: list, source: str, target: Any) -> None:
    """Assemble ``source`` for the target's arch with NVRTC (a compile error is an NVRTCError
    here, at build) and check each kernel's registers x its most threads per block against
    the register file; records ``registers`` on each kernel."""
    from . import nvrtc
    from .limits import check_registers
    found = kernel_resources(nvrtc.compile_cuda(source, target.arch, "cubin"))
    for k in kernels:
        res = found.get(k.name)
        if res is None:
            raise NVRTCError(f"the cubin NVRTC produced for {target.arch} has no register count "
                             f"for kernel '{k.name}' (kernels found: {sorted(found)})")
        k.registers = res.registers
        check_registers(k.name, res.registers, k.max_threads, target.gpu)
    if any(r.frame_bytes for r in found.values()):   # a frame: local arrays, or spills
        from .static.spills import warn_spills
        warn_spills(ptxas_report(source, target.arch), target.arch)


@dataclass(frozen=True)
class PtxasReport:
    """What ptxas says of one kernel (``-v``): registers, stack frame and spills."""

    name: str
    registers: int
    frame_bytes: int
    spill_stores: int
    spill_loads: int


def ptxas_report(source: str, arch: str) -> dict[str, PtxasReport]:
    """What ptxas ``-v`` said of each kernel when ``source`` was assembled for ``arch`` (the
    spill counts are not in the cubin's attributes); the log of the build's own compilation
    where it assembled for ``arch``."""
    from . import nvrtc
    return parse_ptxas_log(nvrtc.compile_log(source, arch))


def parse_ptxas_log(text: str) -> dict[str, PtxasReport]:
    """The per-kernel figures of a ptxas ``-v`` log."""
    import re
    out: dict[str, PtxasReport] = {}
    name = None
    frame = stores = loads = 0
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            name = m.group(1)
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                      line)
        if m:
            frame, stores, loads = (int(x) for x in m.groups())
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and name is not None:
            out[name] = PtxasReport(name, int(m.group(1)), frame, stores, loads)
            name = None
    return out
