#!/usr/bin/env bash
# Per-kernel GPU time of the search pipeline (Nsight Compute, gpu__time_duration), for the shapes
# whose fixed costs matter: one query on 100,000 x 2 (bench_latency) and Q = 1 / 8 on the
# MNIST-like and ImageNet-like stores (bench_search). On the GPU machine:
#   bench/profile_kernels.sh [BIN (default .device-bin)]        -> $OUT/ncu-*.csv (or ./ncu-out)
# Clock control is left to the card (--clock-control none): the timings match the benchmarks'.
set -uo pipefail
BIN=${1:-.device-bin}
OUTDIR=${OUT:-ncu-out}
mkdir -p "$OUTDIR"
ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || echo ncu)
profile() {  # name, skip, count, command...
  local name=$1 skip=$2 count=$3; shift 3
  echo "=== $name: $*"
  "$ncu_bin" --clock-control none --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    --launch-skip "$skip" --launch-count "$count" --csv --page raw "$@" > "$OUTDIR/ncu-$name.csv" 2> "$OUTDIR/ncu-$name.err"
  # kernel name, duration (ns), DRAM % of peak
  awk -F'","' 'NR == 1 { for (i = 1; i <= NF; ++i) { if ($i ~ /Kernel Name/) kn = i; if ($i ~ /gpu__time_duration.sum/) t = i; if ($i ~ /dram__throughput/) d = i } next }
       NR > 2 { name = $kn; sub(/\(.*/, "", name); sub(/.*void /, "", name); sum[name] += $t; n[name]++; dr[name] += $d }
       END { for (k in sum) printf "  %-40s %4d launches  mean %9.2f us  DRAM %5.1f%%\n", k, n[k], sum[k] / n[k] / 1000, dr[k] / n[k] }' "$OUTDIR/ncu-$name.csv"
}
profile latency-100k-x2 300 60 "$BIN/bench_latency" --queries 400
profile mnist-q1 300 60 "$BIN/bench_search" --shapes mnist --k 64 --q 1 --reps 40 --sets 1
profile mnist-q8 300 60 "$BIN/bench_search" --shapes mnist --k 64 --q 8 --reps 40 --sets 1
profile imagenet-q1 300 60 "$BIN/bench_search" --shapes imagenet --k 64 --q 1 --reps 40 --sets 1
profile imagenet-q16 300 60 "$BIN/bench_search" --shapes imagenet --k 64 --q 16 --reps 40 --sets 1
