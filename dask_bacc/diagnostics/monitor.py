"""The client side: what a coded job tells the diagnostics while it runs.

:class:`~dask_bacc.runtime.job.CodedJob` calls :func:`start_job` when it is submitted and
then three methods of the :class:`JobMonitor` it gets back: :meth:`~JobMonitor.submitting`
around the submission of its tasks (a ``distributed.span``, and the start message to the
scheduler), :meth:`~JobMonitor.arrived` on each result, and :meth:`~JobMonitor.finished`
once it decoded, failed or was cancelled. Nothing here may slow the job down or make it
fail: messages to the scheduler go on the client's batched stream (no round trip) and
their errors are logged.
"""

from __future__ import annotations

import contextlib
import json
import logging
import weakref
from collections.abc import Iterator
from typing import Any

from distributed import span

from .. import config
from .plugin import HANDLER, PLUGIN_NAME, BaccDiagnostics
from .progress import ProgressBar, want_progress

__all__ = [
    "JobMonitor",
    "ensure_plugin",
    "jsonable",
    "prune_finished_spans",
    "register",
    "start_job",
]

logger = logging.getLogger(__name__)

# client -> scheduler address the plugin was registered with (None: registration failed)
_registered: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()


def _enabled() -> bool:
    value = config.get("diagnostics.enabled")
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


async def ensure_plugin(client: Any) -> bool:
    """Register the scheduler plugin once per client and scheduler; True if it is there.

    Idempotent on the scheduler too: a plugin already there (from another client, or
    ``--preload dask_bacc.diagnostics``) is kept. A scheduler that cannot take it (no
    dask-bacc installed there, pickling disabled) is logged once, never an error.
    """
    address = client.scheduler.address
    if client in _registered and _registered[client] in (address, None):
        return _registered[client] == address
    try:
        await client.register_plugin(BaccDiagnostics(), name=PLUGIN_NAME)
    except Exception as exc:
        logger.warning(
            "dask-bacc: the scheduler did not take the diagnostics plugin (%s: %s); "
            "no /bacc page or dask_bacc metrics for this client's jobs. Install dask-bacc "
            "on the scheduler or start it with --preload dask_bacc.diagnostics.",
            type(exc).__name__,
            exc,
        )
        _registered[client] = None
        return False
    _registered[client] = address
    return True


def register(client: Any = None) -> Any:
    """Register the dask-bacc scheduler plugin now (it is otherwise done on the first job).

    Parameters
    ----------
    client : distributed.Client, optional
        Defaults to the current client. With an asynchronous client, await the result.

    Returns
    -------
    bool
        Whether the plugin is on the scheduler.
    """
    from distributed import default_client

    client = client if client is not None else default_client()
    _registered.pop(client, None)  # an explicit call always asks the scheduler
    return client.sync(ensure_plugin, client)


def jsonable(obj: Any) -> Any:
    """``obj`` as plain numbers, strings, lists and string-keyed dicts (NumPy values become
    lists and numbers, anything else its ``str``): what the scheduler's messages and event
    log carry as msgpack."""

    def default(o: Any) -> Any:
        if hasattr(o, "tolist"):
            return o.tolist()
        return str(o)

    return json.loads(json.dumps(obj, default=default))


def _tolerate_pruned_spans(ext: Any) -> None:
    """Make the spans extension's heartbeat skip span ids that are gone: metrics a late
    worker heartbeat reports for a pruned span are dropped, where distributed would raise
    a ``KeyError`` inside the heartbeat handler."""
    if getattr(ext, "_bacc_tolerant", False):
        return
    heartbeat = ext.heartbeat

    def tolerant(ws: Any, data: dict[tuple[Any, ...], float]) -> None:
        spans = ext.spans
        heartbeat(ws, {k: v for k, v in data.items() if k[1] in spans})

    ext.heartbeat = tolerant
    ext._bacc_tolerant = True


def _only_chunks(span: Any) -> bool:
    """A span whose tasks are all in-memory input blocks of coded jobs (``bacc-chunk``)."""
    groups = [tg for sp in span.traverse_spans() for tg in sp.groups]
    return bool(groups) and all(str(tg.name).startswith("bacc-chunk-") for tg in groups)


