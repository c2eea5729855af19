"""Tensor cores: a 16x16x16 fp16 x fp16 -> fp32 matrix-multiply-accumulate intrinsic
mapped to WMMA.

``wmma_m16n16k16()`` declares ``c[i, j] += sum_k float(a[i, k]) * float(b[k, j])`` over
16x16 tiles; tensorize a matmul's inner (16, 16, 16) loops with it.  Its "cuda"
implementation emits, per call::

    __syncwarp();
    tdsl_wmma_load_a_row(a, <A tile>, lda);  tdsl_wmma_load_b_row(b, <B tile>, ldb);
    tdsl_wmma_load_acc_row(c, <C tile>, ldc);
    tdsl_wmma_mma_row_row(c, a, b, c);
    tdsl_wmma_store_acc_row(<C tile>, c, ldc);

(the PTX ``wmma.load/mma/store.sync.aligned.m16n16k16`` instructions that
``nvcuda::wmma`` compiles to, defined in the generated prelude since NVRTC ships
no ``mma.h``).  Row- or column-major operands are picked from the strides of the
regions' buffers; the leading dimension is the other stride.

WMMA is warp-collective: the 32 lanes of a warp execute each call together and
compute one tile.  So the call must run once per warp: the kernel's
``threadIdx.x`` extent must be exactly 32 (bind it in a cooperative-fetch stage)
and the tensorized loops must not sit under a ``threadIdx.x`` loop; warps are told
apart by ``threadIdx.y``/``z``.  Tiles must start 32-byte aligned and leading
dimensions be multiples of 16 bytes.  The intrinsic is declared
``warp_collective``, so the reference interpreter runs its declared computation
once per warp too.
"""
from __future__ import annotations

import functools
from typing import Any

from tdsl.errors import BuildError
from tdsl.expr import Const, Expr
from tdsl.stmt import BufferRegion, IntrinCall, ThreadTag

WARP = 32


@functools.lru_cache(maxsize=None)
def wmma_m16n16k16(name: str = "wmma_m16n16k16_f16_f32") -> Any:
    """The TensorIntrin (declared computation + "cuda" implementation)."""
    import tdsl as td
    a = td.placeholder((16, 16), "float16", name="a")
    b = td.placeholder((16, 16), "float16", name="b")
    k = td.reduce_axis((0, 16), name="k")
    c = td.compute((16, 16), lambda i, j: td.sum(a[i, k].astype("float32") *
                                                   b[k, j].astype("float32"), axis=k), name="c")
    return td.decl_tensor_intrin(c.op, name=name, impls={"cuda": emit_wmma}, warp_collective=True)


