#!/usr/bin/env bash
# Waits for the soak that `tests/gpu/run_gpu_suite.sh --soak-detach` started on this machine and
# copies its log to $OUT (or ./gpu-logs). Exit status: the soak's (1 if it never finished).
#   tests/gpu/collect_soak.sh [MAX_WAIT_S (default 580)]
set -u
LOGS=${OUT:-gpu-logs}
mkdir -p "$LOGS"
max=${1:-580}
for ((t = 0; t < max; t += 5)); do
  [[ -f /tmp/streamknn-soak/rc ]] && break
  sleep 5
done
cp /tmp/streamknn-soak/soak.log "$LOGS/soak.log" 2>/dev/null || echo "no soak log on this machine"
cat "$LOGS/soak.log" 2>/dev/null
rc=$(cat /tmp/streamknn-soak/rc 2>/dev/null || echo 1)
echo "=== soak exit status $rc"
exit "$rc"
