"""pandas and dask DataFrames/Series: row blocks (or partitions) in, the same kind out.

A coded share mixes whole blocks linearly, so a block must be one numeric array: the
selected columns are converted to their common NumPy dtype and stacked into a
``(rows, columns)`` array (``(rows,)`` for a Series). Blocks of unequal length are padded
to the longest by repeating their last row, so ``f`` never sees made-up values; the
padding is trimmed from row-wise outputs. On each worker ``f`` sees the share rebuilt as a
pandas object with the input's column names (or Series name) and a fresh ``RangeIndex``:
coded rows are mixtures of rows from several blocks, not labelled rows. The output gets
the original row labels back where rows align (``f`` keeps the rows of its block) and the
labels of ``f``'s own output otherwise (``f`` reduces each block).
"""

from __future__ import annotations

import contextvars
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..exceptions import InvalidInput
from .base import (
    COMBINE_CHOICES,
    Blocks,
    beyond_float64,
    lossy_cast,
    rounding_message,
    undeclared_values_message,
)

__all__ = ["DaskFrameBlocks", "FrameFunction", "FrameOutput", "PandasBlocks", "frame_blocks"]

#: rows of the mock block ``f`` is called on to infer the output of a dask input
MOCK_ROWS = 2

Frame = pd.DataFrame | pd.Series


def frame_blocks(
    data: Any,
    *,
    n_blocks: int | None = None,
    blocks: int | None = None,
    max_blocks: int | None = None,
    meta: Any = None,
    columns: Any = None,
    dim: Any = None,
) -> Blocks:
    """Wrap a pandas or dask DataFrame/Series as K numeric row blocks.

    Parameters
    ----------
    data : pandas.DataFrame, pandas.Series, dask.dataframe.DataFrame or dask.dataframe.Series
        A dask object maps over its partitions (K = ``npartitions``); a pandas object over
        K row blocks.
    n_blocks, blocks, max_blocks : int, optional
        pandas input only: the number of blocks K (split like ``numpy.array_split``), or
        the rows per block (the last block may be shorter). Default: K = ``max_blocks``
        (at most the number of rows).
    meta : optional
        The output of ``f`` for one block, as in ``map_partitions``: a DataFrame or Series
        (empty or not), a ``{column: dtype}`` dict, a ``(name, dtype)`` tuple, or a dtype
        for a scalar. Inferred by calling ``f`` on a mock block when not given.
    columns : list of column labels, optional
        The numeric columns ``f`` sees (DataFrames only); default all of them.
    dim : None
        xarray only: giving it raises ``ValueError``.

    Returns
    -------
    PandasBlocks or DaskFrameBlocks

    Raises
    ------
    TypeError
        Non-numeric columns (object, string, categorical, datetime, timedelta), a
        ``meta`` or ``columns`` of the wrong type.
    ValueError
        Missing values (NaN/NA) or inf in pandas data, unknown ``columns``, empty data,
        ``n_blocks``/``blocks`` for dask input, or ``dim``.
    """
    if isinstance(data, (pd.DataFrame, pd.Series)):
        _check_options(data, dim, n_blocks, blocks)
        return PandasBlocks(
            data,
            n_blocks=n_blocks,
            blocks=blocks,
            max_blocks=max_blocks,
            meta=meta,
            columns=columns,
        )
    import dask.dataframe as dd

    if isinstance(data, (dd.DataFrame, dd.Series)):
        _check_options(data, dim, n_blocks, blocks)
        return DaskFrameBlocks(data, meta=meta, columns=columns)
    raise TypeError(f"expected a pandas or dask DataFrame/Series, got {type(data).__name__}")


def _check_options(data: Any, dim: Any, n_blocks: Any, blocks: Any) -> None:
    if dim is not None:
        raise ValueError("dim applies to xarray objects; a dataframe is mapped over its rows")
    if not isinstance(data, (pd.DataFrame, pd.Series)) and (
        n_blocks is not None or blocks is not None
    ):
        raise ValueError(
            "n_blocks/blocks apply to in-memory data; a dask DataFrame maps over its "
            "partitions: change them with ddf.repartition(npartitions=...)"
        )


def frame_layer_input(
    data: Any,
    *,
    n_blocks: int | None = None,
    blocks: int | None = None,
    meta: Any = None,
    columns: Any = None,
    dim: Any = None,
    **_: Any,
) -> Any:
    """The dask DataFrame/Series an exact code copies the map of (``runtime.redundant``),
    after the checks :func:`frame_blocks` makes of the same options, so a bad option
    raises the same error whatever the code.

    Returns
    -------
    dask DataFrame or Series
        ``data``, restricted to ``columns``.
    """
    _check_options(data, dim, n_blocks, blocks)
    if meta is not None:
        FrameOutput.from_meta(meta)
    return _select(data, columns)


# -- dtypes -----------------------------------------------------------------------------
def numeric_dtype(dtype: Any) -> np.dtype | None:
    """The NumPy dtype a column is coded as, or None when it is not real numeric.

    NumPy bool/int/uint/float columns are kept; pandas nullable (``Int64``, ``Float64``,
    ``boolean``) and pyarrow numeric columns become their NumPy dtype. Object, string,
    categorical, datetime, timedelta, complex and sparse columns are not numeric here.
    """
    if isinstance(dtype, np.dtype):
        return dtype if dtype.kind in ("b", "i", "u", "f") else None
    np_dtype = getattr(dtype, "numpy_dtype", None)
    if getattr(dtype, "kind", "O") in ("b", "i", "u", "f") and np_dtype is not None:
        np_dtype = np.dtype(np_dtype)
        return np_dtype if np_dtype.kind in ("b", "i", "u", "f") else None
    return None


def _labelled_dtypes(obj: Any) -> list[tuple[Any, Any]]:
    """(label, dtype) of each column; a Series is one column labelled by its name."""
    if obj.ndim == 2:
        return list(zip(obj.columns, obj.dtypes, strict=True))
    return [(obj.name, obj.dtype)]


