"""Export (.so + C header), loading back, a C program calling the kernel,
and cross-compilation to object code."""
from __future__ import annotations

import shutil
import subprocess
import textwrap

import numpy as np
import pytest

from tdsl.errors import BuildError, ShapeError

try:
    from .llvm_irbuild import P, S, tiled_matmul
except ImportError:
    from llvm_irbuild import P, S, tiled_matmul

from tdsl.backends.llvm import build, load_module

RNG = np.random.default_rng(11)
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not found")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TDSL_CACHE_DIR", str(tmp_path / "cache"))


def operands(m, k, n):
    return (RNG.standard_normal((m, k)).astype("float32"),
            RNG.standard_normal((k, n)).astype("float32"),
            RNG.standard_normal((m, n)).astype("float32"))


@needs_gcc
@pytest.mark.parametrize("parallel", [False, True])
def test_export_load_roundtrip(tmp_path, parallel):
    mod = build(tiled_matmul("mm", K=32, outer=P if parallel else S))
    path = tmp_path / "mm.so"
    mod.export_library(str(path))
    assert path.exists() and (tmp_path / "mm.h").exists() and not (tmp_path / "mm.so.json").exists()
    loaded = load_module(str(path))
    a, b, c = operands(9, 32, 23)
    loaded(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    with pytest.raises(ShapeError):  # the same argument checks as the built module
        loaded(a, b[:, :5].copy(), c)
    with pytest.raises(ShapeError, match="too few"):
        loaded(a)
    np.testing.assert_allclose(loaded(a, b), a @ b, rtol=1e-4, atol=1e-4)  # allocates C
    assert "define" in loaded.get_source("ll")
    r = loaded.time_evaluator(number=2, repeat=2)(a, b, c)
    assert len(r.results) == 2 and r.mean > 0


def _elf_dynamic(path) -> tuple[str, str]:
    """(NEEDED libraries, undefined dynamic symbols) of a shared library, by readelf/nm."""
    needed = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True).stdout
    undefined = subprocess.run(["nm", "-D", "--undefined-only", str(path)],
                               capture_output=True, text=True).stdout
    return needed, undefined


@needs_gcc
@pytest.mark.skipif(shutil.which("readelf") is None or shutil.which("nm") is None,
                    reason="binutils (readelf, nm) not found")
