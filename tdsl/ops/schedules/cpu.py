"""What the default CPU schedules (``llvm.py``) share: the target's vector width and thread
count (``CPU``), and small helpers on stages and loops."""
from __future__ import annotations

import functools
from dataclasses import dataclass

from tdsl.dtype import DType
from tdsl.errors import TDSLError
from tdsl.schedule import Stage
from tdsl.target import Target, cpu_facts
from tdsl.tensor import IterVar

from .._util import const_value


@dataclass(frozen=True)
class CPU:
    """What the schedules need to know of the target CPU."""

    vector_bits: int
    threads: int

    def lanes(self, dtype: DType) -> int:
        return max(1, self.vector_bits // max(8, dtype.bits))


@functools.lru_cache(maxsize=None)
def cpu_of(target: Target) -> CPU:
    """Vector width and thread count of ``target`` (``tdsl.target.cpu_facts``: the host's or
    ``-mcpu``/``-mattr``'s features; 256-bit vectors when LLVM is not installed)."""
    try:
        facts = cpu_facts(target)
    except (ImportError, RuntimeError, TDSLError):   # no LLVM: schedule for 256-bit vectors
        from tdsl.runtime.threads import default_num_threads
        return CPU(256, max(1, target.num_threads or default_num_threads()))
    return CPU(facts.vector_bits, facts.cores)


def _ext(iv: IterVar) -> "int | None":
    """The constant extent of a root axis (None if symbolic or a derived loop)."""
    return None if iv.dom is None else const_value(iv.dom.extent)


def _fuse(st: Stage, ivs: list) -> IterVar:
    return ivs[0] if len(ivs) == 1 else st.fuse(*ivs)


def _out_dtype(st: Stage) -> DType:
    return st.op.outputs[0].dtype


def _vector_split(st: Stage, iv: IterVar, lanes: int, extent: "int | None" = None
                  ) -> tuple[IterVar, IterVar]:
    """Split ``iv`` so that its inner loop has at most ``lanes`` iterations (a constant)."""
    e = _ext(iv) if extent is None else extent
    factor = lanes if e is None or e >= lanes else _pow2_floor(e) if e > 1 else 1
    return st.split(iv, factor=factor)


def _pow2_floor(x: int) -> int:
    p = 1
    while p * 2 <= x:
        p *= 2
    return p


def _total(st: Stage) -> "int | None":
    tot = 1
    for iv in st.op.axis:
        e = _ext(iv)
        if e is None:
            return None
        tot *= e
    return tot
