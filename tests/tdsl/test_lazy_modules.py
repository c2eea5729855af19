"""``tdsl.interpreter.run(...)`` (as the README writes it) works after a plain ``import tdsl``,
and ``import tdsl`` still does not import the interpreter, the autotuner or torch."""
import subprocess
import sys

CODE = """
import sys
import numpy as np
import tdsl
heavy = [m for m in ("tdsl.interpreter", "tdsl.autotune", "torch", "xgboost") if m in sys.modules]
A = tdsl.placeholder((4,), "float32", name="A")
B = tdsl.compute((4,), lambda i: A[i] * 3.0, name="B")
s = tdsl.create_schedule(B.op)
a, b = np.arange(1, 5, dtype="float32"), np.zeros(4, "float32")
tdsl.interpreter.run(tdsl.lower(s, [A, B]), a, b)
assert (b == a * 3).all(), b
assert "interpreter" in dir(tdsl) and "autotune" in dir(tdsl)
try:
    tdsl.no_such_thing
except AttributeError as e:
    assert "no attribute 'no_such_thing'" in str(e)
print(heavy)
"""


def test_interpreter_is_reachable_after_import_tdsl():
    r = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"        # imported on first use, not by `import tdsl`
