#!/usr/bin/env bash
# Runs the GPU test suites (and optionally compute-sanitizer and the first benchmark) on a
# GPU machine from binaries built elsewhere and carried in BIN (default .device-bin):
#   tests/gpu/run_gpu_suite.sh [BIN] [--sanitize] [--bench]
# Writes logs to $OUT (if set) or ./gpu-logs. Exit status: number of failed suites.
set -u
BIN=${1:-.device-bin}
shift || true
LOGS=${OUT:-gpu-logs}
mkdir -p "$LOGS"
failed=0
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$LOGS/device.txt"
run() {  # name, command...
  local name=$1; shift
  echo "=== $name"
  local t0=$(date +%s)
  if "$@" > "$LOGS/$name.log" 2>&1; then
    echo "    passed in $(( $(date +%s) - t0 )) s: $(grep -E 'test cases|assertions' "$LOGS/$name.log" | tr '\n' ' ')"
  else
    failed=$((failed + 1))
    echo "    FAILED ($?): tail of $LOGS/$name.log"
    tail -40 "$LOGS/$name.log"
  fi
}
run conformance_cuda "$BIN/test_conformance_cuda"
run gpu_vs_cpu "$BIN/test_gpu_vs_cpu"
for arg in "$@"; do
  case $arg in
    --sanitize)
      for tool in memcheck racecheck synccheck initcheck; do
        # Reduced sizes: the shapes that exercise every kernel path, not the multi-million stores.
        run "sanitizer_$tool" compute-sanitizer --tool "$tool" --error-exitcode 1 \
          "$BIN/test_conformance_cuda" --test-case-exclude="*1,000,000*,*8 producers*"
      done ;;
    --bench)
      run bench_search "$BIN/bench_search" --shapes mnist,imagenet,googlenews --k 64 --q 1,8,12 --reps 20 --csv "$LOGS/search.csv"
      cat "$LOGS/bench_search.log" ;;
  esac
done
echo "=== $failed suite(s) failed"
exit $failed
