"""HTML representations for notebooks (``_repr_html_``), in the manner of distributed's
``Client`` and ``Future``: a title line, then a two-column table of what matters.

Used by :class:`~dask_bacc.JobReport`, :class:`~dask_bacc.CodedJob` and
:class:`~dask_bacc.CodedData`. Everything shown is escaped.
"""

from __future__ import annotations

import html
from typing import Any

__all__ = ["coded_data_html", "dashboard_job_link", "report_html"]

_STATUS_COLOURS = {
    "finished": "#2e7d32",
    "running": "#1565c0",
    "error": "#c62828",
    "cancelled": "#6d4c41",
    "released": "#6d4c41",
}
_BOX = (
    "font-family: var(--jp-ui-font-family, sans-serif); font-size: 13px; "
    "border-left: 3px solid #e85d04; padding: 4px 10px; margin: 4px 0"
)
_KEY = (
    "text-align: left; padding: 1px 12px 1px 0; font-weight: 600; vertical-align: top; "
    "white-space: nowrap"
)
_VALUE = "text-align: left; padding: 1px 0"


def _e(x: Any) -> str:
    return html.escape(str(x))


def _indices(xs: list[int], limit: int = 24) -> str:
    if not xs:
        return "none"
    shown = ", ".join(str(i) for i in sorted(xs)[:limit])
    return f"{len(xs)}: {shown}" + (", ..." if len(xs) > limit else "")


def _table(rows: list[tuple[str, str]]) -> str:
    """``rows`` of (key, value HTML); values must already be escaped."""
    body = "".join(
        f'<tr><th style="{_KEY}">{_e(k)}</th><td style="{_VALUE}">{v}</td></tr>' for k, v in rows
    )
    return f'<table style="border-collapse: collapse; margin: 2px 0">{body}</table>'


def _title(kind: str, label: str, status: str | None) -> str:
    badge = ""
    if status is not None:
        colour = _STATUS_COLOURS.get(status, "#555555")
        badge = (
            f' <span style="color: white; background: {colour}; border-radius: 3px; '
            f'padding: 0 5px; font-size: 11px">{_e(status)}</span>'
        )
    return f'<div style="font-size: 14px"><strong>{_e(kind)}</strong>: {_e(label)}{badge}</div>'


def dashboard_job_link(dashboard_link: str | None, token: str) -> str | None:
    """The ``/bacc`` page of the job ``token`` from the client's ``dashboard_link``
    (``http://host:8787/status``), or None without a dashboard."""
    if not dashboard_link:
        return None
    base = (
        dashboard_link.rsplit("/", 1)[0] if dashboard_link.endswith("/status") else dashboard_link
    )
    return f"{base.rstrip('/')}/bacc?token={token}"


def _link(url: str | None) -> str:
    if not url:
        return "no dashboard"
    return f'<a href="{_e(url)}" target="_blank">{_e(url)}</a>'


def _report_rows(rep: Any) -> list[tuple[str, str]]:
    from ..codes.registry import code_label
    from .words import describe_method

    def seconds(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f} s"

    rows = [
        ("Code", f"{_e(code_label(rep.code))}, K={rep.K} data blocks, N={rep.N} coded tasks"),
        ("Waited for", f"{rep.wait_target} results; {_e(rep.decoded_line())}"),
        ("Returned", _e(_indices(rep.returned))),
        ("Straggled", f"{_e(_indices(rep.straggled))} (cancelled {rep.cancelled})"),
    ]
    if rep.not_needed:
        rows.append(("Not needed", _e(_indices(rep.not_needed))))
    if rep.late:
        rows.append(("Late", _e(_indices(rep.late))))
    if rep.failed:
        reasons = "<br>".join(
            f"task {i}: {_e(reason)}" for i, reason in sorted(rep.failed.items())[:8]
        )
        more = f"<br>... and {len(rep.failed) - 8} more" if len(rep.failed) > 8 else ""
        rows.append(("Failed", reasons + more))
    if rep.backups:
        rows.append(("Backups", _e(_indices(rep.backups))))
    rows.append(
        (
            "Time to decode",
            f"{seconds(rep.time_to_decode)} (slowest result used {seconds(rep.slowest_used)})",
        )
    )
    savings = rep.savings_line() if hasattr(rep, "savings_line") else None
    if savings:
        rows.append(("Against plain Dask", _e(savings)))
    method = rep.estimate_method
    if rep.error_estimate is not None:
        worst = max((e for e in rep.block_errors or [] if e is not None), default=None)
        estimate = f"{rep.error_estimate:.3g}" + (
            f" (worst block {worst:.3g})" if worst is not None else ""
        )
        rows.append(("Error estimate", f"{_e(estimate)}; {_e(describe_method(method))}"))
    elif method == "exact-unchecked":
        rows.append(("Error estimate", _e(describe_method(method))))
    elif method is not None:
        rows.append(("Error estimate", f"unknown; {_e(describe_method(method))}"))
    if rep.adversaries or rep.excluded:
        rows.append(("Excluded as corrupted", _e(_indices(rep.excluded))))
    if rep.suspects:
        rows.append(("Suspect results", _e(_indices(rep.suspects))))
    for w in rep.warnings:
        rows.append(("Warning", _e(w)))
    if rep.error:
        rows.append(("Error", _e(rep.error)))
    rows.append(("Dashboard", _link(getattr(rep, "dashboard", None))))
    return rows


def report_html(rep: Any, kind: str = "JobReport") -> str:
    """HTML for a :class:`~dask_bacc.JobReport` (``kind="CodedJob"``: a job, shown by its
    report so far)."""
    title = _title(kind, f"{rep.func} (token {rep.token[:8]})", rep.status)
    return f'<div style="{_BOX}">{title}{_table(_report_rows(rep))}</div>'


def coded_data_html(data: Any) -> str:
    """HTML for a :class:`~dask_bacc.CodedData`."""
    from ..codes.registry import code_label

    code = data.code
    released = bool(getattr(data, "_released", False))
    status = "released" if released else "in memory"
    workers = sorted(set(getattr(data, "workers", []) or []))
    rows = [
        ("Code", f"{_e(code_label(code.get_config()))}, K={code.K} data blocks, N={code.N} shares"),
        ("Data", _e(data.blocks.kind)),
        ("Shares", "released" if released else f"{len(data.shares)} on {len(workers)} workers"),
        ("Token", _e(data.token)),
    ]
    title = _title("CodedData", f"{code_label(code.get_config())} K={code.K} N={code.N}", status)
    return f'<div style="{_BOX}">{title}{_table(rows)}</div>'
