#!/usr/bin/env bash
# bench/run_suite.sh: the complete GPU benchmark suite in one command, sized to finish within
# BUDGET_S seconds (default 540) on an H100 or H200:
#
#   bench/run_suite.sh BIN OUTDIR [FAISS_CSV]
#     BIN        folder holding bench_search, bench_latency, bench_updates and (optional)
#                bench_graph_copies, e.g. build/bench
#     OUTDIR     where every CSV and log goes (created)
#     FAISS_CSV  FAISS GpuIndexFlatL2 figures, measured separately
#                (default bench/reference/peers/faiss-gpuflat-h100.csv)
#   environment: PYTHON (default python3; needs torch with CUDA for the PyTorch peers), BUDGET_S
#
# Build the programs first (CONTRIBUTING.md), for example:
#   cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release
#   cmake --build build-bench -j --target bench_search bench_latency bench_updates bench_graph_copies
#   bench/run_suite.sh build-bench/bench /tmp/bench-run
# then bench/report.py /tmp/bench-run prints the tables and the targets.
#
# In order (each step logged to OUTDIR/<step>.log, CSV beside it, stopped at its own time limit):
#   search        bench_search  mnist,imagenet,googlenews  K 64,128  Q 1,2,4,8,12,16,32,64  -> search.csv
#   peers         bench/peers.py run, same shapes, K and Q, same run (PyTorch matmul+topk, cdist+topk;
#                 the floor from search.csv's measured ceilings)                          -> peers.csv
#   latency       bench_latency (l2, then haversine)              -> latency.csv, latency-haversine.csv
#   lowdim        bench_search gis100k,gis1m,gis10m K 16 Q 1,16,256,1024 (l2, then haversine)
#                                                                  -> lowdim.csv, lowdim-haversine.csv
#   lowdim-scan   the same L2 rows with the spatial index off       -> lowdim-scan.csv
#   lowdim-moves  Q 256,1,024 with 1,000 moves anywhere published before each search -> lowdim-moves.csv
#   lowdim-drift  Q 64,256,1,024 with 10,000 moves of up to 0.001 (tracked objects: the index is
#                 refit, not sorted again)                          -> lowdim-drift.csv
#   device        bench_search gis1m,mnist K 16 Q 1,16 --device 1: search_device's GPU, call and
#                 host-to-host times under each row (device.log)   -> device.csv
#   graph-copies  bench_graph_copies: a graph of 1-4 tiny kernels, answers out by a D2H copy or by
#                 writes to mapped pinned memory; then inputs of 1-100 KB in by a copy node or a
#                 kernel reading mapped memory, and of 1-24 KB as the first kernel's parameter
#                                                                  -> graph-copies.csv
#   updates       bench_updates 1,000,000 x 2 (haversine, then l2; push(span) of 1,024 moves), then l2
#                 with one try_push per move   -> updates-haversine.csv, updates.csv, updates-single.csv
#   table         bench/peers.py table: per (shape, K, Q) ours q/s, each peer's q/s and ours/peer,
#                 FAISS marked "measured separately"               -> compare.csv, compare.txt
# The table is printed last. Exit status: that of the first step that failed (0 if none).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
abs() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
if (($# < 2)); then
  echo "usage: bench/run_suite.sh BIN OUTDIR [FAISS_CSV]   (see the top of this script)" >&2
  exit 2
fi
BIN=$(abs "$1")
OUTDIR=$(abs "$2")
FAISS=$(abs "${3:-$here/bench/reference/peers/faiss-gpuflat-h100.csv}")
PYTHON=${PYTHON:-python3}
BUDGET_S=${BUDGET_S:-540}
cd "$here" || exit 2
mkdir -p "$OUTDIR"
SUMMARY=$OUTDIR/summary.txt
: > "$SUMMARY"
T0=$SECONDS
status=0

for b in bench_search bench_latency; do
  if [[ ! -x $BIN/$b ]]; then
    echo "run_suite.sh: $BIN/$b not found; build it first (see the top of this script)" >&2
    exit 2
  fi
done

note() { echo "$*" | tee -a "$SUMMARY"; }

# step NAME MIN_S MAX_S COMMAND...: runs COMMAND with its output in NAME.log, stopped after
# min(MAX_S, what is left of the budget) seconds; skipped when less than MIN_S is left.
step() {
  local name=$1 min=$2 max=$3
  shift 3
  local left=$((BUDGET_S - (SECONDS - T0) - 10))
  if ((left < min)); then
    note "== $name: SKIPPED (${left} s of the budget left, needs about ${min} s)"
    return 0
  fi
  local limit=$((left < max ? left : max))
  note "== $name (limit ${limit} s): $*"
  local t=$SECONDS
  timeout --signal=INT --kill-after=5 "$limit" "$@" > "$OUTDIR/$name.log" 2>&1
  local rc=$?
  note "   rc=$rc in $((SECONDS - t)) s$( ((rc == 124)) && echo ' (TIMED OUT: its CSV may be partial)')"
  if ((rc != 0)); then
    tail -n 5 "$OUTDIR/$name.log" | sed 's/^/   | /' | tee -a "$SUMMARY"
    ((status == 0)) && status=$rc
  fi
  return 0
}

{
  echo "# run_suite.sh, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  # The binaries' commit: BIN/COMMIT where the builder wrote one (`git describe --always --dirty
  # > BIN/COMMIT`, for binaries copied to another machine), else this checkout's HEAD.
  if [[ -f $BIN/COMMIT ]]; then
    echo "# code: $(cat "$BIN/COMMIT") (binaries, from $BIN/COMMIT)"
  else
    echo "# code: $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo 'unknown (no .git on this machine)') (this copy's HEAD; no $BIN/COMMIT)"
  fi
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | sed 's/^/# gpu: /'
  echo "# bin: $BIN"
  echo "# faiss: $FAISS (measured separately, not in the same run)"
} | tee "$OUTDIR/device.txt" | tee -a "$SUMMARY"

Q_ALL=1,2,4,8,12,16,32,64
SHAPES=mnist,imagenet,googlenews

# 1. Ours and the PyTorch peers at the seed paper's shapes, back to back in the same run.
step search 60 200 "$BIN/bench_search" --shapes $SHAPES --k 64,128 --q $Q_ALL --reps 30 --sets 3 \
  --csv "$OUTDIR/search.csv"
if "$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' > "$OUTDIR/peers-probe.log" 2>&1; then
  if [[ -s $OUTDIR/search.csv ]]; then ceil=(--ceilings "$OUTDIR/search.csv"); else ceil=(); fi
  # peers.py stops starting new shapes after --budget-s, so a slow peer leaves a partial CSV, not none.
  step peers 60 220 "$PYTHON" bench/peers.py run --shapes $SHAPES --k 64,128 --q $Q_ALL --reps 30 --sets 3 \
    --warmup 3 "${ceil[@]}" --budget-s 150 --csv "$OUTDIR/peers.csv"
else
  note "== peers: SKIPPED ($PYTHON has no torch with CUDA: $(tail -n 1 "$OUTDIR/peers-probe.log"))"
fi

# 2. One-query latency, then the low-dimension shapes (l2 and haversine).
step latency 15 60 "$BIN/bench_latency" --queries 50000 --csv "$OUTDIR/latency.csv"
step latency-haversine 15 60 "$BIN/bench_latency" --queries 50000 --metric haversine \
  --csv "$OUTDIR/latency-haversine.csv"
step lowdim 30 120 "$BIN/bench_search" --shapes gis100k,gis1m,gis10m --k 16 --q 1,16,256,1024 \
  --csv "$OUTDIR/lowdim.csv"
step lowdim-haversine 30 120 "$BIN/bench_search" --shapes gis100k,gis1m,gis10m --k 16 --q 1,16,256,1024 \
  --metric haversine --csv "$OUTDIR/lowdim-haversine.csv"
# The same L2 rows without the spatial index (the scans alone), and with 1,000 moves published
# before every search (each search sees a new snapshot: under Auto a batch of 1,024 rebuilds the
# index for itself, one of 256 takes the scans).
step lowdim-scan 30 120 "$BIN/bench_search" --shapes gis100k,gis1m,gis10m --k 16 --q 1,16,256,1024 \
  --spatial off --csv "$OUTDIR/lowdim-scan.csv"
step lowdim-moves 20 90 "$BIN/bench_search" --shapes gis100k,gis1m,gis10m --k 16 --q 256,1024 --reps 10 --sets 2 \
  --moves 1000 --csv "$OUTDIR/lowdim-moves.csv"
step lowdim-drift 20 90 "$BIN/bench_search" --shapes gis100k,gis1m,gis10m --k 16 --q 64,256,1024 --reps 10 --sets 2 \
  --moves 10000 --drift 0.001 --csv "$OUTDIR/lowdim-drift.csv"
# Device-resident queries and answers (search_device) beside search(), printed under each row.
step device 20 60 "$BIN/bench_search" --shapes gis1m,mnist --k 16 --q 1,16 --reps 30 --sets 3 --device 1 \
  --csv "$OUTDIR/device.csv"
# What a small graph pays for the way its answers reach the host (why the last kernel writes them).
if [[ -x $BIN/bench_graph_copies ]]; then
  step graph-copies 10 40 "$BIN/bench_graph_copies" --csv "$OUTDIR/graph-copies.csv"
fi

# 3. Update throughput with and without concurrent queries (haversine first: the drivers case).
if [[ -x $BIN/bench_updates ]]; then
  step updates-haversine 25 70 "$BIN/bench_updates" --metric haversine --csv "$OUTDIR/updates-haversine.csv"
  step updates 25 70 "$BIN/bench_updates" --metric l2 --csv "$OUTDIR/updates.csv"
  step updates-single 25 70 "$BIN/bench_updates" --metric l2 --api single --csv "$OUTDIR/updates-single.csv"
else
  note "== updates: SKIPPED ($BIN/bench_updates not found)"
fi

# 4. The one table (standard library Python: works even where torch is missing).
ours=()
[[ -s $OUTDIR/search.csv ]] && ours+=("$OUTDIR/search.csv")
[[ -s $OUTDIR/lowdim.csv ]] && ours+=("$OUTDIR/lowdim.csv")
cp "$FAISS" "$OUTDIR/faiss-gpuflat-h100.measured-separately.csv" 2>/dev/null || note "(no FAISS CSV at $FAISS)"
for f in latency latency-haversine updates-haversine updates updates-single; do
  [[ -s $OUTDIR/$f.log ]] && { echo; echo "--- $f ($OUTDIR/$f.log)"; tail -n 12 "$OUTDIR/$f.log"; } | tee -a "$SUMMARY"
done
if ((${#ours[@]})); then
  if ! "$PYTHON" bench/peers.py table --ours "${ours[@]}" --peers "$OUTDIR/peers.csv" --faiss "$FAISS" \
    --csv "$OUTDIR/compare.csv" > "$OUTDIR/compare.txt" 2>&1; then
    ((status == 0)) && status=1
  fi
else
  echo "no bench_search CSV: no table" > "$OUTDIR/compare.txt"
  ((status == 0)) && status=1
fi
note "== done in $((SECONDS - T0)) s of a ${BUDGET_S} s budget, status $status; files in $OUTDIR"
echo
echo "=== streamknn vs peers, queries/s (host to host) — $OUTDIR/compare.csv"
cat "$OUTDIR/compare.txt"
exit $status
