"""``coded``: rewrite a lazy map over chunks so that computing it runs a coded job.

A static task graph cannot say "decode from the first k of N results", so the rewritten
collection holds one driver task (``bacc-driver-<token>``) that runs the coded job inside
the cluster with the worker's client, seceded from its thread — encode, coded eval, first-k
decode, cancel — and returns the K decoded blocks; the collection's chunks are picked out
of its result. The collection stays lazy: ``.compute()``, ``.persist()`` and further
operations work as usual.
"""

from __future__ import annotations

import concurrent.futures
import inspect
import operator
import threading
import traceback
import uuid
import warnings
import weakref
from typing import TYPE_CHECKING, Any, TypeVar

from dask.base import is_dask_collection

from .. import config
from ..codes import Code, code_class
from ..codes.grouped import GroupedCode
from ..codes.transform import TransformSpec, get_transform
from ..collections.layer import Layer, final_layer
from ..collections.rewrite import MapCall, find_map
from ..diagnostics.monitor import jsonable
from ..exceptions import RewriteError
from . import _dist, keys
from .quality import check_adversaries
from .redundant import EXACT_LAYER_CODES, policy_for
from .report import JobReport
from .rules import backup_code
from .submit import (
    AVOID_WORKERS,
    _build_code,
    _check_common,
    _wants_auto,
    default_n_coded,
    groupable,
    grouped_code,
    submit_coded,
    submit_layer,
)
from .wait import WaitPolicy, check_timeout, resolve_wait

if TYPE_CHECKING:
    from dask._task_spec import Task
    from distributed import Client, Worker

    from .handle import JobHandle

__all__ = ["coded", "report_of", "rewrite_reports"]

#: the kind of dask collection :func:`coded` is given and returns
CollectionT = TypeVar("CollectionT")

#: Topic of the scheduler's event log where each driver task leaves its job's report
REPORT_TOPIC = "bacc-coded"

#: keywords of ``submit_coded``: a mapped function's keyword arguments cannot use them
_RESERVED = {
    p.name
    for p in inspect.signature(submit_coded).parameters.values()
    if p.kind is inspect.Parameter.KEYWORD_ONLY
}


