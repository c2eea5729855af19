"""tdsl.compat.tvm's runtime surface: devices, NDArray, build/lower, time_evaluator, Target,
testing, contrib — used the way TVM's tutorials use them, checked against NumPy."""
import os
import subprocess
import sys

import numpy as np
import pytest

import tvm
import tvm.testing
from tvm import te
from tvm.contrib import cc, utils


def _vadd():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    return A, B, C


def test_alias_resolves_tvm_modules():
    import tvm.autotvm
    import tvm.te as te2
    from tvm import auto_scheduler, autotvm, tir, topi  # noqa: F401
    import tdsl.compat.tvm as compat
    assert tvm is compat and te2 is compat.te
    assert tvm.autotvm is compat.autotvm


def test_device_and_ndarray(rng):
    dev = tvm.device("llvm", 0)
    assert dev == tvm.cpu(0) and dev.exist and dev.device_type == 1
    assert tvm.device("cuda").device_type == 2 and tvm.cl(0).exist is False
    x = rng.random((3, 4)).astype("float32")
    a = tvm.nd.array(x, dev)
    assert a.shape == (3, 4) and a.dtype == "float32" and a.device == dev
    np.testing.assert_array_equal(a.numpy(), x)
    np.testing.assert_array_equal(a.asnumpy(), x)
    x[0, 0] = 7          # nd.array copies
    assert a.numpy()[0, 0] != 7
    e = tvm.nd.empty((2, 5), "int32")
    assert e.shape == (2, 5) and e.dtype == "int32"
    b = tvm.nd.empty((3, 4))
    b.copyfrom(a)
    np.testing.assert_array_equal(b.numpy(), a.numpy())
    c = tvm.nd.empty((3, 4))
    a.copyto(c)
    np.testing.assert_array_equal(np.asarray(c), a.numpy())
    with pytest.raises(tvm.TVMError):
        b.copyfrom(np.zeros((2, 2), "float32"))
    with pytest.raises(tvm.TVMError):
        tvm.device("metalx")


@pytest.mark.parametrize("n", [1024, 1000])
def test_build_named_and_call_on_ndarrays(rng, n):
    A, B, C = _vadd()
    s = te.create_schedule(C.op)
    outer, inner = s[C].split(C.op.axis[0], factor=4)
    s[C].parallel(outer)
    s[C].vectorize(inner)
    tgt = tvm.target.Target(target="llvm", host="llvm")
    f = tvm.build(s, [A, B, C], tgt, name="myadd")
    assert f.entry_name == "myadd" and f["myadd"] is f
    dev = tvm.device(tgt.kind.name, 0)
    a = tvm.nd.array(rng.random(n).astype(A.dtype), dev)
    b = tvm.nd.array(rng.random(n).astype(B.dtype), dev)
    c = tvm.nd.array(np.zeros(n, dtype=C.dtype), dev)
    f(a, b, c)
    tvm.testing.assert_allclose(c.numpy(), a.numpy() + b.numpy())
    ev = f.time_evaluator(f.entry_name, dev, number=3, repeat=2, min_repeat_ms=1)
    res = ev(a, b, c)
    assert len(res.results) == 2 and res.mean > 0


def test_lower_simple_mode_prints_loop_nest():
    A, B, C = _vadd()
    s = te.create_schedule(C.op)
    s[C].parallel(C.op.axis[0])
    text = str(tvm.lower(s, [A, B, C], simple_mode=True))
    assert "parallel" in text and "C[" in text
    func = tvm.lower(s, [A, B, C], name="f")
    assert tvm.lower(func) is func


def test_build_uses_target_in_scope(rng):
    A, B, C = _vadd()
    s = te.create_schedule(C.op)
    with tvm.target.Target("llvm") as t:
        assert tvm.target.Target.current() is t
        f = tvm.build(s, [A, B, C])
    assert tvm.target.Target.current() is None
    x, y = rng.random(17).astype("float32"), rng.random(17).astype("float32")
    z = np.empty(17, "float32")
    f(x, y, z)      # NumPy arrays work too
    np.testing.assert_allclose(z, x + y)


def test_target_surface():
    t = tvm.target.Target("llvm -mcpu=skylake", host="llvm")
    assert t.kind.name == "llvm" and t.host.kind.name == "llvm" and "skylake" in str(t)
    assert t.mcpu == "skylake" and "cpu" in t.keys
    assert tvm.target.Target("cuda").kind.name == "cuda"
    assert tvm.target.Target(t) == t
    with pytest.raises(tvm.TVMError):
        tvm.target.Target("cuda", host="cuda")


def test_assert_allclose_defaults_and_shapes():
    x = np.arange(4, dtype="float32")
    tvm.testing.assert_allclose(tvm.nd.array(x), x)
    with pytest.raises(AssertionError):
        tvm.testing.assert_allclose(x, x + 1e-3)
    with pytest.raises(AssertionError):
        tvm.testing.assert_allclose(x, x[:3])


def test_save_object_and_create_shared(rng):
    A, B, C = _vadd()
    s = te.create_schedule(C.op)
    f = tvm.build(s, [A, B, C], "llvm", name="myadd")
    temp = utils.tempdir()
    f.save(temp.relpath("myadd.o"))
    cc.create_shared(temp.relpath("myadd.so"), [temp.relpath("myadd.o")])
    assert {"myadd.o", "myadd.so"} <= set(temp.listdir())
    f.export_library(temp.relpath("myadd_pack.so"))
    g = tvm.runtime.load_module(temp.relpath("myadd_pack.so"))
    a, b = rng.random(33).astype("float32"), rng.random(33).astype("float32")
    c = tvm.nd.empty((33,))
    g(tvm.nd.array(a), tvm.nd.array(b), c)
    tvm.testing.assert_allclose(c.numpy(), a + b)
    with pytest.raises(tvm.TVMError):
        cc.create_shared(temp.relpath("bad.so"), [temp.relpath("missing.o")])
    path = temp.temp_dir
    temp.remove()
    assert not os.path.exists(path)


def test_pass_context_is_accepted():
    with tvm.transform.PassContext(opt_level=3, config={"tir.disable_vectorize": True}) as ctx:
        assert ctx.opt_level == 3


_SCRIPT = """
import numpy as np
import tvm
from tvm import te
import tvm.testing
n = 37
A = te.placeholder((n,), name="A")
B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
s = te.create_schedule(B.op)
f = tvm.build(s, [A, B], target="llvm")
a = tvm.nd.array(np.arange(n, dtype="float32"))
b = tvm.nd.empty((n,))
f(a, b)
tvm.testing.assert_allclose(b.numpy(), 2 * np.arange(n))
print("done", __name__)
"""


def test_python_m_runs_an_unchanged_script(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(_SCRIPT)
    out = subprocess.run([sys.executable, "-m", "tdsl.compat.tvm", str(script)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "done __main__" in out.stdout


def test_alias_line_at_the_top(tmp_path):
    script = tmp_path / "script.py"
    script.write_text("import tdsl.compat.tvm.alias\n" + _SCRIPT)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr


def test_python_m_usage():
    out = subprocess.run([sys.executable, "-m", "tdsl.compat.tvm"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2 and "usage" in out.stdout
