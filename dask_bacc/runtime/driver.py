"""``coded``: rewrite a lazy map over chunks so that computing it runs a coded job.

A static task graph cannot say "decode from the first k of N results", so the rewritten
collection holds one driver task (``bacc-driver-<token>``) that runs the coded job inside
the cluster with the worker's client, seceded from its thread — encode, coded eval, first-k
decode, cancel — and returns the K decoded blocks; the collection's chunks are picked out
of its result. The collection stays lazy: ``.compute()``, ``.persist()`` and further
operations work as usual.
"""

from __future__ import annotations

import inspect
import uuid
from typing import Any

import numpy as np

from .. import config
from ..codes import Code, code_class
from ..codes.transform import get_transform
from ..collections import adapt
from ..collections.rewrite import MapCall, find_map
from ..diagnostics.monitor import _jsonable
from ..exceptions import RewriteError
from . import keys
from .quality import check_adversaries
from .report import JobReport
from .submit import AVOID_WORKERS, _check_common, submit_coded
from .wait import WaitPolicy

__all__ = ["coded", "report_of", "rewrite_reports"]

#: Topic of the scheduler's event log where each driver task leaves its job's report
REPORT_TOPIC = "bacc-coded"

#: keywords of ``submit_coded``: a mapped function's keyword arguments cannot use them
_RESERVED = {
    p.name
    for p in inspect.signature(submit_coded).parameters.values()
    if p.kind is inspect.Parameter.KEYWORD_ONLY
}


def coded(
    collection: Any,
    *,
    code: str | Code | None = None,
    n_coded: int | None = None,
    wait: int | float | WaitPolicy | None = None,
    timeout: float | None = None,
    code_options: dict[str, Any] | None = None,
    adversaries: int | None = None,
    transform: Any = None,
    fallback: str = "raise",
) -> Any:
    """Rewrite a lazy map over chunks to run as a coded job; return the same kind of collection.

    Parameters
    ----------
    collection : dask collection
        A dask array, dask DataFrame/Series, or dask-backed xarray object whose final
        operation is a map over chunks: ``x.map_blocks(f, ...)`` (one chunked
        input, chunked along axis 0 only), ``ddf.map_partitions(f, ...)``,
        ``xr.apply_ufunc(f, da, dask="parallelized")`` (the DataArray chunked along its
        first dimension only), or ``xr.map_blocks(f, obj)`` (one DataArray/Dataset
        chunked along one dimension; ``f`` then sees what ``map_coded(f, obj, dim=...)``
        gives it).
    code, n_coded, wait, timeout, code_options, adversaries, transform
        As in :func:`dask_bacc.map_coded` (``wait=dask_bacc.until(error=...)``,
        Byzantine-robust decoding and decoding in a transformed domain included). The
        ``bacc.*`` configuration is read here, on the client, and applied in the driver
        task.
    fallback : {"raise", "plain"}
        What to do when the final operation cannot be rewritten: raise
        :class:`dask_bacc.RewriteError` (default), or return
        ``collection`` unchanged (uncoded).

    Returns
    -------
    dask collection
        A lazy collection of the same type, with the same chunks and labels as
        ``collection``. Its dtypes are those of the plain map for codes that decode exactly
        (repetition, uncoded, speculative) and float64 for numeric outputs of the
        approximate and polynomial codes. Computing it runs one ``bacc-driver-<token>``
        task, which holds the K decoded blocks until the output chunks have taken them.

    Raises
    ------
    RewriteError
        The final operation is not a map over chunks dask-bacc can code (several chunked
        inputs, block-dependent arguments, reductions, fused graphs, other collections).
    TypeError, ValueError
        Bad options, raised here; errors about the data and the cluster (too few workers,
        non-numeric blocks) are raised when the collection is computed.
    """
    if fallback not in ("raise", "plain"):
        raise ValueError(f"fallback must be 'raise' or 'plain', got {fallback!r}")
    try:
        call = find_map(collection)
    except RewriteError:
        if fallback == "plain":
            return collection
        raise
    clash = sorted(_RESERVED & set(call.kwargs))
    if clash:
        raise RewriteError(
            f"the mapped function takes keyword argument(s) {clash}, which map_coded "
            "reserves for itself: pass them positionally or rename them"
        )
    if code is None:
        code = config.get("code")
    _check_common(call.func, code, n_coded, timeout, code_options)
    # what map_coded would reject about the data (non-numeric columns, uneven chunks...)
    # is rejected now, not at compute time inside the driver task; nothing is computed
    if call.kind == "xarray.map_blocks":
        adapt(call.data, dim=call.dim)
    else:
        adapt(call.data)
    # decoded through a transform's inverse: float, as for the approximate codes
    exact_dtypes = _keeps_dtype(code) and transform is None
    options = {
        "code": code,
        "n_coded": n_coded,
        "wait": wait,
        "timeout": timeout,
        "code_options": code_options,
        "adversaries": check_adversaries(adversaries),
        "transform": get_transform(transform),
    }
    settings = _bacc_settings()
    import dask

    token = uuid.uuid4().hex
    driver_call = MapCall(call.kind, call.func, call.data, call.args, call.kwargs, None, call.dim)
    target = _target(call, exact_dtypes)
    driver = dask.delayed(_drive, pure=False)(
        driver_call, options, settings, target, token, dask_key_name=keys.driver_key(token)
    )
    return _rebuild(call, driver, target)