def _hint(dtype: Any) -> str:
    kind = getattr(dtype, "kind", "O")
    if isinstance(dtype, pd.CategoricalDtype):
        return ".cat.codes"
    if isinstance(dtype, pd.SparseDtype):
        return ".sparse.to_dense()"
    if kind in ("M", "m"):
        return '.astype("int64")'
    return ".astype(float) where the values are numbers"


#: How map_coded's caller selects the columns f sees (:func:`coded_dtype`'s ``select``)
SELECT_WITH_COLUMNS = "with columns=[...]"


def coded_dtype(
    obj: Any, what: str = "data", selectable: bool = True, select: str = SELECT_WITH_COLUMNS
) -> np.dtype:
    """The common NumPy dtype the columns of ``obj`` are coded as.

    Raises ``TypeError`` if any column is not real numeric, naming them and how to fix
    it. ``selectable``: the fix may be to select the numeric columns, as ``select`` says
    (a phrase of the call that raises: ``map_coded`` takes ``columns=``, ``coded()`` a
    selection before the map; ``{numeric}`` is replaced by the numeric columns' labels).
    """
    pairs = _labelled_dtypes(obj)
    if not pairs:
        raise ValueError(f"{what} has no columns: there is nothing to compute on")
    bad = [(label, dtype) for label, dtype in pairs if numeric_dtype(dtype) is None]
    if bad:
        names = ", ".join(f"{label!r} ({dtype})" for label, dtype in bad)
        fixes = "; ".join(sorted({f"{_hint(d)} for {d}" for _, d in bad}))
        numeric = [label for label, dtype in pairs if numeric_dtype(dtype) is not None]
        how = (
            f"Select the numeric columns f uses {select.format(numeric=numeric)}, or convert"
            if selectable and numeric
            else "Convert"
        )
        raise TypeError(
            f"{what} has non-numeric column(s) {names}: coded computing mixes rows linearly, "
            f"so f can only see real numbers (bool, integer, float). {how} them first "
            f"({fixes})"
        )
    return np.result_type(*[numeric_dtype(d) for _, d in pairs])


def numeric_values(
    obj: Frame, dtype: np.dtype, what: str, rows: int | None = None, finite: bool = True
) -> np.ndarray:
    """``obj`` as one C-contiguous ``dtype`` array, rejecting non-numeric columns, pandas
    NA (nullable columns) and, with ``finite``, NaN and inf; with ``rows``, padded to that
    many rows by repeating the last one.

    ``finite=False`` keeps NaN and inf (a code that copies blocks passes them through, as
    plain Dask does: :meth:`PandasBlocks.check_finite` refuses them for the codes that mix
    blocks). NA stays refused under every code: it has no float of its own that an
    ``Int64`` or ``boolean`` column could carry through f and back.

    One conversion (pandas' column blocks to the row-major array the encode reads: a
    Fortran-ordered or strided array would be copied again by every encode that mixes it)
    and one pass over the values for NaN/inf; the per-column error details are worked out
    only when that pass fails. Raises :class:`~dask_bacc.exceptions.InvalidInput` (a
    ``ValueError``), which a coded job reports as a ``ValueError`` when it is raised on a
    worker.
    """
    try:
        coded_dtype(obj, what)
    except TypeError as exc:  # a dask partition whose dtypes differ from its meta
        raise InvalidInput(str(exc)) from exc
    pairs = _labelled_dtypes(obj)
    series = obj.ndim == 1
    if any(not isinstance(d, np.dtype) for _, d in pairs):
        # nullable / pyarrow columns: NA has no NumPy value, find it before converting
        missing = np.asarray(obj.isna()).any(axis=0)
        if missing.any():
            _raise_missing(pairs, missing, series, what)
    if dtype.kind == "f":
        _refuse_rounding(obj, pairs, what)
    _refuse_lossy_cast(obj, pairs, dtype, what)
    raw = obj.to_numpy(dtype=dtype)
    if rows is None or rows == raw.shape[0] or raw.shape[0] == 0:
        values = np.ascontiguousarray(raw)
    else:
        values = np.empty((rows, *raw.shape[1:]), dtype=raw.dtype)
        _pad_into(values, raw)  # the repeated rows are finite when the others are
    if finite:
        refuse_nonfinite_values(values, pairs, series, what)
    return values


def _refuse_lossy_cast(
    obj: Frame, pairs: list[tuple[Any, Any]], dtype: np.dtype, what: str
) -> None:
    """Refuse a column whose values ``dtype`` (the coded dtype, from the collection's
    meta) cannot hold: a partition whose real dtypes differ from its meta (NaN or
    fractions in a column the meta types int64), before the cast changes them. An
    :class:`~dask_bacc.exceptions.InvalidInput` naming the column."""
    for pos, (label, column_dtype) in enumerate(pairs):
        own = numeric_dtype(column_dtype)
        if own is None or own == dtype or np.can_cast(own, dtype, "safe"):
            continue
        column = obj.iloc[:, pos] if isinstance(obj, pd.DataFrame) else obj
        found = lossy_cast(column.to_numpy(dtype=own), dtype)
        if found is not None:
            where = f"column {label!r}" if obj.ndim == 2 else f"the Series {label!r}"
            raise InvalidInput(
                undeclared_values_message(f"{what}: {where}", found, column_dtype, dtype)
            )


def refuse_nonfinite_values(
    values: np.ndarray, pairs: list[tuple[Any, Any]], series: bool, what: str
) -> None:
    """Raise :class:`~dask_bacc.exceptions.InvalidInput` naming the columns of ``values``
    (labelled by ``pairs``) that hold NaN, else inf."""
    if values.dtype.kind != "f" or np.isfinite(values).all():
        return
    columns = values.reshape(values.shape[0], -1)
    missing = np.isnan(columns).any(axis=0)
    if missing.any():
        _raise_missing(pairs, missing, series, what)
    where = (
        "the Series" if series else f"column(s) {_pick(pairs, ~np.isfinite(columns).all(axis=0))}"
    )
    raise InvalidInput(
        f"{what} has inf values in {where}; a code that mixes blocks needs finite numbers "
        "(the exact codes that copy blocks, repetition, hedged and speculative, pass them "
        "through): replace them first (e.g. df.replace([np.inf, -np.inf], value))"
    )


