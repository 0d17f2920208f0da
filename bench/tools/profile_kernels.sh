#!/usr/bin/env bash
# Per-kernel GPU time of the search pipeline (Nsight Compute), for the shapes whose fixed costs
# matter: one query on 100,000 x 2 and 1,000,000 x 2 (K = 16, and batches of 256 / 1,024), Q = 1 / 16 / 64
# (and 32 at K = 128) on the MNIST-like
# and ImageNet-like stores (K = 64; Q = 1 at K = 128 too), and Q = 1 / 12 (K = 64), 8 / 12 / 16 (K = 128) on
# the GoogleNews-like one. On a machine with the GPU:
#   bench/tools/profile_kernels.sh [BIN (default build/bench)]     -> $OUTDIR (default ./ncu-out): ncu-*.csv + summary
# Only the library's kernels are profiled (sample pass, scan, select, aggregate), after the
# benchmark's warm-up; clock control is left to the card (--clock-control none) so durations match the
# benchmarks'. The summary gives, per kernel: launches, mean duration, DRAM throughput, grid.
set -uo pipefail
BIN=${1:-build/bench}
OUTDIR=${OUTDIR:-ncu-out}
mkdir -p "$OUTDIR"
ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || echo ncu)
metrics=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__block_size,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread
profile() {  # name, command...   (PROFILES="name ..." runs only those)
  local name=$1; shift
  [[ -n ${PROFILES:-} && " $PROFILES " != *" $name "* ]] && return
  echo "=== $name: $*"
  "$ncu_bin" --clock-control none --metrics "$metrics" --kernel-name regex:"scan|select|aggregate|sample" \
    --launch-skip 30 --launch-count 24 -f -o "/tmp/ncu-$name" "$@" > "/tmp/ncu-$name.log" 2>&1 || { tail -5 "/tmp/ncu-$name.log"; return; }
  "$ncu_bin" --import "/tmp/ncu-$name.ncu-rep" --csv --page raw > "$OUTDIR/ncu-$name.csv" 2>/dev/null
  /usr/bin/env python3 - "$OUTDIR/ncu-$name.csv" <<'PY'
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
head, units, data = rows[0], rows[1], rows[2:]
col = {h: i for i, h in enumerate(head)}
if "gpu__time_duration.sum" not in col:
    sys.exit("  no kernel was profiled (see the ncu log in /tmp)")
# ncu scales each metric's unit to its magnitude (nsecond, usecond, msecond): convert to ns
unit = units[col["gpu__time_duration.sum"]]
ns_per = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}.get(unit)
if ns_per is None:
    sys.exit(f"unknown duration unit {unit!r}")
agg = collections.defaultdict(list)
for r in data:
    name = r[col["Kernel Name"]].split("(")[0].split("<")[0].replace("void ", "")
    agg[name].append(r)
def num(r, key):
    try: return float(r[col[key]].replace(",", ""))
    except (KeyError, ValueError): return float("nan")
for name, rs in agg.items():
    t = sum(num(r, "gpu__time_duration.sum") for r in rs) / len(rs) * ns_per
    d = sum(num(r, "dram__throughput.avg.pct_of_peak_sustained_elapsed") for r in rs) / len(rs)
    w = sum(num(r, "sm__warps_active.avg.pct_of_peak_sustained_active") for r in rs) / len(rs)
    i = sum(num(r, "smsp__issue_active.avg.pct_of_peak_sustained_active") for r in rs) / len(rs)
    print(f"  {name:28s} {len(rs):3d} launches  mean {t / 1000:9.2f} us  DRAM {d:5.1f}%  warps active {w:5.1f}%  "
          f"issue {i:5.1f}%  grid {rs[0][col['launch__grid_size']]} x {rs[0][col['launch__block_size']]}  "
          f"regs {rs[0][col['launch__registers_per_thread']]}")
PY
  grep -E "^[A-Za-z].* [0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ " "/tmp/ncu-$name.log" | grep -v "==" | head -3
}
profile latency-100k-x2 "$BIN/bench_latency" --queries 200
profile gis1m-q1 "$BIN/bench_search" --shapes gis1m --k 16 --q 1 --reps 20 --sets 1
profile gis1m-q256 "$BIN/bench_search" --shapes gis1m --k 16 --q 256 --reps 20 --sets 1
profile gis1m-q1024 "$BIN/bench_search" --shapes gis1m --k 16 --q 1024 --reps 20 --sets 1
profile mnist-q1 "$BIN/bench_search" --shapes mnist --k 64 --q 1 --reps 20 --sets 1
profile mnist-q1-k128 "$BIN/bench_search" --shapes mnist --k 128 --q 1 --reps 20 --sets 1
profile mnist-q8-k128 "$BIN/bench_search" --shapes mnist --k 128 --q 8 --reps 20 --sets 1
profile mnist-q12 "$BIN/bench_search" --shapes mnist --k 64 --q 12 --reps 20 --sets 1
profile mnist-q16 "$BIN/bench_search" --shapes mnist --k 64 --q 16 --reps 20 --sets 1
profile mnist-q64 "$BIN/bench_search" --shapes mnist --k 64 --q 64 --reps 20 --sets 1
profile mnist-q32-k128 "$BIN/bench_search" --shapes mnist --k 128 --q 32 --reps 20 --sets 1
profile imagenet-q1 "$BIN/bench_search" --shapes imagenet --k 64 --q 1 --reps 20 --sets 1
profile imagenet-q1-k128 "$BIN/bench_search" --shapes imagenet --k 128 --q 1 --reps 20 --sets 1
profile imagenet-q12 "$BIN/bench_search" --shapes imagenet --k 64 --q 12 --reps 20 --sets 1
profile imagenet-q16 "$BIN/bench_search" --shapes imagenet --k 64 --q 16 --reps 20 --sets 1
profile googlenews-q1 "$BIN/bench_search" --shapes googlenews --k 64 --q 1 --reps 20 --sets 1
profile googlenews-q12 "$BIN/bench_search" --shapes googlenews --k 64 --q 12 --reps 20 --sets 1
profile googlenews-q8-k128 "$BIN/bench_search" --shapes googlenews --k 128 --q 8 --reps 20 --sets 1
profile googlenews-q12-k128 "$BIN/bench_search" --shapes googlenews --k 128 --q 12 --reps 20 --sets 1
profile googlenews-q16-k128 "$BIN/bench_search" --shapes googlenews --k 128 --q 16 --reps 20 --sets 1
