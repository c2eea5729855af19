"""A kernel links and runs correctly wherever free address space lies.

Kernel objects are small-code-model PIC: code reaches its constants and GOT with 32-bit
PC-relative offsets, so one object's sections must be mapped within 2 GiB of each other.
When the JIT mapped each section separately (RuntimeDyld), a process that had built and freed
many kernels -- the test suite in one process, a tuning run -- left holes all over a large
address space, one section of a new kernel landed in a hole gigabytes away from the others
and LLVM aborted the process (``RuntimeDyldELF.cpp: resolveX86_64Relocation: Assertion
`isInt<32>(RealOffset)' failed``).

The child process here makes that layout on purpose: it reserves 8 GiB of address space
(no memory: ``PROT_NONE``, ``MAP_NORESERVE``), fills every free gap above it and frees the
reservation's top page, so a section that fits the page goes there and the next one below
the 8 GiB.  It then builds
distinct kernels (an elementwise one with vector constants, a parallel one, a tiled matmul)
and checks them against NumPy.  It runs in a subprocess because the failure aborts the
process; the layout is made again before every build, as allocations come and go.
"""
import os
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent(r'''
    import ctypes, os, sys
    import numpy as np
    import tdsl as td

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    PROT_NONE, MAP_PRIVATE, MAP_ANONYMOUS, MAP_NORESERVE = 0, 0x2, 0x20, 0x4000
    MAP_FIXED_NOREPLACE = 0x100000
    FAILED = ctypes.c_void_p(-1).value
    PAGE = os.sysconf("SC_PAGE_SIZE")


    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


    def reserve(addr, size, flags=0):
        r = libc.mmap(addr, size, PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | flags, -1, 0)
        if r in (None, FAILED):
            return None
        if addr is not None and r != addr:     # a kernel without MAP_FIXED_NOREPLACE
            libc.munmap(r, size)
            return None
        return r


    def mappings():
        out = []
        with open("/proc/self/maps") as f:
            for line in f:
                fields = line.split()
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                out.append((lo, hi, fields[5] if len(fields) > 5 else ""))
        return sorted(out)


    class Layout:
        """8 GiB of address space reserved; before each build every free gap above it is
        filled and one page is freed at its top: the only place above for a section."""

        def __init__(self, size=8 << 30):
            self.low = reserve(None, size)
            assert self.low, "could not reserve 8 GiB of address space"
            self.top = self.low + size

        def one_page_above(self):
            maps = mappings()
            for (_, end, _), (nxt, _, name) in zip(maps, maps[1:]):
                if name == "[stack]":
                    break
                if end >= self.low and nxt > end:
                    reserve(end, nxt - end, MAP_FIXED_NOREPLACE)   # a refused gap stays
            self.top -= PAGE
            libc.munmap(self.top, PAGE)


    def scale(k):
        n = td.var("n")
        A = td.placeholder((n,), name="A")
        B = td.compute((n,), lambda i: td.exp(A[i] * (0.25 + k)) * (k + 1.5) - 0.75 * k,
                       name="B")
        s = td.create_schedule(B.op)
        xo, xi = s[B].split(B.op.axis[0], factor=8)
        s[B].vectorize(xi)
        return td.build(s, [A, B], target="llvm")


    def parallel(k):
        n = td.var("n")
        A = td.placeholder((n,), name="A")
        B = td.compute((n,), lambda i: A[i] * (k + 0.5) + 2.0 * k, name="B")
        s = td.create_schedule(B.op)
        xo, _ = s[B].split(B.op.axis[0], factor=16)
        s[B].parallel(xo)
        return td.build(s, [A, B], target="llvm")


    def matmul(k, n=40):
        A = td.placeholder((n, n), name="A")
        W = td.placeholder((n, n), name="W")
        r = td.reduce_axis((0, n), name="r")
        C = td.compute((n, n), lambda i, j: td.sum(A[i, r] * W[r, j], axis=r), name="C")
        D = td.compute((n, n), lambda i, j: C[i, j] * (k + 0.125) + 1.0, name="D")
        s = td.create_schedule(D.op)
        i, j = s[C].op.axis
        io, ii = s[C].split(i, factor=4)
        jo, ji = s[C].split(j, factor=16)
        s[C].reorder(io, jo, r, ii, ji)
        s[C].vectorize(ji)
        return td.build(s, [A, W, D], target="llvm")


    rng = np.random.default_rng(7)
    f32 = np.float32
    scale(-1)                                   # the engine and LLVM set up
    layout = Layout()
    for k in range(3):
        layout.one_page_above()
        mod = scale(k)
        a = rng.standard_normal(1003).astype("float32")
        b = np.full_like(a, np.nan)
        mod(a, b)
        want = np.exp(a * f32(0.25 + k)) * f32(k + 1.5) - f32(0.75 * k)
        np.testing.assert_allclose(b, want, rtol=2e-5, atol=1e-5)

        layout.one_page_above()
        mod = parallel(k)
        a = rng.standard_normal(1001).astype("float32")
        b = np.full_like(a, np.nan)
        mod(a, b)
        np.testing.assert_allclose(b, a * f32(k + 0.5) + f32(2.0 * k), rtol=1e-5, atol=1e-5)

        layout.one_page_above()
        mod = matmul(k)
        a = rng.standard_normal((40, 40)).astype("float32")
        w = rng.standard_normal((40, 40)).astype("float32")
        d = np.full_like(a, np.nan)
        mod(a, w, d)
        want = (a.astype("float64") @ w) * (k + 0.125) + 1.0
        np.testing.assert_allclose(d, want, rtol=1e-4, atol=1e-3)
    print("all kernels correct")
''')


@pytest.mark.skipif(not sys.platform.startswith("linux") or not os.path.exists("/proc/self/maps")
                    or sys.maxsize < 2 ** 40,
                    reason="lays out the address space with mmap and /proc/self/maps "
                           "(64-bit Linux only)")
def test_kernel_sections_far_apart_in_address_space_link_and_run(tmp_path):
    env = {**os.environ, "TDSL_CACHE_DIR": "off"}
    r = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                       timeout=240, env=env, cwd=tmp_path)
    assert r.returncode == 0 and "all kernels correct" in r.stdout, (
        f"exit status {r.returncode}\nstdout:\n{r.stdout[-2000:]}\nstderr:\n{r.stderr[-3000:]}")
