"""The small base class every code derives from (modelled on numcodecs' ``Codec``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..exceptions import InsufficientResults, InvalidInput
from ._types import Blocks, CodeConfig, FloatArray, IndexArray, IntArray, Returned

__all__ = [
    "AMPLIFICATION_LIMIT",
    "FLOAT64_INTEGER_LIMIT",
    "Code",
    "InterpolatingCode",
    "as_returned",
    "beyond_float64",
    "contract",
    "decode_residual",
    "refuse_rounded_integers",
    "unit_rows",
]

#: Largest :meth:`Code.amplification` at which an exact code's decode is taken as exact.
#: Measured for Lagrange over K in 4..32, N/K in 2..4, degrees 1..3 and random and adjacent
#: stragglers (``benchmarks/lagrange_conditioning.py``, 6210 decodes): those up to 1e6 were
#: within 2e-10 of f(X_j); every decode off by more than 1e-6 had an amplification above 1e7.
AMPLIFICATION_LIMIT = 1e6


#: float64 holds every integer of magnitude up to 2**53 exactly (its 53-bit significand)
#: and rounds some larger ones
FLOAT64_INTEGER_LIMIT = 2**53


def beyond_float64(values: ArrayLike) -> int | None:
    """The largest magnitude in integer ``values`` when it exceeds 2**53 (float64 would
    round some of them), else None (float data, or integers float64 holds exactly).

    Only 64-bit integers can exceed it: smaller integer dtypes always fit.
    """
    arr = np.asarray(values)
    if arr.dtype.kind not in "iu" or arr.dtype.itemsize < 8 or arr.size == 0:
        return None
    # Python ints: -int64.min and uint64.max do not fit in the array's own dtype
    top = max(int(arr.max()), -int(arr.min()))
    return top if top > FLOAT64_INTEGER_LIMIT else None


def refuse_rounded_integers(blocks: NDArray[Any], code: str) -> None:
    """Raise :class:`~dask_bacc.exceptions.InvalidInput` (a ``ValueError``) when
    ``blocks`` are 64-bit integers beyond 2**53, which an exact ``code`` would mix in
    float64 arithmetic (rounding them) while its decode is labelled exact. The message
    names the dtype and what to do instead.

    ``InvalidInput`` so that a task encoding chunks on a worker can call it too: a coded
    job reports that exception as a plain ``ValueError``.
    """
    arr = np.asarray(blocks)
    top = beyond_float64(arr)
    if top is None:
        return
    raise InvalidInput(
        f"the data has dtype {arr.dtype} with integers beyond 2**53 (up to {top}): the "
        f"{code} code mixes blocks in float64 arithmetic, which rounds such integers, yet "
        "its decode is labelled exact. Cast the data to float explicitly if float64 "
        "precision is enough (x.astype(float)), or use code='repetition' (or a systematic "
        "code), which copies integer blocks exactly."
    )


def as_returned(returned: Returned, n: int) -> IndexArray:
    """Validate a set of returned worker indices: integers in ``[0, n)``, no repeats."""
    idx = np.asarray(returned)
    if idx.ndim != 1:
        raise ValueError(
            f"returned must be a 1-d sequence of worker indices, got shape {idx.shape}"
        )
    if idx.size == 0:
        raise InsufficientResults("no results were returned: nothing to decode from")
    if idx.dtype.kind not in "iu":
        raise TypeError(f"returned must hold integer worker indices, got dtype {idx.dtype}")
    if idx.min() < 0 or idx.max() >= n:
        raise ValueError(f"returned worker indices must lie in [0, {n}), got {idx.tolist()}")
    if np.unique(idx).size != idx.size:
        raise ValueError(f"returned worker indices must be distinct, got {idx.tolist()}")
    return idx.astype(np.intp)


class Code:
    """A linear code over K data blocks with N coded blocks.

    Subclasses define :meth:`encoding_matrix` and :meth:`decoding_matrix`; encoding and
    decoding are then one tensor contraction each over the flattened blocks.

    Attributes
    ----------
    name : str
        Registry name (see :func:`dask_bacc.codes.get_code`).
    exact : bool
        True when a decodable set of results gives f(X_j) exactly (up to rounding).
    """

    name: ClassVar[str] = ""
    exact: ClassVar[bool] = False
    #: Decoding selects results instead of mixing them, so their dtype is kept.
    keeps_dtype: ClassVar[bool] = False
    #: Results beyond :attr:`min_results` the default wait collects to check an exact
    #: decode whose exactness rests on an assumption about f (:meth:`check_matrix`).
    check_spare: ClassVar[int] = 0

    @property
    def config_name(self) -> str:
        """The name per-code settings list this code under (``bacc.wait.<name>``)."""
        return self.name

    @property
    def assumption(self) -> str | None:
        """What an exact decode assumes about f (None: nothing, e.g. repetition)."""
        return None

    def __init__(self, K: int, N: int):
        K, N = _positive_int("K", K), _positive_int("N", N)
        self.K = K
        self.N = N

    # -- points (subclasses set ``_alpha`` and ``_z``) ----------------------------------
    _alpha: FloatArray
    _z: FloatArray

    @property
    def data_points(self) -> FloatArray:
        """Interpolation points of the K data blocks, shape (K,)."""
        # (the annotation: numpy's stubs take Self from typing, which mypy's python_version
        # 3.10 lacks, so ndarray.copy() is Any there)
        alpha: FloatArray = self._alpha.copy()
        return alpha

    @property
    def worker_points(self) -> FloatArray:
        """Evaluation points of the N coded blocks, shape (N,)."""
        z: FloatArray = self._z.copy()
        return z

    # -- matrices ----------------------------------------------------------------
    def encoding_matrix(self) -> FloatArray:
        """The (N, K) matrix E with ``coded_i = sum_j E[i, j] X_j``."""
        raise NotImplementedError

    def decoding_matrix(self, returned: Returned) -> FloatArray:
        """The (K, len(returned)) matrix D with ``estimate_j = sum_l D[j, l] result_l``.

        Columns follow ``returned`` as given. Raises :class:`InsufficientResults` when the
        set cannot be decoded.
        """
        raise NotImplementedError

    # -- decodability --------------------------------------------------------------
    @property
    def min_results(self) -> int:
        """The fewest results from which decoding can succeed."""
        raise NotImplementedError

    def can_decode(self, returned: Returned) -> bool:
        """Whether this set of returned worker indices is decodable.

        Raises ``ValueError`` for indices outside ``[0, N)`` or repeated, like :meth:`decode`.
        """
        if len(returned) == 0:
            return False
        return as_returned(returned, self.N).size >= self.min_results

    def enough(self, returned: Returned, target: int) -> bool:
        """Whether ``returned`` meets a wait for ``target`` results: that many, and
        decodable (a grouped code counts per group)."""
        return len(returned) >= target and self.can_decode(returned)

    def is_exact(self, returned: Returned) -> bool:
        """Whether decoding from ``returned`` gives every block exactly (f(X_j), not an estimate).

        True for an exact code once the set is decodable; a systematic code overrides it.
        """
        return self.exact and self.can_decode(returned)

    def data_rows(self) -> dict[int, int]:
        """Coded tasks whose share is a data block itself, ``{coded index: block}``: the
        unit rows of E (systematic shares, repetition copies, coincident points).

        ``func`` runs on the user's own data there, so its exception is the user's error,
        not an effect of the coding; every other share mixes blocks.
        """
        cached: dict[int, int] | None = getattr(self, "_data_rows", None)
        if cached is None:
            cached = self._data_rows = unit_rows(self.encoding_matrix())
        return dict(cached)

    def check_matrix(self, returned: Returned) -> FloatArray | None:
        """A matrix C with ``C @ results == 0`` (up to rounding) whenever the decode from
        ``returned`` is exact, or None when the set has no redundancy to check it with.

        Exact codes whose exactness rests on an assumption about f (Lagrange: a polynomial
        of the code's degree) override it; :func:`decode_residual` applies it.
        """
        return None

    def amplification(self, returned: Returned) -> float:
        """How much the decode from ``returned`` can magnify errors in the results.

        The decode's Lebesgue constant ``max_j sum_l |D[j, l]|``: 1 for repetition, small
        for well-spread points, above :data:`AMPLIFICATION_LIMIT` when a gap in the
        returned points makes a polynomial decode ill-conditioned (a Lagrange result is
        then not exact in floating point).
        """
        return float(np.abs(self.decoding_matrix(returned)).sum(axis=1).max())

    # -- data --------------------------------------------------------------------
    def encode(self, blocks: Blocks) -> NDArray[Any]:
        """Encode K blocks of shape (K, ...) into N coded blocks of shape (N, ...)."""
        blocks = self._stack(blocks, self.K, "blocks")
        return contract(self.encoding_matrix(), blocks)

    def shares(self, blocks: Blocks) -> list[NDArray[Any]]:
        """The N coded shares of K blocks, as :meth:`encode` gives them, except that the
        share of a :meth:`data_rows` task is its block itself: its dtype is kept and no
        arithmetic touches it (integers beyond 2**53 stay exact, and f's result on the
        block is f(X_j) exactly)."""
        stacked = self._stack(blocks, self.K, "blocks")
        rows = self.data_rows()
        coded = self.encode(stacked) if len(rows) < self.N else stacked  # (all copies)
        return [stacked[rows[i]] if i in rows else coded[i] for i in range(self.N)]

    def decode(self, results: Blocks, returned: Returned) -> NDArray[Any]:
        """Decode K output blocks from ``results[l]``, the result of worker ``returned[l]``."""
        idx = as_returned(returned, self.N)
        results = self._stack(results, idx.size, "results")
        return contract(self.decoding_matrix(idx), results)

    @staticmethod
    def _stack(blocks: Blocks, n: int, what: str) -> NDArray[Any]:
        arr = np.asarray(blocks) if not isinstance(blocks, (list, tuple)) else np.stack(blocks)
        if arr.ndim == 0 or arr.shape[0] != n:
            raise ValueError(f"expected {n} {what} along axis 0, got shape {arr.shape}")
        return arr

    # -- configuration -------------------------------------------------------------
    def get_config(self) -> CodeConfig:
        """A JSON-serialisable description; ``from_config(get_config())`` rebuilds the code."""
        return {"name": self.name, "K": self.K, "N": self.N}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Code:
        """Rebuild a code from :meth:`get_config` output."""
        config = dict(config)
        name = config.pop("name", cls.name)
        if cls.name and name != cls.name:
            raise ValueError(f"config is for code {name!r}, not {cls.name!r}")
        return cls(**config)

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.get_config() == other.get_config()

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.get_config().items())))

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items() if k != "name")
        return f"{type(self).__name__}({params})"


class InterpolatingCode(Code):
    """An approximate code that decodes by interpolating the returned results.

    The decoder through the returned worker points, evaluated at the data points, is
    :meth:`interpolant`; :meth:`companion` is a second interpolant through the same points
    whose difference from it estimates its error (the embedded pair of
    :mod:`dask_bacc.codes.estimate`, which, like the robust decoder, works for any
    subclass). Any non-empty set of results decodes. A systematic variant sets
    ``systematic_workers`` (worker of each data point) and decodes block j exactly when
    that worker returned, if the decoder interpolates.
    """

    exact = False
    systematic: bool = False
    systematic_workers: IndexArray | None = None
    #: The leave-one-out factor of the error estimate is clipped to this range.
    calibration_range: ClassVar[tuple[float, float]] = (1.0, 4.0)
    #: ``ErrorEstimate.method``: the embedded pair's companion (Floater-Hormann degree)
    estimate_method: ClassVar[str] = "embedded-fh3"
    #: The companion's degree: through fewer than ``companion_degree + 1`` nodes it drops
    #: to a lower one, and a leave-out test through so few nodes checks another pair than
    #: the decode's (the error estimate does not count it, docs/accuracy.md "Small K")
    companion_degree: ClassVar[int] = 3

    @property
    def interpolates(self) -> bool:
        """The decoder passes through the returned results (a systematic block is exact)."""
        return True

    def interpolant(self, targets: FloatArray, nodes: FloatArray) -> FloatArray:
        """The decoder through the strictly monotone ``nodes`` at ``targets``, a matrix."""
        raise NotImplementedError

    def companion(self, targets: FloatArray, nodes: FloatArray) -> FloatArray:
        """The embedded pair's second interpolant (same shape as :meth:`interpolant`)."""
        raise NotImplementedError

    def loo_matrices(
        self, z: FloatArray, base: IntArray, targets: IntArray
    ) -> tuple[FloatArray, FloatArray]:
        """Leave-one-out rows of :meth:`interpolant` and :meth:`companion`: for each target
        index k, the interpolants through the points ``z[base]`` other than k, evaluated at
        ``z[k]``, as rows over all of z (zeros elsewhere; all zeros with fewer than 2 points
        left). One small matrix per target; subclasses may batch it."""
        return self._loo_rows(self.interpolant, z, base, targets), self._loo_rows(
            self.companion, z, base, targets
        )

    @staticmethod
    def _loo_rows(
        interpolant: Callable[[FloatArray, FloatArray], FloatArray],
        z: FloatArray,
        base: IntArray,
        targets: IntArray,
    ) -> FloatArray:
        base = np.asarray(base, dtype=int)
        out = np.zeros((len(targets), z.size))
        for r, k in enumerate(np.asarray(targets, dtype=int)):
            rest = base[base != k]
            if rest.size >= 2:
                out[r, rest] = interpolant(z[k : k + 1], z[rest])[0]
        return out

    @property
    def min_results(self) -> int:
        return 1

    def is_exact(self, returned: Returned) -> bool:
        """Systematic only: every block's own (systematic) worker is in ``returned``."""
        if self.systematic_workers is None or not self.interpolates or len(returned) == 0:
            return False
        have = set(as_returned(returned, self.N).tolist())
        return all(int(i) in have for i in self.systematic_workers)

    def decoding_matrix(self, returned: Returned) -> FloatArray:
        idx = as_returned(returned, self.N)
        order = np.argsort(idx, kind="stable")  # ascending worker index: monotone points
        sorted_matrix = self.interpolant(self._alpha, self._z[idx[order]])
        out = np.empty_like(sorted_matrix)
        out[:, order] = sorted_matrix
        return out


def unit_rows(matrix: NDArray[Any]) -> dict[int, int]:
    """``{row: column}`` for the rows of ``matrix`` that are unit vectors (one weight of
    exactly 1, every other 0): an encoding row that ships a block as it is, a decoding row
    that picks one result."""
    M = np.asarray(matrix)
    ones = (M == 1).sum(axis=1) == 1
    rest_zero = ((M == 0) | (M == 1)).all(axis=1)
    rows = np.flatnonzero(ones & rest_zero)
    return {int(i): int(np.argmax(M[i] == 1)) for i in rows}


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return int(value)


def contract(matrix: FloatArray, blocks: NDArray[Any]) -> NDArray[Any]:
    """``out[r] = sum_c matrix[r, c] blocks[c]``: one BLAS matmul over flattened blocks."""
    if blocks.dtype.kind not in "biuf":
        raise TypeError(f"blocks must be real numeric, got dtype {blocks.dtype}")
    dtype = blocks.dtype if blocks.dtype.kind == "f" else np.dtype(np.float64)
    flat = blocks.reshape(blocks.shape[0], -1).astype(dtype, copy=False)
    out: NDArray[Any] = matrix.astype(dtype, copy=False) @ flat
    return out.reshape((matrix.shape[0], *blocks.shape[1:]))


def decode_residual(code: Code, results: Blocks, returned: Returned) -> float | None:
    """``||C @ results|| / ||results||`` for the code's :meth:`~Code.check_matrix` C: about
    1e-16 times the decode's amplification when the exact decode's assumption holds, of
    the order of the decode's error when it does not. None when nothing can be checked."""
    C = code.check_matrix(returned)
    if C is None:
        return None
    Y = np.asarray(results, dtype=np.float64).reshape(len(returned), -1)
    total = float(np.linalg.norm(Y))
    return float(np.linalg.norm(C @ Y)) / total if total else 0.0
