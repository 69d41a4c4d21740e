"""Accuracy benchmark: error of every code and calibration of the error estimate.

Pure NumPy (no cluster). The default grid (K in 4, 8, 16, 32; N/K in 1.25, 1.5, 2, 4;
S = 0, 1 and the quarters of N-K; random and adjacent stragglers; six workloads; 6 trials
per cell) takes a few minutes on 2 cores; ``--full`` runs every S from 0 to N-K with 10
trials. Writes accuracy.json, accuracy.md and PNG figures into ``--out``
(default docs/accuracy). See docs/accuracy.md, and :mod:`dask_bacc.bench.accuracy`.

    python benchmarks/accuracy.py [--full] [--trials 6] [--out docs/accuracy]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dask_bacc.bench.accuracy import (
    DEFAULT_K,
    DEFAULT_RATIOS,
    WORKLOADS,
    AccuracyConfig,
    accuracy_markdown,
    run_accuracy,
    write_accuracy,
)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--K", type=int, nargs="+", default=list(DEFAULT_K))
    p.add_argument("--ratios", type=float, nargs="+", default=list(DEFAULT_RATIOS))
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    p.add_argument("--trials", type=int, default=None, help="per cell (default 6; 10 with --full)")
    p.add_argument("--full", action="store_true", help="every S in 0..N-K")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("docs/accuracy"))
    args = p.parse_args()
    config = AccuracyConfig(
        K=tuple(args.K),
        ratios=tuple(args.ratios),
        workloads=tuple(args.workloads),
        trials=args.trials or (10 if args.full else 6),
        full=args.full,
        seed=args.seed,
    )
    result = run_accuracy(config, progress=True)
    print(accuracy_markdown(result, cells_table=False))
    paths = write_accuracy(result, args.out)
    print("wrote", paths["json"], paths["markdown"], *paths["plots"])
    for name, why in config.skipped.items():
        print(f"note: {name} skipped: {why}")


if __name__ == "__main__":
    main()
