"""tensorize with decl_tensor_intrin: the replaced region computes what the stage declared.

The interpreter runs an ``IntrinCall`` through the intrinsic's declared computation
(``lower_fallback``), so these tests check that the regions handed to the intrinsic
(offsets, extents, which loads go where) are right.  Tensorized regions need factors
that divide; the loops outside them may have tails and symbolic extents.
"""
import numpy as np
import pytest

import tdsl as td
from tdsl.interpreter import run
from tdsl.stmt import IntrinCall
from tdsl.visitor import post_order_visit
from tests.workloads import random_array

SIZES = [pytest.param(16, id="divisible"), pytest.param(13, id="tail"),
         pytest.param("sym", id="symbolic")]
SYM_VALUES = (3, 16, 21)


def intrin_gemv(m, l):
    a = td.placeholder((l,), name="a")
    b = td.placeholder((m, l), name="b")
    k = td.reduce_axis((0, l), name="k")
    c = td.compute((m,), lambda i: td.sum(a[k] * b[i, k], axis=k), name="c")
    return td.decl_tensor_intrin(c.op, name="gemv")


def intrin_gemm(m, n, l):
    a = td.placeholder((m, l), name="a")
    b = td.placeholder((l, n), name="b")
    k = td.reduce_axis((0, l), name="k")
    c = td.compute((m, n), lambda i, j: td.sum(a[i, k] * b[k, j], axis=k), name="c")
    return td.decl_tensor_intrin(c.op, name=f"gemm{m}x{n}x{l}")


def intrin_vmuladd(w):
    x = td.placeholder((w,), name="x")
    y = td.placeholder((w,), name="y")
    z = td.compute((w,), lambda i: x[i] * y[i] + x[i], name="z")
    return td.decl_tensor_intrin(z.op, name="vmuladd")


def intrin_calls(f):
    calls = []
    post_order_visit(f.body, lambda n: calls.append(n) if isinstance(n, IntrinCall) else None)
    return calls


def values(size):
    return SYM_VALUES if size == "sym" else (size,)


