#!/usr/bin/env bash
# Runs bench_search invocations while nvidia-smi samples the GPU every 100 ms, so a row's time
# can be read beside the clocks, power, temperature and throttle reasons it ran under, and any
# other process on the GPU shows:
#   bench/tools/clock_trace.sh BIN "ARGS1" ["ARGS2" ...]     (each ARGS one bench_search process)
# Writes $OUTDIR (default ./clock-trace)/smi.csv, one run-N.log per process (every line stamped with the
# epoch seconds it was printed at) and apps.txt (compute processes before and after).
set -u
BIN=$1; shift
DIR=${OUTDIR:-clock-trace}
mkdir -p "$DIR"
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv > "$DIR/apps.txt" 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 100 > "$DIR/smi.csv" 2>&1 &
smi=$!
sleep 1
i=0
for args in "$@"; do
  i=$((i + 1))
  {
    echo "# start $(date +%s.%N) bench_search $args"
    # shellcheck disable=SC2086
    stdbuf -oL "$BIN/bench_search" $args 2>&1 | while IFS= read -r line; do echo "$(date +%s.%N) $line"; done
    echo "# end $(date +%s.%N)"
  } > "$DIR/run-$i.log" 2>&1
  sleep 2
done
kill "$smi"
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv >> "$DIR/apps.txt" 2>&1
tail -n 3 "$DIR"/run-*.log
