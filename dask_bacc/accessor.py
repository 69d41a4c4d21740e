"""``obj.bacc``: the xarray accessor (``ds.bacc.map_coded(f, dim=...)``).

Its own small module, imported by ``import dask_bacc``: it needs only xarray, and reaches
the runtime when a method is called.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import xarray as xr

__all__ = ["BaccAccessor"]


@xr.register_dataset_accessor("bacc")
@xr.register_dataarray_accessor("bacc")
class BaccAccessor:
    """``obj.bacc``: coded maps over an xarray object's blocks along one dimension.

    Examples
    --------
    >>> out = ds.bacc.map_coded(lambda b: b * 2, dim="time")  # doctest: +SKIP
    """

    def __init__(self, obj: xr.DataArray | xr.Dataset):
        self._obj = obj

    def map_coded(
        self, func: Callable[..., Any], *args: Any, dim: Hashable | None = None, **kwargs: Any
    ) -> Any:
        """``dask_bacc.map_coded(func, obj, *args, dim=dim, **kwargs)``.

        Parameters
        ----------
        func : callable
            ``func(block, *args, **kwargs)`` on a DataArray/Dataset block, returning a
            DataArray/Dataset with real numeric variables.
        *args
            Passed to every call of ``func``.
        dim : hashable, optional
            The dimension to map along (default: the only chunked one, or the only one).
        **kwargs
            Options of :func:`dask_bacc.map_coded` (``code``, ``n_coded``, ``wait``,
            ``meta``, ...), the others are passed to ``func``.

        Returns
        -------
        DataArray or Dataset
            Dask-backed for dask-backed input, in memory otherwise (an awaitable with an
            asynchronous client).
        """
        from .runtime import map_coded

        return map_coded(func, self._obj, *args, dim=dim, **kwargs)

    def submit_coded(
        self, func: Callable[..., Any], *args: Any, dim: Hashable | None = None, **kwargs: Any
    ) -> Any:
        """``dask_bacc.submit_coded(func, obj, *args, dim=dim, **kwargs)``: a CodedJob.

        Parameters are those of :meth:`map_coded`; returns a :class:`dask_bacc.CodedJob`
        at once (with an asynchronous client, an awaitable that gives one).
        """
        from .runtime import submit_coded

        return submit_coded(func, self._obj, *args, dim=dim, **kwargs)
