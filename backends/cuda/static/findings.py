"""A performance defect one static check found in one kernel."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    """``check`` ("spill", "bank", "coalescing", "occupancy", "instructions") found
    ``detail`` in ``kernel``; ``amount`` is the check's measure (bytes, ways, ratio...)."""

    kernel: str
    check: str
    detail: str
    amount: float = 0.0

    def __str__(self) -> str:
        return f"{self.kernel}: {self.check}: {self.detail}"
