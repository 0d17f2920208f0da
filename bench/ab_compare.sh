#!/usr/bin/env bash
# Same-call A/B of two builds on the GPU machine (a change is kept only if it wins here, where both
# builds share the card, the host instance and its clocks):
#
#   bench/ab_compare.sh BASE NEW [ROUNDS]     (folders with bench_search and bench_latency)
#
# Alternates BASE and NEW ROUNDS times (default 2) over:
#   latency   bench_latency --queries 20000 (one query host to host, 100,000 x 2, K = 16; l2, then haversine)
#   lowdim    bench_search gis100k,gis1m,gis10m K 16 Q 1,2,4,16 (--reps 30 --sets 2)
#   paper     bench_search mnist,imagenet K 64 Q 1,4 (--reps 20 --sets 2)
# and prints, per row, the median of each build's rounds and NEW / BASE. CSVs and logs go to
# ./ab-out, or with $OUT set into $OUT/ab.tar.gz (the device tool brings back few files), with the
# table in $OUT/ab-summary.txt; AB_STEPS="latency lowdim paper" picks the steps.
set -uo pipefail
BASE=${1:?usage: bench/ab_compare.sh BASE NEW [ROUNDS]}
NEW=${2:?usage: bench/ab_compare.sh BASE NEW [ROUNDS]}
ROUNDS=${3:-2}
DIR=${OUT:+/tmp/ab}
DIR=${DIR:-ab-out}
mkdir -p "$DIR"
STEPS=${AB_STEPS:-latency lowdim paper}
for build in BASE NEW; do
  bin=${!build}
  echo "$build: $bin ($(cat "$bin/COMMIT" 2>/dev/null || echo unknown commit))"
done
for ((r = 1; r <= ROUNDS; ++r)); do
  for build in BASE NEW; do
    bin=${!build}
    tag=$(echo "$build" | tr A-Z a-z)-$r
    for step in $STEPS; do
      case $step in
        latency)
          "$bin/bench_latency" --queries 20000 --csv "$DIR/$tag-latency.csv" > "$DIR/$tag-latency.log" 2>&1
          "$bin/bench_latency" --queries 20000 --metric haversine --csv "$DIR/$tag-latency-haversine.csv" \
            > "$DIR/$tag-latency-haversine.log" 2>&1 ;;
        lowdim)
          "$bin/bench_search" --shapes gis100k,gis1m,gis10m --k 16 --q 1,2,4,16 --reps 30 --sets 2 \
            --csv "$DIR/$tag-lowdim.csv" > "$DIR/$tag-lowdim.log" 2>&1 ;;
        paper)
          "$bin/bench_search" --shapes mnist,imagenet --k 64 --q 1,4 --reps 20 --sets 2 \
            --csv "$DIR/$tag-paper.csv" > "$DIR/$tag-paper.log" 2>&1 ;;
      esac
    done
    echo "round $r $build done at ${SECONDS}s"
  done
done
python3 - "$DIR" > "$DIR/summary.txt" <<'PY'
import csv, glob, os, statistics, sys, collections
d = sys.argv[1]
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for path in sorted(glob.glob(os.path.join(d, "*.csv"))):
    build, _, kind = os.path.basename(path)[:-4].partition("-")
    kind = kind.split("-", 1)[1] if "-" in kind else kind
    for r in csv.DictReader(l for l in open(path) if not l.startswith("#")):
        if "path" in r:  # latency
            rows[(kind, r["path"], "p50_us")][build].append(float(r["p50_us"]))
            rows[(kind, r["path"], "p99_us")][build].append(float(r["p99_us"]))
        else:
            rows[(kind, f'{r["shape"]} K={r["K"]} Q={r["Q"]}', "ms")][build].append(float(r["median_ms"]))
print(f'{"step":20s} {"row":32s} {"unit":7s} {"base":>10s} {"new":>10s} {"new/base":>9s}')
for (kind, row, unit), by in rows.items():
    b, n = by.get("base"), by.get("new")
    if not b or not n:
        continue
    mb, mn = statistics.median(b), statistics.median(n)
    print(f"{kind:20s} {row:32s} {unit:7s} {mb:10.4f} {mn:10.4f} {mn / mb:9.3f}")
PY
cat "$DIR/summary.txt"
if [[ -n ${OUT:-} ]]; then
  cp "$DIR/summary.txt" "$OUT/ab-summary.txt"
  tar -czf "$OUT/ab.tar.gz" -C "$(dirname "$DIR")" "$(basename "$DIR")"
fi
