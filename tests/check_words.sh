#!/usr/bin/env bash
# The project speaks of the project: no tracked text file (CSV aside) speaks of development
# sessions, numbered calls, borrowed machines or the tooling used to reach a GPU. Code comments
# give the rule and its reason, not the run it came from. Skips (77) outside a git checkout.
#   tests/check_words.sh [SOURCE_DIR]
set -u
cd "${1:-$(dirname "$0")/..}" || exit 2
git rev-parse --is-inside-work-tree > /dev/null 2>&1 || { echo "not a git checkout: skipped"; exit 77; }
# The pattern is written in pieces so that this file does not match it.
pattern='sess''ion [0-9]|\bl''ent\b|dev''ice tool|\$O''UT\b|\bca''ll[0-9]'
hits=$(git grep -n -I -E "$pattern" -- . ':!*.csv')
if [[ -n $hits ]]; then
  echo "tracked files speak of sessions, calls, borrowed machines or GPU-access tooling:"
  echo "$hits" | head -n 40
  echo "($(echo "$hits" | wc -l) lines)"
  exit 1
fi
echo "words check: clean"
