"""Tail guards outside the k loop and reduction outputs accumulated in registers
(backends/cuda/accumulate.py): the emitted source has no global access of C inside the k
loop, and the kernels match NumPy under the emulator at sizes that don't divide the tiles."""
from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

import tdsl as td
from tdsl.backends.cuda.accumulate import hoist_guards, promote_accumulators
from tdsl.stmt import Allocate, BufferStore, For, IfThenElse, StorageScope
from tdsl.visitor import post_order_visit

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")


def _naive(n, m, k, tile=16):
    A = td.placeholder((n, k), name="A")
    B = td.placeholder((k, m), name="B")
    r = td.reduce_axis((0, k), name="k")
    C = td.compute((n, m), lambda i, j: td.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = td.create_schedule(C.op)
    i, j = s[C].op.axis
    io, ii = s[C].split(i, factor=tile)
    jo, ji = s[C].split(j, factor=tile)
    s[C].reorder(io, jo, ii, ji)
    s[C].bind(io, td.thread_axis("blockIdx.y"))
    s[C].bind(jo, td.thread_axis("blockIdx.x"))
    s[C].bind(ii, td.thread_axis("threadIdx.y"))
    s[C].bind(ji, td.thread_axis("threadIdx.x"))
    return s, [A, B, C]


def _tiled_shared(n, m, k, tile=8, kt=4):
    """Shared-memory tiles of A and B, C updated in global memory (no cache_write): the
    tail guard cannot leave the k loop (barriers), the accumulator still can."""
    A = td.placeholder((n, k), name="A")
    B = td.placeholder((k, m), name="B")
    r = td.reduce_axis((0, k), name="k")
    C = td.compute((n, m), lambda i, j: td.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = td.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    i, j = s[C].op.axis
    io, ii = s[C].split(i, factor=tile)
    jo, ji = s[C].split(j, factor=tile)
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=kt)
    s[C].reorder(io, jo, ii, ji, ko, ki)
    for ax, tag in ((io, "blockIdx.y"), (jo, "blockIdx.x"), (ii, "threadIdx.y"), (ji, "threadIdx.x")):
        s[C].bind(ax, td.thread_axis(tag))
    for X in (AS, BS):
        s[X].compute_at(s[C], ko)
        f = s[X].fuse(*s[X].op.axis)
        fo, fi = s[X].split(f, factor=tile)
        s[X].bind(fi, td.thread_axis("threadIdx.x"))
        fo2, fo1 = s[X].split(fo, factor=tile)
        s[X].bind(fo1, td.thread_axis("threadIdx.y"))
    return s, [A, B, C]


def _k_loop_body(src: str) -> str:
    """The text of the ``for (... k ...)`` loop's body in the kernel source."""
    m = re.search(r"for \([^;]*\bk\w*\s*=[^)]*\) \{", src)
    assert m, src
    depth, i = 1, m.end()
    while depth:
        depth += {"{": 1, "}": -1}.get(src[i], 0)
        i += 1
    return src[m.end():i - 1]


def _global_c(body: str) -> list[str]:
    return re.findall(r"(?<![\w.])C\[", body)


def test_naive_tail_guard_outside_k_loop_and_c_in_register():
    s, args = _naive(1000, 1000, 1000)
    f = td.build(s, args, target="cuda")
    src = f.get_source()
    body = _k_loop_body(src)
    assert _global_c(body) == [], body            # no load or store of C per k step
    assert "if (" not in body, body               # the guard is outside the loop
    assert src.count("C[") == 1                   # one store of the result
    assert "C_acc" in body


@needs_gxx
@pytest.mark.parametrize("n,m,k", [(37, 45, 19), (16, 32, 8), (33, 17, 1)])
def test_naive_tail_matches_numpy(n, m, k):
    s, args = _naive(n, m, k)
    f = td.build(s, args, target="cuda")
    g = np.random.default_rng(n * m + k)
    a = g.standard_normal((n, k)).astype("float32")
    b = g.standard_normal((k, m)).astype("float32")
    c = np.full((n, m), np.nan, "float32")
    f.emulate(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@needs_gxx
@pytest.mark.parametrize("n,m,k", [(19, 13, 10), (16, 16, 8)])
def test_shared_tiles_global_c_in_register(n, m, k):
    s, args = _tiled_shared(n, m, k)
    f = td.build(s, args, target="cuda")
    src = f.get_source()
    body = _k_loop_body(src)
    assert "__syncthreads" in body
    assert _global_c(body) == [], body
    g = np.random.default_rng(n + m + k)
    a = g.standard_normal((n, k)).astype("float32")
    b = g.standard_normal((k, m)).astype("float32")
    c = np.full((n, m), np.nan, "float32")
    f.emulate(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


# ---- the passes on IR ----------------------------------------------------------------------------
def _kernel_ir(s, args):
    f = td.lower(s, args)
    return f.body


def test_hoist_keeps_guards_around_barriers():
    s, args = _tiled_shared(19, 13, 10)
    out = hoist_guards(_kernel_ir(s, args))
    # every barrier is still outside any guard of the output's tail
    def check(n, guarded):
        from tdsl.stmt import Barrier
        if isinstance(n, Barrier):
            assert not guarded
        if isinstance(n, IfThenElse):
            check(n.then_case, True)
            if n.else_case is not None:
                check(n.else_case, True)
            return
        from tdsl.visitor import children
        for c in children(n):
            check(c, guarded)
    check(out, False)


def test_no_promotion_when_loop_reads_another_element():
    """``C[i] = 0; for k: C[i] = C[i] + C[0]``: a read of another element of C in the loop
    may alias the accumulated one, so it stays in memory."""
    n = 8
    from tdsl.expr import BufferLoad, Const, Var
    from tdsl.stmt import Buffer, ForKind, SeqStmt
    C = Buffer("C", [n], "float32")
    i, k = Var("i", "int32"), Var("k", "int32")
    upd = BufferStore(C, BufferLoad(C, [i]) + BufferLoad(C, [Const(0, "int32")]), [i])
    body = SeqStmt([BufferStore(C, Const(0.0, "float32"), [i]),
                    For(k, Const(0, "int32"), Const(4, "int32"), ForKind.SERIAL, upd)])
    assert promote_accumulators(body) is not None
    allocs = []
    post_order_visit(promote_accumulators(body), lambda x: allocs.append(x)
                     if isinstance(x, Allocate) else None)
    assert allocs == []
    # the same loop without the aliasing read is promoted
    upd2 = BufferStore(C, BufferLoad(C, [i]) + Const(1.0, "float32"), [i])
    body2 = SeqStmt([BufferStore(C, Const(0.0, "float32"), [i]),
                     For(k, Const(0, "int32"), Const(4, "int32"), ForKind.SERIAL, upd2)])
    post_order_visit(promote_accumulators(body2), lambda x: allocs.append(x)
                     if isinstance(x, Allocate) else None)
    assert [a.buffer.scope for a in allocs] == [StorageScope.LOCAL]