def coded(
    collection: CollectionT,
    *,
    code: str | Code | None = None,
    n_coded: int | None = None,
    wait: int | float | WaitPolicy | None = None,
    timeout: float | None = None,
    code_options: dict[str, Any] | None = None,
    adversaries: int | None = None,
    transform: TransformSpec = None,
    fallback: str = "raise",
) -> CollectionT:
    """Rewrite a lazy map over chunks to run as a coded job; return the same kind of collection.

    Parameters
    ----------
    collection : dask collection
        With ``code="repetition"`` or ``"speculative"``: any dask collection; each task of
        its final layer runs with a backup copy on another worker, exactly as plain Dask
        runs it (every chunking, several chunked inputs, ``block_info``,
        ``partition_info``, ``map_overlap``, any number of chunks), and the first copy
        of each gives its block. With the codes that mix blocks: a dask array, dask
        DataFrame/Series, or dask-backed xarray object whose final operation is a map
        over chunks: ``x.map_blocks(f, ...)`` (one chunked input, chunked along axis 0
        only), ``ddf.map_partitions(f, ...)``, ``xr.apply_ufunc(f, da,
        dask="parallelized")`` (the DataArray chunked along its first dimension only), or
        ``xr.map_blocks(f, obj)`` (one DataArray/Dataset chunked along one dimension;
        ``f`` then sees what ``map_coded(f, obj, dim=...)`` gives it).
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
        Under repetition and speculative the keys are the plain collection's, renamed
        (``<name>-bacc<token>``).

    Raises
    ------
    RewriteError
        A code that mixes blocks, and the final operation is not a map over chunks
        dask-bacc can code (several chunked inputs, block-dependent arguments,
        overlapping maps, masked arrays, reductions, fused graphs, other collections),
        or it cannot be kept identical to plain Dask, or ``f`` reads or changes the
        labels a coded block lacks (it must not use a DataFrame's index: a coded
        partition has a ``RangeIndex``), which ``f`` on a small mock block shows here.
        What only the data shows (a result that does not match the template or does
        not fit the declared dtype, a masked result) raises it when the collection is
        computed.
    TypeError, ValueError
        Raised here: bad options, non-numeric columns, and what the chunks and the
        current client's workers decide (too few workers for N, counting the one that
        runs the driver task and takes no coded task; an ``n_coded`` or ``wait`` the code
        cannot take). Without a client, the cluster is checked when the collection is
        computed.

    Notes
    -----
    The driver task's worker takes no coded task when the others suffice, so the default
    N is planned for one worker fewer than the cluster has; an approximate code whose
    default wait would then need every one of its N results waits for N - 1.
    """
    if fallback not in ("raise", "plain"):
        raise ValueError(f"fallback must be 'raise' or 'plain', got {fallback!r}")
    if code is None:
        code = config.get("code")
    coded_job = n_coded is not None or wait is not None or adversaries or transform is not None
    if isinstance(code, str) and code.lower() in EXACT_LAYER_CODES and not coded_job:
        return _coded_layer(collection, code.lower(), code_options, timeout, fallback)
    try:
        call = _find_map(collection)
    except RewriteError as exc:
        if fallback == "plain":
            return collection
        raise RewriteError(f"{exc}. {_EXACT_HINT}") from None
    clash = sorted(_RESERVED & set(call.kwargs))
    if clash:
        raise RewriteError(
            f"the mapped function takes keyword argument(s) {clash}, which map_coded "
            "reserves for itself: pass them positionally or rename them"
        )
    if _wants_auto(code, n_coded, wait):
        raise ValueError(
            "auto mode ('auto' for code, n_coded or wait) plans each job on the client: use "
            "map_coded, submit_coded or encode; coded() takes fixed settings"
        )
    _check_common(call.func, code, n_coded, timeout, code_options)
    # what map_coded would reject about the data (non-numeric columns, uneven chunks, f
    # reading a DataFrame's index...) is rejected now, not at compute time inside the
    # driver task; nothing is computed
    K = call.adapter.check(call)
    # and what the chunks and the cluster decide (N, wait): planned again in the driver
    # task, on the cluster it then runs on
    _plan(code, K, n_coded, wait, code_options, adversaries, _running_workers())
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

    # the same collection and settings give the same keys (Dask's convention): a rebuilt
    # collection finds the report of its last computation
    token = _token(collection, options, settings)
    target = call.adapter.target(call, exact_dtypes)
    driver = dask.delayed(_drive, pure=False)(
        call.without_result(),
        options,
        settings,
        target,
        token,
        K,
        # the values f's arguments read from the graph (dask.delayed, large arrays dask
        # stores once): inputs of the driver task, computed before it runs
        call.deps,
        _listening_client(),
        dask_key_name=keys.driver_key(token),
    )
    rebuilt: CollectionT = call.adapter.rebuild(call, driver, target)  # the same kind
    return rebuilt


#: what an approximate code's refusal adds: the exact codes take the layer as it is
_EXACT_HINT = (
    "The exact codes take any map layer as it is (every chunking, several inputs, "
    "block_info, overlap): coded(y, code='repetition') runs each task with a backup copy "
    "at once, coded(y, code='speculative') when a task runs late (docs/collections.md)"
)


