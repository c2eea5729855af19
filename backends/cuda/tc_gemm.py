"""The tensor-core GEMM microkernel: fp16/bf16 x fp16/bf16 -> fp32 on sm_80+.

The default schedule (``tdsl/ops/schedules/cuda_tc.py``) gives a matmul-family kernel the
loop nest ``blockIdx (batch, row tile, column tile) / threadIdx.x (128, the tile's
columns) / ii (the tile's rows, pragma "tdsl_tc_gemm")`` whose body is, per output, a
register accumulator's zero-init, the whole k loop ``acc += float(A[.., ii, k]) *
float(B[.., k, tx])`` and the epilogue stores.  ``find_plan`` recognizes that body in a
kernel's IR; ``render`` emits in its place a call of ``tdsl_tc_gemm`` (``tc_kernel.py``,
the hand-structured kernel: 4 warps of 64 x 64 outputs, a 4-stage cp.async pipeline of
128 x 32 and 32 x 128 tiles in XOR-swizzled dynamic shared memory, ldmatrix + mma.sync
m16n8k16, fp32 accumulators in registers) with the body's pieces as C++ lambdas over
fresh variables: the offsets of A's and B's elements (``a_off(row, k)``, ``b_off(k,
col)``, affine), the column guard of the body, and the epilogue (the body's stores, the
accumulator replaced by the value).  So bias, activation and cast run on the registers,
and the sizes stay whatever the IR says (constants or kernel parameters).
The tile shape is the pragma's value (``tc_config.TcConfig.key()``, 1 for the default);
a malformed or invalid one, or a threadIdx.x extent other than its columns, is refused.
A key naming a removed mainloop (``/basic``) is refused with the reason
(``tc_config.REMOVED_MAINLOOPS``).

Requirements checked here (a ``BuildError`` naming the kernel otherwise): A contiguous
along k (its last index is ``k``), B contiguous along its columns (``B[.., k, j]``, the
row layout, ldmatrix.trans) or along k (``B[.., j, k]``, a ``dense`` weight, the column
layout), guards that depend on the column only, one k loop from 0.  At run time the
kernel checks 16-byte alignment of both operands and their row strides once; where it
fails (e.g. K = 100 halves: 200-byte rows) the tiles are filled element by element with
plain loads (same ldmatrix/mma path), and chunks that straddle a tail are filled that
way too; chunks wholly outside the matrix are zero-filled in shared memory.

A second pragma on the row loop, ``tdsl_tc_gather_b`` (the fp16/bf16 conv2d default,
``ops/schedules/cuda_tc_conv.py``), makes B a gather: any fp16/bf16 expression of k and
the column (the implicit im2col of a padded NCHW input: a load under the padding guard,
its indices div/mod of the fused reduction and pixel loops by constants).  It is rendered
as the lambda ``tc_b_val(k, col)`` (``int`` arguments in their ranges, so that arithmetic
is 32-bit ``/`` and ``%`` of non-negative values) and the kernel fills B's row-layout tile
element by element with it (``tc_kernel.py``); A must then be a load whose flat offset, the
fused loops' div/mod merged back (``vectorize.merge_div_mod``), steps by 1 along k and by a
constant along the row (OIHW weights: ``o * C KH KW + k``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from tdsl.errors import BuildError
from tdsl.expr import Add, BufferLoad, Cast, Const, Expr, Mul, Var
from tdsl.stmt import (Allocate, BufferStore, For, ForKind, IfThenElse, SeqStmt, Stmt,
                       StorageScope, ThreadTag)
from tdsl.visitor import free_vars, substitute, transform

from tdsl.ops.schedules.tc_config import TcConfig, parse

PRAGMA = "pragma_tdsl_tc_gemm"
#: A second pragma on the same loop: B is gathered element-wise (``TcPlan.gather``).
GATHER_PRAGMA = "pragma_tdsl_tc_gather_b"
_DTYPES = {"float16": "tdsl_half", "bfloat16": "tdsl_bf16"}


@dataclass
class TcPlan:
    """What ``render`` needs of a recognized kernel body."""

    loop: For                 # the pragma loop (rows of the tile)
    tx: Var                   # the threadIdx.x variable (columns of the tile)
    k: For                    # the reduction loop
    a: BufferLoad             # A[..., row, k]
    b: BufferLoad             # B[..., k, col] (row layout) or B[..., col, k]
    b_row: bool               # B contiguous along the columns
    col_conds: list           # guards of the accumulation (depend on the column only)
    epilogue: list            # (guards, store) after the k loop, in order
    acc: Any                  # the accumulator buffer (local)
    dtype: str                # "float16" | "bfloat16"
    cfg: TcConfig             # the tile shape (the pragma's value)
    #: B as a gather (pragma ``tdsl_tc_gather_b``): any fp16/bf16 expression of k and the
    #: column (an implicit im2col: a padded input's guarded load), filled element-wise into
    #: the row-layout B tile; ``b`` is then that expression and A's offset is checked
    #: (and rendered) as its flat offset with fused loops' div/mod merged back
    gather: Optional[Expr] = None

    @property
    def smem_bytes(self) -> int:
        return self.cfg.smem_bytes


def _fail(kernel: str, why: str) -> BuildError:
    return BuildError(f"CUDA kernel '{kernel}': the tensor-core GEMM body (pragma tdsl_tc_gemm) "
                      f"{why}")


def single_thread_x(path: "list[For]", fail: "Callable[[str], BuildError]") -> For:
    """The one threadIdx.x loop of ``path`` (the thread-bound loops around a tensor-core
    body); ``fail(why)`` is the error when there is not exactly one, or a y/z loop."""
    txs = [p for p in path if p.thread_tag is ThreadTag.THREAD_X]
    if len(txs) != 1 or any(p.thread_tag in (ThreadTag.THREAD_Y, ThreadTag.THREAD_Z)
                            for p in path):
        raise fail("must sit under one threadIdx.x loop (and no threadIdx.y/z)")
    return txs[0]


def emit_dynamic_smem(r: Any, ctype: str, name: str, nbytes: int) -> None:
    """Declare ``name``, a ``ctype*`` to the kernel's dynamic shared memory (a static
    ``tdsl_shared`` array of ``nbytes`` under the emulator, which has no dynamic kind)."""
    r.emit("#ifndef TDSL_EMULATION")
    r.emit("extern __shared__ __align__(128) unsigned char tdsl_dyn_smem[];")
    r.emit(f"{ctype}* {name} = ({ctype}*)tdsl_dyn_smem;")
    r.emit("#else")
    r.emit(f"__shared__ tdsl_shared<{ctype}, {nbytes // 2}> {name}_arr;")
    r.emit(f"auto {name} = {name}_arr.ptr(0);")
    r.emit("#endif")


def _find(root: Stmt, pragma: str = PRAGMA) -> "tuple[Optional[For], list[For]]":
    """The loop carrying ``pragma`` and the thread-bound loops around it."""
    path: list[For] = []

    def go(s: Any) -> "Optional[For]":
        if isinstance(s, For):
            if pragma in s.annotations:
                return s
            if s.kind is ForKind.THREAD_BINDING:
                path.append(s)
                got = go(s.body)
                if got is None:
                    path.pop()
                return got
            return go(s.body)
        if isinstance(s, SeqStmt):
            for x in s.stmts:
                got = go(x)
                if got is not None:
                    return got
            return None
        if isinstance(s, (IfThenElse,)):
            return go(s.then_case) or (go(s.else_case) if s.else_case is not None else None)
        body = getattr(s, "body", None)
        return go(body) if body is not None else None
    return go(root), path


def _leaves(s: Stmt, conds: list, out: list, kernel: str) -> None:
    """Flatten ifs (no else), allocations and sequences into (guards, statement)."""
    if isinstance(s, SeqStmt):
        for x in s.stmts:
            _leaves(x, conds, out, kernel)
    elif isinstance(s, IfThenElse):
        if s.else_case is not None:
            raise _fail(kernel, "has an if with an else branch")
        _leaves(s.then_case, conds + [s.cond], out, kernel)
    elif isinstance(s, Allocate):
        if s.buffer.scope is not StorageScope.LOCAL:
            raise _fail(kernel, f"allocates {s.buffer.scope} buffer '{s.buffer.name}'")
        _leaves(s.body, conds, out, kernel)
    elif isinstance(s, (BufferStore, For)):
        out.append((conds, s))
    else:
        raise _fail(kernel, f"contains a {type(s).__name__}")


def _operand(e: Expr) -> "Optional[BufferLoad]":
    if isinstance(e, Cast) and str(e.dtype) == "float32":
        e = e.value
    return e if isinstance(e, BufferLoad) and str(e.dtype) in _DTYPES else None


def _uses(e: Any, v: Var) -> bool:
    """Does ``e`` (an expression, a statement or a sequence of them) use ``v``?"""
    items = e if isinstance(e, (tuple, list)) else (e,)
    return any(v in free_vars(x) for x in items)


def find_plan(root: Stmt, kernel: str) -> Optional[TcPlan]:
    """The plan of a kernel carrying the pragma, None for any other kernel."""
    loop, path = _find(root)
    if loop is None:
        return None
    tx = single_thread_x(path, lambda why: _fail(kernel, why))
    cfg = parse(loop.annotations[PRAGMA])
    if cfg is None or cfg.error() is not None:
        why = "is malformed" if cfg is None else f"is not a valid tile shape: {cfg.error()}"
        raise _fail(kernel, f"value {loop.annotations[PRAGMA]!r} {why}")
    if not (isinstance(tx.extent, Const) and tx.extent.value == cfg.threads and
            isinstance(tx.min, Const) and tx.min.value == 0):
        raise _fail(kernel, f"needs threadIdx.x to run over exactly {cfg.threads} threads "
                            f"(the columns of its {cfg.key()} tile)")
    if not (isinstance(loop.min, Const) and loop.min.value == 0):
        raise _fail(kernel, "has a row loop that does not start at 0")
    leaves: list = []
    _leaves(loop.body, [], leaves, kernel)
    ks = [n for n, (_, s) in enumerate(leaves) if isinstance(s, For)]
    if len(ks) != 1:
        raise _fail(kernel, f"must have exactly one k loop, found {len(ks)}")
    at = ks[0]
    kconds, kloop = leaves[at]
    if not (isinstance(kloop.min, Const) and kloop.min.value == 0):
        raise _fail(kernel, "has a k loop that does not start at 0")
    inner: list = []
    _leaves(kloop.body, list(kconds), inner, kernel)
    if len(inner) != 1 or not isinstance(inner[0][1], BufferStore):
        raise _fail(kernel, "must have one accumulation statement in its k loop")
    conds, upd = inner[0]
    acc = upd.buffer
    if acc.scope is not StorageScope.LOCAL or str(acc.dtype) != "float32":
        raise _fail(kernel, "must accumulate in a float32 register")
    val = upd.value
    if not (isinstance(val, Add) and isinstance(val.a, BufferLoad) and val.a.buffer is acc
            and isinstance(val.b, Mul)):
        raise _fail(kernel, "must accumulate acc = acc + float(A) * float(B)")
    k, row, col = kloop.var, loop.var, tx.var
    if GATHER_PRAGMA in loop.annotations:
        return _gather_plan(kernel, loop, tx.var, kloop, val.b, leaves, at, conds, acc, cfg)
    x, y = _operand(val.b.a), _operand(val.b.b)
    if x is None or y is None or str(x.dtype) != str(y.dtype):
        raise _fail(kernel, "must multiply two float16 or two bfloat16 loads")
    a, b = (x, y) if _uses(x.indices, row) else (y, x)
    if _uses(a.indices, col) or _uses(b.indices, row) or not _uses(a.indices, row) or \
            not _uses(b.indices, col):
        raise _fail(kernel, "must read A by row and k, B by k and column")
    if not (a.indices[-1] is k and not _uses(a.indices[:-1], k) and _unit_last(a)):
        raise _fail(kernel, f"needs '{a.buffer.name}' contiguous along k (A[..., i, k])")
    if b.indices[-1] is k and not _uses(b.indices[:-1], k) and _unit_last(b):
        b_row = False
    elif len(b.indices) >= 2 and b.indices[-2] is k and not _uses(b.indices[-1], k) and \
            not _uses(b.indices[:-2], k) and _unit_last(b):
        b_row = True
    else:
        raise _fail(kernel, f"needs '{b.buffer.name}' contiguous along k or along the columns")
    for load in (a, b):
        if not _affine(load.indices, (row, col, k)):
            raise _fail(kernel, f"reads '{load.buffer.name}' at {list(load.indices)!r}, not affine "
                                f"in the row, column and k (the kernel steps its addresses by "
                                f"constant strides)")
    epilogue = _rest(kernel, leaves, at, conds, acc, row, k)
    return TcPlan(loop, tx.var, kloop, a, b, b_row, list(conds), epilogue, acc, str(a.dtype),
                  cfg)


def _rest(kernel: str, leaves: list, at: int, conds: list, acc: Any, row: Var,
          k: Var) -> list:
    """The epilogue (the leaves after the k loop), after checking the accumulation guards
    (the column only) and that the leaves before the k loop only zero the accumulator."""
    for c in conds:
        if _uses(c, row) or _uses(c, k):
            raise _fail(kernel, f"has an accumulation guard that depends on the row or k: {c!r}")
    for n, (_, s) in enumerate(leaves):
        if n < at and not (isinstance(s, BufferStore) and s.buffer is acc and
                           isinstance(s.value, Const) and s.value.value == 0):
            raise _fail(kernel, "must only zero its accumulator before the k loop")
    epilogue = [leaf for leaf in leaves[at + 1:]]
    for _, s in epilogue:
        if not isinstance(s, BufferStore) or _uses(s, k):
            raise _fail(kernel, "must end with stores after the k loop")
    return epilogue


def _gather_plan(kernel: str, loop: For, col: Var, kloop: For, prod: Mul, leaves: list,
                 at: int, conds: list, acc: Any, cfg: TcConfig) -> TcPlan:
    """The plan of a body whose B is a gather (``TcPlan.gather``): A a load whose flat
    offset, fused loops' div/mod merged back, steps by 1 along k and by a constant along
    the row; B any fp16/bf16 expression of k and the column, not of the row."""
    row, k = loop.var, kloop.var
    x, y = _strip(prod.a), _strip(prod.b)
    if x is None or y is None or str(x.dtype) != str(y.dtype):
        raise _fail(kernel, "must multiply two float16 or two bfloat16 values")
    a, b = (x, y) if _uses(x, row) else (y, x)
    if not isinstance(a, BufferLoad) or _uses(a, col) or _uses(b, row) or \
            not _uses(b, col) or not _uses(b, k):
        raise _fail(kernel, "must read A (a load) by row and k, gather B by k and column")
    off = a_offset(a)
    from tdsl.arith import Analyzer
    ana = Analyzer()
    dk = ana.simplify(substitute(off, {k: k + Const(1, k.dtype)}) - off)
    dr = ana.simplify(substitute(off, {row: row + Const(1, row.dtype)}) - off)
    if not (isinstance(dk, Const) and dk.value == 1) or _uses(dr, row) or _uses(dr, k):
        raise _fail(kernel, f"reads '{a.buffer.name}' at {list(a.indices)!r}, not contiguous "
                            f"along k with a constant row stride")
    epilogue = _rest(kernel, leaves, at, conds, acc, row, k)
    return TcPlan(loop, col, kloop, a, a, True, list(conds), epilogue, acc, str(a.dtype), cfg,
                  gather=b)


def _strip(e: Expr) -> "Optional[Expr]":
    """An fp16/bf16 operand under its float32 cast, None for anything else."""
    if isinstance(e, Cast) and str(e.dtype) == "float32":
        e = e.value
    return e if str(e.dtype) in _DTYPES else None


def a_offset(a: BufferLoad) -> Expr:
    """The flat element offset of load ``a``, the div/mod of fused loops merged back (the
    weights' ``[o, k // 9, k // 3 % 3, k % 3]`` is ``o * 9 C + k``)."""
    from tdsl.arith import Analyzer

    from .vectorize import merge_div_mod
    ana = Analyzer()
    total: Any = None
    for ix, stride in zip(a.indices, a.buffer.effective_strides()):
        ix = ix if str(ix.dtype) == "int64" else Cast(ix, "int64")
        term = ix if isinstance(stride, Const) and stride.value == 1 else ix * stride
        total = term if total is None else total + term
    return merge_div_mod(ana.simplify(total), ana)


def _affine(indices: Any, vs: tuple) -> bool:
    """Is every index affine in ``vs``: does a unit step of each leave a difference free of
    them (no floor division or product of two of them)?"""
    from tdsl.arith import Analyzer
    ana = Analyzer()
    for e in indices:
        for v in vs:
            if not _uses(e, v):
                continue
            d = ana.simplify(substitute(e, {v: v + Const(1, v.dtype)}) - e)
            if any(_uses(d, w) for w in vs):
                return False
    return True


def _unit_last(load: BufferLoad) -> bool:
    s = load.buffer.effective_strides()[-1]
    return isinstance(s, Const) and s.value == 1


def _replace_acc(e: Any, acc: Any, value: Var) -> Any:
    """``e`` with every load of the accumulator replaced by ``value``."""
    return transform(e, pre=lambda n: value if isinstance(n, BufferLoad) and n.buffer is acc
                     else None)


def _render_gather(r: Any, plan: TcPlan, sub: dict, v_k: Var, v_c: Var, ctype: str) -> None:
    """The lambda ``tc_b_val(k, col)``: the gathered B's value.  k and the column are
    ``int`` in their ranges (``[0, K)``, the tile's columns), so the div/mod of fused loops
    by constants render as 32-bit ``/`` and ``%`` of non-negative values where their
    operands are (not the floor helpers on 64 bits)."""
    from tdsl.tensor import Range
    zero = Const(0, "int64")
    with r.ana.bind(v_k, Range(zero, plan.k.extent)), \
            r.ana.bind(v_c, Range(zero, Const(plan.cfg.bn, "int64"))), \
            r.names.scoped(v_k, "tc_k") as nk, r.names.scoped(v_c, "tc_col") as nc:
        r.emit(f"auto tc_b_val = [&](int {nk}, int {nc}) -> {ctype} "
               f"{{ return {r.expr(substitute(plan.gather, sub))}; }};")


def render(r: Any, plan: TcPlan) -> None:
    """Emit the microkernel call for ``plan`` in place of its loop (``r``: KernelRenderer)."""
    r.helpers.add("tc_gemm")
    r.helpers.add("shared")
    r.use_type(plan.a.dtype)
    ctype = _DTYPES[plan.dtype]
    v_r, v_c, v_k = (Var(n, "int64") for n in ("tc_row", "tc_col", "tc_k"))
    v_acc = Var("tc_v", "float32")
    sub = {plan.loop.var: v_r, plan.tx: v_c, plan.k.var: v_k}
    if plan.gather is None:
        a_off = r.flat_offset(plan.a.buffer, tuple(substitute(i, sub) for i in plan.a.indices))
        b_off = r.flat_offset(plan.b.buffer, tuple(substitute(i, sub) for i in plan.b.indices))
    else:
        a_off = substitute(a_offset(plan.a), sub)
        b_off = Const(0, "int64")
    cond: Any = None
    for c in plan.col_conds:
        c = substitute(c, sub)
        cond = c if cond is None else cond & c
    r.emit("// tensor-core GEMM microkernel (tdsl_tc_gemm, tc_kernel.py) for the tile's loop nest")
    with r.block(""):
        r.emit(f"const long long tc_rows = {r.expr(plan.loop.extent)};")
        r.emit(f"const long long tc_K = {r.expr(plan.k.extent)};")
        with r.names.scoped(v_r, "tc_row") as nr, r.names.scoped(v_k, "tc_k") as nk:
            r.emit(f"auto tc_a_off = [&](long long {nr}, long long {nk}) -> long long "
                   f"{{ return {r.expr(a_off)}; }};")
        with r.names.scoped(v_k, "tc_k") as nk, r.names.scoped(v_c, "tc_col") as nc:
            r.emit(f"auto tc_b_off = [&](long long {nk}, long long {nc}) -> long long "
                   f"{{ return {r.expr(b_off)}; }};")
        if plan.gather is not None:
            _render_gather(r, plan, sub, v_k, v_c, ctype)
        with r.names.scoped(v_c, "tc_col") as nc:
            ok = "true" if cond is None else r.expr(cond)
            r.emit(f"auto tc_col_ok = [&](long long {nc}) -> bool {{ return {ok}; }};")
        with r.names.scoped(v_r, "tc_row") as nr, r.names.scoped(v_c, "tc_col") as nc, \
                r.names.scoped(v_acc, "tc_v") as nv:
            r.emit(f"auto tc_epilogue = [&](long long {nr}, long long {nc}, float {nv}) {{")
            r.depth += 1
            for conds, store in plan.epilogue:
                s: Stmt = BufferStore(store.buffer, _replace_acc(store.value, plan.acc, v_acc),
                                      store.indices)
                for c in reversed(conds):
                    s = IfThenElse(c, s)
                r.stmt(substitute(s, sub))
            r.depth -= 1
            r.emit("};")
        a_ptr, b_ptr = r.buffer_ref(plan.a.buffer), r.buffer_ref(plan.b.buffer)
        emit_dynamic_smem(r, ctype, "tc_smem", plan.smem_bytes)
        bf16 = "true" if plan.dtype == "bfloat16" else "false"
        brow = "true" if plan.b_row else "false"
        c = plan.cfg
        shape = f"{c.bm}, {c.bn}, {c.wm}, {c.wn}, {c.stages}"
        if plan.gather is None:
            r.emit(f"tdsl_tc_gemm<{bf16}, {brow}, {shape}, {ctype}>({a_ptr}, {b_ptr}, tc_smem, "
                   f"tc_rows, tc_K, tc_a_off, tc_b_off, tc_col_ok, tc_epilogue);")
        else:    # B's pointer is not read (the gather lambda reads the input)
            r.emit(f"tdsl_tc_gemm<{bf16}, true, {shape}, {ctype}>({a_ptr}, {a_ptr}, tc_smem, "
                   f"tc_rows, tc_K, tc_a_off, tc_b_off, tc_col_ok, tc_epilogue, tc_b_val);")
