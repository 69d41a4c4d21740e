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
systematic Berrut, repetition, (polynomial f) Lagrange and the local-support codes bspline
and systematic bspline; repetition blocks with no copy back, and Lagrange below its
recovery threshold, decode to zeros (relative error 1 for those blocks): that is what they
give from the same results, where the runtime would wait for more. A returned set that
leaves a bspline block with no returned share near it is not decodable (the runtime waits
for a covering share): such a trial is skipped for that code and counted (``skipped``),
so its medians are over the decodable trials only, and it does not compete for the best
code against repetition. For the Berrut and bspline codes it reports the ratio estimate /
true error of :func:`dask_bacc.codes.estimate.estimate_error` (median over trials; a cell
is within 2x when that median is in [0.5, 2]).
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

from ..codes import BerrutCode, LagrangeCode, RepetitionCode, estimate_error, get_code
from ..codes.transform import Transform, get_transform
from ..testing.data import smooth_blocks

__all__ = [
    "COMPARE_CODES",
    "COMPARE_TASKS",
    "DEFAULT_K",
    "DEFAULT_RATIOS",
    "WORKLOADS",
    "AccuracyConfig",
    "CompareConfig",
    "Workload",
    "accuracy_markdown",
    "compare_markdown",
    "run_accuracy",
    "run_compare",
    "straggler_levels",
    "write_accuracy",
    "write_compare",
]

DEFAULT_K = (4, 8, 16, 32)
DEFAULT_RATIOS = (1.25, 1.5, 2.0, 4.0)
ROWS = 16  # rows per block
FEATURES = 8
OUTPUTS = 8
#: codes whose error estimate the grid calibrates
ESTIMATED = ("berrut", "systematic-berrut", "bspline", "systematic-bspline")
#: local-support codes: a returned set with a gap is not decodable (the trial is skipped)
LOCAL = ("bspline", "systematic-bspline")


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
        have: dict[int, int] = {}  # block -> column of its lowest-index copy
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
    for name in LOCAL:
        codes[name] = get_code(name, K, N)
    out: dict[str, Any] = {"error": {}, "estimate": {}, "accuracy": {}, "skipped": {}}
    for name, code in codes.items():
        if name in LOCAL:
            out["skipped"][name] = not code.can_decode(returned)
            if out["skipped"][name]:  # a gap: the runtime would wait for more results
                out["error"][name] = out["estimate"][name] = None
                if labels is not None:
                    out["accuracy"][name] = None
                continue
        results = np.stack([f(share) for share in code.encode(X)])[returned]
        decoded = _decode_or_zeros(code, results, returned, exact.shape)
        out["error"][name] = _rel(decoded, exact)
        if name in ESTIMATED:
            out["estimate"][name] = estimate_error(code, results, returned).overall
        if labels is not None:
            out["accuracy"][name] = _accuracy(decoded, labels)
    if labels is not None:
        out["accuracy"]["uncoded"] = _accuracy(exact, labels)
    return out


def _accuracy(decoded: np.ndarray, labels: np.ndarray) -> float:
    """Share of rows whose argmax is the label; a row of zeros (a block nobody returned)
    is no prediction and counts as wrong (its argmax would be class 0)."""
    predicted = decoded.argmax(axis=-1)
    answered = np.any(decoded != 0, axis=-1)
    return float(np.mean((predicted == labels) & answered))


def _median(values: list[float]) -> float | None:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    return float(np.median(vals)) if vals else None


def _ratio(estimate: float, true: float) -> float | None:
    if math.isnan(estimate):  # unknown (too few results), even for an exact decode
        return None
    if true == 0.0:
        return 1.0 if estimate == 0.0 else math.inf  # exact: the estimate must say 0
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
        cell["skipped"] = {c: sum(t["skipped"][c] for t in trials) for c in trials[0]["skipped"]}
        cell["ratio_estimate"] = {}
        cell["trials_within_2x"] = {}
        cell["trials_ge_half"] = {}
        for c in trials[0]["estimate"]:
            decodable = [t for t in trials if not t["skipped"].get(c)]
            raw = [_ratio(t["estimate"][c], t["error"][c]) for t in decodable]
            ratios = [x for x in raw if x is not None]
            cell["trials_ge_half"][c] = _ge_half_counts(raw)
            cell["ratio_estimate"][c] = float(np.exp(np.median(np.log(ratios)))) if ratios else None
            cell["trials_within_2x"][c] = (
                float(np.mean([0.5 <= x <= 2.0 for x in ratios])) if ratios else None
            )
        if trials[0]["accuracy"]:
            cell["accuracy"] = {
                c: _median([t["accuracy"][c] for t in trials]) for c in trials[0]["accuracy"]
            }
        # the codes decoded in every trial (bspline's medians are over its decodable ones)
        dask_bacc_codes = [c for c in cell["error"] if c != "repetition" and c not in LOCAL]
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


