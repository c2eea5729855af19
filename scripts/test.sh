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
[ $# -gt 0 ] && exec .venv/bin/python -m pytest -q -ra "$@"
# The suite runs in parallel worker processes (pytest-xdist): one per available CPU, at least
# 2 and at most 4 ($TDSL_TEST_WORKERS overrides), a test file per worker at a time
# (--dist loadfile: a module's fixtures, e.g. a Dask cluster, are made once).  Most of the
# suite's time is single-threaded LLVM/NVRTC builds and waits on isolated tuning workers, so
# two workers on a 2-core machine cut its wall time.  Workers are separate processes, which
# also keeps each one far from Linux's limit of 65530 memory mappings (vm.max_map_count):
# JIT-compiled kernels take about 3 each.  backends/llvm releases them (a kernel's JIT
# library is unmapped once no module, launcher or function pointer holds it, the in-memory
# build cache keeps at most $TDSL_JIT_CACHE_ENTRIES kernels, default 256, loaded .so
# libraries are dlclosed when dropped; tests/backends/test_llvm_jit_memory.py checks the
# count), and the CUDA emulator keeps $TDSL_EMU_CACHE_ENTRIES harnesses loaded (default 64).
workers=${TDSL_TEST_WORKERS:-$(.venv/bin/python -c \
    "import os; print(max(2, min(4, len(os.sched_getaffinity(0)))))")}
exec .venv/bin/python -m pytest -q -ra --durations=25 -n "$workers" --dist loadfile tests
