"""What auto mode keeps on the client between jobs, so that a steady-state job plans
without a scheduler round trip of its own.

- :class:`ViewCache`: per client, the last picture of the scheduler's straggler model
  (:func:`dask_bacc.diagnostics.model_view`). The first auto job of a client (or of a
  new set of workers) asks for it; after that, every coded job of the client brings a
  fresh one back in the reply of the clean-up round trip it makes anyway
  (:func:`dask_bacc.runtime.job._job_done`), so the next job plans from a view one job
  old at most.
- :class:`PlanCache`: per function and setting asked for, the last plan and what it was
  made from (the view's model version, the calibration's jobs, the workers): a job whose
  inputs have not changed reuses it; otherwise its choice is the ``incumbent`` the
  planner's hysteresis keeps while it stays within the budget.

Pure Python: no cluster, no event loop (the callers own those).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .auto import ModelView, Plan

__all__ = ["PlanCache", "ViewCache", "plans", "views"]


@dataclass
class _View:
    workers: tuple[str, ...]
    raw: dict[str, Any]
    version: int  # the model's jobs when drawn


class ViewCache:
    """The last straggler-model view of each client (weakly keyed: a closed client's
    view goes with it)."""

    def __init__(self) -> None:
        self._views: weakref.WeakKeyDictionary[Any, _View] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def get(self, client: Any, order: Sequence[str]) -> ModelView | None:
        """The cached view of exactly these workers (any order: the columns follow
        ``order``), or None when there is none or the workers have changed."""
        with self._lock:
            entry = self._views.get(client)
        if entry is None or set(entry.workers) != set(order) or len(order) != len(entry.workers):
            return None
        return as_view(entry.raw, list(order), entry.workers)

    def put(self, client: Any, workers: Sequence[str], raw: dict[str, Any] | None) -> None:
        """Keep ``raw`` (a :func:`~dask_bacc.diagnostics.model_view` reply for ``workers``);
        None (no model on the scheduler) forgets the client's view."""
        with self._lock:
            if raw is None:
                self._views.pop(client, None)
            else:
                self._views[client] = _View(tuple(workers), raw, int(raw["jobs"]))

    def wanted(self, client: Any) -> tuple[list[str], int] | None:
        """What to draw a fresh view of in a job's clean-up round trip: the workers of the
        client's cached view and its model version (jobs learned from); None when the
        client has not planned (no auto job)."""
        with self._lock:
            entry = self._views.get(client)
        return None if entry is None else (list(entry.workers), entry.version)


def as_view(raw: dict[str, Any], order: list[str], drawn_for: Sequence[str]) -> ModelView:
    """A :class:`ModelView` of ``order`` from a reply drawn for ``drawn_for`` (the same
    workers, maybe in another order)."""
    draws = np.asarray(raw["draws"], dtype=float)
    hosts = list(raw["hosts"])
    if list(drawn_for) != order:
        position = {w: j for j, w in enumerate(drawn_for)}
        cols = [position[w] for w in order]
        draws = draws[:, cols]
        hosts = [hosts[j] for j in cols]
    return ModelView(
        workers=order,
        draws=draws,
        jobs=int(raw["jobs"]),
        hosts=hosts,
        correlated=frozenset(raw["correlated"]),
        late_factor=float(raw["late_factor"]),
    )


@dataclass
class _Planned:
    inputs: Hashable  # what the plan was made from
    plan: Plan


class PlanCache:
    """The last plan per key (a function and the settings asked for), bounded."""

    def __init__(self, size: int = 256):
        self.size = size
        self._plans: OrderedDict[Hashable, _Planned] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, inputs: Hashable) -> Plan | None:
        """The plan made for ``key`` from the same ``inputs``, or None."""
        with self._lock:
            entry = self._plans.get(key)
            if entry is None or entry.inputs != inputs:
                return None
            self._plans.move_to_end(key)
            return entry.plan

    def incumbent(self, key: Hashable) -> tuple[str, int, int] | None:
        """``(code, N, k)`` of the last plan for ``key`` (whatever it was made from)."""
        with self._lock:
            entry = self._plans.get(key)
        if entry is None:
            return None
        c = entry.plan.chosen
        return (c.code, c.N, c.k)

    def put(self, key: Hashable, inputs: Hashable, plan: Plan) -> None:
        with self._lock:
            self._plans.pop(key, None)
            self._plans[key] = _Planned(inputs, plan)
            while len(self._plans) > self.size:
                self._plans.popitem(last=False)


#: the process's caches (the client side of auto mode, as the calibration is)
views = ViewCache()
plans = PlanCache()
