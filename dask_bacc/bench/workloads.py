"""The regime map's workloads and its straggler wrapper (``benchmarks/regimes.py``).

Everything here runs on worker processes, so it lives in an importable module (a class of
a script's ``__main__`` would travel by value with every task).

Stragglers are injected by :class:`Straggling`, a wrapper around ``f`` that sleeps after
``f`` returned, by a delay drawn from a :mod:`dask_bacc.testing` straggler model. Unlike
the eval-hook plugin (:func:`dask_bacc.testing.inject_stragglers`), whose delays end when a
coded job is done, a wrapped task keeps its worker thread busy until its delay is over,
whether its job still wants it or not: what a straggling task does on a real cluster
(Dask cannot interrupt a running task), so a cancelled straggler costs the same thread
time to every strategy, plain Dask's included, and the same wrapper serves every path
(plain ``client.map``, coded jobs, exact copies of a DataFrame layer).
"""

from __future__ import annotations

import itertools
import threading
import time
import zlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

__all__ = [
    "FrameTask",
    "InferenceTask",
    "SleepTask",
    "Straggling",
    "digits_model",
    "digits_rows",
    "frame_partition",
    "thread_seconds",
    "worker_name",
]

_counter = itertools.count()
_lock = threading.Lock()
_busy = [0.0]  # thread-seconds of every Straggling call in this process, delays included


def thread_seconds() -> float:
    """Thread-seconds the :class:`Straggling` tasks of this process have taken so far
    (``func`` and the delay: what a straggler costs its worker)."""
    with _lock:
        return _busy[0]


def worker_name() -> str:
    """The name of the worker running the current task ("" outside a worker)."""
    try:
        from distributed import get_worker

        return str(get_worker().name)
    except (ImportError, ValueError):
        return ""


class Straggling:
    """``func`` followed by a straggler model's delay (thread time, not interruptible).

    Parameters
    ----------
    func : callable
        The task function.
    model : dask_bacc.testing.StragglerModel
        Draws the delay: ``model.task_delay(seed, job, index, worker_name, elapsed)``, where
        ``elapsed`` is ``func``'s own time and ``index`` is unique per call in a worker
        process (so two copies of one block draw independently, as two runs of a task on
        two machines straggle independently; per-host models ignore it).
    seed : int
        Seed of the draws.
    job : int
        The job's number: every strategy's job of one round gets the same number, so
        host-wide models (a correlated slowdown, a moving slow set) hit all of them alike.
    """

    def __init__(self, func: Any, model: Any, seed: int, job: int):
        self.func = func  # dask_bacc's function_key reads .func: one calibration per f
        self.model = model
        self.seed = int(seed)
        self.job = int(job)
        self.__name__ = getattr(func, "__name__", type(func).__name__)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        out = self.func(*args, **kwargs)
        elapsed = time.perf_counter() - start
        name = worker_name()
        with _lock:
            n = next(_counter)
        index = zlib.crc32(name.encode()) * 2**24 + n
        delay = float(self.model.task_delay(self.seed, self.job, index, name, elapsed))
        try:
            if delay > 0:
                time.sleep(delay)
        finally:
            with _lock:
                _busy[0] += time.perf_counter() - start
        return out

    def __repr__(self) -> str:
        return f"Straggling({self.func!r}, {self.model!r}, job={self.job})"


