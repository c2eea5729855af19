"""Blocks per SM from a kernel's registers, shared memory and block size.

The figures per compute capability are the CUDA programming guide's (technical
specifications) and the occupancy calculator's allocation rules: registers are given
per warp in units of 256 from four 16K-register partitions, shared memory in units of
128 bytes plus 1 KB the system reserves per block (sm_80+), warps and blocks per SM
capped.  The limiter is the resource that allows the fewest blocks.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import NVRTCError


@dataclass(frozen=True)
class SMLimits:
    max_warps: int
    max_blocks: int
    shared_bytes: int          # per SM, the largest carve-out
    reserved_shared: int       # per block
    registers: int = 64 * 1024
    register_unit: int = 256   # per warp
    shared_unit: int = 128


#: By compute capability (older unknown ones take the closest older entry).
SM = {70: SMLimits(64, 32, 96 * 1024, 0), 75: SMLimits(32, 16, 64 * 1024, 0),
      80: SMLimits(64, 32, 164 * 1024, 1024), 86: SMLimits(48, 16, 100 * 1024, 1024),
      89: SMLimits(48, 24, 100 * 1024, 1024), 90: SMLimits(64, 32, 228 * 1024, 1024),
      100: SMLimits(64, 32, 228 * 1024, 1024), 120: SMLimits(48, 32, 100 * 1024, 1024)}


@dataclass(frozen=True)
class Occupancy:
    arch: str
    blocks_per_sm: int
    warps_per_sm: int
    fraction: float            # active warps / the SM's most
    limiter: str               # "registers", "shared memory", "warps" or "blocks"


def occupancy(arch: str, registers: int, shared_bytes: int, threads: int) -> Occupancy:
    """Resident blocks per SM on ``arch`` of a kernel using ``registers`` per thread,
    ``shared_bytes`` of shared memory per block and ``threads`` per block."""
    from ..nvrtc import arch_number
    sm = arch_number(arch)
    known = [k for k in SM if k <= sm]
    if not known:
        raise NVRTCError(f"no occupancy figures for {arch} (sm_70 and newer are known)")
    lim = SM[max(known)]
    warps = -(-max(1, threads) // 32)
    by = {"warps": lim.max_warps // warps, "blocks": lim.max_blocks}
    if registers:
        per_warp = -(-registers * 32 // lim.register_unit) * lim.register_unit
        by["registers"] = 4 * (lim.registers // 4 // per_warp) // warps
    if shared_bytes:
        per_block = -(-shared_bytes // lim.shared_unit) * lim.shared_unit + lim.reserved_shared
        by["shared memory"] = lim.shared_bytes // per_block
    limiter = min(by, key=lambda k: by[k])
    blocks = by[limiter]
    return Occupancy(arch, blocks, blocks * warps, round(blocks * warps / lim.max_warps, 3),
                     limiter)
