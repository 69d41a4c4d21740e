"""Watching coded jobs: scheduler plugin, dashboard page, Prometheus metrics, progress.

- :class:`BaccDiagnostics`, a scheduler plugin that follows the ``bacc-*`` tasks through
  the scheduler's transitions and keeps a bounded history of coded jobs. A client
  registers it on its first coded job (``bacc.diagnostics.enabled``); or load it when
  the scheduler starts::

      dask scheduler --preload dask_bacc.diagnostics

- on the scheduler's dashboard server: the page ``/bacc`` (recent jobs and the timeline
  of the selected one), ``/bacc/stats.json``, and ``dask_bacc_*`` metrics on the
  existing ``/metrics``;
- ``map_coded(..., progress=True)``: a tqdm progress bar of results landed against
  results needed (``bacc.progress``; default on in interactive sessions);
- every job's tasks are grouped under a ``distributed.span`` named ``("bacc", func)``;
- :class:`LatencyModel`, the straggler model the plugin learns per worker and per host
  from every closed coded job (``bacc.diagnostics.model``), shown on ``/bacc`` and under
  ``"workers"`` in ``/bacc/stats.json``.
"""

from __future__ import annotations

from typing import Any

from .latency import LatencyModel, TaskObservation, WorkerPrediction
from .monitor import JobMonitor, register, start_job
from .plugin import HANDLER, PLUGIN_NAME, BaccDiagnostics
from .progress import interactive, want_progress

__all__ = [
    "HANDLER",
    "PLUGIN_NAME",
    "BaccDiagnostics",
    "JobMonitor",
    "LatencyModel",
    "TaskObservation",
    "WorkerPrediction",
    "dask_setup",
    "get_stats",
    "interactive",
    "model_view",
    "register",
    "start_job",
    "want_progress",
]


def dask_setup(server: Any) -> None:
    """Preload hook: ``dask scheduler --preload dask_bacc.diagnostics`` adds the plugin.

    On a worker or nanny (``dask worker --preload dask_bacc.diagnostics``) it does nothing.
    """
    from distributed import Scheduler

    if isinstance(server, Scheduler):
        server.add_plugin(BaccDiagnostics(registered_by="preload"), name=PLUGIN_NAME)


def get_stats(client: Any = None, token: str | None = None) -> Any:
    """What ``/bacc/stats.json`` serves, fetched through the client (no HTTP needed).

    Parameters
    ----------
    client : distributed.Client, optional
        Defaults to the current client. With an asynchronous client, await the result.
    token : str, optional
        One job (with each coded task's timeline) instead of the list of recent jobs.

    Returns
    -------
    dict or None
        None when the plugin is not on the scheduler, or ``token`` is unknown.
    """
    from distributed import default_client

    client = client if client is not None else default_client()
    return client.run_on_scheduler(_stats_on_scheduler, token)


def _stats_on_scheduler(token: str | None, dask_scheduler: Any = None) -> Any:
    plugin = dask_scheduler.plugins.get(PLUGIN_NAME)
    return None if plugin is None else plugin.stats(token)


def model_view(
    workers: list[str], size: int, seed: int, dask_scheduler: Any = None
) -> dict[str, Any] | None:
    """On the scheduler: what the straggler model predicts of ``workers``, for a planner.

    Returns ``size`` relative latencies drawn per worker, each worker's host, the hosts
    whose stragglers come together (P(another late | one late) at least 0.5 and twice the
    host's P(late)), the jobs learned from and the late threshold; None when the plugin or
    its model is off.
    """
    import numpy as np

    plugin = dask_scheduler.plugins.get(PLUGIN_NAME)
    model = None if plugin is None else plugin.model
    if model is None:
        return None
    hosts = []
    for w in workers:
        ws = dask_scheduler.workers.get(w)
        hosts.append(ws.host if ws is not None else w.split("://", 1)[-1].rsplit(":", 1)[0])
    correlated = []
    for h in set(hosts):
        together = model.host_correlation(h)
        if together is not None and together >= max(0.5, 2 * model.predict("", h).p_late):
            correlated.append(h)
    return {
        "jobs": model.jobs,
        "draws": model.sample(workers, np.random.default_rng(seed), size),
        "hosts": hosts,
        "correlated": sorted(correlated),
        "late_factor": model.late_factor,
    }
