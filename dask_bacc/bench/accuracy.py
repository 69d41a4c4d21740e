"""The accuracy benchmark: decoded error of every code and calibration of the error estimate.

Pure NumPy (no cluster): for each workload, K, N/K, number of stragglers S and straggler
pattern, ``trials`` times, it draws data and a straggler set, runs f on the coded shares of
every code at the same N, decodes from the results that are not straggling and compares
with f on the uncoded blocks. Run it with ``python benchmarks/accuracy.py`` or
``dask bacc bench --accuracy``; docs/accuracy.md explains the output.

Workloads (``WORKLOADS``): ``exp``/``tanh``/``sigmoid`` of a linear map of a slowly varying
multichannel signal (smooth data), ``tanh`` of a linear map of i.i.d. normal rows (random
data), the class probabilities of a logistic-regression classifier trained on scikit-learn's
digits (the held-out images are the data; classification accuracy is reported too), and a
degree-2 polynomial ``(X W)**2`` of random data, the one workload Lagrange coded computing
applies to.

Per cell it reports the median relative error ``||decoded - f(X)|| / ||f(X)||`` of Berrut,
systematic Berrut, repetition and (polynomial f) Lagrange; repetition blocks with no copy
back, and Lagrange below its recovery threshold, decode to zeros (relative error 1 for
those blocks): that is what they give from the same results, where the runtime would wait
for more. For the Berrut codes it reports the ratio estimate / true error of
:func:`dask_bacc.codes.estimate.estimate_error` (median over trials; a cell is within 2x
when that median is in [0.5, 2]).
"""

from __future__ import annotations

import json
import math
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..codes import BerrutCode, LagrangeCode, RepetitionCode, estimate_error

__all__ = [
    "DEFAULT_K",
    "DEFAULT_RATIOS",
    "WORKLOADS",
    "AccuracyConfig",
    "Workload",
    "accuracy_markdown",
    "run_accuracy",
    "straggler_levels",
    "write_accuracy",
]

DEFAULT_K = (4, 8, 16, 32)
DEFAULT_RATIOS = (1.25, 1.5, 2.0, 4.0)
ROWS = 16  # rows per block
FEATURES = 8
OUTPUTS = 8


@dataclass(frozen=True)
class Workload:
    """A function and how to draw its K input blocks.

    ``draw(K, rng)`` returns ``(blocks, f, labels)``: blocks of shape (K, ROWS, features),
    the function (block -> array) and, for the classifier, the true labels (K, ROWS).
    """

    name: str
    description: str
    draw: Callable[[int, np.random.Generator], tuple[np.ndarray, Callable, np.ndarray | None]]
    degree: int | None = None  # polynomial degree (Lagrange applies), else None