def _refuse_rounding(
    obj: Frame, pairs: list[tuple[Any, Any]], what: str, output: bool = False
) -> None:
    """Refuse a 64-bit integer column holding integers beyond 2**53 that is coded as
    float64 because of the other columns' dtypes (an exact decode would return rounded
    integers as f's own); an :class:`~dask_bacc.exceptions.InvalidInput` (a
    ``ValueError``) naming the column, its dtype and the fixes. ``output``: ``obj`` is
    f's output on a share, not the data."""
    for pos, (label, column_dtype) in enumerate(pairs):
        np_dtype = numeric_dtype(column_dtype)
        if np_dtype is None or np_dtype.kind not in "iu" or np_dtype.itemsize < 8:
            continue  # (smaller integers always fit in float64)
        column = obj.iloc[:, pos] if isinstance(obj, pd.DataFrame) else obj
        top = beyond_float64(column.to_numpy(dtype=np_dtype))
        if top is None:
            continue
        others = [(lb, numeric_dtype(d)) for lb, d in pairs if numeric_dtype(d) != np_dtype]
        beside = (
            f"the column(s) {[lb for lb, _ in others]} of dtype "
            f"{', '.join(sorted({str(d) for _, d in others}))}"
        )
        if output:
            fix = (
                "Make f return it as float if float64 precision is enough "
                f"(.astype({{{label!r}: 'float64'}})), or return the integer column(s) "
                "from a map of their own: an output of one integer dtype is decoded in it."
            )
        else:
            fix = (
                "Cast it explicitly if float64 precision is enough "
                f"(df.astype({{{label!r}: 'float64'}})), rescale it (e.g. nanosecond times "
                "to seconds, // 10**9), or map the integer column(s) on their own "
                f"(map_coded's columns=[{label!r}, ...]; under coded(), select them before "
                f"the map: ddf[[{label!r}, ...]]): columns of one integer dtype are coded "
                "in it."
            )
        raise InvalidInput(
            rounding_message(f"{what} column {label!r}", column_dtype, top, beside, fix, output)
        )


def _raise_missing(pairs: list[tuple[Any, Any]], missing: Any, series: bool, what: str) -> None:
    where = "the Series" if series else f"column(s) {_pick(pairs, missing)}"
    raise InvalidInput(
        f"{what} has missing values (NaN/NA) in {where}: a code that mixes blocks needs "
        "finite numbers (NaN in float columns passes through the codes that copy blocks, "
        "repetition, hedged and speculative; pandas NA in nullable columns through none): "
        "fill or drop them first (fillna(...) / dropna())"
    )


def _pick(pairs: list[tuple[Any, Any]], mask: Any) -> list[Any]:
    return [label for (label, _), bad in zip(pairs, np.atleast_1d(mask), strict=True) if bad]


def _select(data: Any, columns: Any) -> Any:
    """The columns ``f`` sees (pandas or dask)."""
    if columns is None:
        return data
    if data.ndim == 1:
        raise ValueError("columns= applies to DataFrames; a Series is a single column")
    if isinstance(columns, (str, bytes)) or not isinstance(
        columns, (list, tuple, pd.Index, np.ndarray)
    ):
        raise TypeError(
            f"columns must be a list of column labels (e.g. columns=['a', 'b']), got "
            f"{type(columns).__name__} {columns!r}"
        )
    wanted = list(columns)
    if not wanted:
        raise ValueError("columns is empty: select at least one numeric column")
    if len(set(wanted)) != len(wanted):
        raise ValueError(f"columns has repeated labels: {wanted}")
    unknown = [c for c in wanted if c not in data.columns]
    if unknown:
        raise ValueError(
            f"columns {unknown} are not in the data (its columns: {list(data.columns)})"
        )
    return data[wanted]


def _pad(values: np.ndarray, rows: int) -> np.ndarray:
    """Repeat the last row up to ``rows``: f never sees made-up values (log(0) etc.)."""
    short = rows - values.shape[0]
    if short == 0:
        return values
    out = np.empty((rows, *values.shape[1:]), dtype=values.dtype)
    _pad_into(out, values)
    return out


def _pad_into(out: np.ndarray, values: np.ndarray) -> None:
    """Write ``values`` into ``out`` (as many rows or fewer), repeating the last row."""
    n = values.shape[0]
    out[:n] = values
    out[n:] = values[-1:]


# -- f's output: the template, the worker-side conversion and the rebuild ---------------
def _output_dtype(template: Any, decoded: np.dtype) -> Any:
    """Dtype of an output column: the template's where the decoded values are exact or
    float columns anyway; otherwise the decoded float dtype (never truncating Berrut's
    approximations of integer or boolean outputs)."""
    if decoded.kind != "f" or getattr(template, "kind", "O") == "f":
        return template
    return decoded


def _as_dtype(values: np.ndarray, dtype: Any) -> Any:
    if isinstance(dtype, np.dtype):
        return values.astype(dtype, copy=False)
    return pd.array(values, dtype=dtype)  # nullable / pyarrow numeric


