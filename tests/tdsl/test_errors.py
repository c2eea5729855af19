"""Every illegal request gets a tdsl.TDSLError subclass whose message names the
primitive (and the stage and loop where there is one) and the reason.

The first section is the list of issue #2 (point 6); the rest are other bad requests.
"""
import re

import numpy as np
import pytest

import tdsl as td
from tdsl.errors import (DTypeError, LoweringError, ScheduleError, ShapeError, TDSLError,
                         TuningError)
from tdsl.interpreter import run


def mm(M=8, N=8, K=8, name="C"):
    A = td.placeholder((M, K), name="A")
    B = td.placeholder((K, N), name="B")
    k = td.reduce_axis((0, K), name="k")
    C = td.compute((M, N), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k), name=name)
    return A, B, C


def chain():
    A = td.placeholder((8, 8), name="A")
    B = td.compute((8, 8), lambda i, j: A[i, j] + 1.0, name="B")
    C = td.compute((8, 8), lambda i, j: B[i, j] * 2.0, name="C")
    return A, B, C


def where(primitive, stage=None, loop=None):
    """The regex prefix of a ScheduleError message: 'prim: stage 'S', loop 'l': '."""
    s = re.escape(primitive) + ": "
    s += f"stage '{re.escape(stage)}'" if stage else "schedule"
    if loop:
        s += f", loop '{re.escape(loop)}'"
    return s + ": "


def test_all_errors_derive_from_tdsl_error():
    for cls in (DTypeError, LoweringError, ScheduleError, ShapeError, TuningError,
                td.BuildError, td.InternalError):
        assert issubclass(cls, TDSLError)
    assert issubclass(ScheduleError, ValueError) and issubclass(ShapeError, ValueError)
    assert issubclass(DTypeError, TypeError)


# ---- the errors listed in issue #2 ------------------------------------------------------------------
def test_reorder_loops_of_different_stages():
    A, B, C = chain()
    s = td.create_schedule(C.op)
    with pytest.raises(ScheduleError, match=where("reorder", "C", "i") +
                       r"loop 'i' belongs to stage 'B', not to this stage"):
        s[C].reorder(C.op.axis[1], B.op.axis[0])


def test_vectorize_a_reduction_loop():
    A, B, C = mm()
    s = td.create_schedule(C.op)
    i, j = C.op.axis
    k, = C.op.reduce_axis
    s[C].reorder(i, j, k)
    with pytest.raises(ScheduleError, match=where("vectorize", "C", "k") +
                       r"cannot vectorize a reduction loop"):
        s[C].vectorize(k)


def test_compute_at_a_loop_that_is_not_an_ancestor_of_the_use():
    A, B, C = chain()
    D = td.compute((8, 8), lambda i, j: C[i, j] - A[i, j], name="D")
    s = td.create_schedule(D.op)
    # B is read only by C; D's loops do not enclose C (C is at root).  A later compute_at of
    # C could still make it right (TVM's order), so the call is accepted and lowering refuses
    s[B].compute_at(s[D], D.op.axis[0])
    with pytest.raises(LoweringError, match=where("compute_at", "B", "i") +
                       r"loop 'i' of stage 'D' is not an ancestor of any use of 'B' "
                       r"\(it is read by: C\)"):
        td.lower(s, [A, D])
    s[C].compute_at(s[D], D.op.axis[0])     # now B's reader is inside the loop
    a, d = np.random.default_rng(0).standard_normal((8, 8)).astype("float32"), np.zeros((8, 8), "float32")
    run(td.lower(s, [A, D]), a, d)
    np.testing.assert_allclose(d, (a + 1) * 2 - a, rtol=1e-6)


def test_compute_at_below_the_consumers_attach_point_is_refused_at_lowering():
    """C.local is attached at C's i loop; A.local under C's j (deeper) misses C.local's use."""
    A, B, C = mm()
    s = td.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    AL = s.cache_read(A, "local", [CL])
    s[CL].compute_at(s[C], C.op.axis[0])
    s[AL].compute_at(s[C], C.op.axis[1])
    with pytest.raises(LoweringError, match=r"compute_at: stage 'A.local' is attached to loop 'j' "
                       r"of 'C', but stage 'C.local' also reads it outside that loop"):
        td.lower(s, [A, B, C])


