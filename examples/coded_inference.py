"""Coded inference (ApproxIFER-style): a trained classifier served on coded query batches.

Run it with::

    python examples/coded_inference.py                 # full run, ~30 s on 2 cores
    python examples/coded_inference.py --smoke         # a few seconds
    python examples/coded_inference.py --out docs/iterative   # regenerate the docs' figures
    python examples/coded_inference.py --help

Unless ``--out`` names a folder, ``inference.json`` and the PNGs go to a new one under the
current directory, ``./dask-bacc-output/coded_inference-<date>-<time>/``.

A scikit-learn classifier (multinomial logistic regression and a one-hidden-layer MLP) is
trained once on ``load_digits`` (bundled, nothing is downloaded). The test images are the
queries. They are split into K blocks of B queries; row r of the K blocks is one batch of K
queries, and encoding the K blocks into N coded blocks encodes every batch into N coded
queries at once (the codes are linear, row by row). ``f`` is the classifier's
``predict_proba``; decoding gives approximate class probabilities for every query, and the
predicted class is their argmax.

Two parts, kept apart:

**Sweep** (pure NumPy, :mod:`dask_bacc.codes` directly, no cluster). ``f`` is evaluated on
all N coded blocks once; then for every number of stragglers s = 0 .. N-K the decoder is
given the results of N-s workers, for every straggler set when there are at most
``--max-sets`` of them (else a seeded random sample), and the accuracy over all queries is
recorded:

- ``random``: the mean over the straggler sets (what random stragglers give on average);
- ``adjacent``: the worst run of s consecutive worker indices (for Berrut, a gap in the
  interpolation points, its hardest case);
- ``worst``: the worst set of all (for repetition, losing every copy of a block).

A query whose block cannot be decoded (repetition without a copy of its block) counts as
wrong. Berrut, systematic Berrut and repetition run at the same N; the reference is the
uncoded accuracy (``predict_proba`` on the queries themselves, i.e. waiting for all).

**Cluster run** (end to end). An embedded ``LocalCluster`` serves the same queries with
``dask_bacc.encode(queries, code=...)`` and ``CodedData.map(predict_proba, model)`` under
injected stragglers (``inject_stragglers(Bimodal(p, delay))``), ``rounds`` times per code,
interleaved. Each round's decoded probabilities are checked against the NumPy decode of the
same returned set (they must agree to rounding), and accuracy and latency are recorded.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import sys
import time
import warnings
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from dask_bacc.bench.report import OUTPUT_ROOT
from dask_bacc.bench.report import output_dir as _output_dir

CODES: tuple[str, ...] = ("berrut", "systematic-berrut", "repetition")
CLASSIFIERS: tuple[str, ...] = ("logreg", "mlp")
PATTERNS: tuple[str, ...] = ("random", "adjacent", "worst")


def load_queries(seed: int = 0, test_fraction: float = 0.2) -> tuple[np.ndarray, ...]:
    """Digits pixels scaled to [0, 1], shuffled (seeded): ``X_train, y_train, X_test, y_test``."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    X, y = digits.data / 16.0, digits.target
    order = np.random.default_rng([seed, 0]).permutation(len(X))
    X, y = X[order], y[order]
    n_test = round(test_fraction * len(X))
    return X[n_test:], y[n_test:], X[:n_test], y[:n_test]


