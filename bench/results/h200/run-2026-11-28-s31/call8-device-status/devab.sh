#!/usr/bin/env bash
# search_device timings, base against new, alternated over 2 rounds.
for r in 1 2; do for b in base31 devstatus; do
  echo "=== round $r $b"
  timeout 60 .device-bin/$b/bench_search --shapes mnist,gis1m --k 64 --q 1,16 --reps 100 --sets 2 --device 1 --split 1 2>&1 |
    grep -E "^MNIST|^low|device-resident|submit"
done; done
