"""Register spills: ptxas ``-v`` figures of each kernel as findings, and the build's warning.

A spill is a register ptxas could not keep and moved to local memory (off-chip, through
L1): every access costs a memory round trip, so a spilling kernel is a performance defect
even when it computes the right answer.  ``warn_spills`` is called at build, so a user
kernel that spills says so (kernel name and bytes) instead of running slowly in silence.
"""
from __future__ import annotations

import os
import sys
import warnings
from typing import Any, Mapping

from .findings import Finding


class CUDASpillWarning(UserWarning):
    """A kernel's registers spilled to local memory (see ``spill_findings``)."""


def spill_findings(reports: Mapping[str, Any]) -> list[Finding]:
    """One finding per kernel of ``reports`` (``cubin.PtxasReport`` by name) that spills."""
    out = []
    for name, r in reports.items():
        spilled = r.spill_stores + r.spill_loads
        if spilled:
            out.append(Finding(name, "spill", f"{r.spill_stores} B spill stores and "
                               f"{r.spill_loads} B spill loads per thread ({r.registers} "
                               f"registers, {r.frame_bytes} B stack frame)", spilled))
    return out


def warn_spills(reports: Mapping[str, Any], arch: str) -> None:
    """Warn (``CUDASpillWarning``) for each spilling kernel of ``reports``."""
    for f in spill_findings(reports):
        warnings.warn(f"tdsl: CUDA kernel '{f.kernel}' spills registers on {arch}: "
                      f"{f.detail}; fewer outputs per thread, or fewer threads per block "
                      f"(more registers each), avoid it", CUDASpillWarning,
                      stacklevel=_caller_level())


def _caller_level() -> int:
    """The stack level of the first frame outside tdsl (the user's build call)."""
    import tdsl
    roots = {os.path.dirname(os.path.abspath(p)) for p in tdsl.__path__}
    roots = {os.path.join(r, d) + os.sep for r in roots
             for d in ("tdsl", "backends", "schedule", "autotune")}
    level, frame = 1, sys._getframe(1)
    while frame is not None and any(os.path.abspath(frame.f_code.co_filename).startswith(r)
                                    for r in roots):
        level += 1
        frame = frame.f_back
    return level
