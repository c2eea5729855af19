"""Structural equality and hashing: alpha-equivalence, buffers by layout, compute graphs."""
import os
import subprocess
import sys

import tdsl as td
from tdsl.expr import BufferLoad, Const, Var
from tdsl.stmt import Allocate, Buffer, BufferStore, For, ForKind, LetStmt, PrimFunc, SeqStmt
from tdsl.structural import structural_equal, structural_hash


def copy_func(names=("n", "A", "B", "i", "j", "T"), extent=16, scope="local", kind=None,
              dtype="float32", annotations=None):
    """B[i, j] = A[i, j] * 2 through a temporary, every name configurable."""
    n_name, a_name, b_name, i_name, j_name, t_name = names
    n = td.var(n_name)
    A = Buffer(a_name, (n, extent), dtype)
    B = Buffer(b_name, (n, extent), dtype)
    T = Buffer(t_name, (extent,), dtype, scope=scope)
    i, j = Var(i_name), Var(j_name)
    body = For(i, 0, n, kind or ForKind.PARALLEL, Allocate(T, SeqStmt([
        For(j, 0, extent, ForKind.SERIAL,
            BufferStore(T, BufferLoad(A, [i, j]) * Const(2, dtype), [j])),
        For(j, 0, extent, ForKind.VECTORIZED, BufferStore(B, BufferLoad(T, [j]), [i, j]),
            annotations=annotations),
    ])))
    return PrimFunc("f_" + n_name, [A, B], body, [n], {n: (0, 0)})


def test_functions_equal_up_to_names():
    a = copy_func()
    b = copy_func(("m", "X", "Y", "x", "y", "tmp"))
    assert structural_equal(a, b)
    assert structural_hash(a) == structural_hash(b)
    assert len(structural_hash(a)) == 32 and int(structural_hash(a), 16) >= 0


def test_any_structural_difference_changes_equality_and_hash():
    base = copy_func()
    variants = [copy_func(extent=8), copy_func(scope="shared"),
                copy_func(kind=ForKind.SERIAL), copy_func(dtype="float16"),
                copy_func(annotations={"pragma_unroll_explicit": 1})]
    hashes = {structural_hash(base)}
    for v in variants:
        assert not structural_equal(base, v)
        hashes.add(structural_hash(v))
    assert len(hashes) == len(variants) + 1


def test_binding_position_not_identity():
    # Reusing one Var object for two sibling loops equals using two distinct Vars.
    buf = Buffer("A", (4,), "int32")
    i, j = Var("i"), Var("j")
    store = lambda v: BufferStore(buf, Const(1, "int32"), [v])  # noqa: E731
    one_var = SeqStmt([For(i, 0, 4, ForKind.SERIAL, store(i)),
                       For(i, 0, 4, ForKind.SERIAL, store(i))])
    two_vars = SeqStmt([For(i, 0, 4, ForKind.SERIAL, store(i)),
                        For(j, 0, 4, ForKind.SERIAL, store(j))])
    assert structural_equal(one_var, two_vars)
    # ...but a loop body using the *outer* variable is different from using its own.
    outer = For(i, 0, 4, ForKind.SERIAL, For(j, 0, 4, ForKind.SERIAL, store(i)))
    inner = For(i, 0, 4, ForKind.SERIAL, For(j, 0, 4, ForKind.SERIAL, store(j)))
    assert not structural_equal(outer, inner)
    assert structural_hash(outer) != structural_hash(inner)


def test_free_variables_map_in_order_of_first_occurrence():
    a, b, c, d = Var("a"), Var("b"), Var("c"), Var("d")
    assert structural_equal(a + b * a, c + d * c)
    assert not structural_equal(a + b * a, c + d * d)
    assert structural_hash(a - b) == structural_hash(b - a)  # both "first - second"
    assert not structural_equal(td.var("n") + 1, Var("n") + 1)  # SizeVar is not Var


