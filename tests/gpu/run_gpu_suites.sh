#!/usr/bin/env bash
# tests/gpu/run_gpu_suites.sh: the four GPU test suites, then compute-sanitizer (memcheck,
# racecheck, synccheck) on the cases that cover the kernels' shared-memory protocols, in ONE
# command on the GPU machine:
#
#   tests/gpu/run_gpu_suites.sh [BIN] [OUTDIR]
#     BIN     folder with test_gpu_vs_cpu, test_conformance_cuda, test_device_search,
#             test_reliability_cuda (built here, carried to the device)      (default .device-bin)
#     OUTDIR  where suites.txt and sanitizers.txt go           (default $OUT, else ./gpu-suites-out)
#   environment: SANITIZE=0 skips the sanitizers; SANITIZE_CASES overrides the cases they run.
#
# Build and carry, for example:
#   cmake --build build-cuda -j2 --target test_gpu_vs_cpu test_conformance_cuda test_device_search \
#     test_reliability_cuda
#   cp build-cuda/tests/test_{gpu_vs_cpu,conformance_cuda,device_search} \
#     build-cuda/tests/reliability/test_reliability_cuda .device-bin/
#   device tool: command "tests/gpu/run_gpu_suites.sh .device-bin", carry [".device-bin"]
# racecheck over the three default cases takes about 75 s on an H100: no timeout shorter than that.
# Exit status: the number of suites and sanitizer runs that failed (0 if none).
set -uo pipefail
BIN=${1:-.device-bin}
OUTDIR=${2:-${OUT:-gpu-suites-out}}
mkdir -p "$OUTDIR"
SUITES=$OUTDIR/suites.txt
SANITIZERS=$OUTDIR/sanitizers.txt
: > "$SUITES"
: > "$SANITIZERS"
failed=0

for t in test_gpu_vs_cpu test_conformance_cuda test_device_search test_reliability_cuda; do
  echo "== $t" | tee -a "$SUITES"
  if [[ ! -x $BIN/$t ]]; then
    echo "   $BIN/$t not found: build it and carry it (see the top of this script)" | tee -a "$SUITES"
    failed=$((failed + 1))
    continue
  fi
  start=$SECONDS
  "$BIN/$t" > "$OUTDIR/$t.log" 2>&1 || failed=$((failed + 1))
  grep -E "^\[doctest\] (test cases|assertions|Status)" "$OUTDIR/$t.log" | tee -a "$SUITES"
  grep -E "ERROR|FAILED" "$OUTDIR/$t.log" | head -20 | tee -a "$SUITES"
  echo "   $((SECONDS - start)) s" | tee -a "$SUITES"
done

[[ ${SANITIZE:-1} == 0 ]] && exit "$failed"
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [[ -z $sanitizer ]]; then
  echo "compute-sanitizer not found: sanitizers skipped" | tee -a "$SANITIZERS"
  exit "$failed"
fi
# Small batches over one-chunk stores (the one-query merge and the mapped answers), aggregation
# (the last kernel's writes), and about one tile per scan warp (lists full of the answer).
cases=${SANITIZE_CASES:-"GPU equals CPU on small batches over one-chunk stores*,GPU aggregation equals the CPU's*,GPU equals CPU on stores of about one tile per scan warp*"}
for tool in memcheck racecheck synccheck; do
  echo "== $tool: $cases" | tee -a "$SANITIZERS"
  start=$SECONDS
  "$sanitizer" --tool "$tool" --error-exitcode 3 "$BIN/test_gpu_vs_cpu" -tc="$cases" > "$OUTDIR/$tool.log" 2>&1 ||
    failed=$((failed + 1))
  grep -E "^\[doctest\] (test cases|assertions|Status)|ERROR SUMMARY|RACECHECK SUMMARY" "$OUTDIR/$tool.log" |
    tee -a "$SANITIZERS"
  echo "   $((SECONDS - start)) s" | tee -a "$SANITIZERS"
done
exit "$failed"
