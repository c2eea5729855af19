"""The analytic estimate columns of the features (``autotune.analytic``, FEATURE_VERSION 6)."""
import numpy as np

import tdsl as td
from tdsl.autotune import analytic
from tdsl.autotune.features import STORE_LEN, extract_features, store_features, unpack

# columns of a row: the store's estimate, then the program's, at the end of the row
_EST = STORE_LEN - analytic.STORE_EST_LEN - analytic.PROGRAM_EST_LEN
_L1 = _EST + 3          # log2(1 + bytes from beyond L1 per operation)
_CYC = _EST + 6         # log2(estimated cycles per operation)


def _copy_rows(n: int, m: int) -> np.ndarray:
    """A column-order traversal of an (n, m) float32 matrix (C[i, j] = A[j, i] ... by rows
    of A with a stride of m): the inner loop walks a column of A."""
    A = td.placeholder((n, m), "float32", name="A")
    C = td.compute((m, n), lambda j, i: A[i, j] * 2.0, name="C")
    s = td.create_schedule(C.op)
    return store_features(td.lower(s, [A, C]))


def test_level_traffic_grows_when_the_tile_leaves_the_cache():
    # a (rows x 1024) float32 tile read twice over (an outer loop of 2 that does not move
    # it): it is loaded once while it fits in 32 KiB, twice once it does not
    def traffic(rows: int) -> float:
        return analytic.level_traffic([2, rows, 1024], [([0, 1024, 1], 4)], 32 * 1024)
    small, big = traffic(4), traffic(16)            # 16 KiB vs 64 KiB
    assert small == 4 * 1024 * 4                    # loaded once
    assert big == 2 * 16 * 1024 * 4                 # loaded per outer iteration
    assert big / 16 > small / 4                     # more bytes per element past L1


def test_l1_traffic_per_operation_rises_when_a_walk_leaves_l1():
    # a strided column walk: each cache line of A is reused by the next columns while the
    # lines of one column fit in L1, and loaded again for every column when they do not
    fit = _copy_rows(64, 256)[0]          # a column: 64 lines = 4 KiB
    spill = _copy_rows(2048, 256)[0]      # 2048 lines = 128 KiB > 32 KiB
    assert spill[_L1] > fit[_L1] + 1.0
    assert spill[_CYC] > fit[_CYC]


def test_vectorized_loop_lowers_the_cycles_per_operation():
    def rows(vec: bool) -> np.ndarray:
        A = td.placeholder((64, 64), "float32", name="A")
        B = td.placeholder((64, 64), "float32", name="B")
        r = td.reduce_axis((0, 64), name="k")
        C = td.compute((64, 64), lambda i, j: td.sum(A[i, r] * B[r, j], axis=r), name="C")
        s = td.create_schedule(C.op)
        i, j = C.op.axis
        jo, ji = s[C].split(j, factor=8)
        s[C].reorder(i, jo, r, ji)
        if vec:
            s[C].vectorize(ji)
        return store_features(td.lower(s, [A, B, C]))
    v, sc = rows(True)[0], rows(False)[0]
    assert v[_EST] == 3.0 and sc[_EST] == 0.0       # log2 of the working lanes
    assert v[_CYC] < sc[_CYC]


def _finite(v: np.ndarray) -> None:
    assert np.all(np.isfinite(v))
    R, _ = unpack(v[None])
    assert np.all(np.isfinite(R[:, _EST:])) and np.all(R[:, 0] == 1)


def test_estimates_finite_for_symbolic_sizes_and_reductions():
    n = td.var("n")
    A = td.placeholder((n, 32), "float32", name="A")
    k = td.reduce_axis((0, 32), name="k")
    S = td.compute((n,), lambda i: td.sum(A[i, k], axis=k), name="S")
    f = td.lower(td.create_schedule(S.op), [A, S])
    rows = {}
    for sizes in ({}, {"n": 1}, {"n": 1000}):
        v = extract_features(f, sizes)
        _finite(v)
        rows[sizes.get("n")] = unpack(v[None])[0][0]
    # more rows: more operations; the per-operation estimate is of the same order
    assert rows[1000][_EST + 11] > rows[1][_EST + 11]
    assert abs(rows[1000][_CYC] - rows[1][_CYC]) < 2.0


def test_estimates_finite_for_conv_and_gpu_programs():
    from tdsl import ops
    x = td.placeholder((1, 8, 14, 14), "float32", name="x")
    w = td.placeholder((16, 8, 3, 3), "float32", name="w")
    y = ops.conv2d(x, w, stride=1, padding=1)
    _finite(extract_features(td.lower(ops.schedule(y), [x, w, y])))
    # a thread-bound (GPU) matmul with a local accumulator
    A = td.placeholder((64, 64), "float32", name="A")
    B = td.placeholder((64, 64), "float32", name="B")
    r = td.reduce_axis((0, 64), name="k")
    C = td.compute((64, 64), lambda i, j: td.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = td.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    i, j = C.op.axis
    s[C].bind(i, td.thread_axis("blockIdx.x"))
    s[C].bind(j, td.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], j)
    _finite(extract_features(td.lower(s, [A, B, C])))