def smooth_blocks(K: int, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """K contiguous blocks of a slowly varying signal (a few low frequencies over all rows,
    plus a little noise): the smooth data of the accuracy benchmark, the estimator and
    robustness benchmarks and their tests."""
    t = np.linspace(0.0, 1.0, K * rows)
    freq = rng.uniform(0.5, 2.0, cols)
    phase = rng.uniform(0.0, 2 * np.pi, cols)
    X = np.sin(2 * np.pi * freq * t[:, None] + phase)
    X += 0.02 * rng.standard_normal(X.shape)
    return X.reshape(K, rows, cols)


def _linear(rng: np.random.Generator) -> np.ndarray:
    return rng.standard_normal((FEATURES, OUTPUTS)) / math.sqrt(FEATURES)


class _Phi:
    """``phi(block @ W)`` as a picklable callable."""

    def __init__(self, phi: Callable[[np.ndarray], np.ndarray], W: np.ndarray):
        self.phi, self.W = phi, W

    def __call__(self, block: np.ndarray) -> np.ndarray:
        return self.phi(block @ self.W)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _square(x: np.ndarray) -> np.ndarray:
    return x * x


def _scaled_exp(x: np.ndarray) -> np.ndarray:
    return np.exp(0.5 * x)


def _phi_workload(phi: Callable, data: str) -> Callable:
    def draw(K: int, rng: np.random.Generator):
        if data == "smooth":
            X = smooth_blocks(K, ROWS, FEATURES, rng)
        else:
            X = rng.standard_normal((K, ROWS, FEATURES))
        return X, _Phi(phi, 1.5 * _linear(rng)), None

    return draw


_DIGITS: dict[str, Any] = {}


def _digits_model() -> dict[str, Any]:
    """Logistic regression on scikit-learn's digits: trained on images 512..1796; the first
    512 images are the data (so K * ROWS <= 512)."""
    if not _DIGITS:
        from sklearn.datasets import load_digits
        from sklearn.linear_model import LogisticRegression

        digits = load_digits()
        X = digits.data / 16.0
        y = digits.target
        model = LogisticRegression(max_iter=2000).fit(X[512:], y[512:])
        _DIGITS.update(
            X=X[:512], y=y[:512], coef=model.coef_.T.copy(), intercept=model.intercept_.copy()
        )
        _DIGITS["test_accuracy"] = float(model.score(X[:512], y[:512]))
    return _DIGITS


class _Classifier:
    """Class probabilities ``softmax(block @ coef + intercept)`` (NumPy only)."""

    def __init__(self, coef: np.ndarray, intercept: np.ndarray):
        self.coef, self.intercept = coef, intercept

    def __call__(self, block: np.ndarray) -> np.ndarray:
        z = block @ self.coef + self.intercept
        z = z - z.max(axis=-1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=-1, keepdims=True)


def _draw_digits(K: int, rng: np.random.Generator):
    m = _digits_model()
    start = int(rng.integers(0, 512 - K * ROWS + 1))  # a random window of held-out images
    sel = slice(start, start + K * ROWS)
    X = m["X"][sel].reshape(K, ROWS, -1)
    return X, _Classifier(m["coef"], m["intercept"]), m["y"][sel].reshape(K, ROWS)


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload("exp-smooth", "exp(X W / 2), smooth data", _phi_workload(_scaled_exp, "smooth")),
        Workload("tanh-smooth", "tanh(X W), smooth data", _phi_workload(np.tanh, "smooth")),
        Workload("sigmoid-smooth", "sigmoid(X W), smooth data", _phi_workload(_sigmoid, "smooth")),
        Workload("tanh-random", "tanh(X W), i.i.d. normal data", _phi_workload(np.tanh, "random")),
        Workload("digits", "logistic regression probabilities, digits images", _draw_digits),
        Workload(
            "square-random", "(X W)**2, i.i.d. normal data", _phi_workload(_square, "random"), 2
        ),
    )
}


def straggler_levels(K: int, N: int, full: bool) -> list[int]:
    """S from 0 to N-K: every value with ``full``, else 0, 1 and the quarters of N-K."""
    if full:
        return list(range(N - K + 1))
    levels = {0, 1, N - K} | {round(q * (N - K)) for q in (0.25, 0.5, 0.75)}
    return sorted(s for s in levels if 0 <= s <= N - K)


@dataclass
class AccuracyConfig:
    """What the accuracy benchmark runs (see :func:`run_accuracy`)."""

    K: Sequence[int] = DEFAULT_K
    ratios: Sequence[float] = DEFAULT_RATIOS
    workloads: Sequence[str] = tuple(WORKLOADS)
    patterns: Sequence[str] = ("random", "adjacent")
    trials: int = 6
    full: bool = False  # every S in 0..N-K (default: 0, 1 and quarters)
    seed: int = 0
    skipped: dict[str, str] = field(default_factory=dict)

    def validate(self) -> None:
        unknown = [w for w in self.workloads if w not in WORKLOADS]
        if unknown:
            raise ValueError(f"unknown workloads {unknown}; choose from {list(WORKLOADS)}")
        bad = [p for p in self.patterns if p not in ("random", "adjacent")]
        if bad:
            raise ValueError(f"unknown straggler patterns {bad}; use random and/or adjacent")
        if any(r <= 1 for r in self.ratios):
            raise ValueError("N/K ratios must exceed 1")
        if self.trials < 1:
            raise ValueError("trials must be >= 1")


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _decode_or_zeros(code: Any, results: np.ndarray, returned: np.ndarray, shape) -> np.ndarray:
    """Decoded blocks; blocks the code cannot decode from ``returned`` are zeros."""
    if isinstance(code, RepetitionCode):
        out = np.zeros(shape)
        have = {}
        for col in np.argsort(returned):
            have.setdefault(int(returned[col]) % code.K, col)
        for j, col in have.items():
            out[j] = results[col]
        return out
    if not code.can_decode(returned):
        return np.zeros(shape)
    return code.decode(results, returned)