@dataclass(frozen=True, eq=False)  # holds pandas Indexes: compared by identity
class FrameOutput:
    """What ``f`` returns for one block: a DataFrame, a Series or a scalar.

    Built from ``meta`` or from ``f``'s output on a mock block. On the workers it checks
    and converts ``f``'s output to a numeric array (:meth:`to_array`); on the client or in
    the output tasks it rebuilds the pandas object from decoded values (:meth:`build`).
    """

    kind: str  # "frame", "series" or "scalar"
    dtypes: tuple[Any, ...]  # one per column (frame), else one
    columns: pd.Index | None = None
    name: Any = None
    index: pd.Index | None = None  # the template's own row labels (for reductions)

    @classmethod
    def of(cls, obj: Any, what: str) -> FrameOutput:
        """The template of ``obj`` (``TypeError`` if it is not a numeric pandas object,
        NumPy array of at most 2 dimensions, or number)."""
        if isinstance(obj, pd.DataFrame):
            if obj.shape[1] == 0:
                raise TypeError(f"{what} is a DataFrame without columns")
            coded_dtype(obj, what, selectable=False)
            return cls("frame", tuple(obj.dtypes), obj.columns, None, obj.index)
        if isinstance(obj, pd.Series):
            coded_dtype(obj, what, selectable=False)
            return cls("series", (obj.dtype,), None, obj.name, obj.index)
        if isinstance(obj, (np.ndarray, np.generic, bool, int, float)):
            arr = np.asarray(obj)
            if numeric_dtype(arr.dtype) is None:
                raise TypeError(f"{what} has dtype {arr.dtype}; it must be real numeric")
            if arr.ndim == 0:
                return cls("scalar", (arr.dtype,))
            if arr.ndim == 1:
                return cls("series", (arr.dtype,), index=pd.RangeIndex(arr.shape[0]))
            if arr.ndim == 2:
                rows, cols = pd.RangeIndex(arr.shape[0]), pd.RangeIndex(arr.shape[1])
                return cls("frame", (arr.dtype,) * arr.shape[1], cols, None, rows)
            raise TypeError(
                f"{what} is a {arr.ndim}-d array; f must return a DataFrame, Series, "
                "1-d/2-d array or number for a dataframe (map a NumPy array for n-d output)"
            )
        raise TypeError(
            f"{what} is a {type(obj).__name__}; f must return a DataFrame, Series, NumPy "
            "array or number"
        )

    @classmethod
    def from_meta(cls, meta: Any) -> FrameOutput:
        """The template given by ``meta=`` (as in ``map_partitions``)."""
        from dask.dataframe.utils import make_meta

        obj = meta
        if not isinstance(meta, (pd.DataFrame, pd.Series)):
            try:
                obj = make_meta(meta)
            except (TypeError, ValueError) as exc:
                raise TypeError(_META_HELP + f", got {type(meta).__name__} {meta!r}") from exc
            if not isinstance(obj, (pd.DataFrame, pd.Series, np.generic)):
                raise TypeError(_META_HELP + f", got {type(meta).__name__} {meta!r}")
        return cls.of(obj, "meta")

    @property
    def rows(self) -> int | None:
        """Rows of the template object (None for a scalar)."""
        return None if self.index is None else len(self.index)

    @property
    def _frame_columns(self) -> pd.Index:
        """The columns of a ``"frame"`` output (which always has them)."""
        assert self.columns is not None
        return self.columns

    def describe(self) -> str:
        if self.kind == "frame":
            return f"a DataFrame with columns {list(self._frame_columns)}"
        return "a Series" if self.kind == "series" else "a scalar"

    def to_array(self, out: Any) -> np.ndarray:
        """``f``'s output on a share as a numeric array of the template's layout.

        Raises when it does not fit the template: the coded job counts that result as an
        erasure (it does not average it in).
        """
        if isinstance(out, pd.DataFrame):
            if self.kind != "frame":
                raise ValueError(f"f returned a DataFrame; its output should be {self.describe()}")
            if not out.columns.equals(self.columns):
                raise ValueError(
                    f"f returned columns {list(out.columns)}; its output should have "
                    f"{list(self._frame_columns)} (as meta or f's output on a mock block)"
                )
            arr = _pandas_values(out)
        elif isinstance(out, pd.Series):
            arr = _pandas_values(out)
        else:
            arr = np.asarray(out)
            if not arr.flags.c_contiguous:  # e.g. f returned a transposed or sliced array
                arr = np.ascontiguousarray(arr)
        ndim = {"frame": 2, "series": 1, "scalar": 0}[self.kind]
        if arr.ndim != ndim or (self.kind == "frame" and arr.shape[1] != len(self._frame_columns)):
            raise ValueError(
                f"f returned an array of shape {arr.shape}; its output should be {self.describe()}"
            )
        return arr

    def labels(self, rows: int) -> pd.Index:
        """Row labels of one block's output when ``f`` reduces: the template's, if it has
        that many rows (e.g. column names after ``df.sum()``), else ``0..rows-1``."""
        if self.index is not None and len(self.index) == rows:
            return self.index
        return pd.RangeIndex(rows)

    def build(
        self,
        values: np.ndarray,
        index: pd.Index,
        decoded: np.dtype,
        exact: tuple[Any, ...] | None = None,
    ) -> Frame:
        """The pandas object for one block from its decoded ``values``. ``exact``: the
        values are f's own outputs (an exact code's copies), and these are the dtypes plain
        Dask gives each column (ints and bools that travelled as float64 beside floats)."""
        if exact is not None:
            dtypes = list(exact)
        else:
            dtypes = [_output_dtype(d, decoded) for d in self.dtypes]
        if self.kind == "frame":
            values = np.asarray(values).reshape(-1, len(self._frame_columns))
            if len(set(dtypes)) == 1 and isinstance(dtypes[0], np.dtype):
                return pd.DataFrame(_as_dtype(values, dtypes[0]), index=index, columns=self.columns)
            cols = {i: _as_dtype(values[:, i], d) for i, d in enumerate(dtypes)}
            out = pd.DataFrame(cols, index=index)
            out.columns = self.columns
            return out
        values = np.reshape(values, -1)  # a scalar per block: a Series of one value
        return pd.Series(_as_dtype(values, dtypes[0]), index=index, name=self.name)


_META_HELP = (
    "meta must be an empty DataFrame or Series like f's output, a {column: dtype} dict, "
    "a (name, dtype) tuple or a dtype (for a scalar per block)"
)


def _pandas_values(obj: Frame) -> np.ndarray:
    """f's output as one C-contiguous array (the layout the sketches and the decode read:
    anything else would be copied again there, on one worker, for every result)."""
    dtype = coded_dtype(obj, "f's output", selectable=False)
    pairs = _labelled_dtypes(obj)
    if dtype.kind == "f":  # (raised from f's task: the job fails with this ValueError)
        _refuse_rounding(obj, pairs, "f's output:", output=True)
    if any(not isinstance(d, np.dtype) for _, d in pairs):
        if np.asarray(obj.isna()).any():
            # missing values of nullable columns become NaN, which the job rejects as invalid
            return np.ascontiguousarray(obj.to_numpy(dtype=np.float64, na_value=np.nan))
        return np.ascontiguousarray(obj.to_numpy(dtype=dtype))
    if isinstance(obj, pd.Series) or obj.shape[1] == 1:
        return np.ascontiguousarray(obj.to_numpy(dtype=dtype))
    # column by column straight into the row-major array: one pass (to_numpy would make a
    # column-major array, and a second copy would reorder it)
    out = np.empty(obj.shape, dtype=dtype)
    for i in range(obj.shape[1]):
        out[:, i] = obj.iloc[:, i].to_numpy()
    return out


