#!/usr/bin/env bash
# Per-kernel GPU time of the spatial index's build and search (Nsight Compute): bench_search
# with StoreConfig::spatial_index = Always and moves published before every search, so each
# search rebuilds the index. On a machine with the GPU:
#   bench/tools/profile_spatial.sh [BIN (default build/bench)] [SHAPE (gis1m)] [Q list (1,1024)]
# MOVES="--moves 10000 --drift 0.001" publishes small moves instead (each search refits the index
# where it can); SPATIAL=auto leaves the choice to Auto; REPS=N times N searches (default 3);
# CACHE=none keeps the caches between kernels (ncu flushes them by default: a cold figure).
# prints, per Q, each kernel's launches and mean duration (the build's kernels, CUB's scan, the
# search). Clock control is left to the card, so durations match the benchmarks'.
set -uo pipefail
BIN=${1:-build/bench}
SHAPE=${2:-gis1m}
QS=${3:-1,1024}
ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || echo ncu)
for q in ${QS//,/ }; do
  echo "=== $SHAPE K 16 Q $q (${MOVES:---moves 1000} published before every search, --spatial ${SPATIAL:-always})"
  "$ncu_bin" --clock-control none --cache-control "${CACHE:-all}" --metrics gpu__time_duration.sum \
    --kernel-name regex:"spatial|Radix" --launch-count 400 --csv --page raw \
    "$BIN/bench_search" --shapes "$SHAPE" --k 16 --q "$q" --reps "${REPS:-3}" --sets 1 \
    --spatial "${SPATIAL:-always}" ${MOVES:---moves 1000} --csv /tmp/profile-spatial.csv 2>/dev/null |
    /usr/bin/env python3 -c '
import csv, re, sys, collections
rows = [r for r in csv.reader(sys.stdin) if len(r) > 3]
head = rows[0]; col = {h: i for i, h in enumerate(head)}
unit = rows[1][col["gpu__time_duration.sum"]]
scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}[unit]
times = collections.OrderedDict()
for r in rows[2:]:
    match = re.search(r"(\w+_kernel(?:<[^>(]*>)?|\w+Kernel)", r[col["Kernel Name"]])
    name = match.group(1) if match else r[col["Kernel Name"]][:40]
    times.setdefault(name, []).append(float(r[col["gpu__time_duration.sum"]].replace(",", "")) * scale)
for name, t in times.items():
    print(f"  {name:40s} {len(t):4d} launches  mean {sum(t) / len(t):8.2f} us  (min {min(t):8.2f}, max {max(t):8.2f})")
'
done