def train_classifier(name: str, X: np.ndarray, y: np.ndarray, seed: int, max_iter: int) -> Any:
    """Fit ``"logreg"`` (LogisticRegression) or ``"mlp"`` (MLPClassifier, 64 tanh units).

    A ``max_iter`` too small to converge (the smoke run) is allowed: its convergence
    warning is silenced here on purpose, the model is still a valid classifier.
    """
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier

    if name == "logreg":
        clf = LogisticRegression(max_iter=max_iter)
    elif name == "mlp":
        clf = MLPClassifier(
            hidden_layer_sizes=(64,), activation="tanh", max_iter=max_iter, random_state=seed
        )
    else:
        raise ValueError(f"unknown classifier {name!r}; choose from {CLASSIFIERS}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(X, y)
    return clf


def predict_proba(block: np.ndarray, model: Any) -> np.ndarray:
    """``f`` of the coded job: the classifier's class probabilities for every row."""
    return model.predict_proba(np.asarray(block))


def make_code(name: str, K: int, N: int) -> Any:
    """The :mod:`dask_bacc.codes` object for ``name`` at (K, N)."""
    from dask_bacc.codes import BerrutCode, RepetitionCode

    if name == "berrut":
        return BerrutCode(K, N)
    if name == "systematic-berrut":
        return BerrutCode(K, N, systematic=True)
    if name == "repetition":
        return RepetitionCode(K, N)
    raise ValueError(f"unknown code {name!r}; choose from {CODES}")


def decode_labels(code: Any, results: np.ndarray, returned: np.ndarray) -> np.ndarray:
    """Predicted class of every query from the results of the ``returned`` workers.

    ``results`` is ``(N, B, classes)``; returns ``(K, B)`` labels, ``-1`` where the block
    cannot be decoded (repetition without any copy of it).
    """
    from dask_bacc.codes import RepetitionCode

    K = code.K
    if isinstance(code, RepetitionCode):
        labels = np.full((K, results.shape[1]), -1)
        for i in sorted(returned.tolist(), reverse=True):  # lowest copy wins, like decode()
            labels[i % K] = results[i].argmax(axis=1)
        return labels
    return code.decode(results[returned], returned).argmax(axis=-1)


def straggler_sets(
    N: int, s: int, pattern: str, max_sets: int, rng: np.random.Generator
) -> list[tuple[int, ...]]:
    """The straggler sets of size ``s`` a pattern looks at.

    ``adjacent``: the N - s + 1 runs of consecutive indices. ``random`` and ``worst``: every
    set when there are at most ``max_sets``, else ``max_sets`` seeded random ones plus the
    adjacent runs (so ``worst`` is never better than ``adjacent``).
    """
    if s == 0:
        return [()]
    runs = [tuple(range(a, a + s)) for a in range(N - s + 1)]
    if pattern == "adjacent":
        return runs
    if math.comb(N, s) <= max_sets:
        return list(itertools.combinations(range(N), s))
    sample = {tuple(sorted(rng.choice(N, s, replace=False).tolist())) for _ in range(max_sets)}
    return sorted(sample | (set(runs) if pattern == "worst" else set()))


@dataclass(frozen=True)
class InferenceSettings:
    """What :func:`run_inference` runs.

    Attributes
    ----------
    K, N : int
        Queries per batch (blocks) and coded queries per batch (coded blocks).
    classifiers : tuple of str
        From :data:`CLASSIFIERS`.
    codes : tuple of str
        From :data:`CODES` (all at the same N).
    max_sets : int
        Straggler sets per count beyond which the sweep samples.
    max_iter : int
        Training iterations of the classifiers.
    cluster : bool
        Also run the end-to-end cluster part.
    workers : int
        Workers of the embedded cluster (>= N).
    rounds : int
        Cluster jobs per code.
    p, delay : float
        Cluster stragglers: each coded task ``delay`` seconds late with probability ``p``.
    seed : int
    """

    K: int = 6
    N: int = 12
    classifiers: tuple[str, ...] = CLASSIFIERS
    codes: tuple[str, ...] = CODES
    max_sets: int = 1000
    max_iter: int = 1000
    cluster: bool = True
    workers: int = 12
    rounds: int = 10
    p: float = 0.2
    delay: float = 0.5
    seed: int = 0

    def check(self) -> None:
        """Raise ``ValueError`` naming the bad setting."""
        if not 1 <= self.K < self.N:
            raise ValueError(f"need 1 <= K < N, got K={self.K}, N={self.N}")
        if self.cluster and self.N > self.workers:
            raise ValueError(f"N={self.N} coded tasks need N workers, have {self.workers}")
        for c in self.classifiers:
            if c not in CLASSIFIERS:
                raise ValueError(f"unknown classifier {c!r}; choose from {CLASSIFIERS}")
        for c in self.codes:
            if c not in CODES:
                raise ValueError(f"unknown code {c!r}; choose from {CODES}")
        if self.max_sets < 1 or self.rounds < 1 or self.max_iter < 1:
            raise ValueError("max_sets, rounds and max_iter must be >= 1")


SMOKE = InferenceSettings(
    K=3, N=6, max_sets=20, max_iter=30, workers=6, rounds=2, p=0.3, delay=0.05
)


def sweep(
    clf: Any, queries: np.ndarray, labels: np.ndarray, settings: InferenceSettings
) -> dict[str, Any]:
    """Accuracy against the number of stragglers for every code (pure NumPy).

    Returns
    -------
    dict
        ``uncoded`` accuracy and, per code, ``stragglers`` (0 .. N-K) and per pattern the
        accuracy at each count (each pattern holds ``mean``/``min``/``max`` over its sets;
        the tables read ``random`` by its mean, ``adjacent`` and ``worst`` by their
        minimum), ``sets`` (straggler sets looked at per count) and ``answered_worst`` (the
        smallest share of queries decodable over the sets).
    """
    s_ = settings
    K, N = s_.K, s_.N
    B = len(queries) // K
    blocks = queries[: K * B].reshape(K, B, -1)
    truth = labels[: K * B].reshape(K, B)
    out: dict[str, Any] = {
        "queries": K * B,
        "batches": B,
        "uncoded": float(
            np.mean(clf.predict_proba(blocks.reshape(K * B, -1)).argmax(1) == truth.ravel())
        ),
        "codes": {},
    }
    counts = list(range(N - K + 1))
    for name in s_.codes:
        code = make_code(name, K, N)
        coded = code.encode(blocks)
        results = np.stack([clf.predict_proba(c) for c in coded])
        rng = np.random.default_rng([s_.seed, 7])
        rec: dict[str, Any] = {"stragglers": counts, "sets": [], "answered_worst": []}
        for p in PATTERNS:
            rec[p] = {"mean": [], "min": [], "max": []}
        for s in counts:
            seen: dict[tuple[int, ...], tuple[float, float]] = {}  # set -> (accuracy, answered)
            for p in PATTERNS:
                sets = straggler_sets(N, s, p, s_.max_sets, rng)
                for missing in sets:
                    if missing not in seen:
                        returned = np.array([i for i in range(N) if i not in set(missing)])
                        pred = decode_labels(code, results, returned)
                        seen[missing] = (float(np.mean(pred == truth)), float(np.mean(pred >= 0)))
                accs = [seen[m][0] for m in sets]
                rec[p]["mean"].append(float(np.mean(accs)))
                rec[p]["min"].append(float(np.min(accs)))
                rec[p]["max"].append(float(np.max(accs)))
                if p == "worst":
                    rec["sets"].append(len(accs))
                    rec["answered_worst"].append(min(seen[m][1] for m in sets))
        out["codes"][name] = rec
    return out


def cluster_run(
    classifiers: dict[str, Any], queries: np.ndarray, labels: np.ndarray, s_: InferenceSettings
) -> dict[str, Any]:
    """Serve the queries through ``CodedData.map`` under injected stragglers.

    Every round runs one job per classifier and code (plus ``uncoded``, K tasks waiting for
    all), in a seeded shuffled order. Each decoded output is compared with the NumPy decode
    of the same returned set.
    """
    import dask
    from distributed import Client, LocalCluster

    import dask_bacc
    from dask_bacc.testing import Bimodal, clear_stragglers, inject_stragglers

    K, N = s_.K, s_.N
    B = len(queries) // K
    Q, truth = queries[: K * B], labels[: K * B]
    names = ("uncoded", *s_.codes)
    out: dict[str, Any] = {
        c: {n: {"latency": [], "accuracy": [], "used": [], "max_abs_diff": []} for n in names}
        for c in classifiers
    }
    order = np.random.default_rng([s_.seed, 8])
    with (
        dask.config.set({"distributed.admin.low-level-log-length": 50}),
        LocalCluster(
            n_workers=s_.workers,
            threads_per_worker=1,
            processes=False,
            dashboard_address=":0",
            memory_limit=0,
        ) as cluster,
        Client(cluster) as client,
    ):
        client.wait_for_workers(s_.workers)
        data = {}
        for n in names:
            kw = {} if n == "uncoded" else {"n_coded": N}
            data[n] = dask_bacc.encode(Q, code=n, n_blocks=K, client=client, **kw)
            data[n].wait()
        for clf in classifiers.values():  # warm up, no stragglers yet
            for n in names:
                data[n].map(predict_proba, clf, combine="concat")
        inject_stragglers(Bimodal(p=s_.p, delay=s_.delay), seed=s_.seed, client=client)
        for _ in range(s_.rounds):
            jobs = [(c, n) for c in classifiers for n in names]
            for j in order.permutation(len(jobs)):
                cname, n = jobs[j]
                clf, code = classifiers[cname], data[n].code
                t0 = time.perf_counter()
                job = data[n].submit(predict_proba, clf, combine="concat")
                probs = job.result()
                latency = time.perf_counter() - t0
                returned = np.asarray(sorted(job.report.returned))
                # the same decode off the cluster, from the same returned workers
                coded = code.encode(Q.reshape(K, B, -1))
                local = code.decode(
                    np.stack([clf.predict_proba(coded[i]) for i in returned]), returned
                ).reshape(K * B, -1)
                r = out[cname][n]
                r["latency"].append(latency)
                r["accuracy"].append(float(np.mean(probs.argmax(1) == truth)))
                r["used"].append(len(returned))
                r["max_abs_diff"].append(float(np.max(np.abs(probs - local))))
        clear_stragglers(client)
        for d in data.values():
            d.release()
    for per_code in out.values():
        for r in per_code.values():
            r["summary"] = {
                "latency_p50": float(np.median(r["latency"])),
                "latency_p90": float(np.quantile(r["latency"], 0.9)),
                "accuracy_mean": float(np.mean(r["accuracy"])),
                "accuracy_min": float(np.min(r["accuracy"])),
                "used_mean": float(np.mean(r["used"])),
                "max_abs_diff": float(np.max(r["max_abs_diff"])),
            }
    return out


def run_inference(settings: InferenceSettings, echo: Any = None) -> dict[str, Any]:
    """Train the classifiers, run the sweep and (optionally) the cluster part.

    Returns
    -------
    dict
        JSON-ready: ``settings``, per classifier ``train_accuracy``, ``sweep`` (see
        :func:`sweep`) and, with ``cluster``, ``cluster`` (see :func:`cluster_run`).
    """
    settings.check()
    s_ = settings
    say = echo or (lambda line: None)
    import sklearn

    t_start = time.perf_counter()
    load_start = os.getloadavg()  # other load on the machine skews the cluster latencies
    X_train, y_train, X_test, y_test = load_queries(s_.seed)
    classifiers = {
        c: train_classifier(c, X_train, y_train, s_.seed, s_.max_iter) for c in s_.classifiers
    }
    result: dict[str, Any] = {
        "settings": asdict(s_),
        "classifiers": {},
    }
    for cname, clf in classifiers.items():
        t0 = time.perf_counter()
        sw = sweep(clf, X_test, y_test, s_)
        result["classifiers"][cname] = {
            "train_accuracy": float(clf.score(X_train, y_train)),
            "sweep": sw,
        }
        say(f"{cname}: sweep done in {time.perf_counter() - t0:.1f} s, uncoded {sw['uncoded']:.3f}")
    if s_.cluster:
        t0 = time.perf_counter()
        cl = cluster_run(classifiers, X_test, y_test, s_)
        for cname in classifiers:
            result["classifiers"][cname]["cluster"] = cl[cname]
        say(f"cluster part done in {time.perf_counter() - t0:.1f} s")
    result["wall_seconds"] = time.perf_counter() - t_start
    result["environment"] = {
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "numpy": np.__version__,
        "scikit-learn": sklearn.__version__,
        "load_average_start": load_start,
        "load_average_end": os.getloadavg(),
    }
    return result


# -- report -------------------------------------------------------------------------------


def format_tables(result: dict[str, Any]) -> str:
    """Markdown: accuracy against stragglers per classifier and code; the cluster run."""
    st = result["settings"]
    lines = []
    for cname, rec in result["classifiers"].items():
        sw = rec["sweep"]
        counts = next(iter(sw["codes"].values()))["stragglers"]
        lines.append(
            f"**{cname}** (K={st['K']}, N={st['N']}, {sw['queries']} queries in "
            f"{sw['batches']} batches; uncoded accuracy {sw['uncoded']:.3f})\n"
        )
        head = "| code | pattern | " + " | ".join(f"s={s}" for s in counts) + " |"
        lines += [head, "|---|---|" + "--:|" * len(counts)]
        for code, r in sw["codes"].items():
            for p in PATTERNS:
                vals = r[p]["mean"] if p == "random" else r[p]["min"]
                lines.append(f"| {code} | {p} | " + " | ".join(f"{v:.3f}" for v in vals) + " |")
        lines.append("")
        if "cluster" in rec:
            lines.append(
                "| cluster run | jobs | latency p50 (s) | latency p90 (s) | accuracy mean "
                "| accuracy min | results used | max abs diff to NumPy decode |"
            )
            lines.append("|---|--:|--:|--:|--:|--:|--:|--:|")
            for code, r in rec["cluster"].items():
                sm = r["summary"]
                lines.append(
                    f"| {code} | {len(r['latency'])} | {sm['latency_p50']:.3f} "
                    f"| {sm['latency_p90']:.3f} | {sm['accuracy_mean']:.3f} "
                    f"| {sm['accuracy_min']:.3f} | {sm['used_mean']:.1f} "
                    f"| {sm['max_abs_diff']:.1e} |"
                )
            lines.append("")
    return "\n".join(lines)


def plot(result: dict[str, Any], out_dir: str) -> list[str]:
    """Accuracy against the number of stragglers, one PNG per classifier (3 panels)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    st = result["settings"]
    paths = []
    for cname, rec in result["classifiers"].items():
        sw = rec["sweep"]
        fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), sharey=True)
        titles = {
            "random": "random stragglers (mean over sets)",
            "adjacent": "adjacent stragglers (worst run)",
            "worst": "worst straggler set",
        }
        for ax, p in zip(axes, PATTERNS, strict=True):
            for code, r in sw["codes"].items():
                vals = r[p]["mean"] if p == "random" else r[p]["min"]
                ax.plot(r["stragglers"], vals, marker="o", ms=3, label=code)
            ax.axhline(sw["uncoded"], color="black", ls="--", lw=1, label="uncoded (wait for all)")
            ax.set_title(titles[p], fontsize=9)
            ax.set_xlabel("stragglers (results missing of N)")
            ax.grid(alpha=0.3)
        axes[0].set_ylabel("test accuracy")
        axes[0].set_ylim(0, 1.02)
        axes[-1].legend(loc="lower left", fontsize=8)
        fig.suptitle(f"{cname}: K={st['K']} queries per batch, N={st['N']} coded", fontsize=10)
        fig.tight_layout()
        path = os.path.join(out_dir, f"inference_{cname}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def output_dir(out: str | None) -> str:
    """``--out``, else a new ``./dask-bacc-output/coded_inference-<date>-<time>/`` (created)."""
    return _output_dir(out, "coded_inference")


def main(argv: list[str] | None = None) -> int:
    """Command line: run, print the tables, write ``inference.json`` and the PNGs."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    d = InferenceSettings()
    parser.add_argument("--smoke", action="store_true", help="a few seconds: tiny grid")
    parser.add_argument(
        "--out",
        default=None,
        help="folder for the JSON and PNGs (default: a new folder "
        f"./{OUTPUT_ROOT}/coded_inference-<date>-<time>/; --out docs/iterative regenerates the "
        "figures of docs/iterative.md)",
    )
    parser.add_argument("-K", "--blocks", type=int, default=d.K)
    parser.add_argument("-N", "--coded", type=int, default=d.N)
    parser.add_argument("--classifiers", default=",".join(d.classifiers))
    parser.add_argument("--codes", default=",".join(d.codes))
    parser.add_argument("--max-sets", type=int, default=d.max_sets)
    parser.add_argument("--no-cluster", action="store_true", help="the NumPy sweep only")
    parser.add_argument("--workers", type=int, default=d.workers)
    parser.add_argument("--rounds", type=int, default=d.rounds)
    parser.add_argument("--p", type=float, default=d.p)
    parser.add_argument("--delay", type=float, default=d.delay)
    parser.add_argument("--seed", type=int, default=d.seed)
    args = parser.parse_args(argv)
    if args.smoke:
        settings = SMOKE
    else:
        settings = InferenceSettings(
            K=args.blocks,
            N=args.coded,
            classifiers=tuple(c for c in args.classifiers.split(",") if c),
            codes=tuple(c for c in args.codes.split(",") if c),
            max_sets=args.max_sets,
            cluster=not args.no_cluster,
            workers=args.workers,
            rounds=args.rounds,
            p=args.p,
            delay=args.delay,
            seed=args.seed,
        )
    try:
        settings.check()
    except ValueError as exc:
        parser.error(str(exc))
    result = run_inference(settings, echo=lambda line: print(line, file=sys.stderr))
    out = output_dir(args.out)
    path = os.path.join(out, "inference.json")
    with open(path, "w") as fh:
        json.dump(result, fh, indent=1)
    paths = plot(result, out)
    print(format_tables(result))
    print(f"wrote {path}, " + ", ".join(paths))
    print(f"wall time {result['wall_seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
