"""xarray DataArray/Dataset: K blocks along one dimension, each coded as one flat array.

A block of an xarray object is several labelled variables; the runtime codes one numeric
array per block. For block j, every data variable that has ``dim`` is moved to put ``dim``
first, reshaped to ``(rows, -1)`` and the pieces are concatenated along axis 1 into one
``(rows, total)`` array in the variables' common dtype. On a worker :class:`CodedBlockFunc`
rebuilds the DataArray/Dataset around a coded share (names, dims, attrs and every
coordinate and variable that lacks ``dim``), calls ``f`` and flattens ``f``'s output the
same way into one 1-D array. The decoded arrays are cut back into variables following a
template of ``f``'s output (``meta=`` or ``f`` run once on the client), and the output
gets the input's coordinates along ``dim`` back. ``docs/collections.md`` states the rules.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import dask
import dask.array as da
import numpy as np
import xarray as xr

from ..exceptions import InvalidInput, InvalidResult
from .base import (
    Blocks,
    beyond_float64,
    check_dtype,
    lossy_cast,
    rounding_message,
    undeclared_values_message,
)
from .numpy import _resolve_k

__all__ = ["CodedBlockFunc", "XarrayBlocks", "xarray_blocks"]

XarrayObject = xr.DataArray | xr.Dataset

#: what to do instead when f reads the coordinates along the mapped dimension
_LABELS_ALTERNATIVE = (
    "use positions instead of the coordinate values, or pass them as a data variable "
    "(obj.reset_coords() / obj.assign(...)), which is coded with the data; or run it with "
    "plain Dask (xr.map_blocks(f, obj).compute())"
)


def xarray_blocks(
    data: XarrayObject,
    *,
    n_blocks: int | None = None,
    blocks: int | None = None,
    max_blocks: int | None = None,
    dim: Hashable | None = None,
    meta: XarrayObject | None = None,
    columns: Any = None,
) -> XarrayBlocks:
    """Wrap an xarray object as K blocks along ``dim`` (called by ``adapt``).

    Raises ``ValueError``/``TypeError`` for options that do not apply or unusable input.
    """
    if columns is not None:
        raise ValueError(
            "columns= applies to dataframes; for a Dataset select the variables first, "
            "e.g. ds[['a', 'b']]"
        )
    return XarrayBlocks(
        data, dim=dim, n_blocks=n_blocks, blocks=blocks, max_blocks=max_blocks, meta=meta
    )


# -- layouts --------------------------------------------------------------------------------
@dataclass(frozen=True)
class _VarSpec:
    """Where one variable sits in a flat block.

    Input variables: ``shape`` is the variable's shape on one block (``dim`` of length
    ``rows``), and it fills columns ``start:stop`` of the ``(rows, total)`` block with
    ``dim`` moved to axis 0. Output variables: ``shape`` is its shape in ``f``'s output
    for one block, stored raveled (C order) at ``start:stop`` of the 1-D result.
    """

    name: Hashable
    dims: tuple[Hashable, ...]
    shape: tuple[int, ...]
    dtype: np.dtype
    attrs: dict[Any, Any]
    start: int
    stop: int
    axis: int | None  # position of ``dim`` in ``dims`` (None: the variable lacks ``dim``)


@dataclass
class _InputLayout:
    """How f's view of a coded share is rebuilt (pickled to the workers with f)."""

    is_dataarray: bool
    name: Hashable  # the DataArray's name
    dim: Hashable
    rows: int
    coded: list[_VarSpec]
    constants: xr.Dataset  # variables and coordinates without ``dim`` (in memory once sent)
    order: list[Hashable]  # data variable order of the input Dataset
    attrs: dict[Any, Any]  # the Dataset's attrs


@dataclass
class _OutputLayout:
    """Which variables of f's output are decoded, and where they sit in the 1-D result."""

    is_dataarray: bool
    dim: Hashable
    coded: list[_VarSpec]
    size: int


def _view_dtype(spec: _VarSpec, share_dtype: np.dtype) -> np.dtype:
    # Float variables keep their dtype; integer/bool ones too when the share is not float
    # (then it is an exact copy of a block, and the cast back is lossless). In a float
    # share an integer variable is a real mixture of blocks: it stays float.
    if spec.dtype.kind == "f" or share_dtype.kind != "f":
        return spec.dtype
    return share_dtype