class FrameFunction:
    """``func`` on a coded share seen as a pandas object (what runs on each worker).

    The share becomes a DataFrame with the selected column names (or a Series with the
    input's name) and a ``RangeIndex``; ``func``'s output is checked against the output
    template and returned as a numeric array.
    """

    def __init__(self, func: Any, columns: pd.Index | None, name: Any, output: FrameOutput):
        self.func = func
        self.columns = columns
        self.name = name
        self.output = output

    def __call__(self, share: np.ndarray, *args: Any, **kwargs: Any) -> np.ndarray:
        out = self.func(_view(share, self.columns, self.name), *args, **kwargs)
        return self.output.to_array(out)

    def __repr__(self) -> str:
        name = getattr(self.func, "__name__", type(self.func).__name__)
        return f"<FrameFunction {name} -> {self.output.describe()}>"


def _made_up_index(meta: pd.Index, rows: int) -> pd.Index | None:
    """``rows`` labels of ``meta``'s dtype and name, unlike a RangeIndex (None when the
    dtype is not one it can make: a MultiIndex, categories, intervals...)."""
    if isinstance(meta, pd.MultiIndex):
        return None
    dtype = meta.dtype
    try:
        if isinstance(dtype, np.dtype) and dtype.kind in "iuf":
            return pd.Index((np.arange(rows) * 7 + 3).astype(dtype), name=meta.name)
        if isinstance(dtype, np.dtype) and dtype.kind == "b":
            return None
        if dtype.kind == "M":
            times = pd.date_range("2001-02-03 04:00", periods=rows, freq="7h")
            return pd.Index(times, name=meta.name).astype(dtype)
        if dtype.kind == "O" or pd.api.types.is_string_dtype(dtype):
            return pd.Index([f"row{7 * k + 3}" for k in range(rows)], name=meta.name).astype(dtype)
    except (TypeError, ValueError):
        return None
    return None


def _deterministic(out: Any, again: Any) -> bool:
    """``again()`` (f on the same block once more) gives ``out`` again."""
    try:
        return _same_frame_values(out, again())
    except Exception:
        return False


def _same_frame_values(a: Any, b: Any) -> bool:
    """``a`` and ``b`` (f's outputs on two labellings of one block) hold the same values
    under the same column labels / name, whatever their index."""
    if type(a) is not type(b):
        return False
    if isinstance(a, pd.DataFrame):
        if not a.columns.equals(b.columns) or a.shape != b.shape:
            return False
        if not (a.dtypes.to_numpy() == b.dtypes.to_numpy()).all():
            return False
    elif isinstance(a, pd.Series):
        if a.name != b.name or a.shape != b.shape or a.dtype != b.dtype:
            return False
    try:
        va, vb = np.asarray(a), np.asarray(b)
        if va.shape != vb.shape:
            return False
        nan = va.dtype.kind in "fc" and vb.dtype.kind in "fc"
        return bool(np.array_equal(va, vb, equal_nan=nan))
    except Exception:
        return False


def _view(values: np.ndarray, columns: pd.Index | None, name: Any) -> Frame:
    if columns is None:
        return pd.Series(values, name=name)
    return pd.DataFrame(values, columns=columns)


# -- the adapters ------------------------------------------------------------------------
class MockCallError(ValueError):
    """f failed on the mock block that :meth:`_FrameBlocks.wrap` calls it on to learn its
    output; the message advises map_coded's ``meta=`` (``coded()`` gives its own advice).

    Attributes
    ----------
    fname : str
        f's name.
    why : str
        f's exception, as text.
    rows : int
        The mock block's rows.
    """

    def __init__(self, fname: str, why: str, rows: int):
        super().__init__(
            f"could not infer the output of {fname} by calling it on a mock block ({why}); "
            "pass meta= (an empty DataFrame/Series like its output for one block, as in "
            "map_partitions)"
        )
        self.fname, self.why, self.rows = fname, why, rows


#: What to do instead of reading a partition's index in f
INDEX_ALTERNATIVE = (
    "use positions instead (a coded partition has a RangeIndex), make the labels a "
    "column (ddf.reset_index()), or run it with plain Dask: "
    "ddf.map_partitions(f, ...).compute()"
)


