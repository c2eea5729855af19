"""Recognize the tensor-core attention loop nest and emit the microkernel in its place.

The fp16/bf16 branch of the attention CUDA schedule (``tdsl/ops/schedules/cuda_attention.py``,
``schedule_tc_attention``) gives the attention kernel the loop nest ``blockIdx.x (batch x
head) / blockIdx.y (64-query block) / threadIdx.x (128) / f (pragma "tdsl_tc_attention")``
whose body is the declaration's per-element computation (what the reference interpreter
runs).  ``find_plan`` finds that pragma loop and, in its body, the global buffers: Q (read by
the ``T_attn_qt`` stage), K (by ``T_attn_score``), V (by ``T_attn_bacc``) and the output
(the one global store); the pragma's value (``attn_key``) carries the head size, causality
and the scale.  ``render`` emits a call of ``tdsl_fa`` (``tc_attention_kernel.py``) with
the element offsets of Q/K/V rows of this block's (batch, head) as C++ lambdas (so strides
and sequence lengths stay what the IR says: constants or kernel parameters) and the output
store (cast included) as the epilogue lambda.

Requirements (a ``BuildError`` naming the kernel otherwise): one threadIdx.x loop of 128
threads around the pragma loop, Q/K/V/output 4-D with a unit stride along d, a valid key.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from tdsl.errors import BuildError
from tdsl.expr import BufferLoad, Cast, Const, Var
from tdsl.stmt import BufferStore, For, StorageScope
from tdsl.visitor import post_order_visit, substitute

from .tc_attention_kernel import HEAD_SIZES, THREADS, smem_bytes
from .tc_gemm import _find, emit_dynamic_smem, single_thread_x

PRAGMA = "pragma_tdsl_tc_attention"
_DTYPES = {"float16": "tdsl_half", "bfloat16": "tdsl_bf16"}


def attn_key(d: int, causal: bool, scale: float) -> str:
    """The pragma value: e.g. ``"fa/d64/c1/s0.125"``."""
    return f"fa/d{d}/c{int(bool(causal))}/s{float(scale)!r}"


def parse_key(value: Any) -> "Optional[tuple[int, bool, float]]":
    """(head size, causal, scale) of a pragma value; None where malformed."""
    if not isinstance(value, str):
        return None
    try:
        fa, d, c, s = value.split("/")
        if fa != "fa" or d[0] != "d" or c not in ("c0", "c1") or s[0] != "s":
            return None
        return int(d[1:]), c == "c1", float(s[1:])
    except (ValueError, IndexError):
        return None


@dataclass
class FaPlan:
    """What ``render`` needs of a recognized attention kernel."""

    loop: For                 # the pragma loop
    tx: Var                   # threadIdx.x
    q: Any                    # the global buffers
    k: Any
    v: Any
    out: BufferStore          # the output store (its indices give batch, head, query base)
    d: int
    causal: bool
    scale: float
    dtype: str

    @property
    def smem_bytes(self) -> int:
        return smem_bytes(self.d)


def _fail(kernel: str, why: str) -> BuildError:
    return BuildError(f"CUDA kernel '{kernel}': the tensor-core attention body (pragma "
                      f"tdsl_tc_attention) {why}")


def _global_loads(e: Any) -> list:
    found: list = []

    def visit(n: Any) -> None:
        if isinstance(n, BufferLoad) and n.buffer.scope is StorageScope.GLOBAL and \
                n.buffer not in found:
            found.append(n.buffer)
    post_order_visit(e, visit)
    return found


def find_plan(root: Any, kernel: str) -> Optional[FaPlan]:
    """The plan of a kernel carrying the pragma, None for any other kernel."""
    from .tc_gemm import PRAGMA as GEMM
    loop, path = _find(root, PRAGMA)
    if loop is None:
        return None
    tx = single_thread_x(path, lambda why: _fail(kernel, why))
    if not (isinstance(tx.extent, Const) and tx.extent.value == THREADS and
            isinstance(tx.min, Const) and tx.min.value == 0):
        raise _fail(kernel, f"needs threadIdx.x to run over exactly {THREADS} threads")
    key = parse_key(loop.annotations[PRAGMA])
    if key is None or key[0] not in HEAD_SIZES:
        raise _fail(kernel, f"value {loop.annotations[PRAGMA]!r} is malformed or names a head "
                            f"size other than {HEAD_SIZES}")
    roles: dict = {}
    outs: list = []

    def visit(n: Any) -> None:
        if not isinstance(n, BufferStore):
            return
        if n.buffer.scope is StorageScope.GLOBAL:
            outs.append(n)
            return
        for prefix, role in (("T_attn_qt", "q"), ("T_attn_score", "k"), ("T_attn_bacc", "v")):
            if n.buffer.name.startswith(prefix):
                roles.setdefault(role, set()).update(_global_loads(n.value))
    post_order_visit(loop.body, visit)
    got = {r: list(bs) for r, bs in roles.items()}
    if any(len(got.get(r, ())) != 1 for r in ("q", "k", "v")) or len(outs) != 1:
        raise _fail(kernel, "must read one Q, K and V buffer and store one output")
    q, k, v = got["q"][0], got["k"][0], got["v"][0]
    out = outs[0]
    dt = str(q.dtype)
    if dt not in _DTYPES or any(str(b.dtype) != dt for b in (k, v, out.buffer)):
        raise _fail(kernel, f"needs Q, K, V and the output all float16 or all bfloat16, "
                            f"got {q.dtype}, {k.dtype}, {v.dtype}, {out.buffer.dtype}")
    for b in (q, k, v, out.buffer):
        s = b.effective_strides()
        if b.ndim != 4 or not (isinstance(s[-1], Const) and s[-1].value == 1):
            raise _fail(kernel, f"needs '{b.name}' 4-D and contiguous along d")
    if GEMM in loop.annotations:
        raise _fail(kernel, "also carries the tensor-core GEMM pragma")
    return FaPlan(loop, tx.var, q, k, v, out, key[0], key[1], key[2], dt)


def render(r: Any, plan: FaPlan) -> None:
    """Emit the microkernel call for ``plan`` in place of its loop (``r``: KernelRenderer)."""
    r.helpers.add("tc_gemm")
    r.helpers.add("tc_attention")
    r.helpers.add("shared")
    r.helpers.update(("half", "bf16"))     # the probability packing converts to either
    r.use_type(plan.q.dtype)
    ctype = _DTYPES[plan.dtype]
    zero = {plan.loop.var: Const(0, plan.loop.var.dtype), plan.tx: Const(0, plan.tx.dtype)}
    bh = [r.ana.simplify(substitute(i, zero)) for i in plan.out.indices[:2]]
    i0 = r.ana.simplify(substitute(plan.out.indices[2], zero))
    v_r, v_c = Var("fa_row", "int64"), Var("fa_col", "int64")
    v_val = Var("fa_v", "float32")
    sq = plan.q.shape[2]
    sk = plan.k.shape[2]
    r.emit("// tensor-core attention microkernel (tdsl_fa, tc_attention_kernel.py)")
    with r.block(""):
        r.emit(f"const long long fa_i0 = {r.expr(i0)};")
        for name, buf in (("q", plan.q), ("k", plan.k), ("v", plan.v)):
            off = r.flat_offset(buf, (*bh, v_r, v_c))
            with r.names.scoped(v_r, "fa_row") as nr, r.names.scoped(v_c, "fa_col") as nc:
                r.emit(f"auto fa_{name}_off = [&](long long {nr}, long long {nc}) -> long long "
                       f"{{ return {r.expr(off)}; }};")
        with r.names.scoped(v_r, "fa_row") as nr, r.names.scoped(v_c, "fa_col") as nc, \
                r.names.scoped(v_val, "fa_v") as nv:
            r.emit(f"auto fa_store = [&](long long {nr}, long long {nc}, float {nv}) {{")
            r.depth += 1
            r.stmt(BufferStore(plan.out.buffer, Cast(v_val, plan.dtype),
                               (*bh, i0 + v_r, v_c)))
            r.depth -= 1
            r.emit("};")
        emit_dynamic_smem(r, ctype, "fa_smem", plan.smem_bytes)
        bf16 = "true" if plan.dtype == "bfloat16" else "false"
        causal = "true" if plan.causal else "false"
        refs = ", ".join(r.buffer_ref(b) for b in (plan.q, plan.k, plan.v))
        r.emit(f"tdsl_fa<{bf16}, {plan.d}, {causal}, {ctype}>({refs}, fa_smem, "
               f"(long long)({r.expr(sq)}), (long long)({r.expr(sk)}), fa_i0, "
               f"{plan.scale!r}f, fa_q_off, fa_k_off, fa_v_off, fa_store);")