def gemv_intrin(m=4, l=8, op="mul"):
    a = td.placeholder((l,), name="a")
    b = td.placeholder((m, l), name="b")
    k = td.reduce_axis((0, l), name="k")
    body = (lambda i: td.sum(a[k] * b[i, k], axis=k)) if op == "mul" else \
        (lambda i: td.sum(a[k] + b[i, k], axis=k))
    c = td.compute((m,), body, name="c")
    return td.decl_tensor_intrin(c.op, name="gemv")


def gemv_stage(op="mul", factor=4):
    A = td.placeholder((4, 8), name="A")
    B = td.placeholder((16, 8), name="B")
    k = td.reduce_axis((0, 8), name="k")
    if op == "mul":
        C = td.compute((4, 16), lambda i, j: td.sum(A[i, k] * B[j, k], axis=k), name="C")
    else:
        C = td.compute((4, 16), lambda i, j: td.sum(A[i, k] - B[j, k], axis=k), name="C")
    s = td.create_schedule(C.op)
    x, y = C.op.axis
    yo, yi = s[C].split(y, factor=factor)
    s[C].reorder(x, yo, yi, k)
    return s, C, yi


def test_tensorize_body_that_does_not_match():
    s, C, yi = gemv_stage(op="sub")
    with pytest.raises(ScheduleError, match=where("tensorize", "C", "j.inner") +
                       r"the loop body does not match intrinsic 'gemv': Sub vs Mul"):
        s[C].tensorize(yi, gemv_intrin())


def test_tensorize_extent_that_does_not_match():
    s, C, yi = gemv_stage(factor=8)
    with pytest.raises(ScheduleError, match=where("tensorize", "C", "j.inner") +
                       r"loop 'j.inner' has extent 8 but the intrinsic's axis 'i' has 4"):
        s[C].tensorize(yi, gemv_intrin())


def test_tensorize_reducer_that_does_not_match():
    s, C, yi = gemv_stage()
    a = td.placeholder((8,), name="a")
    b = td.placeholder((4, 8), name="b")
    k = td.reduce_axis((0, 8), name="k")
    c = td.compute((4,), lambda i: td.max(a[k] * b[i, k], axis=k), name="c")
    with pytest.raises(ScheduleError, match=where("tensorize", "C", "j.inner") +
                       r"the loop body does not match intrinsic 'maxv': reducer 'sum' vs 'max'"):
        s[C].tensorize(yi, td.decl_tensor_intrin(c.op, name="maxv"))


def test_tensorize_index_pattern_that_does_not_match():
    """Same arithmetic, but B is read transposed relative to the intrinsic."""
    A = td.placeholder((4, 8), name="A")
    B = td.placeholder((8, 16), name="B")
    k = td.reduce_axis((0, 8), name="k")
    C = td.compute((4, 16), lambda i, j: td.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = td.create_schedule(C.op)
    x, y = C.op.axis
    yo, yi = s[C].split(y, factor=4)
    s[C].reorder(x, yo, yi, k)
    with pytest.raises(ScheduleError, match=where("tensorize", "C", "j.inner") +
                       r"the loop body does not match intrinsic 'gemv': index 0 of 'B' \(k\) does "
                       r"not run like index 0 of 'b' \(i\)"):
        s[C].tensorize(yi, gemv_intrin())


def test_tensorize_loops_with_a_tail_are_refused():
    A = td.placeholder((4, 8), name="A")
    B = td.placeholder((14, 8), name="B")
    k = td.reduce_axis((0, 8), name="k")
    C = td.compute((4, 14), lambda i, j: td.sum(A[i, k] * B[j, k], axis=k), name="C")
    s = td.create_schedule(C.op)
    x, y = C.op.axis
    yo, yi = s[C].split(y, factor=4)
    s[C].reorder(x, yo, yi, k)
    s[C].tensorize(yi, gemv_intrin())
    with pytest.raises(LoweringError, match=r"tensorize: stage 'C'.*have a tail"):
        td.lower(s, [A, B, C])


def test_bind_one_thread_axis_twice_in_a_stage():
    A, B, C = chain()
    s = td.create_schedule(C.op)
    i, j = C.op.axis
    s[C].bind(i, td.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match=where("bind", "C", "j") +
                       r"threadIdx.x is already bound to loop 'i' of this stage"):
        s[C].bind(j, td.thread_axis("threadIdx.x"))


def test_bind_one_thread_axis_twice_in_a_kernel_with_other_extents():
    """Two stages of one kernel bind threadIdx.x to loops of extents 4 and 8."""
    A, B, C = chain()
    s = td.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=4)
    s[C].bind(bx, td.thread_axis("blockIdx.x"))
    s[C].bind(tx, td.thread_axis("threadIdx.x"))
    s[B].set_scope("shared")
    s[B].compute_at(s[C], bx)
    s[B].bind(B.op.axis[1], td.thread_axis("threadIdx.x"))
    with pytest.raises(LoweringError, match=r"bind: thread axis threadIdx.x is bound to loop "
                       r"'(j|i.inner)' with extent (8|4) and to loop '(i.inner|j)' with extent (4|8) "
                       r"in one kernel; every loop bound to one thread axis in a kernel needs the "
                       r"same extent"):
        td.lower(s, [A, C])