class _FrameBlocks(Blocks):
    """What pandas and dask inputs share: the view ``f`` gets, the output template and
    the rebuild of the output."""

    #: the blocks are pandas (True) or dask partitions (False): the fix in error messages
    in_memory = True

    def __init__(self, frame: Any, K: int, rows: int, meta: Any):
        if meta is not None:
            FrameOutput.from_meta(meta)  # a wrong meta is reported before the data is read
        #: ``meta=`` as given; read by each :meth:`wrap` (``CodedData.map`` sets it on a copy)
        self.meta = meta
        #: the output template of the wrapped function (set by :meth:`wrap`)
        self.output: FrameOutput | None = None
        series = frame.ndim == 1
        dtype = coded_dtype(frame)
        #: the input's own dtypes (f sees them converted to one coded dtype)
        self.input_dtypes = frame.dtype if series else frame.dtypes
        #: the dtypes plain Dask's map would give f's output (set by :meth:`wrap`): an
        #: exact decode gets them back
        self.exact_dtypes: tuple[Any, ...] | None = None
        self.columns = None if series else frame.columns
        self.name = frame.name if series else None
        #: the input's (empty) index: its name and dtype, for :meth:`_check_index_unused`
        self.index_meta = getattr(frame, "_meta", frame).index[:0]
        shape = (rows,) if series else (rows, len(frame.columns))
        super().__init__(K, shape, dtype)
        self.lengths: list[int] | None = None

    def _mock(self) -> np.ndarray:
        raise NotImplementedError

    def wrap(self, func: Any, args: tuple, kwargs: dict) -> FrameFunction:
        """The callable that runs ``func`` on a share.

        Learns ``func``'s output from ``meta``, or else by calling it once on a mock
        block: the first (padded) block of pandas input, a small block of ones and twos
        in the coded dtype for dask input.
        """
        if self.meta is not None:
            self.output = FrameOutput.from_meta(self.meta)
            self.exact_dtypes = self.output.dtypes
            return FrameFunction(func, self.columns, self.name, self.output)
        mock = _view(self._mock(), self.columns, self.name)
        fname = getattr(func, "__name__", type(func).__name__)
        # first (f's last call is on what it sees in the job): its output on the input's
        # own dtypes, which an exact decode gives back
        plain = self._plain_output(func, mock, args, kwargs)
        probe = self._index_probe(func, mock, args, kwargs)
        try:
            out = func(mock, *args, **kwargs)
        except Exception as exc:
            if probe is not None and probe[2] is None:
                # it ran on the labels it was written for: what fails is the RangeIndex
                # of a coded block, so meta= would only move the failure to the job
                from ..exceptions import RewriteError

                raise RewriteError(
                    f"{fname} reads the index of its partition: it fails on a block with "
                    f"a RangeIndex ({type(exc).__name__}: {exc}) but not on one labelled "
                    "like the input, and a coded partition mixes rows of several "
                    f"partitions, so it has a RangeIndex; f must not use the index: "
                    f"{INDEX_ALTERNATIVE}"
                ) from None
            raise MockCallError(fname, f"{type(exc).__name__}: {exc}", len(mock)) from exc
        self.output = FrameOutput.of(out, f"the output of {fname}")
        self._check_index_unused(fname, mock, out, probe, lambda: func(mock, *args, **kwargs))
        if (
            plain is not None
            and plain.kind == self.output.kind
            and len(plain.dtypes) == len(self.output.dtypes)
        ):
            self.exact_dtypes = plain.dtypes
        # pandas: the mock is a whole block, so a reduction is known now
        self._check_reduction(self.output.rows)
        return FrameFunction(func, self.columns, self.name, self.output)

    def _index_probe(
        self, func: Any, mock: Frame, args: tuple, kwargs: dict
    ) -> tuple[pd.Index, Any, BaseException | None] | None:
        """``f`` on the mock block labelled with a made-up index of the input's dtype and
        name (``3, 10, 17, ...`` for numbers, 7-hourly times for datetimes): ``(labels,
        output, None)``, or ``(labels, None, error)`` when ``f`` fails there; None for a
        ``MultiIndex`` and index dtypes it makes no labels for. Called before ``f``'s call
        on the mock itself, so that ``f``'s last call is on what it sees in the job."""
        labels = _made_up_index(self.index_meta, len(mock))
        if labels is None:
            return None
        view = mock.copy()
        view.index = labels
        try:
            return labels, func(view, *args, **kwargs), None
        except Exception as exc:
            return labels, None, exc

    def _check_index_unused(
        self,
        fname: str,
        mock: Frame,
        out: Any,
        probe: tuple[pd.Index, Any, Any] | None,
        again: Any,
    ) -> None:
        """Refuse an ``f`` that reads its partition's index or changes it.

        A coded block mixes rows of several blocks, so ``f`` sees a ``RangeIndex``; the
        output gets the input's index back. ``probe`` (:meth:`_index_probe`) is ``f`` on
        the mock labelled like the input: if its values, columns or name differ from
        ``out`` (``f`` on the ``RangeIndex`` mock), or ``f`` failed only there, ``f`` reads
        the index; if ``f`` kept the ``RangeIndex`` labels but not the made-up ones
        (``reset_index``...), it changes the index. Either way the coded answer would
        differ from ``f`` on the real partitions. A check on one small mock block: a
        dependence that only shows on other labels can go unseen. ``again()`` runs ``f``
        on the mock once more when the outputs differ: if that differs from ``out`` too,
        ``f`` is not deterministic (random noise...) and nothing is concluded.

        Raises
        ------
        RewriteError
            ``f`` reads or changes its partition's index.
        """
        from ..exceptions import RewriteError

        if probe is None:
            return
        labels, other, error = probe
        alternative = INDEX_ALTERNATIVE
        if error is not None:
            raise RewriteError(
                f"{fname} reads the index of its partition: it fails on a block labelled like "
                f"the input ({type(error).__name__}: {error}) but not on one with a "
                f"RangeIndex; {alternative}"
            )
        if not _same_frame_values(out, other) and _deterministic(out, again):
            raise RewriteError(
                f"{fname} reads the index of its partition: its output changes with the "
                "index's labels, which a coded partition does not have (it mixes rows of "
                f"several partitions); {alternative}"
            )
        if (
            isinstance(out, (pd.DataFrame, pd.Series))
            and out.index.equals(mock.index)
            and not other.index.equals(labels)
        ):
            raise RewriteError(
                f"{fname} keeps the rows of its partition but changes their index labels "
                "(reset_index...): the coded output gets the input's index back; change the "
                "index after the map, or run it with plain Dask: "
                "ddf.map_partitions(f, ...).compute()"
            )

    def _plain_output(
        self, func: Any, mock: Frame, args: tuple, kwargs: dict
    ) -> FrameOutput | None:
        """f's output template on the mock in the input's own dtypes (what plain Dask's
        map gives), or None when f fails there."""
        try:
            return FrameOutput.of(func(mock.astype(self.input_dtypes), *args, **kwargs), "")
        except Exception:
            return None

    def _template(self) -> FrameOutput:
        """The output template (:meth:`wrap` sets it)."""
        if self.output is None:
            raise RuntimeError("assemble() before wrap(): the output template is unknown")
        return self.output

    @property
    def _rebuild_dtypes(self) -> tuple[Any, ...] | None:
        return self.exact_dtypes if self.exact_decode else None

    def _rowwise(self, combine: str, out_shape: tuple[int, ...]) -> bool:
        """Whether f keeps the rows of its block (the output takes the input's row labels).

        ``"auto"``: when its output has as many rows as the (padded) block; ``"concat"``
        insists on it and ``"stack"`` reads the output as a per-block reduction.
        """
        if combine not in COMBINE_CHOICES:
            raise ValueError(f"combine must be one of {COMBINE_CHOICES}, got {combine!r}")
        self._template()  # raises before wrap()
        keeps = len(out_shape) >= 1 and out_shape[0] == self.block_rows
        if combine == "concat" and not keeps:
            raise ValueError(
                f"combine='concat' keeps the rows of each block, but f returns output of "
                f"shape {out_shape} for blocks of {self.block_rows} rows"
            )
        return keeps and combine != "stack"

    length_varies = True

    def length_unproven(self, out_shape: tuple[int, ...]) -> bool:
        """A DataFrame map that does not keep its block's rows and returns rows of its
        own (a reduction such as ``df.sum()``, or a filter, a merge, ``drop_duplicates``,
        whose length depends on the values): pandas' meta says nothing of the length."""
        return len(out_shape) >= 1 and out_shape[0] != self.block_rows

    def _check_reduction(self, out_rows: int | None) -> None:
        """A reduction over padded blocks would count the padding: refuse unequal blocks.

        ``out_rows`` is the number of rows f returns per block (None: a scalar).
        """
        lengths = self.lengths
        if lengths is None or len(set(lengths)) <= 1 or out_rows == self.block_rows:
            return
        total = sum(lengths)
        if self.in_memory:
            divisors = [k for k in range(self.K, 0, -1) if total % k == 0]
            fix = f"pass n_blocks that divides the {total} rows (e.g. n_blocks={divisors[0]})"
        else:
            fix = (
                "repartition it into equal partitions first, e.g. "
                "ddf.repartition(divisions=...) with evenly spaced divisions, or "
                f"dd.from_pandas(df, chunksize=c) with c dividing its {total} rows"
            )
        returns = "a scalar" if out_rows is None else f"{out_rows} row(s)"
        raise ValueError(
            f"f reduces each block (it returns {returns} for a block of {self.block_rows} "
            f"rows), but the blocks have unequal lengths {lengths}: the padding of the "
            f"shorter ones would change their results. Use equal blocks: {fix}"
        )

    def _piece_labels(self, rowwise: bool, out_shape: tuple[int, ...]) -> pd.Index | None:
        if rowwise:
            return None  # the block's own index
        self._check_reduction(out_shape[0] if out_shape else None)
        return self._template().labels(out_shape[0] if out_shape else 1)


