#!/usr/bin/env bash
# Per-kernel GPU time of the search kernels (the dense screen's product and selection, the
# direct search, the sample pass, the scan or the query-resident scan and the selection after
# them), with Nsight Compute,
# for bench_search rows: bench/tools/profile_dense.sh BIN "SHAPE K Q" ... (e.g. "mnist 64 16",
# "gis1m 16 1"). Prints one line per kernel: name, launches, mean duration (us), DRAM %,
# bytes read from DRAM (MB), issue-active %, registers, grid, the fewest and most blocks an SM
# ran, the SMs' mean active cycles over the busiest one's (1.0: balanced), achieved occupancy.
# Clock control is left to the card (--clock-control none).
set -uo pipefail
BIN=${1:?usage: bench/tools/profile_dense.sh BIN \"SHAPE K Q\" ...}
shift
ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || echo ncu)
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__grid_size,sm__ctas_launched.min,sm__ctas_launched.max,sm__cycles_active.avg,sm__cycles_active.max,sm__warps_active.avg.pct_of_peak_sustained_active
for row in "$@"; do
  read -r shape k q <<< "$row"
  echo "=== $shape K=$k Q=$q"
  "$ncu_bin" --clock-control none --metrics "$metrics" --kernel-name regex:"dense|direct|resident|select|scan|sample" \
    --launch-skip 8 --launch-count 12 -f -o /tmp/profile-dense \
    "$BIN/bench_search" --shapes "$shape" --k "$k" --q "$q" --reps 10 --sets 1 > /tmp/profile-dense.log 2>&1 ||
    { tail -5 /tmp/profile-dense.log; continue; }
  "$ncu_bin" --import /tmp/profile-dense.ncu-rep --csv --page raw > /tmp/profile-dense.csv 2>/dev/null
  /usr/bin/env python3 - /tmp/profile-dense.csv <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 5]
if len(rows) < 3:
    sys.exit("  no kernel profiled")
head, units, data = rows[0], rows[1], rows[2:]
col = {h: i for i, h in enumerate(head)}
by = collections.OrderedDict()
for r in data:
    by.setdefault(r[col["Kernel Name"]].split("(")[0].split("<")[0], []).append(r)
SCALE = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6, "ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6, "%": 1.0,
         "byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3, "block": 1.0, "cycle": 1.0}
def unit_scale(unit):
    if unit not in SCALE:
        sys.exit(f"  unknown unit {unit!r}: add it to SCALE")
    return SCALE[unit]
def mean(rs, m):  # durations in us, bytes in MB, whatever unit ncu chose for the column
    scale = unit_scale(units[col[m]]) if units[col[m]] else 1.0
    return scale * sum(float(r[col[m]].replace(",", "")) for r in rs) / len(rs)
for name, rs in by.items():
    print(f"  {name:32s} n={len(rs):3d} {mean(rs, 'gpu__time_duration.sum'):9.1f} us"
          f"  dram {mean(rs, 'dram__throughput.avg.pct_of_peak_sustained_elapsed'):5.1f}%"
          f" {mean(rs, 'dram__bytes_read.sum'):8.1f} MB read"
          f"  issue {mean(rs, 'smsp__issue_active.avg.pct_of_peak_sustained_active'):5.1f}%"
          f"  regs {rs[0][col['launch__registers_per_thread']]}  grid {rs[0][col['launch__grid_size']]}"
          f"  blocks/SM {mean(rs, 'sm__ctas_launched.min'):.0f}-{mean(rs, 'sm__ctas_launched.max'):.0f}"
          f"  SM active cycles avg/max {mean(rs, 'sm__cycles_active.avg') / mean(rs, 'sm__cycles_active.max'):.3f}"
          f"  warps {mean(rs, 'sm__warps_active.avg.pct_of_peak_sustained_active'):4.1f}%")
PY
done
