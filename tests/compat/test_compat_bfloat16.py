"""bfloat16 through the compat layer: a TVM-style script declaring bfloat16 tensors, casting
to float32 for a reduction, run through tvm.nd arrays (``ml_dtypes.bfloat16`` data)."""
import ml_dtypes
import numpy as np

import tvm
import tvm.testing
from tvm import te

BF = ml_dtypes.bfloat16


def test_bfloat16_matmul_with_float32_accumulation(rng):
    n = te.var("n")
    K = 33
    A = te.placeholder((n, K), "bfloat16", name="A")
    B = te.placeholder((K, n), "bfloat16", name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k].astype("float32")
                                               * B[k, j].astype("float32"), axis=k), name="C")
    D = te.compute((n, n), lambda i, j: C[i, j].astype("bfloat16"), name="D")
    s = te.create_schedule(D.op)
    xo, xi = s[C].split(C.op.axis[1], factor=8)
    f = tvm.build(s, [A, B, D], "llvm")
    for size in (16, 19):
        a = rng.standard_normal((size, K)).astype(BF)
        b = rng.standard_normal((K, size)).astype(BF)
        dev = tvm.cpu()
        d = tvm.nd.empty((size, size), "bfloat16", dev)
        f(tvm.nd.array(a, dev), tvm.nd.array(b, dev), d)
        assert d.numpy().dtype == np.dtype(BF)
        want = (a.astype(np.float32) @ b.astype(np.float32))
        tvm.testing.assert_allclose(d.numpy().astype(np.float32), want, rtol=1e-2, atol=1e-2)
