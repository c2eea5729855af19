"""Golden printed IR of canonical schedules, so that printer and lowering changes are
deliberate.

Each schedule below is lowered and printed; the text must equal
``tests/tdsl/golden/<name>.txt`` exactly.  After an intended change, regenerate the files
with::

    TDSL_UPDATE_GOLDEN=1 python -m pytest tests/tdsl/test_lower_golden.py

and review the diff of ``tests/tdsl/golden/`` before committing it.  Every golden
schedule is also run by the interpreter against NumPy, so a golden file never records
a wrong program.
"""
import difflib
import os
from pathlib import Path

import numpy as np
import pytest

import tdsl as td
from tdsl.interpreter import run
from tests.workloads import random_array

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("TDSL_UPDATE_GOLDEN") == "1"


def design_tiled_matmul():
    """The schedule of DESIGN.md, verbatim."""
    n = td.var("n")
    A = td.placeholder((n, 256), "float32", name="A")
    B = td.placeholder((256, 128), "float32", name="B")
    k = td.reduce_axis((0, 256), name="k")
    C = td.compute((n, 128), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = td.create_schedule(C.op)
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, x_factor=32, y_factor=32)
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=4)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    s[C].vectorize(ji)
    s[C].parallel(io)
    ref = lambda a, b: a.astype(np.float64) @ b.astype(np.float64)  # noqa: E731
    return s, [A, B, C], {"n": 37}, ref