def test_indexing_with_the_wrong_number_of_indices():
    A = td.placeholder((4, 5), name="A")
    with pytest.raises(ShapeError, match=r"tensor 'A' has 2 dimension\(s\) \(4, 5\) but is "
                       r"indexed with 1 index\(es\)"):
        td.compute((4,), lambda i: A[i] * 2.0, name="B")
    with pytest.raises(ShapeError, match=r"tensor 'A' has 2 dimension\(s\).*indexed with 3"):
        td.compute((4,), lambda i: A[i, 0, 1], name="B")


def test_mixing_dtypes_without_a_cast():
    A = td.placeholder((4,), "float32", name="A")
    I = td.placeholder((4,), "int32", name="I")
    H = td.placeholder((4,), "float16", name="H")
    with pytest.raises(DTypeError, match=r"operator '\+' mixes dtypes float32 and int32; cast one "
                       r"side with .astype"):
        td.compute((4,), lambda i: A[i] + I[i], name="B")
    with pytest.raises(DTypeError, match=r"operator '\*' mixes dtypes float32 and float16"):
        td.compute((4,), lambda i: A[i] * H[i], name="B")
    with pytest.raises(DTypeError, match=r"if_then_else' mixes dtypes float32 and int32"):
        td.compute((4,), lambda i: td.if_then_else(A[i] > 0.0, A[i], I[i]), name="B")
    with pytest.raises(DTypeError, match=r"float literal 0.5 used with an expression of dtype int32"):
        td.compute((4,), lambda i: I[i] + 0.5, name="B")
    with pytest.raises(DTypeError, match=r"pow: arguments mix dtypes float32 and float16"):
        td.compute((4,), lambda i: td.pow(A[i], H[i]), name="B")
    # with the cast it works
    td.compute((4,), lambda i: A[i] + I[i].astype("float32"), name="B")


def test_symbolic_var_that_no_argument_binds():
    n = td.var("n")
    A = td.placeholder((2 * n,), name="A")
    B = td.compute((2 * n,), lambda i: A[i] + 1.0, name="B")
    s = td.create_schedule(B.op)
    with pytest.raises(ShapeError, match=r"lower 'main': symbolic size 'n' is not a dimension of "
                       r"any argument, so no call can bind it"):
        td.lower(s, [A, B])


def test_symbolic_var_used_only_inside_the_computation():
    n, m = td.var("n"), td.var("m")
    A = td.placeholder((n,), name="A")
    B = td.compute((n,), lambda i: A[i] * m.astype("float32"), name="B")
    s = td.create_schedule(B.op)
    with pytest.raises(ShapeError, match=r"symbolic size 'm' is not a dimension of any argument"):
        td.lower(s, [A, B])


# ---- other bad schedule requests ----------------------------------------------------------------
@pytest.mark.parametrize("kw,msg", [
    ({"factor": 0}, r"factor must be >= 1, got 0"),
    ({"factor": -2}, r"factor must be >= 1, got -2"),
    ({"nparts": 0}, r"nparts must be >= 1, got 0"),
    ({}, r"give exactly one of factor= or nparts="),
    ({"factor": 2, "nparts": 2}, r"give exactly one of factor= or nparts="),
    ({"factor": 2.5}, r"factor must be an integer, got 2.5"),
    ({"nparts": "4"}, r"nparts must be an integer, got '4'"),
])
def test_split_bad_arguments(kw, msg):
    A, B, C = chain()
    s = td.create_schedule(C.op)
    with pytest.raises(ScheduleError, match=where("split", "C", "i") + msg):
        s[C].split(C.op.axis[0], **kw)


