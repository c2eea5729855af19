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
# The suite runs in three pytest processes.  This began as a workaround: JIT-compiled kernels
# (about 3 memory mappings each) were never released, and one process building every kernel
# of the suite came near Linux's limit of 65530 mappings (vm.max_map_count), where LLVM
# aborts.  The fix is in backends/llvm: a kernel's JIT library is unmapped once no module,
# launcher or function pointer holds it, the in-memory build cache keeps at most
# $TDSL_JIT_CACHE_ENTRIES kernels (default 256), and loaded .so libraries are dlclosed when
# dropped (tests/backends/test_llvm_jit_memory.py checks the mapping count); the CUDA
# emulator keeps $TDSL_EMU_CACHE_ENTRIES compiled harnesses loaded (default 64) and closes
# the others once no launch holds them.  Three processes still keep a margin.
status=0
for group in "tests/autotune tests/backends" \
             "tests/compat tests/frontend tests/fuzz tests/graph tests/integrations tests/ops" \
             "tests/schedule tests/tdsl tests/tutorials $(ls tests/test_*.py | tr '\n' ' ')"; do
    # shellcheck disable=SC2086  # the group is a list of paths
    .venv/bin/python -m pytest -q -ra --durations=15 $group || status=$?
done
exit $status