def _ge_half_counts(raw: list[float | None]) -> list[int]:
    """``[decodes with estimate >= 0.5x the true error, decodes with an estimate, decodes
    whose estimate is unknown]`` (an unknown estimate is reported as such and warns)."""
    numeric = [x for x in raw if x is not None]
    return [sum(1 for x in numeric if x >= 0.5), len(numeric), len(raw) - len(numeric)]


def ge_half(cells: list[dict[str, Any]], code: str) -> dict[str, float | int | None]:
    """Over every decode of ``cells``: the share whose estimate is at least half the true
    error (of those with an estimate), the share with an unknown estimate, and the share
    that is honest (either)."""
    counts = [c["trials_ge_half"][code] for c in cells if code in c.get("trials_ge_half", {})]
    ok, numeric, unknown = (int(sum(x[i] for x in counts)) for i in range(3))
    total = numeric + unknown
    return {
        "decodes": total,
        "ge_half": ok / numeric if numeric else None,
        "unknown": unknown / total if total else None,
        "honest": (ok + unknown) / total if total else None,
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
            "trials_ge_half": ge_half(sel, code),
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

    def skipped(sel: list[dict[str, Any]], code: str) -> dict[str, Any]:
        n = [c["skipped"][code] for c in sel if code in c.get("skipped", {})]
        return {
            "trials": int(sum(n)),
            "cells_with_skips": sum(1 for x in n if x),
            "cells_all_skipped": sum(
                1 for c in sel if code in c.get("skipped", {}) and c["error"][code] is None
            ),
        }

    def local_vs_berrut(sel: list[dict[str, Any]], code: str) -> dict[str, Any]:
        """Per cell median error of ``code`` / Berrut's (same N, S, pattern): the median
        of that ratio over the cells and the share of cells where ``code`` is lower."""
        r = [
            c["error"][code] / c["error"]["berrut"]
            for c in sel
            if c["error"].get(code) is not None and c["error"]["berrut"] > 0
        ]
        return {
            "cells": len(r),
            "median_ratio": float(np.median(r)) if r else None,
            "lower": float(np.mean([x < 1 for x in r])) if r else None,
        }

    present = [c for c in ESTIMATED if cells and c in cells[0]["ratio_estimate"]]
    local = [c for c in LOCAL if cells and c in cells[0].get("skipped", {})]
    out: dict[str, Any] = {
        "calibration": {c: calib(cells, c) for c in present},
        "versus_repetition": versus(cells),
        "skipped": {c: skipped(cells, c) for c in local},
        "versus_berrut": {c: local_vs_berrut(cells, c) for c in local},
        "by_workload": {},
    }
    for w in sorted({c["workload"] for c in cells}):
        sel = [c for c in cells if c["workload"] == w]
        out["by_workload"][w] = {
            "calibration": {c: calib(sel, c) for c in present},
            "versus_repetition": versus(sel),
            "skipped": {c: skipped(sel, c) for c in local},
            "versus_berrut": {c: local_vs_berrut(sel, c) for c in local},
        }
    acc = [c for c in cells if "accuracy" in c]
    if acc:
        out["classification_accuracy"] = {
            code: _mean([c["accuracy"][code] for c in acc]) for code in acc[0]["accuracy"]
        }
    return out


def _mean(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def _ge(v: dict[str, Any]) -> str:
    """The ``trials >= 0.5x | trials unknown`` cells of a calibration row."""
    g = v.get("trials_ge_half") or {}
    return f"{_fmt(g.get('ge_half'))} | {_fmt(g.get('unknown'))}"


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
        "| cells < 0.5x | cells > 2x | trials >= 0.5x | trials unknown |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    rows = [("all", s["calibration"])] + [
        (w, v["calibration"]) for w, v in s["by_workload"].items()
    ]
    for w, cal in rows:
        for code, v in cal.items():
            lines.append(
                f"| {w} | {code} | {v['cells']} | {_fmt(v['cells_within_2x'])} | "
                f"{_fmt(v['trials_within_2x'])} | {_fmt(v['median_ratio'])} | "
                f"{_fmt(v['under_half'])} | {_fmt(v['over_twice'])} | {_ge(v)} |"
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
    if s.get("skipped"):
        lines += [
            "",
            "## Local-support codes: undecodable sets skipped, error against Berrut",
            "",
            "A returned set leaving a block with no returned share within one block spacing is "
            "not decodable (the runtime waits for more results): the trial is skipped for that "
            "code, and its cell's medians are over the decodable trials. Error ratio: the "
            "cell's median error over Berrut's at the same N, S and pattern, median over cells.",
            "",
            "| workload | code | trials skipped | cells with skips | cells all skipped "
            "| error / berrut (median) | cells lower than berrut |",
            "|---|---|---|---|---|---|---|",
        ]
        for w, v in [("all", s), *s["by_workload"].items()]:
            for code, k in v["skipped"].items():
                vb = v["versus_berrut"][code]
                lines.append(
                    f"| {w} | {code} | {k['trials']} | {k['cells_with_skips']} | "
                    f"{k['cells_all_skipped']} | {_fmt(vb['median_ratio'])} | "
                    f"{_fmt(vb['lower'])} |"
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
            "| est/true berrut | est/true systematic | best beats repetition "
            "| bspline | systematic bspline | est/true bspline | est/true systematic bspline "
            "| bspline skipped | systematic bspline skipped |"
        )
        lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for c in result["cells"]:
            e, r, k = c["error"], c["ratio_estimate"], c.get("skipped", {})
            lines.append(
                f"| {c['workload']} | {c['K']} | {c['N']} | {c['S']} | {c['pattern']} | "
                f"{_fmt(e['berrut'])} | {_fmt(e['systematic-berrut'])} | "
                f"{_fmt(e['repetition'])} | {_fmt(e.get('lagrange'))} | "
                f"{_fmt(r.get('berrut'))} | {_fmt(r.get('systematic-berrut'))} | "
                f"{_fmt(c['beats_repetition'])} | "
                f"{_fmt(e.get('bspline'))} | {_fmt(e.get('systematic-bspline'))} | "
                f"{_fmt(r.get('bspline'))} | {_fmt(r.get('systematic-bspline'))} | "
                f"{k.get('bspline', '-')} | {k.get('systematic-bspline', '-')} |"
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
    paths: dict[str, Any] = {"json": out / "accuracy.json", "markdown": out / "accuracy.md"}
    paths["json"].write_text(json.dumps(_finite(result), indent=1, allow_nan=False) + "\n")
    paths["markdown"].write_text(accuracy_markdown(result))
    paths["plots"] = write_plots(result, out)
    return paths


# -- the code comparison (issue 12): spline, Berrut and repetition, with and without log --

#: The codes the comparison decodes, all at the same N from the same results (a bspline
#: code skips a set it cannot decode, a gap, and the cell counts it in ``skipped``).
COMPARE_CODES = (
    "berrut",
    "systematic-berrut",
    "spline",
    "systematic-spline",
    "bspline",
    "systematic-bspline",
    "repetition",
)
APPROXIMATE = COMPARE_CODES[:6]
MLP_HIDDEN = 32


def _mlp_model() -> dict[str, Any]:
    """A small MLP (one hidden layer of 32 ReLU units, ``random_state=0``) on the same split
    as :func:`_digits_model`; fitted once per process (about 2 s)."""
    if "mlp" not in _DIGITS:
        from sklearn.neural_network import MLPClassifier

        _digits_model()  # the split
        from sklearn.datasets import load_digits

        digits = load_digits()
        X, y = digits.data / 16.0, digits.target
        model = MLPClassifier(hidden_layer_sizes=(MLP_HIDDEN,), max_iter=500, random_state=0)
        model.fit(X[512:], y[512:])
        _DIGITS["mlp"] = _MLP(
            [w.copy() for w in model.coefs_], [b.copy() for b in model.intercepts_]
        )
        _DIGITS["mlp_test_accuracy"] = float(model.score(X[:512], y[:512]))
    return _DIGITS


class _MLP:
    """``predict_proba`` of a fitted ReLU MLPClassifier in NumPy (same values)."""

    def __init__(self, coefs: list[np.ndarray], intercepts: list[np.ndarray]):
        self.coefs, self.intercepts = coefs, intercepts

    def __call__(self, block: np.ndarray) -> np.ndarray:
        h = block
        for W, b in zip(self.coefs[:-1], self.intercepts[:-1], strict=True):
            h = np.maximum(h @ W + b, 0.0)
        return _Classifier(self.coefs[-1], self.intercepts[-1])(h)


def _draw_mlp(K: int, rng: np.random.Generator):
    m = _mlp_model()
    start = int(rng.integers(0, 512 - K * ROWS + 1))
    sel = slice(start, start + K * ROWS)
    return m["X"][sel].reshape(K, ROWS, -1), m["mlp"], m["y"][sel].reshape(K, ROWS)


@dataclass(frozen=True)
class CompareTask:
    """A workload of the comparison; ``positive`` outputs admit the log transform."""

    name: str
    description: str
    draw: Callable[[int, np.random.Generator], tuple[np.ndarray, Callable, np.ndarray | None]]
    positive: bool


COMPARE_TASKS: dict[str, CompareTask] = {
    t.name: t
    for t in (
        CompareTask(
            "digits-logistic", "logistic regression predict_proba, digits", _draw_digits, True
        ),
        CompareTask(
            "digits-mlp", f"MLP ({MLP_HIDDEN} ReLU) predict_proba, digits", _draw_mlp, True
        ),
        CompareTask(
            "tanh-random", "tanh(X W), i.i.d. normal rows", _phi_workload(np.tanh, "random"), False
        ),
        CompareTask(
            "tanh-smooth", "tanh(X W), smooth rows", _phi_workload(np.tanh, "smooth"), False
        ),
    )
}


@dataclass
class CompareConfig:
    """What :func:`run_compare` runs.

    Every cell (task, N = ratio * K, s) draws ``trials`` data windows and random straggler
    sets of size s; every code decodes the same returned results, with each transform
    (``None``, ``"log"`` and ``"log-probabilities"``; only for tasks with positive outputs,
    the class probabilities). The convergence
    study decodes tanh(X W) at N in ``convergence_N`` with ``convergence_s`` stragglers.
    """

    K: int = 8
    ratios: Sequence[int] = (2, 4)
    stragglers: Sequence[int] = (1, 2, 4, 7)
    tasks: Sequence[str] = tuple(COMPARE_TASKS)
    transforms: Sequence[str | None] = (None, "log", "log-probabilities")
    trials: int = 50
    convergence_tasks: Sequence[str] = ("tanh-random", "tanh-smooth")
    convergence_N: Sequence[int] = (16, 32, 64)
    convergence_s: int = 2
    convergence_trials: int = 50
    seed: int = 0
    skipped: dict[str, str] = field(default_factory=dict)

    def validate(self) -> None:
        unknown = [t for t in (*self.tasks, *self.convergence_tasks) if t not in COMPARE_TASKS]
        if unknown:
            raise ValueError(f"unknown tasks {unknown}; choose from {list(COMPARE_TASKS)}")
        for t in self.transforms:
            get_transform(t)  # raises on an unknown name
        if self.trials < 1 or self.convergence_trials < 1:
            raise ValueError("trials must be >= 1")
        for r in self.ratios:
            if max(self.stragglers, default=0) >= r * self.K:
                raise ValueError(f"s must be below N = {r * self.K}")


def _label(code: str, transform: str | None) -> str:
    return code if transform is None else f"{code}+{transform}"


def _decode_with(
    code: Any, Y: np.ndarray, returned: np.ndarray, T: Transform | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(decoded, answered, transformed results)``: the decode of ``Y[returned]`` in T's
    domain mapped back; repetition blocks with no copy back are zeros (answered False)."""
    R = Y[returned] if T is None else T.forward(Y)[returned]
    answered = np.ones(code.K, dtype=bool)
    if isinstance(code, RepetitionCode):
        decoded = np.zeros((code.K, *Y.shape[1:]))
        have: dict[int, int] = {}
        for col in np.argsort(returned):
            have.setdefault(int(returned[col]) % code.K, int(col))
        answered[:] = False
        for j, col in have.items():
            decoded[j] = R[col] if T is None else T.inverse(R[col])
            answered[j] = True
        return decoded, answered, R
    decoded = code.decode(R, returned)
    return (decoded if T is None else T.inverse(decoded)), answered, R


def _compare_trial(
    task: CompareTask,
    K: int,
    N: int,
    s: int,
    transforms: Sequence[str | None],
    rng: np.random.Generator,
    codes: Sequence[str] = COMPARE_CODES,
    estimate: bool = True,
) -> dict[str, dict[str, float]]:
    X, f, labels = task.draw(K, rng)
    exact = np.stack([f(x) for x in X])
    lost = rng.choice(N, s, replace=False)
    returned = rng.permutation(np.setdiff1d(np.arange(N), lost))
    out: dict[str, dict[str, Any]] = {"error": {}, "estimate": {}, "accuracy": {}, "skipped": {}}
    if labels is not None:
        out["accuracy"]["uncoded"] = _accuracy(exact, labels)
    for name in codes:
        code = get_code(name, K, N)
        if name in LOCAL:
            out["skipped"][name] = not code.can_decode(returned)
            if out["skipped"][name]:  # a gap: the runtime would wait for more results
                for tname in transforms:
                    if tname is None or task.positive:
                        key = _label(name, tname)
                        out["error"][key] = None
                        if labels is not None:
                            out["accuracy"][key] = None
                        if estimate and name in APPROXIMATE:
                            out["estimate"][key] = None
                continue
        Y = np.stack([f(share) for share in code.encode(X)])
        for tname in transforms:
            if tname is not None and not task.positive:
                continue
            T = get_transform(tname)
            key = _label(name, tname)
            decoded, answered, R = _decode_with(code, Y, returned, T)
            out["error"][key] = _rel(decoded, exact)
            if labels is not None:
                hit = (decoded.argmax(axis=-1) == labels) & answered[:, None]
                out["accuracy"][key] = float(np.mean(hit))
            if estimate and name in APPROXIMATE:
                out["estimate"][key] = estimate_error(code, R, returned, transform=T).overall
    return out


#: True errors below this are exact (up to rounding, e.g. exp(log(y))): the estimate
#: must then be below it too
EXACT_TOL = 1e-12


def _ratio_tol(estimate: float, true: float) -> float | None:
    if math.isnan(estimate):
        return None
    if true < EXACT_TOL:
        return 1.0 if estimate < EXACT_TOL else math.inf
    return estimate / true


def _stat(fn: Callable, values: list[float]) -> float | None:
    return float(fn(values)) if values else None


def _cell_stats(trials: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    keys = list(trials[0]["error"])
    # a local code (bspline) is taken over the trials it could decode (None: skipped)
    errs = {k: [t["error"][k] for t in trials if t["error"][k] is not None] for k in keys}
    cell: dict[str, Any] = {
        "mean_error": {k: _stat(np.mean, errs[k]) for k in keys},
        "median_error": {k: _stat(np.median, errs[k]) for k in keys},
    }
    if trials[0]["skipped"]:
        cell["skipped"] = {
            k: int(sum(t["skipped"][k] for t in trials)) for k in trials[0]["skipped"]
        }
    if trials[0]["accuracy"]:
        acc = list(trials[0]["accuracy"])
        accs = {k: [t["accuracy"][k] for t in trials if t["accuracy"][k] is not None] for k in acc}
        cell["accuracy"] = {k: _stat(np.mean, accs[k]) for k in acc}
        # the worst tenth of the trials: how bad an unlucky straggler set is
        cell["accuracy_p10"] = {k: _stat(lambda v: np.percentile(v, 10), accs[k]) for k in acc}
    cell["ratio_estimate"], cell["trials_within_2x"], cell["trials_ge_half"] = {}, {}, {}
    for k in trials[0]["estimate"]:
        raw = [
            _ratio_tol(t["estimate"][k], t["error"][k]) for t in trials if t["error"][k] is not None
        ]
        ratios = [x for x in raw if x is not None]
        cell["trials_ge_half"][k] = _ge_half_counts(raw)
        cell["ratio_estimate"][k] = float(np.median(ratios)) if ratios else None
        cell["trials_within_2x"][k] = (
            float(np.mean([0.5 <= x <= 2.0 for x in ratios])) if ratios else None
        )
    return cell


def run_compare(config: CompareConfig | None = None, progress: bool = False) -> dict[str, Any]:
    """The code comparison: every code x transform, every task, N and s (see
    :class:`CompareConfig`), the calibration of the estimate per code and the convergence
    study; returns a JSON-serialisable result."""
    config = config or CompareConfig()
    config.validate()
    tasks = list(config.tasks)
    for name, load in (("digits-logistic", _digits_model), ("digits-mlp", _mlp_model)):
        if name in tasks:
            try:
                load()
            except ImportError as exc:  # scikit-learn missing
                tasks.remove(name)
                config.skipped[name] = f"scikit-learn is not installed ({exc})"
    start = time.perf_counter()
    cells = []
    K = config.K
    plan = [(t, r * K, s) for t in tasks for r in config.ratios for s in config.stragglers]
    for n, (t, N, s) in enumerate(plan):
        rng = np.random.default_rng([config.seed, 12, n])
        trials = [
            _compare_trial(COMPARE_TASKS[t], K, N, s, config.transforms, rng)
            for _ in range(config.trials)
        ]
        cells.append({"task": t, "K": K, "N": N, "s": s, **_cell_stats(trials)})
        if progress:
            print(f"  {t} N={N} s={s}: {time.perf_counter() - start:.0f}s", flush=True)
    convergence = []
    for n, t in enumerate(config.convergence_tasks):
        for N in config.convergence_N:
            rng = np.random.default_rng([config.seed, 13, n, N])
            trials = [
                _compare_trial(
                    COMPARE_TASKS[t], K, N, config.convergence_s, (None,), rng,
                    codes=APPROXIMATE, estimate=False,
                )
                for _ in range(config.convergence_trials)
            ]  # fmt: skip
            row = {"task": t, "K": K, "N": N, "s": config.convergence_s}
            convergence.append({**row, **_cell_stats(trials)})
    env = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "machine": platform.machine(),
        "digits_test_accuracy": _DIGITS.get("test_accuracy"),
        "mlp_test_accuracy": _DIGITS.get("mlp_test_accuracy"),
    }
    config_out = {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(config).items()}
    return {
        "config": config_out,
        "environment": env,
        "wall_seconds": time.perf_counter() - start,
        "cells": cells,
        "convergence": convergence,
        "calibration": compare_calibration(cells),
    }


def compare_calibration(cells: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per code (and transform): cells whose median estimate / true is in [0.5, 2]."""
    out: dict[str, dict[str, Any]] = {}
    keys = sorted({k for c in cells for k in c["ratio_estimate"]}, key=_row_order)
    for k in keys:
        ratios = [c["ratio_estimate"][k] for c in cells if c["ratio_estimate"].get(k) is not None]
        trials = [c["trials_within_2x"][k] for c in cells if k in c["trials_within_2x"]]
        finite = [x for x in ratios if 0 < x < math.inf]
        out[k] = {
            "cells": len(ratios),
            "cells_within_2x": float(np.mean([_within(x) for x in ratios])) if ratios else None,
            "trials_within_2x": float(np.mean(trials)) if trials else None,
            "median_ratio": float(np.exp(np.median(np.log(finite)))) if finite else None,
            "under_half": float(np.mean([x < 0.5 for x in ratios])) if ratios else None,
            "over_twice": float(np.mean([x > 2.0 for x in ratios])) if ratios else None,
            "trials_ge_half": ge_half(cells, k),
        }
    return out


def _row_order(key: str) -> tuple[str, int]:
    code, _, transform = key.partition("+")
    rank = COMPARE_CODES.index(code) if code in COMPARE_CODES else len(COMPARE_CODES)
    return (transform, rank) if code != "uncoded" else ("", -1)


def _cells(result: dict[str, Any], task: str, N: int) -> list[dict[str, Any]]:
    return sorted(
        (c for c in result["cells"] if c["task"] == task and c["N"] == N), key=lambda c: c["s"]
    )


def _same_as_repetition(result: dict[str, Any]) -> dict[str, float] | None:
    """Largest difference of repetition with a transform from repetition without (error
    and accuracy, over every cell), or None when no transform was run."""
    err = acc = 0.0
    seen = False
    for c in result["cells"]:
        for k in c["mean_error"]:
            if k.startswith("repetition+"):
                seen = True
                err = max(err, abs(c["mean_error"][k] - c["mean_error"]["repetition"]))
                if "accuracy" in c:
                    acc = max(acc, abs(c["accuracy"][k] - c["accuracy"]["repetition"]))
    return {"error": err, "accuracy": acc} if seen else None


def compare_targets(result: dict[str, Any], N: int = 16) -> dict[str, Any] | None:
    """Issue 12's targets on digits-logistic, K = 8, N = ``N``: spline+log within 0.005 of
    repetition at s = 1, 2, at least 0.93 at s = 4 and 0.84 at s = 7."""
    sel = {c["s"]: c for c in _cells(result, "digits-logistic", N)}
    if not sel or "spline+log" not in next(iter(sel.values()))["accuracy"]:
        return None
    out: dict[str, Any] = {"N": N, "checks": []}
    for s_, c in sorted(sel.items()):
        a, r = c["accuracy"]["spline+log"], c["accuracy"]["repetition"]
        if s_ in (1, 2):
            goal, met = f"within 0.005 of repetition ({r:.3f})", a >= r - 0.005
        elif s_ == 4:
            goal, met = ">= 0.93", a >= 0.93
        elif s_ == 7:
            goal, met = ">= 0.84", a >= 0.84
        else:
            continue
        out["checks"].append({"s": s_, "spline+log": a, "goal": goal, "met": bool(met)})
    return out


def compare_markdown(result: dict[str, Any]) -> str:
    """Tables: per task and N, rows code(+transform), columns s; calibration; convergence."""
    cfg = result["config"]
    lines = []
    tasks = list(dict.fromkeys(c["task"] for c in result["cells"]))
    Ns = sorted({c["N"] for c in result["cells"]})
    same = _same_as_repetition(result)
    for task in tasks:
        desc = COMPARE_TASKS[task].description
        for N in Ns:
            sel = _cells(result, task, N)
            if not sel:
                continue
            head = "| code | " + " | ".join(f"s = {c['s']}" for c in sel) + " |"
            rule = "|---|" + "---|" * len(sel)
            keys = sorted(sel[0]["mean_error"], key=_row_order)
            if same is not None:  # repetition with a transform: the same decode (below)
                keys = [k for k in keys if not k.startswith("repetition+")]
            lines += [f"### {task}: {desc}, K = {sel[0]['K']}, N = {N}", ""]
            if "accuracy" in sel[0]:
                lines += [
                    f"Classification accuracy (mean over {cfg['trials']} random straggler sets; "
                    "in parentheses the worst tenth of them):",
                    "",
                    head,
                    rule,
                ]
                for k in ["uncoded", *keys]:
                    row = [
                        "-"
                        if c["accuracy"][k] is None
                        else f"{c['accuracy'][k]:.3f} ({c['accuracy_p10'][k]:.3f})"
                        for c in sel
                    ]
                    lines.append(f"| {k} | " + " | ".join(row) + " |")
                lines += [
                    "",
                    "Relative error of the probabilities, median (mean) over the trials:",
                    "",
                    head,
                    rule,
                ]
                for k in keys:
                    row = [
                        f"{_fmt(c['median_error'][k])} ({_fmt(c['mean_error'][k])})" for c in sel
                    ]
                    lines.append(f"| {k} | " + " | ".join(row) + " |")
            else:
                lines += [
                    f"Mean relative error ||decoded - f(X)|| / ||f(X)|| ({cfg['trials']} random "
                    "straggler sets):",
                    "",
                    head,
                    rule,
                ]
                for k in keys:
                    row = [_fmt(c["mean_error"][k]) for c in sel]
                    lines.append(f"| {k} | " + " | ".join(row) + " |")
            if "skipped" in sel[0]:
                lines += [
                    "",
                    "Undecodable straggler sets skipped (a gap; the runtime waits for more "
                    "results), of "
                    f"{cfg['trials']}: "
                    + "; ".join(
                        f"{code} " + ", ".join(str(c["skipped"][code]) for c in sel)
                        for code in sel[0]["skipped"]
                    )
                    + " (by s); their rows above are over the decodable sets.",
                ]
            lines.append("")
    if same is not None:
        lines += [
            "Repetition with a transform decodes the same blocks (exact up to rounding): "
            f"largest difference from plain repetition over all cells {same['error']:.2g} in "
            f"mean relative error, {same['accuracy']:.2g} in accuracy; its rows are left out.",
            "",
        ]
    targets = compare_targets(result)
    if targets:
        lines += [
            f"### Issue 12 targets (digits-logistic, N = {targets['N']}, spline+log)",
            "",
            "| s | spline+log accuracy | goal | met |",
            "|---|---|---|---|",
        ]
        for t in targets["checks"]:
            lines.append(f"| {t['s']} | {t['spline+log']:.3f} | {t['goal']} | {_fmt(t['met'])} |")
        lines.append("")
    lines += [
        "### Calibration of the error estimate (all cells above)",
        "",
        "A cell is within 2x when the median over its trials of estimate / true error is in "
        "[0.5, 2] (an exact decode counts as within when its estimate is 0).",
        "",
        "| code | cells | cells within 2x | trials within 2x | median ratio | cells < 0.5x "
        "| cells > 2x | trials >= 0.5x | trials unknown |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for k, v in result["calibration"].items():
        lines.append(
            f"| {k} | {v['cells']} | {_fmt(v['cells_within_2x'])} | "
            f"{_fmt(v['trials_within_2x'])} | {_fmt(v['median_ratio'])} | "
            f"{_fmt(v['under_half'])} | {_fmt(v['over_twice'])} | {_ge(v)} |"
        )
    conv = result["convergence"]
    if conv:
        lines += ["", "### Convergence: mean relative error against N", ""]
        convN = sorted({c["N"] for c in conv})
        lines.append(
            "| task | code | "
            + " | ".join(f"N = {N}" for N in convN)
            + " | slope (log error / log N) |"
        )
        lines.append("|---|---|" + "---|" * (len(convN) + 1))
        for task in dict.fromkeys(c["task"] for c in conv):
            rows = sorted((c for c in conv if c["task"] == task), key=lambda c: c["N"])
            for k in sorted(rows[0]["mean_error"], key=_row_order):
                errs = [c["mean_error"][k] for c in rows]
                slope = (
                    f"{np.polyfit(np.log([c['N'] for c in rows]), np.log(errs), 1)[0]:.2f}"
                    if len(rows) > 1 and None not in errs and min(errs) > 0
                    else "-"
                )
                lines.append(
                    f"| {task} (K = {rows[0]['K']}, s = {rows[0]['s']}) | {k} | "
                    + " | ".join(_fmt(e) for e in errs)
                    + f" | {slope} |"
                )
        for task in dict.fromkeys(c["task"] for c in conv):
            last = max((c for c in conv if c["task"] == task), key=lambda c: c["N"])
            e = last["mean_error"]
            if "spline" in e and "berrut" in e:
                lines.append("")
                lines.append(
                    f"{task}, N = {last['N']}: spline / berrut = {e['spline'] / e['berrut']:.3g}"
                )
    lines += [
        "",
        f"({result['wall_seconds']:.0f} s; numpy {result['environment']['numpy']}; "
        f"seed {cfg['seed']})",
    ]
    return "\n".join(lines) + "\n"


_STYLE = {
    "berrut": ("C0", "o"),
    "systematic-berrut": ("C1", "s"),
    "spline": ("C2", "^"),
    "systematic-spline": ("C3", "v"),
    "bspline": ("C4", "D"),
    "systematic-bspline": ("C5", "P"),
    "repetition": ("k", "x"),
}


def write_compare_plots(result: dict[str, Any], out: Path) -> list[Path]:
    """Digits accuracy against s per code (solid: no transform, dashed: log) and the
    convergence of spline and Berrut (log-log)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    paths = []
    cells = result["cells"]
    digits = [t for t in dict.fromkeys(c["task"] for c in cells) if "accuracy" in _first(cells, t)]
    Ns = sorted({c["N"] for c in cells})
    if digits:
        fig, axes = plt.subplots(
            len(digits), len(Ns), figsize=(4.8 * len(Ns), 3.8 * len(digits)), squeeze=False
        )
        for row, task in enumerate(digits):
            for col, N in enumerate(Ns):
                ax = axes[row][col]
                sel = _cells(result, task, N)
                s = [c["s"] for c in sel]
                ax.plot(s, [c["accuracy"]["uncoded"] for c in sel], "k:", lw=1, label="uncoded")
                for k in sorted(sel[0]["accuracy"], key=_row_order):
                    code, _, tname = k.partition("+")
                    # log-probabilities only renormalises log's rows (same argmax), and
                    # repetition decodes the same blocks with or without a transform
                    if (
                        code not in _STYLE
                        or tname not in ("", "log")
                        or (tname and code == "repetition")
                    ):
                        continue
                    color, marker = _STYLE[code]
                    ax.plot(
                        s,
                        [_nan(c["accuracy"][k]) for c in sel],
                        ls="--" if tname else "-",
                        color=color,
                        marker=marker,
                        ms=4,
                        label=k,
                    )
                ax.set(
                    title=f"{task}, K = {sel[0]['K']}, N = {N}",
                    xlabel="stragglers s (random)",
                    ylabel="classification accuracy",
                    xticks=s,
                )
                if row == 0 and col == 0:
                    ax.legend(fontsize=6, ncol=2)
        fig.tight_layout()
        paths.append(out / "compare_digits.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    conv = result["convergence"]
    if conv:
        tasks = list(dict.fromkeys(c["task"] for c in conv))
        fig, axes = plt.subplots(1, len(tasks), figsize=(4.8 * len(tasks), 3.8), squeeze=False)
        for ax, task in zip(axes[0], tasks, strict=True):
            rows = sorted((c for c in conv if c["task"] == task), key=lambda c: c["N"])
            Nv = [c["N"] for c in rows]
            for k in sorted(rows[0]["mean_error"], key=_row_order):
                color, marker = _STYLE[k]
                errs = [_nan(c["mean_error"][k]) for c in rows]
                ax.plot(Nv, errs, "-", color=color, marker=marker, label=k)
            ax.set(
                xscale="log",
                yscale="log",
                xlabel="N (coded tasks)",
                ylabel="mean relative error",
                title=f"{task}, K = {rows[0]['K']}, s = {rows[0]['s']}",
            )
            ax.set_xticks(Nv, [str(n) for n in Nv])
            ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
            ax.legend(fontsize=7)
        fig.tight_layout()
        paths.append(out / "compare_convergence.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths


def _nan(x: float | None) -> float:
    """A value to plot: None (every set skipped) as a gap."""
    return math.nan if x is None else x


def _first(cells: list[dict[str, Any]], task: str) -> dict[str, Any]:
    return next(c for c in cells if c["task"] == task)


def write_compare(result: dict[str, Any], out: Path) -> dict[str, Any]:
    """Write ``compare.json``, ``compare.md`` and the PNG figures into ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Any] = {"json": out / "compare.json", "markdown": out / "compare.md"}
    paths["json"].write_text(json.dumps(_finite(result), indent=1, allow_nan=False) + "\n")
    paths["markdown"].write_text(compare_markdown(result))
    paths["plots"] = write_compare_plots(result, out)
    return paths


def _finite(obj: Any) -> Any:
    """``obj`` with non-finite floats (an overflowing exp of a log-domain decode) as None."""
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
