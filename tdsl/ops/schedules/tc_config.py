"""Tile shapes of the tensor-core GEMM microkernel (``backends/cuda/tc_kernel.py``).

A ``TcConfig`` is the block tile ``bm x bn`` (k tile 32), the warp tile ``wm x wn`` and
the cp.async pipeline depth.  A block has ``bn`` threads (the schedule binds the tile's
columns to ``threadIdx.x``), so ``bn / 32`` warps share the ``bm x bn`` tile: the warp tile
is the shape of that grid.  The schedule carries the config to the backend as the value of
``pragma(ii, "tdsl_tc_gemm", cfg.key())``; the backend parses it back (``parse``).

``CONFIGS`` is the set each of which is checked correct under the emulator and assembled
by ptxas for sm_80 and sm_90 with no spill (``tests/autotune/test_autotune_sketch_tc.py``);
the auto-scheduler's tensor-core knob chooses among them.  As measured with the mainloop
(fragments double-buffered in registers; ptxas 12.9, fp16 4096^3 matmul and dense, sm_80
and sm_90): 158-186 registers per thread for the 64-row tiles, 232-255 for the 128-row
ones, no spills; 16-96 KiB of shared memory.  A 128-row tile holds 128 accumulators and 64
fragment registers per thread: 2 blocks of 128 threads fit an SM's 64 Ki registers, 3
would need at most 168 per thread, out of reach with that tile (shared memory allows 3 at
3 stages).  A 256-row block tile (128 x 64 warp tiles: 256 accumulators per thread) would
spill, so it is not offered.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

BK = 32
#: Dynamic shared memory a block may opt in to, by the smallest arch the kernel runs on.
SMEM_OPT_IN = 163 * 1024          # sm_80 (sm_90: 227 KiB)
#: The mainloops of the kernel: "frag" (``tc_kernel.py``: fragments double-buffered in
#: registers, the next k step's ldmatrix in flight during this step's MMAs) is the only one.
MAINLOOPS = ("frag",)
#: Mainloops that were removed, and why: a config, tuning record or pragma naming one is
#: refused with this reason (``TcConfig.error``), never run with another loop silently.
REMOVED_MAINLOOPS = {
    "basic": "the first mainloop was removed: the fragment-pipelined one replaced it on every "
             "measured shape (H200, fp16 4096^3: 263 -> 398 TFLOP/s); drop mainloop=\"basic\" "
             "(the key suffix \"/basic\") to get the same tile shape with it",
}
#: fp32 accumulators per thread a warp tile may hold without spilling (64 x 64 / 32).
MAX_ACC = 128


@dataclass(frozen=True)
class TcConfig:
    """One tile shape of the microkernel."""

    bm: int = 128
    bn: int = 128
    wm: int = 64
    wn: int = 64
    stages: int = 4
    #: the mainloop (``MAINLOOPS``; a key names any other as a suffix, which ``error``
    #: refuses with the reason: ``REMOVED_MAINLOOPS``)
    mainloop: str = "frag"

    @property
    def threads(self) -> int:
        return self.bn

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory: ``stages`` x (A tile + B tile) of 16-bit elements."""
        return self.stages * (self.bm * BK + BK * self.bn) * 2

    def key(self) -> str:
        """The pragma value, e.g. ``"128x128x32/w64x64/s4"`` (a mainloop other than "frag"
        as a suffix, ``".../s4/<mainloop>"``)."""
        tail = "" if self.mainloop == "frag" else f"/{self.mainloop}"
        return f"{self.bm}x{self.bn}x{BK}/w{self.wm}x{self.wn}/s{self.stages}{tail}"

    def error(self) -> Optional[str]:
        """Why the kernel cannot take this shape, None where it can."""
        if self.mainloop in REMOVED_MAINLOOPS:
            return f"mainloop {self.mainloop!r}: {REMOVED_MAINLOOPS[self.mainloop]}"
        if self.mainloop not in MAINLOOPS:
            return f"mainloop {self.mainloop!r} not in {', '.join(MAINLOOPS)}"
        if self.bn not in (64, 128, 256):
            return f"block tile columns {self.bn} not in 64, 128, 256 (threads = columns)"
        if self.bm % 16 or not 16 <= self.bm <= 256:
            return f"block tile rows {self.bm} not a multiple of 16 in [16, 256]"
        if self.wm % 16 or self.wn % 16 or self.bm % self.wm or self.bn % self.wn:
            return (f"warp tile {self.wm}x{self.wn} does not split the block tile "
                    f"{self.bm}x{self.bn} in multiples of 16")
        if (self.bm // self.wm) * (self.bn // self.wn) * 32 != self.threads:
            return (f"warp tile {self.wm}x{self.wn}: {self.bn // 32} warps must cover the "
                    f"{self.bm}x{self.bn} tile")
        if self.wm * self.wn // 32 > MAX_ACC:
            return f"warp tile {self.wm}x{self.wn} needs more than {MAX_ACC} accumulators/thread"
        if (self.bm * 4) % self.threads:
            return f"block tile {self.bm}x{self.bn}: A tile chunks do not split over threads"
        if not 2 <= self.stages <= 4:
            return f"pipeline depth {self.stages} not in 2..4"
        if self.smem_bytes > SMEM_OPT_IN:
            return f"{self.smem_bytes} bytes of shared memory exceed the sm_80 opt-in limit"
        return None


DEFAULT = TcConfig()

_SHAPES = [(128, 128, 64, 64), (128, 128, 32, 128), (128, 64, 64, 64), (64, 128, 32, 64),
           (64, 128, 64, 32), (64, 64, 32, 64), (64, 64, 64, 32), (128, 256, 64, 64)]
#: The checked tile shapes (default first).
CONFIGS = [TcConfig(bm, bn, wm, wn, st) for (bm, bn, wm, wn) in _SHAPES for st in (4, 3, 2)]


def parse(value: Any) -> Optional[TcConfig]:
    """The config a pragma value names (1 or None: the default); None where malformed."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value == 1):
        return DEFAULT
    if isinstance(value, TcConfig):
        return value
    if not isinstance(value, str):
        return None
    try:
        blk, warp, st, *loop = value.split("/")
        bm, bn, bk = (int(x) for x in blk.split("x"))
        wm, wn = (int(x) for x in warp.lstrip("w").split("x"))
        if len(loop) > 1 or loop == ["frag"]:      # one spelling per config
            return None
        cfg = TcConfig(bm, bn, wm, wn, int(st.lstrip("s")), *loop)
    except ValueError:
        return None
    return cfg if bk == BK else None