def test_split_a_loop_that_was_already_split():
    A, B, C = chain()
    s = td.create_schedule(C.op)
    i = C.op.axis[0]
    s[C].split(i, factor=2)
    with pytest.raises(ScheduleError, match=where("split", "C", "i") +
                       r"loop 'i' was already split or fused; use the loops that replaced it: "
                       r"\['i.outer', 'i.inner', 'j'\]"):
        s[C].split(i, factor=4)


def test_split_something_that_is_not_a_loop():
    A, B, C = chain()
    s = td.create_schedule(C.op)
    with pytest.raises(ScheduleError, match=where("split", "C") + r"expected a loop \(IterVar\)"):
        s[C].split(3, factor=2)


def test_fuse_non_adjacent_loops():
    A, B, C = mm()
    s = td.create_schedule(C.op)
    i, j = C.op.axis
    k, = C.op.reduce_axis
    s[C].reorder(i, k, j)
    with pytest.raises(ScheduleError, match=where("fuse", "C", "j") +
                       r"loops 'i' and 'j' are not adjacent"):
        s[C].fuse(i, j)


def test_fuse_in_inner_outer_order():
    A, B, C = chain()
    s = td.create_schedule(C.op)
    i, j = C.op.axis
    with pytest.raises(ScheduleError, match=where("fuse", "C", "i") +
                       r"loops 'j' and 'i' are not adjacent \(outer first\)"):
        s[C].fuse(j, i)


def test_fuse_spatial_with_reduction_is_a_reduction_loop():
    """Allowed as in TVM (a reduction loop); running it in parallel or across threads is not."""
    A, B, C = mm()
    s = td.create_schedule(C.op)
    f = s[C].fuse(C.op.axis[1], C.op.reduce_axis[0])
    with pytest.raises(ScheduleError, match=where("parallel", "C", f.name) +
                       r"cannot run a reduction loop in parallel"):
        s[C].parallel(f)
    with pytest.raises(ScheduleError, match=where("bind", "C", f.name) +
                       r"loop '.*' fuses a spatial loop with a reduction loop"):
        s[C].bind(f, td.thread_axis("threadIdx.x"))


def test_reorder_same_loop_twice():
    A, B, C = chain()
    s = td.create_schedule(C.op)
    i, j = C.op.axis
    with pytest.raises(ScheduleError, match=where("reorder", "C", "i") + r"loop 'i' is given twice"):
        s[C].reorder(i, j, i)


@pytest.mark.parametrize("call", ["cache_read", "cache_write", "set_scope"])
def test_unknown_scope(call):
    A, B, C = chain()
    s = td.create_schedule(C.op)
    msg = r"unknown scope 'texture'; use 'global', 'shared' or 'local'"
    if call == "cache_read":
        with pytest.raises(ScheduleError, match=where("cache_read", "A") + msg):
            s.cache_read(A, "texture", [B])
    elif call == "cache_write":
        with pytest.raises(ScheduleError, match=where("cache_write", "C") + msg):
            s.cache_write(C, "texture")
    else:
        with pytest.raises(ScheduleError, match=where("set_scope", "B") + msg):
            s[B].set_scope("texture")


def test_cache_read_for_a_stage_that_does_not_read_it():
    A, B, C = chain()
    s = td.create_schedule(C.op)
    with pytest.raises(ScheduleError, match=where("cache_read", "A") +
                       r"stage 'C' does not read 'A'"):
        s.cache_read(A, "shared", [C])


def test_cache_write_of_an_attached_stage():
    A, B, C = chain()
    s = td.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    with pytest.raises(ScheduleError, match=where("cache_write", "B") +
                       r"the stage is scope-attached; call cache_write before compute_at"):
        s.cache_write(B, "local")


def test_cache_write_of_an_input():
    A, B, C = chain()
    s = td.create_schedule(C.op)
    with pytest.raises(ScheduleError, match=where("cache_write", "A") + r"an input cannot be"):
        s.cache_write(A, "local")


def test_compute_inline_refusals():
    A, B, C = mm()
    D = td.compute((8, 8), lambda i, j: C[i, j] + 1.0, name="D")
    s = td.create_schedule(D.op)
    with pytest.raises(ScheduleError, match=where("compute_inline", "C") +
                       r"a reduction cannot be inlined"):
        s[C].compute_inline()
    with pytest.raises(ScheduleError, match=where("compute_inline", "D") +
                       r"an output of the schedule cannot be inlined"):
        s[D].compute_inline()
    with pytest.raises(ScheduleError, match=where("compute_inline", "A") + r"an input cannot"):
        s[A].compute_inline()