def _layout(ctx: Any, region: BufferRegion, what: str, elem_bytes: int) -> tuple[str, str]:
    """("row"|"col", leading-dimension code) of a 16x16 operand region."""
    rows, cols = ctx.stride(region, 0), ctx.stride(region, 1)
    if rows is None or cols is None:
        raise BuildError(f"wmma: the {what} region of '{region.buffer.name}' does not span two "
                         f"buffer dimensions")
    ana = ctx.r.ana
    rows, cols = ana.simplify(rows), ana.simplify(cols)
    if isinstance(cols, Const) and cols.value == 1:
        layout, ld = "row", rows
    elif isinstance(rows, Const) and rows.value == 1:
        layout, ld = "col", cols
    else:
        raise BuildError(f"wmma: the {what} tile in '{region.buffer.name}' is neither row- nor "
                         f"column-major (strides {rows!r}, {cols!r}); one of them must be 1")
    from .codegen import divisible
    if not divisible(ld, 16 // elem_bytes, ana):
        raise BuildError(f"wmma: the leading dimension of the {what} tile in "
                         f"'{region.buffer.name}' is {ld!r}, not a multiple of {16 // elem_bytes} "
                         f"elements (16 bytes); pad the buffer (storage_align)")
    return layout, (f"{ld.value}" if isinstance(ld, Const) else f"(unsigned)({ctx.expr(ld)})")


def _check_warp(ctx: Any) -> None:
    if ThreadTag.THREAD_X in ctx.enclosing_thread_tags():
        raise BuildError("wmma: the tensorized loops sit under a loop bound to threadIdx.x, so "
                         "each lane would compute its own tile; WMMA is warp-collective: bind "
                         "threadIdx.x (extent 32) only in the cooperative-fetch stages and tell "
                         "warps apart with threadIdx.y/z")
    ext: Expr = ctx.kernel.launch_extent.get(ThreadTag.THREAD_X, Const(1, "int64"))
    if not (isinstance(ext, Const) and ext.value == WARP):
        raise BuildError(f"wmma: kernel '{ctx.kernel.name}' has threadIdx.x extent {ext!r}; WMMA "
                         f"needs exactly {WARP} (one warp per threadIdx.y/z), bound in a "
                         f"cooperative-fetch stage")


def emit_wmma(call: IntrinCall, ctx: Any) -> None:
    """The "cuda" implementation: see the module docstring for the contract."""
    _check_warp(ctx)
    (ra, rb), (rc,) = call.inputs, call.outputs
    why = "wmma (WMMA tiles must start 32-byte aligned)"
    for r in (ra, rb, rc):
        ctx.require_align(r, 32, why)
    la, lda = _layout(ctx, ra, "A", 2)
    lb, ldb = _layout(ctx, rb, "B", 2)
    lc, ldc = _layout(ctx, rc, "accumulator", 4)
    fa, fb, fc = ctx.fresh("wmma_a"), ctx.fresh("wmma_b"), ctx.fresh("wmma_c")
    funcs = {f"tdsl_wmma_load_a_{la}", f"tdsl_wmma_load_b_{lb}", f"tdsl_wmma_load_acc_{lc}",
             f"tdsl_wmma_mma_{la}_{lb}", f"tdsl_wmma_store_acc_{lc}"}
    pc = ctx.pointer(rc)
    acc = getattr(ctx.r, "wmma_acc", {}).get(id(call))   # held in registers (wmma_acc.py)
    if acc is not None:
        funcs -= {f"tdsl_wmma_load_acc_{lc}", f"tdsl_wmma_store_acc_{lc}"}
    ctx.use("wmma", funcs)
    ctx.emit("__syncwarp();  // the warp's earlier stores to the tiles are visible to all lanes")
    ctx.emit(f"tdsl_wmma_a {fa};")
    ctx.emit(f"tdsl_wmma_b {fb};")
    ctx.emit(f"tdsl_wmma_load_a_{la}({fa}, {ctx.pointer(ra)}, {lda});")
    ctx.emit(f"tdsl_wmma_load_b_{lb}({fb}, {ctx.pointer(rb)}, {ldb});")
    if acc is not None:
        ctx.emit(f"tdsl_wmma_mma_{la}_{lb}({acc}, {fa}, {fb}, {acc});")
        return
    ctx.emit(f"tdsl_wmma_acc {fc};")
    ctx.emit(f"tdsl_wmma_load_acc_{lc}({fc}, {pc}, {ldc});")
    ctx.emit(f"tdsl_wmma_mma_{la}_{lb}({fc}, {fa}, {fb}, {fc});")
    ctx.emit(f"tdsl_wmma_store_acc_{lc}({pc}, {fc}, {ldc});")


def store_accumulator(call: IntrinCall, ctx: Any, acc: str) -> None:
    """After the loop of a register-held accumulator: the one store of its tile."""
    _check_warp(ctx)
    (rc,) = call.outputs
    ctx.require_align(rc, 32, "wmma (WMMA tiles must start 32-byte aligned)")
    lc, ldc = _layout(ctx, rc, "accumulator", 4)
    ctx.use("wmma", {f"tdsl_wmma_store_acc_{lc}"})
    ctx.emit("__syncwarp();")
    ctx.emit(f"tdsl_wmma_store_acc_{lc}({ctx.pointer(rc)}, {acc}, {ldc});")
