#!/usr/bin/env bash
# Where one kernel's warps stall (Nsight Compute: warp states, pipes, shared-memory
# wavefronts), for one bench_search row. On a machine with the GPU:
#   [KERNEL=regex] bench/tools/profile_stalls.sh BIN SHAPE K Q [METRIC]   -> prints that kernel's details
# (KERNEL defaults to scan_kernel; NCU_ARGS adds options, e.g. "--cache-control none" to keep what the
# previous kernel left in L2)
set -uo pipefail
BIN=$1 SHAPE=$2 K=$3 Q=$4 METRIC=${5:-l2} KERNEL=${KERNEL:-scan_kernel}
reasons="long_scoreboard short_scoreboard mio_throttle lg_throttle barrier wait math_pipe_throttle not_selected selected dispatch_stall no_instruction membar branch_resolving sleeping drain tex_throttle imc_miss misc"
stalls=$(for r in $reasons; do printf 'smsp__average_warps_issue_stalled_%s_per_issue_active.ratio,' "$r"; done)
stalls=${stalls%,}
ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || echo ncu)
"$ncu_bin" --clock-control none ${NCU_ARGS:-} --kernel-name regex:"$KERNEL" --launch-skip 3 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section Occupancy --section LaunchStats --metrics "$stalls" \
  "$BIN/bench_search" --shapes "$SHAPE" --k "$K" --q "$Q" --reps 5 --sets 1 --metric "$METRIC" 2>&1 |
  grep -vE '^\s*$|----|^==PROF==' | grep -E 'smsp__average|Stall|stall|Warp Cycles|Issue|Pipe|Shared|Bank|Throughput|Duration|Registers|Occupancy|Block Size|Grid Size|Active Warps|Eligible|L1|L2|DRAM|Executed Ipc|OPT|'"$KERNEL" | cut -c1-200
