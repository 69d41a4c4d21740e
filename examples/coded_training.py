"""Coded training: full-batch gradient descent, per-block gradients from ``CodedData.map``.

Run it with::

    python examples/coded_training.py                       # full run, ~3 min on 2 cores
    python examples/coded_training.py --smoke               # a few seconds (used by the tests)
    python examples/coded_training.py --out docs/iterative  # regenerate the docs' figures
    python examples/coded_training.py --help

Unless ``--out`` names a folder, ``training.json`` and the PNGs go to a new one under the
current directory, ``./dask-bacc-output/coded_training-<date>-<time>/``.

Two models are trained on scikit-learn's bundled ``load_digits`` (1797 8x8 images, nothing
is downloaded), in NumPy: multinomial logistic regression and a one-hidden-layer MLP (tanh,
softmax output). The training rows, shuffled, are split into K blocks; each block holds the
features and the one-hot labels side by side (``[X | Y]``), so one :class:`dask_bacc.CodedData`
carries both. Every step computes ``sum_j grad_j(w)``, the gradient summed over the rows of
block j, on the cluster, and takes ``w -= lr * grad / n_rows``.

Five strategies, in one run on one embedded ``LocalCluster``:

``uncoded``
    ``dask_bacc.encode(data, code="uncoded")``: K pinned tasks, waits for every block.
``ignore-stragglers``
    Plain futures: ``client.submit`` of block j pinned to the worker uncoded uses for it,
    ``as_completed``, keep the first ``k`` block gradients, cancel the rest, and rescale the
    sum by ``K / k`` (an unbiased estimate when the missing blocks are a random subset).
``repetition``
    ``code="repetition"`` at the same N as the Berrut codes (exact once a copy of each block
    returned).
``berrut``, ``systematic-berrut``
    Approximate: decode from the first 75% of the N coded results (the default wait) plus the
    grace period. Berrut decodes an approximation of ``grad_j`` for every block; their sum is
    the step's gradient (``combine="stack"`` gives the K per-block outputs).

The same stragglers for every strategy
--------------------------------------
Stragglers are drawn per ``(step, worker)``: at step t, the task that runs on worker w waits
``draw_delay(model, seed, t, w)`` seconds after computing its gradient (a
:class:`~dask_bacc.testing.Bimodal` or :class:`~dask_bacc.testing.ShiftedExponential`
model, seeded). So at every step the same workers are slow for every strategy; a strategy
with more tasks (N = 2K) meets more of them. The library's ``inject_stragglers`` is not used
here because its draws are keyed by the job's sequence number, which differs between
strategies. The wait polls :func:`dask_bacc.cancelled`, so a coded straggler stops as soon as
its step has decoded; a plain task (``ignore-stragglers``) cannot be stopped and sleeps on.

Steps of the five strategies are interleaved (order shuffled per step, seeded), so machine
drift hits them alike. After every step the run waits, untimed, until no worker thread is
busy: no strategy inherits another's leftovers. The time a plain straggler kept its worker
after its step had moved on is reported as ``leftover``; what uncancellable stragglers cost
when they are *not* waited out is measured by ``benchmarks/iterative.py``.

Time is the wall-clock of each step on the client (from the call to the gradient in hand),
plus the one-off encoding; test accuracy is evaluated off the clock.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from dask_bacc.bench.report import OUTPUT_ROOT
from dask_bacc.bench.report import output_dir as _output_dir

STRATEGIES: tuple[str, ...] = (
    "uncoded",
    "ignore-stragglers",
    "repetition",
    "berrut",
    "systematic-berrut",
)
MODELS: tuple[str, ...] = ("logreg", "mlp")
N_FEATURES, N_CLASSES = 64, 10


# -- data and models (pure NumPy) ---------------------------------------------------------


def load_data(
    blocks: int, test_fraction: float = 0.2, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Digits as training rows ``[X | one-hot y]`` and a held-out test set.

    Parameters
    ----------
    blocks : int
        K; the training rows are trimmed to a multiple of it (at most K - 1 rows dropped).
    test_fraction : float
        Share of the 1797 images held out for testing.
    seed : int
        Seed of the shuffle. Shuffled rows make the K blocks alike, which Berrut's
        interpolation across blocks relies on.

    Returns
    -------
    train : numpy.ndarray
        ``(n, 64 + 10)``: pixels scaled to [0, 1], then the one-hot label.
    X_test, y_test : numpy.ndarray
        ``(m, 64)`` pixels and ``(m,)`` labels.
    """
    from sklearn.datasets import load_digits

    digits = load_digits()
    X = digits.data / 16.0
    y = digits.target
    order = np.random.default_rng([seed, 0]).permutation(len(X))
    X, y = X[order], y[order]
    n_test = round(test_fraction * len(X))
    X_test, y_test = X[:n_test], y[:n_test]
    X_train, y_train = X[n_test:], y[n_test:]
    n = (len(X_train) // blocks) * blocks
    train = np.hstack([X_train[:n], np.eye(N_CLASSES)[y_train[:n]]])
    return train, X_test, y_test


def _softmax_minus_onehot(logits: np.ndarray, onehot: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    return p - onehot


def logreg_init(seed: int) -> np.ndarray:
    """Zero weights ``(64 * 10 + 10,)`` for multinomial logistic regression."""
    return np.zeros(N_FEATURES * N_CLASSES + N_CLASSES)


def logreg_logits(w: np.ndarray, X: np.ndarray) -> np.ndarray:
    """``X W + b`` with ``W, b`` unpacked from the flat parameter vector ``w``."""
    W = w[: N_FEATURES * N_CLASSES].reshape(N_FEATURES, N_CLASSES)
    return X @ W + w[N_FEATURES * N_CLASSES :]


def logreg_grad(block: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Gradient of the cross-entropy summed over the rows of ``block = [X | Y]`` (flat)."""
    X, Y = block[:, :N_FEATURES], block[:, N_FEATURES:]
    g = _softmax_minus_onehot(logreg_logits(w, X), Y)
    return np.concatenate([(X.T @ g).ravel(), g.sum(axis=0)])


HIDDEN = 32


def _mlp_unpack(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    d, h, c = N_FEATURES, HIDDEN, N_CLASSES
    W1 = w[: d * h].reshape(d, h)
    b1 = w[d * h : d * h + h]
    W2 = w[d * h + h : d * h + h + h * c].reshape(h, c)
    b2 = w[d * h + h + h * c :]
    return W1, b1, W2, b2


def mlp_init(seed: int) -> np.ndarray:
    """Seeded small random weights of the 64-32-10 MLP, flat."""
    rng = np.random.default_rng([seed, 1])
    W1 = rng.standard_normal((N_FEATURES, HIDDEN)) / 8.0
    W2 = rng.standard_normal((HIDDEN, N_CLASSES)) / np.sqrt(HIDDEN)
    return np.concatenate([W1.ravel(), np.zeros(HIDDEN), W2.ravel(), np.zeros(N_CLASSES)])


def mlp_logits(w: np.ndarray, X: np.ndarray) -> np.ndarray:
    """``tanh(X W1 + b1) W2 + b2``."""
    W1, b1, W2, b2 = _mlp_unpack(w)
    return np.tanh(X @ W1 + b1) @ W2 + b2


def mlp_grad(block: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Backpropagated cross-entropy gradient summed over the rows of ``block`` (flat)."""
    X, Y = block[:, :N_FEATURES], block[:, N_FEATURES:]
    W1, b1, W2, b2 = _mlp_unpack(w)
    h = np.tanh(X @ W1 + b1)
    g = _softmax_minus_onehot(h @ W2 + b2, Y)
    gh = (g @ W2.T) * (1.0 - h * h)
    return np.concatenate([(X.T @ gh).ravel(), gh.sum(axis=0), (h.T @ g).ravel(), g.sum(axis=0)])


#: model name -> (init, per-block gradient, logits)
MODEL_FUNCS: dict[str, tuple[Callable, Callable, Callable]] = {
    "logreg": (logreg_init, logreg_grad, logreg_logits),
    "mlp": (mlp_init, mlp_grad, mlp_logits),
}


def accuracy(model: str, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
    """Share of ``X``'s rows whose predicted class is ``y``."""
    return float(np.mean(MODEL_FUNCS[model][2](w, X).argmax(axis=1) == y))


# -- what runs on the workers -------------------------------------------------------------


def straggle(step: int, stragglers: tuple[Any, int] | None, poll: float = 0.005) -> None:
    """Wait the delay drawn for ``(step, this worker)``; stop early if the coded job is done.

    Parameters
    ----------
    step : int
        Training step (the same for every strategy at that step).
    stragglers : (StragglerModel, seed) or None
        The model and seed of the draws; None: no delay.
    poll : float
        Seconds between checks of :func:`dask_bacc.cancelled` (always False in a plain task,
        which therefore sleeps the whole delay).
    """
    if stragglers is None:
        return
    from distributed import get_worker

    import dask_bacc
    from dask_bacc.testing import draw_delay

    model, seed = stragglers
    name = get_worker().name
    index = int(name) if str(name).isdigit() else abs(hash(str(name))) % 1_000_003
    end = time.perf_counter() + draw_delay(model, seed, step, index, str(name))
    while (left := end - time.perf_counter()) > 0 and not dask_bacc.cancelled():
        time.sleep(min(left, poll))


def block_gradient(
    block: np.ndarray, w: np.ndarray, model: str, step: int, stragglers: tuple[Any, int] | None
) -> np.ndarray:
    """The task every strategy runs: ``model``'s gradient summed over ``block``, then straggle."""
    g = MODEL_FUNCS[model][1](np.asarray(block), w)
    straggle(step, stragglers)
    return g


# -- strategies ---------------------------------------------------------------------------


class _Coded:
    """A dask-bacc strategy: the blocks encoded once, one ``CodedData.map`` per step."""

    def __init__(self, name: str, client: Any, train: np.ndarray, K: int, N: int):
        import dask_bacc

        self.name = name
        kw = {} if name == "uncoded" else {"n_coded": N}
        self.data = dask_bacc.encode(train, code=name, n_blocks=K, client=client, **kw)
        self.data.wait()
        self.tasks = self.data.code.N
        self.workers = list(self.data.workers)

    def gradient(
        self, w: np.ndarray, model: str, step: int, stragglers: Any
    ) -> tuple[np.ndarray, dict[str, Any]]:
        job = self.data.submit(block_gradient, w, model, step, stragglers, combine="stack")
        per_block = job.result()
        rep = job.report
        return per_block.sum(axis=0), {
            "used": len(rep.returned),
            "cancelled": rep.cancelled,
            "exact": self.data.code.is_exact(rep.returned),
            "workers": [w for w in rep.workers if w],
            "rerouted": len(rep.rerouted),
        }

    def close(self) -> None:
        self.data.release()


class _IgnoreStragglers:
    """Plain futures: first ``k`` of the K block gradients, rescaled by ``K / k``."""

    def __init__(self, client: Any, train: np.ndarray, K: int, k: int, workers: Sequence[str]):
        self.name = "ignore-stragglers"
        self.client, self.K, self.k = client, K, k
        self.workers = list(workers)
        self.blocks = [
            client.scatter(b, workers=[a]) for b, a in zip(np.split(train, K), workers, strict=True)
        ]
        self.tasks = K

    def gradient(
        self, w: np.ndarray, model: str, step: int, stragglers: Any
    ) -> tuple[np.ndarray, dict[str, Any]]:
        from distributed import as_completed

        tag = uuid.uuid4().hex[:8]
        futures = [
            self.client.submit(
                block_gradient,
                block,
                w,
                model,
                step,
                stragglers,
                key=f"ignore-grad-{tag}-{j}",
                workers=[addr],
                allow_other_workers=False,
            )
            for j, (block, addr) in enumerate(zip(self.blocks, self.workers, strict=True))
        ]
        got = []
        ac = as_completed(futures, with_results=True)
        for _fut, g in ac:
            got.append(g)
            if len(got) == self.k:
                break
        rest = [f for f in futures if not f.done()]
        if rest:
            self.client.cancel(rest)  # queued ones never start; a running one sleeps on
        ac.clear()
        return np.sum(got, axis=0) * (self.K / self.k), {
            "used": len(got),
            "cancelled": len(rest),
            "exact": len(got) == self.K,
            "workers": self.workers,
            "rerouted": 0,
        }

    def close(self) -> None:
        for b in self.blocks:
            b.release()


# -- the run ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainingSettings:
    """What :func:`run_training` runs.

    Attributes
    ----------
    workers : int
        In-process workers of the embedded ``LocalCluster``, one thread each (>= N).
    K, N : int
        Data blocks and coded tasks (repetition and the Berrut codes run N; uncoded K).
    steps : int
        Gradient steps per model and strategy.
    models : tuple of str
        From :data:`MODELS`.
    strategies : tuple of str
        From :data:`STRATEGIES`.
    lr : dict
        Learning rate per model (on the mean gradient).
    targets : tuple of float
        Test accuracies whose first crossing is reported ("time to target"): one on the
        steep part of the curves and one near the plateau.
    straggler : {"bimodal", "shifted-exp", "none"}
        ``Bimodal(p, delay)`` or ``ShiftedExponential(scale, shift)`` per (step, worker).
    p, delay, scale, shift : float
        Straggler model parameters (seconds).
    ignore_k : int or None
        Block gradients ``ignore-stragglers`` waits for (default ``ceil(0.75 K)``, the same
        fraction of its tasks as the Berrut codes' default wait).
    seed : int
        Seeds the data shuffle, the MLP's initial weights, the straggler draws and the order
        of the strategies in each step.
    """

    workers: int = 12
    K: int = 6
    N: int = 12
    steps: int = 120
    models: tuple[str, ...] = MODELS
    strategies: tuple[str, ...] = STRATEGIES
    lr: tuple[tuple[str, float], ...] = (("logreg", 1.0), ("mlp", 0.5))
    targets: tuple[float, ...] = (0.9, 0.95)
    straggler: str = "bimodal"
    p: float = 0.1
    delay: float = 0.25
    scale: float = 0.05
    shift: float = 0.0
    ignore_k: int | None = None
    seed: int = 0

    @property
    def k_ignore(self) -> int:
        """Block gradients the ignore-stragglers strategy waits for."""
        return self.ignore_k if self.ignore_k is not None else math.ceil(0.75 * self.K)

    def straggler_model(self) -> Any:
        """The :mod:`dask_bacc.testing` model (None for ``"none"``)."""
        from dask_bacc.testing import Bimodal, ShiftedExponential

        if self.straggler == "bimodal":
            return Bimodal(p=self.p, delay=self.delay)
        if self.straggler == "shifted-exp":
            return ShiftedExponential(scale=self.scale, shift=self.shift)
        return None

    def describe_stragglers(self) -> str:
        """One line for reports."""
        if self.straggler == "bimodal":
            return f"each (step, worker) {self.delay:g} s late with probability {self.p:g}"
        if self.straggler == "shifted-exp":
            return f"every (step, worker) waits {self.shift:g} s + Exp(scale {self.scale:g} s)"
        return "no stragglers"

    def check(self) -> None:
        """Raise ``ValueError`` naming the bad setting."""
        if not 1 <= self.K < self.N <= self.workers:
            raise ValueError(
                f"need 1 <= K < N <= workers, got K={self.K} N={self.N} workers={self.workers}"
            )
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        for m in self.models:
            if m not in MODELS:
                raise ValueError(f"unknown model {m!r}; choose from {MODELS}")
        for s in self.strategies:
            if s not in STRATEGIES:
                raise ValueError(f"unknown strategy {s!r}; choose from {STRATEGIES}")
        if self.straggler not in ("bimodal", "shifted-exp", "none"):
            raise ValueError(f"unknown straggler model {self.straggler!r}")
        if not self.targets or not all(0 < t <= 1 for t in self.targets):
            raise ValueError(f"targets must be accuracies in (0, 1], got {self.targets}")
        if not 1 <= self.k_ignore <= self.K:
            raise ValueError(f"ignore_k must lie in [1, K], got {self.k_ignore}")


SMOKE = TrainingSettings(
    workers=6,
    K=2,
    N=4,
    steps=3,
    p=0.3,
    delay=0.05,
    targets=(0.5,),
    lr=(("logreg", 1.0), ("mlp", 1.0)),
)


def _busy(dask_worker: Any) -> int:
    return int(dask_worker.state.executing_count)


def _settle(client: Any, timeout: float = 60.0) -> float:
    """Wait until no worker thread is busy; return the seconds that took."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        if not any(client.run(_busy).values()):
            break
        time.sleep(0.005)
    return time.perf_counter() - t0


def _first_at(values: Sequence[float], target: float) -> int | None:
    for i, v in enumerate(values):
        if v >= target:
            return i
    return None


def run_training(
    settings: TrainingSettings, echo: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Train every model with every strategy on one embedded cluster; return the record.

    Parameters
    ----------
    settings : TrainingSettings
    echo : callable, optional
        Called with progress lines.

    Returns
    -------
    dict
        JSON-ready: ``settings``, ``environment``, and per model and strategy the per-step
        ``time``, ``test_accuracy``, ``grad_rel_error`` (against the exact full gradient),
        ``stragglers_met``, ``used``, ``exact``, ``leftover``, plus ``setup_time``,
        ``time_to_target``/``steps_to_target`` (per target, None if not reached) and summary
        figures.
    """
    import dask
    import distributed
    from distributed import Client, LocalCluster

    settings.check()
    s = settings
    say = echo or (lambda line: None)
    train, X_test, y_test = load_data(s.K, seed=s.seed)
    model = s.straggler_model()
    stragglers = None if model is None else (model, s.seed)
    lr = dict(s.lr)
    order_rng = np.random.default_rng([s.seed, 3])
    from dask_bacc.testing import draw_delay

    results: dict[str, Any] = {m: {} for m in s.models}
    t_start = time.perf_counter()
    load_start = os.getloadavg()  # other load on the machine skews absolute times
    with (
        dask.config.set({"distributed.admin.low-level-log-length": 50}),
        LocalCluster(
            n_workers=s.workers,
            threads_per_worker=1,
            processes=False,
            dashboard_address=":0",
            memory_limit=0,
        ) as cluster,
        Client(cluster) as client,
    ):
        client.wait_for_workers(s.workers)
        names = {a: w["name"] for a, w in client.scheduler_info(n_workers=-1)["workers"].items()}

        def met(step: int, addrs: Sequence[str]) -> int:
            # the replayed draws: how many of this step's tasks were slow
            if model is None:
                return 0
            return sum(
                draw_delay(model, s.seed, step, int(names[a]), str(names[a])) > 0 for a in addrs
            )

        for mname in s.models:
            init, grad, _ = MODEL_FUNCS[mname]
            # warm up and set up every strategy (encoding is timed as each one's setup)
            runners: dict[str, Any] = {}
            setup: dict[str, float] = {}
            for name in s.strategies:
                if name == "ignore-stragglers":
                    continue
                t0 = time.perf_counter()
                runners[name] = _Coded(name, client, train, s.K, s.N)
                setup[name] = time.perf_counter() - t0
            if "ignore-stragglers" in s.strategies:
                where = runners["uncoded"].workers if "uncoded" in runners else None
                if where is None:
                    info = client.scheduler_info(n_workers=-1)["workers"]
                    where = sorted(info)[: s.K]
                t0 = time.perf_counter()
                client_ignore = _IgnoreStragglers(client, train, s.K, s.k_ignore, where)
                distributed.wait(client_ignore.blocks)
                runners["ignore-stragglers"] = client_ignore
                setup["ignore-stragglers"] = time.perf_counter() - t0
            for r in runners.values():  # one unrecorded step without stragglers each
                r.gradient(init(s.seed), mname, -1, None)
            _settle(client)

            w = {name: init(s.seed) for name in s.strategies}
            rec = {
                name: {
                    "tasks": runners[name].tasks,
                    "setup_time": setup[name],
                    "time": [],
                    "test_accuracy": [],
                    "grad_rel_error": [],
                    "stragglers_met": [],
                    "used": [],
                    "exact": [],
                    "leftover": [],
                }
                for name in s.strategies
            }
            for step in range(s.steps):
                for name in order_rng.permutation(list(s.strategies)):
                    runner, r = runners[name], rec[name]
                    t0 = time.perf_counter()
                    g, info = runner.gradient(w[name], mname, step, stragglers)
                    r["time"].append(time.perf_counter() - t0)
                    r["leftover"].append(_settle(client))
                    exact = grad(train, w[name])
                    r["grad_rel_error"].append(
                        float(np.linalg.norm(g - exact) / max(np.linalg.norm(exact), 1e-300))
                    )
                    w[name] = w[name] - lr[mname] * g / len(train)
                    r["test_accuracy"].append(accuracy(mname, w[name], X_test, y_test))
                    r["stragglers_met"].append(met(step, info["workers"]))
                    r["used"].append(info["used"])
                    r["exact"].append(bool(info["exact"]))
                if (step + 1) % max(1, s.steps // 6) == 0 or step + 1 == s.steps:
                    say(
                        f"{mname} step {step + 1}/{s.steps}: "
                        + ", ".join(
                            f"{n} {np.mean(rec[n]['time']):.3f}s/step "
                            f"acc {rec[n]['test_accuracy'][-1]:.3f}"
                            for n in s.strategies
                        )
                    )
            for runner in runners.values():
                runner.close()
            for r in rec.values():
                r["cumulative_time"] = list(r["setup_time"] + np.cumsum(r["time"]))
                r["steps_to_target"], r["time_to_target"] = {}, {}
                for target in s.targets:
                    i = _first_at(r["test_accuracy"], target)
                    r["steps_to_target"][f"{target:g}"] = None if i is None else i + 1
                    r["time_to_target"][f"{target:g}"] = (
                        None if i is None else r["cumulative_time"][i]
                    )
                t = np.asarray(r["time"])
                r["summary"] = {
                    "step_time_p50": float(np.median(t)),
                    "step_time_p90": float(np.quantile(t, 0.9)),
                    "step_time_mean": float(t.mean()),
                    "final_accuracy": r["test_accuracy"][-1],
                    "best_accuracy": max(r["test_accuracy"]),
                    "grad_rel_error_median": float(np.median(r["grad_rel_error"])),
                    "exact_steps": int(sum(r["exact"])),
                    "stragglers_met_per_step": float(np.mean(r["stragglers_met"])),
                    "leftover_total": float(np.sum(r["leftover"])),
                    "total_time": r["cumulative_time"][-1],
                }
            results[mname] = rec
    return {
        "settings": {**asdict(s), "lr": dict(s.lr), "k_ignore": s.k_ignore},
        "stragglers": s.describe_stragglers(),
        "environment": {
            **_environment(),
            "load_average_start": load_start,
            "load_average_end": os.getloadavg(),
        },
        "wall_seconds": time.perf_counter() - t_start,
        "models": results,
    }


def _environment() -> dict[str, Any]:
    import dask
    import distributed
    import sklearn

    import dask_bacc

    return {
        "python": platform.python_version(),
        "platform": sys.platform,
        "cpu_count": os.cpu_count(),
        "numpy": np.__version__,
        "dask": dask.__version__,
        "distributed": distributed.__version__,
        "scikit-learn": sklearn.__version__,
        "dask_bacc": dask_bacc.__version__,
    }


# -- report -------------------------------------------------------------------------------


def format_table(result: dict[str, Any]) -> str:
    """Markdown table: per model and strategy, time and steps to the target, step times."""
    targets = [f"{t:g}" for t in result["settings"]["targets"]]
    header = (
        "| model | strategy | tasks | "
        + " | ".join(f"time to {t} (s) | steps to {t}" for t in targets)
        + " | step p50 (s) | step p90 (s) | step mean (s) | final acc. | best acc. "
        "| grad. rel. error (median) | exact steps |"
    )
    lines = [header, "|---|---|" + "--:|" * (header.count(" | ") - 1)]
    for mname, rec in result["models"].items():
        for name, r in rec.items():
            sm = r["summary"]
            reached = []
            for t in targets:
                ttt, stt = r["time_to_target"][t], r["steps_to_target"][t]
                reached.append("not reached | -" if ttt is None else f"{ttt:.2f} | {stt}")
            lines.append(
                f"| {mname} | {name} | {r['tasks']} | {' | '.join(reached)} "
                f"| {sm['step_time_p50']:.3f} "
                f"| {sm['step_time_p90']:.3f} | {sm['step_time_mean']:.3f} "
                f"| {sm['final_accuracy']:.3f} | {sm['best_accuracy']:.3f} "
                f"| {sm['grad_rel_error_median']:.2e} | {sm['exact_steps']}/{len(r['time'])} |"
            )
    return "\n".join(lines)


def plot(result: dict[str, Any], out_dir: str) -> list[str]:
    """Test accuracy against wall-clock time and against steps, one PNG per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    targets = result["settings"]["targets"]
    for mname, rec in result["models"].items():
        fig, (ax_t, ax_s) = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
        for name, r in rec.items():
            acc = r["test_accuracy"]
            ax_t.plot(r["cumulative_time"], acc, label=name, lw=1.3)
            ax_s.plot(np.arange(1, len(acc) + 1), acc, label=name, lw=1.3)
        for ax in (ax_t, ax_s):
            for target in targets:
                ax.axhline(target, color="grey", ls=":", lw=1)
            ax.set_ylim(max(0.0, min(min(r["test_accuracy"]) for r in rec.values()) - 0.02), 1.0)
            ax.grid(alpha=0.3)
        ax_t.set_xlabel("wall-clock time (s, steps + encoding)")
        ax_s.set_xlabel("step")
        ax_t.set_ylabel("test accuracy")
        ax_s.legend(loc="lower right", fontsize=8)
        st = result["settings"]
        fig.suptitle(
            f"{mname}: K={st['K']}, N={st['N']}, {st['workers']} workers; {result['stragglers']}",
            fontsize=10,
        )
        fig.tight_layout()
        path = os.path.join(out_dir, f"training_{mname}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def output_dir(out: str | None) -> str:
    """``--out``, else a new ``./dask-bacc-output/coded_training-<date>-<time>/`` (created)."""
    return _output_dir(out, "coded_training")


def main(argv: list[str] | None = None) -> int:
    """Command line: run, print the table, write ``training.json`` and the PNGs."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    d = TrainingSettings()
    parser.add_argument("--smoke", action="store_true", help="a few seconds: 3 steps, tiny grid")
    parser.add_argument(
        "--out",
        default=None,
        help="folder for the JSON and PNGs (default: a new folder "
        f"./{OUTPUT_ROOT}/coded_training-<date>-<time>/; --out docs/iterative regenerates the "
        "figures of docs/iterative.md)",
    )
    parser.add_argument("--workers", type=int, default=d.workers)
    parser.add_argument("-K", "--blocks", type=int, default=d.K)
    parser.add_argument("-N", "--coded", type=int, default=d.N)
    parser.add_argument("--steps", type=int, default=d.steps)
    parser.add_argument("--models", default=",".join(d.models))
    parser.add_argument("--strategies", default=",".join(d.strategies))
    parser.add_argument(
        "--targets",
        default=",".join(f"{t:g}" for t in d.targets),
        help="test accuracy targets, comma-separated",
    )
    parser.add_argument(
        "--straggler", choices=("bimodal", "shifted-exp", "none"), default=d.straggler
    )
    parser.add_argument("--p", type=float, default=d.p, help="bimodal: probability")
    parser.add_argument("--delay", type=float, default=d.delay, help="bimodal: seconds late")
    parser.add_argument("--scale", type=float, default=d.scale, help="shifted-exp: scale (s)")
    parser.add_argument("--shift", type=float, default=d.shift, help="shifted-exp: shift (s)")
    parser.add_argument("--ignore-k", type=int, default=None, help="k of ignore-stragglers")
    parser.add_argument("--seed", type=int, default=d.seed)
    args = parser.parse_args(argv)
    if args.smoke:
        settings = SMOKE
    else:
        settings = TrainingSettings(
            workers=args.workers,
            K=args.blocks,
            N=args.coded,
            steps=args.steps,
            models=tuple(m for m in args.models.split(",") if m),
            strategies=tuple(x for x in args.strategies.split(",") if x),
            targets=tuple(float(t) for t in args.targets.split(",") if t),
            straggler=args.straggler,
            p=args.p,
            delay=args.delay,
            scale=args.scale,
            shift=args.shift,
            ignore_k=args.ignore_k,
            seed=args.seed,
        )
    try:
        settings.check()
    except ValueError as exc:
        parser.error(str(exc))
    result = run_training(settings, echo=lambda line: print(line, file=sys.stderr))
    out = output_dir(args.out)
    with open(os.path.join(out, "training.json"), "w") as fh:
        json.dump(result, fh, indent=1)
    paths = plot(result, out)
    print(format_table(result))
    print(f"\nwrote {os.path.join(out, 'training.json')}, " + ", ".join(paths))
    print(f"wall time {result['wall_seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
