#!/usr/bin/env bash
# The schedule fuzzer's long run: tests/fuzz under the "long" hypothesis profile
# (3 families x 1,700 examples = 5,100 random schedules, each checked through the
# interpreter, LLVM and trace replay).  Prints how many schedules ran, were refused and
# passed (the "tdsl schedule fuzzer" section), then hypothesis's per-family statistics.
# A family stops generating at its first failure (hypothesis then shrinks it), so on a
# tree with bugs fewer schedules run; the counts say how many.
# Extra arguments go to pytest (e.g. -k symbolic, --hypothesis-seed=1).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
TDSL_HYPOTHESIS_PROFILE=long exec "$PY" -m pytest -q -p no:cacheprovider -ra \
    --hypothesis-show-statistics tests/fuzz "$@"
