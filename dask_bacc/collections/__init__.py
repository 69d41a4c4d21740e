"""Input adapters: each kind of data -> K equal numeric blocks, and the output back."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from .base import Blocks, check_dtype, combine_rule
from .layer import is_dask_frame
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
    **options: Any,
) -> Blocks:
    """Wrap ``data`` as K blocks; raises ``TypeError``/``ValueError`` for unusable input.

    Parameters
    ----------
    data : numpy.ndarray, list/tuple of arrays, dask.array.Array, pandas or dask
        DataFrame/Series, xarray DataArray/Dataset
    n_blocks, blocks : int, optional
        For in-memory data: the number of blocks K, or the rows per block. Without either,
        K is the largest divisor of the row count up to ``max_blocks``.
    **options
        Options of the labelled kinds, ``None`` meaning unset: ``meta`` and ``columns``
        (dataframes), ``dim`` (xarray; ``meta`` too).
    """
    import dask.array as da

    options = {k: v for k, v in options.items() if v is not None}
    if _is_frame(data):
        from .dataframe import frame_blocks

        return frame_blocks(
            data, n_blocks=n_blocks, blocks=blocks, max_blocks=max_blocks, **options
        )
    if _is_xarray(data):
        from .xarray import xarray_blocks

        return xarray_blocks(
            data, n_blocks=n_blocks, blocks=blocks, max_blocks=max_blocks, **options
        )
    if options:
        names = ", ".join(sorted(options))
        raise ValueError(
            f"{names} apply to dataframes and xarray objects, not to {type(data).__name__}"
        )
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
        "a list of equal-shape arrays, a dask array, a pandas or dask DataFrame/Series, or "
        "an xarray DataArray/Dataset"
    )


def _is_frame(data: Any) -> bool:
    # a module that is not imported yet cannot have made ``data``: no import cost here
    pd = sys.modules.get("pandas")
    return (pd is not None and isinstance(data, (pd.DataFrame, pd.Series))) or is_dask_frame(data)


def _is_xarray(data: Any) -> bool:
    xr = sys.modules.get("xarray")
    return xr is not None and isinstance(data, (xr.DataArray, xr.Dataset))
