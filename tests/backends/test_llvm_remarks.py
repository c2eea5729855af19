"""LLVM's remarks ("loop not vectorized: ...") are captured per compilation and kept in the
module's notes; they never reach the terminal (where they flooded tuning runs)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

# A loop LLVM is told to vectorize but cannot (an opaque call): LLVM prints a remark and a
# warning to the process's stderr when nothing captures them.
_SCRIPT = textwrap.dedent(r'''
    import sys
    from tdsl.backends.llvm.machine import llvm_diagnostics, machine_spec, optimize, parse
    from tdsl.target import as_target
    IR = """
    declare float @opaque(float)
    define float @red(float* %a, i64 %n) {
    entry:
      br label %loop
    loop:
      %i = phi i64 [0, %entry], [%i1, %loop]
      %s = phi float [0.0, %entry], [%s1, %loop]
      %p = getelementptr float, float* %a, i64 %i
      %v = load float, float* %p
      %w = call float @opaque(float %v)
      %s1 = fadd float %s, %w
      %i1 = add i64 %i, 1
      %c = icmp slt i64 %i1, %n
      br i1 %c, label %loop, label %exit, !llvm.loop !0
    exit:
      ret float %s1
    }
    !0 = distinct !{!0, !1}
    !1 = !{!"llvm.loop.vectorize.enable", i1 true}
    """
    remarks = []
    optimize(parse(IR), machine_spec(as_target("llvm")), remarks)
    print(len(remarks), "|".join(remarks))
    with llvm_diagnostics(remarks):
        import os
        os.write(2, b"an unrelated line\n")
        os.write(2, b"bar 1/2\rbar 2/2\n")
''')


def test_remarks_are_captured_not_printed():
    r = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, timeout=120,
                       env={"TDSL_CACHE_DIR": "off", "PATH": "/usr/bin:/bin"})
    stdout, stderr = r.stdout.decode(), r.stderr.decode()
    assert r.returncode == 0, stderr
    count, _, text = stdout.strip().partition(" ")
    assert int(count) >= 1 and "loop not vectorized" in text
    assert "loop not vectorized" not in stderr
    assert stderr == "an unrelated line\nbar 1/2\rbar 2/2\n"  # other output passes unchanged


def test_compiled_notes_keep_remarks(monkeypatch):
    """``build`` files LLVM's remarks under the module's notes (prefixed ``llvm:``)."""
    import numpy as np
    import tdsl as td
    import importlib
    build_mod = importlib.import_module("tdsl.backends.llvm.build")

    monkeypatch.setenv("TDSL_CACHE_DIR", "off")
    real = build_mod.optimize

    def noisy(mod, spec, remarks=None):
        real(mod, spec, remarks)
        if remarks is not None:
            remarks.append("remark: <unknown>:0:0: loop not vectorized: test")
    monkeypatch.setattr(build_mod, "optimize", noisy)
    A = td.placeholder((8,), "float32", name="A")
    B = td.compute((8,), lambda i: A[i] * 3.0, name="B")
    f = td.build(td.create_schedule(B.op), [A, B], target="llvm", name="remark_notes")
    assert "llvm: remark: <unknown>:0:0: loop not vectorized: test" in f.notes
    a = np.arange(8, dtype="float32")
    np.testing.assert_allclose(f(a), a * 3)


def test_llvm_abort_message_survives_in_the_capture_file(tmp_path):
    """An LLVM abort inside the capture leaves its message in a file (docs/dsl.md, "If a
    build kills the process"); a block that ends normally leaves no file."""
    child = ("import os\n"
             "from tdsl.backends.llvm.machine import llvm_diagnostics\n"
             "with llvm_diagnostics([]):\n"
             "    os.write(2, b'remark: fine\\n')\n"
             "with llvm_diagnostics([]):\n"
             "    os.write(2, b'LLVM ERROR: Cannot select: t1\\n')\n"
             "    os.abort()\n")
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True,
                       timeout=120)
    assert r.returncode != 0
    logs = list(tmp_path.glob("tdsl-llvm-stderr-*.log"))
    assert len(logs) == 1, logs
    assert logs[0].read_text() == "LLVM ERROR: Cannot select: t1\n"
