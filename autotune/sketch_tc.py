"""Sketch knob of a TILE stage on the GPU: the tensor-core GEMM microkernel and its tiles.

An fp16/bf16 product with fp32 accumulation on sm_80+ (what ``ops.schedules.cuda_tc``
schedules by default) gets a ``<stage>.tc`` knob: ``""`` keeps the generic GPU tiling
(``SSSRRSRS``), any other value is a tile shape key of ``tc_config.CONFIGS`` (block tile,
warp tile, pipeline depth), applied by scheduling the stage, its PACK input and its fused
elementwise epilogue (the ROOT stage the default schedule fuses, after the INLINE stages
are inlined) exactly as the default schedule does with that shape.  The generic
tile knobs are then unused (points differing only in them build the same kernel).
"""
from __future__ import annotations

from typing import Any, Optional

from tdsl.lowering.inline import inlined_bodies
from tdsl.ops.schedules import cuda_gemm, cuda_tc
from tdsl.ops.schedules.tc_config import CONFIGS, TcConfig, parse

from .replay import fresh_schedule
from .sketch import Rule
from .space import OtherOptionSpace

#: The knob's value that keeps the generic tiling.
GENERIC = ""


def _operands(sch: Any, st: Any) -> "Optional[tuple[Any, Any]]":
    """(A tensor, PACK stage) of a matmul-family stage, None for any other."""
    pack = cuda_gemm._pack_of(sch, st)
    reads = [t for t in st.op.input_tensors if pack is None or t.op is not pack.op]
    return None if pack is None or not reads else (reads[0], pack)


def tc_eligible(outputs: Any, op: Any, target: Any) -> bool:
    """Does the default CUDA schedule give ``op``'s stage the tensor-core microkernel?"""
    sch = fresh_schedule(outputs)
    st = next((s for s in sch.stages if s.op is op), None)
    got = None if st is None else _operands(sch, st)
    return got is not None and cuda_tc.eligible(st, got[0], got[1], target)


def tc_knobs(src: Any, name: str, op: Any) -> None:
    """Add ``<name>.tc`` to ``src.space`` where the stage is tensor-core eligible."""
    if tc_eligible(src.outputs, op, src.target):
        src.space.add(f"{name}.tc", OtherOptionSpace([GENERIC] + [c.key() for c in CONFIGS]))


def chosen(apply: Any, name: str) -> Optional[TcConfig]:
    """The tile shape the config picks for TILE stage ``name`` (None: generic tiling)."""
    v = apply.val(f"{name}.tc", GENERIC)
    return None if v == GENERIC else parse(v)


def apply_tc(apply: Any, p: Any, cfg: TcConfig) -> set:
    """Schedule TILE plan ``p`` with the microkernel of shape ``cfg``; the labels done
    (empty where the default schedule declines, e.g. an epilogue read at other axes)."""
    sch = apply.sch
    st = apply.stage(p.name)
    got = _operands(sch, st)
    if got is None:
        return set()
    out = None          # its elementwise epilogue, as the default schedule finds it
    bodies = inlined_bodies(sch)
    for q in apply.src.plans:
        if q.rule is Rule.ROOT:
            g = cuda_gemm.gemm_anchor(sch, apply.stage(q.name), bodies)
            if g is not None and g[0] is st:
                out = g[1]
    done = cuda_tc.schedule_tc(sch, st, out, got[1], cfg)
    labels = {lab for lab, s in apply.by_label.items() if s in done}
    return labels
