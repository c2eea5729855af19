"""Lowering skips the iterations of a loop that store nothing outliving them
(``tdsl/lowering/idle_iterations.py``): a reduction whose ``where=`` excludes whole
iterations of its (outer) reduce loop no longer computes the stages attached inside them;
a guard that reads data is never hoisted."""
import numpy as np

import pytest

import tdsl as td
import tdsl.interpreter
from tdsl.stmt import Allocate, For, IfThenElse
from tdsl.visitor import post_order_visit


def _loop(func, name):
    found = []
    post_order_visit(func.body, lambda n: found.append(n)
                     if isinstance(n, For) and n.var.name == name else None)
    assert len(found) == 1, [f.var.name for f in found]
    return found[0]


def _peel(s):
    while isinstance(s, Allocate):
        s = s.body
    return s


def _triangle(where):
    """Y[i] = sum over k of T[k, i] (T = 2 A, attached in the k loop) where ``where``."""
    n = 16
    A = td.placeholder((n, n), name="A")
    T = td.compute((n, n), lambda k, i: A[k, i] * 2.0, name="T")
    k = td.reduce_axis((0, n), name="k")
    Y = td.compute((n,), lambda i: td.sum(T[k, i], axis=k, where=where(T, k, i)), name="Y")
    s = td.create_schedule(Y.op)
    (i,) = Y.op.axis
    s[Y].reorder(Y.op.reduce_axis[0], i)
    s[T].compute_at(s[Y], Y.op.reduce_axis[0])
    return s, [A, Y]


def _check(s, args, expected_fn):
    a = np.random.default_rng(0).standard_normal((16, 16)).astype("float32")
    exp = expected_fn(a)
    out = np.full(16, 7.0, "float32")
    td.build(s, args, target="llvm")(a, out)
    np.testing.assert_allclose(out, exp, rtol=1e-5, atol=1e-5)
    out = np.full(16, 7.0, "float32")
    tdsl.interpreter.run(td.lower(s, args), a, out)
    np.testing.assert_allclose(out, exp, rtol=1e-5, atol=1e-5)


def test_reduce_iterations_excluded_by_where_skip_their_attached_stages():
    s, args = _triangle(lambda T, k, i: k * 2 <= i)
    body = _peel(_loop(td.lower(s, args), "k").body)
    assert isinstance(body, IfThenElse), body          # k >= 8 contributes nothing
    _check(s, args, lambda a: np.array(
        [sum(2 * a[k, i] for k in range(16) if 2 * k <= i) for i in range(16)], "float32"))


def test_a_guard_on_data_is_not_hoisted():
    s, args = _triangle(lambda T, k, i: T[k, i] > 0.0)
    body = _peel(_loop(td.lower(s, args), "k").body)
    assert not isinstance(body, IfThenElse), body      # T is computed in the iteration
    _check(s, args, lambda a: np.where(a > 0, 2 * a, 0).sum(axis=0).astype("float32"))


def test_causal_attention_skips_key_blocks_above_the_diagonal():
    from tdsl import ops
    q, k, v = (td.placeholder((1, 1, n, 16), name=x) for x, n in (("q", 256), ("k", 256),
                                                                   ("v", 256)))
    o = ops.attention(q, k, v, causal=True)
    body = _peel(_loop(td.lower(ops.schedule(o, "llvm"), [q, k, v, o]), "kb").body)
    assert isinstance(body, IfThenElse), body


@pytest.mark.parametrize("variant", ["staged", "thread"])
def test_cuda_attention_skips_key_blocks_with_a_block_uniform_guard(variant):
    """The CUDA schedules fill shared tiles between barriers inside the key-block loop (and
    the staged one all-reduces the block max and sum there): the skip guard is the
    per-query condition relaxed over the block's threads (no thread var in it), so a whole
    block skips a key block or none of it does -- but not over the block index, which all
    of a block's threads share (relaxed over it too, the guard held for every block but
    the last key blocks of the sequence, and no causal block was skipped)."""
    from tdsl import ops
    from tdsl.ops.schedules.cuda_attention import attention_schedule
    from tdsl.stmt import Barrier
    from tdsl.visitor import free_vars
    q, k, v = (td.placeholder((1, 2, n, 64), name=x) for x, n in (("q", 200), ("k", 300),
                                                                   ("v", 300)))
    o = ops.attention(q, k, v, causal=True)
    func = td.lower(attention_schedule(o, variant), [q, k, v, o])
    body = _peel(_loop(func, "kb").body)
    assert isinstance(body, IfThenElse), body
    barriers = []
    post_order_visit(body, lambda n: barriers.append(n) if isinstance(n, Barrier) else None)
    assert barriers
    names = {x.name for x in free_vars(body.cond)}
    assert not any("inner" in n for n in names), body.cond
    assert any("fused" in n for n in names), body.cond     # the block index


def test_a_body_with_a_barrier_gets_a_guard_free_of_thread_vars():
    """``for t in threadIdx.x: for k: [T = ..; sync_threads(); if k <= t: Y[t] += T]``: the
    iterations with ``k > 63`` store nothing for any thread; the skip guard is relaxed over
    ``t`` (``k <= 63``) so no thread skips the barrier the others wait at."""
    from tdsl.expr import Const, Var
    from tdsl.lowering.idle_iterations import skip_idle_iterations
    from tdsl.stmt import Barrier, Buffer, BufferStore, ForKind, SeqStmt
    from tdsl.visitor import free_vars
    t, k = Var("t", "int64"), Var("k", "int64")
    tmp = Buffer("T", (1,), "float32", scope="local")
    y = Buffer("Y", (64,), "float32")
    zero = Const(0, "int64")
    body = Allocate(tmp, SeqStmt([
        BufferStore(tmp, Const(1.0, "float32"), [zero]),
        Barrier(),
        IfThenElse(k <= t, BufferStore(y, Const(2.0, "float32"), [t]))]))
    loop = For(k, zero, Const(128, "int64"), ForKind.SERIAL, body)
    root = For(t, zero, Const(64, "int64"), ForKind.THREAD_BINDING, loop,
               thread_tag="threadIdx.x")
    out = skip_idle_iterations(root).body.body
    assert isinstance(out, IfThenElse), out
    assert {v.name for v in free_vars(out.cond)} == {"k"}, out.cond