def _rebuild(share: np.ndarray, layout: _InputLayout) -> XarrayObject:
    """The DataArray/Dataset that f sees for a (coded) block."""
    share = np.asarray(share)
    rows = layout.rows
    variables = {}
    for s in layout.coded:
        assert s.axis is not None  # an input variable has dim
        other = s.shape[: s.axis] + s.shape[s.axis + 1 :]
        part = share[:, s.start : s.stop].reshape((rows, *other))
        values = np.moveaxis(part, 0, s.axis).astype(_view_dtype(s, share.dtype), copy=False)
        variables[s.name] = xr.Variable(s.dims, values, s.attrs)
    coords = layout.constants.coords
    if layout.is_dataarray:
        return xr.DataArray(variables[layout.coded[0].name], coords=coords, name=layout.name)
    data_vars = {
        k: variables[k] if k in variables else layout.constants[k].variable for k in layout.order
    }
    return xr.Dataset(data_vars, coords=coords, attrs=layout.attrs)


def _data_vars(obj: Any) -> dict[Hashable, xr.Variable]:
    if isinstance(obj, xr.DataArray):
        return {obj.name: obj.variable}
    return {k: v.variable for k, v in obj.data_vars.items()}


def _flatten_output(out: Any, layout: _OutputLayout) -> np.ndarray:
    """f's output for one share as the 1-D array the runtime decodes."""
    want = xr.DataArray if layout.is_dataarray else xr.Dataset
    if not isinstance(out, want):
        raise InvalidResult(
            f"f returned {type(out).__name__}, but its output on the template was a {want.__name__}"
        )
    variables = _data_vars(out)
    if layout.is_dataarray:  # the name is not data: match the single variable by position
        variables = {layout.coded[0].name: next(iter(variables.values()))}
    parts = []
    for s in layout.coded:
        v = variables.get(s.name)
        if v is None:
            raise InvalidResult(f"f's output lacks the variable {s.name!r} of its template")
        if set(v.dims) != set(s.dims) or v.transpose(*s.dims).shape != s.shape:
            raise InvalidResult(
                f"variable {s.name!r} of f's output has dims {dict(v.sizes)}, its template "
                f"{dict(zip(s.dims, s.shape, strict=True))}"
            )
        values = np.asarray(v.transpose(*s.dims).values)
        if values.dtype.kind not in "biuf":
            raise InvalidResult(
                f"variable {s.name!r} of f's output has dtype {values.dtype}; coded results "
                "must be real numeric"
            )
        parts.append(values.ravel())
    dtype = np.result_type(*parts)
    if dtype.kind == "f":  # (raised from f's task: the job fails with this ValueError)
        _refuse_rounding(parts, [s.name for s in layout.coded], output=True)
    return np.concatenate(parts, dtype=dtype)


class CodedBlockFunc:
    """What runs on a coded share: rebuild the xarray block, call ``func``, flatten.

    Picklable (a module-level class holding ``func`` and two small layouts), so each eval
    task ships it to its worker like a plain function.
    """

    def __init__(self, func: Callable[..., Any], inputs: _InputLayout, outputs: _OutputLayout):
        self.func = func
        self.inputs = inputs
        self.outputs = outputs
        self.__name__ = getattr(func, "__name__", type(func).__name__)

    def view(self, share: np.ndarray) -> XarrayObject:
        """The DataArray/Dataset ``func`` is called on for ``share``."""
        return _rebuild(share, self.inputs)

    def __call__(self, share: np.ndarray, *args: Any, **kwargs: Any) -> np.ndarray:
        return _flatten_output(self.func(self.view(share), *args, **kwargs), self.outputs)

    def __repr__(self) -> str:
        return f"<CodedBlockFunc {self.__name__} dim={self.inputs.dim!r}>"


# -- the adapter ----------------------------------------------------------------------------
def _is_chunked(v: xr.Variable) -> bool:
    return isinstance(v.data, da.Array)


def _chunks(v: xr.Variable) -> tuple[tuple[int, ...], ...]:
    """The chunks of a variable that :func:`_is_chunked` (so not None)."""
    chunks = v.chunks
    assert chunks is not None
    return chunks


def _default_dim(obj: XarrayObject, variables: dict[Hashable, xr.Variable]) -> Hashable:
    dims = tuple(obj.sizes)
    chunked = [v for v in variables.values() if _is_chunked(v)]
    if chunked:
        split = sorted(
            {d for v in chunked for d, c in zip(v.dims, _chunks(v), strict=True) if len(c) > 1},
            key=dims.index,
        )
        if len(split) == 1:
            return split[0]
        if len(split) > 1:
            raise ValueError(
                f"the data is chunked along several dimensions {split}: pass dim= (the "
                "dimension to map along; the others are rechunked to one chunk)"
            )
    if len(dims) == 1:
        return dims[0]
    if chunked:
        raise ValueError(
            f"no dimension is split into several chunks: pass dim= (one of {list(dims)}) and "
            "chunk along it, e.g. obj.chunk({dim: size})"
        )
    raise ValueError(f"pass dim= (one of {list(dims)}): the dimension to split into blocks")


