#!/usr/bin/env bash
# Where one kernel spends its warps' time, line by line (Nsight Compute source counters: warp
# stall samples per CUDA source line; the kernels are built with -lineinfo), for one bench_search
# row. On the GPU machine:
#   KERNEL=regex bench/profile_source.sh BIN SHAPE K Q [METRIC]   -> top lines; the CSV in $OUT
set -uo pipefail
BIN=$1 SHAPE=$2 K=$3 Q=$4 METRIC=${5:-l2} KERNEL=${KERNEL:-scan_kernel}
dir=${OUT:-.}
ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || echo ncu)
report=/tmp/profile-source-$$
"$ncu_bin" --clock-control none --kernel-name regex:"$KERNEL" --launch-skip 3 --launch-count 1 \
  --section SourceCounters --section SpeedOfLight --import-source yes -f -o "$report" \
  "$BIN/bench_search" --shapes "$SHAPE" --k "$K" --q "$Q" --reps 5 --sets 1 --metric "$METRIC" > /dev/null 2>&1
csv="$dir/source-$SHAPE-k$K-q$Q.csv"
"$ncu_bin" -i "$report.ncu-rep" --page source --csv --print-source cuda > "$csv" 2>&1
"$ncu_bin" -i "$report.ncu-rep" --page details 2>&1 | grep -E "Duration|DRAM Throughput|Grid Size" | head -5
python3 - "$csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
head = next((i for i, r in enumerate(rows) if any("Warp Stall Sampling (All" in c for c in r)), None)
if head is None:
    print("\n".join(",".join(r)[:200] for r in rows[:20])); sys.exit()
cols = rows[head]
si = next(i for i, c in enumerate(cols) if "Warp Stall Sampling (All" in c)
src = next((i for i, c in enumerate(cols) if c.strip() in ("Source", "# Source")), 1)
line = next((i for i, c in enumerate(cols) if c.strip() in ("#", "Line", "# Line")), 0)
def num(x):
    try: return float(x.replace(",", ""))
    except ValueError: return 0.0
body = [r for r in rows[head + 1:] if len(r) > si]
total = sum(num(r[si]) for r in body) or 1
for r in sorted(body, key=lambda r: -num(r[si]))[:30]:
    print(f"{100 * num(r[si]) / total:5.1f}%  {r[line]:>5}  {r[src].strip()[:150]}")
PY
