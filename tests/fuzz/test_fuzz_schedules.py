"""Schedule fuzzer: random pipelines x random schedules, every accepted schedule checked.

A drawn computation (tests/fuzz/computations.py: 2-4 stages of elementwise, stencil,
reduction, multi-output and shared-reduce_axis computes at constant or symbolic sizes)
gets a random sequence of primitives in random order (tests/fuzz/schedules.py: split by
factor/nparts, reorder, fuse, tile, compute_at/inline/root, unroll, vectorize, parallel,
cache_read/cache_write, rfactor, tensorize with a gemv intrinsic).  Each primitive may be
refused, only with a TDSLError that leaves the schedule unchanged.  The result is then
lowered (a TDSLError there is a refusal, recorded as such), run by the interpreter and by
LLVM at every binding of the symbolic sizes on random non-zero data and compared with
NumPy, and its trace is replayed on a fresh schedule, which must lower to the same IR
(tests/fuzz/check.py).

Examples per family: the profile's ``max_examples`` (tests/conftest.py); the "long"
profile (scripts/fuzz_long.sh) runs more than 5,000 schedules in all.
"""
import pytest
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st
from hypothesis.errors import HypothesisException, StopTest

from tests.fuzz.check import check
from tests.fuzz.computations import computations
from tests.fuzz.schedules import Fuzz
from tests.fuzz.stats import COUNTS

EXAMPLES = settings.default.max_examples
FAMILIES = {
    "constant": dict(symbolic=False),
    "symbolic": dict(symbolic=True),
    "tensorize": dict(symbolic=None, reduce=True),
}


def _bindings(draw, comp) -> list:
    if not comp.symbolic:
        return [{}]
    count = draw(st.integers(2, 3), label="bindings")
    return [{v: draw(st.integers(1, 9), label=f"{v} value") for v in comp.symbolic}
            for _ in range(count)]


@pytest.mark.parametrize("family", list(FAMILIES))
@settings(max_examples=EXAMPLES,
          # short profiles shrink one failure only (minutes instead of tens of minutes)
          report_multiple_bugs=EXAMPLES >= 1000,
          phases=[p for p in Phase if p is not Phase.explain],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much])
@given(data=st.data())
def test_fuzzed_schedule_matches_numpy(family, data):
    COUNTS["schedules"] += 1
    comp = data.draw(computations(**FAMILIES[family]), label="computation")
    fz = Fuzz.start(comp)
    try:
        if family == "tensorize":
            fz.draw_tensorize_recipe(data.draw)
        for _ in range(data.draw(st.integers(0, 8), label="moves")):
            fz.draw_move(data.draw)
        check(fz, _bindings(data.draw, comp), data.draw(st.integers(0, 2**16), label="seed"))
    except (StopTest, HypothesisException):
        COUNTS["abandoned"] += 1     # hypothesis's own control flow (overrun, assume): not run
        raise
    except BaseException:
        COUNTS["failed"] += 1
        note("---- script at failure ----\n" + fz.script())
        raise
