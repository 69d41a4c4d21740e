"""The client-side progress bar of a coded job: results landed against results needed."""

from __future__ import annotations

import functools
import sys
import threading
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
    value = config.get("progress")
    return interactive() if value is None else _truthy(value)


class _FinalDisplay:
    """Mixin for tqdm.notebook's widget bar: the text a static render shows is the last.

    A notebook saves a widget's output with a ``text/plain`` fallback, the one static
    renders (nbconvert, GitHub) show. tqdm.notebook displays its widget once, at creation,
    so that text stayed ``0%| 0/3`` however far the bar went. This bar displays its widget
    under a display id and updates that display when it closes: the fallback saved with
    the notebook is then the bar's final state, and a live notebook redraws the same widget.
    """

    container: Any
    disable: bool

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{**kwargs, "display": False})
        self._handle: Any = None
        if not self.disable:
            from IPython.display import display

            self._handle = display(self.container, display_id=True)
            self.displayed = True

    def close(self) -> None:
        super().close()  # type: ignore[misc]
        if self._handle is not None:
            handle, self._handle = self._handle, None
            handle.update(self.container)


@functools.cache
def _bar_class() -> type:
    """tqdm.auto's bar (a widget in Jupyter, text elsewhere) without tqdm's monitor
    thread, which would outlive the job: the bar is refreshed on every result anyway.
    The widget bar saves its final state for static renders (:class:`_FinalDisplay`)."""
    from tqdm.auto import tqdm

    bases: tuple[type, ...] = (tqdm,)
    notebook = sys.modules.get("tqdm.notebook")  # imported by tqdm.auto only in a kernel
    if notebook is not None and issubclass(tqdm, notebook.tqdm):
        bases = (_FinalDisplay, tqdm)
    return type("BaccProgress", bases, {"monitor_interval": 0})


def _cell() -> int | None:
    """The IPython execution count (the cell being run), or None outside IPython."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return None
    try:
        shell = ipython.get_ipython()
    except Exception:
        return None
    return None if shell is None else int(getattr(shell, "execution_count", 0))


class _Shared:
    """The bar the jobs of one notebook cell share (per thread): a loop of 480 coded calls
    shows one bar, reset for each job, not 480 widgets. It is closed when the cell ends
    (IPython's ``post_run_cell``) or when a job of another cell takes its place."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.key: tuple[int, int] | None = None
        self.bar: Any = None
        self.jobs = 0
        self.hooked = False

    def take(self, key: tuple[int, int], make: Any) -> tuple[Any, int]:
        with self.lock:
            if self.bar is not None and self.key == key:
                self.jobs += 1
                return self.bar, self.jobs
            self._close()
            self.key, self.bar, self.jobs = key, make(), 1
            self._hook()
            return self.bar, 1

    def release(self, bar: Any) -> bool:
        """Whether ``bar`` stays open for the next job of its cell."""
        with self.lock:
            return bar is self.bar

    def end_of_cell(self, *args: Any) -> None:
        with self.lock:
            self._close()

    def _close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        self.key, self.bar, self.jobs = None, None, 0

    def _hook(self) -> None:
        if self.hooked:
            return
        try:
            shell = sys.modules["IPython"].get_ipython()
            shell.events.register("post_run_cell", self.end_of_cell)
            self.hooked = True
        except Exception:  # not IPython after all: bars then close with their job
            pass


_shared = _Shared()


class ProgressBar:
    """A tqdm bar (a widget in Jupyter) of usable results against the wait target.

    It counts up as coded results land, shows failures and the results beyond the
    target (collected during a grace period) in its postfix, and shows at decode the
    number of stragglers cancelled and the time to decode. In IPython the jobs of one
    cell share one bar (reset for each job, numbered); elsewhere each job's bar closes
    with it.
    """

    def __init__(self, report: Any, file: Any = None):
        self.report = report
        self.total = max(1, int(report.wait_target))
        name = code_label(report.code) if isinstance(report.code, dict) else report.code
        desc = f"bacc {name} {report.func}"

        def make() -> Any:
            return _bar_class()(
                total=self.total,
                desc=desc,
                unit="result",
                file=file,
                leave=True,
                dynamic_ncols=True,
                mininterval=0.1,
            )

        cell = _cell() if file is None else None
        if cell is None:
            self.bar, self.shared = make(), False
        else:
            self.bar, n = _shared.take((threading.get_ident(), cell), make)
            self.shared = True
            if n > 1:  # the same cell's next job: reuse the bar
                self.bar.reset(total=self.total)
                self.bar.set_description(f"{desc} (job {n} of this cell)", refresh=False)
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

    def abandon(self) -> None:
        """The job never ran: close the bar without final figures."""
        if self.closed:
            return
        self.closed = True
        if self.shared and _shared.release(self.bar):
            _shared.end_of_cell()
        else:
            self.bar.close()

    def close(self) -> None:
        """At the job's end: show decoded (with what it cancelled) or why not; close the
        bar unless the next job of the same cell will reuse it."""
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
        if self.shared and _shared.release(self.bar):
            self.bar.refresh()  # stays open for the cell's next job
        else:
            self.bar.close()  # draws the final state once
