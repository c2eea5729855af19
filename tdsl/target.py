"""Compilation targets as data: which backend, which CPU or GPU arch, its limits."""
from __future__ import annotations

import enum
import functools
import os
import shlex
from dataclasses import dataclass, field, fields
from typing import Any

from .errors import BuildError


@dataclass(frozen=True)
class GPUArch:
    """What one NVIDIA compute capability allows a kernel (the CUDA C programming guide's
    table of technical specifications per compute capability)."""

    sm: int
    max_threads_per_block: int = 1024
    max_block_dim: tuple[int, int, int] = (1024, 1024, 64)
    max_grid_dim: tuple[int, int, int] = (2 ** 31 - 1, 65535, 65535)
    registers_per_block: int = 64 * 1024
    max_registers_per_thread: int = 255
    max_local_bytes_per_thread: int = 512 * 1024
    static_shared_bytes: int = 48 * 1024      # per block, without the opt-in attribute
    max_shared_bytes_optin: int = 48 * 1024   # per block, with it (dynamic shared memory)


#: Opt-in shared memory per block (bytes) by compute capability; everything else is common.
_SHARED_OPTIN = {50: 48 * 1024, 52: 48 * 1024, 53: 48 * 1024, 60: 48 * 1024, 61: 48 * 1024,
                 62: 48 * 1024, 70: 96 * 1024, 72: 96 * 1024, 75: 64 * 1024, 80: 163 * 1024,
                 86: 99 * 1024, 87: 163 * 1024, 89: 99 * 1024, 90: 227 * 1024,
                 100: 227 * 1024, 101: 227 * 1024, 103: 227 * 1024, 120: 99 * 1024,
                 121: 99 * 1024}
#: Compute capabilities with half the usual register file per block.
_SMALL_REGISTER_FILE = {53, 62}


def gpu_arch(arch: str) -> GPUArch:
    """The limits of ``arch`` (``"sm_90"``, ``"sm_90a"``, ``"compute_80"``...). An unknown
    newer arch gets the limits of the closest older known one."""
    import re
    m = re.fullmatch(r"(?:sm|compute)_(\d+)[a-z]?", arch)
    if not m:
        raise BuildError(f"unknown GPU architecture {arch!r}; use e.g. sm_80 or sm_90")
    sm = int(m.group(1))
    known = [k for k in _SHARED_OPTIN if k <= sm]
    if not known:
        raise BuildError(f"GPU architecture {arch!r} is older than sm_50, which tdsl does not "
                         f"support")
    return GPUArch(sm, max_shared_bytes_optin=_SHARED_OPTIN[max(known)],
                   registers_per_block=(32 if sm in _SMALL_REGISTER_FILE else 64) * 1024)


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

    def __post_init__(self) -> None:
        # ``Target("llvm -mcpu=...")`` as in TVM: parse the string; explicit fields win.
        if isinstance(self.kind, str):
            parsed = as_target(self.kind)
            for f in fields(self):
                mine = getattr(self, f.name)
                if f.name == "kind" or mine == f.default:
                    object.__setattr__(self, f.name, getattr(parsed, f.name))
        elif not isinstance(self.kind, TargetKind):
            raise BuildError(f"Target: kind must be a target string or TargetKind, "
                             f"got {self.kind!r}")

    @property
    def is_host(self) -> bool:
        return self.kind is TargetKind.LLVM and not self.mcpu and not self.mtriple and not self.mattr

    @property
    def gpu(self) -> GPUArch:
        """The limits of the CUDA target's ``arch``."""
        return gpu_arch(self.arch)

    @property
    def max_threads_per_block(self) -> int:
        return self.gpu.max_threads_per_block

    @property
    def max_shared_memory_per_block(self) -> int:
        """Bytes of static shared memory a block may use (48 KiB without opt-in)."""
        return self.gpu.static_shared_bytes

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


#: L1 data cache assumed when the host does not say (most x86 and Arm cores since 2010).
DEFAULT_L1D_BYTES = 32 * 1024


@dataclass(frozen=True)
class CPUFacts:
    """What the schedule search needs to know about a CPU target: the width of its vector
    registers, how many cores run a parallel loop, and the size of one core's L1 data cache
    (the sketch rules keep a tile's accumulator well inside it)."""

    vector_bits: int
    cores: int
    l1d_bytes: int = DEFAULT_L1D_BYTES

    def lanes(self, dtype_bits: int = 32) -> int:
        """Elements of ``dtype_bits`` bits in one vector register (at least 1)."""
        return max(1, self.vector_bits // max(1, dtype_bits))


def _vector_bits(arch: str, features: set[str]) -> int:
    if arch in ("x86_64", "amd64", "i386", "i686"):
        if "avx512f" in features:
            return 512
        if "avx" in features or "avx2" in features:
            return 256
        return 128
    if arch in ("aarch64", "arm64", "arm"):
        return 128            # NEON (SVE lengths are not known at compile time)
    return 128


#: Where Linux describes the first CPU's caches (``index<i>/{level,type,size}``).
CPU_CACHE_DIR = "/sys/devices/system/cpu/cpu0/cache"


def _parse_cache_size(text: str) -> int:
    """Bytes of a sysfs cache ``size`` ("32K", "1024K", "2M", "49152"); 0 when unreadable."""
    t = text.strip().upper()
    scale = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(t[-1:], 1)
    digits = t[:-1] if t[-1:] in ("K", "M", "G") else t
    return int(digits) * scale if digits.isdigit() else 0


@functools.lru_cache(maxsize=None)
def host_l1d_bytes(cache_dir: str = CPU_CACHE_DIR) -> int:
    """The host's per-core L1 data cache in bytes, read from sysfs (the level-1 cache of
    type Data or Unified); ``DEFAULT_L1D_BYTES`` where sysfs does not say (not Linux, a
    container without it)."""
    try:
        entries = sorted(os.listdir(cache_dir))
    except OSError:
        return DEFAULT_L1D_BYTES
    for name in entries:
        if not name.startswith("index"):
            continue
        try:
            with open(os.path.join(cache_dir, name, "level")) as f:
                level = f.read().strip()
            with open(os.path.join(cache_dir, name, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(cache_dir, name, "size")) as f:
                size = _parse_cache_size(f.read())
        except OSError:
            continue
        if level == "1" and kind in ("Data", "Unified") and size > 0:
            return size
    return DEFAULT_L1D_BYTES


def cpu_facts(target: Any = "llvm") -> CPUFacts:
    """Vector width and core count of an LLVM target: the host CPU's features (AVX-512:
    512 bits, AVX/AVX2: 256, else 128) or those ``-mcpu``/``-mattr`` name; cores from
    ``-num-threads`` when set, else the runtime's thread count (``TDSL_NUM_THREADS`` or
    the CPUs this process may run on); the L1 data cache is the host's (``host_l1d_bytes``:
    candidates are timed here)."""
    tgt = as_target(target)
    if tgt.kind is not TargetKind.LLVM:
        raise BuildError(f"cpu_facts: '{tgt}' is not a CPU target")
    from tdsl.backends.llvm.machine import KNOWN_X86_CPUS, machine_spec
    from tdsl.runtime.threads import default_num_threads
    spec = machine_spec(tgt)
    feats = {f[1:] for f in spec.features.split(",") if f.startswith("+")}
    feats |= KNOWN_X86_CPUS.get(spec.cpu, set())
    feats -= {f[1:] for f in spec.features.split(",") if f.startswith("-")}
    cores = tgt.num_threads or default_num_threads()
    return CPUFacts(_vector_bits(spec.arch, feats), max(1, cores), host_l1d_bytes())
