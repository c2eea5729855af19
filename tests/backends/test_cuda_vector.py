"""Vector memory accesses (float4, float2, double2, int4, tdsl_half2/4) for VECTORIZED loops
in CUDA kernels: where they are emitted, that NVRTC compiles them to vector instructions,
that the emulation harness runs them (alignment checked, every shared lane tracked by the
race detector), and where the scalar loop is kept instead."""
from __future__ import annotations

import functools
import re
import shutil

import numpy as np
import pytest

import tdsl as td
from tdsl.backends.cuda import EmulationError, SharedMemoryRaceError, nvrtc

needs_nvrtc = pytest.mark.skipif(not nvrtc.is_available(),
                                 reason="NVRTC is not installed (pip install tdsl[cuda])")
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None,
                               reason="g++ is not installed: the CUDA emulation harness needs it")

BARRIER = "__syncthreads();"


def thread(tag: str):
    return td.thread_axis(tag)


def kernel_text(f) -> str:
    """The kernels of ``f``'s source, without the prelude."""
    src = f.get_source()
    return src[src.index('extern "C"'):]


def without_barrier(source: str, index: int) -> str:
    starts = [m.start() for m in re.finditer(re.escape(BARRIER), source)]
    return source[:starts[index]] + source[starts[index] + len(BARRIER):]