def _coded_layer(
    collection: CollectionT,
    code: str,
    code_options: dict[str, Any] | None,
    timeout: float | None,
    fallback: str,
) -> CollectionT:
    """:func:`coded` for the exact codes: one driver task runs every task of the final
    layer with a backup copy (:class:`~.redundant.RedundantJob`); each output chunk reads
    its block from it, under the output's key renamed."""
    from dask._task_spec import DataNode, Task, TaskRef

    policy_for(code, code_options)  # bad options raise here, not at compute time
    check_timeout(timeout)
    try:
        layer = final_layer(collection)
    except RewriteError:
        if fallback == "plain":
            return collection
        raise
    upstream = len(layer.graph) - len(layer.blocks)
    if len(layer.blocks) == 1 and upstream >= 2:
        from dask.utils import key_split

        # a reduction's final task: what costs is upstream, and it runs as plain Dask
        warnings.warn(
            f"dask_bacc.coded(): the final layer of this {layer.name} is one task "
            f"({key_split(layer.blocks[0])}), which alone runs with a backup copy; the "
            f"{upstream} tasks "
            "before it run unprotected. Apply coded() to the map before the reduction "
            "(coded(y).sum(), not coded(y.sum())), or compute it inside "
            "dask_bacc.coding(only=f)",
            RuntimeWarning,
            stacklevel=3,
        )
    settings = _bacc_settings()
    token = _token(
        collection, {"code": code, "code_options": code_options, "timeout": timeout}, settings
    )
    token, task = layer_driver(layer, code, code_options, timeout, token)
    driver = task.key
    graph: dict[Any, Any] = {driver: task}
    tag = f"bacc{token[:12]}"
    for out in layer.outputs:
        new = layer.renamed(out, tag)
        graph[new] = Task(new, operator.getitem, TaskRef(driver), DataNode(None, out))
    rebuilt: CollectionT = layer.rebuild(graph, tag)
    return rebuilt


def layer_driver(
    layer: Layer,
    code: str,
    code_options: dict[str, Any] | None,
    timeout: float | None,
    token: str | None = None,
) -> tuple[str, Task]:
    """The driver task of an exact layer (:func:`_drive_layer`) and its token (``token``,
    or a new one): it gives output key -> block; the client's ``bacc`` settings go with
    it."""
    from dask._task_spec import DataNode, Task

    token = token or uuid.uuid4().hex
    driver = keys.driver_key(token)
    task = Task(
        driver,
        _drive_layer,
        DataNode(None, layer.without_collection()),
        code,
        DataNode(None, dict(code_options or {})),
        timeout,
        DataNode(None, _bacc_settings()),
        token,
    )
    return token, task


def _drive_layer(
    layer: Layer,
    code: str,
    code_options: dict[str, Any],
    timeout: float | None,
    settings: dict[str, Any],
    token: str,
) -> dict[Any, Any]:
    """The driver task of an exact layer: run the copies from inside the cluster; return
    output key -> its block (the first copy of each to finish)."""
    import dask
    from distributed import get_client, get_worker

    client = get_client()
    worker = get_worker()
    # this worker's thread goes to the copies; the output chunks read the blocks here, so
    # no backup waits on this worker's queue
    _dist.secede()
    same = dask.config.get("bacc", default={}) == settings
    with dask.config.set({} if same else {"bacc": settings}):
        job = _dist.sync(
            client,
            submit_layer,
            client,
            layer,
            code,
            code_options,
            timeout,
            (worker.address,),
            True,
        )
        try:
            out: dict[Any, Any] = _result_while_wanted(job, worker)
        finally:
            report = jsonable(job.report.to_dict())
            worker.log_event(REPORT_TOPIC, {"driver": token, "report": report})
    return out


def _token(collection: Any, options: dict[str, Any], settings: dict[str, Any]) -> str:
    """The token of :func:`coded`'s keys: the collection's own (its keys), the options and
    the ``bacc`` settings the driver applies, so the same collection coded the same way
    gets the same keys, and the same keys never stand for two different tasks. The job
    the driver runs has a token of its own for each run."""
    from dask.base import tokenize

    return tokenize(collection, options, settings)


def _running_workers() -> int | None:
    """How many workers the current client's cluster runs, when coded() is called; None
    without a client or before any worker joined (the driver task plans on the cluster
    it runs on). A synchronous client asks the scheduler; an asynchronous one has the
    count from its last update (coded() cannot wait for a reply)."""
    try:
        client = _dist.default_client()
    except ValueError:
        return None
    info = client.scheduler_info()
    workers = info.get("workers") or {}
    if workers:
        running = sum(w.get("status", "running") == "running" for w in workers.values())
    else:
        running = int(info.get("n_workers") or 0)
    return running or None