class PandasBlocks(_FrameBlocks):
    """An in-memory pandas DataFrame or Series split into K row blocks.

    The blocks are split like ``numpy.array_split`` (``n_blocks``) or into runs of
    ``blocks`` rows, and padded to the longest by repeating their last row. The output is
    a pandas object of the same kind.
    """

    kind = "pandas"
    local = True
    gather_output = True
    lengths: list[int]  # known from the start

    def check_finite(self) -> None:
        """Refuse NaN and inf, naming the columns (the codes that mix blocks only: the
        blocks were read keeping them; pandas NA was refused under every code)."""
        if self.columns is None:  # a Series
            refuse_nonfinite_values(self.values, [(self.name, self.input_dtypes)], True, "data")
        else:
            pairs = list(zip(self.columns, self.input_dtypes, strict=True))
            refuse_nonfinite_values(self.values, pairs, False, "data")

    def __init__(
        self,
        data: Frame,
        *,
        n_blocks: int | None = None,
        blocks: int | None = None,
        max_blocks: int | None = None,
        meta: Any = None,
        columns: Any = None,
    ):
        frame = _select(data, columns)
        n = len(frame)
        if n == 0:
            raise ValueError("data is empty (0 rows)")
        K = _resolve_frame_k(n, n_blocks, blocks, max_blocks)
        self.bounds = _bounds(n, K, blocks)
        lengths = [stop - start for start, stop in self.bounds]
        super().__init__(frame, K, max(lengths), meta)
        self.lengths = lengths
        self.values = numeric_values(frame, self.dtype, "data", finite=False)
        self.index = frame.index

    def split(self) -> list[np.ndarray]:
        rows = self.block_shape[0]
        return [_pad(self.values[start:stop], rows) for start, stop in self.bounds]

    def stacked(self) -> np.ndarray:
        if len(set(self.lengths)) == 1:
            return self.values.reshape((self.K, *self.block_shape))  # a view, no copy
        out = np.empty((self.K, *self.block_shape), dtype=self.values.dtype)
        for block, (start, stop) in zip(out, self.bounds, strict=True):
            _pad_into(block, self.values[start:stop])
        return out

    def _mock(self) -> np.ndarray:
        start, stop = self.bounds[0]
        return _pad(self.values[start:stop], self.block_shape[0])

    def assemble(
        self,
        decoded: Sequence[np.ndarray],
        out_shape: tuple[int, ...],
        out_dtype: np.dtype,
        combine: str = "auto",
    ) -> Frame:
        rowwise = self._rowwise(combine, out_shape)
        labels = self._piece_labels(rowwise, out_shape)
        pieces = []
        for (start, stop), values in zip(self.bounds, decoded, strict=True):
            if rowwise:
                values, index = np.asarray(values)[: stop - start], self.index[start:stop]
            else:
                index = labels
            pieces.append(self._template().build(values, index, out_dtype, self._rebuild_dtypes))
        return pd.concat(pieces)


