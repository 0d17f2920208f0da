#!/usr/bin/env bash
# Runs the GPU test suites (and optionally more) on a machine with a CUDA device:
#   tests/gpu/run_gpu_suite.sh [BIN [OUT]] [--sanitize] [--sanitize-kernels] [--sanitize-filters] [--reliability] [--cli]
#                              [--bench] [--soak-detach]
# BIN: the binaries, either a CUDA build tree (default build) or a folder holding them side by side;
# OUT: the folder the logs are written to (default gpu-logs).
#     (always)       test_conformance_cuda, test_gpu_vs_cpu, test_device_search, test_gpu_filters,
#                    test_kmeans_gpu, test_kmeans_device, test_reduced_screen (the last five when
#                    present; the last about 185 s on an H200: each case in both forms of the copy)
#     --sanitize     compute-sanitizer memcheck/racecheck/synccheck/initcheck on test_conformance_cuda
#     --sanitize-kernels  memcheck/racecheck/synccheck on the test_gpu_vs_cpu cases that cover the
#                    kernels' shared-memory protocols: small batches over one-chunk stores (the
#                    one-query merge, mapped answers), aggregation, about one tile per scan warp
#                    (full lists, the selection's radix passes), the dense screen on small stores,
#                    the direct search's paths (lists cut between segments, all ranks tied), the
#                    query-resident scan's paths (lists that fill, merges in several rounds), the
#                    dot-product screen's groups of 12, 16 and 32 on small stores, the row
#                    gather (every case also runs the exact re-rank after its screen); memcheck
#                    and synccheck also the graph's input block read by a kernel from the mapped
#                    staging and the exact re-rank's fallback; then test_reduced_screen's
#                    sanitizer-sized case (the reduced-precision screen's paths, its copy's writes)
#                    and test_kmeans_device's (K-means from device memory and one object's kept
#                    memory; initcheck as well); memcheck and initcheck on test_kmeans_gpu's
#                    labels brought back during later runs (snapshots, the changes kernel).
#                    racecheck runs the small-batch scan at its own scale (the full-size case's
#                    stores of millions of points are too slow under it) and the direct search's
#                    case on its kernel alone; memcheck and synccheck take about 15 s each.
#     --sanitize-filters  memcheck/racecheck/synccheck on test_gpu_filters' cases (predicates in every
#                    kernel, radius bounds, ties at the radius, one predicate's mask); racecheck takes
#                    about 4 minutes on the predicate and radius cases on an H200
#     --reliability  test_reliability_cuda (linearizability for STREAMKNN_STRESS_SECONDS, default
#                    10 s), then the four compute-sanitizer tools on it with a 2-s stress run
#     --cli          the main job on the GPU: `streamknn run --backend cuda` on its default stream
#     --bench        bench_search at the paper's shapes, K 64, Q 1, 8, 12
#     --soak-detach  starts the 10-minute soak (streamknn_soak --backend cuda --seconds 600) in the
#                    background, detached, so this script returns at once; it writes OUT/soak.log
#                    and OUT/soak.rc, and tests/gpu/collect_soak.sh OUT waits for it
# Environment: DEADLINE_S (skip what would start after that many seconds), SANITIZER_TIMEOUT_S
# (limit per compute-sanitizer run, default 300 s), SKIP_SUITES=1 (not the first two suites: for
# the sanitizers of a build whose suites have already passed; the two take 200-220 s on an H100),
# SANITIZE_TOOLS (--sanitize-kernels' tools, default "memcheck racecheck synccheck").
# Exit status: number of failed suites.
set -u
BIN=build
LOGS=gpu-logs
[[ $# -gt 0 && $1 != --* ]] && { BIN=$1; shift; }
[[ $# -gt 0 && $1 != --* ]] && { LOGS=$1; shift; }
mkdir -p "$LOGS"
LOGS=$(cd "$LOGS" && pwd)
# A binary's path in BIN: side by side, or where a CUDA build tree puts it.
bin() {
  local dir
  for dir in "$BIN" "$BIN/tests" "$BIN/tests/reliability" "$BIN/reliability" "$BIN/streams" "$BIN/bench"; do
    [[ -x $dir/$1 ]] && { echo "$dir/$1"; return; }
  done
  echo "$BIN/$1"  # absent: the step that runs it fails and says so
}
failed=0
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$LOGS/device.txt"
run() {  # name, command...   (skipped once DEADLINE_S seconds of this script have passed)
  local name=$1; shift
  if ((SECONDS > ${DEADLINE_S:-1000000})); then
    echo "=== $name: SKIPPED (past DEADLINE_S=$DEADLINE_S)"; failed=$((failed + 1)); return
  fi
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
if [[ ${SKIP_SUITES:-0} != 1 ]]; then
  run conformance_cuda "$(bin test_conformance_cuda)"
  run gpu_vs_cpu "$(bin test_gpu_vs_cpu)"
fi
[[ -x $(bin test_device_search) ]] && run device_search "$(bin test_device_search)"
[[ -x $(bin test_gpu_filters) ]] && run gpu_filters "$(bin test_gpu_filters)"
[[ -x $(bin test_kmeans_gpu) ]] && run kmeans_gpu "$(bin test_kmeans_gpu)"
[[ -x $(bin test_kmeans_device) ]] && run kmeans_device "$(bin test_kmeans_device)"
[[ -x $(bin test_reduced_screen) ]] && run reduced_screen "$(bin test_reduced_screen)"
sanitize() {  # name-suffix, binary, extra args...: the four compute-sanitizer tools
  local suffix=$1 binary=$2; shift 2
  for tool in memcheck racecheck synccheck initcheck; do
    local extra=()
    [[ $tool == memcheck ]] && extra=(--leak-check full)
    run "sanitizer_${tool}_$suffix" timeout "${SANITIZER_TIMEOUT_S:-300}" compute-sanitizer --tool "$tool" "${extra[@]}" \
      --error-exitcode 99 "$binary" "$@"
  done
}
for arg in "$@"; do
  case $arg in
    --reliability)
      run reliability_cuda "$(bin test_reliability_cuda)"
      STREAMKNN_STRESS_SECONDS=2 sanitize reliability "$(bin test_reliability_cuda)" ;;
    --cli)
      run cli_default_cuda "$(bin streamknn)" run --backend cuda --report "$LOGS/run-cuda.json" \
        --predictions "$LOGS/run-cuda-predictions.csv"
      cat "$LOGS/cli_default_cuda.log" ;;
    --soak-detach)
      rm -f "$LOGS/soak.rc"
      setsid nohup bash -c "'$(bin streamknn_soak)' --backend cuda --seconds 600 --warmup 60 --interval 10 \
        > '$LOGS/soak.log' 2>&1; echo \$? > '$LOGS/soak.rc'" < /dev/null > /dev/null 2>&1 &
      echo "=== soak started in the background at $(date -u +%T) (collect: tests/gpu/collect_soak.sh $LOGS)" ;;
    --sanitize)
      for tool in memcheck racecheck synccheck initcheck; do
        # Reduced sizes: the shapes that exercise every kernel path, not the multi-million stores.
        # Each tool under SANITIZER_TIMEOUT_S: one slow tool must not eat the others' time, and a
        # run cut off by an outer time limit still leaves the logs of the tools that finished.
        run "sanitizer_$tool" timeout "${SANITIZER_TIMEOUT_S:-300}" compute-sanitizer --tool "$tool" --error-exitcode 1 \
          "$(bin test_conformance_cuda)" --test-case-exclude="*1,000,000*,*8 producers*"
      done ;;
    --sanitize-kernels)
      # racecheck takes the scan's small-batch paths at its own scale; the other tools the case at
      # full size too (mapped answers over stores of millions, too slow under racecheck).
      cases="small batches over one-chunk stores: the scan's paths*,GPU aggregation equals the CPU's*"
      cases+=",GPU equals CPU on stores of about one tile per scan warp*"
      cases+=",the dense screen on small stores*,the query-resident scan: each path*"
      cases+=",the dot-product screen: each group*,the spatial index: each path*,the spatial index refit: each path*"
      cases+=",both backends read the same stored rows*"
      # The graph's copy-in kernel reads the mapped staging and has no shared memory: memcheck and
      # synccheck only (racecheck runs past 160 s on that case's 1,024-dim batches).
      copy_in_case="GPU equals CPU where a small batch's input block exceeds 16 KB*"
      # The exact re-rank's fallback (a block streaming the store): memcheck and synccheck; its
      # buffer is block-private and racecheck sees it through every other case's re-rank.
      fallback_case="the exact re-rank's fallback*"
      full_small_batches="GPU equals CPU on small batches over one-chunk stores*"
      # The direct search's paths (lists cut between segments, all ranks tied): racecheck on the
      # direct kernel alone, 10 s (with every kernel of its searches it runs past 540 s; the
      # re-rank and its fallback are racechecked through the other cases).
      direct_case="the direct search: each path*"
      for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
        tool_cases=$cases
        [[ $tool != racecheck ]] && tool_cases+=",$copy_in_case,$fallback_case,$full_small_batches,$direct_case"
        run "sanitizer_${tool}_kernels" timeout "${SANITIZER_TIMEOUT_S:-300}" compute-sanitizer --tool "$tool" \
          --error-exitcode 1 "$(bin test_gpu_vs_cpu)" -tc="$tool_cases"
        grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$LOGS/sanitizer_${tool}_kernels.log" | sed 's/^/    /'
        if [[ $tool == racecheck ]]; then
          run sanitizer_racecheck_direct timeout "${SANITIZER_TIMEOUT_S:-300}" compute-sanitizer --tool racecheck \
            --kernel-name kns=direct_kernel --error-exitcode 1 "$(bin test_gpu_vs_cpu)" -tc="$direct_case"
          grep -E "RACECHECK SUMMARY" "$LOGS/sanitizer_racecheck_direct.log" | sed 's/^/    /'
        fi
        # The reduced-precision screen and its copy's writes (test_reduced_screen).
        run "sanitizer_${tool}_reduced" timeout "${SANITIZER_TIMEOUT_S:-300}" compute-sanitizer --tool "$tool" \
          --error-exitcode 1 "$(bin test_reduced_screen)" -tc="the reduced screen: each path*"
        grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$LOGS/sanitizer_${tool}_reduced.log" | sed 's/^/    /'
        # K-means from device memory: the check, the variance passes, gathered rows, the sums, and
        # one object's fits in its kept memory.
        run "sanitizer_${tool}_kmeans" timeout "${SANITIZER_TIMEOUT_S:-300}" compute-sanitizer --tool "$tool" \
          --error-exitcode 1 "$(bin test_kmeans_device)" -tc="*sanitizer-sized*,*share its kept*"
        grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$LOGS/sanitizer_${tool}_kmeans.log" | sed 's/^/    /'
      done
      # initcheck on K-means too: no kernel reads, and no copy to the host brings, memory nothing wrote.
      run sanitizer_initcheck_kmeans timeout "${SANITIZER_TIMEOUT_S:-300}" compute-sanitizer --tool initcheck \
        --error-exitcode 1 "$(bin test_kmeans_device)" -tc="*sanitizer-sized*,*share its kept*"
      grep -E "ERROR SUMMARY" "$LOGS/sanitizer_initcheck_kmeans.log" | sed 's/^/    /'
      # The labels' early way back (label_return.hpp) in fits of 300,000 points: memcheck and
      # initcheck (the run kernel's racecheck at that size is too slow; the changes kernel shares
      # no memory between threads).
      for tool in memcheck initcheck; do
        run "sanitizer_${tool}_kmeans_labels" timeout "${SANITIZER_TIMEOUT_S:-300}" compute-sanitizer --tool "$tool" \
          --error-exitcode 1 "$(bin test_kmeans_gpu)" -tc="*labels brought*"
        grep -E "ERROR SUMMARY" "$LOGS/sanitizer_${tool}_kmeans_labels.log" | sed 's/^/    /'
      done ;;
    --sanitize-filters)
      for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
        run "sanitizer_${tool}_filters" timeout "${SANITIZER_TIMEOUT_S:-300}" compute-sanitizer --tool "$tool" \
          --error-exitcode 1 "$(bin test_gpu_filters)" -tc="GPU filters: *"
        grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$LOGS/sanitizer_${tool}_filters.log" | sed 's/^/    /'
      done ;;
    --bench)
      run bench_search "$(bin bench_search)" --shapes mnist,imagenet,googlenews --k 64 --q 1,8,12 --reps 20 --csv "$LOGS/search.csv"
      cat "$LOGS/bench_search.log" ;;
  esac
done
echo "=== $failed suite(s) failed (logs: $LOGS)"
exit $failed