def prune_spans(scheduler: Any, keep: int, ttl: float, now: float) -> int:
    """On the scheduler: forget the ``("bacc", func)`` spans of finished coded jobs beyond
    the newest ``keep``, once ``ttl`` seconds have passed since their last task ended.

    distributed keeps every span forever (about 40 kB per coded job, each job opening its
    own span). Only spans whose task groups are all gone from the scheduler are pruned,
    and they are removed entirely: from the dashboard's lists and from the extension's map
    of span ids. A worker heartbeat that still names a pruned span (one delayed past
    ``ttl``) loses those metrics instead of failing. Returns the number of spans pruned.
    """
    ext = getattr(scheduler, "extensions", {}).get("spans")
    if ext is None:
        return 0
    jobs = [sp for sp in ext.root_spans if sp.name == ("bacc",)]
    # a job's in-memory input blocks are scattered, and distributed opens a ("default",)
    # span for every scatter: one more span per job, pruned the same way
    scatters = [sp for sp in ext.root_spans if sp.name == ("default",) and _only_chunks(sp)]
    pruned = 0
    for root in [*jobs[: max(len(jobs) - keep, 0)], *scatters[: max(len(scatters) - keep, 0)]]:
        subtree = list(root.traverse_spans())
        groups = [tg for sp in subtree for tg in sp.groups]
        if any(tg.name in scheduler.task_groups or not tg.done for tg in groups):
            continue  # its tasks are still on the scheduler
        ended = max((tg.stop for tg in groups), default=root.enqueued)
        if now - ended < ttl:
            continue
        _tolerate_pruned_spans(ext)
        for sp in subtree:
            for index, key in [(ext.spans_search_by_name, sp.name)] + [
                (ext.spans_search_by_tag, tag) for tag in sp.name
            ]:
                entries = index.get(key)
                if entries is not None and sp in entries:
                    entries.remove(sp)
                    if not entries:
                        del index[key]
            ext.spans.pop(sp.id, None)
            # a child's parent link would otherwise keep the whole subtree's groups alive
            sp.groups.clear()
            sp.children.clear()
            pruned += 1
        ext.root_spans.remove(root)
    return pruned


def prune_finished_spans(dask_scheduler: Any = None) -> int:
    """On the scheduler (``run_on_scheduler``): :func:`prune_spans` with the
    ``bacc.diagnostics`` settings; what a job that has no clean-up round trip of its own
    (a layer job) sends as it ends."""
    from distributed.metrics import time as now

    return prune_spans(
        dask_scheduler,
        keep=int(config.get("diagnostics.history")),
        ttl=config.seconds("diagnostics.span-ttl"),
        now=now(),
    )


class JobMonitor:
    """A coded job's link to the diagnostics (scheduler plugin, span, progress bar)."""

    def __init__(self, client: Any, token: str, report: Any, send: bool, progress: bool):
        # not the job itself: the job holds its monitor, and a cycle would keep the job's
        # output (futures of decoded blocks) alive until the garbage collector runs
        self.client = client
        self.token = token
        self.report = report
        self.send = send
        self.bar: ProgressBar | None = ProgressBar(report) if progress else None
        self.span_id: str | None = None

    @contextlib.contextmanager
    def submitting(self) -> Iterator[None]:
        """Around the submission of the job's tasks and the start of its loop: every
        task it submits, then and later, belongs to one ``distributed.span``
        (``("bacc", func)``), so the dashboard's span views group a job's work."""
        rep = self.report
        try:
            with span("bacc", str(rep.func)) as span_id:
                self.span_id = span_id
                if self.send:
                    info = {
                        "func": rep.func,
                        "code": rep.code,
                        "K": rep.K,
                        "N": rep.N,
                        "needed": rep.wait_target,
                        "client": getattr(self.client, "id", None),
                        "span_id": span_id,
                    }
                    self._post("start", info)
                yield
        except BaseException as exc:
            if self.bar is not None:
                self.bar.abandon()  # the job never ran: no final figures to show
            if self.send:  # so the scheduler does not list it as running forever
                error = f"{type(exc).__name__}: {exc}"
                self._post("finish", {"status": "error", "error": error})
            raise

    def arrived(self, usable: int) -> None:
        """A coded result arrived; ``usable`` results so far."""
        if self.bar is not None:
            self.bar.update(usable)

    def finished(self) -> None:
        """The job decoded, failed or was cancelled: close the bar, send the report."""
        if self.bar is not None:
            self.bar.close()
        if self.send:
            info = self.report.to_dict()
            for key in ("workers", "arrival", "code", "func", "token"):
                info.pop(key, None)  # known to the scheduler already, or large
            self._post("finish", info)

    def _post(self, event: str, info: dict[str, Any]) -> None:
        """Send ``bacc_job`` on the client's batched stream to the scheduler: no round trip,
        and ordered with the job's graph, so the plugin hears of a job before its tasks."""
        try:
            # Client has no public API for a message on its stream: this one call is it
            # (tests/test_diagnostics.py checks that the plugin receives it)
            self.client._send_to_scheduler(
                {"op": HANDLER, "event": event, "token": self.token, "info": jsonable(info)}
            )
        except Exception as exc:
            # e.g. a scheduler restarted without the plugin: register again next time
            _registered.pop(self.client, None)
            logger.debug("dask-bacc: job %s message %r not sent: %s", self.token, event, exc)


async def start_job(job: Any) -> JobMonitor:
    """Called by a coded job as it is submitted: make sure the scheduler plugin is there
    (one round trip on a client's first job), open the progress bar if wanted."""
    send = _enabled() and await ensure_plugin(job.client)
    progress = want_progress(getattr(job, "progress", None))
    return JobMonitor(job.client, job.token, job.report, send=send, progress=progress)
