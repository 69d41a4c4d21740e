"""Which companion interpolant should the spline code's error estimate use?

:func:`dask_bacc.codes.estimate_error` estimates the error of an interpolating decode from
the difference between the decoder and a second interpolant through the same returned
points (the embedded pair), scaled by a leave-one-out calibration factor clipped to the
code's ``calibration_range`` (docs/accuracy.md). For :class:`~dask_bacc.codes.SplineCode`
this script measures candidate companions:

- ``linear``: the piecewise-linear interpolant (extended linearly beyond the end points);
- ``fh2``, ``fh3``, ``fh4``: Floater-Hormann rational interpolants of degree 2, 3, 4;

each with the spline's calibration range (0.25, 4), and ``fh3`` also with Berrut's
(1, 4) (the pair never scaled down). ``fh3 [0.25, 4]`` is what SplineCode implements.

Grid: K = 8, N in 16, 32, 64, s in 1, 2, 4, 7 random stragglers, on tanh(X W) of i.i.d.
normal rows (``random``) and of smooth rows (``smooth``), and on the digits
logistic-regression probabilities (``digits``) without a transform and decoded with
``transform="log"`` and ``"log-probabilities"``; ``--trials`` draws a cell (default 12).
Every candidate sees the same data, straggler sets and decodes; only the estimate differs.
A cell is within 2x when the median over its trials of estimate / true error is in
[0.5, 2]. Takes about a minute on 2 cores. The candidates are subclasses of SplineCode
that override ``companion``: nothing in the library is patched.

    python benchmarks/spline_estimate.py [--trials 12] [--seed 1] \\
        [--out benchmarks/results/spline_estimate.md]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from dask_bacc.bench.accuracy import _draw_digits
from dask_bacc.codes import SplineCode, estimate_error
from dask_bacc.codes.berrut import barycentric_matrix, floater_hormann_weights
from dask_bacc.codes.transform import get_transform
from dask_bacc.testing import smooth_blocks

K = 8
ROWS, FEATURES = 16, 8
N_VALUES = (16, 32, 64)
STRAGGLERS = (1, 2, 4, 7)

Companion = Callable[[np.ndarray, np.ndarray], np.ndarray]


def linear_matrix(targets: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """Piecewise-linear interpolation through increasing ``nodes``, as a matrix; beyond the
    end points the end segments are extended (as the spline decoder extends linearly)."""
    t = np.atleast_1d(np.asarray(targets, dtype=float))
    m = nodes.size
    out = np.zeros((t.size, m))
    if m == 1:
        out[:, 0] = 1.0
        return out
    i = np.clip(np.searchsorted(nodes, t, side="right") - 1, 0, m - 2)
    w = (t - nodes[i]) / (nodes[i + 1] - nodes[i])
    rows = np.arange(t.size)
    out[rows, i] = 1.0 - w
    out[rows, i + 1] += w
    return out


def fh_matrix(d: int) -> Companion:
    def companion(targets: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        return barycentric_matrix(targets, nodes, floater_hormann_weights(nodes, d))

    return companion


class CandidateSpline(SplineCode):
    """A SplineCode whose error estimate uses another companion and calibration range."""

    def __init__(self, K: int, N: int, companion: Companion, calibration_range: tuple):
        super().__init__(K, N)
        self._companion = companion
        self.calibration_range = calibration_range  # instance attribute: this object only

    def companion(self, targets: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        order = np.argsort(nodes, kind="stable")
        out = np.empty((np.atleast_1d(targets).size, nodes.size))
        out[:, order] = self._companion(targets, nodes[order])
        return out


CANDIDATES: dict[str, tuple[Companion, tuple[float, float]]] = {
    "linear [0.25, 4]": (linear_matrix, (0.25, 4.0)),
    "fh2 [0.25, 4]": (fh_matrix(2), (0.25, 4.0)),
    "fh3 [0.25, 4] (implemented)": (fh_matrix(3), (0.25, 4.0)),
    "fh3 [1, 4]": (fh_matrix(3), (1.0, 4.0)),
    "fh4 [0.25, 4]": (fh_matrix(4), (0.25, 4.0)),
}


def draw(data: str, rng: np.random.Generator):
    if data == "digits":
        X, f, _ = _draw_digits(K, rng)
        return X, f
    if data == "random":
        X = rng.standard_normal((K, ROWS, FEATURES))
    else:
        X = smooth_blocks(K, ROWS, FEATURES, rng)
    W = 1.5 * rng.standard_normal((FEATURES, FEATURES)) / np.sqrt(FEATURES)
    return X, lambda block: np.tanh(block @ W)


def run(trials: int, seed: int) -> list[dict]:
    cells = []
    datasets = [("random", None), ("smooth", None)]
    datasets += [("digits", None), ("digits", "log"), ("digits", "log-probabilities")]
    for n, (data, tname) in enumerate(datasets):
        T = get_transform(tname)
        for N in N_VALUES:
            codes = {name: CandidateSpline(K, N, *spec) for name, spec in CANDIDATES.items()}
            plain = SplineCode(K, N)
            for s in STRAGGLERS:
                rng = np.random.default_rng([seed, n, N, s])
                ratios: dict[str, list[float]] = {name: [] for name in codes}
                for _ in range(trials):
                    X, f = draw(data, rng)
                    truth = np.stack([f(x) for x in X])
                    returned = np.sort(rng.permutation(N)[: N - s])
                    Y = np.stack([f(x) for x in plain.encode(X)])
                    R = (Y if T is None else T.forward(Y))[returned]
                    decoded = plain.decode(R, returned)
                    if T is not None:
                        decoded = T.inverse(decoded)
                    true = np.linalg.norm(decoded - truth) / np.linalg.norm(truth)
                    for name, code in codes.items():
                        est = estimate_error(code, R, returned, transform=T).overall
                        ratios[name].append(est / true)
                label = data if tname is None else f"{data}+{tname}"
                cell = {"data": label, "N": N, "s": s}
                cell["median_ratio"] = {k: float(np.median(v)) for k, v in ratios.items()}
                cell["trials_within_2x"] = {
                    k: float(np.mean([(0.5 <= x <= 2.0) for x in v])) for k, v in ratios.items()
                }
                cells.append(cell)
    return cells


def within(x: float) -> bool:
    return 0.5 <= x <= 2.0


def markdown(cells: list[dict], trials: int, seed: int, seconds: float) -> str:
    names = list(CANDIDATES)
    datas = list(dict.fromkeys(c["data"] for c in cells))
    lines = [
        "# Spline error estimate: which companion interpolant",
        "",
        "Generated by `python benchmarks/spline_estimate.py"
        f" --trials {trials} --seed {seed}` ({seconds:.0f} s). K = 8, N in "
        f"{', '.join(map(str, N_VALUES))}, s in {', '.join(map(str, STRAGGLERS))} random "
        f"stragglers, {trials} trials a cell. Share of cells whose median estimate / true "
        "error is in [0.5, 2] (in parentheses: the geometric mean of the cells' median "
        "ratios):",
        "",
        "| companion [calibration range] | all cells | " + " | ".join(datas) + " |",
        "|---|---|" + "---|" * len(datas),
    ]
    for name in names:
        row = []
        for sel in [cells] + [[c for c in cells if c["data"] == d] for d in datas]:
            r = np.array([c["median_ratio"][name] for c in sel])
            row.append(f"{np.mean([within(x) for x in r]):.2f} ({np.exp(np.mean(np.log(r))):.2f})")
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    lines += [
        "",
        "Single decodes (trials) within 2x:",
        "",
        "| companion | all | " + " | ".join(datas) + " |",
        "|---|---|" + "---|" * len(datas),
    ]
    for name in names:
        row = []
        for sel in [cells] + [[c for c in cells if c["data"] == d] for d in datas]:
            row.append(f"{np.mean([c['trials_within_2x'][name] for c in sel]):.2f}")
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    lines += [
        "",
        "Median ratio per cell (data, N, s):",
        "",
        "| data | N | s | " + " | ".join(names) + " |",
        "|---|---|---|" + "---|" * len(names),
    ]
    for c in cells:
        lines.append(
            f"| {c['data']} | {c['N']} | {c['s']} | "
            + " | ".join(f"{c['median_ratio'][n]:.2f}" for n in names)
            + " |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=12)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/spline_estimate.md"))
    args = p.parse_args()
    start = time.perf_counter()
    cells = run(args.trials, args.seed)
    text = markdown(cells, args.trials, args.seed, time.perf_counter() - start)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
