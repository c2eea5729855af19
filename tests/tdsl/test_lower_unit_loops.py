"""Single-iteration loops are dropped by ``simplify_stmt`` with one substitution per chain.

A nest of directly nested unit loops (the size-1 axes of a batch-1 tensor, a 1x1 conv's
kernel axes) used to rewrite the loop body once per loop; ``_drop_unit_loops`` binds every
variable of the chain and rewrites the innermost body once.  The result must be the same
program: no loop of extent 1 left, the variables replaced by their loops' starts.
"""
import numpy as np

import tdsl as td
from tdsl.lowering import passes
from tdsl.stmt import For, Stmt
from tdsl.visitor import post_order_visit


def _loops(func):
    out = []
    post_order_visit(func.body, lambda n: out.append(n) if isinstance(n, For) else None)
    return out


def _unit_nest(m):
    A = td.placeholder((1, 1, 1, m), "float32", name="A")
    B = td.compute((1, 1, 1, m), lambda a, b, c, d: A[a, b, c, d] * 2.0
                   + (a + b + c + 1).astype("float32"),
                   name="B")
    return A, B, td.create_schedule(B.op)


def test_nested_unit_loops_drop_with_one_body_substitution(monkeypatch):
    A, B, s = _unit_nest(13)
    calls = []
    real = passes.substitute

    def counting(node, vmap):
        if isinstance(node, Stmt):
            calls.append(sorted(v.name for v in vmap))
        return real(node, vmap)
    monkeypatch.setattr(passes, "substitute", counting)
    func = td.lower(s, [A, B])
    monkeypatch.undo()
    # the three unit loops (a, b, c) go in one rewrite of the innermost body
    assert len(calls) == 1 and len(calls[0]) == 3, calls
    loops = _loops(func)
    assert [int(lp.extent.value) for lp in loops] == [13]


def test_unit_loop_chains_run_correctly_at_several_sizes():
    """Static sizes that do and don't divide a vector width, and a symbolic one bound to
    several values (a unit-loop chain around a loop of variable extent)."""
    rng = np.random.default_rng(0)
    for m in (1, 8, 13):
        A, B, s = _unit_nest(m)
        f = td.build(s, [A, B])
        a = rng.standard_normal((1, 1, 1, m)).astype("float32")
        out = np.empty_like(a)
        f(a, out)
        np.testing.assert_allclose(out, a * 2 + 1, rtol=1e-6)
    n = td.var("n")
    A = td.placeholder((1, 1, n), "float32", name="A")
    B = td.compute((1, 1, n), lambda a, b, c: A[a, b, c] + A[a, b, (c + 1) % n], name="B")
    s = td.create_schedule(B.op)
    _, _, c = s[B].op.axis
    co, ci = s[B].split(c, factor=4)
    s[B].vectorize(ci)
    f = td.build(s, [A, B])
    for m in (1, 5, 16, 23):
        a = rng.standard_normal((1, 1, m)).astype("float32")
        out = np.empty_like(a)
        f(a, out)
        np.testing.assert_allclose(out, a + np.roll(a, -1, axis=2), rtol=1e-6)
