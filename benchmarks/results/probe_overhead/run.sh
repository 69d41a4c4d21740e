#!/bin/bash
# berrut on a 2M-row dask DataFrame against plain Dask, before (b03aadc) and after (d6bcc22),
# runs alternated; run from the checkout's root with its .venv
set -euo pipefail
ROOT=$(pwd)
git worktree add --detach /tmp/wt-before b03aadc
git worktree add --detach /tmp/wt-after d6bcc22
for round in 1 2 3; do
  for rev in before after; do
    (cd /tmp/wt-$rev && PYTHONPATH=/tmp/wt-$rev "$ROOT/.venv/bin/python" "$ROOT/benchmarks/dataframe_heavy.py" \
      --variants plain berrut --reps 4 --seed $round --json "/tmp/ab_${rev}_${round}.json")
  done
done
