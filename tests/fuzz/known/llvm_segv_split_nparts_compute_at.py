"""Found by scripts/fuzz_long.sh (test_fuzz_dtypes, symbolic): the LLVM kernel segfaults at
n=4, m=4 (not yet minimized; the interpreter is not reached). Run: python THIS_FILE."""
import sys
sys.path.insert(0, '.')
import numpy as np
import tdsl as td
from tdsl import interpreter


def lp(stage, name):
    """The leaf loop of ``stage`` called ``name``."""
    return next(v for v in stage.leaf_iter_vars if v.name == name)


def gemv(m, l):
    """c[i] = sum_k a[k] * b[k, i]: one row of P @ W, m columns at a time."""
    a = td.placeholder((l,), name="a")
    b = td.placeholder((l, m), name="b")
    k = td.reduce_axis((0, l), name="k")
    c = td.compute((m,), lambda i: td.sum(a[k] * b[k, i], axis=k), name="c")
    return td.decl_tensor_intrin(c.op, name=f"gemv{m}x{l}")

N, M = 3, 5
n = td.var("n")
m = td.var("m")
X0 = td.placeholder((n, m), "uint64", name="X0")
S1 = td.compute((n, m), lambda i, j: (((i.astype("int64")).astype("int32") - (X0[i, j]).astype("int32")) - td.const(6, "int32")), name="S1")
S2 = td.compute((n, m), lambda i, j: ((S1[i, j]).astype("bool") | td.if_then_else((td.const(2, "int64")).astype("bool"), ((i.astype("int64")).astype("bool") & td.const(False, "bool")), td.if_then_else((S1[i, j]).astype("bool"), td.const(True, "bool"), (X0[i, j]).astype("bool")))), name="S2")
S3 = td.compute((n, m), lambda i, j: ((S2[i, j]).astype("int32") - (td.if_then_else(j + 1 < m, X0[i, j + 1], td.const(1, "uint64"))).astype("int32")), name="S3")
ARGS = [X0, S3]
s = td.create_schedule(S3.op)
gemv2x7 = gemv(2, 7)
s[S3].split(lp(s[S3], "j"), factor=2)
# refused (ScheduleError): s[S3].tensorize(lp(s[S3], "j.inner"), gemv2x7)
s[S2].split(lp(s[S2], "j"), nparts=4)
s[S1].compute_at(s[S2], lp(s[S2], "j.inner"))
s[S1].tile(lp(s[S1], "i"), lp(s[S1], "j"), 4, 2)
# bindings: [{'n': 4, 'm': 4}, {'n': 6, 'm': 4}, {'n': 1, 'm': 1}]
sys.path.insert(0, '.')
from tests.guard_pages import guarded_copy
for n_, m_ in ((4, 4), (6, 4), (1, 1)):
    x = np.arange(n_ * m_, dtype=np.uint64).reshape(n_, m_) + 1
    o = np.zeros((n_, m_), np.int32)
    print(td.lower(s, ARGS)) if n_ == 4 else None
    f = td.build(s, ARGS, target="llvm")
    f(guarded_copy(x), guarded_copy(o)); print("ran", n_, m_, flush=True)
    q = np.zeros((n_, m_), np.int32); interpreter.run(td.lower(s, ARGS), x, q); print("interp ok", (q == o).all(), flush=True)