def matmul_tail_split():
    """A constant size the factors don't divide: guarded / tightened tails."""
    A = td.placeholder((10, 12), name="A")
    B = td.placeholder((12, 9), name="B")
    k = td.reduce_axis((0, 12), name="k")
    C = td.compute((10, 9), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = td.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(*C.op.axis, 4, 4)
    ko, ki = s[C].split(k, factor=5)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    s[C].unroll(ki)
    ref = lambda a, b: a.astype(np.float64) @ b.astype(np.float64)  # noqa: E731
    return s, [A, B, C], {}, ref


def pipeline_compute_at_inline():
    n = td.var("n")
    A = td.placeholder((n, 20), name="A")
    B = td.compute((n, 20), lambda i, j: A[i, j] * 2.0, name="B")
    C = td.compute((n, 20), lambda i, j: B[i, j] + 1.0, name="C")
    D = td.compute((n, 20), lambda i, j: C[i, j] * C[i, j], name="D")
    s = td.create_schedule(D.op)
    s[B].compute_inline()
    io, ii = s[D].split(s[D].op.axis[0], factor=4)
    s[C].compute_at(s[D], io)
    return s, [A, D], {"n": 10}, lambda a: (a * 2.0 + 1.0) ** 2


def matmul_cache_write_local_cache_read():
    N = 24
    A = td.placeholder((N, N), name="A")
    B = td.placeholder((N, N), name="B")
    k = td.reduce_axis((0, N), name="k")
    C = td.compute((N, N), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = td.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    AA = s.cache_read(A, "global", [CL])
    io, jo, ii, ji = s[C].tile(*s[C].op.axis, 8, 8)
    s[CL].compute_at(s[C], jo)
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=5)
    s[AA].compute_at(s[CL], ko)
    ref = lambda a, b: a.astype(np.float64) @ b.astype(np.float64)  # noqa: E731
    return s, [A, B, C], {}, ref


def rfactor_sum():
    n = td.var("n")
    A = td.placeholder((n,), name="A")
    k = td.reduce_axis((0, n), name="k")
    S = td.compute((1,), lambda i: td.sum(A[k], axis=k), name="S")
    s = td.create_schedule(S.op)
    ko, ki = s[S].split(s[S].op.reduce_axis[0], factor=8)
    s.rfactor(S, ki)
    return s, [A, S], {"n": 45}, lambda a: a.astype(np.float64).sum(keepdims=True)


def gpu_shared_matmul():
    n = td.var("n")
    K = 16
    A = td.placeholder((n, K), name="A")
    B = td.placeholder((K, n), name="B")
    k = td.reduce_axis((0, K), name="k")
    C = td.compute((n, n), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = td.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    bx, tx = s[C].split(i, factor=8)
    by, ty = s[C].split(j, factor=8)
    s[C].reorder(bx, by, tx, ty)
    s[C].bind(bx, td.thread_axis("blockIdx.x"))
    s[C].bind(by, td.thread_axis("blockIdx.y"))
    s[C].bind(tx, td.thread_axis("threadIdx.x"))
    s[C].bind(ty, td.thread_axis("threadIdx.y"))
    s[CL].compute_at(s[C], ty)
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=8)
    for T in (AS, BS):
        s[T].compute_at(s[CL], ko)
        f = s[T].fuse(*s[T].op.axis)
        fo, fi = s[T].split(f, factor=8)
        s[T].bind(fi, td.thread_axis("threadIdx.y"))
        fo2, fo1 = s[T].split(fo, factor=8)
        s[T].bind(fo1, td.thread_axis("threadIdx.x"))
    ref = lambda a, b: a.astype(np.float64) @ b.astype(np.float64)  # noqa: E731
    return s, [A, B, C], {"n": 11}, ref


def conv2d_padding_compute_at():
    N, CI, H, W, CO, R = 1, 3, 7, 7, 4, 3
    X = td.placeholder((N, CI, H, W), name="X")
    Wt = td.placeholder((CO, CI, R, R), name="W")
    P = td.compute((N, CI, H + 2, W + 2), lambda b, c, y, x: td.if_then_else(
        td.all(y >= 1, y <= H, x >= 1, x <= W), X[b, c, y - 1, x - 1], 0.0), name="P")
    rc = td.reduce_axis((0, CI), name="rc")
    ry = td.reduce_axis((0, R), name="ry")
    rx = td.reduce_axis((0, R), name="rx")
    Y = td.compute((N, CO, H, W), lambda b, o, y, x: td.sum(
        P[b, rc, y + ry, x + rx] * Wt[o, rc, ry, rx], axis=[rc, ry, rx]), name="Y")
    s = td.create_schedule(Y.op)
    b_, o, y, x = s[Y].op.axis
    yo, yi = s[Y].split(y, 3)
    s[P].compute_at(s[Y], yo)

    def ref(xv, wv):
        xp = np.pad(xv.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
        out = np.zeros((N, CO, H, W))
        for ry_ in range(R):
            for rx_ in range(R):
                out += np.einsum("ncyx,oc->noyx", xp[:, :, ry_:ry_ + H, rx_:rx_ + W],
                                 wv[:, :, ry_, rx_].astype(np.float64))
        return out
    return s, [X, Wt, Y], {}, ref


def argmax_comm_reducer():
    m = td.var("m")
    A = td.placeholder((m, 10), name="A")
    am = td.comm_reducer(
        lambda x, y: (td.if_then_else(x[1] >= y[1], x[0], y[0]), td.maximum(x[1], y[1])),
        lambda t0, t1: (td.const(-1, t0), td.min_value(t1)), name="argmax")
    k = td.reduce_axis((0, 10), name="k")
    I, V = td.compute((m,), lambda i: am((k.var, A[i, k]), axis=k), name="am")
    s = td.create_schedule(I.op)
    return s, [A, I, V], {"m": 6}, lambda a: (a.argmax(1), a.max(1))


def tensorize_gemv():
    a = td.placeholder((12,), name="a")
    b = td.placeholder((4, 12), name="b")
    kk = td.reduce_axis((0, 12), name="k")
    c = td.compute((4,), lambda i: td.sum(a[kk] * b[i, kk], axis=kk), name="c")
    gemv = td.decl_tensor_intrin(c.op, name="gemv")
    A = td.placeholder((8, 12), name="A")
    B = td.placeholder((16, 12), name="B")
    k = td.reduce_axis((0, 12), name="k")
    C = td.compute((8, 16), lambda i, j: td.sum(A[i, k] * B[j, k], axis=k), name="C")
    s = td.create_schedule(C.op)
    x, y = C.op.axis
    yo, yi = s[C].split(y, factor=4)
    s[C].reorder(x, yo, yi, k)
    s[C].tensorize(yi, gemv)
    ref = lambda a_, b_: a_.astype(np.float64) @ b_.T.astype(np.float64)  # noqa: E731
    return s, [A, B, C], {}, ref


def storage_align_double_buffer():
    A = td.placeholder((16, 16), name="A")
    B = td.placeholder((16, 16), name="B")
    k = td.reduce_axis((0, 16), name="k")
    C = td.compute((16, 16), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = td.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    i, j = C.op.axis
    bx, tx = s[C].split(i, factor=4)
    s[C].reorder(bx, tx, k, j)
    s[C].bind(bx, td.thread_axis("blockIdx.x"))
    s[C].bind(tx, td.thread_axis("threadIdx.x"))
    ko, ki = s[C].split(k, factor=4)
    s[AS].compute_at(s[C], ko)
    s[AS].storage_align(s[AS].op.axis[0], 8, 1)
    ax0, ax1 = s[AS].op.axis
    s[AS].bind(ax0, td.thread_axis("threadIdx.x"))
    s[AS].double_buffer()
    ref = lambda a, b: a.astype(np.float64) @ b.astype(np.float64)  # noqa: E731
    return s, [A, B, C], {}, ref


CASES = {f.__name__: f for f in [
    design_tiled_matmul, matmul_tail_split, pipeline_compute_at_inline,
    matmul_cache_write_local_cache_read, rfactor_sum, gpu_shared_matmul,
    conv2d_padding_compute_at, argmax_comm_reducer, tensorize_gemv,
    storage_align_double_buffer,
]}


def _compare(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.txt"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
        return
    if not path.exists():
        pytest.fail(f"no golden file {path}; create it with TDSL_UPDATE_GOLDEN=1")
    want = path.read_text()
    if text != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), text.splitlines(True),
                                            f"golden/{name}.txt", "lowered now"))
        pytest.fail(f"printed IR of '{name}' changed (TDSL_UPDATE_GOLDEN=1 regenerates):\n{diff}")


@pytest.mark.parametrize("name", list(CASES))
def test_golden_lowered_ir(name):
    s, args, _, _ = CASES[name]()
    _compare(name, str(td.lower(s, args)) + "\n")


def test_golden_print_schedule():
    """``print(s)`` shows the current loop nest (inputs in order of use, then outputs)."""
    s, _, _, _ = pipeline_compute_at_inline()
    _compare("print_schedule", str(s) + "\n")


@pytest.mark.parametrize("name", list(CASES))
def test_golden_schedules_compute_the_right_thing(name):
    s, args, sizes, ref = CASES[name]()
    f = td.lower(s, args)
    bind = {v.name: sizes[v.name] for v in f.size_vars}
    rng = np.random.default_rng(42)
    n_in = sum(1 for a in args if isinstance(a.op, td.PlaceholderOp))
    arrays = []
    for t in args:
        shape = tuple(bind[d.name] if isinstance(d, td.Var) else int(d.value) for d in t.shape)
        if len(arrays) < n_in:
            arrays.append(random_array(rng, shape, str(t.dtype)))
        else:
            arrays.append(np.full(shape, np.nan if str(t.dtype).startswith("float") else -9,
                                  str(t.dtype)))
    run(f, *arrays)
    want = ref(*arrays[:n_in])
    want = want if isinstance(want, tuple) else (want,)
    for got, w in zip(arrays[n_in:], want):
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-5)


def test_golden_directory_has_no_strays():
    names = set(CASES) | {"print_schedule"}
    assert {p.stem for p in GOLDEN.glob("*.txt")} <= names
