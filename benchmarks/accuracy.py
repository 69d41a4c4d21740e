"""Accuracy benchmark: error of every code and calibration of the error estimate.

Pure NumPy (no cluster). The default grid (K in 4, 8, 16, 32; N/K in 1.25, 1.5, 2, 4;
S = 0, 1 and the quarters of N-K; random and adjacent stragglers; six workloads; 6 trials
per cell) takes a few minutes on 2 cores; ``--full`` runs every S from 0 to N-K with 10
trials. Writes accuracy.json, accuracy.md and PNG figures into ``--out``
(default docs/accuracy). See docs/accuracy.md, and :mod:`dask_bacc.bench.accuracy`.

``--compare`` runs the code comparison instead (issue 12): Berrut, systematic Berrut,
spline, systematic spline and repetition, each without and with the log transforms, at
K = 8, N = 16 and 32, s = 1, 2, 4, 7 random stragglers, 50 straggler sets a cell, on
digits (logistic regression and an MLP, predict_proba) and tanh(X W) of random and smooth
rows, plus the convergence of spline and Berrut in N (16, 32, 64); about two minutes on 2
cores. Writes compare.json, compare.md and compare_*.png into ``--out``.

    python benchmarks/accuracy.py [--full] [--trials 6] [--out docs/accuracy]
    python benchmarks/accuracy.py --compare [--trials 50] [--out docs/accuracy]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dask_bacc.bench.accuracy import (
    COMPARE_TASKS,
    DEFAULT_K,
    DEFAULT_RATIOS,
    WORKLOADS,
    AccuracyConfig,
    CompareConfig,
    accuracy_markdown,
    compare_markdown,
    run_accuracy,
    run_compare,
    write_accuracy,
    write_compare,
)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--K", type=int, nargs="+", default=None, help="(--compare: one K, 8)")
    p.add_argument("--ratios", type=float, nargs="+", default=None)
    p.add_argument("--workloads", nargs="+", default=None, help=f"{list(WORKLOADS)}")
    p.add_argument(
        "--trials",
        type=int,
        default=None,
        help="per cell (default 6; 10 with --full; 50 with --compare)",
    )
    p.add_argument("--full", action="store_true", help="every S in 0..N-K")
    p.add_argument("--compare", action="store_true", help="the code comparison (see above)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("docs/accuracy"))
    args = p.parse_args()
    if args.compare:
        return compare(args, p)
    if args.workloads and (bad := [w for w in args.workloads if w not in WORKLOADS]):
        p.error(f"unknown workloads {bad}; choose from {list(WORKLOADS)}")
    config = AccuracyConfig(
        K=tuple(args.K or DEFAULT_K),
        ratios=tuple(args.ratios or DEFAULT_RATIOS),
        workloads=tuple(args.workloads or WORKLOADS),
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


def compare(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    config = CompareConfig(trials=args.trials or 50, seed=args.seed)
    if args.K:
        if len(args.K) != 1:
            p.error("--compare takes one K")
        config.K = args.K[0]
    if args.ratios:
        config.ratios = tuple(int(r) for r in args.ratios)
    if args.workloads:
        if bad := [w for w in args.workloads if w not in COMPARE_TASKS]:
            p.error(f"unknown tasks {bad}; choose from {list(COMPARE_TASKS)}")
        config.tasks = tuple(args.workloads)
    result = run_compare(config, progress=True)
    print(compare_markdown(result))
    paths = write_compare(result, args.out)
    print("wrote", paths["json"], paths["markdown"], *paths["plots"])
    for name, why in config.skipped.items():
        print(f"note: {name} skipped: {why}")


if __name__ == "__main__":
    main()
