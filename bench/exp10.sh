B=.device-bin
timeout 200 $B/test_gpu_vs_cpu 2>&1 | tail -3
for r in 1 2; do for v in head E D; do
  timeout 100 $B/bench_search_$v --shapes mnist,imagenet,googlenews --k 64,128 --q 1,4,8,12,16,64 --reps 15 --sets 2 --csv $OUT/s-$v-$r.csv > /dev/null 2>&1
  timeout 60 $B/bench_search_$v --shapes gis100k,gis1m --k 16 --q 1,16,256 --reps 15 --sets 2 --csv $OUT/l-$v-$r.csv > /dev/null 2>&1
  timeout 60 $B/bench_latency_$v --queries 20000 --csv /tmp/lat.csv | tail -1 | sed "s/^/$v /"
done; done
python3 - <<'PY'
import csv, os, collections
out = os.environ["OUT"]
t = collections.defaultdict(list)
for pre in ("s", "l"):
  for v in ("head", "E", "D"):
    for r in (1, 2):
        for row in csv.DictReader(l for l in open(f"{out}/{pre}-{v}-{r}.csv") if not l.startswith("#")):
            t[(row["shape"], row["K"], row["Q"], v)].append(float(row["median_ms"]))
keys = sorted({k[:3] for k in t}, key=lambda k: (k[0], int(k[1]), int(k[2])))
print("shape K Q head_ms | E (pipelined 4,8) | D (E + minBlocks 1 for 4+)")
for k in keys:
    a, b, c = t[k + ("head",)], t[k + ("E",)], t[k + ("D",)]
    print(k[0], k[1], k[2], " ".join(f"{x:.4f}" for x in a), "|", " ".join(f"{x:.4f}" for x in b), f"{min(a)/min(b):.2f}x", "|", " ".join(f"{x:.4f}" for x in c), f"{min(a)/min(c):.2f}x")
PY
cd $OUT && tar czf ab.tgz *.csv && rm -f *.csv
