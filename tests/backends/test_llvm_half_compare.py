"""Compares of 16-bit floats (``<``, ``!=``, ``max``, ``isnan``, the cast to bool) in loops
that LLVM vectorizes by itself.

LLVM 22's x86 backend aborts the process in instruction selection ("Cannot select
X86ISD::CMPP v16f32") on a 16-lane ``fcmp`` of ``bfloat`` next to a saturating
float-to-int conversion, which its loop vectorizer makes out of tdsl's scalar code; and
InstCombine narrows a compare of widened values back to ``bfloat``.  The backend compares
16-bit floats as float32 behind an arithmetic fence (backends/llvm/intrinsics.py ``fcmp``).
Each build runs in a child process, so that an abort fails the test instead of killing
pytest.  The schedule fuzzer found the first case (a mixed-dtype pipeline, a parallel row
loop, ``int16(X) * 2 + int16(bool(X))``).
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent("""
    import ml_dtypes, numpy as np, sys
    import tdsl as td
    dt, op, rows, cols, parallel = (sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]),
                                 sys.argv[5] == "1")
    npd = ml_dtypes.bfloat16 if dt == "bfloat16" else np.dtype(dt)
    X = td.placeholder((rows, cols), dt, name="X")
    Y = td.placeholder((rows, cols), dt, name="Y")
    body = {
        "bool": lambda x, y: x.astype("int16") * td.const(2, "int16")
                             + x.astype("bool").astype("int16"),
        "ne": lambda x, y: (x != y).astype("int16") + x.astype("int16"),
        "lt": lambda x, y: (x < y).astype("int16") + y.astype("int16"),
        "max": lambda x, y: td.maximum(x, y).astype("int16") + x.astype("int16"),
        "isnan": lambda x, y: td.isnan(x).astype("int16") + x.astype("int16"),
    }[op]
    Z = td.compute((rows, cols), lambda i, j: body(X[i, j], Y[i, j]), name="Z")
    s = td.create_schedule(Z.op)
    if parallel:
        s[Z].parallel(Z.op.axis[0])
    f = td.build(s, [X, Y, Z], target="llvm")
    rng = np.random.default_rng(rows * cols)
    x = (rng.normal(size=(rows, cols)) * 50).astype(np.float32)
    x[0, :3] = [0.0, -0.0, np.nan]
    y = x.copy()
    y[1::2] = (rng.normal(size=y[1::2].shape) * 50).astype(np.float32)
    x, y = x.astype(npd), y.astype(npd)
    z = np.full((rows, cols), 12345, np.int16)
    f(x, y, z)
    xf, yf = x.astype(np.float32), y.astype(np.float32)
    def i16(v):   # the saturating float -> int16 of docs/ir.md (NaN -> 0)
        return np.nan_to_num(np.clip(np.trunc(v), -32768, 32767), nan=0).astype(np.int16)
    want = {
        "bool": i16(xf) * 2 + (xf != 0),
        "ne": (xf != yf) + i16(xf),
        "lt": (xf < yf) + i16(yf),
        "max": i16(np.where(xf > yf, xf, yf)) + i16(xf),
        "isnan": np.isnan(xf) + i16(xf),
    }[op].astype(np.int16)
    bad = z != want
    assert not bad.any(), (op, np.argwhere(bad)[:3].tolist(), z[bad][:3], want[bad][:3])
    print("ok")
""")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("op", ["bool", "ne", "lt", "max", "isnan"])
@pytest.mark.parametrize("rows,cols,parallel", [(16, 16, True), (16, 16, False), (8, 37, False)])
def test_16bit_float_compare_builds_and_matches_numpy(dtype, op, rows, cols, parallel):
    r = subprocess.run([sys.executable, "-c", CHILD, dtype, op, str(rows), str(cols),
                        "1" if parallel else "0"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), \
        f"rc {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
