#!/usr/bin/env bash
# One-command GPU check (issue 13), for a machine with an NVIDIA GPU:
#   1. the GPU tests (they must run, not skip),
#   2. compute-sanitizer racecheck, memcheck and synccheck on the GPU workloads,
#   3. tdsl's default kernels against PyTorch cuBLAS/cuDNN (benchmarks/cuda_vs_torch.py).
# Usage: bash scripts/gpu_check.sh   (PYTHON=... to pick the interpreter)
# Exits non-zero, saying why, when there is no GPU or any step fails.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
fail() { echo "gpu_check: FAILED: $*" >&2; exit 1; }

echo "== device"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check: FAILED: no NVIDIA GPU here (nvidia-smi is missing or lists no device);" \
       "this check needs a machine with a GPU. Without one: python benchmarks/cuda_static.py" \
       "and the emulator tests." >&2
  exit 2
fi
nvidia-smi -L
"$PY" - <<'PYEOF' || fail "tdsl cannot use the GPU (see above)"
from tdsl.backends.cuda import driver
ok, why = driver.device_status()
print("tdsl driver:", "ok, " + driver.get_driver().arch if ok else why)
raise SystemExit(0 if ok else 1)
PYEOF

GPU_TESTS=(tests/backends/test_cuda_schedules.py tests/backends/test_cuda_gemm_default.py
           tests/backends/test_cuda_driver_streams.py tests/backends/test_cuda_driver.py)

echo "== GPU tests"
log=$(mktemp)
"$PY" -m pytest -q -p no:cacheprovider -rs "${GPU_TESTS[@]}" 2>&1 | tee "$log"
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "GPU tests"
if grep -E "SKIPPED.*(GPU tests|CUDA device)" "$log"; then
  fail "GPU tests were skipped although a GPU is present (see the reasons above)"
fi

echo "== compute-sanitizer"
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
[ -n "$SAN" ] || fail "compute-sanitizer not found (install the CUDA toolkit or put it on PATH)"
for tool in racecheck memcheck synccheck; do
  echo "-- $tool"
  "$SAN" --tool "$tool" --error-exitcode 99 --target-processes all \
    "$PY" -m pytest -q -p no:cacheprovider -x -k "gpu" tests/backends/test_cuda_schedules.py \
    tests/backends/test_cuda_gemm_default.py 2>&1 | tail -n 25
  [ "${PIPESTATUS[0]}" -eq 0 ] || fail "compute-sanitizer --tool $tool reported errors"
done

echo "== benchmark against PyTorch (cuBLAS / cuDNN)"
"$PY" benchmarks/cuda_vs_torch.py || fail "benchmark (a wrong result or a failed case above)"
echo "gpu_check: all passed"