def _plan(
    code: str | Code,
    K: int,
    n_coded: int | None,
    wait: int | float | WaitPolicy | None,
    code_options: dict[str, Any] | None,
    adversaries: int | None,
    running: int | None,
) -> None:
    """Check the coded job a rewritten collection runs, on K blocks and ``running``
    workers.

    The driver task's worker runs no coded task when the others suffice (it holds the
    decoded blocks the output chunks read: a straggler there would hold them back), so
    the default N is planned for ``running - 1`` workers (Berrut, 2 blocks, 4 workers:
    N = 3, whose default wait is then N - 1, :func:`~dask_bacc.runtime.wait.resolve_wait`).

    Called by :func:`coded` (``running`` from the client, or None: no cluster checks)
    and again in the driver task, on the cluster it runs on.

    Raises
    ------
    ValueError
        Too few workers for N (counting every worker, and saying why one is left out),
        a wait or ``n_coded`` the code cannot take, ``n_coded``/``wait`` with the
        hedged and speculative codes.
    """
    backups = backup_code(code)
    if backups is not None:
        if n_coded is not None or wait is not None:
            raise ValueError(
                f"code={backups!r} runs each task with a backup when it runs late and "
                "waits for every block: n_coded and wait do not apply"
            )
        return
    if adversaries or (running is None and n_coded is None and not isinstance(code, Code)):
        return  # (robust decoding sizes N and wait itself, in the job)
    options = dict(code_options or {})
    usable = None if running is None else max(running - 1, 1)
    if isinstance(code, Code):
        coder = _build_code(code, K, None, code.N, options)  # (checks K)
    elif n_coded is None:
        assert usable is not None and running is not None
        name = code.lower().replace("_", "-")
        N = default_n_coded(name, K, usable, options)
        if N > usable and groupable(name, usable):
            coder = grouped_code(name, K, usable, options)  # (many chunks: in groups)
        elif N > usable and config.get("oversubscribe") != "warn":
            raise ValueError(_too_few(code, K, N, running, usable))
        else:
            coder = _build_code(code, K, N, N, options)
    else:
        coder = _build_code(code, K, n_coded, n_coded, options)
    widest = max(coder.shares_per_group) if isinstance(coder, GroupedCode) else coder.N
    if running is not None and widest > running and config.get("oversubscribe") != "warn":
        raise ValueError(
            f"N={coder.N} coded tasks need {coder.N} distinct workers, but the cluster has "
            f"{running}; pass a smaller n_coded (more than the K={K} chunks), use fewer, "
            "larger chunks (rechunk or repartition the input before the map), or add "
            "workers"
        )
    resolve_wait(wait, coder)  # a wait the code cannot take raises here


def _too_few(code: str, K: int, N: int, running: int, usable: int) -> str:
    """Why K chunks cannot run as a coded job on this cluster, and what to do instead:
    only what coded() and dask take."""
    return (
        f"K={K} chunks need at least N={N} coded tasks for code {code!r}, each on its own "
        f"worker; the cluster has {running} workers and coded() runs its coded tasks on "
        f"{usable} of them: the worker that runs the job's driver task takes none (it "
        "holds the decoded chunks the output reads, and a straggler there would hold "
        "them back). Use fewer, larger chunks (rechunk the input before the map, "
        "x.rechunk({0: rows}), or ddf.repartition(npartitions=...)), add workers, or use "
        "an exact code, which runs the chunks in waves on any number of workers: "
        "coded(y, code='repetition')"
    )


def _find_map(collection: Any) -> MapCall:
    """:func:`find_map`, any failure to read the graph turned into a :class:`RewriteError`
    with a message (never a bare ``KeyError`` from deep inside the rewrite)."""
    try:
        return find_map(collection)
    except RewriteError:
        raise
    except Exception as exc:
        raise RewriteError(
            f"cannot rewrite this {type(collection).__name__}: reading its final map over "
            f"chunks failed ({type(exc).__name__}: {exc}); run it with plain Dask "
            "(y.compute()), or pass fallback='plain' to get it back unchanged"
        ) from exc


#: seconds between a driver's checks that its own task is still wanted
_WATCH = 0.25


