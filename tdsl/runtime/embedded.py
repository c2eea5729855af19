"""Reading the kernel signatures a shared library or object carries inside itself.

The LLVM backend stores each kernel's signature as a NUL-terminated JSON string in
the ELF section ``tdsl_meta``; a linker concatenates these sections, so one library
may describe several kernels.  This reads the section straight from the file (no
``dlopen``, no helper symbol), so a library the user linked from saved objects is
as loadable as one ``export_library`` wrote.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

SECTION = b"tdsl_meta"


def _section(data: bytes, name: bytes) -> "bytes | None":
    """The contents of section ``name`` of the ELF image ``data`` (None if absent)."""
    if data[:4] != b"\x7fELF" or len(data) < 64:
        return None
    is64 = data[4] == 2
    end = "<" if data[5] == 1 else ">"
    if is64:
        shoff, = struct.unpack_from(end + "Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", data, 0x3A)
        fmt, off_at = end + "IIQQQQ", (24, 32)
    else:
        shoff, = struct.unpack_from(end + "I", data, 0x20)
        shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", data, 0x2E)
        fmt, off_at = end + "IIIIII", (16, 20)
    if shoff == 0 or shoff + shnum * shentsize > len(data) or shstrndx >= shnum:
        return None

    def header(i: int) -> tuple[int, int, int]:
        base = shoff + i * shentsize
        sh_name, = struct.unpack_from(end + "I", data, base)
        size_fmt = end + ("Q" if is64 else "I")
        offset, = struct.unpack_from(size_fmt, data, base + off_at[0])
        size, = struct.unpack_from(size_fmt, data, base + off_at[1])
        return sh_name, offset, size

    _, str_off, str_size = header(shstrndx)
    names = data[str_off:str_off + str_size]
    for i in range(shnum):
        sh_name, offset, size = header(i)
        if names[sh_name:names.find(b"\0", sh_name)] == name:
            return data[offset:offset + size]
    return None


def elf_section(path: "str | Path", name: bytes) -> "bytes | None":
    """Section ``name`` of the ELF file ``path`` (None if absent or not ELF)."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None
    return _section(data, name)


def read_signatures(path: "str | Path") -> list[dict[str, Any]]:
    """Every kernel signature embedded in the ELF file ``path`` (empty if none)."""
    blob = elf_section(path, SECTION)
    if not blob:
        return []
    out = []
    for chunk in blob.split(b"\0"):
        chunk = chunk.strip(b"\0")
        if chunk:
            try:
                out.append(json.loads(chunk.decode()))
            except (UnicodeDecodeError, json.JSONDecodeError):
                continue
    return out
