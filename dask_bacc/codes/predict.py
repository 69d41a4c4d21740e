"""The accuracy model behind ``n_coded="auto"`` / ``wait="auto"``: the error to expect of a
code decoding from k of its N results, before any result exists.

An approximate code's error depends on f and the data, which are unknown when a job is
planned, and on which results arrive. The model measures the code on a reference: the
smooth signal of the accuracy benchmark (:func:`smooth_signal`, also
``dask_bacc.testing.smooth_blocks``) mapped by the identity, decoded from random k-subsets
of the N coded results. The planner (``dask_bacc.runtime.auto``) scales it by how the
jobs' own error estimates compare with it (the calibration), so that a function that
loses more accuracy than the reference is planned for.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ._types import FloatArray
from .base import Code
from .registry import get_code

__all__ = ["expected_error", "smooth_signal"]

#: the reference signal's block shape and the random subsets drawn per (code, k)
_ROWS, _COLS, _DRAWS = 16, 8, 24


def smooth_signal(K: int, rows: int, cols: int, rng: np.random.Generator) -> FloatArray:
    """K contiguous blocks of a slowly varying signal, shape ``(K, rows, cols)``.

    A few low frequencies over all ``K * rows`` rows, one per column with a random phase,
    plus a little noise: the smooth data of the accuracy benchmark (docs/accuracy.md).
    """
    t = np.linspace(0.0, 1.0, K * rows)
    freq = rng.uniform(0.5, 2.0, cols)
    phase = rng.uniform(0.0, 2 * np.pi, cols)
    X = np.sin(2 * np.pi * freq * t[:, None] + phase)
    X += 0.02 * rng.standard_normal(X.shape)
    return X.reshape(K, rows, cols)


def _reference(K: int) -> FloatArray:
    return smooth_signal(K, _ROWS, _COLS, np.random.default_rng(20090827 + K))


def _relative_error(code: Code, X: FloatArray, coded: FloatArray, returned: list[int]) -> float:
    decoded = code.decode(coded[returned], returned)
    return float(np.linalg.norm(decoded - X) / np.linalg.norm(X))


@functools.lru_cache(maxsize=4096)
def _expected(name: str, K: int, N: int, options: tuple[tuple[str, object], ...], k: int) -> float:
    code = get_code(name, K, N, **dict(options))
    if code.exact:
        return 0.0
    X = _reference(K)
    coded = code.encode(X)
    rng = np.random.default_rng(7 * N + k)
    errors = []
    for _ in range(_DRAWS):
        returned = sorted(int(i) for i in rng.choice(N, size=k, replace=False))
        if not code.can_decode(returned):
            return math.inf
        errors.append(0.0 if code.is_exact(returned) else _relative_error(code, X, coded, returned))
    return float(np.mean(errors))


def expected_error(code: Code, k: int) -> float:
    """Mean relative error of ``code`` decoding the reference from k random results of N.

    Parameters
    ----------
    code : Code
        Any registered code (exact codes give 0).
    k : int
        Results decoded from, ``1 <= k <= N``.

    Returns
    -------
    float
        The mean over random k-subsets of ``||decoded - X|| / ||X||`` on
        :func:`smooth_signal` data (``inf`` when some k-subsets cannot be decoded).
        Cached per code configuration and k: a planner asks for many at once.
    """
    if not 1 <= k <= code.N:
        raise ValueError(f"k must lie in [1, N={code.N}], got {k}")
    if k < code.min_results:
        return math.inf
    skip = {"name", "K", "N"}
    options = tuple(sorted((str(a), v) for a, v in code.get_config().items() if a not in skip))
    return _expected(code.name, code.K, code.N, options, int(k))
