"""The client-side progress bar of a coded job: results landed against results needed."""

from __future__ import annotations

import functools
import sys
from typing import Any

from .. import config
from ..codes.registry import code_label

__all__ = ["ProgressBar", "interactive", "want_progress"]


def _in_task() -> bool:
    """Whether this runs inside a Dask task (e.g. the driver task of ``dask_bacc.coded``)."""
    try:
        from distributed import get_worker

        get_worker()
    except ValueError:
        return False
    return True


def interactive() -> bool:
    """Whether this is an interactive session: IPython, Jupyter or a Python prompt.

    False inside a Dask task, where a bar would go to a worker's log.
    """
    if _in_task():
        return False
    if hasattr(sys, "ps1") or sys.flags.interactive:
        return True
    ipython = sys.modules.get("IPython")
    if ipython is not None:
        try:
            return ipython.get_ipython() is not None
        except Exception:
            return False
    return False


def _truthy(value: Any) -> bool:
    if isinstance(value, str):  # DASK_BACC__PROGRESS=true arrives as a string
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def want_progress(progress: bool | None) -> bool:
    """Resolve ``progress=``: the argument; else ``bacc.progress`` (never inside a Dask
    task: the driver of ``coded()`` takes the client's settings); else interactive()."""
    if progress is not None:
        return _truthy(progress)
    if _in_task():
        return False
    value = config.get("progress", None)
    return interactive() if value is None else _truthy(value)


@functools.cache
def _bar_class() -> type:
    """tqdm.auto's bar (a widget in Jupyter, text elsewhere) without tqdm's monitor
    thread, which would outlive the job: the bar is refreshed on every result anyway."""
    from tqdm.auto import tqdm

    return type("BaccProgress", (tqdm,), {"monitor_interval": 0})


class ProgressBar:
    """A tqdm bar (a widget in Jupyter) of usable results against the wait target.

    It counts up as coded results land, shows failures and the results beyond the
    target (collected during a grace period) in its postfix, and closes at decode with
    the number of stragglers cancelled and the time to decode.
    """

    def __init__(self, report: Any, file: Any = None):
        self.report = report
        self.total = max(1, int(report.wait_target))
        name = code_label(report.code) if isinstance(report.code, dict) else report.code
        self.bar = _bar_class()(
            total=self.total,
            desc=f"bacc {name} {report.func}",
            unit="result",
            file=file,
            leave=True,
            dynamic_ncols=True,
            mininterval=0.1,
        )
        self.closed = False

    def update(self, landed: int) -> None:
        """``landed`` usable results so far."""
        if self.closed:
            return
        self.bar.n = min(landed, self.total)
        postfix = {}
        if landed > self.total:
            postfix["landed"] = landed
        if self.report.failed:
            postfix["failed"] = len(self.report.failed)
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        """Close at the job's end: decoded (with what it cancelled) or why not."""
        if self.closed:
            return
        self.closed = True
        rep = self.report
        postfix: dict[str, Any] = {}
        if rep.status == "finished":
            postfix["decoded"] = f"{rep.time_to_decode:.3f}s" if rep.time_to_decode else "yes"
            if rep.trigger not in (None, "wait"):
                postfix["on"] = rep.trigger  # timeout, or every task answered
            postfix["cancelled"] = rep.cancelled
        else:
            postfix["status"] = rep.status
        if rep.failed:
            postfix["failed"] = len(rep.failed)
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.close()  # draws the final state once
