"""The ``/bacc`` dashboard page: recent coded jobs, and the timeline of the selected one.

A Bokeh document served by the scheduler (see :mod:`dask_bacc.diagnostics.http`). The
table lists the jobs newest first; selecting a row shows that job's coded tasks on a
timeline (seconds since the scheduler first saw the job): one bar per coded task from
when it was sent to its worker until it returned, failed or was cancelled, coloured by
what became of it, and a dashed line at the moment the decode finished. Below, the
straggler model per worker (:class:`~dask_bacc.diagnostics.latency.LatencyModel`).
"""

from __future__ import annotations

import datetime
from typing import Any, cast

from bokeh.layouts import column
from bokeh.models import (
    BasicTicker,
    ColumnDataSource,
    DataRange1d,
    HoverTool,
    NumeralTickFormatter,
)

# the same classes as bokeh.models', whose star re-exports of these mypy cannot follow
from bokeh.models.annotations import Label, Span, Title
from bokeh.models.widgets import DataTable, Div, NumberFormatter, TableColumn
from bokeh.plotting import figure

from .plugin import PLUGIN_NAME
from .words import describe_trigger

__all__ = ["OUTCOME_COLORS", "BaccPage", "bacc_doc"]

#: colour of each coded task's outcome on the timeline
OUTCOME_COLORS = {
    "used": "#2ca02c",
    "landed": "#98df8a",
    "late": "#1f77b4",
    "excluded": "#9467bd",
    "running": "#9e9e9e",
    "pending": "#d9d9d9",
    "cancelled": "#ff7f0e",
    "failed": "#d62728",
}

_TABLE_FIELDS = (
    "token",
    "started",
    "func",
    "code",
    "K",
    "N",
    "landed_needed",
    "straggled",
    "cancelled",
    "failed",
    "backups",
    "decode_seconds",
    "time_saved",
    "extra_cpu",
    "moved",
    "error_estimate",
    "status",
)
#: the per-worker table of the straggler model
_WORKER_FIELDS = ("worker", "host", "p_late", "q50", "q90", "q99", "n")
_TASK_FIELDS = (
    "y",
    "left",
    "right",
    "end",
    "color",
    "outcome",
    "worker",
    "reason",
    "index",
    "kind",
    "group",
)


def _fmt_estimate(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (int, float)):
        return f"{value:.3g}"
    if isinstance(value, dict):  # e.g. {"relative": ..., ...}: show the first number
        for v in value.values():
            if isinstance(v, (int, float)):
                return f"{v:.3g}"
    return str(value)


def _fmt_bytes(value: Any) -> str:
    """Bytes moved for a job's answer (``report.bytes_moved``), as dask writes sizes."""
    from dask.utils import format_bytes

    return "" if value is None else format_bytes(int(value))


def _fmt_seconds(value: Any) -> str:
    return "" if value is None else f"{value:.3f}"


def _fmt_saved(row: dict[str, Any]) -> str:
    """A job's time saved against plain Dask: ``">= 1.234"`` when its uncoded time is a
    lower bound, ``"~1.234"`` when the straggler model estimated it."""
    value = row.get("time_saved")
    if value is None:
        return ""
    source = row.get("plain_ready_source") or ""
    if source == "lower-bound" and value < 0.0005:
        return "?"  # a bound of zero or less says nothing
    mark = {"lower-bound": ">= ", "model": "~"}.get(source, "")
    return f"{mark}{value:.3f}"


def _fmt_backups(row: dict[str, Any]) -> str:
    """What hedging did in a hedged or speculative job (``report.hedge``): backups won of
    those launched, and the late threshold the last one went by (``"1/2 > 0.31 s"``)."""
    hedge = row.get("hedge")
    if not hedge:
        return ""
    out = f"{hedge.get('won', 0)}/{hedge.get('launched', 0)}"
    threshold = hedge.get("threshold")
    return out if threshold is None else f"{out} > {threshold:.2f} s"


def _fmt_totals(totals: dict[str, Any]) -> str:
    """The session's savings against plain Dask, for the page's summary line."""
    jobs = totals.get("time_saved_jobs") or 0
    cpu = totals.get("cpu") or 0.0
    if not jobs and not cpu:
        return ""
    return (
        f"Against plain Dask: {totals.get('time_saved', 0.0):.3f} s saved over {jobs} "
        f"job(s); extra CPU {totals.get('redundant_cpu', 0.0):.3f} s of {cpu:.3f} s. "
    )


