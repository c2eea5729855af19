"""The C ABI of exported kernels: an int status (NULL pointers, negative sizes), a header
documenting the target CPU and runtime, and libraries that carry their own signature
(loadable with nothing beside them, including ones the user links from ``save("x.o")``)."""
from __future__ import annotations

import ctypes
import json
import shutil
import subprocess
import textwrap

import numpy as np
import pytest

import tdsl as td
from tdsl.backends.llvm import cabi
from tdsl.backends.llvm.machine import host_info, machine_spec
from tdsl.errors import BuildError, ShapeError
from tdsl.runtime.embedded import read_signatures
from tdsl.runtime.meta import signature_to_json

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not found")
RNG = np.random.default_rng(5)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TDSL_CACHE_DIR", str(tmp_path / "cache"))


def scaled_add(name: str = "sadd", parallel: bool = False):
    """``C[i, j] = A[i, j] + 2 * B[i, j]`` over (n, 2 * m) -- a computed extent -- with
    ``D`` (m,) binding ``m``."""
    n, m = td.var("n"), td.var("m")
    A = td.placeholder((n, m * 2), "float32", name="A")
    B = td.placeholder((n, m * 2), "float32", name="B")
    D = td.placeholder((m,), "float32", name="D")
    C = td.compute((n, m * 2), lambda i, j: A[i, j] + B[i, j] * 2.0 + D[j // 2], name="C")
    s = td.create_schedule(C.op)
    if parallel:
        s[C].parallel(s[C].op.axis[0])
    return td.build(s, [A, B, D, C], target="llvm", name=name)


def operands(n: int, m: int):
    a = RNG.standard_normal((n, 2 * m)).astype("float32")
    b = RNG.standard_normal((n, 2 * m)).astype("float32")
    d = RNG.standard_normal(m).astype("float32")
    return a, b, d, np.zeros_like(a)


def expected(a, b, d):
    return a + 2 * b + np.repeat(d, 2)[None, :]


def test_entry_returns_status_codes_through_ctypes():
    f = scaled_add("sadd_ctypes")
    fn = f._cfunc()
    a, b, d, c = operands(3, 5)
    p = [x.ctypes.data for x in (a, b, d, c)]
    assert fn(*p, 3, 5) == cabi.STATUS_OK
    np.testing.assert_allclose(c, expected(a, b, d), rtol=1e-6)
    c[:] = 7
    assert fn(p[0], None, p[2], p[3], 3, 5) == cabi.STATUS_NULL_POINTER
    assert fn(p[0], p[1], p[2], None, 3, 5) == cabi.STATUS_NULL_POINTER
    assert fn(*p, -1, 5) == cabi.STATUS_BAD_SIZE
    assert fn(*p, 3, -2) == cabi.STATUS_BAD_SIZE
    # every dimension must be >= 1, as for a call from Python (the code relies on it)
    assert fn(*p, 0, 5) == cabi.STATUS_BAD_SIZE
    assert fn(None, None, None, None, 3, 0) == cabi.STATUS_BAD_SIZE   # sizes are checked first
    assert (c == 7).all()  # nothing written on an error
    with pytest.raises(BuildError, match="TDSL_ERR_NULL_POINTER"):
        cabi.raise_status(1, "sadd")


@needs_gcc
@pytest.mark.parametrize("parallel", [False, True])
def test_c_program_checks_status_codes(tmp_path, parallel):
    f = scaled_add("sadd", parallel)
    f.export_library(str(tmp_path / "sadd.so"))
    header = (tmp_path / "sadd.h").read_text()
    assert ("int32_t sadd(const float *A, const float *B, const float *D, float *C, int64_t n, "
            "int64_t m);") \
        in header
    for name in ("TDSL_OK", "TDSL_ERR_NULL_POINTER", "TDSL_ERR_BAD_SIZE"):
        assert f"#define {name}" in header
    assert ("GOMP_parallel" in header) == parallel
    triple, cpu, _ = host_info()
    assert f"CPU '{cpu}'" in header and triple in header
    assert ("AVX-512" in header) == machine_spec(td.as_target("llvm")).has_avx512
    prog = tmp_path / "main.c"
    prog.write_text(textwrap.dedent("""
        #include <stdio.h>
        #include <stdlib.h>
        #include "sadd.h"
        int main(void) {
            const int64_t n = 3, m = 5;
            float *A = malloc(sizeof(float) * n * 2 * m), *B = malloc(sizeof(float) * n * 2 * m);
            float *C = malloc(sizeof(float) * n * 2 * m), *D = malloc(sizeof(float) * m);
            for (int64_t i = 0; i < n * 2 * m; i++) { A[i] = (float)i; B[i] = 1.0f; C[i] = -1; }
            for (int64_t i = 0; i < m; i++) D[i] = 0.0f;
            int ok = sadd(A, B, D, C, n, m);
            int null_in = sadd(A, NULL, D, C, n, m);
            int null_out = sadd(A, B, D, NULL, n, m);
            int neg = sadd(A, B, D, C, -3, m);
            int empty = sadd(A, B, D, C, 0, m);
            double err = 0;
            for (int64_t i = 0; i < n * 2 * m; i++) {
                double d = C[i] - (A[i] + 2.0);
                err += d < 0 ? -d : d;
            }
            printf("%d %d %d %d %d %g\\n", ok, null_in, null_out, neg, empty, err);
            return 0;
        }
    """))
    exe = tmp_path / "main"
    subprocess.run(["gcc", "-O1", "-o", str(exe), str(prog), f"-I{tmp_path}",
                    str(tmp_path / "sadd.so"), f"-Wl,-rpath,{tmp_path}"],
                   check=True, capture_output=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60).stdout.split()
    assert out == ["0", "1", "1", "2", "2", "0"]


@needs_gcc
@pytest.mark.parametrize("parallel", [False, True])
def test_user_linked_library_loads_without_json(tmp_path, parallel):
    f = scaled_add("sadd_user", parallel)
    f.save(str(tmp_path / "k.o"))
    cmd = ["gcc", "-shared", "-o", str(tmp_path / "k.so"), str(tmp_path / "k.o"), "-lm"]
    subprocess.run(cmd + (["-lgomp"] if parallel else []), check=True, capture_output=True)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("k.")) == \
        ["k.o", "k.so"]
    loaded = td.load_module(str(tmp_path / "k.so"))
    a, b, d, c = operands(7, 3)
    loaded(a, b, d, c)
    np.testing.assert_allclose(c, expected(a, b, d), rtol=1e-6)
    np.testing.assert_allclose(loaded(a, b, d), expected(a, b, d), rtol=1e-6)
    with pytest.raises(ShapeError):  # the built module's argument checks
        loaded(a, b[:, :4].copy(), d, c)
    with pytest.raises(BuildError, match="keeps no LLVM IR"):
        loaded.get_source("ll")
    # the embedded signature is the one export used to write beside the library
    sig = read_signatures(tmp_path / "k.so")
    assert len(sig) == 1
    want = signature_to_json(f.func, f.entry_name)
    assert {k: sig[0][k] for k in want} == want and sig[0]["abi"] == cabi.ABI_VERSION


@needs_gcc
def test_two_kernels_in_one_library(tmp_path):
    f1, f2 = scaled_add("first"), scaled_add("second", parallel=True)
    f1.save(str(tmp_path / "a.o"))
    f2.save(str(tmp_path / "b.o"))
    subprocess.run(["gcc", "-shared", "-o", str(tmp_path / "ab.so"), str(tmp_path / "a.o"),
                    str(tmp_path / "b.o"), "-lgomp", "-lm"], check=True, capture_output=True)
    lib = td.load_module(str(tmp_path / "ab.so"))
    assert sorted(lib.entries) == ["first", "second"]
    a, b, d, c = operands(4, 2)
    for name in ("first", "second"):
        c[:] = 0
        lib[name](a, b, d, c)
        np.testing.assert_allclose(c, expected(a, b, d), rtol=1e-6)
    with pytest.raises(BuildError, match="no kernel 'third'"):
        td.backends.llvm.LoadedModule(str(tmp_path / "ab.so"), "third")


@needs_gcc
def test_export_library_is_self_contained(tmp_path):
    f = scaled_add("sadd_self")
    f.export_library(str(tmp_path / "lib.so"))
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    shutil.move(str(tmp_path / "lib.so"), moved / "renamed.so")
    loaded = td.load_module(str(moved / "renamed.so"))
    assert "define i32" in loaded.get_source("ll")
    a, b, d, c = operands(2, 9)
    loaded(a, b, d, c)
    np.testing.assert_allclose(c, expected(a, b, d), rtol=1e-6)
    loaded.export_library(str(tmp_path / "copy.so"))
    assert not (tmp_path / "copy.so.json").exists()
    td.load_module(str(tmp_path / "copy.so"))(a, b, d, c)


@needs_gcc
def test_old_json_sidecar_library_still_loads(tmp_path):
    """A library from an older tdsl: a ``void`` entry and its signature in ``.so.json``."""
    f = scaled_add("sadd_old")
    (tmp_path / "old.c").write_text(textwrap.dedent("""
        #include <stdint.h>
        void sadd_old(const float *A, const float *B, const float *D, float *C, int64_t n,
                      int64_t m) {
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < 2 * m; j++)
                    C[i * 2 * m + j] = A[i * 2 * m + j] + 2.0f * B[i * 2 * m + j] + D[j / 2];
        }
    """))
    so = tmp_path / "old.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(so), str(tmp_path / "old.c")],
                   check=True, capture_output=True)
    meta = signature_to_json(f.func, "sadd_old", target="llvm", parallel=False)
    (tmp_path / "old.so.json").write_text(json.dumps(meta))
    loaded = td.load_module(str(so))
    a, b, d, c = operands(3, 4)
    loaded(a, b, d, c)
    np.testing.assert_allclose(c, expected(a, b, d), rtol=1e-6)
    assert loaded._fn.restype is None  # a void entry: no status to read


