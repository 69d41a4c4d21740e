"""Prometheus metrics of coded jobs, served on the scheduler's existing ``/metrics``.

distributed's ``/metrics`` handler writes ``prometheus_client.REGISTRY``; one collector
registered there reads the plugin's totals at scrape time. Names follow distributed's
(namespace ``distributed.dashboard.prometheus.namespace``, "dask" by default):

- ``dask_bacc_jobs_total{code, outcome}``: closed jobs; outcome ``decoded``, ``error``,
  ``cancelled`` (by the user) or ``abandoned`` (its client left before it decoded);
- ``dask_bacc_tasks_total{outcome}``: coded tasks of closed jobs: ``used`` (decoded
  from), ``late`` (landed after the decode started), ``excluded`` (judged corrupted by
  robust decoding), ``cancelled`` (stragglers given up at decode, and tasks released
  when their client left), ``failed``;
- ``dask_bacc_decode_seconds``: histogram of the time to decode of decoded jobs;
- ``dask_bacc_stragglers``: histogram of stragglers per job (tasks still out at decode);
- ``dask_bacc_jobs_running``: jobs not closed yet;
- ``dask_bacc_time_saved_seconds``: seconds the closed jobs answered before plain Dask
  would have, summed (a gauge: a job whose coding cost time lowers it; jobs whose
  uncoded time is unknown add nothing);
- ``dask_bacc_cpu_seconds_total``: thread-seconds of coded tasks, and
  ``dask_bacc_redundant_cpu_seconds_total`` the part an uncoded run would not have spent.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from .plugin import BACKUP_OUTCOMES, TASK_OUTCOMES, current_plugin

__all__ = ["BaccMetricCollector", "install_metrics"]

logger = logging.getLogger(__name__)

_collector: Any = None


def _base() -> type:
    try:
        from distributed.http.prometheus import PrometheusCollector
    except ImportError:  # pragma: no cover - very old distributed
        return object
    return PrometheusCollector


class BaccMetricCollector(_base()):  # type: ignore[misc]
    """Collector for ``prometheus_client``: the current plugin's totals."""

    def __init__(self) -> None:
        super().__init__(None)
        self.subsystem = "bacc"

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        plugin = current_plugin()
        if plugin is None:
            return
        plugin.sweep()
        jobs = CounterMetricFamily(
            self.build_name("jobs"),
            "Coded jobs finished, by code and outcome",
            labels=["code", "outcome"],
        )
        for (code, outcome), n in sorted(plugin.jobs_total.items()):
            jobs.add_metric([code, outcome], n)
        yield jobs
        tasks = CounterMetricFamily(
            self.build_name("tasks"),
            "Coded tasks of finished jobs, by outcome",
            labels=["outcome"],
        )
        for outcome in TASK_OUTCOMES:
            tasks.add_metric([outcome], plugin.tasks_total[outcome])
        yield tasks
        for hist, name, doc in (
            (plugin.decode_hist, "decode_seconds", "Time to decode of coded jobs (seconds)"),
            (plugin.straggler_hist, "stragglers", "Coded tasks still out at decode, per job"),
        ):
            buckets = [(_le(b), c) for b, c in zip(hist.bounds, hist.counts, strict=True)]
            buckets.append(("+Inf", hist.total))
            yield HistogramMetricFamily(
                self.build_name(name), doc, buckets=buckets, sum_value=hist.sum
            )
        yield GaugeMetricFamily(
            self.build_name("time_saved_seconds"),
            "Seconds coded jobs answered before plain Dask would have, summed over jobs",
            value=plugin.time_saved_total,
        )
        yield CounterMetricFamily(
            self.build_name("cpu_seconds"),
            "Thread-seconds of coded tasks",
            value=plugin.cpu_total,
        )
        yield CounterMetricFamily(
            self.build_name("redundant_cpu_seconds"),
            "Thread-seconds of coded tasks an uncoded run would not have spent",
            value=plugin.redundant_cpu_total,
        )
        backups = CounterMetricFamily(
            self.build_name("backups"),
            "Backup copies of hedged and speculative jobs, by outcome (launched, won, cancelled)",
            labels=["outcome"],
        )
        for outcome in BACKUP_OUTCOMES:
            backups.add_metric([outcome], plugin.backups_total[outcome])
        yield backups
        yield GaugeMetricFamily(
            self.build_name("jobs_running"),
            "Coded jobs not finished yet",
            value=sum(1 for j in plugin.jobs.values() if j.closed is None),
        )


def _le(bound: float) -> str:
    return str(float(bound))


def install_metrics() -> bool:
    """Register the collector with ``prometheus_client.REGISTRY`` (once per process).

    Returns False when ``prometheus_client`` is missing (``/metrics`` then says so).
    """
    global _collector
    if _collector is not None:
        return True
    try:
        import prometheus_client
    except ImportError:
        logger.info("dask-bacc: prometheus_client is not installed; no dask_bacc_* metrics")
        return False
    collector = BaccMetricCollector()
    prometheus_client.REGISTRY.register(collector)
    _collector = collector
    return True
