"""Test data: inputs on which coded computing's accuracy is representative."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from ..codes.predict import smooth_signal

__all__ = ["smooth_blocks"]


def smooth_blocks(K: int, rows: int, cols: int, rng: np.random.Generator) -> NDArray[np.float64]:
    """K contiguous blocks of a slowly varying signal.

    A few low frequencies over all ``K * rows`` rows, one per column with a random phase,
    plus a little noise: the smooth data of the accuracy benchmark, of the estimator and
    robustness benchmarks and of their tests. Approximate codes decode such data far more
    accurately than i.i.d. random rows (``docs/accuracy.md``).

    Parameters
    ----------
    K : int
        Number of blocks.
    rows, cols : int
        Shape of each block.
    rng : numpy.random.Generator
        Source of the frequencies, phases and noise.

    Returns
    -------
    ndarray
        Shape ``(K, rows, cols)``: block j is ``out[j]``; ``out.reshape(K * rows, cols)``
        is the whole signal.
    """
    return smooth_signal(K, rows, cols, rng)
