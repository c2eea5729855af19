"""An attached stage that is also an argument writes all of its values (r24)."""
import numpy as np
import pytest

import tdsl as td
from tdsl.errors import LoweringError
from tdsl.interpreter import run
from tests.workloads import random_array


def _run_both(s, args, inputs, out_shapes):
    """The outputs of the interpreter and of the LLVM build, each starting from NaN."""
    f = td.lower(s, args)
    lib = td.build(s, args, target="llvm")
    results = []
    for runner in (lambda *x: run(f, *x), lib):
        outs = [np.full(sh, np.nan, "float32") for sh in out_shapes]
        runner(*inputs, *outs)
        results.append(outs)
    return results


@pytest.mark.parametrize("sizes", [(5, 4), (7, 3)])
@pytest.mark.parametrize("symbolic", [False, True])
def test_argument_read_in_one_column_is_computed_whole(rng, sizes, symbolic):
    """C reads column 0 of B at C.i: B's other columns are computed too (the region's
    column range, the same in every iteration, widens to the whole row)."""
    N, M = (td.var("n"), td.var("m")) if symbolic else sizes
    A = td.placeholder((N, M), name="A")
    B = td.compute((N, M), lambda i, j: A[i, j] * 2.0, name="B")
    C = td.compute((N,), lambda i: B[i, 0] + 1.0, name="C")
    s = td.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    a = random_array(rng, sizes)
    for b, c in _run_both(s, [A, B, C], [a], [sizes, sizes[:1]]):
        np.testing.assert_allclose(b, a * 2, rtol=1e-6)
        np.testing.assert_allclose(c, a[:, 0] * 2 + 1, rtol=1e-6)


def test_argument_read_by_two_shifted_loads_is_covered(rng):
    """B[i, j] and B[i + 1, j] over i < N cover B's N + 1 rows together: no widening."""
    N, M = 9, 5
    A = td.placeholder((N + 1, M), name="A")
    B = td.compute((N + 1, M), lambda i, j: A[i, j] - 1.0, name="B")
    C = td.compute((N, M), lambda i, j: B[i, j] * B[i + 1, j], name="C")
    s = td.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], 4)
    s[B].compute_at(s[C], io)
    a = random_array(rng, (N + 1, M))
    for b, c in _run_both(s, [A, B, C], [a], [(N + 1, M), (N, M)]):
        np.testing.assert_allclose(b, a - 1, rtol=1e-6)
        np.testing.assert_allclose(c, (a[:-1] - 1) * (a[1:] - 1), rtol=1e-5)
    assert "for j in range(5)" in str(td.lower(s, [A, B, C]))


def test_argument_whose_region_moves_and_misses_a_row_is_refused():
    """C reads row i + 1 of B: row 0 is never computed at C.i; computing it would take all
    of B in every iteration, so lowering refuses, naming stage, loop and dimension."""
    N, M = 5, 4
    A = td.placeholder((N, M), name="A")
    B = td.compute((N, M), lambda i, j: A[i, j] * 2.0, name="B")
    C = td.compute((N, M), lambda i, j: td.if_then_else(i + 1 < N, B[i + 1, j], 0.0), name="C")
    s = td.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    with pytest.raises(LoweringError, match=r"stage 'B' is an argument.*loop 'i' of 'C'.*"
                                            r"dimension 0.*compute_root"):
        td.lower(s, [A, B, C])
    td.lower(s, [A, C])     # as an intermediate it is fine


def test_strided_read_is_refused():
    """B[2 * i] skips the odd elements of B: refused rather than left unwritten."""
    A = td.placeholder((8,), name="A")
    B = td.compute((8,), lambda i: A[i] + 1.0, name="B")
    C = td.compute((4,), lambda i: B[2 * i], name="C")
    s = td.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    with pytest.raises(LoweringError, match="stage 'B' is an argument"):
        td.lower(s, [A, B, C])


def test_cache_write_stage_attached_as_argument(rng):
    """The copy stage cache_write leaves behind, attached and passed: computed whole."""
    N, M = 6, 3
    A = td.placeholder((N, M), name="A")
    B = td.compute((N, M), lambda i, j: A[i, j] * 3.0, name="B")
    C = td.compute((N,), lambda i: B[i, M - 1], name="C")
    s = td.create_schedule(C.op)
    s.cache_write(B, "local")
    s[B].compute_at(s[C], C.op.axis[0])
    a = random_array(rng, (N, M))
    for b, c in _run_both(s, [A, B, C], [a], [(N, M), (N,)]):
        np.testing.assert_allclose(b, a * 3, rtol=1e-6)
        np.testing.assert_allclose(c, a[:, -1] * 3, rtol=1e-6)
