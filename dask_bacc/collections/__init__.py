"""Input adapters: each kind of data -> K equal numeric blocks, and the output back."""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import Blocks, check_dtype, combine_rule
from .numpy import ListBlocks, NumpyBlocks

__all__ = ["Blocks", "adapt", "check_dtype", "combine_rule", "is_numpy"]


def is_numpy(data: Any) -> bool:
    """NumPy input, which dask-bacc splits into blocks itself."""
    return isinstance(data, (np.ndarray, np.generic))


def adapt(
    data: Any,
    *,
    n_blocks: int | None = None,
    blocks: int | None = None,
    max_blocks: int | None = None,
) -> Blocks:
    """Wrap ``data`` as K blocks; raises ``TypeError``/``ValueError`` for unusable input.

    Parameters
    ----------
    data : numpy.ndarray, list/tuple of arrays, or dask.array.Array
    n_blocks, blocks : int, optional
        For NumPy arrays: the number of blocks K, or the rows per block. Without either,
        K is the largest divisor of the row count up to ``max_blocks``.
    """
    import dask.array as da

    if isinstance(data, da.Array):
        if n_blocks is not None or blocks is not None:
            raise ValueError("n_blocks/blocks apply to NumPy input; rechunk a dask array instead")
        from .dask_array import DaskArrayBlocks

        return DaskArrayBlocks(data)
    if isinstance(data, (list, tuple)):
        if n_blocks is not None or blocks is not None:
            raise ValueError("n_blocks/blocks apply to NumPy input; a list already is the blocks")
        return ListBlocks(data)
    if is_numpy(data):
        return NumpyBlocks(data, n_blocks=n_blocks, blocks=blocks, max_blocks=max_blocks)
    raise TypeError(
        f"cannot map over {type(data).__module__}.{type(data).__name__}: pass a NumPy array, "
        "a list of equal-shape arrays, or a dask array"
    )