def _trial(
    workload: Workload, K: int, N: int, S: int, pattern: str, rng: np.random.Generator
) -> dict[str, Any]:
    X, f, labels = workload.draw(K, rng)
    exact = np.stack([f(x) for x in X])
    if pattern == "adjacent":
        start = int(rng.integers(0, N - S + 1))
        lost = np.arange(start, start + S)
    else:
        lost = rng.choice(N, S, replace=False)
    returned = rng.permutation(np.setdiff1d(np.arange(N), lost))
    codes: dict[str, Any] = {
        "berrut": BerrutCode(K, N),
        "systematic-berrut": BerrutCode(K, N, systematic=True),
        "repetition": RepetitionCode(K, N),
    }
    if workload.degree is not None and N >= workload.degree * (K - 1) + 1:
        codes["lagrange"] = LagrangeCode(K, N, degree=workload.degree)
    out: dict[str, Any] = {"error": {}, "estimate": {}, "accuracy": {}}
    for name, code in codes.items():
        results = np.stack([f(share) for share in code.encode(X)])[returned]
        decoded = _decode_or_zeros(code, results, returned, exact.shape)
        out["error"][name] = _rel(decoded, exact)
        if name in ("berrut", "systematic-berrut"):
            out["estimate"][name] = estimate_error(code, results, returned).overall
        if labels is not None:
            out["accuracy"][name] = float(np.mean(decoded.argmax(axis=-1) == labels))
    if labels is not None:
        out["accuracy"]["uncoded"] = float(np.mean(exact.argmax(axis=-1) == labels))
    return out


def _median(values: list[float]) -> float | None:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    return float(np.median(vals)) if vals else None


def _ratio(estimate: float, true: float) -> float | None:
    if true == 0.0:
        return 1.0 if estimate == 0.0 else math.inf  # exact: the estimate must say 0
    if math.isnan(estimate):
        return None
    return estimate / true


def run_accuracy(config: AccuracyConfig, progress: bool = False) -> dict[str, Any]:
    """Run the grid; return a JSON-serialisable result (config, cells, summary)."""
    config.validate()
    workloads = list(config.workloads)
    if "digits" in workloads:
        try:
            _digits_model()
        except ImportError as exc:  # scikit-learn missing
            workloads.remove("digits")
            config.skipped["digits"] = f"scikit-learn is not installed ({exc})"
    plan = []
    for w in workloads:
        for K in config.K:
            for r in config.ratios:
                N = max(K + 1, round(r * K))
                for S in straggler_levels(K, N, config.full):
                    for pattern in config.patterns if S else ("none",):
                        plan.append((w, K, r, N, S, pattern))
    start = time.perf_counter()
    cells = []
    for n, (w, K, r, N, S, pattern) in enumerate(plan):
        seed = [config.seed, n]
        rng = np.random.default_rng(seed)
        trials = [_trial(WORKLOADS[w], K, N, S, pattern, rng) for _ in range(config.trials)]
        cell: dict[str, Any] = {"workload": w, "K": K, "ratio": r, "N": N, "S": S}
        cell["pattern"] = pattern
        cell["error"] = {c: _median([t["error"][c] for t in trials]) for c in trials[0]["error"]}
        cell["estimate"] = {
            c: _median([t["estimate"][c] for t in trials]) for c in trials[0]["estimate"]
        }
        cell["ratio_estimate"] = {}
        cell["trials_within_2x"] = {}
        for c in trials[0]["estimate"]:
            ratios = [_ratio(t["estimate"][c], t["error"][c]) for t in trials]
            ratios = [x for x in ratios if x is not None]
            cell["ratio_estimate"][c] = float(np.exp(np.median(np.log(ratios)))) if ratios else None
            cell["trials_within_2x"][c] = (
                float(np.mean([0.5 <= x <= 2.0 for x in ratios])) if ratios else None
            )
        if trials[0]["accuracy"]:
            cell["accuracy"] = {
                c: _median([t["accuracy"][c] for t in trials]) for c in trials[0]["accuracy"]
            }
        dask_bacc_codes = [c for c in cell["error"] if c != "repetition"]
        best = min(dask_bacc_codes, key=lambda c: cell["error"][c])
        cell["best"] = best
        cell["beats_repetition"] = cell["error"][best] <= cell["error"]["repetition"] + 1e-9
        cells.append(cell)
        if progress and (n + 1) % 50 == 0:
            print(f"  {n + 1}/{len(plan)} cells, {time.perf_counter() - start:.0f}s", flush=True)
    return {
        "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(config).items()},
        "environment": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "machine": platform.machine(),
            "digits_test_accuracy": _DIGITS.get("test_accuracy"),
        },
        "wall_seconds": time.perf_counter() - start,
        "cells": cells,
        "summary": summarize(cells),
    }


def _within(x: float | None) -> bool:
    return x is not None and 0.5 <= x <= 2.0