class XarrayBlocks(Blocks):
    """An xarray DataArray or Dataset split into K equal blocks along ``dim``.

    Dask-backed objects: the chunks along ``dim`` are the blocks (they must be equal;
    ``obj.chunk({dim: size})`` makes them so) and other dimensions are rechunked to one
    chunk; the output is dask-backed, built from the decoded futures. In-memory objects are
    split into K blocks like NumPy arrays (``n_blocks``/``blocks``); the output is in memory.

    Every data variable that has ``dim`` is coded and must be real numeric; variables and
    coordinates without ``dim`` are constants that ``f`` sees unchanged; coordinates along
    ``dim`` are not shown to ``f`` (a coded share mixes blocks, so it has no labels there)
    and are restored in the output.
    """

    kind = "xarray"

    def check_finite(self) -> None:
        """Refuse NaN and inf in the coded variables, naming them (the codes that mix
        blocks only; dask-backed data is checked where each share is encoded)."""
        if self.chunked:
            return
        flat = self.flat
        assert isinstance(flat, np.ndarray)  # in memory
        bad, start = [], 0
        if flat.dtype.kind == "f":
            for name, width in self._columns:
                if not np.isfinite(flat[:, start : start + width]).all():
                    bad.append(name)
                start += width
        if bad:
            # an unnamed DataArray is one variable named None
            where = "the data" if bad == [None] else f"variable(s) {bad}"
            raise ValueError(
                f"{where} contains NaN or inf; a code that mixes blocks "
                "needs finite data (the exact codes that copy blocks, repetition, hedged and "
                "speculative, pass them through): fill or drop them first, e.g. "
                "obj.fillna(0)"
            )

    def __init__(
        self,
        data: XarrayObject,
        *,
        dim: Hashable | None = None,
        n_blocks: int | None = None,
        blocks: int | None = None,
        max_blocks: int | None = None,
        meta: XarrayObject | None = None,
    ):
        if not isinstance(data, (xr.DataArray, xr.Dataset)):
            raise TypeError(f"expected an xarray DataArray or Dataset, got {type(data).__name__}")
        if meta is not None and not isinstance(meta, (xr.DataArray, xr.Dataset)):
            raise TypeError(
                f"meta must be a DataArray or Dataset like f's output on one block, got "
                f"{type(meta).__name__}"
            )
        is_dataarray = isinstance(data, xr.DataArray)
        variables = _data_vars(data)
        if dim is None:
            dim = _default_dim(data, variables)
        elif dim not in data.sizes:
            raise ValueError(f"dim={dim!r} is not a dimension of the data {list(data.sizes)}")
        n = int(data.sizes[dim])
        if n == 0:
            raise ValueError(f"data is empty along dim={dim!r}")

        coded = {k: v for k, v in variables.items() if dim in v.dims}
        if is_dataarray:
            check_dtype(data.dtype, f"DataArray {data.name!r}")
        else:
            bad = {k: str(v.dtype) for k, v in coded.items() if v.dtype.kind not in "biuf"}
            if bad:
                raise TypeError(
                    f"data variables along {dim!r} must be real numeric (bool, integer or "
                    f"float) to be coded; not numeric: {bad}. Drop them (ds.drop_vars) or "
                    "make them coordinates (ds.set_coords): coordinates along the dimension "
                    "are restored in the output"
                )
            if not coded:
                raise ValueError(f"no data variable of the Dataset has dimension {dim!r}")

        chunked = any(_is_chunked(v) for v in coded.values())
        if chunked:
            if n_blocks is not None or blocks is not None:
                raise ValueError(
                    "n_blocks/blocks apply to in-memory data; rechunk a dask-backed object "
                    f"instead, e.g. obj.chunk({{{dim!r}: size}})"
                )
            chunks = {
                tuple(_chunks(v)[v.dims.index(dim)]) for v in coded.values() if _is_chunked(v)
            }
            if len(chunks) > 1:
                raise ValueError(
                    f"the variables are chunked differently along {dim!r}: {sorted(chunks)}; "
                    f"rechunk with obj.chunk({{{dim!r}: size}})"
                )
            dim_chunks = chunks.pop()
            if any(math.isnan(c) for c in dim_chunks):
                raise ValueError(f"unknown chunk sizes along {dim!r}; compute them first")
            if len(set(dim_chunks)) > 1:
                raise ValueError(
                    f"the chunks along {dim!r} must be equal (ragged blocks), got {dim_chunks}; "
                    f"rechunk with obj.chunk({{{dim!r}: size}}) where size divides {n}"
                )
            K, rows = len(dim_chunks), int(dim_chunks[0])
        else:
            K = _resolve_k(n, n_blocks, blocks, max_blocks)
            rows = n // K

        specs, start = [], 0
        for k, v in coded.items():
            axis = v.dims.index(dim)
            width = math.prod(v.shape) // n
            shape = (*v.shape[:axis], rows, *v.shape[axis + 1 :])
            specs.append(
                _VarSpec(k, v.dims, shape, v.dtype, dict(v.attrs), start, start + width, axis)
            )
            start += width
        dtype = np.result_type(*[s.dtype for s in specs])
        super().__init__(K, (rows, start), dtype)

        ds = data.to_dataset(name="__bacc__") if is_dataarray else data
        with_dim = [k for k, v in ds.coords.items() if dim in v.dims]
        constants = ds.drop_vars([*coded] if not is_dataarray else ["__bacc__"])
        constants = constants.drop_vars(with_dim)
        # Constants travel with f to every coded task, in memory. Dask-backed ones (maybe
        # persisted, or an earlier coded map's output) are computed on the cluster by
        # to_futures, before any coded task is submitted; f's template call sees them lazy.
        self._lazy = {k: v.data.name for k, v in constants.variables.items() if _is_chunked(v)}
        self.inputs = _InputLayout(
            is_dataarray=is_dataarray,
            name=data.name if is_dataarray else None,
            dim=dim,
            rows=rows,
            coded=specs,
            constants=constants,
            order=[] if is_dataarray else list(data.data_vars),
            attrs={} if is_dataarray else dict(data.attrs),
        )
        self.dim = dim
        self.n = n
        self.meta = meta
        self.chunked = chunked
        self.gather_output = not chunked
        # the input's coordinates along ``dim``, restored in the output
        self.dim_coords = ds.coords.to_dataset().drop_vars(
            [k for k in ds.coords if k not in with_dim]
        )
        self._lazy_dim_coords = any(_is_chunked(v) for v in self.dim_coords.variables.values())
        # the lazy constants and labels while to_futures holds them computed on the cluster
        self._unresolved: tuple[Any, Any] | None = None
        # lazy labels are resolved on the cluster by to_futures: only plain NumPy stays local
        self.local = not chunked and not self._lazy and not self._lazy_dim_coords
        self.outputs: _OutputLayout | None = None
        self.template: XarrayObject | None = None
        self.passthrough: dict[Hashable, dict] = {}  # non-numeric constants f returns: attrs
        #: chunked: one task per block builds its flat ``(rows, total)`` array (a list of
        #: Delayed); in memory: the ``(n, total)`` array
        self.flat: list[Any] | np.ndarray
        #: each coded variable and its columns in a flat block, in order (checked for NaN
        #: and inf by :meth:`check_finite`, for the codes that mix blocks only)
        self._columns = [(name, int(v.size) // n) for name, v in coded.items()]
        if chunked:
            self.flat = _dask_blocks(coded, dim, dim_chunks, dtype)
        else:
            self.flat = _in_memory_flat(coded, dim, dtype)

    # -- Blocks API -----------------------------------------------------------------------
    def stacked(self) -> np.ndarray:
        if self.chunked:
            return super().stacked()
        assert isinstance(self.flat, np.ndarray)  # in memory
        return self.flat.reshape((self.K, *self.block_shape))

    def forget(self) -> None:
        if self._unresolved is not None:  # back to the lazy labels and constants
            self.inputs.constants, self.dim_coords = self._unresolved
            self._unresolved = None

    async def to_futures(self, client: Any) -> list[Any]:
        if self._unresolved is None:
            self._unresolved = (self.inputs.constants, self.dim_coords)
        if self._lazy:  # CodedBlockFunc shares self.inputs: it ships the computed ones
            self.inputs.constants = await client.compute(self.inputs.constants)
        if self._lazy_dim_coords:
            # Computed now, with the input, not when the output is: by then the stragglers
            # hold their workers' threads, and a label task queued behind one would wait.
            if self.chunked:
                self.dim_coords = client.persist(self.dim_coords)
            else:  # in-memory data gives an in-memory output
                self.dim_coords = await client.compute(self.dim_coords)
        if self.chunked:
            return client.compute(self.flat)
        return await super().to_futures(client)

    def wrap(self, func: Any, args: tuple, kwargs: dict) -> CodedBlockFunc:
        """The coded-share function; learns f's output layout from ``meta`` or a mock block.

        The mock block is block 0 for in-memory data and a block of ones (same shape,
        dtype and labels) for dask-backed data, which is never computed on the client.
        """
        if self.meta is not None:
            template, inferred = self.meta, False
        else:
            if self.chunked:
                mock = np.ones(self.block_shape, self.dtype)
            else:
                assert isinstance(self.flat, np.ndarray)  # in memory
                mock = self.flat[: self.block_shape[0]].copy()  # f may write into its input
            # f on the mock labelled along dim first: f's last call is on what it sees
            probes = self._label_probes(func, args, kwargs, mock)
            try:
                template, inferred = func(_rebuild(mock, self.inputs), *args, **kwargs), True
            except Exception as exc:
                if any(error is None for _, _, error in probes):
                    from ..exceptions import RewriteError

                    raise RewriteError(
                        f"f reads the coordinate(s) {self._label_names()} along the mapped "
                        f"dimension {self.dim!r}: it fails on a block without them "
                        f"({type(exc).__name__}: {exc}) but not on one labelled with them. "
                        "A coded block mixes several blocks and has no coordinates along "
                        f"{self.dim!r}; {_LABELS_ALTERNATIVE}"
                    ) from exc
                raise
        self.outputs = self._output_layout(template, inferred)
        if inferred:
            self._check_labels_unused(
                probes, template, lambda: func(_rebuild(mock.copy(), self.inputs), *args, **kwargs)
            )
        self.template = template
        return CodedBlockFunc(func, self.inputs, self.outputs)

    def _dim_labels(self, j: int) -> dict[Hashable, xr.Variable]:
        """The coordinates along ``dim`` of block ``j``, as ``f`` would see them in plain
        xarray: in-memory ones (index coordinates) with their real values; lazy numeric
        ones with made-up values (``j``-dependent, not computed here); lazy others left
        out."""
        dim, rows = self.dim, self.block_shape[0]
        labels: dict[Hashable, xr.Variable] = {}
        for k, v in self.dim_coords.variables.items():
            if dim not in v.dims:
                continue
            if not _is_chunked(v):
                labels[k] = v.isel({dim: slice(j * rows, (j + 1) * rows)}).copy(deep=True)
            elif v.dtype.kind in "iuf":
                shape = tuple(rows if d == dim else n for d, n in zip(v.dims, v.shape, strict=True))
                values = np.arange(math.prod(shape)).reshape(shape) * (j + 2) + 1
                labels[k] = xr.Variable(v.dims, values.astype(v.dtype), v.attrs)
        return labels

    def _label_names(self) -> str:
        return ", ".join(repr(k) for k in self._dim_labels(0))

    def _label_probes(
        self, func: Any, args: tuple, kwargs: dict, mock: np.ndarray
    ) -> list[tuple[dict[Hashable, xr.Variable], Any, BaseException | None]]:
        """``f`` on the mock block labelled with the coordinates along ``dim`` of the first
        and of the last block (:meth:`_dim_labels`): ``(labels, output, None)`` or
        ``(labels, None, error)`` each; empty when there are no such coordinates."""
        probes: list[tuple[dict[Hashable, xr.Variable], Any, BaseException | None]] = []
        for j in sorted({0, self.K - 1}):
            labels = self._dim_labels(j)
            if not labels:
                return []
            view = _rebuild(mock.copy(), self.inputs).assign_coords(labels)
            try:
                probes.append((labels, func(view, *args, **kwargs), None))
            except Exception as exc:
                probes.append((labels, None, exc))
        return probes

    def _check_labels_unused(
        self,
        probes: list[tuple[dict[Hashable, xr.Variable], Any, BaseException | None]],
        template: Any,
        again: Callable[[], Any],
    ) -> None:
        """Refuse an ``f`` that reads the coordinates along ``dim`` or changes them.

        A coded block carries no coordinates along ``dim`` (it mixes several blocks), so
        ``f`` sees default positions there (``obj.x`` is ``0..rows-1``, a non-index
        coordinate is missing). ``probes`` (:meth:`_label_probes`) are ``f`` on the mock
        block labelled with the coordinates of the first and of the last block: if an
        output's values differ from ``template`` (``f`` on the unlabelled mock), or ``f``
        failed only there, ``f`` reads the coordinates; if an output's index coordinates
        along ``dim`` are not the block's, ``f`` changes them. Either way the coded answer
        would differ from ``f`` on the real blocks. A check on one small mock block: a
        dependence that only shows on other values can go unseen. ``again()`` runs ``f``
        on the unlabelled mock once more when the outputs differ: if that differs from
        ``template`` too, ``f`` is not deterministic and nothing is concluded.

        Raises
        ------
        RewriteError
            ``f`` reads or changes the coordinates along ``dim``.
        """
        from ..exceptions import RewriteError

        dim = self.dim
        for labels, out, error in probes:
            names = ", ".join(repr(k) for k in labels)
            if error is not None:
                raise RewriteError(
                    f"f reads the coordinate(s) {names} along the mapped dimension {dim!r}: "
                    f"it fails on a block labelled with them ({type(error).__name__}: "
                    f"{error}) but not on one without. A coded block mixes several blocks "
                    f"and has no coordinates along {dim!r}; {_LABELS_ALTERNATIVE}"
                )
            if not _same_values(out, template) and _deterministic(template, again):
                raise RewriteError(
                    f"f reads the coordinate(s) {names} along the mapped dimension {dim!r}: "
                    "its output changes with their values. A coded block mixes several "
                    f"blocks and has no coordinates along {dim!r}, so f would see made-up "
                    f"ones; {_LABELS_ALTERNATIVE}"
                )
            if isinstance(out, (xr.DataArray, xr.Dataset)):
                for k, v in labels.items():
                    if k in out.indexes and not out.indexes[k].equals(v.to_index()):
                        raise RewriteError(
                            f"f changes the coordinate {k!r} along the mapped dimension "
                            f"{dim!r} (xr.map_blocks requires each block's result to keep "
                            "it); the coded output carries the input's coordinates there. "
                            "Change the coordinate after the map, or run it with plain Dask "
                            "(xr.map_blocks(f, obj).compute())"
                        )

    def _output_layout(self, template: Any, inferred: bool) -> _OutputLayout:
        if not isinstance(template, (xr.DataArray, xr.Dataset)):
            what = "f's output on a mock block" if inferred else "meta"
            raise TypeError(
                f"{what} is a {type(template).__name__}; for xarray input f must return a "
                "DataArray or Dataset"
            )
        dim, rows = self.dim, self.block_shape[0]
        is_dataarray = isinstance(template, xr.DataArray)
        coded, start = [], 0
        self.passthrough = {}
        for k, v in _data_vars(template).items():
            if v.dtype.kind not in "biuf":
                if (
                    not is_dataarray
                    and dim not in v.dims
                    and k in self.inputs.constants.data_vars
                    and (not inferred or self._is_constant(k, v))
                ):
                    self.passthrough[k] = dict(v.attrs)  # f passed a non-numeric constant on
                    continue
                raise TypeError(
                    f"variable {k!r} of f's output has dtype {v.dtype}; f's output must be "
                    "real numeric, except non-numeric variables without the mapped "
                    "dimension that f passes through unchanged from its input"
                )
            shape = tuple(v.shape)
            axis = v.dims.index(dim) if dim in v.dims else None
            if axis is not None:
                allowed = {rows} if inferred else {0, rows, self.n}  # meta may be empty or full
                if shape[axis] not in allowed:
                    raise ValueError(
                        f"variable {k!r} of f's output has length {shape[axis]} along {dim!r} "
                        f"for a block of {rows}: f must keep the dimension's length (row-wise) "
                        "or drop the dimension (reduction)"
                    )
                shape = (*shape[:axis], rows, *shape[axis + 1 :])
            size = math.prod(shape)
            coded.append(
                _VarSpec(k, v.dims, shape, v.dtype, dict(v.attrs), start, start + size, axis)
            )
            start += size
        if not coded:
            raise ValueError("f's output has no numeric variable to decode")
        if start == 0:
            raise ValueError("f's output is empty (every variable has size 0)")
        return _OutputLayout(is_dataarray, dim, coded, start)

    def _is_constant(self, k: Hashable, v: xr.Variable) -> bool:
        """``v`` (from the template) is the input's constant ``k``, unchanged."""
        if k in self._lazy:
            return _is_chunked(v) and v.data.name == self._lazy[k]
        const = self.inputs.constants.variables.get(k)
        return const is not None and not _is_chunked(v) and v.equals(const)

    def _constant(self, k: Hashable, attrs: dict) -> xr.Variable:
        """The input's constant ``k`` (in memory once to_futures has run) with ``attrs``."""
        v = self.inputs.constants.variables[k].copy(deep=False)
        v.attrs = dict(attrs)
        return v

    @property
    def rowwise(self) -> bool:
        """f keeps ``dim`` (row-wise map) rather than reducing it."""
        assert self.outputs is not None
        return any(s.axis is not None for s in self.outputs.coded)

    def assemble(
        self,
        decoded: Sequence[Any],
        out_shape: tuple[int, ...],
        out_dtype: np.dtype,
        combine: str = "auto",
    ) -> XarrayObject:
        if self.outputs is None or self.template is None:
            raise RuntimeError("assemble() before wrap(): the output layout is unknown")
        rowwise = self.rowwise
        if combine not in ("auto", "concat" if rowwise else "stack"):
            raise ValueError(
                f"combine={combine!r} does not apply: for xarray input f's output decides "
                "(it keeps dim: concatenated; it drops dim: stacked)"
            )
        dim = self.dim
        token = uuid.uuid4().hex[:12]
        variables: dict[Hashable, xr.Variable] = {}
        for i, s in enumerate(self.outputs.coded):
            dtype = _output_dtype(s.dtype, np.dtype(out_dtype))
            pieces = decoded[:1] if rowwise and s.axis is None else decoded
            if self.chunked:
                parts = [
                    da.from_delayed(
                        dask.delayed(_extract, pure=True)(
                            d,
                            s.start,
                            s.stop,
                            s.shape,
                            dtype,
                            dask_key_name=f"bacc-xarray-{token}-{i}-{j}",
                        ),
                        shape=s.shape,
                        dtype=dtype,
                    )
                    for j, d in enumerate(pieces)
                ]
                concat, stack = da.concatenate, da.stack
            else:
                parts = [_extract(d, s.start, s.stop, s.shape, dtype) for d in pieces]
                concat, stack = np.concatenate, np.stack
            if not rowwise:
                variables[s.name] = xr.Variable((dim, *s.dims), stack(parts), s.attrs)
            elif s.axis is None:
                variables[s.name] = xr.Variable(s.dims, parts[0], s.attrs)
            else:
                variables[s.name] = xr.Variable(s.dims, concat(parts, axis=s.axis), s.attrs)
        return self._labelled(variables, rowwise)

    def _labelled(self, variables: dict[Hashable, xr.Variable], rowwise: bool) -> XarrayObject:
        """Wrap the decoded variables with the template's labels and the input's along dim."""
        template, outputs, dim = self.template, self.outputs, self.dim
        assert template is not None and outputs is not None
        out: XarrayObject
        if outputs.is_dataarray:
            out = xr.DataArray(variables[outputs.coded[0].name], name=template.name)
        else:
            data_vars = {
                k: variables[k] if k in variables else self._constant(k, self.passthrough[k])
                for k in template.data_vars
            }
            out = xr.Dataset(data_vars, attrs=dict(template.attrs))
        # the template's coordinates without dim (those along dim are the input's)
        tcoords = template.coords.to_dataset()
        tcoords = tcoords.drop_vars([k for k, v in tcoords.variables.items() if dim in v.dims])
        resolved = {  # the input's dask-backed constant coordinates: now computed
            k: self._constant(k, v.attrs)
            for k, v in tcoords.variables.items()
            if k in self._lazy and self._is_constant(k, v)
        }
        tcoords = tcoords.assign_coords(resolved)
        out = out.assign_coords(tcoords.coords)
        if rowwise:  # the input's coordinates along dim that fit the output's dims
            sizes = dict(out.sizes)
            keep = [
                k
                for k, v in self.dim_coords.variables.items()
                if all(sizes.get(d) == n for d, n in v.sizes.items())
            ]
            out = out.assign_coords(self.dim_coords[keep].coords)
        elif dim in self.dim_coords.coords:  # a reduction: the first label of each block
            labels = self.dim_coords[dim].isel({dim: slice(None, None, self.block_shape[0])})
            out = out.assign_coords({dim: labels.variable})
        return out


def _deterministic(template: Any, again: Callable[[], Any]) -> bool:
    """``again()`` (f on the same mock once more) gives ``template`` again."""
    try:
        return _same_values(template, again())
    except Exception:
        return False


def _same_values(a: Any, b: Any) -> bool:
    """``a`` and ``b`` (f's outputs on two views of one block) hold the same data."""
    if isinstance(a, (xr.DataArray, xr.Dataset)) and isinstance(b, (xr.DataArray, xr.Dataset)):
        if type(a) is not type(b):
            return False
        va, vb = _data_vars(a), _data_vars(b)
        if set(va) != set(vb):
            return False
        # lazy variables (f passing on a dask-backed constant) are not computed here
        return all(
            _same_array(va[k].values, vb[k].values)
            for k in va
            if not (_is_chunked(va[k]) or _is_chunked(vb[k]))
        )
    try:
        return _same_array(np.asarray(a), np.asarray(b))
    except Exception:
        return False


def _same_array(a: Any, b: Any) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    try:
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    except TypeError:
        return bool(np.array_equal(a, b))


def _output_dtype(template: np.dtype, decoded: np.dtype) -> np.dtype:
    # Float outputs keep the template's float dtype. Integer/bool outputs too when the
    # decoded values are not float (an exact code kept them); approximations stay float.
    if template.kind == "f" or decoded.kind != "f":
        return template
    return decoded


def _extract(
    flat: np.ndarray, start: int, stop: int, shape: tuple[int, ...], dtype: np.dtype
) -> np.ndarray:
    """One output variable of one decoded block."""
    return np.asarray(flat)[start:stop].reshape(shape).astype(dtype, copy=False)


def _in_memory_flat(
    coded: dict[Hashable, xr.Variable], dim: Hashable, dtype: np.dtype
) -> np.ndarray:
    """The in-memory variables as one ``(n, total)`` array (one copy)."""
    arrays = [np.asarray(v.values) for v in coded.values()]
    axes = tuple(v.dims.index(dim) for v in coded.values())
    try:
        return _flat_block(axes, dtype, *arrays, names=tuple(coded))
    except InvalidInput as exc:  # in memory: a plain ValueError before anything runs
        raise ValueError(str(exc)) from None


def _flat_block(
    axes: tuple[int, ...],
    dtype: np.dtype,
    *arrays: np.ndarray,
    names: tuple[Hashable, ...] = (),
) -> np.ndarray:
    """The pieces of one block (one array per coded variable, ``dim`` at ``axes[i]``) as one
    C-contiguous ``(rows, total)`` array of ``dtype``, written in one pass.

    Runs as one task per block for dask-backed data (so each chunk is converted once, with
    no intermediate concatenations). NaN and inf are kept: the codes that copy blocks pass
    them through, and a share that mixes blocks refuses them where it is encoded. A 64-bit
    integer variable (``names``: the variables' names) holding integers beyond 2**53 that
    a float ``dtype`` would round raises :class:`~dask_bacc.exceptions.InvalidInput`.
    """
    if np.dtype(dtype).kind == "f":
        _refuse_rounding(arrays, names)
    for k, a in enumerate(arrays):
        found = lossy_cast(a, dtype)
        if found is not None:
            name = names[k] if k < len(names) else k
            where = "the data" if name is None else f"variable {name!r}"
            raise InvalidInput(undeclared_values_message(where, found, np.asarray(a).dtype, dtype))
    rows = np.shape(arrays[0])[axes[0]]
    widths = [int(np.size(a)) // rows if rows else 0 for a in arrays]
    out = np.empty((rows, sum(widths)), dtype=dtype)
    start = 0
    for a, axis, width in zip(arrays, axes, widths, strict=True):
        piece = np.moveaxis(np.asarray(a), axis, 0)  # a view; a copy below only if axis != 0
        out[:, start : start + width] = piece.reshape((rows, width))
        start += width
    return out


def _refuse_rounding(
    arrays: Sequence[Any], names: Sequence[Hashable], output: bool = False
) -> None:
    """Refuse 64-bit integer variables beyond 2**53 coded as float64 beside the others
    (an exact decode would return rounded integers as f's own), naming them, with an
    :class:`~dask_bacc.exceptions.InvalidInput` (a ``ValueError``). ``output``: the
    arrays are the variables of f's output on a share, not the data."""
    dtypes = [np.asarray(a).dtype for a in arrays]
    for k, (a, dtype) in enumerate(zip(arrays, dtypes, strict=True)):
        top = beyond_float64(a)
        if top is None:
            continue
        name = names[k] if k < len(names) else k
        others = [n for n, d in zip(names, dtypes, strict=False) if d != dtype]
        beside = f"the variable(s) {others} of dtype " + ", ".join(
            sorted({str(d) for d in dtypes if d != dtype})
        )
        if output:
            fix = (
                f"Make f return it as float if float64 precision is enough (out[{name!r}]"
                ".astype('float64')), or return the integer variable(s) from a map of their "
                "own: an output of one integer dtype is decoded in it."
            )
        else:
            fix = (
                "Cast it explicitly if float64 precision is enough "
                f"(ds.assign({{{name!r}: ds[{name!r}].astype('float64')}})), or map the "
                f"integer variable(s) on their own (ds[[{name!r}, ...]]): variables of one "
                "integer dtype are coded in it."
            )
        what = f"f's output: variable {name!r}" if output else f"variable {name!r}"
        raise InvalidInput(rounding_message(what, dtype, top, beside, fix, output))


def _dask_blocks(
    coded: dict[Hashable, xr.Variable],
    dim: Hashable,
    dim_chunks: tuple[int, ...],
    dtype: np.dtype,
) -> list[Any]:
    """One Delayed per block: its flat ``(rows, total)`` array, built by :func:`_flat_block`
    from the block's chunk of every coded variable (other dimensions rechunked to one)."""
    pieces, axes = [], []
    for v in coded.values():
        arr = v.data if _is_chunked(v) else da.from_array(np.asarray(v.values), chunks=-1)
        axis = v.dims.index(dim)
        arr = arr.rechunk({i: dim_chunks if i == axis else -1 for i in range(arr.ndim)})
        pieces.append(arr.to_delayed().ravel().tolist())  # the K chunks along dim, in order
        axes.append(axis)
    build = dask.delayed(_flat_block, pure=True)
    names = tuple(coded)
    return [
        build(tuple(axes), dtype, *[p[j] for p in pieces], names=names)
        for j in range(len(dim_chunks))
    ]
