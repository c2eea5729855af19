#!/usr/bin/env bash
# Sets up a virtual environment with tdsl and its test dependencies, then runs the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test,cuda,notebooks]"
exec .venv/bin/python -m pytest -q -ra tests "$@"
