#!/usr/bin/env bash
# The GPU half of docs/reliability.md, in one command, on a machine with a CUDA device:
#   tests/reliability/gpu_reliability.sh [BUILD [OUT]]
# BUILD: a CUDA build tree (default build); OUT: the folder the logs are written to (default
# BUILD/gpu-reliability).
# 1. the reliability and conformance suites on the CUDA backend (ctest -L gpu);
# 2. compute-sanitizer memcheck, racecheck, synccheck and initcheck on both GPU suites
#    (the linearizability stress test runs 2 s under them: STREAMKNN_STRESS_SECONDS=2);
# 3. the 10-minute soak of the moving-drivers stream on the GPU (streamknn_soak --backend cuda).
# The exit status is that of the first failure.
set -uo pipefail
build=${1:-build}
out=${2:-$build/gpu-reliability}
mkdir -p "$out"
status=0
run() {  # name, command...
  local name=$1; shift
  echo "== $name: $*" | tee -a "$out/summary.txt"
  local t0=$SECONDS
  "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "   rc=$rc in $((SECONDS - t0)) s (log: $out/$name.log)" | tee -a "$out/summary.txt"
  [[ $rc -ne 0 && $status -eq 0 ]] && status=$rc
  return 0
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/summary.txt"
run gpu-suites ctest --test-dir "$build" -L gpu --output-on-failure
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for suite in tests/reliability/test_reliability_cuda tests/test_conformance_cuda; do
  for tool in memcheck racecheck synccheck initcheck; do
    extra=()
    [[ $tool == memcheck ]] && extra=(--leak-check full)
    run "$tool-$(basename "$suite")" env STREAMKNN_STRESS_SECONDS=2 \
      "$sanitizer" --tool "$tool" "${extra[@]}" --error-exitcode 99 "$build/$suite"
  done
done
run soak "$build/tests/reliability/streamknn_soak" --backend cuda --seconds 600 --warmup 60 --interval 10
tail -n 8 "$out/soak.log" | tee -a "$out/summary.txt"
exit $status