def test_exported_parallel_library_carries_its_own_thread_pool(tmp_path):
    """A parallel kernel's library runs on tdsl's pool, not libgomp: the JIT-built kernel's
    runtime (libgomp's fork-join waits for every thread and measured 20-40x slower on a busy
    machine, so tuning candidates -- timed from exported libraries -- were mis-ranked).  The
    pool is hidden: the library neither needs nor exports GOMP_parallel."""
    import sys
    mod = build(tiled_matmul("mm_pool", K=32, outer=P))
    path = tmp_path / "mm.so"
    mod.export_library(str(path))
    needed, undefined = _elf_dynamic(path)
    assert "libgomp" not in needed and "GOMP_parallel" not in undefined, needed + undefined
    exported = subprocess.run(["nm", "-D", "--defined-only", str(path)],
                              capture_output=True, text=True).stdout
    assert "GOMP_parallel" not in exported and "tdsl_pool" not in exported, exported
    # a fresh process that never loads libgomp: two threads, two libraries, the right answer
    mod.export_library(str(tmp_path / "mm2.so"))
    code = textwrap.dedent(f"""
        import numpy as np, tdsl as td
        rng = np.random.default_rng(3)
        for name in ("mm.so", "mm2.so", "mm.so"):
            m = td.load_module({str(tmp_path)!r} + "/" + name)
            m.set_num_threads(2)
            a, b = (rng.standard_normal(s).astype("float32") for s in ((37, 32), (32, 29)))
            c = rng.standard_normal((37, 29)).astype("float32")
            for _ in range(20):
                m(a, b, c)
            np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
        maps = open("/proc/self/maps").read()
        print("gomp loaded" if "libgomp" in maps else "no gomp")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env={**__import__("os").environ, "TDSL_CACHE_DIR": "off"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no gomp" in r.stdout, r.stdout


@needs_gcc
def test_header_and_c_program(tmp_path):
    mod = build(tiled_matmul("mm", K=32, outer=P))
    mod.export_library(str(tmp_path / "mm.so"))
    header = (tmp_path / "mm.h").read_text()
    assert "int32_t mm(const float *A, const float *B, float *C, int64_t m, int64_t n);" in header
    assert "Arguments, in this order" in header and "mm_set_num_threads" in header
    prog = tmp_path / "main.c"
    prog.write_text(textwrap.dedent("""
        #include <stdio.h>
        #include <stdlib.h>
        #include <math.h>
        #include "mm.h"
        int main(void) {
            const int64_t m = 11, n = 19, k = 32;
            float *A = malloc(sizeof(float) * m * k), *B = malloc(sizeof(float) * k * n);
            float *C = malloc(sizeof(float) * m * n);
            for (int64_t i = 0; i < m * k; i++) A[i] = (float)((i * 7) % 13) - 6.0f;
            for (int64_t i = 0; i < k * n; i++) B[i] = (float)((i * 5) % 11) - 5.0f;
            for (int64_t i = 0; i < m * n; i++) C[i] = 12345.0f;
            mm_set_num_threads(2);
            if (mm(A, B, C, m, n) != TDSL_OK) return 2;
            double err = 0;
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) {
                    double s = 0;
                    for (int64_t p = 0; p < k; p++) s += A[i * k + p] * B[p * n + j];
                    err = fmax(err, fabs(s - C[i * n + j]));
                }
            printf("max error %g\\n", err);
            return err < 1e-3 ? 0 : 1;
        }
    """))
    exe = tmp_path / "main"
    subprocess.run(["gcc", "-O1", "-o", str(exe), str(prog), f"-I{tmp_path}", str(tmp_path / "mm.so"),
                    f"-Wl,-rpath,{tmp_path}", "-lm"], check=True, capture_output=True)
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "max error 0" in r.stdout


def test_load_module_errors(tmp_path):
    with pytest.raises(BuildError, match="no such file"):
        load_module(str(tmp_path / "missing.so"))
    (tmp_path / "x.so").write_bytes(b"not a library")
    with pytest.raises(BuildError, match="no tdsl kernel signature"):
        load_module(str(tmp_path / "x.so"))


def test_save_object_and_sources(tmp_path):
    mod = build(tiled_matmul("mm_save", K=16))
    mod.save(str(tmp_path / "k.o"))
    assert (tmp_path / "k.o").read_bytes()[:4] == b"\x7fELF"
    mod.save(str(tmp_path / "k.ll"))
    assert "define i32 @\"mm_save\"" in (tmp_path / "k.ll").read_text()
    assert "mm_save" in mod.get_source("asm")
    assert "mm_save" in mod.get_source("ll-opt")
    with pytest.raises(BuildError):
        mod.get_source("cuda")


def test_cross_compile_aarch64_object_only(tmp_path):
    mod = build(tiled_matmul("mm_arm", K=16), "llvm -mtriple=aarch64-linux-gnu")
    assert not mod.runnable
    mod.save(str(tmp_path / "arm.o"))
    data = (tmp_path / "arm.o").read_bytes()
    assert data[:4] == b"\x7fELF" and int.from_bytes(data[18:20], "little") == 183  # EM_AARCH64
    assert "fmla" in mod.get_source("asm") or "fmadd" in mod.get_source("asm")
    a, b, c = operands(4, 16, 16)
    with pytest.raises(BuildError, match="cannot run on this machine"):
        mod(a, b, c)
    mod.export_library(str(tmp_path / "arm_export.o"))
    assert (tmp_path / "arm_export.h").exists()


def test_other_cpu_target_builds_object(tmp_path):
    mod = build(tiled_matmul("mm_zen", K=16), "llvm -mcpu=znver3 -mattr=+avx2")
    mod.save(str(tmp_path / "zen.o"))
    asm = mod.get_source("asm")
    assert "ymm" in asm and "zmm" not in asm  # AVX2, no AVX-512 for znver3
    if mod.runnable:
        a, b, c = operands(5, 16, 20)
        mod(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    with pytest.raises(BuildError, match="not a recognized processor"):
        build(tiled_matmul("mm_bad", K=16), "llvm -mcpu=not-a-real-cpu-name")