def _by_share(cells: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {
        "0": [],
        "(0, 1/4]": [],
        "(1/4, 1/2]": [],
        "(1/2, 3/4]": [],
        "(3/4, 1]": [],
    }
    for c in cells:
        share = c["S"] / (c["N"] - c["K"])
        key = (
            "0"
            if share == 0
            else "(0, 1/4]"
            if share <= 0.25
            else "(1/4, 1/2]"
            if share <= 0.5
            else "(1/2, 3/4]"
            if share <= 0.75
            else "(3/4, 1]"
        )
        groups[key].append(c)
    return groups


def summarize(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Calibration shares and the comparison with repetition, overall and per workload."""

    def calib(sel: list[dict[str, Any]], code: str) -> dict[str, Any]:
        ratios = [c["ratio_estimate"][code] for c in sel if c["ratio_estimate"].get(code)]
        trials = [c["trials_within_2x"][code] for c in sel if c["trials_within_2x"].get(code)]
        return {
            "cells": len(ratios),
            "cells_within_2x": float(np.mean([_within(x) for x in ratios])) if ratios else None,
            "trials_within_2x": float(np.mean(trials)) if trials else None,
            "median_ratio": float(np.exp(np.median(np.log(ratios)))) if ratios else None,
            "under_half": float(np.mean([x < 0.5 for x in ratios])) if ratios else None,
            "over_twice": float(np.mean([x > 2.0 for x in ratios])) if ratios else None,
        }

    def versus(sel: list[dict[str, Any]]) -> dict[str, Any]:
        beats = [c for c in sel if c["beats_repetition"]]
        return {
            "cells": len(sel),
            "matches_or_beats": len(beats) / len(sel) if sel else None,
            "best_code": {
                code: sum(1 for c in sel if c["best"] == code)
                for code in sorted({c["best"] for c in sel})
            },
            "by_pattern": {
                p: float(np.mean([c["beats_repetition"] for c in sel if c["pattern"] == p]))
                for p in sorted({c["pattern"] for c in sel})
            },
            # S / (N - K): the share of the spare tasks that straggled
            "by_straggler_share": {
                label: float(np.mean([c["beats_repetition"] for c in group]))
                for label, group in _by_share(sel).items()
                if group
            },
        }

    out: dict[str, Any] = {
        "calibration": {c: calib(cells, c) for c in ("berrut", "systematic-berrut")},
        "versus_repetition": versus(cells),
        "by_workload": {},
    }
    for w in sorted({c["workload"] for c in cells}):
        sel = [c for c in cells if c["workload"] == w]
        out["by_workload"][w] = {
            "calibration": {c: calib(sel, c) for c in ("berrut", "systematic-berrut")},
            "versus_repetition": versus(sel),
        }
    acc = [c for c in cells if "accuracy" in c]
    if acc:
        out["classification_accuracy"] = {
            code: float(np.mean([c["accuracy"][code] for c in acc])) for code in acc[0]["accuracy"]
        }
    return out


def _fmt(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    return f"{x:.{digits}g}"


def accuracy_markdown(result: dict[str, Any], cells_table: bool = True) -> str:
    """Summary tables, then (optionally) one row per cell."""
    s = result["summary"]
    lines = ["## Calibration of the error estimate (estimate / true error)", ""]
    lines.append(
        "| workload | code | cells | cells within 2x | trials within 2x | median ratio "
        "| cells < 0.5x | cells > 2x |"
    )
    lines.append("|---|---|---|---|---|---|---|---|")
    rows = [("all", s["calibration"])] + [
        (w, v["calibration"]) for w, v in s["by_workload"].items()
    ]
    for w, cal in rows:
        for code, v in cal.items():
            lines.append(
                f"| {w} | {code} | {v['cells']} | {_fmt(v['cells_within_2x'])} | "
                f"{_fmt(v['trials_within_2x'])} | {_fmt(v['median_ratio'])} | "
                f"{_fmt(v['under_half'])} | {_fmt(v['over_twice'])} |"
            )
    lines += ["", "## Best dask-bacc code against repetition at equal N", ""]
    lines.append(
        "| workload | cells | matches or beats | best code (cells) | by pattern "
        "| by share of spare tasks straggling, S/(N-K) |"
    )
    lines.append("|---|---|---|---|---|---|")
    rows = [("all", s["versus_repetition"])] + [
        (w, v["versus_repetition"]) for w, v in s["by_workload"].items()
    ]
    for w, v in rows:
        best = ", ".join(f"{k} {n}" for k, n in v["best_code"].items())
        pat = ", ".join(f"{k} {_fmt(x, 2)}" for k, x in v["by_pattern"].items())
        share = ", ".join(f"{k} {_fmt(x, 2)}" for k, x in v["by_straggler_share"].items())
        lines.append(
            f"| {w} | {v['cells']} | {_fmt(v['matches_or_beats'])} | {best} | {pat} | {share} |"
        )
    if "classification_accuracy" in s:
        lines += ["", "## Digits classifier: accuracy of the decoded probabilities (mean)", ""]
        lines.append("| " + " | ".join(s["classification_accuracy"]) + " |")
        lines.append("|" + "---|" * len(s["classification_accuracy"]))
        lines.append(
            "| " + " | ".join(_fmt(x) for x in s["classification_accuracy"].values()) + " |"
        )
    if cells_table:
        lines += ["", "## Every cell (medians over trials)", ""]
        lines.append(
            "| workload | K | N | S | pattern | berrut | systematic | repetition | lagrange "
            "| est/true berrut | est/true systematic | best beats repetition |"
        )
        lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for c in result["cells"]:
            e, r = c["error"], c["ratio_estimate"]
            lines.append(
                f"| {c['workload']} | {c['K']} | {c['N']} | {c['S']} | {c['pattern']} | "
                f"{_fmt(e['berrut'])} | {_fmt(e['systematic-berrut'])} | "
                f"{_fmt(e['repetition'])} | {_fmt(e.get('lagrange'))} | "
                f"{_fmt(r.get('berrut'))} | {_fmt(r.get('systematic-berrut'))} | "
                f"{_fmt(c['beats_repetition'])} |"
            )
    return "\n".join(lines) + "\n"


def write_plots(result: dict[str, Any], out: Path) -> list[Path]:
    """Calibration scatter and error against stragglers (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    cells = result["cells"]
    fig, ax = plt.subplots(figsize=(6, 5))
    for w in sorted({c["workload"] for c in cells}):
        sel = [c for c in cells if c["workload"] == w and c["error"]["berrut"] > 0]
        ax.scatter(
            [c["error"]["berrut"] for c in sel],
            [c["estimate"]["berrut"] for c in sel],
            s=8,
            label=w,
            alpha=0.7,
        )
    lo, hi = 1e-4, 10
    ax.plot([lo, hi], [lo, hi], "k-", lw=1)
    ax.plot([lo, hi], [2 * lo, 2 * hi], "k:", lw=1)
    ax.plot([lo, hi], [lo / 2, hi / 2], "k:", lw=1)
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi))
    ax.set(xlabel="true relative error (median of cell)", ylabel="estimated (median of cell)")
    ax.set_title("Berrut: estimate against true error (dotted: 2x)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(out / "calibration.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    workloads = sorted({c["workload"] for c in cells})
    fig, axes = plt.subplots(2, len(workloads), figsize=(3.2 * len(workloads), 6), squeeze=False)
    K = 16 if any(c["K"] == 16 for c in cells) else cells[0]["K"]
    for col, w in enumerate(workloads):
        for row, pattern in enumerate(("random", "adjacent")):
            ax = axes[row][col]
            for code, style in (
                ("berrut", "-o"),
                ("systematic-berrut", "-s"),
                ("repetition", "-^"),
                ("lagrange", "-d"),
            ):
                sel = [
                    c
                    for c in cells
                    if c["workload"] == w
                    and c["K"] == K
                    and c["ratio"] == 2.0
                    and c["pattern"] in (pattern, "none")
                    and code in c["error"]
                ]
                if sel:
                    ax.plot(
                        [c["S"] for c in sel],
                        [max(c["error"][code], 1e-6) for c in sel],
                        style,
                        ms=3,
                        label=code,
                    )
            ax.set(yscale="log", title=f"{w}, {pattern}", xlabel="stragglers S")
            if col == 0:
                ax.set_ylabel(f"relative error (K={K}, N={2 * K}; 0 drawn at 1e-6)")
            if row == 0:
                ax.legend(fontsize=6)
    fig.tight_layout()
    paths.append(out / "error_vs_stragglers.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


def write_accuracy(result: dict[str, Any], out: Path) -> dict[str, Any]:
    """Write ``accuracy.json``, ``accuracy.md`` and the PNG figures into ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "accuracy.json", "markdown": out / "accuracy.md"}
    paths["json"].write_text(json.dumps(result, indent=1, allow_nan=False) + "\n")
    paths["markdown"].write_text(accuracy_markdown(result))
    paths["plots"] = write_plots(result, out)
    return paths