def test_compute_at_refusals():
    A, B, C = chain()
    s = td.create_schedule(C.op)
    with pytest.raises(ScheduleError, match=where("compute_at", "C") +
                       r"an output must be computed whole"):
        s[C].compute_at(s[B], B.op.axis[0])
    with pytest.raises(ScheduleError, match=where("compute_at", "B") +
                       r"cannot attach a stage to its own loop"):
        s[B].compute_at(s[B], B.op.axis[0])
    with pytest.raises(ScheduleError, match=where("compute_at", "B", "i") +
                       r"'i' is not a current loop of stage 'C' \(it belongs to stage 'B'\)"):
        s[B].compute_at(s[C], B.op.axis[0])
    with pytest.raises(ScheduleError, match=where("compute_at", "A") + r"an input has no loop nest"):
        s[A].compute_at(s[C], C.op.axis[0])


def test_parallel_a_reduction():
    A, B, C = mm()
    s = td.create_schedule(C.op)
    with pytest.raises(ScheduleError, match=where("parallel", "C", "k") +
                       r"cannot run a reduction loop in parallel"):
        s[C].parallel(C.op.reduce_axis[0])


def test_bind_refusals():
    A, B, C = mm()
    s = td.create_schedule(C.op)
    with pytest.raises(ScheduleError, match=where("bind", "C", "k") + r"cannot bind reduction loop "
                       r"'k' to vthread: a virtual thread runs serially"):
        s[C].bind(C.op.reduce_axis[0], td.thread_axis("vthread"))
    with pytest.raises(ScheduleError, match=where("bind", "C", "i") +
                       r"the second argument must be a td.thread_axis"):
        s[C].bind(C.op.axis[0], C.op.axis[1])
    s[C].parallel(C.op.axis[0])
    with pytest.raises(ScheduleError, match=where("bind", "C", "i") + r"the loop is already parallel"):
        s[C].bind(C.op.axis[0], td.thread_axis("blockIdx.x"))
    with pytest.raises(TDSLError, match=r"thread_axis: unknown thread tag 'threadIdx.w'"):
        td.thread_axis("threadIdx.w")


def test_transform_a_bound_loop():
    A, B, C = chain()
    s = td.create_schedule(C.op)
    i, j = C.op.axis
    s[C].bind(i, td.thread_axis("blockIdx.x"))
    with pytest.raises(ScheduleError, match=where("split", "C", "i") +
                       r"the loop is already bound or tensorized; transform loops before binding"):
        s[C].split(i, factor=2)
    with pytest.raises(ScheduleError, match=where("fuse", "C", "i") +
                       r"the loop is already bound or tensorized"):
        s[C].fuse(i, j)
    with pytest.raises(ScheduleError, match=where("vectorize", "C", "i") + r"the loop is bound to blockIdx.x"):
        s[C].vectorize(i)
    with pytest.raises(ScheduleError, match=where("unroll", "C", "i") + r"the loop is bound to blockIdx.x"):
        s[C].unroll(i)


def test_conflicting_loop_kinds():
    A, B, C = chain()
    s = td.create_schedule(C.op)
    j = C.op.axis[1]
    s[C].vectorize(j)
    with pytest.raises(ScheduleError, match=where("unroll", "C", "j") + r"the loop is already vectorized"):
        s[C].unroll(j)


def test_unroll_and_vectorize_need_constant_extents():
    n = td.var("n")
    A = td.placeholder((n,), name="A")
    B = td.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = td.create_schedule(B.op)
    s[B].vectorize(B.op.axis[0])
    with pytest.raises(LoweringError, match=r"vectorized loop 'i' has a non-constant extent n with no constant upper "
                       r"bound.*; split it by a constant factor"):
        td.lower(s, [A, B])
    s = td.create_schedule(B.op)
    s[B].unroll(B.op.axis[0])
    with pytest.raises(LoweringError, match=r"unrolled loop 'i' has a non-constant extent"):
        td.lower(s, [A, B])


