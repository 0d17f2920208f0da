#!/usr/bin/env bash
# GPU checks of the device API and the Python zero-copy path, on a machine with a CUDA device:
#   tests/gpu/run_device_api.sh [BIN [OUT]]
# BIN: the binaries, either a CUDA build tree (default build) or a folder holding them side by side;
# OUT: the folder the logs are written to (default gpu-logs). Each step is time-boxed:
#   test_device_search      search_device / predict_device against search() and the models
#   test_conformance_cuda   the lookup_and_update cases, then the conformance suite on CUDA
#   python                  python/gpu_check.sh run: builds the package with the CUDA backend in
#                           PY_BUILD (default build-gpu-python) and runs tests/python on the device
#   test_gpu_vs_cpu         regression check of the query pipeline (a few cases)
# Exit status: number of failed steps.
set -u
BIN=${1:-build}
LOGS=${2:-gpu-logs}
[[ $BIN = /* ]] || BIN=$PWD/$BIN
mkdir -p "$LOGS"
LOGS=$(cd "$LOGS" && pwd)
cd "$(dirname "$0")/../.."  # the repository root: the Python suite reads docs/ and README.md
# A binary's path in BIN: side by side, or where a CUDA build tree puts it.
bin() {
  local dir
  for dir in "$BIN" "$BIN/tests"; do
    [[ -x $dir/$1 ]] && { echo "$dir/$1"; return; }
  done
  echo "$BIN/$1"  # absent: the step that runs it fails and says so
}
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
step device_search 60 "$(bin test_device_search)"
step knnq_cuda 40 "$(bin test_conformance_cuda)" -tc="*lookup_and_update*"
step python 200 bash python/gpu_check.sh run "${PY_BUILD:-build-gpu-python}" "$LOGS"
step conformance_cuda 60 "$(bin test_conformance_cuda)" --test-case-exclude="*1,000,000*,*8 producers*"
step gpu_vs_cpu 40 "$(bin test_gpu_vs_cpu)" -tc="GPU aggregation*,in-flight*,graph replays*"
echo "=== $failed step(s) failed"
exit $failed