def test_built_module_checks_the_status(monkeypatch):
    """A nonzero status from the native call surfaces as an error, never silently."""
    f = scaled_add("sadd_status")
    a, b, d, c = operands(2, 2)
    f(a, b, d, c)
    proto = ctypes.CFUNCTYPE(ctypes.c_int32, *([ctypes.c_void_p] * 4 + [ctypes.c_int64] * 2))
    fake = proto(lambda *args: cabi.STATUS_BAD_SIZE)
    monkeypatch.setattr(f.compiled, "cfunc", fake)
    with pytest.raises(BuildError, match="TDSL_ERR_BAD_SIZE"):
        f(a, b, d, c)


@needs_gcc
def test_parallel_kernel_linked_without_gomp_says_so(tmp_path):
    f = scaled_add("sadd_nogomp", parallel=True)
    f.save(str(tmp_path / "k.o"))
    subprocess.run(["gcc", "-shared", "-o", str(tmp_path / "k.so"), str(tmp_path / "k.o"),
                    "-lm"], check=True, capture_output=True)
    # a fresh process, where nothing has loaded libgomp yet
    code = ("import tdsl as td\ntry:\n    td.load_module(%r)\nexcept td.BuildError as e:\n"
            "    print(e)\n" % str(tmp_path / "k.so"))
    import sys
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "undefined symbol" in r.stdout and "link the library with -lgomp" in r.stdout, \
        r.stdout + r.stderr
