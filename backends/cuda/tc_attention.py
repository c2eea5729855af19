"""Recognize the tensor-core attention loop nest and emit the microkernel in its place.

The fp16/bf16 branch of the attention CUDA schedule (``tdsl/ops/schedules/cuda_attention.py``,
``schedule_tc_attention``) gives the attention kernel the loop nest ``blockIdx.x (batch x
head) / blockIdx.y (64-query block) / threadIdx.x (128) / f (pragma "tdsl_tc_attention")``
whose body is the declaration's per-element computation (what the reference interpreter
runs).  ``find_plan`` finds that pragma loop and, in its body, the global buffers: Q (read by
the ``T_attn_qt`` stage), K (by ``T_attn_score``), V (by ``T_attn_bacc``) and the output
(the one global store), and a user mask (the one global buffer the masked scores,
``T_attn_bmax`` and ``T_attn_prob``, read); the pragma's value (``attn_key``) carries the
head size, causality, the scale and the mask's kind.  ``render`` emits a call of ``tdsl_fa``
(``tc_attention_kernel.py``) with the element offsets of Q/K/V rows of this block's (batch,
head) and of the mask's (query, key) elements as C++ lambdas (so strides and sequence
lengths stay what the IR says: constants or kernel parameters; a mask dimension of extent 1
is broadcast, index 0, so its stride drops out) and the output store (cast included) as
the epilogue lambda.

Requirements (a ``BuildError`` naming the kernel otherwise): one threadIdx.x loop of 128
threads around the pragma loop, Q/K/V/output 4-D with a unit stride along d, a valid key,
a mask read exactly where the key names one, 1- to 4-D, bool for a boolean key and of Q's
dtype for an additive one, with a constant stride along keys (compact: 1) under 2^24.
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


#: The user mask's kinds (the kernel's ``MASK`` template argument): none, additive (a
#: float added to the scaled scores), boolean (False: the key is left out).
MASK_NONE, MASK_ADD, MASK_BOOL = 0, 1, 2
#: The mask's stride along keys must be a constant below this: the kernel's offsets within
#: a key block are ints.
MAX_KEY_STRIDE = 1 << 24
_MASK_FIELD = {MASK_ADD: "madd", MASK_BOOL: "mbool"}


def attn_key(d: int, causal: bool, scale: float, mask: int = MASK_NONE) -> str:
    """The pragma value: e.g. ``"fa/d64/c1/s0.125"``, ``"fa/d64/c0/s0.125/mbool"`` (no
    fifth field without a mask: the unmasked key is what it was)."""
    key = f"fa/d{d}/c{int(bool(causal))}/s{float(scale)!r}"
    return key if mask == MASK_NONE else f"{key}/{_MASK_FIELD[mask]}"


def parse_key(value: Any) -> "Optional[tuple[int, bool, float, int]]":
    """(head size, causal, scale, mask kind) of a pragma value; None where malformed."""
    if not isinstance(value, str):
        return None
    try:
        fa, d, c, s, *rest = value.split("/")
        kinds = {f: k for k, f in _MASK_FIELD.items()}
        if fa != "fa" or d[0] != "d" or c not in ("c0", "c1") or s[0] != "s" or \
                len(rest) > 1 or (rest and rest[0] not in kinds):
            return None
        return int(d[1:]), c == "c1", float(s[1:]), kinds[rest[0]] if rest else MASK_NONE
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
    mask: Any = None          # the user mask's buffer (None: no mask)
    mask_kind: int = MASK_NONE

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
        for prefix, role in (("T_attn_qt", "q"), ("T_attn_score", "k"), ("T_attn_bacc", "v"),
                             ("T_attn_bmax", "m"), ("T_attn_prob", "m")):
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
    mask = _mask(kernel, got.get("m", []), key[3], dt)
    return FaPlan(loop, tx.var, q, k, v, out, key[0], key[1], key[2], dt, mask, key[3])


def _mask(kernel: str, bufs: list, kind: int, dt: str) -> Any:
    """The mask buffer of a kernel whose masked scores read ``bufs``, checked against the
    key's mask kind ``kind``."""
    if kind == MASK_NONE:
        if bufs:
            raise _fail(kernel, f"reads a mask ('{bufs[0].name}') its key does not name")
        return None
    if len(bufs) != 1:
        raise _fail(kernel, f"names a mask in its key but its masked scores read "
                            f"{len(bufs)} global buffers, not one")
    m = bufs[0]
    want = "bool" if kind == MASK_BOOL else dt
    if str(m.dtype) != want or m.ndim == 0 or m.ndim > 4:
        raise _fail(kernel, f"needs the mask '{m.name}' {want} (its key's kind) and 1- to "
                            f"4-D, got {m.dtype}, {m.ndim}-D")
    ext, stride = m.shape[-1], m.effective_strides()[-1]
    broadcast = isinstance(ext, Const) and ext.value == 1
    if not broadcast and not (isinstance(stride, Const) and abs(stride.value) < MAX_KEY_STRIDE):
        raise _fail(kernel, f"needs the stride of mask '{m.name}' along keys a constant "
                            f"under {MAX_KEY_STRIDE}, got {stride}")
    return m


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
        mtype, mref, moff = ctype, r.buffer_ref(plan.q), "fa_q_off"   # unused without a mask
        if plan.mask is not None:
            mtype, mref, moff = _render_mask(r, plan, bh, v_r, v_c), r.buffer_ref(plan.mask), \
                "fa_m_off"
        emit_dynamic_smem(r, ctype, "fa_smem", plan.smem_bytes)
        bf16 = "true" if plan.dtype == "bfloat16" else "false"
        causal = "true" if plan.causal else "false"
        refs = ", ".join(r.buffer_ref(b) for b in (plan.q, plan.k, plan.v))
        r.emit(f"tdsl_fa<{bf16}, {plan.d}, {causal}, {ctype}, {plan.mask_kind}, {mtype}>("
               f"{refs}, {mref}, fa_smem, (long long)({r.expr(sq)}), (long long)({r.expr(sk)}), "
               f"fa_i0, {plan.scale!r}f, fa_q_off, fa_k_off, fa_v_off, {moff}, fa_store);")


def _render_mask(r: Any, plan: FaPlan, bh: list, v_r: Var, v_c: Var) -> str:
    """Emit ``fa_m_off(query, key)``, the mask's element offset of (absolute) query row and
    key of this block's (batch, head) under PyTorch's broadcasting (the mask's dimensions
    align with (batch, head, query, key) from the right; one of extent 1 reads index 0);
    returns the mask's C element type."""
    m = plan.mask
    full = (*bh, v_r, v_c)[4 - m.ndim:]
    zero = Const(0, "int64")
    idx = tuple(zero if isinstance(e, Const) and e.value == 1 else i
                for e, i in zip(m.shape, full))
    off = r.flat_offset(m, idx)
    with r.names.scoped(v_r, "fa_row") as nr, r.names.scoped(v_c, "fa_col") as nc:
        r.emit(f"auto fa_m_off = [&](long long {nr}, long long {nc}) -> long long "
               f"{{ return {r.expr(off)}; }};")
    r.use_type(m.dtype)
    return "bool" if plan.mask_kind == MASK_BOOL else _DTYPES[plan.dtype]