def test_let_and_expressions():
    x, y = Var("x"), Var("y")
    buf = Buffer("A", (4,), "int64")
    s1 = LetStmt(x, Const(3, "int64"), BufferStore(buf, x, [x]))
    s2 = LetStmt(y, Const(3, "int64"), BufferStore(buf, y, [y]))
    s3 = LetStmt(y, Const(4, "int64"), BufferStore(buf, y, [y]))
    assert structural_equal(s1, s2) and not structural_equal(s1, s3)
    assert structural_equal(Const(1.5, "float32"), Const(1.5, "float32"))
    assert not structural_equal(Const(1.5, "float32"), Const(1.5, "float16"))
    assert not structural_equal(Const(1, "int32"), Const(1.0, "float32"))
    assert structural_equal(Const(float("nan"), "float32"), Const(float("nan"), "float32"))


def test_buffers_compare_by_layout_not_name():
    A, B = Buffer("A", (4, 4), "float32"), Buffer("B", (4, 4), "float32")
    S = Buffer("S", (4, 4), "float32", strides=(5, 1))
    i = Var("i")
    assert structural_equal(BufferLoad(A, [i, i]), BufferLoad(B, [i, i]))
    assert not structural_equal(BufferLoad(A, [i, i]), BufferLoad(S, [i, i]))
    # The same buffer twice differs from two different buffers.
    assert not structural_equal(BufferLoad(A, [i, i]) + BufferLoad(A, [i, i]),
                                BufferLoad(A, [i, i]) + BufferLoad(B, [i, i]))


def matmul(n_name="n", a_name="A", k_name="k", dtype="float32", tag=""):
    n = td.var(n_name)
    A = td.placeholder((n, 64), dtype, name=a_name)
    B = td.placeholder((64, 32), dtype, name="B")
    k = td.reduce_axis((0, 64), name=k_name)
    return td.compute((n, 32), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k),
                      name="C", tag=tag)


def test_compute_graphs():
    assert structural_equal(matmul(), matmul("m", "X", "r"))
    assert structural_hash(matmul()) == structural_hash(matmul("m", "X", "r"))
    assert not structural_equal(matmul(), matmul(dtype="float16"))
    assert not structural_equal(matmul(), matmul(tag="matmul"))
    # Reducer identity is by structure: sum vs max differ.
    n = td.var("n")
    A = td.placeholder((n, 64), name="A")
    k = td.reduce_axis((0, 64), name="k")
    s = td.compute((n,), lambda i: td.sum(A[i, k], axis=k))
    m = td.compute((n,), lambda i: td.max(A[i, k], axis=k))
    assert not structural_equal(s, m)


def test_shared_inputs_in_a_graph():
    # relu(A) + A (A used twice) differs from relu(A) + B with a second placeholder.
    A = td.placeholder((8,), name="A")
    B = td.placeholder((8,), name="B")
    r = td.compute((8,), lambda i: td.maximum(A[i], 0.0), name="relu")
    same = td.compute((8,), lambda i: r[i] + A[i])
    other = td.compute((8,), lambda i: r[i] + B[i])
    assert not structural_equal(same, other)
    assert structural_equal([same, A], [same, A])
    assert structural_hash([r, 3, "x"]) != structural_hash([r, 4, "x"])


def test_hash_is_stable_across_processes():
    # Another process with another string-hash seed computes the same digests.
    script = ("import sys; sys.path[:0] = {path!r}\n"
              "from test_structural import copy_func, matmul\n"
              "from tdsl.structural import structural_hash\n"
              "print(structural_hash(copy_func()), structural_hash(matmul()))")
    path = [p or os.getcwd() for p in sys.path] + [os.path.dirname(os.path.abspath(__file__))]
    seed = "7" if os.environ.get("PYTHONHASHSEED") != "7" else "8"
    out = subprocess.run([sys.executable, "-c", script.format(path=path)],
                         capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": seed})
    assert out.stdout.split() == [structural_hash(copy_func()), structural_hash(matmul())]
