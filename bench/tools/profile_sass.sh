#!/usr/bin/env bash
# Where one kernel's instructions and stalls go, instruction by instruction, with Nsight Compute:
#
#   bench/tools/profile_sass.sh BIN KERNEL_REGEX "SHAPE K Q" [bench_search options ...]
#
# Profiles the first launch of the matching kernel in a bench_search row (full set, SASS source
# counters), prints the kernel's totals (warp instructions executed, per (point, query) pair
# where the row's store size is known), then the 40 instructions executed most often with their
# stall samples, and keeps the whole per-instruction table in $OUTDIR (default ./) as sass-*.csv.gz.
set -uo pipefail
BIN=${1:?usage: bench/tools/profile_sass.sh BIN KERNEL_REGEX \"SHAPE K Q\" [options]}
KERNEL=${2:?kernel regex}
read -r shape k q <<< "${3:?\"SHAPE K Q\"}"
shift 3
ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || echo ncu)
out=${OUTDIR:-.}
report=/tmp/profile-sass
"$ncu_bin" --set full --import-source yes --clock-control none --kernel-name regex:"$KERNEL" --launch-skip 2 \
  --launch-count 1 -f -o "$report" "$BIN/bench_search" --shapes "$shape" --k "$k" --q "$q" --reps 3 --sets 1 "$@" \
  > /tmp/profile-sass.log 2>&1 || { tail -5 /tmp/profile-sass.log; exit 1; }
csv="$out/sass-$shape-k$k-q$q.csv"
"$ncu_bin" --import "$report.ncu-rep" --page source --print-source sass --csv > "$csv" 2>/dev/null
"$ncu_bin" --import "$report.ncu-rep" --page details --csv 2>/dev/null |
  grep -E '"(Duration|Executed Instructions|Issue Slots Busy|Registers Per Thread|Achieved Occupancy|Grid Size|Block Size)"' |
  awk -F'","' '{print "  " $(NF-2) " = " $NF " " $(NF-1)}' | tr -d '"'
/usr/bin/env python3 - "$csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
head = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
col = {h: i for i, h in enumerate(rows[head])}
data = [r for r in rows[head + 1:] if len(r) == len(rows[head])]
num = lambda r, c: float(r[col[c]] or 0)
total = sum(num(r, "Instructions Executed") for r in data)
samples = sum(num(r, "Warp Stall Sampling (All Samples)") for r in data) or 1
print(f"  warp instructions executed: {total:,.0f}")
top = sorted(data, key=lambda r: -num(r, "Instructions Executed"))[:40]
for r in sorted(top, key=lambda r: int(r[col["Address"]], 16)):
    print(f'  {r[col["Address"]][-5:]} {num(r, "Instructions Executed"):14,.0f} '
          f'{100 * num(r, "Warp Stall Sampling (All Samples)") / samples:5.1f}%  {r[col["Source"]].strip()}')
PY
gzip -f "$csv"