@pytest.mark.parametrize("size", SIZES)
def test_tensorize_gemv(size):
    """C[i, j] = sum_k A[i, k] * B[j, k], the j.inner x k nest replaced by a 4-row gemv."""
    n = td.var("n") if size == "sym" else size
    L, M = 12, 16
    A = td.placeholder((n, L), name="A")
    B = td.placeholder((M, L), name="B")
    k = td.reduce_axis((0, L), name="k")
    C = td.compute((n, M), lambda i, j: td.sum(A[i, k] * B[j, k], axis=k), name="C")
    s = td.create_schedule(C.op)
    x, y = C.op.axis
    yo, yi = s[C].split(y, factor=4)
    s[C].reorder(x, yo, yi, k)
    s[C].tensorize(yi, intrin_gemv(4, L))
    f = td.lower(s, [A, B, C])
    assert len(intrin_calls(f)) == 1
    rng = np.random.default_rng(0)
    for v in values(size):
        a, b = random_array(rng, (v, L)), random_array(rng, (M, L))
        c = np.full((v, M), np.nan, "float32")
        run(f, a, b, c)
        np.testing.assert_allclose(c, a.astype(np.float64) @ b.T.astype(np.float64), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("size", SIZES)
def test_tensorize_gemm_microkernel(size):
    """A batched matmul whose 4x4x4 inner block is an intrinsic.  The tiled axes must be
    multiples of 4, so the tail and symbolic sizes go to the batch axis outside."""
    bsz = td.var("b") if size == "sym" else size
    A = td.placeholder((bsz, 8, 12), name="A")
    B = td.placeholder((12, 8), name="B")
    k = td.reduce_axis((0, 12), name="k")
    C = td.compute((bsz, 8, 8), lambda q, i, j: td.sum(A[q, i, k] * B[k, j], axis=k), name="C")
    s = td.create_schedule(C.op)
    q, i, j = C.op.axis
    io, jo, ii, ji = s[C].tile(i, j, 4, 4)
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(q, io, jo, ko, ii, ji, ki)
    s[C].tensorize(ii, intrin_gemm(4, 4, 4))
    f = td.lower(s, [A, B, C])
    rng = np.random.default_rng(1)
    for v in values(size):
        a, b = random_array(rng, (v, 8, 12)), random_array(rng, (12, 8))
        c = np.full((v, 8, 8), np.nan, "float32")
        run(f, a, b, c)
        np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("size", SIZES)
def test_tensorize_elementwise(size):
    """A non-reduction intrinsic over the inner 4 columns; rows symbolic/tailed."""
    n = td.var("n") if size == "sym" else size
    X = td.placeholder((n, 8), name="X")
    Y = td.placeholder((n, 8), name="Y")
    Z = td.compute((n, 8), lambda r, c: X[r, c] * Y[r, c] + X[r, c], name="Z")
    s = td.create_schedule(Z.op)
    r, c = Z.op.axis
    ro, ri = s[Z].split(r, factor=3)
    co, ci = s[Z].split(c, factor=4)
    s[Z].tensorize(ci, intrin_vmuladd(4))
    f = td.lower(s, [X, Y, Z])
    assert len(intrin_calls(f)) == 1
    rng = np.random.default_rng(2)
    for v in values(size):
        x, y = random_array(rng, (v, 8)), random_array(rng, (v, 8))
        z = np.full((v, 8), np.nan, "float32")
        run(f, x, y, z)
        np.testing.assert_allclose(z, x * y + x, rtol=1e-6)


def test_tensorize_whole_axis_without_split():
    """The intrinsic covers a whole (unsplit) axis of constant extent."""
    A = td.placeholder((5, 6), name="A")
    B = td.placeholder((4, 6), name="B")
    k = td.reduce_axis((0, 6), name="k")
    C = td.compute((5, 4), lambda i, j: td.sum(A[i, k] * B[j, k], axis=k), name="C")
    s = td.create_schedule(C.op)
    s[C].tensorize(C.op.axis[1], intrin_gemv(4, 6))
    rng = np.random.default_rng(3)
    a, b = random_array(rng, (5, 6)), random_array(rng, (4, 6))
    c = np.full((5, 4), np.nan, "float32")
    run(td.lower(s, [A, B, C]), a, b, c)
    np.testing.assert_allclose(c, a @ b.T, rtol=1e-5, atol=1e-5)


def test_tensorize_region_offsets_printed():
    """The IntrinCall names the tile of each buffer it touches."""
    A = td.placeholder((8, 12), name="A")
    B = td.placeholder((16, 12), name="B")
    k = td.reduce_axis((0, 12), name="k")
    C = td.compute((8, 16), lambda i, j: td.sum(A[i, k] * B[j, k], axis=k), name="C")
    s = td.create_schedule(C.op)
    x, y = C.op.axis
    yo, yi = s[C].split(y, factor=4)
    s[C].reorder(x, yo, yi, k)
    s[C].tensorize(yi, intrin_gemv(4, 12))
    text = str(td.lower(s, [A, B, C]))
    assert ('tensorize("gemv", outputs=[C[i:i + 1, j.outer * 4:j.outer * 4 + 4]], '
            'inputs=[A[i:i + 1, 0:12], B[j.outer * 4:j.outer * 4 + 4, 0:12]]') in text


def _outer_product_intrin(name, **kw):
    a = td.placeholder((4, 1), "float32", name="a")
    b = td.placeholder((1, 16), "float32", name="b")
    r = td.reduce_axis((0, 1), name="r")
    c = td.compute((4, 16), lambda i, j: td.sum(a[i, r] * b[r, j], axis=r), name="c")
    return td.decl_tensor_intrin(c.op, name=name, **kw)


def _matmul_attached_tile(intrin, n=32):
    A = td.placeholder((n, 8), "float32", name="A")
    B = td.placeholder((8, n), "float32", name="B")
    k = td.reduce_axis((0, 8), name="k")
    C = td.compute((n, n), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = td.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(*s[C].op.axis, 4, 16)
    s[CL].compute_at(s[C], jo)
    xc, yc = s[CL].op.axis
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=1)
    s[CL].reorder(ko, xc, yc, ki)
    s[CL].tensorize(xc, intrin)
    return s, [A, B, C]


def test_tensorize_a_stage_attached_with_compute_at():
    """The loops of an attached stage run over its region (4 x 16), not the declared shape:
    the extents are checked when lowering knows the region."""
    s, args = _matmul_attached_tile(_outer_product_intrin("outer"))
    rng = np.random.default_rng(0)
    a, b = rng.random((32, 8), dtype=np.float32), rng.random((8, 32), dtype=np.float32)
    for runner in (lambda *x: run(td.lower(s, args), *x), td.build(s, args, target="llvm")):
        c = np.full((32, 32), np.nan, "float32")
        runner(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_tensorize_attached_region_of_the_wrong_size_is_refused_at_lowering():
    s, args = _matmul_attached_tile(_outer_product_intrin("outer"), n=30)   # 30 % 16 != 0
    with pytest.raises(td.TDSLError, match=r"tensorize: stage 'C.local', loop '[ij].c' runs over .* but the intrinsic"):
        td.lower(s, args)


def test_llvm_uses_the_intrinsic_implementation_for_its_target():
    """impls["llvm"](call) -> Stmt is what the LLVM backend compiles (here: the declared
    computation with a recognizable constant folded in, to see that it was used)."""
    from tdsl.stmt import BufferStore
    from tdsl.visitor import transform
    calls = []

    def llvm_impl(call):
        calls.append(call)
        stmt = intrin.lower_fallback(call)
        return transform(stmt, post=lambda n: BufferStore(n.buffer, n.value * 2.0, n.indices)
                         if isinstance(n, BufferStore) else None)
    intrin = _outer_product_intrin("outer2", impls={"llvm": llvm_impl})
    s, args = _matmul_attached_tile(intrin)
    rng = np.random.default_rng(1)
    a, b = rng.random((32, 8), dtype=np.float32), rng.random((8, 32), dtype=np.float32)
    c = np.empty((32, 32), "float32")
    td.build(s, args, target="llvm")(a, b, c)
    assert calls
    assert not np.allclose(c, a @ b)      # the implementation (not the fallback) ran
    ref = np.empty_like(c)
    run(td.lower(s, args), a, b, ref)     # the interpreter runs the declared computation
    np.testing.assert_allclose(ref, a @ b, rtol=1e-5)


def test_unit_outer_loop_above_a_tensorized_region():
    """Splitting by the whole extent leaves an outer loop of extent 1, which lowering
    removes: its variable must also leave the intrinsic call's regions."""
    a = td.placeholder((4, 2), "float32", name="a")
    b = td.placeholder((2, 16), "float32", name="b")
    r = td.reduce_axis((0, 2), name="r")
    c = td.compute((4, 16), lambda i, j: td.sum(a[i, r] * b[r, j], axis=r), name="c")
    intrin = td.decl_tensor_intrin(c.op, name="mm")
    A = td.placeholder((4, 2), "float32", name="A")
    B = td.placeholder((2, 16), "float32", name="B")
    k = td.reduce_axis((0, 2), name="k")
    C = td.compute((4, 16), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = td.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[C].tensorize(ii, intrin)
    rng = np.random.default_rng(2)
    x, y = rng.random((4, 2), dtype=np.float32), rng.random((2, 16), dtype=np.float32)
    z = np.empty((4, 16), "float32")
    td.build(s, [A, B, C], target="llvm")(x, y, z)
    np.testing.assert_allclose(z, x @ y, rtol=1e-5)


# ---- primitives called after tensorize ----------------------------------------------------
# tensorize used to match its intrinsic once, when called; reorders, splits and inlined
# producers afterwards changed the region it replaced without a second look, and the call
# computed something else.  Now lowering matches again on the final loops and body, and
# the primitives that would certainly break a region refuse when called.

def _both(s, args, arrays, expected, out=-1):
    """Run through the interpreter and LLVM on copies of ``arrays``; compare output ``out``."""
    f = td.lower(s, args)
    runners = [("interpreter", lambda *x: run(f, *x)), ("llvm", td.build(s, args, target="llvm"))]
    for label, runner in runners:
        arrs = [a.copy() for a in arrays]
        runner(*arrs)
        np.testing.assert_allclose(arrs[out], expected, rtol=1e-5, atol=1e-5, err_msg=label)


def _gemv_schedule(n=8, m=8, L=16, producer=None):
    """C[i, j] = sum_k A'[i, k] * B'[j, k] with j split by 4 and (j.inner, k) tensorized;
    ``producer`` ("A" or "B") puts an elementwise stage P = 2 * X in front of that input."""
    A = td.placeholder((n, L), name="A")
    B = td.placeholder((m, L), name="B")
    P = None
    a_in, b_in = A, B
    if producer == "A":
        P = a_in = td.compute((n, L), lambda i, k: A[i, k] * 2.0, name="P")
    elif producer == "B":
        P = b_in = td.compute((m, L), lambda j, k: B[j, k] * 2.0, name="P")
    k = td.reduce_axis((0, L), name="k")
    C = td.compute((n, m), lambda i, j: td.sum(a_in[i, k] * b_in[j, k], axis=k), name="C")
    s = td.create_schedule(C.op)
    x, y = C.op.axis
    yo, yi = s[C].split(y, factor=4)
    s[C].reorder(x, yo, yi, k)
    s[C].tensorize(yi, intrin_gemv(4, L))
    return s, A, B, P, C, (x, yo, yi, C.op.reduce_axis[0])


def _gemv_arrays(n=8, m=8, L=16, seed=0):
    rng = np.random.default_rng(seed)
    return random_array(rng, (n, L)), random_array(rng, (m, L)), np.full((n, m), np.nan, "float32")


def test_reorder_moving_loops_under_a_tensorized_loop_is_refused():
    """repro r02: reorder(yi, yo, x) put j.outer and i under the tensorized j.inner, and the
    intrinsic silently covered them.  Refused; the schedule stays as it was and is right."""
    s, A, B, _, C, (x, yo, yi, k) = _gemv_schedule()
    with pytest.raises(td.ScheduleError, match=r"reorder: stage 'C', loop 'j.inner': .*tensorized "
                       r"over \['j.inner', 'k'\]; it would move \['j.outer', 'i'\] under it"):
        s[C].reorder(yi, yo, x)
    assert [iv.name for iv in s[C].leaf_iter_vars] == ["i", "j.outer", "j.inner", "k"]
    a, b, c = _gemv_arrays()
    _both(s, [A, B, C], [a, b, c], a @ b.T)


def test_reorder_moving_the_reduction_loop_out_of_a_tensorized_region_is_refused():
    s, A, B, _, C, (x, yo, yi, k) = _gemv_schedule()
    with pytest.raises(td.ScheduleError, match=r"reorder: stage 'C', loop 'j.inner': .*it would move "
                       r"\['k'\] out of it"):
        s[C].reorder(k, yi)


@pytest.mark.parametrize("n", [8, 7])
def test_loops_outside_a_tensorized_region_can_still_be_transformed(n):
    """Reorder, split and fuse outside the region (tails included) and a reorder inside it
    that keeps the tensorized loop outermost: lowering re-matches the final nest."""
    A = td.placeholder((2, n, 12), name="A")
    B = td.placeholder((12, 8), name="B")
    k = td.reduce_axis((0, 12), name="k")
    C = td.compute((2, n, 8), lambda q, i, j: td.sum(A[q, i, k] * B[k, j], axis=k), name="C")
    s = td.create_schedule(C.op)
    q, i, j = C.op.axis
    jo, ji = s[C].split(j, factor=4)
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(q, i, jo, ko, ji, ki)
    # a 1 x 4 x 4 block: the i loop (extent 1 after the split below) stays outside
    a = td.placeholder((1, 4), name="a")
    b = td.placeholder((4, 4), name="b")
    r = td.reduce_axis((0, 4), name="r")
    c = td.compute((4,), lambda t: td.sum(a[0, r] * b[r, t], axis=r), name="c")
    s[C].tensorize(ji, td.decl_tensor_intrin(c.op, name="vecmat"))
    s[C].reorder(ji, ki)                      # inside the region: j.inner still outermost
    io, ii = s[C].split(i, factor=3)          # outside: tail when n = 7
    s[C].reorder(jo, q)                       # outside
    fused = s[C].fuse(io, ii)
    s[C].parallel(fused)
    rng = np.random.default_rng(4)
    x, y = random_array(rng, (2, n, 12)), random_array(rng, (12, 8))
    _both(s, [A, B, C], [x, y, np.full((2, n, 8), np.nan, "float32")], x @ y)


def test_split_or_fuse_inside_a_tensorized_region_is_refused():
    s, A, B, _, C, (x, yo, yi, k) = _gemv_schedule()
    with pytest.raises(td.ScheduleError, match=r"split: stage 'C', loop 'k': the loop is inside the "
                       r"region tensorized at 'j.inner'"):
        s[C].split(k, factor=4)
    X = td.placeholder((2, 4, 4), name="X")
    Z = td.compute((2, 4, 4), lambda p, q, r: X[p, q, r] + 1.0, name="Z")
    xi = td.placeholder((2, 4, 4), name="x")
    zi = td.compute((2, 4, 4), lambda p, q, r: xi[p, q, r] + 1.0, name="z")
    s = td.create_schedule(Z.op)
    p, q, r = Z.op.axis
    s[Z].tensorize(p, td.decl_tensor_intrin(zi.op, name="add1"))
    with pytest.raises(td.ScheduleError, match=r"fuse: stage 'Z', loop 'q': the loop is inside the "
                       r"region tensorized at 'p'"):
        s[Z].fuse(q, r)


@pytest.mark.parametrize("producer", ["A", "B"])
def test_inlining_a_producer_of_an_intrinsic_input_after_tensorize_is_refused(producer):
    """repro r03 (and the second input): P = 2 * X inlined into the tensorized stage makes
    the intrinsic's input an expression, not a tensor; the call used to read X itself."""
    s, A, B, P, C, _ = _gemv_schedule(producer=producer)
    with pytest.raises(td.ScheduleError, match=r"compute_inline: stage 'P': stage 'C' is tensorized "
                       r"at loop 'j.inner' and would no longer match: .*the intrinsic reads its input "
                       r"'[ab]' where the stage computes [AB]\[., k\] \* 2.0, not a load"):
        s[P].compute_inline()
    assert s[P].attach_type.value == "root"            # rolled back
    a, b, c = _gemv_arrays()
    pa, pb = (2 * a, b) if producer == "A" else (a, 2 * b)
    _both(s, [A, B, C], [a, b, c], pa @ pb.T)


def test_tensorize_sees_producers_inlined_before_it():
    s, A, B, P, C, _ = _gemv_schedule(producer="A")
    s = td.create_schedule(C.op)
    s[P].compute_inline()
    yo, yi = s[C].split(C.op.axis[1], factor=4)
    s[C].reorder(C.op.axis[0], yo, yi, C.op.reduce_axis[0])
    with pytest.raises(td.ScheduleError, match=r"tensorize: stage 'C', loop 'j.inner': .*the "
                       r"intrinsic reads its input 'a' where the stage computes A\[i, k\] \* 2.0"):
        s[C].tensorize(yi, intrin_gemv(4, 16))


@pytest.mark.parametrize("m", [8, 12])
def test_inlining_a_producer_that_is_a_plain_load_after_tensorize_is_rematched(m):
    """P[j, k] = BT[k, j] inlined after tensorize: the intrinsic's b now stands for BT read
    transposed, which does not run like b[i, k]; refused.  P[j, k] = B2[j, k + 1] (a plain
    shifted load) still matches, and the call must read B2 at the shifted region."""
    L = 8
    A = td.placeholder((4, L), name="A")
    B2 = td.placeholder((m, L + 1), name="B2")
    P = td.compute((m, L), lambda j, k: B2[j, k + 1], name="P")
    k = td.reduce_axis((0, L), name="k")
    C = td.compute((4, m), lambda i, j: td.sum(A[i, k] * P[j, k], axis=k), name="C")
    s = td.create_schedule(C.op)
    x, y = C.op.axis
    yo, yi = s[C].split(y, factor=4)
    s[C].reorder(x, yo, yi, k)
    s[C].tensorize(yi, intrin_gemv(4, L))
    s[P].compute_inline()
    rng = np.random.default_rng(5)
    a, b2 = random_array(rng, (4, L)), random_array(rng, (m, L + 1))
    _both(s, [A, B2, C], [a, b2, np.full((4, m), np.nan, "float32")], a @ b2[:, 1:].T)

    BT = td.placeholder((L, m), name="BT")
    P = td.compute((m, L), lambda j, k: BT[k, j], name="P")
    C = td.compute((4, m), lambda i, j: td.sum(A[i, k] * P[j, k], axis=k), name="C")
    s = td.create_schedule(C.op)
    yo, yi = s[C].split(C.op.axis[1], factor=4)
    s[C].reorder(C.op.axis[0], yo, yi, C.op.reduce_axis[0])
    s[C].tensorize(yi, intrin_gemv(4, L))
    with pytest.raises(td.ScheduleError, match=r"compute_inline: stage 'P': .*index 0 of 'BT' \(k\) "
                       r"does not run like index 0 of 'b' \(i\)"):
        s[P].compute_inline()


def test_lowering_rechecks_a_region_changed_behind_the_primitives_back():
    """Lowering is the authority: a loop order edited directly (what reorder used to allow)
    is a LoweringError naming tensorize, the stage, the loop and the reason."""
    s, A, B, _, C, (x, yo, yi, k) = _gemv_schedule()
    s[C].leaf_iter_vars[:] = [yi, yo, x, k]
    with pytest.raises(td.LoweringError, match=r"tensorize: stage 'C', loop 'j.inner': the loop nest "
                       r"as finally scheduled \(loops \['j.inner', 'j.outer', 'i', 'k'\].*loop 'j.outer' "
                       r"under the tensorize point must be an axis or the inner part of a constant split"):
        td.lower(s, [A, B, C])


def test_cache_read_after_tensorize_feeds_the_intrinsic_from_the_cache():
    """cache_read redirects the stage's loads; the call's input region is then the cache
    (attached outside the region), at the cache's own offsets."""
    s, A, B, _, C, (x, yo, yi, k) = _gemv_schedule(n=5, m=12)
    BL = s.cache_read(B, "local", [C])
    s[BL].compute_at(s[C], yo)
    f = td.lower(s, [A, B, C])
    (call,) = intrin_calls(f)
    assert call.inputs[1].buffer.name == "B.local"
    a, b, c = _gemv_arrays(n=5, m=12)
    _both(s, [A, B, C], [a, b, c], a @ b.T)


def test_compute_at_into_a_tensorized_region_is_refused():
    s, A, B, P, C, (x, yo, yi, k) = _gemv_schedule(producer="B")
    with pytest.raises(td.ScheduleError, match=r"compute_at: stage 'P', loop 'k': loop 'k' of stage "
                       r"'C' is inside the region tensorized at 'j.inner'"):
        s[P].compute_at(s[C], k)
    s[P].compute_at(s[C], yo)                 # outside the region: fine
    a, b, c = _gemv_arrays()
    _both(s, [A, B, C], [a, b, c], a @ (2 * b).T)
    # and tensorize after compute_at into what becomes the region
    s2, A, B, P, C, _ = _gemv_schedule(producer="B")
    s2 = td.create_schedule(C.op)
    yo, yi = s2[C].split(C.op.axis[1], factor=4)
    s2[C].reorder(C.op.axis[0], yo, yi, C.op.reduce_axis[0])
    s2[P].compute_at(s2[C], yi)
    with pytest.raises(td.ScheduleError, match=r"tensorize: stage 'C', loop 'j.inner': stage 'P' is "
                       r"attached to loop 'j.inner', inside the tensorized region"):
        s2[C].tensorize(yi, intrin_gemv(4, 16))


def test_cache_write_of_a_tensorized_stage_moves_the_intrinsic_to_the_cache(rng):
    """cache_write of a scheduled stage: the cache stage takes over its loops, the tensorized
    one included (as TVM's re-layout does), so the intrinsic writes the cache."""
    A = td.placeholder((5, 6), name="A")
    B = td.placeholder((4, 6), name="B")
    k = td.reduce_axis((0, 6), name="k")
    C = td.compute((5, 4), lambda i, j: td.sum(A[i, k] * B[j, k], axis=k), name="C")
    s = td.create_schedule(C.op)
    s[C].tensorize(C.op.axis[1], intrin_gemv(4, 6))
    CL = s.cache_write(C, "local")
    ir = str(td.lower(s, [A, B, C]))
    assert 'tensorize("gemv", outputs=[C.local[' in ir, ir
    a, b = random_array(rng, (5, 6)), random_array(rng, (4, 6))
    for runner in (lambda *x: run(td.lower(s, [A, B, C]), *x), td.build(s, [A, B, C], "llvm")):
        c = np.full((5, 4), np.nan, "float32")
        runner(a, b, c)
        np.testing.assert_allclose(c, a @ b.T, rtol=1e-5, atol=1e-5)
    assert s[CL] is not None


def test_inline_of_a_tensorized_stage_is_refused():
    """inlining the tensorized stage removes its loops."""
    X = td.placeholder((3, 4), name="X")
    Y = td.placeholder((3, 4), name="Y")
    Z = td.compute((3, 4), lambda r, c: X[r, c] * Y[r, c] + X[r, c], name="Z")
    W = td.compute((3, 4), lambda r, c: Z[r, c] - 1.0, name="W")
    s = td.create_schedule(W.op)
    s[Z].tensorize(Z.op.axis[1], intrin_vmuladd(4))
    with pytest.raises(td.ScheduleError, match=r"compute_inline: stage 'Z', loop 'c': loop 'c' of the "
                       r"stage is tensorized"):
        s[Z].compute_inline()


# ---- what the match itself let through -----------------------------------------------------
def test_one_intrinsic_input_standing_for_two_tensors_is_refused():
    """x * y + x against X * Y + Y: the call handed the intrinsic Y for x."""
    X = td.placeholder((8,), name="X")
    Y = td.placeholder((8,), name="Y")
    Z = td.compute((8,), lambda c: X[c] * Y[c] + Y[c], name="Z")
    s = td.create_schedule(Z.op)
    co, ci = s[Z].split(Z.op.axis[0], factor=4)
    with pytest.raises(td.ScheduleError, match=r"tensorize: stage 'Z', loop 'c.inner': .*input 'x' "
                       r"stands for X\[.*\] in one place and Y\[.*\] in another"):
        s[Z].tensorize(ci, intrin_vmuladd(4))


def test_reduction_with_a_condition_is_refused():
    A = td.placeholder((4, 8), name="A")
    B = td.placeholder((8, 8), name="B")
    k = td.reduce_axis((0, 8), name="k")
    C = td.compute((4, 8), lambda i, j: td.sum(A[i, k] * B[j, k], axis=k, where=k < j), name="C")
    s = td.create_schedule(C.op)
    yo, yi = s[C].split(C.op.axis[1], factor=4)
    s[C].reorder(C.op.axis[0], yo, yi, k)
    with pytest.raises(td.ScheduleError, match=r"tensorize: stage 'C', loop 'j.inner': .*condition"):
        s[C].tensorize(yi, intrin_gemv(4, 8))


def test_loads_that_cover_fewer_intrinsic_axes_or_another_dtype_are_refused():
    """A[i, 0] for the intrinsic's a[k] would hand a 1-element region to an intrinsic that
    reads 8; float64 data to a float32 intrinsic would be reinterpreted."""
    for dtype, index, why in [("float32", lambda i, k: (i, 0), r"'A' is indexed along 0 of the "
                               r"intrinsic's loops but the intrinsic's 'a' along 1"),
                              ("float64", lambda i, k: (i, k), r"'[AC]' is float64 but the "
                               r"intrinsic's '[ac]' is float32")]:
        A = td.placeholder((4, 8), dtype, name="A")
        B = td.placeholder((8, 8), dtype, name="B")
        k = td.reduce_axis((0, 8), name="k")
        C = td.compute((4, 8), lambda i, j: td.sum(A[index(i, k)] * B[j, k], axis=k), name="C")
        s = td.create_schedule(C.op)
        yo, yi = s[C].split(C.op.axis[1], factor=4)
        s[C].reorder(C.op.axis[0], yo, yi, k)
        with pytest.raises(td.ScheduleError, match=why):
            s[C].tensorize(yi, intrin_gemv(4, 8))


def test_intrinsic_reading_its_input_at_an_offset():
    """An intrinsic that reads x[t + 1]: the call's region starts where the stage's read
    at the region's origin minus the intrinsic's own offset, not at the stage's read."""
    x = td.placeholder((5,), name="x")
    z = td.compute((4,), lambda t: x[t + 1] * 3.0, name="z")
    X = td.placeholder((13,), name="X")
    Z = td.compute((12,), lambda c: X[c + 1] * 3.0, name="Z")
    s = td.create_schedule(Z.op)
    co, ci = s[Z].split(Z.op.axis[0], factor=4)
    s[Z].tensorize(ci, td.decl_tensor_intrin(z.op, name="shift3"))
    (call,) = intrin_calls(td.lower(s, [X, Z]))
    assert str(call.inputs[0].mins[0]) == "c.outer * 4"
    xv = random_array(np.random.default_rng(6), (13,))
    _both(s, [X, Z], [xv, np.full((12,), np.nan, "float32")], xv[1:] * 3)


def test_rfactor_after_tensorize_is_refused_at_lowering():
    """rfactor replaces the stage's body by a reduction over the factored tensor, which the
    gemv intrinsic does not compute: lowering (not the call-time match) refuses it."""
    s, A, B, _, C, (x, yo, yi, k) = _gemv_schedule()
    s.rfactor(C, k)
    with pytest.raises(td.LoweringError, match=r"tensorize: stage 'C', loop 'j.inner': the loop nest "
                       r"as finally scheduled \(loops \['j.inner', 'k.v'\].*no longer matches"):
        td.lower(s, [A, B, C])


def test_a_tvm_style_function_given_to_the_core_intrinsic_is_a_clear_error():
    """A TVM-style fcompute (``ins[0].access_ptr``) handed to ``td.decl_tensor_intrin`` fails
    on tdsl's buffer regions: a ScheduleError naming the intrinsic and the compat API, not a
    raw AttributeError from inside the backend."""
    def tvm_style(ins, outs):
        return ins[0].access_ptr("r")          # TVM's Buffer API, absent from BufferRegion

    x = td.placeholder((8,), name="x")
    y = td.placeholder((8,), name="y")
    z = td.compute((8,), lambda i: x[i] * y[i] + x[i], name="z")
    intrin = td.decl_tensor_intrin(z.op, tvm_style, name="vmuladd_tvm")
    A = td.placeholder((32,), name="A")
    B = td.placeholder((32,), name="B")
    C = td.compute((32,), lambda i: A[i] * B[i] + A[i], name="C")
    s = td.create_schedule(C.op)
    _, xi = s[C].split(C.op.axis[0], factor=8)
    s[C].tensorize(xi, intrin)
    with pytest.raises(td.ScheduleError, match="vmuladd_tvm.*access_ptr.*tdsl.compat.tvm"):
        td.build(s, [A, B, C], target="llvm")
