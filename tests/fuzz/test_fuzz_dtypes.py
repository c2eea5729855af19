"""Schedule fuzzer over mixed-dtype pipelines (tests/fuzz/dtype_computations.py).

Each drawn pipeline mixes the thirteen dtypes through casts, implicit integer promotion,
floor division by data that may be zero, comparisons, if_then_else and lifted reductions;
an intermediate stage may be an argument of the built function.  A random schedule
(tests/fuzz/schedules.py, compute_at among the moves) is lowered, run by the interpreter
and by LLVM, compared exactly with an independent NumPy evaluation, and its trace
replayed (tests/fuzz/check_dtypes.py).

``OPTIONS`` switches on every generator shape (tests/fuzz/dtype_exprs.py), including those
that reached r26-r29 before they were fixed.
"""
import pytest
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st
from hypothesis.errors import HypothesisException, StopTest

from tests.fuzz.check_dtypes import check_dtypes
from tests.fuzz.dtype_computations import dtype_computations
from tests.fuzz.dtype_exprs import Options
from tests.fuzz.schedules import Fuzz
from tests.fuzz.stats import COUNTS

EXAMPLES = settings.default.max_examples
#: r26 (reductions in if_then_else), r27 (k.astype), r28 (float16<->bfloat16 on LLVM) and
#: r29 (float->int of NaN/inf/out of range): fixed, so generated too
OPTIONS = Options(reduce_in_select=True, reduce_axis_astype=True, f16_bf16_casts=True,
                  saturating_casts=True)
FAMILIES = {"mixed_dtypes": dict(symbolic=False), "mixed_dtypes_symbolic": dict(symbolic=True)}


def _bindings(draw, comp) -> list:
    if not comp.symbolic:
        return [{}]
    return [{v: draw(st.integers(1, 7), label=f"{v} value") for v in comp.symbolic}
            for _ in range(draw(st.integers(2, 3), label="bindings"))]


@pytest.mark.parametrize("family", list(FAMILIES))
@settings(max_examples=EXAMPLES, report_multiple_bugs=EXAMPLES >= 1000,
          phases=[p for p in Phase if p is not Phase.explain],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much])
@given(data=st.data())
def test_fuzzed_mixed_dtype_schedule_matches_numpy(family, data):
    COUNTS["schedules"] += 1
    comp = data.draw(dtype_computations(OPTIONS, **FAMILIES[family]), label="computation")
    fz = Fuzz.start(comp)
    try:
        for _ in range(data.draw(st.integers(0, 6), label="moves")):
            fz.draw_move(data.draw)
        check_dtypes(fz, _bindings(data.draw, comp), data.draw(st.integers(0, 2**16),
                                                               label="seed"))
    except (StopTest, HypothesisException):
        COUNTS["abandoned"] += 1
        raise
    except BaseException:
        COUNTS["failed"] += 1
        note("---- script at failure ----\n" + fz.script())
        raise
