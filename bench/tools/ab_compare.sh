#!/usr/bin/env bash
# Same-run A/B of builds on one GPU (a change is kept only if it wins here, where the
# builds share the card, the host instance and its clocks):
#
#   bench/tools/ab_compare.sh BASE NEW [NEW2 ...] [ROUNDS]   (folders with bench_search and bench_latency)
#
# Alternates the builds ROUNDS times (default 2; a last argument that is a number) over:
#   latency   bench_latency --queries 20000 (one query host to host, 100,000 x 2, K = 16; l2, then haversine)
#   lowdim    bench_search gis100k,gis1m,gis10m K 16 Q 1,2,4,16 (--reps 30 --sets 2)
#   lowsmall  bench_search gis100k,gis1m,gis10m K 16,64 Q 1,2,3,4,6,8,12,16 (--reps 30 --sets 2)
#   paper     bench_search mnist,imagenet K 64 Q 1,4 (--reps 20 --sets 2)
#   q1        bench_search mnist,imagenet,googlenews K 64,128 Q 1 (--reps 20 --sets 2)
#   small     bench_search mnist K 64,128 Q 1,2,4 (--reps 30 --sets 2)
#   pairs     bench_search mnist,small K 64,128 Q 1,2,3 (--reps 30 --sets 2; 100,000 x 128 scans up to 11 queries)
#   mnistbatch bench_search mnist K 64,128 Q 8,12,16,24,32,64 (--reps 20 --sets 2)
#   mid       bench_search mnist,imagenet,googlenews K 64,128 Q 2,4,8,12 (--reps 10 --sets 2)
#   sampled   bench_search googlenews,imagenet K 64,128 Q 8,12,16,32,64 (--reps 10 --sets 2)
#   densefrom bench_search mnist,small K 64,128 Q 6,8,9,10,11,12 (--reps 20 --sets 2)
#   densefew  bench_search mnist,small K 64,128 Q 4,5,6,7,8 (--reps 20 --sets 2)
#   batch     bench_search mnist,imagenet,googlenews K 64,128 Q 16,24,32,64 (--reps 10 --sets 2)
#   lowbatch  bench_search gis1m,gis10m K 16 Q 32,64,256,1024 (--reps 10 --sets 2)
#   lowmany   bench_search gis100k,gis1m,gis10m K 16,128 Q 16,32,64,128,256,1024, then haversine K 16
#             (--reps 10 --sets 2)
#   lowchunk  bench_search gis1m,gis10m K 16,128 Q 4096,32768 (--reps 3 --sets 1; at K = 128 Q = 32,768 the
#             query-resident scan runs in chunks)
#   spatial   bench_search gis100k,gis1m,gis10m K 16 Q 1,256,1024 --spatial always, then haversine
#             gis1m,gis10m (--reps 10 --sets 2): the index's search on a store that does not change
#   moving    bench_search gis1m,gis10m K 16 Q 64,256,1024 with 1,000 moves anywhere, then 10,000
#             moves of up to 0.001 (--drift) published before each search, Auto (--reps 10 --sets 2)
#   updates   bench_updates l2, 1,000,000 x 2, publishes of 1,000 / 10,000 / 100,000 moves anywhere and
#             four producers streaming, each alone and with the query thread (Q = 16) running
#             (--seconds 1): moves/s and the query thread's p99 (the spatial index's refit rules)
#   smallbatch bench_search small (100,000 x 128) K 64,128 Q 16,24,32,64 (--reps 10 --sets 2)
#   ipbatch   bench_search mnist,imagenet,googlenews K 64,128 Q 16,24,32,64 --metric ip (--reps 10 --sets 2)
#   nine12    bench_search mnist,imagenet,googlenews,small K 64,128 Q 9,10,12, then --metric ip (--reps 10 --sets 2)
#   ipsmall   bench_search mnist,small K 16,32,64 Q 8,9,10,11 --metric ip (--reps 20 --sets 2): inner-product
#             batches over small stores, where 9+ queries take the sample pass at any k
# and prints, per row, the median of each build's rounds and each candidate over BASE. CSVs and
# logs go to $OUTDIR (default ./ab-out), with the table in $OUTDIR/summary.txt; AB_STEPS="latency lowdim paper" picks the steps.
set -uo pipefail
usage="usage: bench/tools/ab_compare.sh BASE NEW [NEW2 ...] [ROUNDS]"
(($# >= 2)) || { echo "$usage" >&2; exit 2; }
ROUNDS=2
builds=("$@")
if [[ ${builds[-1]} =~ ^[0-9]+$ ]]; then
  ROUNDS=${builds[-1]}
  unset 'builds[-1]'
fi
((${#builds[@]} >= 2)) || { echo "$usage" >&2; exit 2; }
DIR=${OUTDIR:-ab-out}
mkdir -p "$DIR"
STEPS=${AB_STEPS:-latency lowdim paper}
name_of() { case $1 in 0) echo base ;; 1) echo new ;; *) echo "new$1" ;; esac; }
for i in "${!builds[@]}"; do
  echo "$(name_of "$i"): ${builds[$i]} ($(cat "${builds[$i]}/COMMIT" 2>/dev/null || echo unknown commit))"
done
for ((r = 1; r <= ROUNDS; ++r)); do
  for i in "${!builds[@]}"; do
    bin=${builds[$i]}
    tag=$(name_of "$i")-$r
    for step in $STEPS; do
      case $step in
        latency)
          "$bin/bench_latency" --queries 20000 --csv "$DIR/$tag-latency.csv" > "$DIR/$tag-latency.log" 2>&1
          "$bin/bench_latency" --queries 20000 --metric haversine --csv "$DIR/$tag-latency-haversine.csv" \
            > "$DIR/$tag-latency-haversine.log" 2>&1 ;;
        lowdim)
          "$bin/bench_search" --shapes gis100k,gis1m,gis10m --k 16 --q 1,2,4,16 --reps 30 --sets 2 \
            --csv "$DIR/$tag-lowdim.csv" > "$DIR/$tag-lowdim.log" 2>&1 ;;
        lowmany)
          "$bin/bench_search" --shapes gis100k,gis1m,gis10m --k 16,128 --q 16,32,64,128,256,1024 --reps 10 --sets 2 \
            --csv "$DIR/$tag-lowmany.csv" > "$DIR/$tag-lowmany.log" 2>&1
          "$bin/bench_search" --shapes gis100k,gis1m,gis10m --k 16 --q 16,64,256,1024 --reps 10 --sets 2 \
            --metric haversine --csv "$DIR/$tag-lowmany-haversine.csv" > "$DIR/$tag-lowmany-haversine.log" 2>&1 ;;
        lowchunk)
          "$bin/bench_search" --shapes gis1m,gis10m --k 16,128 --q 4096,32768 --reps 3 --sets 1 \
            --csv "$DIR/$tag-lowchunk.csv" > "$DIR/$tag-lowchunk.log" 2>&1 ;;
        lowsmall)
          "$bin/bench_search" --shapes gis100k,gis1m,gis10m --k 16,64 --q 1,2,3,4,6,8,12,16 --reps 30 --sets 2 \
            --csv "$DIR/$tag-lowsmall.csv" > "$DIR/$tag-lowsmall.log" 2>&1 ;;
        paper)
          "$bin/bench_search" --shapes mnist,imagenet --k 64 --q 1,4 --reps 20 --sets 2 \
            --csv "$DIR/$tag-paper.csv" > "$DIR/$tag-paper.log" 2>&1 ;;
        small)
          "$bin/bench_search" --shapes mnist --k 64,128 --q 1,2,4 --reps 30 --sets 2 \
            --csv "$DIR/$tag-small.csv" > "$DIR/$tag-small.log" 2>&1 ;;
        pairs)
          "$bin/bench_search" --shapes mnist,small --k 64,128 --q 1,2,3 --reps 30 --sets 2 \
            --csv "$DIR/$tag-pairs.csv" > "$DIR/$tag-pairs.log" 2>&1 ;;
        mnistbatch)
          "$bin/bench_search" --shapes mnist --k 64,128 --q 8,12,16,24,32,64 --reps 20 --sets 2 \
            --csv "$DIR/$tag-mnistbatch.csv" > "$DIR/$tag-mnistbatch.log" 2>&1 ;;
        mid)
          "$bin/bench_search" --shapes mnist,imagenet,googlenews --k 64,128 --q 2,4,8,12 --reps 10 --sets 2 \
            --csv "$DIR/$tag-mid.csv" > "$DIR/$tag-mid.log" 2>&1 ;;
        sampled)
          "$bin/bench_search" --shapes googlenews,imagenet --k 64,128 --q 8,12,16,32,64 --reps 10 --sets 2 \
            --csv "$DIR/$tag-sampled.csv" > "$DIR/$tag-sampled.log" 2>&1 ;;
        densefrom)
          "$bin/bench_search" --shapes mnist,small --k 64,128 --q 6,8,9,10,11,12 --reps 20 --sets 2 \
            --csv "$DIR/$tag-densefrom.csv" > "$DIR/$tag-densefrom.log" 2>&1 ;;
        densefew)
          "$bin/bench_search" --shapes mnist,small --k 64,128 --q 4,5,6,7,8 --reps 20 --sets 2 \
            --csv "$DIR/$tag-densefew.csv" > "$DIR/$tag-densefew.log" 2>&1 ;;
        batch)
          "$bin/bench_search" --shapes mnist,imagenet,googlenews --k 64,128 --q 16,24,32,64 --reps 10 --sets 2 \
            --csv "$DIR/$tag-batch.csv" > "$DIR/$tag-batch.log" 2>&1 ;;
        lowbatch)
          "$bin/bench_search" --shapes gis1m,gis10m --k 16 --q 32,64,256,1024 --reps 10 --sets 2 \
            --csv "$DIR/$tag-lowbatch.csv" > "$DIR/$tag-lowbatch.log" 2>&1 ;;
        spatial)
          "$bin/bench_search" --shapes gis100k,gis1m,gis10m --k 16 --q 1,256,1024 --spatial always --reps 10 --sets 2 \
            --csv "$DIR/$tag-spatial.csv" > "$DIR/$tag-spatial.log" 2>&1
          "$bin/bench_search" --shapes gis1m,gis10m --k 16 --q 1,1024 --spatial always --metric haversine --reps 10 \
            --sets 2 --csv "$DIR/$tag-spatial-haversine.csv" > "$DIR/$tag-spatial-haversine.log" 2>&1 ;;
        moving)
          "$bin/bench_search" --shapes gis1m,gis10m --k 16 --q 64,256,1024 --moves 1000 --reps 10 --sets 2 \
            --csv "$DIR/$tag-moving-jumps.csv" > "$DIR/$tag-moving-jumps.log" 2>&1
          "$bin/bench_search" --shapes gis1m,gis10m --k 16 --q 64,256,1024 --moves 10000 --drift 0.001 --reps 10 \
            --sets 2 --csv "$DIR/$tag-moving-drift.csv" > "$DIR/$tag-moving-drift.log" 2>&1 ;;
        updates)
          "$bin/bench_updates" --metric l2 --batches 1000,10000,100000 --seconds 1 \
            --csv "$DIR/$tag-updates.csv" > "$DIR/$tag-updates.log" 2>&1 ;;
        smallbatch)
          "$bin/bench_search" --shapes small --k 64,128 --q 16,24,32,64 --reps 10 --sets 2 \
            --csv "$DIR/$tag-smallbatch.csv" > "$DIR/$tag-smallbatch.log" 2>&1 ;;
        ipbatch)
          "$bin/bench_search" --shapes mnist,imagenet,googlenews --k 64,128 --q 16,24,32,64 --metric ip \
            --reps 10 --sets 2 --csv "$DIR/$tag-ipbatch.csv" > "$DIR/$tag-ipbatch.log" 2>&1 ;;
        nine12)
          "$bin/bench_search" --shapes mnist,imagenet,googlenews,small --k 64,128 --q 9,10,12 --reps 10 --sets 2 \
            --csv "$DIR/$tag-nine12.csv" > "$DIR/$tag-nine12.log" 2>&1
          "$bin/bench_search" --shapes mnist,imagenet,googlenews,small --k 64,128 --q 9,12 --metric ip --reps 10 \
            --sets 2 --csv "$DIR/$tag-nine12ip.csv" > "$DIR/$tag-nine12ip.log" 2>&1 ;;
        ipsmall)
          "$bin/bench_search" --shapes mnist,small --k 16,32,64 --q 8,9,10,11 --metric ip --reps 20 --sets 2 \
            --csv "$DIR/$tag-ipsmall.csv" > "$DIR/$tag-ipsmall.log" 2>&1 ;;
        q1)
          "$bin/bench_search" --shapes mnist,imagenet,googlenews --k 64,128 --q 1 --reps 20 --sets 2 \
            --csv "$DIR/$tag-q1.csv" > "$DIR/$tag-q1.log" 2>&1 ;;
      esac
    done
    echo "round $r $(name_of "$i") done at ${SECONDS}s"
  done
