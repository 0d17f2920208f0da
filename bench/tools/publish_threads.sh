#!/usr/bin/env bash
# Publish throughput against the publish pool's size, on the GPU:
#
#   bench/tools/publish_threads.sh BIN [THREADS ...]   (BIN: folder with bench_updates; default 1 2 4 8)
#
# Runs bench_updates (1,000,000 x 2, l2 then haversine, batches of 10,000 / 100,000 / 1,000,000
# moves and 4 live producers, --seconds 1) once per StoreConfig::publish_threads value and prints
# moves/s and publish ms per row and thread count. CSVs, logs and the table
# (publish-threads.txt) go to $OUTDIR (default ./publish-threads-out). $UPDATES_ARGS adds
# arguments to every run (e.g. "--backend cpu" to try it without a GPU).
set -uo pipefail
(($# >= 1)) || { echo "usage: bench/tools/publish_threads.sh BIN [THREADS ...]" >&2; exit 2; }
BIN=$1
shift
THREADS=("$@")
((${#THREADS[@]})) || THREADS=(1 2 4 8)
DIR=${OUTDIR:-publish-threads-out}
mkdir -p "$DIR"
for metric in l2 haversine; do
  for t in "${THREADS[@]}"; do
    "$BIN/bench_updates" --metric "$metric" --batches 10000,100000,1000000 --seconds 1 --publish-threads "$t" \
      ${UPDATES_ARGS:-} --csv "$DIR/updates-$metric-t$t.csv" > "$DIR/updates-$metric-t$t.log" 2>&1 ||
      echo "bench_updates --metric $metric --publish-threads $t failed: see $DIR/updates-$metric-t$t.log" >&2
  done
done
# One line per (metric, row, queries) with moves/s and publish ms p50 for each thread count.
{
  printf '%-10s %-9s %-8s' metric batch queries
  for t in "${THREADS[@]}"; do printf ' %14s' "t=$t Mmoves/s"; done
  for t in "${THREADS[@]}"; do printf ' %12s' "t=$t pub ms"; done
  printf '\n'
  for metric in l2 haversine; do
    awk -F, -v metric="$metric" -v threads="${THREADS[*]}" '
      FNR == 1 { file++ }
      /^#/ || $1 == "metric" || $8 == "" { next }
      {
        key = ($19 > 0 ? "P=" $19 " live" : $3) SUBSEP ($4 == 1 ? "running" : "off")
        if (!(key in seen)) { seen[key] = 1; order[++rows] = key }
        mps[key, file] = $8 / 1e6; pub[key, file] = $11
      }
      END {
        n = split(threads, t, " ")
        for (r = 1; r <= rows; ++r) {
          split(order[r], k, SUBSEP)
          printf "%-10s %-9s %-8s", metric, k[1], k[2]
          for (f = 1; f <= n; ++f) printf " %14.2f", mps[order[r], f]
          for (f = 1; f <= n; ++f) printf " %12.3f", pub[order[r], f]
          printf "\n"
        }
      }' $(for t in "${THREADS[@]}"; do echo "$DIR/updates-$metric-t$t.csv"; done)
  done
} | tee "$DIR/publish-threads.txt"
