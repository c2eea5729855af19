"""The core's random-schedule property test, compiled with the LLVM backend.

The same strategy as tests/schedule/test_random_schedules.py (random splits,
reorders, fuses, compute_at/inline choices, caches, vectorize/unroll/parallel
where legal, symbolic sizes) -- here each schedule is built for "llvm" and run
natively, and must match NumPy, and the parallel build must match the serial one.
"""
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import tdsl as td
from tdsl.stmt import ForKind
from tdsl.tensor import IterKind
from tdsl.visitor import post_order_visit
from tests.guard_pages import guarded_copy
from tests.workloads import random_schedule


def llvm_runner(sch, args, arrays):
    """Build and run with every array ending at an unreadable page (out-of-bounds
    accesses crash instead of passing by luck); results are copied back."""
    guarded = [guarded_copy(a) for a in arrays]
    td.build(sch, args, target="llvm")(*guarded)
    for a, g in zip(arrays, guarded):
        a[...] = g


@pytest.mark.parametrize("workload", ["matmul", "conv2d", "pipeline"])
@settings(max_examples=2 * settings.default.max_examples)
@given(data=st.data())
def test_random_schedule_compiled_matches_numpy(workload, data):
    case = data.draw(random_schedule(workloads=(workload,)), label="case")
    case.check_with(llvm_runner)


@settings(max_examples=settings.default.max_examples)
@given(case=random_schedule(), values=st.lists(st.integers(1, 14), min_size=2, max_size=3))
def test_compiled_symbolic_schedule_at_several_sizes(case, values):
    assume(case.workload.symbolic)
    key = case.workload.symbolic[0]
    for v in values:
        case.rebind(**{key: v}).check_with(llvm_runner)


def _has_parallel(func) -> bool:
    found = []
    post_order_visit(func.body, lambda n: found.append(n) if getattr(n, "kind", None)
                     is ForKind.PARALLEL else None)
    return bool(found)


@settings(max_examples=settings.default.max_examples)
@given(case=random_schedule())
def test_parallel_build_equals_serial(case):
    """With its outermost spatial loop made parallel (where it is not already), a random
    schedule gives the same results on 1 and 2 threads, and matches NumPy.

    Not bit for bit: float operations may contract to FMA (docs/ir.md), and LLVM
    vectorizes a thread's chunk of iterations differently depending on its length, so an
    element may round differently in the vector body and in the scalar remainder."""
    stage = case.sch[case.args[-1]]
    outer = stage.leaf_iter_vars[0]
    attr = stage.iter_attrs.get(outer)
    if outer.kind is IterKind.DATA_PAR and (attr is None or attr.kind is ForKind.SERIAL):
        stage.parallel(outer)
    f = td.build(case.sch, case.args, target="llvm")
    assume(_has_parallel(f.func))
    outs = []
    for threads in (1, 2):
        f.set_num_threads(threads)
        outs.append(case.check_with(lambda sch, args, arrays: f(*arrays))[-1])
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-6, atol=1e-7)
