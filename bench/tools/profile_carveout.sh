#!/usr/bin/env bash
# Which shared-memory configuration (the L1 / shared carveout) the driver gives each of the
# search's kernels, and how long each ran, for MNIST-like K = 128 Q = 1 run first in its process
# and after a batch of 2 (bench/tools/order_effect.sh's `first` and `q2`). Nsight Compute, one pass per
# kernel, caches and clocks left alone. On a machine with the GPU:
#   bench/tools/profile_carveout.sh [BIN ...]    (folders holding bench_search; default build/bench)
#     -> $OUTDIR (default ./carveout-out): carveout-<build>-<variant>.csv (ncu's raw page) and, printed,
#        per kernel and configuration: launches, the shared-memory configuration, the dynamic
#        shared memory per block and the median duration.
set -uo pipefail
builds=("$@")
((${#builds[@]})) || builds=(build/bench)
OUTDIR=${OUTDIR:-carveout-out}
mkdir -p "$OUTDIR"
ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || echo ncu)
metrics=gpu__time_duration.sum,launch__shared_mem_config_size,launch__shared_mem_per_block_dynamic,launch__grid_size,launch__occupancy_limit_shared_mem
for b in "${builds[@]}"; do
  name=$(basename "$b")
  for v in first q2; do
    case $v in first) q=1 ;; q2) q=2,1 ;; esac
    rep=/tmp/carveout-$name-$v
    echo "=== $name $v: bench_search --shapes mnist --k 128 --q $q --reps 20 --sets 1"
    "$ncu_bin" --clock-control none --cache-control none --metrics "$metrics" \
      --kernel-name regex:"scan|select|dense|sample" -f -o "$rep" \
      "$b/bench_search" --shapes mnist --k 128 --q "$q" --reps 20 --sets 1 --csv /dev/null > "$rep.log" 2>&1 ||
      { tail -5 "$rep.log"; continue; }
    grep -E "^MNIST" "$rep.log"
    "$ncu_bin" --import "$rep.ncu-rep" --csv --page raw > "$OUTDIR/carveout-$name-$v.csv" 2>/dev/null
    /usr/bin/env python3 - "$OUTDIR/carveout-$name-$v.csv" <<'PY'
import csv, statistics, sys
rows = list(csv.reader(open(sys.argv[1])))
head, units, data = rows[0], rows[1], rows[2:]
col = {h: i for i, h in enumerate(head)}
scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}[units[col["gpu__time_duration.sum"]]]
# Launches grouped by kernel and configuration, in the order each group first appears.
groups = {}
for r in data:
    kernel = r[col["Kernel Name"]].split("(")[0].split("<")[0].replace("void ", "")
    key = (kernel, r[col["launch__shared_mem_config_size"]], units[col["launch__shared_mem_config_size"]],
           r[col["launch__shared_mem_per_block_dynamic"]], units[col["launch__shared_mem_per_block_dynamic"]])
    groups.setdefault(key, []).append(float(r[col["gpu__time_duration.sum"]].replace(",", "")) * scale)
for (kernel, config, cu, dyn, du), ts in groups.items():
    print(f"  {kernel:28s} {len(ts):3d} launches  config {config} {cu}  dynamic {dyn} {du}  median {statistics.median(ts):8.2f} us")
PY
  done
done