def test_rfactor_refusals():
    A, B, C = chain()
    s = td.create_schedule(C.op)
    with pytest.raises(ScheduleError, match=where("rfactor", "C") + r"the stage is not a reduction"):
        s.rfactor(C, C.op.axis[0])
    A, B, C = mm()
    s = td.create_schedule(C.op)
    with pytest.raises(ScheduleError, match=where("rfactor", "C", "i") +
                       r"the loop is not a reduction loop"):
        s.rfactor(C, C.op.axis[0])
    with pytest.raises(ScheduleError, match=where("rfactor", "C", "k") +
                       r"factor_axis must be in \[0, 2\]"):
        s.rfactor(C, C.op.reduce_axis[0], factor_axis=5)


def test_storage_align_refusals():
    A, B, C = chain()
    s = td.create_schedule(C.op)
    with pytest.raises(ScheduleError, match=where("storage_align", "B", "j") +
                       r"the innermost axis has stride 1"):
        s[B].storage_align(B.op.axis[1], 8, 1)
    with pytest.raises(ScheduleError, match=where("storage_align", "B", "i") +
                       r"need an int factor >= 1 and 0 <= offset < factor"):
        s[B].storage_align(B.op.axis[0], 4, 4)
    with pytest.raises(ScheduleError, match=where("storage_align", "B") +
                       r"'i' is not one of the stage's data axes"):
        s[B].storage_align(C.op.axis[0], 4, 1)
    with pytest.raises(ScheduleError, match=where("storage_align", "A") +
                       r"inputs have the caller's layout"):
        s[A].storage_align(B.op.axis[0], 4, 1)


def test_double_buffer_of_a_global_stage():
    A, B, C = chain()
    s = td.create_schedule(C.op)
    with pytest.raises(ScheduleError, match=where("double_buffer", "B") +
                       r"only a shared/local cache stage"):
        s[B].double_buffer()


def test_pragma_without_a_name():
    A, B, C = chain()
    s = td.create_schedule(C.op)
    with pytest.raises(ScheduleError, match=where("pragma", "C", "i") +
                       r"pragma_type must be a non-empty string"):
        s[C].pragma(C.op.axis[0], "")


def test_tensor_not_in_the_schedule():
    A, B, C = chain()
    other = td.placeholder((3,), name="Other")
    s = td.create_schedule(C.op)
    with pytest.raises(ScheduleError, match=r"schedule\[\]: schedule: 'Other' is not part of this "
                       r"schedule"):
        s[other]


def test_decl_tensor_intrin_refusals():
    n = td.var("n")
    a = td.placeholder((n,), name="a")
    c = td.compute((n,), lambda i: a[i] * 2.0, name="c")
    assert td.decl_tensor_intrin(c.op, name="sized").extents == [n]   # fixed where tensorized
    k = td.reduce_axis((1, 4), name="k")
    e = td.compute((4,), lambda i: td.sum(a[i] * a[k], axis=k), name="e")
    with pytest.raises(ScheduleError, match=r"decl_tensor_intrin: stage 'bad': axis 'k' starts "
                       r"at 1; an intrinsic's axes start at 0"):
        td.decl_tensor_intrin(e.op, name="bad")
    d = td.compute((4,), lambda i: c[i] + 1.0, name="d")
    with pytest.raises(ScheduleError, match=r"decl_tensor_intrin: stage 'bad2': input 'c' must be "
                       r"a placeholder"):
        td.decl_tensor_intrin(d.op, name="bad2")


# ---- bad declarations ----------------------------------------------------------------------------------
def test_declaration_errors():
    with pytest.raises(DTypeError, match=r"unsupported dtype 'complex64'"):
        td.placeholder((4,), "complex64", name="A")
    with pytest.raises(ShapeError, match=r"placeholder 'A': dimension 1 has size 0"):
        td.placeholder((4, 0), name="A")
    assert not isinstance(td.var("x", "float32"), td.expr.SizeVar)   # a float scalar parameter
    A = td.placeholder((4,), name="A")
    with pytest.raises(ShapeError, match=r"compute: the shape has 1 dimension\(s\) but the lambda "
                       r"takes 2 argument\(s\)"):
        td.compute((4,), lambda i, j: A[i], name="B")
    k = td.reduce_axis((0, 4), name="k")
    k2 = td.reduce_axis((0, 4), name="k2")
    with pytest.raises(TDSLError, match=r"compute 'B': a max reduction is nested inside a sum "
                       r"reduction's value"):
        td.compute((1,), lambda i: td.sum(td.max(A[k], axis=k) + A[k2], axis=k2), name="B")
    j = td.reduce_axis((0, 4), name="j")
    data_axis = td.compute((4,), lambda i: A[i], name="X").op.axis[0]     # an IterVar, not reduce
    with pytest.raises(TDSLError, match=r"sum: axis 'i' is not a reduce_axis"):
        td.compute((4,), lambda i: td.sum(A[j], axis=[j, data_axis]), name="B")
    with pytest.raises(DTypeError, match=r"tensor 'A': index 0 has dtype float32"):
        td.compute((4,), lambda i: A[A[i]], name="B")


