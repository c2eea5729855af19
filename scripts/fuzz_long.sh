#!/usr/bin/env bash
# The schedule fuzzer's long run: tests/fuzz under the "long" hypothesis profile
# (5 families x 1,700 examples = 8,500 random schedules: 3 float pipeline families of
# test_fuzz_schedules.py and 2 mixed-dtype families of test_fuzz_dtypes.py, each checked
# through the interpreter, LLVM, NumPy and trace replay; then 200 schedules lowered and
# JSON-replayed under 4 PYTHONHASHSEEDs, test_fuzz_replay_seeds.py).  Prints how many
# schedules ran, were refused and passed (the "tdsl schedule fuzzer" section), then
# hypothesis's per-family statistics.
# Every generator shape is on (tests/fuzz/test_fuzz_dtypes.py's OPTIONS; tests/fuzz/dtype_exprs.py
# says what each switches on).
# A family stops generating at its first failure (hypothesis then shrinks it), so on a
# tree with bugs fewer schedules run; the counts say how many.
# Extra arguments go to pytest (e.g. -k symbolic, --hypothesis-seed=1).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
TDSL_HYPOTHESIS_PROFILE=long exec "$PY" -m pytest -q -p no:cacheprovider -ra \
    --hypothesis-show-statistics tests/fuzz "$@"
