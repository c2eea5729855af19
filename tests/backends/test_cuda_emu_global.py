"""The emulator's global-memory checks: races between blocks of one launch and between
threads of a block, out-of-bounds indices, blocks run in two orders, and __syncwarp
ordering of a warp's lanes against its collective (WMMA) operations."""
from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

import tdsl as td
from tdsl.backends import cuda
from tdsl.backends.cuda import EmulationError, GlobalMemoryRaceError

from .test_cuda_emulator import data, stencil
from .test_cuda_schedules import workload

pytestmark = pytest.mark.skipif(shutil.which("g++") is None,
                                reason="g++ is not installed: the CUDA emulation harness needs it")
thread = td.thread_axis


def test_blocks_reading_other_blocks_partials_is_a_race() -> None:
    """Repro e1: rfactor partials computed by blockIdx.y blocks and summed in the same
    launch (the __syncthreads between them orders one block only)."""
    m, n = 8, 64
    X = td.placeholder((m, n), name="X")
    k = td.reduce_axis((0, n), name="k")
    S = td.compute((m,), lambda i: td.sum(X[i, k], axis=k), name="S")
    s = td.create_schedule(S.op)
    ko, _ = s[S].split(s[S].op.reduce_axis[0], nparts=4)
    SR = s.rfactor(S, ko)
    (i,) = s[S].op.axis
    s[S].bind(i, thread("blockIdx.x"))
    s[SR].compute_at(s[S], i)
    s[SR].set_scope("global")
    s[SR].bind(s[SR].op.axis[0], thread("blockIdx.y"))
    f = td.build(s, [X, S], target="cuda")
    x = np.random.default_rng(0).random((m, n)).astype("float32")
    with pytest.raises(GlobalMemoryRaceError, match="another block") as e:
        f.emulate(x, np.empty(m, "float32"))
    assert e.value.first[0] != e.value.second[0]


def test_threads_recomputing_a_global_intermediate_race() -> None:
    """Repro e3: a global stage at the block loop, not bound to threads: every thread
    accumulates into the same elements."""
    n = td.var("n")
    A = td.placeholder((n, 16), name="A")
    k = td.reduce_axis((0, 16), name="k")
    B = td.compute((n,), lambda i: td.sum(A[i, k], axis=k), name="B")
    C = td.compute((n,), lambda i: B[i] * 2.0, name="C")
    s = td.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=32)
    s[C].bind(bx, thread("blockIdx.x"))
    s[C].bind(tx, thread("threadIdx.x"))
    s[B].compute_at(s[C], bx)
    s[B].set_scope("global")
    f = td.build(s, [A, C], target="cuda")
    a = np.random.default_rng(1).random((40, 16)).astype("float32")
    with pytest.raises(GlobalMemoryRaceError, match="write"):
        f.emulate(a, np.empty(40, "float32"))


def test_out_of_bounds_global_index_is_reported() -> None:
    f = stencil()
    src = f.get_source()
    bad = re.sub(r"([=?]) A\[", r"\1 A[1000 + ", src, count=1)   # the fetch (zero-filled: ?)
    assert bad != src
    a, b = data()
    with pytest.raises(EmulationError, match="outside its 404 bytes"):
        f.emulate(a, b, source=bad)


def test_result_that_depends_on_block_order_is_reported() -> None:
    """A write the shadow does not see (through a raw pointer): the last block wins, and
    blocks in order and in reverse order leave different results."""
    f = stencil()
    src = f.get_source()
    at = src.rindex("}")
    bad = src[:at] + "  ((float*)(unsigned long long)B)[0] = (float)blockIdx.x;\n" + src[at:]
    a, b = data()
    with pytest.raises(EmulationError, match="order the blocks run"):
        f.emulate(a, b, source=bad)
    f.emulate(a, b, source=bad, check_races=False)   # one order: nothing to compare


def _lanes_fill_then_load(sync: bool) -> str:
    """The WMMA matmul with its register accumulator replaced by the old shape: each lane
    zero-fills its 8 elements of the C tile, then the warp loads the tile."""
    src = workload("wmma_matmul").module.get_source()
    tile = re.search(r"tdsl_wmma_store_acc_row\((C \+ [^,]+), wmma_acc, 64\)", src).group(1)
    fill = ("for (int e = 0; e < 8; ++e) { long long q = threadIdx.x * 8 + e; "
            f"({tile})[q / 16 * 64 + q % 16] = 0.0f; }}\n  "
            + ("__syncwarp();\n  " if sync else "")
            + f"tdsl_wmma_load_acc_row(wmma_acc, {tile}, 64);")
    out = src.replace("tdsl_wmma_fill_acc(wmma_acc, 0.0f);", fill)
    assert out != src
    return out