def _result_while_wanted(job: JobHandle, worker: Worker) -> Any:
    """``job.result(warn=False)`` in a driver task, cancelling the job once the driver's
    own task is no longer wanted: its caller went away (Ctrl-C, the collection's future
    cancelled or released, the client closed), and the scheduler told this worker to
    forget the task, which it cannot stop (a running thread). Without this the job would
    run its copies to the end for nobody.

    Waits on a thread event the job's loop sets as it ends (no timed-out waits: their
    exceptions' tracebacks would hold the job, and its tasks, until a garbage
    collection)."""
    from distributed.worker import thread_state

    key = getattr(thread_state, "key", None)
    ended = threading.Event()

    def arm() -> None:  # on the client's loop, where the job's task runs
        task = job._task
        if task is None or task.done():
            ended.set()
        else:
            task.add_done_callback(lambda _: ended.set())

    loop = job.client.loop
    assert loop is not None  # a worker's client runs on the worker's loop
    loop.add_callback(arm)
    while not ended.wait(_WATCH):
        ts = worker.state.tasks.get(key) if key is not None else None
        if key is not None and (ts is None or ts.state in ("cancelled", "released")):
            job.cancel()
            raise concurrent.futures.CancelledError(
                f"coded job {job.token}: its driver task is no longer wanted"
            )
    return job.result(warn=False)


#: the event-log topic of the warnings of the jobs a client started (+ the client's id)
WARN_TOPIC = "bacc-warn-"

#: clients listening on their :data:`WARN_TOPIC` (weakly: a closed client goes)
_listening: weakref.WeakSet[Any] = weakref.WeakSet()


def _listening_client() -> str | None:
    """The id of the current client, now listening on its own :data:`WARN_TOPIC` (once
    per client); None without a client (the driver then warns every client, as
    ``distributed.warn`` does)."""
    try:
        client = _dist.default_client()
    except ValueError:
        return None
    if client not in _listening:
        _dist.subscribe_topic(client, WARN_TOPIC + client.id, _warn_here)
        _listening.add(client)
    return str(client.id)


def _warn_here(event: tuple[float, Any]) -> None:
    """A driver's warning, raised in the process of the client that started its job."""
    import pickle

    message = event[1]
    category = pickle.loads(message["category"])
    warnings.warn(pickle.loads(message["message"]), category, stacklevel=1)


def _forward_warnings(queued: list[Warning], caller: str | None) -> None:
    """Send the job's warnings to the client that started it (``caller``, its id), once
    each: the driver task runs the job on a worker, where a warning would only reach that
    worker's stderr. Sent as ``distributed.warn`` sends them (a pickled message and
    category), on the caller's own topic: on ``warn`` every client of the cluster would
    raise it, the worker clients of earlier drivers included. Without a ``caller`` (no
    client when the collection was built), on ``warn``."""
    import pickle

    from distributed import get_worker

    worker = get_worker()
    topic = "warn" if caller is None else WARN_TOPIC + caller
    for w in queued:
        worker.log_event(
            topic, {"message": pickle.dumps(str(w)), "category": pickle.dumps(type(w))}
        )


def _keeps_dtype(code: str | Code) -> bool:
    if isinstance(code, Code):
        return code.keeps_dtype
    if backup_code(code):
        return True  # copies of the plain tasks
    return code_class(code).keeps_dtype


def _bacc_settings() -> dict[str, Any]:
    import dask

    return dask.config.get("bacc", default={}) or {}


