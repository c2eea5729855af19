"""A guarded read at the end of an array, vectorized by LLVM into a masked load, must not
fault: LLVM 22 folds such a load into a masked shuffle that reads every lane
(backends/llvm/machine.py, ``_avoid_unsafe_masked_load_folds``).  Found by the long fuzz
profile; the kernel runs in a child process, since without the fix it dies of SIGSEGV."""
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent('''
    import sys
    sys.path.insert(0, {root!r})
    import numpy as np
    import tdsl as td
    from tests.guard_pages import guarded_copy
    n, m = td.var("n"), td.var("m")
    X = td.placeholder((n, m), "uint64", name="X")
    F = td.placeholder((n, m), "bool", name="F")
    Y = td.compute((n, m), lambda i, j: F[i, j].astype("int32") - td.if_then_else(
        j + 1 < m, X[i, j + 1], td.const(1, "uint64")).astype("int32"), name="Y")
    s = td.create_schedule(Y.op)
    s[Y].split(s[Y].op.axis[1], factor=2)
    f = td.build(s, [X, F, Y], target="llvm")
    rng = np.random.default_rng(0)
    for rows, cols in ((4, 4), (6, 4), (3, 6), (5, 2)):
        x = rng.integers(1, 1 << 40, size=(rows, cols), dtype=np.uint64)
        b = rng.random((rows, cols)) < 0.5
        y = guarded_copy(np.zeros((rows, cols), np.int32))
        f(guarded_copy(x), guarded_copy(b), y)     # every array ends at an unreadable page
        nxt = np.concatenate([x[:, 1:], np.ones((rows, 1), np.uint64)], axis=1)
        want = b.astype(np.int32) - nxt.astype(np.int32)
        assert (y == want).all(), (rows, cols)
    print("ok")
''')


def test_guarded_read_at_the_end_of_an_array_does_not_fault(tmp_path):
    env = {"TDSL_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT))], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (proc.returncode, proc.stderr)
