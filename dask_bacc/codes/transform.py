"""Decoding in a transformed domain: ``inverse(decode(forward(results)))``.

An interpolating code approximates ``z -> f(u(z))`` between the returned worker points;
some outputs are far smoother (closer to what the decoder reproduces) after a fixed
elementwise map. Class probabilities are the example: their logarithms are close to the
linear scores of the model, while the probabilities saturate. The forward map runs on
each coded result where it is computed (inside the eval task, so no extra data moves);
the decoder mixes the transformed results; the inverse maps each decoded block back.

Exact codes stay exact up to rounding: they decode ``forward(f(X_j))`` exactly, and
``inverse(forward(y)) == y`` for every value the forward map does not clip.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

import numpy as np
from numpy.typing import ArrayLike, NDArray

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
    """

    def __init__(
        self,
        forward: ArrayMap,
        inverse: ArrayMap,
        name: str | None = None,
    ):
        if not callable(forward) or not callable(inverse):
            raise TypeError("a transform needs two callables, (forward, inverse)")
        self._forward = forward
        self._inverse = inverse
        self.name = name or f"{_name(forward)}/{_name(inverse)}"

    def forward(self, y: ArrayLike) -> NDArray[Any]:
        """The map applied to each coded result before decoding."""
        return np.asarray(self._forward(np.asarray(y)))

    def inverse(self, y: ArrayLike) -> NDArray[Any]:
        """The map applied to each decoded block."""
        return np.asarray(self._inverse(np.asarray(y)))

    def after(self, func: Callable[..., Any]) -> Callable[..., NDArray[Any]]:
        """``func`` followed by :meth:`forward` (picklable): what a coded task runs."""
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

    def __call__(self, *args: Any, **kwargs: Any) -> NDArray[Any]:
        return self.transform.forward(self.func(*args, **kwargs))


def _name(func: object) -> str:
    return getattr(func, "__name__", type(func).__name__)


def _float(y: NDArray[Any]) -> NDArray[np.floating[Any]]:
    return y if y.dtype.kind == "f" else y.astype(np.float64)


def safe_log(y: NDArray[Any]) -> NDArray[np.floating[Any]]:
    """``log(max(y, tiny))``, ``tiny`` the smallest normal number of y's float dtype."""
    y = _float(y)
    out: NDArray[np.floating[Any]] = np.log(np.maximum(y, np.finfo(y.dtype).tiny))
    return out


def softmax(y: NDArray[Any]) -> NDArray[np.floating[Any]]:
    """``exp(y)`` renormalised so that each row (the last axis) sums to 1."""
    y = _float(y)
    e = np.exp(y - y.max(axis=-1, keepdims=True))
    out: NDArray[np.floating[Any]] = e / e.sum(axis=-1, keepdims=True)
    return out


#: The presets :func:`get_transform` accepts by name.
TRANSFORMS: dict[str, Transform] = {
    "log": Transform(safe_log, np.exp, "log"),
    # class probabilities: decode log-probabilities, then exp and renormalise each row
    "log-probabilities": Transform(safe_log, softmax, "log-probabilities"),
}


#: What ``transform=`` takes: see :func:`get_transform`.
TransformSpec: TypeAlias = str | tuple[ArrayMap, ArrayMap] | Transform | None


def get_transform(spec: TransformSpec) -> Transform | None:
    """The transform for ``transform=``: a preset name, a ``(forward, inverse)`` pair, a
    :class:`Transform`, or None (no transform).

    Presets: ``"log"`` (forward ``log(max(y, tiny))``, inverse ``exp``: for positive
    outputs spanning orders of magnitude, e.g. probabilities) and ``"log-probabilities"``
    (the same forward; the inverse also renormalises each row, the last axis, to sum 1:
    for class probabilities, ``predict_proba``).
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
