#!/usr/bin/env bash
# Does a search's time depend on the batches the same process ran before it? Times the
# MNIST-like K = 128 Q = 1 row (the one-query target's closest row) in fresh processes, each
# running one kind of batch before it on the same store:
#
#   bench/tools/order_effect.sh [BIN ...] [ROUNDS]   (folders holding bench_search; default build/bench;
#                                                a last argument that is a number: rounds, default 3)
#
#   first      the row alone (the first searches of the process)
#   k64        after K = 64 Q = 1 (the complete run's order up to K = 64's first row)
#   q2, q8     after a batch of 2 or 8 queries (the scan, with more lists)
#   q16, q64   after a batch of 16 or 64 queries (the dense screen: its workspace grows)
#   k64q64     after K = 64 Q = 64 (the row before it in the complete run)
#   paper      the complete run's MNIST-like order (K 64, 128 x Q 1..64): K = 128's Q = 1 row
#   q121       Q = 1, a batch of 2, Q = 1 again (the last row is timed)
#   q111       three rows of Q = 1 (the last is timed): the control for q121
#
# VARIANTS="first q2 ..." picks some; REPS sets the searches per row (default 60); ORDER_ARGS adds
# flags to every bench_search command ("--metric ip": the inner-product ranks, which no dense screen
# runs). The variants rotate between rounds, and every round runs
# each build in turn. Every row runs REPS searches over 3 query sets after 3
# warm-ups; --split 1 prints the host's part (submit) and its wait (get) under each row. Prints
# each variant's rows and the median of its rounds; writes order-effect.csv and the logs to
# $OUTDIR (default ./order-out).
set -uo pipefail
ROUNDS=3
builds=("$@")
if ((${#builds[@]})) && [[ ${builds[-1]} =~ ^[0-9]+$ ]]; then
  ROUNDS=${builds[-1]}
  unset 'builds[-1]'
fi
((${#builds[@]})) || builds=(build/bench)
DIR=${OUTDIR:-order-out}
mkdir -p "$DIR"
CSV=$DIR/order-effect.csv
echo "build,round,variant,median_ms,submit_ms,get_ms" > "$CSV"
: > "$DIR/timeline.txt"  # this invocation's only (the folder outlives it on a warm machine)
declare -A before=(
  [first]="--k 128 --q 1"
  [k64]="--k 64,128 --q 1"
  [q2]="--k 128 --q 2,1"
  [q8]="--k 128 --q 8,1"
  [q16]="--k 128 --q 16,1"
  [q64]="--k 128 --q 64,1"
  [k64q64]="--k 64,128 --q 64,1"
  [paper]="--k 64,128 --q 1,2,4,8,12,16,32,64"
  [q121]="--k 128 --q 1,2,1"
  [q111]="--k 128 --q 1,1,1"
)
read -r -a variants <<< "${VARIANTS:-first k64 q2 q8 q16 q64 k64q64 paper}"
for b in "${builds[@]}"; do echo "build $(basename "$b"): $b ($(cat "$b/COMMIT" 2>/dev/null || echo unknown commit))"; done
for ((r = 1; r <= ROUNDS; ++r)); do
  n=${#variants[@]}
  for ((i = 0; i < n; ++i)); do
    v=${variants[$(((i + r - 1) % n))]}
    [[ -n ${before[$v]:-} ]] || { echo "unknown variant $v" >&2; exit 2; }
    for b in "${builds[@]}"; do
      name=$(basename "$b")
      log=$DIR/$name-r$r-$v.log
      echo "$(date -u +%H:%M:%S.%N) $name round $r $v" >> "$DIR/timeline.txt"
      # shellcheck disable=SC2086  # the variant's flags are words
      "$b/bench_search" --shapes mnist ${before[$v]} --reps "${REPS:-60}" --sets 3 --split 1 ${ORDER_ARGS:-} --csv /dev/null > "$log" 2>&1 ||
        { echo "$name round $r $v: bench_search failed (tail of $log):"; tail -n 3 "$log"; continue; }
      # The K = 128 Q = 1 row and the split line under it.
      awk -v b="$name" -v r="$r" -v v="$v" '
        $1 == "MNIST-like" && $4 == 128 && $5 == 1 { ms = $6; want = 1; next }
        want && /submit/ { gsub(/,/, ""); sub_ms = $3; get_ms = $6; want = 0 }
        END { if (ms != "") printf "%s,%s,%s,%s,%s,%s\n", b, r, v, ms, sub_ms, get_ms }' "$log" >> "$CSV"
    done
  done
done
echo "build      variant    rounds (ms, K = 128 Q = 1)            median   submit   get"
for b in "${builds[@]}"; do for v in "${variants[@]}"; do
  awk -F, -v b="$(basename "$b")" -v v="$v" '
    $1 == b && $3 == v { ms[++n] = $4; s[n] = $5; g[n] = $6; row = row sprintf(" %.4f", $4) }
    function med(a, n,   i, j, t, b) {
      for (i = 1; i <= n; ++i) b[i] = a[i]
      for (i = 1; i <= n; ++i) for (j = i + 1; j <= n; ++j) if (b[j] < b[i]) { t = b[i]; b[i] = b[j]; b[j] = t }
      return n % 2 ? b[(n + 1) / 2] : (b[n / 2] + b[n / 2 + 1]) / 2
    }
    END { if (n) printf "%-10s %-10s %-34s %.4f   %.4f   %.4f\n", b, v, row, med(ms, n), med(s, n), med(g, n) }' "$CSV"
done; done
