#!/usr/bin/env bash
# Sets up a virtual environment with tdsl, then builds, tunes and times a matmul against NumPy.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[benchmark]"
# OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE (set on some machines) slow NumPy's peer kernel down.
exec env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python -m tdsl.demo "$@"
