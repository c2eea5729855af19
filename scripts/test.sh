#!/usr/bin/env bash
# Sets up a virtual environment with tdsl and its test dependencies, then runs the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test,cuda,notebooks]"
# PyTorch (CPU) for the embedding tests and tutorial 7; pinned to the CPU build these
# machines carry, so pip never pulls a multi-GB CUDA build.  Without it those tests skip.
.venv/bin/python -m pip install -q --disable-pip-version-check "torch==2.13.0" \
    || echo "PyTorch 2.13.0 could not be installed: the torch tests will be skipped"
exec .venv/bin/python -m pytest -q -ra tests "$@"