def _drive(
    call: MapCall,
    options: dict[str, Any],
    settings: dict[str, Any],
    target: Any,
    token: str,
    K: int,
    deps: dict[Any, Any] | None = None,
    caller: str | None = None,
) -> object:
    """The driver task: run the coded job from inside the cluster; return what the
    collection's chunks read (``call.adapter.blocks``: the K blocks or, for
    ``xr.map_blocks``, the values of each lazy variable). The job's report goes to the
    scheduler's event log (:data:`REPORT_TOPIC`), for :func:`report_of`, and its warnings
    to the clients (:func:`_forward_warnings`). ``K`` is the number of blocks (the
    collection's chunks fix it); N and the wait are planned here (:func:`_plan`), on the
    cluster the job runs on. ``deps`` are the computed values of ``call.deps``;
    ``caller`` the id of the client that built the collection (its warnings go there)."""
    import dask
    from distributed import get_client, get_worker

    if call.deps:
        call = call.resolve(deps or {})
    client = get_client()
    running = sum(
        w.get("status", "running") == "running"
        for w in _dist.sync(client, _dist.identity, client).get("workers", {}).values()
    )
    _plan(
        options["code"],
        K,
        options["n_coded"],
        options["wait"],
        options["code_options"],
        options["adversaries"],
        running or None,
    )
    # no coded task of this job on this worker: a straggler there would hold the thread
    # the collection's output chunks (which read this task's result, here) need
    avoid = AVOID_WORKERS.set((get_worker().address,))
    # give this worker's thread to the job's tasks, and never take it back: rejoining
    # (as worker_client() does on exit) waits for a free thread, i.e. for a straggler
    # still running here, and the decoded blocks would wait for it
    _dist.secede()
    # the client's bacc settings; set only when they differ (the config is process-wide)
    same = dask.config.get("bacc", default={}) == settings
    with dask.config.set({} if same else {"bacc": settings}):
        # combine, and labels (dim) only where the kind has them: the mapped function may
        # take a dim keyword of its own
        job = submit_coded(
            call.adapter.function(call),
            call.data,
            *call.args,
            client=client,
            **call.adapter.submit_options(call),
            **options,
            **call.kwargs,
        )
        AVOID_WORKERS.reset(avoid)
        try:
            out = _result_while_wanted(job, get_worker())
        finally:
            report = jsonable(job.report.to_dict())
            get_worker().log_event(REPORT_TOPIC, {"driver": token, "report": report})
        _forward_warnings(job.take_warnings(), caller)
        error: BaseException
        try:
            return call.adapter.blocks(client, out, target)
        except (KeyError, IndexError, AttributeError) as exc:
            error = RewriteError(
                f"the coded job finished but its output could not be put back into the "
                f"{call.kind} collection ({type(exc).__name__}: {exc}); run it with plain "
                "Dask: y.compute()"
            )
        except Exception as exc:
            error = exc
        # raised without the traceback of blocks(), whose frames hold the job's output
        # futures, and with neither the job nor its output in this frame: the erred driver
        # task keeps its exception (and so this frame), and they would stay alive
        del out, job
        add_note = getattr(error, "add_note", None)  # Python >= 3.11
        if add_note is not None and not isinstance(error, RewriteError):  # where, as text
            add_note("".join(traceback.format_tb(error.__traceback__)).rstrip())
        error.__traceback__ = error.__cause__ = error.__context__ = None
        raise error


def report_of(collection: Any, client: Client | None = None) -> JobReport:
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
    TypeError
        ``collection`` is not a dask collection.
    ValueError
        ``collection`` holds no coded job, or several.
    LookupError
        It has not been computed yet (or its report left the scheduler's event log).
    """
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
    client = client if client is not None else _dist.default_client()
    return _dist.sync(client, _report_of, client, tokens[0])


def rewrite_reports(client: Client | None = None) -> list[tuple[str, JobReport]]:
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
    client = client if client is not None else _dist.default_client()
    return _dist.sync(client, _rewrite_reports, client)


async def _rewrite_reports(client: Client) -> list[tuple[str, JobReport]]:
    events = await client.get_events(REPORT_TOPIC)
    return [(keys.driver_key(m["driver"]), JobReport.from_dict(m["report"])) for _, m in events]


async def _report_of(client: Client, token: str) -> JobReport:
    found = [r for key, r in await _rewrite_reports(client) if key == keys.driver_key(token)]
    if not found:
        raise LookupError(
            f"no report for {keys.driver_key(token)}: the collection has not been computed yet (or "
            "its report left the scheduler's event log)"
        )
    return found[-1]


def _keys(collection: Any) -> list[str]:
    """Every string key of a collection's task graph."""
    if not is_dask_collection(collection):
        raise TypeError(
            "report_of takes a dask collection that dask_bacc.coded returned (or one built "
            f"on it), not {type(collection).__name__}; a job of map_coded or submit_coded "
            "has its report as job.report"
        )
    graph = collection.__dask_graph__()
    return [k for k in (graph or {}) if isinstance(k, str)]
