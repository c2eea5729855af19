"""Shared test settings: hypothesis profiles and a seeded random generator."""
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=40, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=400, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
# "long": the schedule fuzzer's long run (scripts/fuzz_long.sh); tests/fuzz runs
# max_examples per family, 5 families: 8,500 schedules.
settings.register_profile("long", max_examples=1700, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("TDSL_HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
