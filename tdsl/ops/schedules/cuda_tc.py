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

from tdsl.schedule import Schedule, Stage
from tdsl.tensor import thread_axis

#: The block tile (outputs) and the threads of a block (4 warps of 64 x 64 outputs).
BM = BN = 128
THREADS = 128
#: Input dtypes the microkernel multiplies (fp32 accumulation).
DTYPES = ("float16", "bfloat16")
PRAGMA = "tdsl_tc_gemm"


def eligible(anchor: Stage, a_t: Any, pack: Stage, target: Any) -> bool:
    """fp16 x fp16 or bf16 x bf16 -> fp32 on an sm_80+ target."""
    arch = getattr(target, "arch", "") or ""
    try:
        sm = int(arch.split("_")[1].rstrip("abf"))
    except (IndexError, ValueError):
        return False
    dt = str(getattr(a_t, "dtype", ""))
    return sm >= 80 and dt in DTYPES and str(pack.op.output(0).dtype) == dt and \
        str(anchor.op.output(0).dtype) == "float32" and not anchor.op.attrs.get("transpose_a")


def schedule_tc(s: Schedule, anchor: Stage, out: "Stage | None", pack: Stage) -> set:
    """The loop nest of the module docstring; returns the stages done."""
    pack.compute_inline()
    if out is None:
        o = anchor
        acc = s[s.cache_write(anchor.op.output(0), "local")]
    else:
        o = out
        anchor.set_scope("local")
        acc = anchor
    axes = list(o.op.axis)
    i, j = axes[-2], axes[-1]
    lead = axes[:-2]
    bi, ii = o.split(i, factor=BM)
    bj, jj = o.split(j, factor=BN)
    o.reorder(*lead, bi, bj, jj, ii)
    if lead:
        o.bind(o.fuse(*lead) if len(lead) > 1 else lead[0], thread_axis("blockIdx.z"))
    o.bind(bi, thread_axis("blockIdx.y"))
    o.bind(bj, thread_axis("blockIdx.x"))
    o.bind(jj, thread_axis("threadIdx.x"))
    acc.compute_at(o, ii)
    o.pragma(ii, PRAGMA, 1)
    return {st for st in (anchor, out, pack, acc) if st is not None}