done
python3 - "$DIR" "${#builds[@]}" > "$DIR/summary.txt" <<'PY'
import csv, glob, os, statistics, sys, collections
d, count = sys.argv[1], int(sys.argv[2])
names = ["base", "new"] + [f"new{i}" for i in range(2, count)]
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for path in sorted(glob.glob(os.path.join(d, "*.csv"))):
    build, _, kind = os.path.basename(path)[:-4].partition("-")
    kind = kind.split("-", 1)[1] if "-" in kind else kind
    for r in csv.DictReader(l for l in open(path) if not l.startswith("#")):
        if "path" in r:  # latency
            rows[(kind, r["path"], "p50_us")][build].append(float(r["p50_us"]))
            rows[(kind, r["path"], "p99_us")][build].append(float(r["p99_us"]))
        elif "query_p99_us" in r:  # bench_updates: the query thread's p99, and moves/s under it
            what = ("no updates" if r["batch"] == "0" else
                    f'P={r["producers"]}' if r["producers"] != "0" else f'batch={r["batch"]}')
            if r["queries"] == "1" and r["query_p99_us"]:
                rows[(kind, what + " +queries", "p99_us")][build].append(float(r["query_p99_us"]))
            if r["moves_per_s"]:
                rows[(kind, what + (" +queries" if r["queries"] == "1" else ""), "Mmove/s")][build].append(
                    float(r["moves_per_s"]) / 1e6)
        else:
            rows[(kind, f'{r["shape"]} K={r["K"]} Q={r["Q"]}', "ms")][build].append(float(r["median_ms"]))
cands = names[1:]
print(f'{"step":20s} {"row":32s} {"unit":7s} {"base":>10s} ' + " ".join(f"{n:>10s} {n + '/base':>9s}" for n in cands))
for (kind, row, unit), by in rows.items():
    b = by.get("base")
    if not b:
        continue
    mb = statistics.median(b)
    cells = []
    for n in cands:
        v = by.get(n)
        cells.append(f"{statistics.median(v):10.4f} {statistics.median(v) / mb:9.3f}" if v else f"{'-':>10s} {'-':>9s}")
    print(f"{kind:20s} {row:32s} {unit:7s} {mb:10.4f} " + " ".join(cells))
PY
cat "$DIR/summary.txt"