def _keeps_dtype(code: str | Code) -> bool:
    if isinstance(code, Code):
        return code.keeps_dtype
    if code.lower() == "speculative":
        return True  # copies of the plain tasks
    return code_class(code).keeps_dtype


def _bacc_settings() -> dict[str, Any]:
    import dask

    return dask.config.get("bacc") or {}


def _target(call: MapCall, exact_dtypes: bool) -> Any:
    """The output's dtype (arrays) or meta (dataframes): the plain map's, or float64."""
    if call.kind == "dask.dataframe":
        meta = call.result._meta
        if exact_dtypes:
            return meta
        if hasattr(meta, "columns"):
            numeric = [c for c in meta.columns if meta[c].dtype.kind in "biuf"]
            return meta.astype(dict.fromkeys(numeric, np.float64))
        return meta.astype(np.float64) if meta.dtype.kind in "biuf" else meta
    if call.kind == "xarray.map_blocks":
        # coordinates are labels map_coded restores, not decoded values: their dtype stays
        coords = set(call.result.coords)
        return {
            name: (v.shape, _float_unless(v.dtype, exact_dtypes or name in coords))
            for name, v in _lazy_variables(call.result).items()
        }
    arr = call.result.data if call.kind == "xarray.apply_ufunc" else call.result
    if any(np.isnan(c) for cs in arr.chunks for c in cs):
        raise RewriteError("the map's output has unknown chunk sizes; pass chunks= to map_blocks")
    return _float_unless(arr.dtype, exact_dtypes)


def _float_unless(dtype: Any, exact_dtypes: bool) -> np.dtype:
    dtype = np.dtype(dtype)
    return dtype if exact_dtypes or dtype.kind == "f" else np.dtype(np.float64)


def _lazy_variables(obj: Any) -> dict[Any, Any]:
    """The dask-backed variables of an xarray object; ``None`` names a DataArray's data."""
    import dask.array as da
    import xarray as xr

    if isinstance(obj, xr.DataArray):
        variables = {None: obj.variable, **{n: c.variable for n, c in obj.coords.items()}}
    else:
        variables = dict(obj.variables)
    return {n: v for n, v in variables.items() if isinstance(v.data, da.Array)}


def _drive(call: MapCall, options: dict, settings: dict, target: Any, token: str) -> Any:
    """The driver task: run the coded job from inside the cluster; return the K blocks
    (for ``xr.map_blocks``, the values of each lazy variable). The job's report goes to
    the scheduler's event log (:data:`REPORT_TOPIC`), for :func:`report_of`."""
    import dask
    from distributed import get_client, get_worker, secede

    client = get_client()
    # no coded task of this job on this worker: a straggler there would hold the thread
    # the collection's output chunks (which read this task's result, here) need
    avoid = AVOID_WORKERS.set((get_worker().address,))
    # give this worker's thread to the job's tasks, and never take it back: rejoining
    # (as worker_client() does on exit) waits for a free thread, i.e. for a straggler
    # still running here, and the decoded blocks would wait for it
    secede()
    # the client's bacc settings; set only when they differ (the config is process-wide)
    same = dask.config.get("bacc") == settings
    with dask.config.set({} if same else {"bacc": settings}):
        combine = "concat" if call.kind in ("dask.array", "xarray.apply_ufunc") else "auto"
        # not dim=None otherwise: the mapped function may take a dim keyword of its own
        labels: dict[str, Any] = {"dim": call.dim} if call.kind == "xarray.map_blocks" else {}
        job = submit_coded(
            call.func,
            call.data,
            *call.args,
            client=client,
            combine=combine,
            **labels,
            **options,
            **call.kwargs,
        )
        AVOID_WORKERS.reset(avoid)
        try:
            out = job.result()
        finally:
            report = _jsonable(job.report.to_dict())
            get_worker().log_event(REPORT_TOPIC, {"driver": token, "report": report})
        if call.kind == "xarray.map_blocks":
            return _xarray_values(client.compute(out).result(), target)
        parts = out.to_delayed()
        parts = list(np.ravel(parts)) if call.kind != "dask.dataframe" else list(parts)
        blocks = client.gather(client.compute(parts))
    if call.kind == "dask.dataframe":
        dtypes = target.dtypes.to_dict() if hasattr(target, "columns") else target.dtype
        return [b.astype(dtypes) for b in blocks]
    return [np.asarray(b).astype(target, copy=False) for b in blocks]


