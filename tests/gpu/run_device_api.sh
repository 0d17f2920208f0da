#!/usr/bin/env bash
# GPU checks of the device API and the Python zero-copy path, from binaries and a source snapshot
# built elsewhere and carried in BIN (default .device-bin-devapi):
#   BIN/test_device_search      search_device / predict_device against search() and the models
#   BIN/test_conformance_cuda   the conformance suite on CUDA (lookup_and_update cases first)
#   BIN/src                     a snapshot of the whole source tree (the Python suite reads docs/ and
#                               README.md), with build-deps (gpu_check.sh collect)
#   BIN/test_gpu_vs_cpu         regression check of the query pipeline (best effort, time-boxed)
# Usage, from the repository root of the GPU machine:  bash BIN/src/tests/gpu/run_device_api.sh BIN
# Logs go to $OUT (or ./gpu-logs). Exit status: number of failed steps.
set -u
BIN=$(cd "${1:-.device-bin-devapi}" && pwd)
LOGS=${OUT:-$PWD/gpu-logs}
mkdir -p "$LOGS"
failed=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$LOGS/device.txt"
step() {  # name, time limit (s), command...
  local name=$1 limit=$2
  shift 2
  local t0=$(date +%s)
  timeout "$limit" "$@" > "$LOGS/$name.log" 2>&1
  local rc=$?
  local summary=$(grep -E '^\[doctest\] (test cases|assertions)|passed|failed' "$LOGS/$name.log" | tail -3 | tr '\n' ' ')
  if [[ $rc -eq 0 ]]; then
    echo "=== $name: passed in $(( $(date +%s) - t0 )) s: $summary"
  else
    failed=$((failed + 1))
    echo "=== $name: FAILED (rc $rc$([[ $rc -eq 124 ]] && echo ', time limit')) after $(( $(date +%s) - t0 )) s: $summary"
    tail -40 "$LOGS/$name.log"
  fi
}
# Worst case 60 + 40 + 200 + 60 + 40 = 400 s; the important steps first.
step device_search 60 "$BIN/test_device_search"
step knnq_cuda 40 "$BIN/test_conformance_cuda" -tc="*lookup_and_update*"
pushd "$BIN/src" > /dev/null
step python 200 env DEPS="$BIN/src/build-deps" bash python/gpu_check.sh run
popd > /dev/null
step conformance_cuda 60 "$BIN/test_conformance_cuda" --test-case-exclude="*1,000,000*,*8 producers*"
step gpu_vs_cpu 40 "$BIN/test_gpu_vs_cpu" -tc="GPU aggregation*,in-flight*,graph replays*"
echo "=== $failed step(s) failed"
exit $failed
