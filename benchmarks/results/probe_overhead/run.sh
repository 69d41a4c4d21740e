#!/bin/bash
# berrut on a 2M-row dask DataFrame against plain Dask, before (b03aadc) and after (HEAD), runs alternated
cd /work/main
for round in 1 2 3; do
  for rev in before after; do
    if [ $rev = before ]; then PP=/tmp/wt-head; else PP=/tmp/wt-ab; fi
    (cd $PP && PYTHONPATH=$PP /work/main/.venv/bin/python /work/main/benchmarks/dataframe_heavy.py --variants plain berrut --reps 4 --seed $round --json /tmp/ab_${rev}_${round}.json > /tmp/ab_${rev}_${round}.log 2>&1)
  done
done