class DaskFrameBlocks(_FrameBlocks):
    """A dask DataFrame or Series whose partitions are the K blocks.

    When the job starts, the partitions are computed on the cluster and their indexes
    brought to the client (their lengths set the padding; the output gets them back).
    Shorter partitions are padded to the longest; an empty one borrows a row of another
    partition, and its output is empty. The output is a dask object backed by one small
    task per partition that depends on the decoded block only (so it runs where the
    decode ran), submitted as soon as the blocks are decoded; it keeps the input's
    divisions when ``f`` keeps the rows of its partition.
    """

    kind = "dask.dataframe"
    gather_output = False
    in_memory = False

    def __init__(self, data: Any, *, meta: Any = None, columns: Any = None):
        frame = _select(data, columns)
        # rows are unknown until to_futures: Blocks needs a positive placeholder...
        super().__init__(frame, frame.npartitions, 1, meta)
        self.block_shape = (0, *self.block_shape[1:])  # ...and 0 says "not known yet"
        self.data = frame
        self.indexes: list[pd.Index] = []
        self._client: Any = None

    def _mock(self) -> np.ndarray:
        # a small non-degenerate block (rows 1, 2, ...) in the dtype f sees
        cols = 1 if self.columns is None else len(self.columns)
        grid = np.arange(1, MOCK_ROWS + 1)[:, None] + np.arange(cols)[None, :]
        grid = grid.astype(self.dtype)
        return grid[:, 0] if self.columns is None else grid

    async def to_futures(self, client: Any) -> list[Any]:
        """Compute the partitions, fetch their indexes, and make the padded blocks."""
        token = uuid.uuid4().hex
        parts = client.compute(_outside_annotations(self.data.to_delayed))
        index = [
            client.submit(_index_of, p, key=(f"bacc-index-{token}", j)) for j, p in enumerate(parts)
        ]
        # on the client, so that an output partition depends on its decoded block only
        self.indexes = list(await client.gather(index, asynchronous=True))
        lengths = [len(i) for i in self.indexes]
        rows = max(lengths)
        if rows == 0:
            raise ValueError("data is empty: every partition has 0 rows")
        donor = parts[next(j for j, n in enumerate(lengths) if n)]
        self.lengths = lengths
        self.block_shape = (rows, *self.block_shape[1:])
        self._client = client
        return [
            client.submit(
                partition_block,
                p,
                rows,
                self.dtype,
                f"partition {j}",
                donor if lengths[j] == 0 else None,
                key=(f"bacc-chunk-{token}", j),
            )
            for j, p in enumerate(parts)
        ]

    def assemble(
        self,
        decoded: Sequence[Any],
        out_shape: tuple[int, ...],
        out_dtype: np.dtype,
        combine: str = "auto",
    ) -> Any:
        rowwise = self._rowwise(combine, out_shape)
        labels = self._piece_labels(rowwise, out_shape)
        lengths = self.lengths if rowwise else None  # (set by to_futures, as the indexes)
        output = self._template()
        empty = np.empty((0, *out_shape[1:]), dtype=out_dtype)
        meta = output.build(
            empty,
            self.data._meta.index if labels is None else labels[:0],  # None: rowwise
            out_dtype,
            self._rebuild_dtypes,
        )
        build = PieceBuilder(output, out_dtype, self._rebuild_dtypes)
        token = uuid.uuid4().hex
        # submitted now, while the stragglers still count as busy: a cancelled straggler
        # keeps its thread, and a task sent (or stolen) to its worker would wait behind it
        pieces = [
            self._client.submit(
                build,
                values,
                self.indexes[j] if rowwise else labels,
                lengths[j] if lengths is not None else None,
                key=(f"bacc-frame-{token}", j),
            )
            for j, values in enumerate(decoded)
        ]
        self.indexes = []  # the pieces' task specs hold them now
        divisions = self.data.divisions if rowwise and self.data.known_divisions else None
        return _outside_annotations(_from_futures, pieces, meta, divisions)


def _from_futures(pieces: list[Any], meta: Frame, divisions: Any) -> Any:
    import dask.dataframe as dd

    # the pieces are built like meta (one function): no check_meta task between them
    # and the user, which could itself land on a worker held by a straggler
    return dd.from_delayed(pieces, meta=meta, divisions=divisions, verify_meta=False)


def _outside_annotations(func: Any, *args: Any) -> Any:
    """``func(*args)`` without the caller's dask annotations.

    A coded job runs inside a ``distributed.span`` (a dask annotation); dask-expr
    collections ignore annotations, with a warning each time one is built under them.
    """
    return contextvars.Context().run(func, *args)


# -- tasks that run on the workers ------------------------------------------------------
def _index_of(part: Frame) -> pd.Index:
    return part.index


def partition_block(
    part: Frame, rows: int, dtype: np.dtype, what: str, donor: Frame | None = None
) -> np.ndarray:
    """One dask partition as a numeric block padded to ``rows``.

    An empty partition is filled with the first row of ``donor`` (another partition):
    its output is trimmed to 0 rows, so the filler only keeps f away from made-up values.
    """
    values = numeric_values(part, dtype, what, rows)
    if values.shape[0] == 0:
        assert donor is not None  # to_futures passes one for every empty partition
        values = numeric_values(donor.iloc[:1], dtype, "data", rows)
    return values


class PieceBuilder:
    """Builds one output partition from its decoded block (a picklable task function)."""

    def __init__(
        self, output: FrameOutput, decoded: np.dtype, exact: tuple[Any, ...] | None = None
    ):
        self.output = output
        self.decoded = decoded
        self.exact = exact

    def __call__(self, values: np.ndarray, index: pd.Index, length: int | None) -> Frame:
        if length is not None:  # f keeps the rows: trim the padding
            values = np.asarray(values)[:length]
        return self.output.build(values, index, self.decoded, self.exact)


# -- blocks of in-memory frames --------------------------------------------------------
def _resolve_frame_k(
    rows: int, n_blocks: int | None, blocks: int | None, max_blocks: int | None
) -> int:
    for name, value in (("n_blocks", n_blocks), ("blocks", blocks)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, np.integer))
        ):
            raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
        if value is not None and value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    if blocks is not None:
        K = math.ceil(rows / blocks)
        if n_blocks is not None and n_blocks != K:
            raise ValueError(
                f"n_blocks={n_blocks} and blocks={blocks} disagree: blocks of {blocks} rows "
                f"make {K} blocks of {rows} rows"
            )
        return K
    if n_blocks is not None:
        if n_blocks > rows:
            raise ValueError(f"cannot split {rows} rows into {n_blocks} non-empty blocks")
        return int(n_blocks)
    return max(1, min(rows, max_blocks or 1))


def _bounds(rows: int, K: int, per_block: int | None) -> list[tuple[int, int]]:
    """(start, stop) of each block: runs of ``per_block`` rows, or ``np.array_split``'s."""
    if per_block is not None:
        return [(s, min(s + per_block, rows)) for s in range(0, rows, per_block)]
    base, extra = divmod(rows, K)
    stops = np.cumsum([base + (j < extra) for j in range(K)]).tolist()
    return list(zip([0, *stops[:-1]], stops, strict=True))
