"""The benchmarks' workloads and their straggler wrapper (``benchmarks/regimes.py``).

The regime map's workloads: :class:`SleepTask` (scheduling cost), :class:`InferenceTask`
(an MLP on scikit-learn's digits; :func:`class_agreement` is what its user measures) and
:class:`FrameTask` (a DataFrame transform). The home regime of the approximate codes, where
``f``'s output varies smoothly from block to block at a fixed row position (issue 42):

* a parameter sweep: :class:`PricerTask`, a fixed-seed Monte Carlo option pricer, over
  :func:`sweep_grid`'s rows, with :func:`price_error` stating an error in currency units and
  :func:`black_scholes_call` the closed form its European column estimates;
* a smooth field: :func:`smooth_field`, an ``xarray.DataArray`` chunked along time, and
  :class:`FieldModel`, a per-pixel model of a ``(time, y, x)`` block.

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
    "SWEEP_COLUMNS",
    "FieldModel",
    "FrameTask",
    "InferenceTask",
    "PricerTask",
    "SleepTask",
    "Straggling",
    "black_scholes_call",
    "class_agreement",
    "digits_model",
    "digits_rows",
    "frame_partition",
    "price_error",
    "smooth_field",
    "sweep_grid",
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


def class_agreement(probs: Any, reference: Any) -> float:
    """Share of rows whose predicted class (argmax) is the reference's.

    What a user of a classifier measures of an approximate decode: the relative error of
    the probabilities says little about how many answers changed.

    Parameters
    ----------
    probs : array_like
        ``(rows, classes)`` scores or probabilities (a decoded output).
    reference : array_like
        ``(rows, classes)`` scores (the exact output), or ``(rows,)`` integer labels.

    Returns
    -------
    float
        In [0, 1]; 1.0 when every row's class agrees.
    """
    predicted = np.asarray(probs).argmax(axis=-1)
    ref = np.asarray(reference)
    if ref.ndim == predicted.ndim + 1:
        ref = ref.argmax(axis=-1)
    if ref.shape != predicted.shape:
        raise ValueError(f"{predicted.shape[0]} rows of predictions, reference {ref.shape}")
    return float(np.mean(predicted == ref))


# -- parameter sweep: a Monte Carlo option pricer over a smooth grid ------------------------

#: Columns of :func:`sweep_grid`'s rows, the pricer's parameters.
SWEEP_COLUMNS: tuple[str, ...] = ("spot", "sigma", "maturity", "strike")


@lru_cache(maxsize=4)
def _brownian(paths: int, steps: int, seed: int) -> np.ndarray:
    """Standard Brownian motion on [0, 1] sampled at ``k / steps``, ``(paths, steps)``: the
    common random numbers every row of every block is priced with."""
    rng = np.random.default_rng([seed, 15])
    z = rng.standard_normal((paths, steps))
    b = np.cumsum(z, axis=1) / np.sqrt(steps)
    b.setflags(write=False)
    return b


@dataclass(frozen=True)
class PricerTask:
    """Monte Carlo prices of a European and an arithmetic-average Asian call, per row.

    Each row of a block is one parameter point ``(spot, sigma, maturity, strike)`` (see
    :func:`sweep_grid`); the underlying follows a geometric Brownian motion with the risk-free
    ``rate``. Every row is priced with the same ``paths`` Brownian paths (common random
    numbers, drawn once per process from ``seed``), so the estimated price is a continuous,
    smooth-looking function of the parameters: two neighbouring rows differ by what their
    parameters change, not by fresh sampling noise. That is what lets a coded map
    interpolate the outputs across blocks; with fresh numbers per call the MC noise (about
    ``price / sqrt(paths)``) would be the decode's floor.

    The cost is ``rows * paths * steps`` exponentials (about 0.1 s for 256 rows at the
    defaults on one core); ``paths`` tunes it. NumPy work, in chunks of rows so the
    temporary stays below ``chunk_elements`` float64 values.

    Parameters
    ----------
    paths : int
        Monte Carlo paths per price (the standard error falls as ``1 / sqrt(paths)``).
    steps : int
        Monitoring dates of the Asian average (equally spaced over the maturity).
    seed : int
        Seed of the common random numbers.
    rate : float
        Continuously compounded risk-free rate.
    delta : bool
        Also return the European call's pathwise delta (a third column).
    chunk_elements : int
        Rows are priced in groups of at most this many path-values at once.
    """

    paths: int = 2000
    steps: int = 24
    seed: int = 0
    rate: float = 0.03
    delta: bool = False
    chunk_elements: int = 2_000_000
    __name__ = "mc_pricer"

    @property
    def columns(self) -> tuple[str, ...]:
        """Names of the output columns."""
        return ("call", "asian", "delta") if self.delta else ("call", "asian")

    def apply(self, block: np.ndarray) -> np.ndarray:
        """Prices of ``block``'s rows, ``(rows, 2)`` (``(rows, 3)`` with ``delta``)."""
        x = np.asarray(block, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != len(SWEEP_COLUMNS):
            raise ValueError(f"rows of {SWEEP_COLUMNS}, got shape {x.shape}")
        b = _brownian(self.paths, self.steps, self.seed)
        frac = np.arange(1, self.steps + 1) / self.steps  # monitoring dates / maturity
        out = np.empty((len(x), len(self.columns)))
        per = max(1, self.chunk_elements // (self.paths * self.steps))
        for lo in range(0, len(x), per):
            s0, sigma, mat, strike = (c[:, None, None] for c in x[lo : lo + per].T)
            t = mat * frac  # (rows, 1, steps)
            # log S_t / S_0 = (r - sigma^2 / 2) t + sigma W_t, with W_t = sqrt(T) B_{t/T}
            s = s0 * np.exp((self.rate - 0.5 * sigma**2) * t + sigma * np.sqrt(mat) * b)
            disc = np.exp(-self.rate * mat[:, :, 0])  # (rows, 1)
            s_end = s[:, :, -1]
            out[lo : lo + per, 0] = (disc * np.maximum(s_end - strike[:, :, 0], 0.0)).mean(1)
            avg = s.mean(axis=2)
            out[lo : lo + per, 1] = (disc * np.maximum(avg - strike[:, :, 0], 0.0)).mean(1)
            if self.delta:
                itm = s_end > strike[:, :, 0]
                out[lo : lo + per, 2] = (disc * itm * s_end / s0[:, :, 0]).mean(1)
        return out

    def __call__(self, block: np.ndarray) -> np.ndarray:
        return self.apply(block)


def sweep_grid(rows: int, seed: int = 0, blocks: int | None = None) -> np.ndarray:
    """Parameter points of a sweep, ``(rows, 4)``, columns :data:`SWEEP_COLUMNS`.

    A coded map combines the blocks row position by row position (coded block ``i`` is a
    weighted sum of the K data blocks) and interpolates ``f``'s outputs across the block
    index, at each row position. So the decode is accurate when, at a fixed row position,
    the parameters (hence the prices) change smoothly from one block to the next, and that
    is what the order of the rows here is for. The sweep is cut into contiguous blocks of
    ``rows / K`` rows:

    * ``blocks=None``: every parameter is a smooth, slowly varying function of the row's
      position ``u = (i + 1/2) / rows`` in the sweep (volatility and maturity ramp up, spot
      and strike swing around the money over less than a period), so any contiguous cut
      gives blocks that are neighbouring arcs of one smooth curve through parameter space.
    * ``blocks=K``: a tensor sweep, as a volatility-surface scan is laid out: block ``j``
      holds one ``(sigma_j, maturity_j)`` from the smooth ramp, and its rows a ladder of
      ``(spot, strike)`` points drawn once (from ``seed``) and repeated in every block, so
      at a fixed row position only ``sigma`` and ``maturity`` change, smoothly, across
      blocks. ``rows`` must be a multiple of ``blocks``.

    A random order (or a ladder that is not the same in every block) would make the price
    at a fixed row position jump from block to block, and an approximate code's error
    would be of the order of the prices themselves.

    Parameters
    ----------
    rows : int
        Number of parameter points.
    seed : int
        Draws the phases of the curve (``blocks=None``) or the ladder (``blocks=K``).
    blocks : int, optional
        The K the sweep will be cut into, for the tensor layout.

    Returns
    -------
    ndarray
        float64 ``(rows, 4)``: spot in [80, 120], sigma in [0.15, 0.45], maturity in
        [0.25, 2] years, strike in [80, 120].
    """
    rng = np.random.default_rng([seed, 16])
    if blocks is None:
        u = (np.arange(rows) + 0.5) / rows
        ph = rng.uniform(0, 2 * np.pi, 2)
        spot = 100 + 20 * np.sin(1.5 * np.pi * u + ph[0])
        strike = 100 + 20 * np.sin(np.pi * u + ph[1])
    else:
        if blocks < 1 or rows % blocks:
            raise ValueError(f"rows={rows} is not a multiple of blocks={blocks}")
        per = rows // blocks
        u = (np.repeat(np.arange(blocks), per) + 0.5) / blocks
        spot = np.tile(rng.uniform(80, 120, per), blocks)
        strike = np.tile(rng.uniform(80, 120, per), blocks)
    sigma = 0.15 + 0.3 * u
    maturity = 0.25 + 1.75 * u**2
    return np.column_stack([spot, sigma, maturity, strike])


def black_scholes_call(
    spot: Any, sigma: Any, maturity: Any, strike: Any, rate: float = 0.03
) -> np.ndarray:
    """The Black-Scholes price of a European call (the exact value :class:`PricerTask`'s
    first column estimates)."""
    from math import erf, sqrt

    s, v, t, k = (np.asarray(a, dtype=np.float64) for a in (spot, sigma, maturity, strike))
    d1 = (np.log(s / k) + (rate + 0.5 * v**2) * t) / (v * np.sqrt(t))
    d2 = d1 - v * np.sqrt(t)
    ncdf = np.vectorize(lambda z: 0.5 * (1.0 + erf(z / sqrt(2.0))), otypes=[np.float64])
    return np.asarray(s * ncdf(d1) - k * np.exp(-rate * t) * ncdf(d2), dtype=np.float64)


def price_error(estimate: Any, exact: Any) -> dict[str, float]:
    """An approximate sweep's error at the sweep's own scale (currency units).

    Parameters
    ----------
    estimate, exact : array_like
        Prices of the same shape (e.g. a decoded :class:`PricerTask` output and the plain
        one; pass the price columns only, not a delta).

    Returns
    -------
    dict
        ``median_abs`` and ``max_abs`` (absolute price error, currency units),
        ``median_price`` (the typical price, for scale: "0.3 cents on a price of 10"),
        ``rel`` (the relative error of the whole output, ``||e - x|| / ||x||``) and
        ``median_rel`` (the median of ``|e - x| / |x|`` over prices above 1% of the median
        price: deep out-of-the-money options' cents would dominate it otherwise).
    """
    e = np.asarray(estimate, dtype=np.float64)
    x = np.asarray(exact, dtype=np.float64)
    if e.shape != x.shape:
        raise ValueError(f"estimate {e.shape} and exact {x.shape} differ in shape")
    err = np.abs(e - x)
    mag = np.abs(x)
    scale = float(np.median(mag))
    big = mag > 0.01 * scale
    norm = float(np.linalg.norm(x))
    return {
        "median_abs": float(np.median(err)),
        "max_abs": float(err.max()),
        "median_price": scale,
        "rel": float(np.linalg.norm(e - x)) / norm if norm > 0 else float("nan"),
        "median_rel": float(np.median(err[big] / mag[big])) if big.any() else float("nan"),
    }


# -- a smooth xarray field and a per-chunk model ---------------------------------------------


def _field_chunk(t: np.ndarray, nt: int, ny: int, nx: int, seed: int, noise: float) -> np.ndarray:
    """The field at the time steps ``t`` (one chunk), ``(len(t), ny, nx)``."""
    rng = np.random.default_rng([seed, 17])
    y = np.linspace(0.0, 1.0, ny)[:, None]
    x = np.linspace(0.0, 1.0, nx)[None, :]
    # a few low spatial modes with random amplitudes and phases: smooth in space
    base = 15.0 + 10.0 * np.cos(np.pi * y) + np.zeros_like(x)
    amp = 6.0 + np.zeros_like(base)
    phase = np.zeros_like(base)
    for ky, kx in ((1, 0), (0, 1), (1, 1), (2, 1)):
        a, b, p, q = rng.uniform(-1, 1, 4)
        mode = np.cos(np.pi * (ky * y + kx * x) + np.pi * p)
        base = base + 2.0 * a * mode
        amp = amp + 1.5 * b * mode
        phase = phase + 0.5 * q * mode
    s = (np.asarray(t, dtype=np.float64) / nt)[:, None, None]
    # one slow cycle over the record plus a trend: smooth along time at every pixel
    out = base + amp * np.sin(2 * np.pi * s + phase) + 3.0 * s
    if noise:
        first = int(t[0]) if len(t) else 0
        out = out + noise * np.random.default_rng([seed, 18, first]).standard_normal(out.shape)
    return out


def smooth_field(
    nt: int, ny: int, nx: int, chunks_t: int, seed: int = 0, noise: float = 0.0
) -> Any:
    """A temperature-like field, smooth in time and space, chunked along time.

    A coded map over an xarray object codes its chunks along the mapped dimension (here
    ``time``, axis 0) and interpolates the per-chunk outputs across the chunk index at each
    ``(time offset, y, x)`` position; a field that varies slowly over the record (one
    annual-like cycle and a trend, amplitudes and phases smooth in space) is the regime
    where that interpolation is accurate. ``noise`` adds independent Gaussian noise per
    value (the decode cannot interpolate it: the error grows with it).

    Parameters
    ----------
    nt, ny, nx : int
        Time steps and grid size.
    chunks_t : int
        Time steps per chunk (the blocks of a coded map: ``nt / chunks_t`` of them).
    seed : int
        Draws the spatial modes (and the noise).
    noise : float
        Standard deviation of the added noise, in the field's units (degrees).

    Returns
    -------
    xarray.DataArray
        float64, dims ``("time", "y", "x")``, coordinates ``time`` (daily dates), ``y``
        (latitude-like) and ``x`` (longitude-like), backed by a lazy dask array with chunks
        ``(chunks_t, ny, nx)``; each chunk is generated where it is computed.
    """
    import dask.array as da
    import pandas as pd
    import xarray as xr

    if nt < 1 or chunks_t < 1:
        raise ValueError(f"need nt >= 1 and chunks_t >= 1, got {nt}, {chunks_t}")
    t = da.arange(nt, chunks=chunks_t, dtype=np.float64)
    data = t.map_blocks(
        _field_chunk,
        nt,
        ny,
        nx,
        seed,
        float(noise),
        new_axis=[1, 2],
        chunks=(t.chunks[0], (ny,), (nx,)),
        dtype=np.float64,
        meta=np.empty((0, 0, 0), dtype=np.float64),
    )
    return xr.DataArray(
        data,
        dims=("time", "y", "x"),
        coords={
            "time": pd.date_range("2000-01-01", periods=nt, freq="D"),
            "y": np.linspace(30.0, 60.0, ny),
            "x": np.linspace(-10.0, 30.0, nx),
        },
        name="temperature",
        attrs={"units": "degC"},
    )


@dataclass(frozen=True)
class FieldModel:
    """A per-pixel model of a ``(time, y, x)`` block: a small tanh network of each value and
    its discrete Laplacian in ``(y, x)`` (the diffusive tendency), returning the same shape.

    Nonlinear in the field, so a coded map has something non-polynomial to interpolate; the
    stencil stays inside each time step, so a block of time steps is all it needs. The cost
    is about ``pixels * hidden`` multiply-adds and ``pixels * hidden`` tanh per block
    (``hidden`` tunes it). Accepts a NumPy block (returns one) or an xarray DataArray block,
    as :func:`dask_bacc.map_coded` passes for xarray input (returns a DataArray with the same
    dims and coordinates).

    Parameters
    ----------
    hidden : int
        Hidden units of the network.
    seed : int
        Seed of its weights.
    """

    hidden: int = 32
    seed: int = 0
    __name__ = "field_model"

    def apply(self, block: np.ndarray) -> np.ndarray:
        """The model on a NumPy block of shape ``(t, y, x)``."""
        v = np.asarray(block, dtype=np.float64)
        if v.ndim != 3:
            raise ValueError(f"a (time, y, x) block, got shape {v.shape}")
        if v.size == 0:  # an empty template block (xarray's and dask's meta inference)
            return v.copy()
        p = np.pad(v, ((0, 0), (1, 1), (1, 1)), mode="edge")
        lap = p[:, :-2, 1:-1] + p[:, 2:, 1:-1] + p[:, 1:-1, :-2] + p[:, 1:-1, 2:] - 4 * v
        w1, b1, w2 = _weights(2, self.hidden, 1, self.seed)
        # scale to order one: the field is tens of degrees, its Laplacian a fraction
        feats = np.stack([(v - 15.0) / 10.0, 10.0 * lap], axis=-1)
        return v + 2.0 * (np.tanh(feats @ w1 + b1) @ w2)[..., 0]

    def __call__(self, block: Any) -> Any:
        if hasattr(block, "dims") and hasattr(block, "copy"):  # an xarray DataArray
            return block.copy(data=self.apply(block.values))
        return self.apply(block)
