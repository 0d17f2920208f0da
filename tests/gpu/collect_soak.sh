#!/usr/bin/env bash
# Waits for the soak that `tests/gpu/run_gpu_suite.sh BIN OUT --soak-detach` started and prints
# its log (OUT/soak.log). Exit status: the soak's (1 if it did not finish within MAX_WAIT_S).
#   tests/gpu/collect_soak.sh [OUT (default gpu-logs) [MAX_WAIT_S (default 660)]]
set -u
LOGS=${1:-gpu-logs}
max=${2:-660}
for ((t = 0; t < max; t += 5)); do
  [[ -f $LOGS/soak.rc ]] && break
  sleep 5
done
cat "$LOGS/soak.log" 2>/dev/null || echo "no soak log in $LOGS"
rc=$(cat "$LOGS/soak.rc" 2>/dev/null || echo 1)
echo "=== soak exit status $rc"
exit "$rc"
