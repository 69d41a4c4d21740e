"""What ``dask_bacc.coded`` does differently for each kind of rewritten collection.

:func:`~dask_bacc.collections.rewrite.find_map` hands back a
:class:`~dask_bacc.collections.rewrite.MapCall` that carries one adapter, a
:class:`RewriteKind`, for the kind of map it found; ``runtime/driver.py`` asks the adapter,
and never the kind's name, how to check the input, what the output's dtypes are, how to
submit the coded job, how to turn the job's output into the driver task's result and how
to rebuild the lazy collection around that task. One adapter per kind:

- :data:`ARRAY`: ``x.map_blocks(f, ...)`` (and other per-block maps) on a dask array;
- :data:`APPLY_UFUNC`: ``xr.apply_ufunc(f, da, dask="parallelized")``;
- :data:`FRAME`: ``ddf.map_partitions(f, ...)`` on a dask DataFrame/Series;
- :data:`XARRAY_MAP_BLOCKS`: ``xr.map_blocks(f, obj)``.

The adapters hold no state and are module-level classes: they travel, pickled inside the
``MapCall``, to the driver task. Dask and xarray are imported inside the methods that use
them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeAlias, TypeVar

import numpy as np

from ..exceptions import RewriteError
from . import adapt

if TYPE_CHECKING:
    import dask.array as da
    import pandas as pd
    from dask.delayed import Delayed
    from distributed import Client
    from numpy.typing import NDArray

    from .rewrite import MapCall

__all__ = [
    "APPLY_UFUNC",
    "ARRAY",
    "FRAME",
    "XARRAY_MAP_BLOCKS",
    "ApplyUfuncRewrite",
    "ArrayRewrite",
    "FrameRewrite",
    "RewriteKind",
    "XarrayMapBlocksRewrite",
]

#: What :meth:`RewriteKind.target` describes the output with (a dtype, a meta, ...)
TargetT = TypeVar("TargetT")

#: ``map_partitions``' target: the output's meta (pandas is not imported here), and whether
#: map_partitions enforces it on each partition (``enforce_metadata``)
FrameTarget: TypeAlias = "tuple[pd.DataFrame | pd.Series[Any], bool]"

#: ``xr.map_blocks``' lazy variables: each one's (shape, dtype, "data" or "coord");
#: ``None`` names a DataArray's own data
XarrayVariables: TypeAlias = dict[Hashable, tuple[tuple[int, ...], np.dtype[Any], str]]
#: ``xr.map_blocks``' target: its lazy variables, the template's index coordinates along
#: other dimensions than the mapped one (which each block's result must have), and the
#: names of the template's coordinates and dimensions (which xarray checks each block's
#: result against)
XarrayTarget: TypeAlias = tuple[
    XarrayVariables, "dict[Hashable, pd.Index]", frozenset[Hashable], frozenset[Hashable]
]


class RewriteKind(ABC, Generic[TargetT]):
    """How ``coded`` handles one kind of map over chunks; ``TargetT`` is the kind's target.

    The target (:meth:`target`) describes the output's dtypes; it is computed on the
    client, passed to the driver task and read again by :meth:`blocks` and :meth:`rebuild`.

    Attributes
    ----------
    name : str
        The kind's printable name (``MapCall.kind``), e.g. ``"dask.array"``.
    """

    name: ClassVar[str]

    def check(self, call: MapCall) -> int:
        """Reject, before anything runs, what ``map_coded`` would reject about the input.

        Nothing is computed: this checks the input's chunks and dtypes and, as
        ``map_coded`` does on the client, learns f's output where the kind needs it (a
        labelled kind calls f on a small mock block, unless the map gives its output's
        ``meta``), so that f reading what a coded block lacks (a DataFrame's index) is
        refused here rather than when the collection is computed.

        Parameters
        ----------
        call : MapCall
            The map :func:`~dask_bacc.collections.rewrite.find_map` found.

        Returns
        -------
        int
            K, the number of blocks the coded job maps over.

        Raises
        ------
        TypeError, ValueError
            Non-numeric input, uneven chunks, f failing on the mock block...
        RewriteError
            f reads or changes labels a coded block does not have.
        """
        blocks = adapt(call.data, **self.submit_labels(call))
        if not call.deps:  # (a value f reads from the graph is known only in the job)
            blocks.wrap(self.function(call), call.args, call.kwargs)
        return blocks.K

    def submit_labels(self, call: MapCall) -> dict[str, Any]:
        """The labels and output template ``submit_coded`` takes for this kind (``dim``,
        ``meta``): the part of :meth:`submit_options` that also describes the input.

        Parameters
        ----------
        call : MapCall

        Returns
        -------
        dict
            Only what the kind has: the mapped function may take keywords of the same
            names.
        """
        return {}

    def function(self, call: MapCall) -> Any:
        """What the coded job maps: ``call.func``, or a wrapper that refuses what a coded
        block would lose (:class:`ArrayRewrite`: masked results).

        Parameters
        ----------
        call : MapCall

        Returns
        -------
        callable
            Picklable; called as ``call.func`` is.
        """
        return call.func

    @abstractmethod
    def target(self, call: MapCall, exact_dtypes: bool) -> TargetT:
        """The output's dtypes: the plain map's, or float64 where the code approximates.

        Parameters
        ----------
        call : MapCall
            The map found in the collection (``call.result`` describes the output).
        exact_dtypes : bool
            Whether the code decodes exactly (and no transform is used): the plain map's
            dtypes are kept; otherwise numeric outputs become float64.

        Returns
        -------
        TargetT
            What :meth:`blocks` casts to and :meth:`rebuild` declares.

        Raises
        ------
        RewriteError
            The output cannot be rebuilt (e.g. unknown chunk sizes).
        """

    @abstractmethod
    def submit_options(self, call: MapCall) -> dict[str, Any]:
        """Keyword arguments of ``submit_coded`` for this kind: ``combine`` and labels.

        Parameters
        ----------
        call : MapCall

        Returns
        -------
        dict
            Always ``combine``; labels (``dim``) only when the kind has them, since the
            mapped function may take keywords of the same name.
        """

    @abstractmethod
    def blocks(self, client: Client, out: Any, target: TargetT) -> object:
        """The driver task's result, from the coded job's output; runs in the driver task.

        Parameters
        ----------
        client : distributed.Client
            The worker's client.
        out : dask collection
            ``job.result()``: the coded job's lazy output, of the input's kind.
        target : TargetT
            :meth:`target`'s result.

        Returns
        -------
        object
            What :meth:`rebuild`'s output chunks pick their values from (``driver[j]``
            or ``driver[name]``), cast to the target's dtypes.
        """

    @abstractmethod
    def rebuild(self, call: MapCall, driver: Delayed, target: TargetT) -> Any:
        """The rewritten collection: ``call.result``'s type, chunks and labels, its values
        read from the driver task's result (:meth:`blocks`).

        Parameters
        ----------
        call : MapCall
            The map found in the collection.
        driver : dask.delayed.Delayed
            The driver task.
        target : TargetT
            :meth:`target`'s result.

        Returns
        -------
        dask collection
            Lazy, of the same type as ``call.result``.
        """

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class ArrayRewrite(RewriteKind[np.dtype[Any]]):
    """``x.map_blocks(f, ...)`` and other per-block maps of one dask array.

    The target is the output's dtype; the driver task's result is the list of the K
    decoded blocks, the output their concatenation along axis 0.
    """

    name = "dask.array"

    def output_array(self, call: MapCall) -> da.Array:
        """The dask array ``call.result`` holds (itself, for a dask array)."""
        arr: da.Array = call.result
        return arr

    def wrap(self, call: MapCall, arr: da.Array) -> Any:
        """``arr`` as the output collection (itself, for a dask array)."""
        return arr

    def function(self, call: MapCall) -> Any:
        return Unmasked(call.func)

    def target(self, call: MapCall, exact_dtypes: bool) -> np.dtype[Any]:
        arr = self.output_array(call)
        if any(np.isnan(c) for cs in arr.chunks for c in cs):
            raise RewriteError(
                "the map's output has unknown chunk sizes; pass chunks= to map_blocks"
            )
        return _float_unless(arr.dtype, exact_dtypes)

    def submit_options(self, call: MapCall) -> dict[str, Any]:
        return {"combine": "concat"}

    def blocks(self, client: Client, out: Any, target: np.dtype[Any]) -> list[NDArray[Any]]:
        parts = list(np.ravel(out.to_delayed()))
        blocks = client.gather(client.compute(parts))
        return [_cast(b, target, "the map's output") for b in blocks]

    def rebuild(self, call: MapCall, driver: Delayed, target: np.dtype[Any]) -> Any:
        import dask.array as da

        y = self.output_array(call)
        rest = tuple(c[0] for c in y.chunks[1:])
        arr = da.concatenate(
            [
                da.from_delayed(_item(driver, j), shape=(rows, *rest), dtype=target)
                for j, rows in enumerate(y.chunks[0])
            ],
            axis=0,
        )
        return self.wrap(call, arr)


class ApplyUfuncRewrite(ArrayRewrite):
    """``xr.apply_ufunc(f, da, dask="parallelized")`` on one chunked DataArray.

    As :class:`ArrayRewrite` on the DataArray's dask array (``call.data`` is the input's),
    the output being ``call.result`` with the rebuilt array as its data.
    """

    name = "xarray.apply_ufunc"

    def output_array(self, call: MapCall) -> da.Array:
        arr: da.Array = call.result.data
        return arr

    def wrap(self, call: MapCall, arr: da.Array) -> Any:
        return call.result.copy(data=arr)


class FrameRewrite(RewriteKind[FrameTarget]):
    """``ddf.map_partitions(f, ...)`` on one dask DataFrame/Series.

    The target is the output's meta and whether ``map_partitions`` enforces it (as its
    ``enforce_metadata``: each partition then takes the meta's column names or Series
    name); the driver task's result is the list of the K decoded partitions, the output
    a dask DataFrame/Series of them (the same divisions).
    """

    name = "dask.dataframe"

    def target(self, call: MapCall, exact_dtypes: bool) -> FrameTarget:
        import pandas as pd

        expr = call.result.expr
        enforce = bool(
            expr.operand("enforce_metadata") if "enforce_metadata" in expr._parameters else False
        )
        meta = call.result._meta
        if exact_dtypes:
            return meta, enforce
        if isinstance(meta, pd.DataFrame):
            numeric = [c for c in meta.columns if meta[c].dtype.kind in "biuf"]
            return meta.astype(dict.fromkeys(numeric, np.float64)), enforce
        return (meta.astype(np.float64) if meta.dtype.kind in "biuf" else meta), enforce

    def check(self, call: MapCall) -> int:
        from .dataframe import MockCallError, coded_dtype

        try:
            # before the map is the only place to select columns: coded() takes the map
            coded_dtype(
                call.data,
                "the map's input",
                select="before the map (ddf[{numeric!r}].map_partitions(f, ...))",
            )
            return super().check(call)
        except MockCallError as exc:
            # the job calls f on a mock block for lack of map_coded's meta=, which
            # coded() cannot pass on: map_partitions' meta is not enforced on f's values
            raise ValueError(
                f"{exc.fname} fails on a small mock block of the map's input ({exc.why}), "
                "which coded() calls it on to learn its output: make f work on a block of "
                f"{exc.rows} rows, or {_EXACT}"
            ) from None
        except TypeError as exc:  # non-numeric columns
            raise TypeError(f"{exc}; or {_EXACT}") from None

    def submit_options(self, call: MapCall) -> dict[str, Any]:
        return {"combine": "auto"}

    def blocks(self, client: Client, out: Any, target: FrameTarget) -> list[Any]:
        meta, enforce = target
        blocks = client.gather(client.compute(list(out.to_delayed())))
        return [_frame_like(b, meta, enforce) for b in blocks]

    def rebuild(self, call: MapCall, driver: Delayed, target: FrameTarget) -> Any:
        import dask.dataframe as dd

        y = call.result
        return dd.from_delayed(
            [_item(driver, j) for j in range(y.npartitions)],
            meta=target[0],
            divisions=y.divisions if y.known_divisions else None,
            verify_meta=False,
        )


class XarrayMapBlocksRewrite(RewriteKind[XarrayTarget]):
    """``xr.map_blocks(f, obj)`` on one DataArray/Dataset chunked along ``call.dim``.

    The target is each lazy variable's (shape, dtype, and whether it is a data variable or
    a coordinate), ``None`` naming a DataArray's data, and the template's index
    coordinates along the other dimensions (checked against the coded output as
    ``xr.map_blocks`` checks each block's result);
    the driver task's result is each lazy variable's values, the output ``call.result``
    with every lazy variable read from them, in its chunks.
    """

    name = "xarray.map_blocks"

    def check(self, call: MapCall) -> int:
        K = super().check(call)
        _check_dim_coords(call)
        return K

    def submit_labels(self, call: MapCall) -> dict[str, Any]:
        return {"dim": call.dim}

    def target(self, call: MapCall, exact_dtypes: bool) -> XarrayTarget:
        # coordinates are labels map_coded restores, not decoded values: their dtype stays
        y = call.result
        coords = set(y.coords)
        variables = {
            name: (
                v.shape,
                _float_unless(v.dtype, exact_dtypes or name in coords),
                "coord" if name in coords else "data",
            )
            for name, v in _lazy_variables(y).items()
        }
        indexes = {
            name: index
            for name, index in y.indexes.items()
            if call.dim not in y[name].dims and name not in variables
        }
        return variables, indexes, frozenset(y.coords), frozenset(y.dims)

    def submit_options(self, call: MapCall) -> dict[str, Any]:
        return {"combine": "auto", **self.submit_labels(call)}

    def blocks(
        self, client: Client, out: Any, target: XarrayTarget
    ) -> dict[Hashable, NDArray[Any]]:
        return _xarray_values(client.compute(out).result(), target)

    def rebuild(self, call: MapCall, driver: Delayed, target: XarrayTarget) -> Any:
        import dask.array as da
        import xarray as xr

        y = call.result
        lazy = _lazy_variables(y)
        arrays = {
            name: da.from_delayed(_item(driver, name), shape=shape, dtype=dtype).rechunk(
                lazy[name].chunks
            )
            for name, (shape, dtype, _) in target[0].items()
        }
        if isinstance(y, xr.DataArray):
            out = y.copy(data=arrays.pop(None)) if None in arrays else y.copy()
        else:
            out = y.copy(data={n: arrays.pop(n, v.data) for n, v in y.data_vars.items()})
        coords = {n: (y[n].dims, a, y[n].attrs) for n, a in arrays.items()}
        return out.assign_coords(coords) if coords else out


class Unmasked:
    """``func``, refusing a masked result (``numpy.ma``) with :class:`RewriteError`: a coded
    block is a plain array, and the decoded output would silently lose the mask. (The map's
    meta shows most masked maps at ``coded()`` time; this catches those whose meta does
    not, on the data.)"""

    __slots__ = ("func",)

    def __init__(self, func: Any):
        self.func = func

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        out = self.func(*args, **kwargs)
        if isinstance(out, np.ma.MaskedArray):
            raise RewriteError(
                f"{self.__name__} returned a masked array (numpy.ma): coded blocks are plain "
                "arrays and the mask would be lost; run it with plain Dask: y.compute()"
            )
        return out

    @property
    def __name__(self) -> str:  # the job's report names the mapped function
        return str(getattr(self.func, "__name__", type(self.func).__name__))

    def __reduce__(self) -> tuple[Any, ...]:
        return (Unmasked, (self.func,))

    def __repr__(self) -> str:
        return f"Unmasked({self.func!r})"


#: The alternative that takes every map as it is (its refusals name it)
_EXACT = "use an exact code, which runs the map as it is: coded(y, code='repetition')"

#: The adapter of each kind (stateless: one instance each)
ARRAY = ArrayRewrite()
APPLY_UFUNC = ApplyUfuncRewrite()
FRAME = FrameRewrite()
XARRAY_MAP_BLOCKS = XarrayMapBlocksRewrite()


def _item(driver: Delayed, key: Hashable) -> Delayed:
    """``driver[key]``: one item of the driver task's result, lazily (``Delayed`` binds its
    operators at run time, out of the type checker's sight)."""
    item: Delayed = driver[key]  # type: ignore[index]
    return item


def _float_unless(dtype: Any, exact_dtypes: bool) -> np.dtype[Any]:
    dtype = np.dtype(dtype)
    return dtype if exact_dtypes or dtype.kind == "f" else np.dtype(np.float64)


def _lazy_variables(obj: Any) -> dict[Hashable, Any]:
    """The dask-backed variables of an xarray object; ``None`` names a DataArray's data."""
    import dask.array as da
    import xarray as xr

    variables: dict[Hashable, Any]
    if isinstance(obj, xr.DataArray):
        variables = {None: obj.variable, **{n: c.variable for n, c in obj.coords.items()}}
    else:
        variables = dict(obj.variables)
    return {n: v for n, v in variables.items() if isinstance(v.data, da.Array)}


def _xarray_values(out: Any, target: XarrayTarget) -> dict[Hashable, NDArray[Any]]:
    """The values of each lazy variable of ``xr.map_blocks``' result, from the coded output.

    Checks the coded output against the template as ``xr.map_blocks`` checks each block's
    result (its type, data variables and index coordinates); a mismatch raises
    :class:`RewriteError`.
    """
    import xarray as xr

    variables, indexes, coords, dims = target
    # xarray's own checks and messages, in its order (xarray.core.parallel._wrapper)
    missing_dims = set(dims) - set(out.dims)
    if missing_dims:
        raise ValueError(f"Dimensions {missing_dims} missing on returned object.")
    for name, index in indexes.items():
        got = out.indexes.get(name)
        if got is not None and not got.equals(index):
            raise RewriteError(
                f"f's output has other values for the index coordinate {name!r} than "
                f"xr.map_blocks' template ({list(got[:5])} vs {list(index[:5])}; plain "
                "xarray raises here too): fix template= or f"
            )
    _same_names("coordinate", set(out.coords), set(coords))
    expect_array = None in variables
    if isinstance(out, xr.DataArray) != expect_array:
        raise RewriteError(
            f"f returned a {type(out).__name__} but xr.map_blocks' template is a "
            f"{'DataArray' if expect_array else 'Dataset'} (plain xarray raises here too): "
            "fix template= or f"
        )
    if not expect_array:
        want = {n for n, (_, _, kind) in variables.items() if kind == "data"}
        _same_names("data", set(out.data_vars), want, allowed=set(variables))
    values = {}
    for name, (shape, dtype, _) in variables.items():
        if name is None:
            var = out.variable
        else:
            var = out[name].variable if name in out.coords or name in out.variables else None
        if var is None or var.shape != shape:
            raise RewriteError(
                f"the coded output's variable {name!r} has shape "
                f"{None if var is None else var.shape}, but xr.map_blocks' template expects "
                f"{shape}: f must keep the layout the template describes (rows along dim); "
                "plain xarray raises on such a mismatch too"
            )
        what = "the output" if name is None else f"variable {name!r}"
        values[name] = _cast(var.values, dtype, what)
    return values


def _same_names(
    what: str, got: set[Any], want: set[Any], allowed: frozenset[Any] | set[Any] = frozenset()
) -> None:
    """Raise ``xr.map_blocks``' own ``ValueError`` (its message) when a result's
    ``what`` ("coordinate" or "data") variables are not the template's: ``want`` all
    present, none beyond them but ``allowed``."""
    if want - got:
        raise ValueError(
            f"Result from applying user function does not contain {what} variables {want - got}."
        )
    extra = got - want - set(allowed)
    if extra:
        raise ValueError(
            f"Result from applying user function has unexpected {what} variables {extra}."
        )


def _cast(values: Any, dtype: np.dtype[Any], what: str) -> NDArray[Any]:
    """``values`` as a NumPy array of ``dtype`` (the plain map's declared dtype); raises
    :class:`RewriteError` where the cast would change values (NaN in an integer dtype,
    fractions, overflow) or drop a mask: plain Dask would have returned them unchanged."""
    if isinstance(values, np.ma.MaskedArray):
        raise RewriteError(
            f"{what} is a masked array (numpy.ma): coded blocks are plain arrays and the "
            "mask would be lost; run it with plain Dask: y.compute()"
        )
    arr = np.asarray(values)
    if arr.dtype == dtype:
        return arr
    with np.errstate(all="ignore"):  # NaN or overflow in the cast: found just below
        cast = arr.astype(dtype)
    if arr.dtype.kind in "biufc" and dtype.kind in "biufc":
        with np.errstate(all="ignore"):
            same = np.array_equal(cast.astype(arr.dtype), arr, equal_nan=arr.dtype.kind in "fc")
        if not same:
            raise RewriteError(
                f"{what} has dtype {arr.dtype} with values that dtype {dtype} cannot hold "
                f"(NaN, fractions or out of range), but the map declares {dtype}: plain Dask "
                f"would return {arr.dtype}. Declare the real dtype (dtype=/meta=/template= "
                f"with {arr.dtype}), or run it with plain Dask: y.compute()"
            )
    return cast


def _frame_like(block: Any, target: Any, enforce: bool = False) -> Any:
    """A decoded partition with the plain map's dtypes and index/column names (``target``:
    its meta); raises :class:`RewriteError` where a cast would change values. ``enforce``
    does what ``map_partitions(enforce_metadata=True)`` does to each partition: an empty
    one becomes the meta, a Series takes the meta's name, a DataFrame must have the
    meta's columns."""
    import pandas as pd

    if enforce and isinstance(block, (pd.DataFrame, pd.Series)) and not len(block):
        return target
    if isinstance(target, pd.DataFrame) and isinstance(block, pd.DataFrame):
        if list(block.columns) != list(target.columns):
            if enforce:
                raise RewriteError(
                    f"f's output has columns {list(block.columns)}, but the map's meta has "
                    f"{list(target.columns)} (plain Dask raises here too): pass the right "
                    "meta= or fix f"
                )
            return block  # the job's own labels: nothing to cast by name
        out = block.copy(deep=False)
        for col, dtype in target.dtypes.items():
            values = block[col]
            if values.dtype != dtype:
                np_dtype = np.dtype(dtype) if isinstance(dtype, np.dtype) else None
                if np_dtype is None:
                    out[col] = values.astype(dtype)
                else:
                    out[col] = _cast(values.to_numpy(), np_dtype, f"column {col!r}")
        if out.columns.nlevels == target.columns.nlevels:
            out.columns.names = target.columns.names
    elif isinstance(target, pd.Series) and isinstance(block, pd.Series):
        if enforce and block.name != target.name:
            block = block.copy(deep=False)
            block.name = target.name
        if block.dtype != target.dtype and isinstance(target.dtype, np.dtype):
            out = pd.Series(
                _cast(block.to_numpy(), target.dtype, f"Series {block.name!r}"),
                index=block.index,
                name=block.name,
            )
        else:
            out = block.astype(target.dtype)
    else:
        return block
    # map_partitions' meta carries what f does to the index's names (rename_axis...),
    # which the decoded partition, labelled with the input's index, does not
    if out.index.nlevels == target.index.nlevels and list(out.index.names) != list(
        target.index.names
    ):
        out.index = out.index.set_names(list(target.index.names))
    return out


def _check_dim_coords(call: MapCall) -> None:
    """Refuse an ``xr.map_blocks`` whose template changes the coordinates along the mapped
    dimension: the coded output gets the input's back (a coded block has none of its own)."""
    y, dim = call.result, call.dim
    if dim is None or dim not in y.dims:
        return
    for name, coord in call.data.coords.items():
        if dim not in coord.dims or name not in y.coords:
            continue
        if name not in call.data.indexes:
            continue
        mine = call.data.indexes[name]
        theirs = y.indexes.get(name)
        if theirs is not None and not mine.equals(theirs):
            raise RewriteError(
                f"xr.map_blocks' template has other values for the coordinate {name!r} "
                f"along the mapped dimension {dim!r} than the input: the coded output "
                "carries the input's coordinates (a coded block mixes blocks and has none "
                "of its own). Keep the coordinate in f and the template, or run it with "
                "plain Dask: xr.map_blocks(f, obj, template=...).compute()"
            )