class BaccPage:
    """The page's models and their update from the plugin's state."""

    def __init__(self, scheduler: Any):
        self.scheduler = scheduler
        self.selected: str | None = None  # token of the job on the timeline
        self.version = -1
        self.tokens: list[str] = []

        self.title = Div(text="<h2>dask-bacc: coded jobs</h2>", sizing_mode="stretch_width")
        self.summary = Div(text="", sizing_mode="stretch_width")
        self.jobs = ColumnDataSource({f: [] for f in _TABLE_FIELDS})
        seconds = NumberFormatter(format="0.000")
        columns = [
            TableColumn(field="token", title="token", width=90),
            TableColumn(field="started", title="started", width=80),
            TableColumn(field="func", title="function", width=140),
            TableColumn(field="code", title="code", width=120),
            TableColumn(field="K", title="K", width=40),
            TableColumn(field="N", title="N", width=40),
            TableColumn(field="landed_needed", title="landed / needed", width=110),
            TableColumn(field="straggled", title="straggled", width=70),
            TableColumn(field="cancelled", title="cancelled", width=70),
            TableColumn(field="failed", title="failed", width=60),
            TableColumn(field="backups", title="backups won/launched", width=140),
            TableColumn(field="decode_seconds", title="decode (s)", width=80, formatter=seconds),
            TableColumn(field="time_saved", title="time saved (s)", width=100),
            TableColumn(field="extra_cpu", title="extra CPU (s)", width=90),
            TableColumn(field="moved", title="moved", width=70),
            TableColumn(field="error_estimate", title="error est.", width=80),
            TableColumn(field="status", title="status", width=80),
        ]
        self.table = DataTable(
            source=self.jobs,
            columns=columns,
            index_position=None,
            height=240,
            sizing_mode="stretch_width",
            selectable=True,
        )
        self.jobs.selected.on_change("indices", self._on_select)

        self.tasks = ColumnDataSource({k: [] for k in _TASK_FIELDS})
        # bokeh's stub gives figure() the keywords of Plot only, not its figure options
        fig = figure(  # type: ignore[call-arg]
            height=360,
            sizing_mode="stretch_width",
            x_axis_label="seconds since the job started",
            y_axis_label="coded task",
            tools="pan,xwheel_zoom,box_zoom,reset",
            title="select a job",
        )
        fig.hbar(
            y="y",
            left="left",
            right="right",
            height=0.6,
            color="color",
            legend_field="outcome",
            source=self.tasks,
        )
        fig.scatter(x="end", y="y", size=9, marker="circle", color="color", source=self.tasks)
        fig.add_tools(
            HoverTool(
                tooltips=[
                    ("task", "@kind @index"),
                    ("group", "@group"),
                    ("worker", "@worker"),
                    ("outcome", "@outcome"),
                    ("until", "@end{0.000} s"),
                    ("reason", "@reason"),
                ]
            )
        )
        fig.add_layout(fig.legend[0], "right")  # beside the plot: never over the bars
        cast(DataRange1d, fig.y_range).flipped = True  # figure()'s default range
        # coded tasks are numbered: whole numbers only, never 2.5
        fig.yaxis.ticker = BasicTicker(min_interval=1, num_minor_ticks=0)
        fig.yaxis.formatter = NumeralTickFormatter(format="0")
        self.decode_line = Span(
            location=0,
            dimension="height",
            line_color="black",
            line_dash="dashed",
            line_width=2,
            visible=False,
        )
        self.decode_label = Label(
            x=0, y=5, x_units="data", y_units="screen", text="", text_font_size="11px"
        )
        fig.add_layout(self.decode_line)
        fig.add_layout(self.decode_label)
        self.timeline = fig
        self.model_title = Div(text="<h3>Stragglers by worker</h3>", sizing_mode="stretch_width")
        self.workers = ColumnDataSource({f: [] for f in _WORKER_FIELDS})
        ratio = NumberFormatter(format="0.00")
        self.worker_table = DataTable(
            source=self.workers,
            columns=[
                TableColumn(field="worker", title="worker", width=200),
                TableColumn(field="host", title="host", width=120),
                TableColumn(field="p_late", title="P(late)", width=70, formatter=ratio),
                TableColumn(field="q50", title="q50", width=60, formatter=ratio),
                TableColumn(field="q90", title="q90", width=60, formatter=ratio),
                TableColumn(field="q99", title="q99", width=60, formatter=ratio),
                TableColumn(field="n", title="n (effective)", width=90, formatter=ratio),
            ],
            index_position=None,
            height=56,
            sizing_mode="stretch_width",
        )
        self.root = column(
            self.title,
            self.summary,
            self.table,
            self.timeline,
            self.model_title,
            self.worker_table,
            sizing_mode="stretch_width",
        )

    def _plugin(self) -> Any:
        return self.scheduler.plugins.get(PLUGIN_NAME)

    def _on_select(self, attr: str, old: list[int], new: list[int]) -> None:
        if new and new[0] < len(self.tokens):
            token = self.tokens[new[0]]
            if token != self.selected:
                self.selected = token
                self.version = -1  # redraw the timeline now

    def update(self) -> None:
        """Refresh from the plugin (cheap when nothing changed)."""
        plugin = self._plugin()
        if plugin is None:
            self.summary.text = f"<p>The scheduler plugin {PLUGIN_NAME!r} is not registered.</p>"
            return
        plugin.sweep()
        running = any(j.closed is None for j in plugin.jobs.values())
        if plugin.version == self.version and not running:
            return
        self.version = plugin.version
        stats = plugin.stats()
        rows = stats["jobs"]
        self.tokens = [r["token"] for r in rows]
        if self.selected not in self.tokens:
            self.selected = self.tokens[0] if self.tokens else None
        data: dict[str, list] = {f: [] for f in _TABLE_FIELDS}
        for r in rows:
            needed = "?" if r["needed"] is None else r["needed"]
            data["token"].append(r["token"][:8])
            data["started"].append(
                datetime.datetime.fromtimestamp(r["started"]).strftime("%H:%M:%S")
            )
            data["func"].append(r["func"] or "?")
            data["code"].append(r["code"] or "?")
            data["K"].append(r["K"])
            data["N"].append(r["N"])
            data["landed_needed"].append(f"{r['landed']} / {needed}")
            data["straggled"].append(r["straggled"])
            data["cancelled"].append(r["cancelled"])
            data["failed"].append(r["failed"])
            data["backups"].append(_fmt_backups(r))
            data["decode_seconds"].append(r["decode_seconds"])
            data["time_saved"].append(_fmt_saved(r))
            data["extra_cpu"].append(_fmt_seconds(r.get("redundant_cpu")))
            data["moved"].append(_fmt_bytes(r.get("bytes_moved")))
            data["error_estimate"].append(_fmt_estimate(r["error_estimate"]))
            data["status"].append(r["status"])
        # bokeh's stub wants dict[str, Sequence | array | ...] (invariant): lists are fine
        self.jobs.data = data  # type: ignore[assignment]
        self.table.height = 30 + 26 * max(1, min(len(rows), 8))  # scrolls past 8 jobs
        row = self.tokens.index(self.selected) if self.selected is not None else None
        if row is not None and self.jobs.selected.indices != [row]:
            self.jobs.selected.indices = [row]
        totals = stats["totals"]
        tasks = totals["tasks"]
        self.summary.text = (
            f"<p>{len(rows)} recent job(s), {totals['running']} running. "
            "Coded tasks of finished jobs: "
            f"{tasks.get('used', 0)} used, {tasks.get('late', 0)} late, "
            + (f"{tasks['excluded']} excluded, " if tasks.get("excluded") else "")
            + f"{tasks.get('cancelled', 0)} cancelled, {tasks.get('failed', 0)} failed. "
            + _fmt_totals(totals)
            + "JSON: <a href='bacc/stats.json'>bacc/stats.json</a></p>"
        )
        self._draw_timeline(plugin)
        self._draw_workers(stats["workers"])

    def _draw_workers(self, snapshot: dict[str, Any] | None) -> None:
        """The straggler model's per-worker table, slowest first (latencies relative to
        each job's median task)."""
        cols: dict[str, list] = {f: [] for f in _WORKER_FIELDS}
        if snapshot is None:
            self.model_title.text = "<h3>Stragglers by worker</h3><p>The model is off.</p>"
        else:
            self.model_title.text = (
                "<h3>Stragglers by worker</h3>"
                f"<p>From {snapshot['jobs']} job(s); late: over {snapshot['late_factor']:g}"
                f" times the job's median task, half-life {snapshot['half_life']:g} job(s)."
                "</p>"
            )
            rows = sorted(snapshot["workers"].items(), key=lambda kv: -kv[1]["p_late"])
            for worker, r in rows:
                cols["worker"].append(worker)
                cols["host"].append(r["host"] or "")
                for f in ("p_late", "q50", "q90", "q99"):
                    cols[f].append(r[f])
                cols["n"].append(r["n_eff"])
        self.workers.data = cols  # type: ignore[assignment]  # (as self.jobs.data)
        self.worker_table.height = 30 + 26 * max(1, min(len(cols["worker"]), 16))

    def _draw_timeline(self, plugin: Any) -> None:
        detail = plugin.stats(self.selected) if self.selected is not None else None
        cols: dict[str, list] = {k: [] for k in _TASK_FIELDS}
        if detail is None:
            self.tasks.data = cols  # type: ignore[assignment]  # (as self.jobs.data)
            self.decode_line.visible = False
            self.decode_label.text = ""
            return
        now = detail["now"]
        for t in detail["tasks"]:
            left = t["dispatched"] if t["dispatched"] is not None else t["submitted"]
            end = t["ended"] if t["ended"] is not None else now
            cols["y"].append(t["index"])
            cols["left"].append(left)
            cols["right"].append(max(end, left))
            cols["end"].append(end)
            cols["color"].append(OUTCOME_COLORS.get(t["outcome"], "#000000"))
            cols["outcome"].append(t["outcome"])
            cols["worker"].append(t["worker"] or "")
            cols["reason"].append(t["reason"] or "")
            cols["index"].append(t["index"])
            cols["kind"].append(t["kind"])
            group = t.get("group")
            cols["group"].append("" if group is None else str(group))
        self.tasks.data = cols  # type: ignore[assignment]  # (as self.jobs.data)
        self.timeline.height = max(260, min(900, 90 + 24 * len(cols["y"])))
        # the client's measure when it has reported (as the table and the job's reprs),
        # else the scheduler's
        decoded = detail["decode_seconds"]
        self.decode_line.visible = decoded is not None
        if decoded is not None:
            self.decode_line.location = decoded
            self.decode_label.x = decoded
            self.decode_label.text = f" decoded at {decoded:.3f}s"
        else:
            self.decode_label.text = ""
        cast(Title, self.timeline.title).text = (  # a str title is converted to a Title
            f"{detail['func'] or '?'} ({detail['code'] or '?'}, K={detail['K']}, "
            f"N={detail['N']}) token {detail['token']}: {detail['landed']} landed of "
            f"{detail['needed'] if detail['needed'] is not None else '?'} needed, "
            f"{detail['cancelled']} cancelled, {detail['failed']} failed, {detail['status']}"
            + (f"; decoded when {describe_trigger(detail['trigger'])}" if detail["trigger"] else "")
        )


def requested_token(doc: Any) -> str | None:
    """``/bacc?token=<token>`` (the link in a ``JobReport``'s notebook repr) opens the page
    on that job."""
    request = getattr(getattr(doc, "session_context", None), "request", None)
    wanted = (getattr(request, "arguments", None) or {}).get("token")
    if not wanted:
        return None
    return wanted[0].decode() if isinstance(wanted[0], bytes) else str(wanted[0])


def bacc_doc(scheduler: Any, extra: dict[str, Any], doc: Any) -> None:
    """Build the ``/bacc`` Bokeh document (called once per browser session)."""
    page = BaccPage(scheduler)
    page.selected = requested_token(doc)
    page.update()
    doc.title = "Dask: coded jobs"
    doc.add_root(page.root)
    doc.add_periodic_callback(page.update, 500)
    try:  # distributed's page template: navigation bar and styles
        from distributed.dashboard.components.scheduler import BOKEH_THEME, env

        doc.template = env.get_template("simple.html")
        doc.template_variables.update(extra)
        doc.theme = BOKEH_THEME
    except Exception:  # a distributed without them: the bare page
        pass
