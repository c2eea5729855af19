# Found by tests/fuzz (shrunk).  rfactor on a stage that was already tensorized is
# accepted; td.lower then dies with a raw KeyError (an IterVar), not a TDSLError.
# (r02/r03 are the same family -- tensorize, then a primitive that changes the tensorized
# region without re-checking it -- but this one is rfactor and the symptom is a crash in
# lowering.)  Expected: rfactor refuses with a ScheduleError naming the tensorized loop
# (or the whole thing lowers and computes A @ W).
import numpy as np
import tdsl as td
from tdsl import interpreter


def gemv(m, l):
    a = td.placeholder((l,), name="a")
    b = td.placeholder((l, m), name="b")
    k = td.reduce_axis((0, l), name="k")
    c = td.compute((m,), lambda i: td.sum(a[k] * b[k, i], axis=k), name="c")
    return td.decl_tensor_intrin(c.op, name=f"gemv{m}x{l}")


N, M = 3, 4
A = td.placeholder((N, M), name="A")
W = td.placeholder((M, M), name="W")
k = td.reduce_axis((0, M), name="k")
C = td.compute((N, M), lambda i, j: td.sum(A[i, k] * W[k, j], axis=k), name="C")
s = td.create_schedule(C.op)
jo, ji = s[C].split(C.op.axis[1], factor=2)
s[C].tensorize(ji, gemv(2, M))
try:
    CF = s.rfactor(C, k)
    print("rfactor after tensorize: accepted")
except Exception as e:
    print("rfactor after tensorize: refused:", type(e).__module__, type(e).__name__, e)
rng = np.random.default_rng(0)
a = rng.uniform(0.5, 1, (N, M)).astype("float32")
w = rng.uniform(0.5, 1, (M, M)).astype("float32")
c = np.full((N, M), np.nan, "float32")
try:
    interpreter.run(td.lower(s, [A, W, C]), a, w, c)
    print("interpreter:", "OK" if np.allclose(c, a @ w, rtol=1e-5) else "WRONG")
except Exception as e:
    print("lower/interpreter:", type(e).__module__, type(e).__name__, e)
