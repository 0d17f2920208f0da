#!/usr/bin/env bash
# The project speaks of the project: no tracked text file (CSV aside) speaks of development
# sessions, numbered calls, lent machines or the tooling used to reach a GPU. Code comments
# give the rule and its reason, not the run it came from. Skips (77) outside a git checkout.
#   tests/check_words.sh [SOURCE_DIR]
set -u
cd "${1:-$(dirname "$0")/..}" || exit 2
git rev-parse --is-inside-work-tree > /dev/null 2>&1 || { echo "not a git checkout: skipped"; exit 77; }
pattern='session [0-9]|\blent\b|device tool|\$OUT\b|\bcall[0-9]'
hits=$(git grep -n -I -E "$pattern" -- . ':!*.csv' ':!tests/check_words.sh')
if [[ -n $hits ]]; then
  echo "tracked files speak of sessions, calls, lent machines or GPU-access tooling:"
  echo "$hits" | head -n 40
  echo "($(echo "$hits" | wc -l) lines)"
  exit 1
fi
echo "words check: clean"