def misaligned(shape: tuple, dtype: str, rng: np.random.Generator) -> np.ndarray:
    """A C-contiguous array whose data starts one element past an aligned address."""
    size = int(np.prod(shape))
    buf = np.zeros(size + 16, dtype)
    start = -(-buf.ctypes.data // 16) * 16 + buf.itemsize     # 16-byte boundary + 1 element
    off = (start - buf.ctypes.data) // buf.itemsize
    a = buf[off:off + size].reshape(shape)
    a[...] = rng.random(shape) if np.dtype(dtype).kind == "f" else rng.integers(0, 9, shape)
    assert a.ctypes.data % 16 != 0 and a.flags.c_contiguous
    return a


# ---- the tiled matmul with vectorized cooperative fetches ----------------------------------------
@functools.lru_cache(maxsize=None)
def tiled_matmul(symbolic: bool = False):
    """The classic schedule: 32x32 block tiles, 8x8 threads with 4x4 register tiles; each
    shared tile (32x8 of A, 8x32 of B) fused, split by 4 and vectorized, the rest bound to
    threadIdx.x/y (64 threads x 4 elements = 256 elements per tile)."""
    n = td.var("n") if symbolic else 64
    K, V, T = 64, 4, 8
    A = td.placeholder((n, K), name="A")
    B = td.placeholder((K, n), name="B")
    k = td.reduce_axis((0, K), name="k")
    C = td.compute((n, n), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = td.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    bi, ti = s[C].split(i, factor=V * T)
    bj, tj = s[C].split(j, factor=V * T)
    ty, vi = s[C].split(ti, factor=V)
    tx, vj = s[C].split(tj, factor=V)
    s[C].reorder(bi, bj, ty, tx, vi, vj)
    s[C].bind(bi, thread("blockIdx.y"))
    s[C].bind(bj, thread("blockIdx.x"))
    s[C].bind(ty, thread("threadIdx.y"))
    s[C].bind(tx, thread("threadIdx.x"))
    s[CL].compute_at(s[C], tx)
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=8)
    ci, cj = s[CL].op.axis
    s[CL].reorder(ko, ki, ci, cj)
    s[CL].unroll(ci)
    s[CL].vectorize(cj)
    for S in (AS, BS):
        s[S].compute_at(s[CL], ko)
        fused = s[S].fuse(*s[S].op.axis)
        rest, vec = s[S].split(fused, factor=4)
        rest, fx = s[S].split(rest, factor=T)
        _, fy = s[S].split(rest, factor=T)
        s[S].bind(fx, thread("threadIdx.x"))
        s[S].bind(fy, thread("threadIdx.y"))
        s[S].vectorize(vec)
    return td.build(s, [A, B, C], target="cuda")


def matmul_data(n: int, seed: int = 0, aligned: bool = True) -> list:
    g = np.random.default_rng(seed)
    if aligned:
        a, b = g.random((n, 64), "float32"), g.random((64, n), "float32")
    else:
        a, b = misaligned((n, 64), "float32", g), misaligned((64, n), "float32", g)
    return [a, b, np.full((n, n), np.nan, "float32")]


def test_cooperative_fetch_is_float4() -> None:
    src = kernel_text(tiled_matmul())
    # both global -> shared fetches are one float4 load and one float4 store per thread
    assert re.search(r"tdsl_vload<float4>\(A \+ ", src)
    assert re.search(r"tdsl_vload<float4>\(B \+ ", src)
    assert "tdsl_vstore(A_shared.ptr(" in src and "tdsl_vstore(B_shared.ptr(" in src
    # the register tile's update reads B_shared as float4 and is computed lane by lane
    assert "tdsl_vload<float4>(B_shared.ptr(" in src
    assert re.search(r"\.w = \w+\.w \+ \w+ \* \w+\.w;", src)
    assert "__align__(16) float C_local[16];" in src
    # user arrays may start anywhere: their alignment is tested once per launch
    assert "const bool A_aligned16 = ((unsigned long long)A & 15) == 0;" in src
    assert "if (A_aligned16)" in src


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_vector_fetch_compiles_to_vector_instructions(arch: str) -> None:
    f = tiled_matmul()
    ptx = f.ptx(arch)
    assert f".target {arch}" in ptx and f".entry {f.kernel_names[0]}(" in ptx
    assert re.search(r"ld\.global(\.nc)?\.v4\.f32", ptx)
    assert "st.shared.v4.f32" in ptx and "ld.shared.v4.f32" in ptx


@needs_gxx
def test_vector_fetch_matches_numpy_under_emulation() -> None:
    f = tiled_matmul()
    arrays = matmul_data(64)
    assert all(a.ctypes.data % 16 == 0 for a in arrays)
    f.emulate(*arrays)
    np.testing.assert_allclose(arrays[2], arrays[0] @ arrays[1], rtol=1e-5, atol=1e-5)


@needs_gxx
def test_misaligned_user_arrays_take_the_scalar_loop() -> None:
    """A view that starts off a 16-byte boundary runs the scalar fallback (same results);
    forcing the vector path on it is reported by the harness as a GPU would fault."""
    f = tiled_matmul()
    arrays = matmul_data(64, seed=1, aligned=False)
    f.emulate(*arrays)
    np.testing.assert_allclose(arrays[2], arrays[0] @ arrays[1], rtol=1e-5, atol=1e-5)
    forced = f.get_source().replace("& 15) == 0;", "& 15) == 0 || true;")
    assert forced != f.get_source()
    with pytest.raises(EmulationError, match="misaligned vector access"):
        f.emulate(*arrays, source=forced)


@needs_gxx
def test_symbolic_size_fetch_vectorizes_only_what_is_provably_aligned() -> None:
    """With a symbolic n, a row of A starts at a multiple of K = 64 (vectorized, the row
    guard is the same for the 4 lanes), but a row of B starts at k * n: not provably a
    multiple of 4, so B's fetch stays scalar.  The register tile's FMAs carry no j < n
    guard (the fetches zero-fill past n: tdsl/lowering/padding.py): float4 throughout,
    and only the final store is guarded."""
    f = tiled_matmul(symbolic=True)
    src = kernel_text(f)
    assert re.search(r"tdsl_vload<float4>\(A \+ ", src)
    assert not re.search(r"tdsl_vload<float4>\(B \+ ", src)
    assert "tdsl_vstore(A_shared.ptr(" in src and "tdsl_vstore(B_shared.ptr(" not in src
    fma = re.search(r"\n( *)float4 C_local_v_\d+;\n\1C_local_v_\d+\.x = C_local_v_\d+\.x \+ ", src)
    assert fma and not re.search(r"j_outer \* 32 \+ \w+ \* 4 \+ 3 < n\)", src)
    for n in (70, 33):
        arrays = matmul_data(n, seed=n)
        f.emulate(*arrays)
        np.testing.assert_allclose(arrays[2], arrays[0] @ arrays[1], rtol=1e-5, atol=1e-5)


@needs_gxx
def test_removed_barrier_after_vectorized_fetch_is_a_race() -> None:
    f = tiled_matmul()
    src = f.get_source()
    arrays = matmul_data(64)
    last = src.count(BARRIER) - 1   # the one between the fetches and the compute loop
    with pytest.raises(SharedMemoryRaceError) as info:
        f.emulate(*arrays, source=without_barrier(src, last))
    assert "A_shared" in info.value.buffer or "B_shared" in info.value.buffer
    with pytest.raises(SharedMemoryRaceError):   # the next iteration's fetch overwrites
        f.emulate(*arrays, source=without_barrier(src, 0))


@functools.lru_cache(maxsize=None)
def neighbour_lane3():
    """32 threads fetch a 128-element shared tile as float4; thread i then reads lane 3 of
    thread i + 1's vector."""
    A = td.placeholder((2, 128), name="A")
    C = td.compute((2, 32), lambda b, i: A[b, (i + 1) % 32 * 4 + 3] + A[b, i * 4], name="C")
    s = td.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    b, tx = s[C].op.axis
    s[C].bind(b, thread("blockIdx.x"))
    s[C].bind(tx, thread("threadIdx.x"))
    s[AS].compute_at(s[C], b)
    rest, vec = s[AS].split(s[AS].fuse(*s[AS].op.axis), factor=4)
    s[AS].bind(rest, thread("threadIdx.x"))
    s[AS].vectorize(vec)
    return td.build(s, [A, C], target="cuda")


@needs_gxx
def test_race_detector_sees_every_lane_of_a_vector_store() -> None:
    f = neighbour_lane3()
    src = f.get_source()
    assert "tdsl_vstore(A_shared.ptr(" in src and src.count(BARRIER) == 1
    a = np.arange(256, dtype="float32").reshape(2, 128)
    c = np.empty((2, 32), "float32")
    f.emulate(a, c)
    np.testing.assert_array_equal(c, a[:, (np.arange(32) + 1) % 32 * 4 + 3] + a[:, ::4])
    with pytest.raises(SharedMemoryRaceError) as info:
        f.emulate(a, c, source=without_barrier(src, 0))
    assert info.value.offset % 4 == 3   # the race is on the vector's last lane


# ---- elementwise kernels: dtypes, symbolic sizes with a tail, and fallbacks ---------------------
@functools.lru_cache(maxsize=None)
def elementwise(dtype: str, lanes: int, shift: int = 0, stride: int = 1):
    """C[i] = A[stride * i + shift] * B[i] + B[i] over a symbolic n: 64 threads per block,
    each handling ``lanes`` consecutive elements in a vectorized loop."""
    n = td.var("n")
    A = td.placeholder((stride * n + shift,), dtype, name="A")
    B = td.placeholder((n,), dtype, name="B")
    C = td.compute((n,), lambda i: A[stride * i + shift] * B[i] + B[i], name="C")
    s = td.create_schedule(C.op)
    bo, rest = s[C].split(C.op.axis[0], factor=64 * lanes)
    tx, vec = s[C].split(rest, factor=lanes)
    s[C].bind(bo, thread("blockIdx.x"))
    s[C].bind(tx, thread("threadIdx.x"))
    s[C].vectorize(vec)
    return td.build(s, [A, B, C], target="cuda")


def elementwise_check(f, dtype: str, n: int, shift: int = 0, stride: int = 1,
                      aligned: bool = True) -> None:
    g = np.random.default_rng(n)
    size = stride * n + shift
    if aligned:
        a = (g.random(size) * 4).astype(dtype)
        b = (g.random(n) * 4).astype(dtype)
    else:
        a, b = misaligned((size,), dtype, g), misaligned((n,), dtype, g)
    c = np.zeros(n, dtype)
    f.emulate(a, b, c)
    x = a[shift::stride][:n]
    tol = 1e-3 if dtype == "float16" else 1e-6
    np.testing.assert_allclose(c, x * b + b, rtol=tol)


VECTOR_CASES = [("float32", 4, "float4"), ("float64", 2, "double2"), ("int32", 4, "int4"),
                ("float16", 4, "tdsl_half4")]


@needs_gxx
@pytest.mark.parametrize("dtype,lanes,ctype", VECTOR_CASES)
def test_symbolic_tail_is_guarded(dtype: str, lanes: int, ctype: str) -> None:
    f = elementwise(dtype, lanes)
    src = kernel_text(f)
    assert f"tdsl_vload<{ctype}>(A + " in src and "tdsl_vstore(C + " in src
    # the vector code runs where the last lane is in range, the scalar loop at the tail
    assert re.search(rf"\* {lanes} \+ {lanes - 1} < n\)", src)
    for n in (1, lanes - 1, lanes + 1, 64 * lanes, 64 * lanes + 3, 1001):
        elementwise_check(f, dtype, n)
    elementwise_check(f, dtype, 257, aligned=False)


@needs_nvrtc
@pytest.mark.parametrize("dtype,lanes,ctype", VECTOR_CASES + [("int64", 2, "longlong2"),
                                                           ("float16", 2, "tdsl_half2"),
                                                           ("float32", 2, "float2")])
def test_vector_types_compile(dtype: str, lanes: int, ctype: str) -> None:
    f = elementwise(dtype, lanes)
    assert f"tdsl_vload<{ctype}>" in kernel_text(f)
    for arch in ("sm_80", "sm_90"):
        ptx = f.ptx(arch)
        assert f".entry {f.kernel_names[0]}(" in ptx
        assert re.search(rf"ld\.global(\.nc)?\.v{lanes}\.", ptx)
        assert re.search(rf"st\.global\.v{lanes}\.", ptx)


@needs_gxx
def test_misaligned_offset_keeps_the_scalar_loop() -> None:
    """A[i + 1]: lane 0's element is not a multiple of 4, so no access of the loop is
    vectorized (an aligned store with a misaligned load would still be a misaligned
    float4 load)."""
    f = elementwise("float32", 4, shift=1)
    src = kernel_text(f)
    assert "float4" not in src and "tdsl_vload" not in src and "tdsl_vstore" not in src
    assert "#pragma unroll" in src
    for n in (5, 300):
        elementwise_check(f, "float32", n, shift=1)


@needs_gxx
def test_strided_gather_keeps_the_scalar_loop() -> None:
    f = elementwise("float32", 4, stride=2)
    assert "float4" not in kernel_text(f)
    elementwise_check(f, "float32", 77, stride=2)


# ---- transposing fetches: float4 loads, strided stores ---------------------------------------
@functools.lru_cache(maxsize=None)
def transposed_fetch(n: int = 64):
    """B = 2 A through a transposed shared tile T[j, i] = A[i, j] (32 x 32 a block): the fetch reads
    4 consecutive elements of A's rows (a float4) and stores them down a column of T."""
    A = td.placeholder((n, n), name="A")
    T = td.compute((n, n), lambda j, i: A[i, j], name="T")
    B = td.compute((n, n), lambda i, j: T[j, i] * 2.0, name="B")
    s = td.create_schedule(B.op)
    i, j = s[B].op.axis
    bi, ti = s[B].split(i, factor=32)
    bj, tj = s[B].split(j, factor=32)
    s[B].reorder(bi, bj, ti, tj)
    s[B].bind(bi, thread("blockIdx.y"))
    s[B].bind(bj, thread("blockIdx.x"))
    s[B].bind(tj, thread("threadIdx.x"))
    s[T].set_scope("shared")
    s[T].compute_at(s[B], bj)
    tr, tc = s[T].op.axis                   # T's rows are A's columns: contiguous in A
    ro, rv = s[T].split(tr, factor=4)
    s[T].reorder(ro, tc, rv)
    _, tx = s[T].split(s[T].fuse(ro, tc), factor=32)
    s[T].bind(tx, thread("threadIdx.x"))
    s[T].vectorize(rv)
    s[T].storage_align(tr, 32, 1)
    return td.build(s, [A, B], target="cuda -arch=sm_80")


def test_transposing_fetch_is_float4_loads_and_strided_stores() -> None:
    f = transposed_fetch()
    src = kernel_text(f)
    assert re.search(r"tdsl_vload<float4>\(A \+ ", src)
    assert "stores 33 apart" in src
    assert len(re.findall(r"\bT\[[^\]]*\] = A_v\w*\.[xyzw];", src)) == 4
    assert f.kernels[0].vector_loads_16 >= 1


@needs_gxx
def test_transposing_fetch_matches_numpy_aligned_and_misaligned() -> None:
    f = transposed_fetch()
    g = np.random.default_rng(3)
    for a in (g.random((64, 64), "float32"), misaligned((64, 64), "float32", g)):
        b = np.full((64, 64), np.nan, "float32")
        f.emulate(a, b)
        np.testing.assert_allclose(b, 2 * a, rtol=0, atol=0)


def test_merge_div_mod_makes_a_fused_index_linear() -> None:
    """``t // 9 * 9 + t // 3 % 3 * 3 + t % 3`` (a fused index reaching a (c, 3, 3) buffer)
    is ``t``, times a stride too; a term that does not pair is left alone."""
    from tdsl.arith import Analyzer
    from tdsl.backends.cuda.vectorize import merge_div_mod
    from tdsl.expr import Var
    ana = Analyzer()
    t, u = Var("t", "int64"), Var("u", "int64")
    got = merge_div_mod((t // 9 * 9 + t // 3 % 3 * 3 + t % 3) * 36 + u, ana)
    assert ana.can_prove_equal(got, t * 36 + u) and "//" not in str(got)
    assert ana.can_prove_equal(merge_div_mod(t // 3 % 4 * 3 + t % 3, ana), t % 12)
    kept = merge_div_mod(t // 9 * 9 + u % 9, ana)
    assert "//" in str(kept) and "%" in str(kept)
