"""Default CUDA schedule of fp16/bf16 matmuls (fp32 accumulation) on sm_80+: tensor cores.

The schedule only shapes the loop nest the backend's microkernel replaces
(``backends/cuda/tc_gemm.py``): per output ``BM x BN`` = 128 x 128 tile a block
(``blockIdx.y``/``x``, the batch on ``blockIdx.z``) of 128 threads (``threadIdx.x`` runs
along the tile's columns), the tile's rows a serial loop marked
``pragma(ii, "tdsl_tc_gemm")`` whose body is the per-output accumulation (the
accumulator in a register, the whole k loop) and the elementwise epilogue (bias,
activation, cast).  The backend recognizes that body and emits the expert kernel in its
place: 4 warps of 64 x 64, a 4-stage cp.async pipeline of 128 x 32 / 32 x 128 tiles in
swizzled dynamic shared memory, ldmatrix + mma.sync m16n8k16, the epilogue on the
accumulator registers.  The plain loop nest is also what the reference interpreter runs.
"""
from __future__ import annotations

from typing import Any

from tdsl.errors import ScheduleError
from tdsl.schedule import Schedule, Stage
from tdsl.tensor import thread_axis

from .tc_config import DEFAULT, TcConfig

#: The default block tile (outputs) and the threads of a block (4 warps of 64 x 64 outputs);
#: other shapes: ``tc_config.CONFIGS`` (the auto-scheduler's knob).
BM, BN, THREADS = DEFAULT.bm, DEFAULT.bn, DEFAULT.threads
#: Input dtypes the microkernel multiplies (fp32 accumulation).
DTYPES = ("float16", "bfloat16")
PRAGMA = "tdsl_tc_gemm"


def sm_of(target: Any) -> int:
    """The target's compute capability as a number (``sm_90a`` -> 90; 0 when it names none)."""
    arch = getattr(target, "arch", "") or ""
    try:
        return int(arch.split("_")[1].rstrip("abf"))
    except (IndexError, ValueError):
        return 0


def eligible(anchor: Stage, a_t: Any, pack: Stage, target: Any) -> bool:
    """fp16 x fp16 or bf16 x bf16 -> fp32 on an sm_80+ target."""
    dt = str(getattr(a_t, "dtype", ""))
    return sm_of(target) >= 80 and dt in DTYPES and str(pack.op.output(0).dtype) == dt and \
        str(anchor.op.output(0).dtype) == "float32" and not anchor.op.attrs.get("transpose_a")


def _anchor_axes(s: Schedule, out: Stage, anchor: Stage) -> "list[int] | None":
    """Which axis of ``out`` each axis of ``anchor`` is read at (the epilogue may permute
    them, e.g. a transpose), None where that is not one consistent permutation."""
    from tdsl.lowering.inline import inlined_bodies

    from .graph import effective_loads, permuted_access
    perm = None
    for p, idx in effective_loads(s, out, inlined_bodies(s)):
        if p is anchor:
            pos = permuted_access(out, idx)
            if pos is None or (perm is not None and pos != perm):
                return None
            perm = pos
    return perm


def schedule_tc(s: Schedule, anchor: Stage, out: "Stage | None", pack: Stage,
                cfg: TcConfig = DEFAULT) -> set:
    """The loop nest of the module docstring for the tile shape ``cfg`` (carried to the
    backend as the pragma's value); returns the stages done (none where the epilogue reads
    the product other than at a permutation of its axes)."""
    why = cfg.error()
    if why is not None:
        raise ScheduleError("pragma", anchor.name, f"tensor-core tile {cfg.key()}: {why}")
    o = out if out is not None else anchor
    perm = _anchor_axes(s, out, anchor) if out is not None else list(range(len(o.op.axis)))
    if perm is None:
        return set()
    pack.compute_inline()
    if out is None:
        acc = s[s.cache_write(anchor.op.output(0), "local")]
    else:
        anchor.set_scope("local")
        acc = anchor
    axes = list(o.op.axis)
    i, j = axes[perm[-2]], axes[perm[-1]]    # the output axes of the product's rows, columns
    lead = [ax for ax in axes if ax is not i and ax is not j]
    bi, ii = o.split(i, factor=cfg.bm)
    bj, jj = o.split(j, factor=cfg.bn)
    o.reorder(*lead, bi, bj, jj, ii)
    if lead:
        o.bind(o.fuse(*lead) if len(lead) > 1 else lead[0], thread_axis("blockIdx.z"))
    o.bind(bi, thread_axis("blockIdx.y"))
    o.bind(bj, thread_axis("blockIdx.x"))
    o.bind(jj, thread_axis("threadIdx.x"))
    acc.compute_at(o, ii)
    o.pragma(ii, PRAGMA, cfg.key())
    return {st for st in (anchor, out, pack, acc) if st is not None}