@lru_cache(maxsize=8)
def _weights(features: int, work: int, out: int, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng([seed, 11])
    w1 = rng.standard_normal((features, work)) / np.sqrt(features)
    b1 = 0.1 * rng.standard_normal(work)
    w2 = rng.standard_normal((work, out)) / np.sqrt(work)
    return w1, b1, w2


@dataclass(frozen=True)
class SleepTask:
    """Sleep ``duration`` seconds (scheduling cost alone), then a small tanh network.

    The network gives the decode something non-polynomial to approximate; its NumPy work
    is a fraction of a millisecond per block.
    """

    duration: float
    features: int = 8
    work: int = 16
    out: int = 8
    seed: int = 0
    __name__ = "sleep_task"

    def apply(self, block: np.ndarray) -> np.ndarray:
        """The result without the sleep (the exact answer the decode is compared with)."""
        w1, b1, w2 = _weights(self.features, self.work, self.out, self.seed)
        return np.tanh(np.asarray(block) @ w1 + b1) @ w2

    def __call__(self, block: np.ndarray) -> np.ndarray:
        time.sleep(self.duration)
        return self.apply(block)


@lru_cache(maxsize=2)
def digits_model(hidden: int = 128, seed: int = 0) -> tuple[np.ndarray, ...]:
    """An MLP classifier of scikit-learn's digits, trained once per process.

    Returns
    -------
    tuple of ndarray
        ``(W1, b1, W2, b2)`` of a ReLU network: 64 pixels -> ``hidden`` -> 10 classes.
    """
    import warnings

    from sklearn.datasets import load_digits
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    X, y = load_digits(return_X_y=True)
    clf = MLPClassifier(hidden_layer_sizes=(hidden,), max_iter=60, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(X / 16.0, y)
    w1, w2 = clf.coefs_
    b1, b2 = clf.intercepts_
    return tuple(np.ascontiguousarray(a, dtype=np.float64) for a in (w1, b1, w2, b2))


class InferenceTask:
    """CPU-bound inference: class probabilities of the digits MLP for each row of a block.

    The weights travel with the task (about 80 kB at 128 hidden units), trained once on
    the client, so no worker spends its first task training. BLAS runs on one thread (the
    test bed sets ``OMP_NUM_THREADS=1``; :mod:`threadpoolctl` enforces it here too).

    Parameters
    ----------
    hidden : int
        Hidden units of the ReLU layer.
    seed : int
        Seed of the training.
    """

    __name__ = "digits_mlp"

    def __init__(self, hidden: int = 128, seed: int = 0):
        self.hidden, self.seed = int(hidden), int(seed)
        self.weights = digits_model(self.hidden, self.seed)

    def apply(self, block: np.ndarray) -> np.ndarray:
        """Softmax probabilities, ``(rows, 10)``."""
        from threadpoolctl import threadpool_limits

        w1, b1, w2, b2 = self.weights
        with threadpool_limits(1):
            h = np.maximum(np.asarray(block) @ w1 + b1, 0.0)
            z = h @ w2 + b2
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        return p / p.sum(axis=1, keepdims=True)

    def __call__(self, block: np.ndarray) -> np.ndarray:
        return self.apply(block)

    def __repr__(self) -> str:
        return f"InferenceTask(hidden={self.hidden}, seed={self.seed})"


def digits_rows(n: int, seed: int) -> np.ndarray:
    """``n`` rows of digit images (resampled from scikit-learn's 1797, lightly jittered),
    scaled to [0, 1]: i.i.d. rows as an inference service meets them."""
    from sklearn.datasets import load_digits

    X, _ = load_digits(return_X_y=True)
    rng = np.random.default_rng([seed, 12])
    rows = X[rng.integers(0, len(X), n)] / 16.0
    return np.clip(rows + 0.05 * rng.standard_normal(rows.shape), 0.0, 1.0)


def frame_partition(i: int, rows: int, seed: int = 0) -> Any:
    """Partition ``i`` of the data-heavy DataFrame: ``rows`` rows of four float columns
    (generated where it is loaded, as a read from storage would be)."""
    import pandas as pd

    rng = np.random.default_rng([seed, 13, i])
    data = rng.standard_normal((rows, 4))
    return pd.DataFrame(
        data, columns=["a", "b", "c", "d"], index=pd.RangeIndex(i * rows, (i + 1) * rows)
    )


@dataclass(frozen=True)
class FrameTask:
    """A per-row feature transform of a DataFrame partition (real NumPy work per row)."""

    work: int = 16
    seed: int = 0
    __name__ = "frame_features"

    def __call__(self, df: Any) -> Any:
        import pandas as pd

        w1, b1, w2 = _weights(4, self.work, 2, self.seed)
        out = np.tanh(df.to_numpy() @ w1 + b1) @ w2
        return pd.DataFrame(out, columns=["u", "v"], index=df.index)
