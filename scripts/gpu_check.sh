#!/usr/bin/env bash
# One-command GPU check (issues 13 and 26), from a source checkout as it is (no install):
#   1. benchmark: tdsl's defaults against PyTorch (benchmarks/cuda_vs_torch.py --quick), the
#      ratio table first,
#   2. gpu-tests: the GPU tests (they must run, not skip for want of a GPU),
#   3. racecheck, memcheck, synccheck: compute-sanitizer on scripts/gpu_workloads.py (every
#      default schedule family once, small sizes),
#   4. static: benchmarks/cuda_static.py (spills, bank conflicts, coalescing, occupancy).
# Each step runs under its own `timeout`, the whole run within $GPU_CHECK_BUDGET seconds
# (default 460, under 8 minutes); a step that fails does not stop the others; the last line
# is the summary: "gpu_check: SUMMARY ...".  Without a GPU it says so, runs the static
# report only and lists the steps it skipped (a dry run, exit 2).
# Usage: bash scripts/gpu_check.sh   (PYTHON=... picks the interpreter; default python3)
# Exit: 0 all passed, 1 a step failed, 2 no GPU here.
set -uo pipefail
SELF="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$SELF")/.."
PY=${PYTHON:-python3}
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
BUDGET=${GPU_CHECK_BUDGET:-460}
START=$SECONDS
RESULTS=()
FAILED=0

# run_step NAME LIMIT_S COMMAND...: runs it under timeout (within what is left of the
# budget), prints its output, records "NAME ok|FAILED (...)|skipped (...)"
run_step() {
  local name=$1 limit=$2 left rc
  shift 2
  left=$((BUDGET - (SECONDS - START)))
  if [ "$left" -lt 10 ]; then
    echo "== $name: skipped, the run's ${BUDGET}s budget is spent"
    RESULTS+=("$name skipped (out of time)")
    FAILED=1
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (timeout ${limit}s)"
  timeout --kill-after=10 "$limit" "$@"
  rc=$?
  if [ "$rc" -eq 0 ]; then
    RESULTS+=("$name ok")
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    RESULTS+=("$name FAILED (timed out after ${limit}s)")
    FAILED=1
  else
    RESULTS+=("$name FAILED (exit $rc)")
    FAILED=1
  fi
}

summary() {   # summary EXIT_CODE HEADLINE
  local s
  s=$(printf '%s; ' "${RESULTS[@]}")
  echo "gpu_check: SUMMARY $2: ${s%; } ($((SECONDS - START))s)"
  exit "$1"
}

find_sanitizer() {
  local cand
  cand=$(command -v compute-sanitizer 2>/dev/null) && { echo "$cand"; return; }
  for cand in /usr/local/cuda*/bin/compute-sanitizer \
              /usr/local/cuda*/compute-sanitizer/compute-sanitizer; do
    [ -x "$cand" ] && { echo "$cand"; return; }
  done
  local roots
  roots=$("$PY" -c 'import nvidia, sys; print(*nvidia.__path__)' 2>/dev/null) || return
  for root in $roots; do
    cand=$(find "$root" -name compute-sanitizer -type f -perm -u+x 2>/dev/null | head -n 1)
    [ -n "$cand" ] && { echo "$cand"; return; }
  done
}

GPU_TESTS=(tests/backends/test_cuda_schedules.py tests/backends/test_cuda_gemm_default.py
           tests/backends/test_cuda_driver_streams.py tests/backends/test_cuda_driver.py
           tests/backends/test_cuda_errors.py tests/backends/test_cuda_nvrtc.py)

gpu_tests() {   # the tests, then: no skip may say the GPU is missing
  local log rc
  log=$(mktemp)
  "$PY" -m pytest -q -p no:cacheprovider -rs "${GPU_TESTS[@]}" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  # expected skips with a GPU: the no-GPU error test, and PyTorch's stream test where
  # PyTorch is a CPU build
  if grep -E "^SKIPPED.*(GPU|CUDA device|cuda-python|NVRTC)" "$log" \
      | grep -v -E "is present here|PyTorch's current stream needs" >&2; then
    echo "gpu_check: GPU tests were skipped although a GPU is present (reasons above)" >&2
    rc=1
  fi
  rm -f "$log"
  return "$rc"
}

sanitize() {    # sanitize TOOL (compute-sanitizer in $SAN)
  "$SAN" --tool "$1" --error-exitcode 99 --target-processes all \
    "$PY" scripts/gpu_workloads.py 2>&1 | tail -n 30
  return "${PIPESTATUS[0]}"
}

# the steps that are shell functions run as "bash gpu_check.sh --step NAME ARG", so that
# `timeout` can stop them
if [ "${1:-}" = "--step" ]; then
  case "$2" in
    gpu-tests) gpu_tests; exit $? ;;
    sanitize) SAN=$4; sanitize "$3"; exit $? ;;
  esac
  echo "gpu_check: unknown step $2" >&2
  exit 64
fi

echo "== device"
GPU=1
WHY=""
if ! command -v nvidia-smi >/dev/null 2>&1 || ! timeout 20 nvidia-smi -L >/dev/null 2>&1; then
  GPU=0
  WHY="nvidia-smi is missing or lists no device"
else
  timeout 20 nvidia-smi -L
  WHY=$(timeout 60 "$PY" - <<'PYEOF' 2>&1
from tdsl.backends.cuda import driver, nvrtc
ok, why = driver.device_status()
if ok:
    print("tdsl driver: ok,", driver.get_driver().arch, "; NVRTC", nvrtc.version())
raise SystemExit(0 if ok else f"tdsl cannot use the GPU: {why}")
PYEOF
) || GPU=0
  echo "$WHY"
fi

if [ "$GPU" -eq 0 ]; then
  echo "gpu_check: NO GPU here ($WHY): dry run; skipping benchmark, gpu-tests, racecheck," \
       "memcheck, synccheck; running the static report only"
  run_step static 120 "$PY" benchmarks/cuda_static.py
  RESULTS+=("skipped (no GPU): benchmark, gpu-tests, racecheck, memcheck, synccheck")
  summary 2 "no GPU (dry run)"
fi

run_step benchmark 190 "$PY" benchmarks/cuda_vs_torch.py --quick
run_step gpu-tests 110 bash "$SELF" --step gpu-tests
SAN=$(find_sanitizer)
if [ -z "$SAN" ]; then
  echo "== compute-sanitizer: not found (PATH, /usr/local/cuda*/bin, pip nvidia packages)"
  RESULTS+=("racecheck/memcheck/synccheck FAILED (compute-sanitizer not found)")
  FAILED=1
else
  echo "compute-sanitizer: $SAN"
  for tool in racecheck memcheck synccheck; do
    run_step "$tool" 35 bash "$SELF" --step sanitize "$tool" "$SAN"
  done
fi
run_step static 45 "$PY" benchmarks/cuda_static.py
if [ "$FAILED" -eq 0 ]; then
  summary 0 "all passed"
fi
summary 1 "FAILED"