def _xarray_values(out: Any, target: dict) -> dict[Any, np.ndarray]:
    """The values of each lazy variable of ``xr.map_blocks``' result, from the coded output."""
    values = {}
    for name, (shape, dtype) in target.items():
        if name is None:
            var = out.variable
        else:
            var = out[name].variable if name in out.coords or name in out.variables else None
        if var is None or var.shape != shape:
            raise ValueError(
                f"the coded output's variable {name!r} has shape "
                f"{None if var is None else var.shape}, but xr.map_blocks expects {shape}: "
                "f must keep the layout xr.map_blocks' template describes (rows along dim)"
            )
        values[name] = np.asarray(var.values).astype(dtype, copy=False)
    return values


def _rebuild(call: MapCall, driver: Any, target: Any) -> Any:
    """The output collection: chunk j is block j of the driver's result."""
    if call.kind == "dask.dataframe":
        import dask.dataframe as dd

        y = call.result
        return dd.from_delayed(
            [driver[j] for j in range(y.npartitions)],
            meta=target,
            divisions=y.divisions if y.known_divisions else None,
            verify_meta=False,
        )
    import dask.array as da

    if call.kind == "xarray.map_blocks":
        return _rebuild_xarray(call.result, driver, target)
    y = call.result.data if call.kind == "xarray.apply_ufunc" else call.result
    rest = tuple(c[0] for c in y.chunks[1:])
    arr = da.concatenate(
        [
            da.from_delayed(driver[j], shape=(rows, *rest), dtype=target)
            for j, rows in enumerate(y.chunks[0])
        ],
        axis=0,
    )
    if call.kind == "xarray.apply_ufunc":
        return call.result.copy(data=arr)
    return arr


def _rebuild_xarray(y: Any, driver: Any, target: dict) -> Any:
    """``y`` with every lazy variable read from the driver's result, in ``y``'s chunks."""
    import dask.array as da
    import xarray as xr

    lazy = _lazy_variables(y)
    arrays = {
        name: da.from_delayed(driver[name], shape=shape, dtype=dtype).rechunk(lazy[name].chunks)
        for name, (shape, dtype) in target.items()
    }
    if isinstance(y, xr.DataArray):
        out = y.copy(data=arrays.pop(None)) if None in arrays else y.copy()
    else:
        out = y.copy(data={n: arrays.pop(n, v.data) for n, v in y.data_vars.items()})
    coords = {n: (y[n].dims, a, y[n].attrs) for n, a in arrays.items()}
    return out.assign_coords(coords) if coords else out


def report_of(collection: Any, client: Any = None) -> Any:
    """The report of the coded job that last computed ``collection``.

    Parameters
    ----------
    collection : dask collection
        A collection :func:`coded` returned, or one built on it (``coded(y).sum()``), not
        yet persisted (a persisted collection no longer holds the driver task: use
        :func:`rewrite_reports`).
    client : distributed.Client, optional
        Defaults to the current client. With an asynchronous client, await the result.

    Returns
    -------
    JobReport
        Read from the scheduler's event log, where the driver task leaves it.

    Raises
    ------
    ValueError
        ``collection`` holds no coded job, or several.
    LookupError
        It has not been computed yet (or its report left the scheduler's event log).
    """
    from distributed import default_client

    parsed = [keys.parse(k) for k in _keys(collection)]
    tokens = sorted({p.token for p in parsed if p is not None and p.kind == "driver"})
    if not tokens:
        raise ValueError(
            "this collection holds no coded job: pass one that dask_bacc.coded returned "
            "(before .persist(), which drops the driver task; see rewrite_reports)"
        )
    if len(tokens) > 1:
        raise ValueError(
            f"this collection holds {len(tokens)} coded jobs: call report_of on each "
            "collection dask_bacc.coded returned"
        )
    client = client if client is not None else default_client()
    return client.sync(_report_of, client, tokens[0])


def rewrite_reports(client: Any = None) -> Any:
    """Reports of the coded jobs the rewritten collections ran, oldest first.

    Parameters
    ----------
    client : distributed.Client, optional
        Defaults to the current client. With an asynchronous client, await the result.

    Returns
    -------
    list of (str, JobReport)
        The driver task's key and the job's report, for each run the scheduler's event
        log still holds.
    """
    from distributed import default_client

    client = client if client is not None else default_client()
    return client.sync(_rewrite_reports, client)


async def _rewrite_reports(client: Any) -> list[tuple[str, JobReport]]:
    events = await client.get_events(REPORT_TOPIC)
    return [(keys.driver_key(m["driver"]), JobReport.from_dict(m["report"])) for _, m in events]


async def _report_of(client: Any, token: str) -> JobReport:
    found = [r for key, r in await _rewrite_reports(client) if key == keys.driver_key(token)]
    if not found:
        raise LookupError(
            f"no report for {keys.driver_key(token)}: the collection has not been computed yet (or "
            "its report left the scheduler's event log)"
        )
    return found[-1]


def _keys(collection: Any) -> list[str]:
    """Every string key of a collection's task graph."""
    graph = collection.__dask_graph__()
    return [k for k in (graph or {}) if isinstance(k, str)]
