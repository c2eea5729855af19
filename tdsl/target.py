"""Compilation targets as data: which backend, which CPU or GPU arch, its limits."""
from __future__ import annotations

import enum
import shlex
from dataclasses import dataclass, field
from typing import Any

from .errors import BuildError


class TargetKind(enum.Enum):
    LLVM = "llvm"
    CUDA = "cuda"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Target:
    """A parsed target string such as ``"llvm -mcpu=skylake-avx512 -mattr=+avx2"``
    or ``"cuda -arch=sm_90"``.

    ``mcpu``/``mattr``/``mtriple`` select the CPU for LLVM (the host when empty);
    ``arch`` the GPU architecture for CUDA; ``num_threads`` the CPU thread count
    (0: the runtime default).
    """

    kind: TargetKind
    mcpu: str = ""
    mattr: tuple[str, ...] = ()
    mtriple: str = ""
    arch: str = "sm_80"
    num_threads: int = 0
    options: tuple[tuple[str, str], ...] = field(default=())

    @property
    def is_host(self) -> bool:
        return self.kind is TargetKind.LLVM and not self.mcpu and not self.mtriple and not self.mattr

    @property
    def max_threads_per_block(self) -> int:
        return 1024

    @property
    def max_shared_memory_per_block(self) -> int:
        """Bytes of static shared memory a block may use (48 KiB without opt-in)."""
        return 48 * 1024

    def __str__(self) -> str:
        parts = [self.kind.value]
        if self.kind is TargetKind.LLVM:
            if self.mtriple:
                parts.append(f"-mtriple={self.mtriple}")
            if self.mcpu:
                parts.append(f"-mcpu={self.mcpu}")
            if self.mattr:
                parts.append("-mattr=" + ",".join(self.mattr))
            if self.num_threads:
                parts.append(f"-num-threads={self.num_threads}")
        else:
            parts.append(f"-arch={self.arch}")
        parts.extend(f"-{k}={v}" for k, v in self.options)
        return " ".join(parts)


def as_target(target: Any) -> Target:
    """Parse a target string (or pass a Target through)."""
    if isinstance(target, Target):
        return target
    if not isinstance(target, str) or not target.strip():
        raise BuildError(f"target must be a string like 'llvm' or 'cuda', got {target!r}")
    words = shlex.split(target)
    try:
        kind = TargetKind(words[0])
    except ValueError:
        raise BuildError(f"unknown target kind {words[0]!r} in {target!r}; "
                         f"use 'llvm' (CPU) or 'cuda' (NVIDIA GPU)") from None
    kw: dict[str, Any] = {}
    extra: list[tuple[str, str]] = []
    for w in words[1:]:
        if not w.startswith("-") or "=" not in w:
            raise BuildError(f"target option {w!r} in {target!r} must look like -key=value")
        key, value = w.lstrip("-").split("=", 1)
        if key == "mcpu":
            kw["mcpu"] = value
        elif key == "mattr":
            kw["mattr"] = tuple(a for a in value.split(",") if a)
        elif key == "mtriple":
            kw["mtriple"] = value
        elif key == "arch":
            if not value.startswith("sm_"):
                raise BuildError(f"cuda target: -arch must look like sm_80, got {value!r}")
            kw["arch"] = value
        elif key == "num-threads":
            kw["num_threads"] = int(value)
        else:
            extra.append((key, value))
    return Target(kind, options=tuple(extra), **kw)