def test_expression_errors():
    A = td.placeholder((4,), name="A")
    I = td.placeholder((4,), "int32", name="I")
    Bo = td.placeholder((4,), "bool", name="Bo")
    with pytest.raises(DTypeError, match=r"'/' on int32 operands; use '//'"):
        td.compute((4,), lambda i: I[i] / 2, name="B")
    with pytest.raises(DTypeError, match=r"operator '\+' applied to bool"):
        td.compute((4,), lambda i: Bo[i] + Bo[i], name="B")
    with pytest.raises(DTypeError, match=r"logical operator applied to float32"):
        td.compute((4,), lambda i: A[i] & A[i], name="B")
    with pytest.raises(DTypeError, match=r"exp: needs a float argument, got int32"):
        td.compute((4,), lambda i: td.exp(I[i]), name="B")
    with pytest.raises(DTypeError, match=r"has no truth value in Python; use td.if_then_else"):
        td.compute((4,), lambda i: A[i] if A[i] > 0.0 else -A[i], name="B")


# ---- bad lowering / running requests -------------------------------------------------------------------
def test_lower_argument_errors():
    A, B, C = chain()
    s = td.create_schedule(C.op)
    with pytest.raises(LoweringError, match=r"input 'A' is read but is not in the argument list"):
        td.lower(s, [C])
    with pytest.raises(LoweringError, match=r"output 'C' is not in the argument list"):
        td.lower(s, [A])
    with pytest.raises(LoweringError, match=r"tensor 'A' appears twice in the argument list"):
        td.lower(s, [A, A, C])
    with pytest.raises(LoweringError, match=r"is not a tensor"):
        td.lower(s, [A, 3, C])
    with pytest.raises(LoweringError, match=r"lower: expected a Schedule"):
        td.lower(C, [A, C])


def test_running_with_wrong_arrays():
    n = td.var("n")
    A = td.placeholder((n, 3), name="A")
    B = td.compute((n, 3), lambda i, j: A[i, j] + 1.0, name="B")
    f = td.lower(td.create_schedule(B.op), [A, B])
    a = np.ones((4, 3), "float32")
    with pytest.raises(ShapeError, match=r"parameter 'B' dimension 0 must be n = 4, got 5"):
        run(f, a, np.zeros((5, 3), "float32"))
    with pytest.raises(DTypeError, match=r"parameter 'A' has dtype float32, got an array of float64"):
        run(f, a.astype("float64"), np.zeros((4, 3), "float32"))
    with pytest.raises(ShapeError, match=r"parameter 'A' has 2 dimension\(s\)"):
        run(f, np.ones(4, "float32"), np.zeros((4, 3), "float32"))
    with pytest.raises(ShapeError, match=r"main takes 2 arrays \(A, B\), got 1"):
        run(f, a)


def test_too_many_threads_per_block():
    A = td.placeholder((2048,), name="A")
    B = td.compute((2048,), lambda i: A[i] + 1.0, name="B")
    s = td.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=2048)
    s[B].bind(tx, td.thread_axis("threadIdx.x"))
    f = td.lower(s, [A, B])
    with pytest.raises(LoweringError, match=r"kernel launches 2048x1x1 threads per block; at most "
                       r"1024"):
        run(f, np.ones(2048, "float32"), np.zeros(2048, "float32"))


def test_reducing_over_a_data_axis_names_the_reducer():
    A = td.placeholder((4,), name="A")
    with pytest.raises(TDSLError, match=r"sum: .*not a reduce_axis"):
        td.compute((4,), lambda i: td.sum(A[i], axis=[i]), name="B")
    with pytest.raises(TDSLError, match=r"sum: .*not a reduce_axis"):
        td.compute((4,), lambda i: td.sum(A[i], axis=i), name="B")
