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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ._types import FloatArray
from .base import Code
from .registry import get_code

__all__ = ["expected_error", "smooth_signal", "stored_errors", "write_table"]

#: the reference signal's block shape and the random subsets drawn per (code, k)
_ROWS, _COLS, _DRAWS = 16, 8, 24
#: the model computed ahead for the codes auto mode weighs with their default options
#: (``python -m dask_bacc.codes.predict`` writes it): a planner's first job in a process
#: would otherwise spend seconds decoding the reference (5-15 ms per code, N and k)
TABLE = Path(__file__).with_name("expected_error.npz")
#: codes, K and k the table holds: ``K <= TABLE_K``, ``K < N <= 2K``, ``k >= (K + 1) // 2``
#: (the planner's range); anything else is computed when first asked for
TABLE_CODES = ("systematic-spline", "spline", "systematic-berrut", "berrut")
TABLE_K = 32


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
    stored = stored_errors(code, [k])
    if stored is not None:
        return float(stored[0])
    return _expected(code.name, code.K, code.N, _options(code), int(k))


def stored_errors(code: Code, ks: Sequence[int]) -> FloatArray | None:
    """:func:`expected_error` for each k of ``ks`` (increasing) from the stored model, in
    one slice; None when it does not hold them all (compute them one by one)."""
    ks = list(ks)
    if not ks or code.N > 2 * code.K or ks[0] < max(code.min_results, (code.K + 1) // 2):
        return None
    table = _table().get(_key(code))
    if table is None:
        return None
    row = table[code.N - code.K - 1, [k - 1 for k in ks]].astype(float)
    return None if np.isnan(row).any() else row


def _options(code: Code) -> tuple[tuple[str, object], ...]:
    skip = {"name", "K", "N"}
    return tuple(sorted((str(a), v) for a, v in code.get_config().items() if a not in skip))


def _key(code: Code) -> str:
    """A code's rows in the stored model: its name, options (a systematic spline is a
    spline with ``systematic=True``) and K."""
    return f"{code.name}{_options(code)!r}/{code.K}"


@functools.lru_cache(maxsize=1)
def _table() -> dict[str, np.ndarray]:
    """The stored model: :func:`_key` -> float32 ``(K, 2K)`` array, row ``N - K - 1``,
    column ``k - 1`` (NaN where not computed); empty when the file is missing."""
    try:
        with np.load(TABLE) as stored:
            return {name: stored[name] for name in stored.files}
    except FileNotFoundError:
        return {}


def _table_rows(args: tuple[str, int]) -> tuple[str, np.ndarray]:
    name, K = args
    out = np.full((K, 2 * K), np.nan, dtype=np.float32)
    for N in range(K + 1, 2 * K + 1):
        code = get_code(name, K, N)
        for k in range(max(code.min_results, (K + 1) // 2), N + 1):
            out[N - K - 1, k - 1] = _expected(code.name, K, N, _options(code), k)
    return _key(get_code(name, K, K + 1)), out


def write_table(path: Path = TABLE, max_k: int = TABLE_K, processes: int = 1) -> Path:
    """Compute the stored model (:data:`TABLE`): every code of :data:`TABLE_CODES`, every
    ``2 <= K <= max_k``, ``K < N <= 2K`` and ``(K + 1) // 2 <= k <= N``, exactly as
    :func:`expected_error` computes it when asked.

    Minutes of CPU (48k entries at K <= 32); ``processes`` runs that many at once.
    """
    jobs = [(name, K) for K in range(max_k, 1, -1) for name in TABLE_CODES]
    if processes > 1:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(processes) as pool:
            rows = dict(pool.imap_unordered(_table_rows, jobs))
    else:
        rows = dict(map(_table_rows, jobs))
    arrays: dict[str, Any] = {key: rows[key] for key in sorted(rows)}
    np.savez_compressed(path, **arrays)
    _table.cache_clear()
    return path


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=write_table.__doc__)
    parser.add_argument("--out", type=Path, default=TABLE)
    parser.add_argument("--max-k", type=int, default=TABLE_K)
    parser.add_argument("--processes", type=int, default=1)
    ns = parser.parse_args()
    print(write_table(ns.out, ns.max_k, ns.processes))