def test_missing_syncwarp_before_a_collective_load_is_a_race() -> None:
    """Repro e6's question: lanes' plain stores and the warp's WMMA load of them need a
    __syncwarp between them; the emulator reports its absence."""
    w = workload("wmma_matmul")
    arrays = w.inputs(np.random.default_rng(0))
    w.module.emulate(*arrays, source=_lanes_fill_then_load(sync=True))
    np.testing.assert_allclose(arrays[-1], w.reference(arrays), rtol=1e-3, atol=1e-3)
    with pytest.raises(GlobalMemoryRaceError, match="warp 0.*read-after-write|read-after-write"):
        w.module.emulate(*arrays, source=_lanes_fill_then_load(sync=False))


def test_wmma_accumulator_stays_in_registers_across_k() -> None:
    """The zero-init and the per-k load/store of the C tile become one fill and one store
    (repro e7's race report came from 32 lanes zero-filling one tile)."""
    w = workload("wmma_matmul")
    src = w.module.get_source()
    body = src[src.index('extern "C"'):]
    assert "tdsl_wmma_load_acc" not in body
    assert body.count("tdsl_wmma_store_acc_row(") == 1
    assert "tdsl_wmma_fill_acc(" in body
    loop = body[re.search(r"for \((?:int|long long) k_outer", body).start():body.index("tdsl_wmma_store_acc_row(")]
    assert "C[" not in loop and "C + " not in loop      # no C traffic inside the k loop
    arrays = w.inputs(np.random.default_rng(3))
    w.module.emulate(*arrays)
    np.testing.assert_allclose(arrays[-1], w.reference(arrays), rtol=1e-3, atol=1e-3)


def test_tensorized_shared_accumulator_compiles_and_emulates() -> None:
    """Repro e7 (cache_write(C, "shared") tensorized): emulates correctly, no race."""
    N = K = 64
    A = td.placeholder((N, K), "float16", name="A")
    B = td.placeholder((K, N), "float16", name="B")
    k = td.reduce_axis((0, K), name="k")
    C = td.compute((N, N), lambda i, j: td.sum(A[i, k].astype("float32") *
                                                 B[k, j].astype("float32"), axis=k), name="C")
    s = td.create_schedule(C.op)
    AS, BS = s.cache_read(A, "shared", [C]), s.cache_read(B, "shared", [C])
    CS = s.cache_write(C, "shared")
    i, j = s[C].op.axis
    bi, ii = s[C].split(i, factor=32)
    bj, jj = s[C].split(j, factor=32)
    s[C].reorder(bi, bj, ii, jj)
    s[C].bind(bi, thread("blockIdx.y"))
    s[C].bind(bj, thread("blockIdx.x"))
    f_ = s[C].fuse(ii, jj)
    r, tx = s[C].split(f_, factor=32)
    r, ty = s[C].split(r, factor=2)
    _, tz = s[C].split(r, factor=2)
    for ax, tag in ((tx, "x"), (ty, "y"), (tz, "z")):
        s[C].bind(ax, thread(f"threadIdx.{tag}"))
    s[CS].compute_at(s[C], bj)
    ci, cj = s[CS].op.axis
    cio, cii = s[CS].split(ci, factor=16)
    cjo, cji = s[CS].split(cj, factor=16)
    ko, ki = s[CS].split(s[CS].op.reduce_axis[0], factor=16)
    s[CS].reorder(cio, cjo, ko, cii, cji, ki)
    s[CS].bind(cio, thread("threadIdx.z"))
    s[CS].bind(cjo, thread("threadIdx.y"))
    for S in (AS, BS):
        s[S].compute_at(s[CS], ko)
        fused = s[S].fuse(*s[S].op.axis)
        rest, tx = s[S].split(fused, factor=32)
        rest, ty = s[S].split(rest, factor=2)
        _, tz = s[S].split(rest, factor=2)
        for ax, tag in ((tx, "x"), (ty, "y"), (tz, "z")):
            s[S].bind(ax, thread(f"threadIdx.{tag}"))
    s[CS].tensorize(cii, cuda.wmma_intrin())
    f = td.build(s, [A, B, C], target="cuda")
    g = np.random.default_rng(0)
    a = (g.random((N, K)) - .5).astype("float16")
    b = (g.random((K, N)) - .5).astype("float16")
    c = np.full((N, N), np.nan, "float32")
    f.emulate(a, b, c)
    np.testing.assert_allclose(c, a.astype("float32") @ b.astype("float32"), rtol=1e-3,
                               atol=1e-3)


def test_atomics_on_global_memory_compile_and_run() -> None:
    """``atomicAdd(&B[i], 1.0f)`` (the address of a tracked global element) after each
    thread's store to ``B[i]``."""
    f = stencil()
    src = f.get_source()
    m = re.search(r"B\[([^\]]+)\] = [^;]*;", src)
    edited = src[:m.end()] + f" atomicAdd(&B[{m.group(1)}], 1.0f);" + src[m.end():]
    a, b = data()
    f.emulate(a, b, source=edited)
    np.testing.assert_allclose(b, a[:-1] + a[1:] + 1, rtol=1e-6)
