"""Property test: random legal schedules of matmul, conv2d and a two-stage elementwise
pipeline (random splits/nparts, reorders, fuses, compute_at/inline/root choices,
optional cache_write/cache_read, vectorize/unroll/parallel where legal; sizes that do
and don't divide, sometimes symbolic) compute what NumPy computes.

The strategy lives in ``tests/workloads.py`` so the backend suites run the same
schedules compiled.  Each test runs three times the hypothesis profile's example count
(tests/conftest.py; ``TDSL_HYPOTHESIS_PROFILE=thorough`` runs 10x more).
"""
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.workloads import interpreter_runner, random_schedule

EXAMPLES = 3 * settings.default.max_examples


@pytest.mark.parametrize("workload", ["matmul", "conv2d", "pipeline"])
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_random_schedule_matches_numpy(workload, data):
    case = data.draw(random_schedule(workloads=(workload,)), label="case")
    case.check_with(interpreter_runner)


@settings(max_examples=EXAMPLES)
@given(case=random_schedule(), values=st.lists(st.integers(1, 14), min_size=2, max_size=3))
def test_random_schedule_of_symbolic_size_at_other_sizes(case, values):
    """One schedule of a symbolic workload, run at several bindings of the size."""
    assume(case.workload.symbolic)
    key = case.workload.symbolic[0]
    for v in values:
        case.rebind(**{key: v}).check_with(interpreter_runner)
