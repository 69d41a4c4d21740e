"""Decoding in a transformed domain: ``inverse(decode(forward(results)))``.

An interpolating code approximates ``z -> f(u(z))`` between the returned worker points;
some outputs are far smoother (closer to what the decoder reproduces) after a fixed
elementwise map. Class probabilities are the example: their logarithms are close to the
linear scores of the model, while the probabilities saturate. The forward map runs on
each coded result where it is computed (inside the eval task, so no extra data moves);
the decoder mixes the transformed results; the inverse maps each decoded block back.

Exact codes stay exact up to rounding: they decode ``forward(f(X_j))`` exactly, and every
result is checked where it is computed (:meth:`Transform.checked_forward`): a result that
``inverse(forward(y))`` does not give back to rounding (a value that is not positive under
``"log"``, a row that is not a probability distribution under ``"log-probabilities"``) is
refused with :class:`~dask_bacc.exceptions.OutsideTransform`, never decoded into an
altered answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..exceptions import OutsideTransform

__all__ = ["TRANSFORMS", "Transform", "TransformSpec", "get_transform"]

#: A forward or inverse map: an array in, an array of the same shape out.
ArrayMap: TypeAlias = Callable[[NDArray[Any]], ArrayLike]


class Transform:
    """A forward map applied to every coded result and its inverse applied to the decode.

    Parameters
    ----------
    forward, inverse : callable
        ``array -> array`` of the same shape; ``inverse(forward(y))`` must give ``y`` back
        for the values f returns. Both must be picklable (they run on the workers).
    name : str, optional
        Shown in reports and reprs.
    domain : str, optional
        The values the pair maps back, in words (named when a result is refused).
    outside : callable, optional
        ``outside(y, rtol) -> bool array``: where ``inverse(forward(y))`` does not give
        ``y`` back within relative ``rtol`` (plus the smallest normal number), in closed
        form; by default the round trip itself is computed (one more inverse per result).
    """

    #: a round trip within ``ROUND_TRIP_ULPS`` units in the last place of the result's
    #: float dtype (plus its smallest normal number) gives ``y`` back: ``exp(log(y))``
    #: is off by about ``|log(y)|`` ulps, at most ~710 for float64
    ROUND_TRIP_ULPS = 1e4

    def __init__(
        self,
        forward: ArrayMap,
        inverse: ArrayMap,
        name: str | None = None,
        domain: str | None = None,
        outside: Callable[[NDArray[Any], float], NDArray[np.bool_]] | None = None,
    ):
        if not callable(forward) or not callable(inverse):
            raise TypeError("a transform needs two callables, (forward, inverse)")
        self._forward = forward
        self._inverse = inverse
        self.name = name or f"{_name(forward)}/{_name(inverse)}"
        self.domain = domain or "the values its inverse maps back"
        self._outside = outside

    def forward(self, y: ArrayLike) -> NDArray[Any]:
        """The map applied to each coded result before decoding."""
        return np.asarray(self._forward(np.asarray(y)))

    def inverse(self, y: ArrayLike) -> NDArray[Any]:
        """The map applied to each decoded block."""
        return np.asarray(self._inverse(np.asarray(y)))

    def checked_forward(self, y: ArrayLike) -> NDArray[Any]:
        """:meth:`forward` of a result ``y`` of func, once ``inverse(forward(y))`` is seen
        to give ``y`` back to rounding.

        Raises
        ------
        dask_bacc.exceptions.OutsideTransform
            Some finite values of ``y`` do not come back (outside the transform's domain):
            decoded, they would be altered, even by an exact code. NaN/inf and
            non-numeric results are left to the result check.
        """
        y = np.asarray(y)
        fy = self.forward(y)
        if y.dtype.kind not in "biuf" or fy.shape != y.shape:
            return fy
        info = np.finfo(fy.dtype if fy.dtype.kind == "f" else np.float64)
        rtol = float(self.ROUND_TRIP_ULPS * info.eps)
        with np.errstate(all="ignore"):
            if self._outside is not None:
                off = np.asarray(self._outside(y, rtol))
            else:
                off = np.abs(self.inverse(fy) - y) > rtol * np.abs(y) + info.tiny
        off &= np.isfinite(y)
        if off.any():
            at = tuple(int(i) for i in np.argwhere(off)[0])
            # the row around the first value refused: the inverse may mix a row (softmax)
            back = self.inverse(fy[at[:-1]])[at[-1:]] if at else self.inverse(fy)
            raise OutsideTransform(
                f"{int(off.sum())} of {y.size} values of func's result are outside the domain "
                f"of transform={self.name!r} ({self.domain}): inverse(forward(y)) does not "
                f"give them back (y{list(at)} = {y[at].item()!r} comes back as "
                f"{back.item()!r}), so the decoded answer would be altered. Use no "
                "transform, or one defined on f's outputs."
            )
        return fy

    def after(self, func: Callable[..., Any]) -> Callable[..., NDArray[Any]]:
        """``func`` followed by :meth:`checked_forward` (picklable): what a coded task runs."""
        return _Then(func, self)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Transform)
            and self._forward == other._forward
            and self._inverse == other._inverse
        )

    def __hash__(self) -> int:
        return hash((self._forward, self._inverse))

    def __repr__(self) -> str:
        return f"Transform({self.name!r})"


class _Then:
    def __init__(self, func: Callable[..., Any], transform: Transform):
        self.func, self.transform = func, transform
        self.__name__ = getattr(func, "__name__", type(func).__name__)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        y = self.func(*args, **kwargs)
        if isinstance(y, np.ndarray) and type(y) is not np.ndarray:
            return y  # a masked array or other subclass: left for the result check to refuse
        return self.transform.checked_forward(y)


def _name(func: object) -> str:
    return getattr(func, "__name__", type(func).__name__)


def _float(y: NDArray[Any]) -> NDArray[np.floating[Any]]:
    return y if y.dtype.kind == "f" else y.astype(np.float64)


def _clipped(y: NDArray[np.floating[Any]]) -> NDArray[np.bool_]:
    """Where ``y`` is at or below ``log(tiny)``: a zero :func:`safe_log` clipped."""
    return np.asarray(y <= np.log(np.finfo(y.dtype).tiny))


def safe_log(y: NDArray[Any]) -> NDArray[np.floating[Any]]:
    """``log(max(y, tiny))``, ``tiny`` the smallest normal number of y's float dtype."""
    y = _float(y)
    out: NDArray[np.floating[Any]] = np.log(np.maximum(y, np.finfo(y.dtype).tiny))
    return out


def safe_exp(y: NDArray[Any]) -> NDArray[np.floating[Any]]:
    """``exp(y)``, and 0 at or below ``log(tiny)``: the inverse of :func:`safe_log`, which
    gives a zero back exactly."""
    y = _float(y)
    out: NDArray[np.floating[Any]] = np.exp(y)
    out[_clipped(y)] = 0
    return out


def softmax(y: NDArray[Any]) -> NDArray[np.floating[Any]]:
    """``exp(y)`` renormalised so that each row (the last axis) sums to 1; entries at or
    below ``log(tiny)`` (zeros :func:`safe_log` clipped) are 0, unless the whole row is."""
    y = _float(y)
    e = np.exp(y - y.max(axis=-1, keepdims=True))
    clipped = _clipped(y)
    e[clipped & ~clipped.all(axis=-1, keepdims=True)] = 0
    out: NDArray[np.floating[Any]] = e / e.sum(axis=-1, keepdims=True)
    return out


def negative(y: NDArray[Any], rtol: float) -> NDArray[np.bool_]:
    """Where :func:`safe_exp` of :func:`safe_log` does not give ``y`` back: its negative
    values (zeros come back exactly, values below ``tiny`` within it)."""
    return np.asarray(y < 0)


def not_probabilities(y: NDArray[Any], rtol: float) -> NDArray[np.bool_]:
    """Where :func:`softmax` of :func:`safe_log` does not give ``y`` back within ``rtol``:
    negative values, and every value of a row (the last axis) whose sum is not 1 within
    ``rtol`` (the renormalisation scales the row by ``1 / sum``)."""
    sums = np.asarray(y.sum(axis=-1, keepdims=True), dtype=np.float64)
    return np.asarray((y < 0) | (np.abs(sums - 1.0) > rtol))


#: The presets :func:`get_transform` accepts by name.
TRANSFORMS: dict[str, Transform] = {
    "log": Transform(safe_log, safe_exp, "log", "values >= 0", negative),
    # class probabilities: decode log-probabilities, then exp and renormalise each row
    "log-probabilities": Transform(
        safe_log,
        softmax,
        "log-probabilities",
        "rows of probabilities along the last axis: values >= 0 that sum to 1; for rows "
        "that do not, transform='log' keeps them as they are",
        not_probabilities,
    ),
}


#: What ``transform=`` takes: see :func:`get_transform`.
TransformSpec: TypeAlias = str | tuple[ArrayMap, ArrayMap] | Transform | None


def get_transform(spec: TransformSpec) -> Transform | None:
    """The transform for ``transform=``: a preset name, a ``(forward, inverse)`` pair, a
    :class:`Transform`, or None (no transform).

    Presets: ``"log"`` (forward ``log(max(y, tiny))``, inverse ``exp`` with zeros given
    back exactly: for outputs >= 0 spanning orders of magnitude, e.g. probabilities) and
    ``"log-probabilities"`` (the same forward; the inverse also renormalises each row, the
    last axis, to sum 1: for class probabilities, ``predict_proba``). A result outside
    the transform's domain (a negative value; a row that does not sum to 1) is refused
    where it is computed (:meth:`Transform.checked_forward`).
    """
    if spec is None or isinstance(spec, Transform):
        return spec
    if isinstance(spec, str):
        try:
            return TRANSFORMS[spec.lower().replace("_", "-")]
        except KeyError:
            raise ValueError(
                f"unknown transform {spec!r}; choose one of {sorted(TRANSFORMS)} or pass a "
                "(forward, inverse) pair"
            ) from None
    if isinstance(spec, tuple) and len(spec) == 2:
        return Transform(*spec)
    raise TypeError(
        f"transform must be a preset name ({sorted(TRANSFORMS)}), a (forward, inverse) pair "
        f"of callables or a Transform, got {type(spec).__name__}"
    )
