"""Benchmark output: a markdown report, a JSON file and PNG figures.

The figures are drawn on :class:`matplotlib.figure.Figure` objects rendered by the Agg
backend directly, without ``pyplot``: nothing global changes, no window opens and no figure
needs closing.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from .harness import APPROXIMATE, STRATEGIES, BenchResult

__all__ = [
    "OUTPUT_ROOT",
    "markdown_report",
    "output_dir",
    "write_json",
    "write_outputs",
    "write_plots",
]

#: Where scripts write by default: ``./dask-bacc-output/<script>-<YYYYmmdd-HHMMSS>/``
OUTPUT_ROOT = "dask-bacc-output"


def output_dir(out: str | None, script: str) -> str:
    """The folder to write to, created: ``out`` if given, else a new folder
    ``./dask-bacc-output/<script>-<YYYYmmdd-HHMMSS>/`` under the current directory.

    The default never lands on a tracked file: the figures in docs/iterative are only
    rewritten by an explicit ``--out docs/iterative``.
    """
    if out is not None:
        os.makedirs(out, exist_ok=True)
        return out
    base = os.path.join(OUTPUT_ROOT, f"{script}-{time.strftime('%Y%m%d-%H%M%S')}")
    path, n = base, 1
    while True:
        try:
            os.makedirs(path)
            return path
        except FileExistsError:  # another run in the same second
            n += 1
            path = f"{base}-{n}"


#: Columns of the main table (tests check them).
TABLE_COLUMNS = (
    "strategy",
    "tasks",
    "jobs",
    "failed",
    "p50 (s)",
    "p90 (s)",
    "p99 (s)",
    "p50 / uncoded",
    "p90 / uncoded",
    "p99 / uncoded",
    "p50 / no-straggler",
    "p90 / no-straggler",
    "p99 / no-straggler",
    "rel. error median",
    "rel. error max",
    "task-s per job",
    "compute / uncoded",
    "stragglers per job",
    "cancelled per job",
)
CLEAN_COLUMNS = ("strategy", "p50 (s)", "p90 (s)", "p99 (s)", "failed", "task-s per job")
ERROR_FLOOR = 1e-16  # exact results (error 0) are drawn at this height on the log axis

_COLORS = {
    "plain": "tab:gray",
    "uncoded": "tab:brown",
    "repetition": "tab:green",
    "speculative": "tab:purple",
    "berrut": "tab:blue",
    "systematic-berrut": "tab:cyan",
    "lagrange": "tab:orange",
}


def _f(x: float | None, spec: str) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if math.isinf(x):
        return "inf"
    return format(x, spec)


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def markdown_report(result: BenchResult) -> str:
    """The results as markdown: one table per (K, N) cell, the target figures and notes.

    Parameters
    ----------
    result : BenchResult
        From :func:`dask_bacc.bench.run_bench`.

    Returns
    -------
    str
    """
    cfg, env = result.config, result.environment
    lines: list[str] = []
    for K, N in result.cells:
        cell = result.summary.get((K, N), {})
        lines.append(f"## dask bacc bench: K={K}, N={N}")
        lines.append("")
        lines.append(
            f"{cfg.task.describe()}. Stragglers: "
            f"{cfg.stragglers.describe(cfg.task.base_duration)}. {cfg.jobs} jobs per strategy"
            + (" with stragglers and as many without" if cfg.baseline else "")
            + ", interleaved (order shuffled per round, seed "
            f"{cfg.seed}). {env.get('cluster')}, {env.get('cpu_count')} CPUs, Python "
            f"{env.get('python')}, dask/distributed {env.get('distributed')}, dask-bacc "
            f"{env.get('dask_bacc')}"
            + (f" ({env['dask_bacc_commit']})" if env.get("dask_bacc_commit") else "")
            + f"; wall "
            f"{result.wall_seconds:.0f} s."
        )
        lines.append("")
        lines.append(_row(list(TABLE_COLUMNS)))
        lines.append("|---|" + "--:|" * (len(TABLE_COLUMNS) - 1))
        for s in STRATEGIES:
            if s not in cell:
                continue
            v = cell[s]
            lat, vu, vc = v["latency"], v["vs_uncoded"], v["vs_clean"]
            label = s + (" (approx.)" if s in APPROXIMATE else "")
            lines.append(
                _row(
                    [
                        label,
                        _f(v["tasks"], ".1f") if s == "speculative" else _f(v["tasks"], ".0f"),
                        str(v["jobs"]),
                        str(v["failed"]),
                        _f(lat["p50"], ".3f"),
                        _f(lat["p90"], ".3f"),
                        _f(lat["p99"], ".3f"),
                        _f(vu["p50"], ".2f"),
                        _f(vu["p90"], ".2f"),
                        _f(vu["p99"], ".2f"),
                        _f(vc["p50"], ".2f"),
                        _f(vc["p90"], ".2f"),
                        _f(vc["p99"], ".2f"),
                        _f(v["rel_error"]["median"], ".2e"),
                        _f(v["rel_error"]["max"], ".2e"),
                        _f(v["compute"]["per_job"], ".2f"),
                        _f(v["compute"]["vs_uncoded"], ".2f"),
                        _f(v["stragglers_per_job"], ".2f"),
                        _f(v["cancelled_per_job"], ".2f"),
                    ]
                )
            )
        if cfg.baseline:
            lines.append("")
            lines.append("No-straggler runs of the same strategies (same rounds, interleaved):")
            lines.append("")
            lines.append(_row(list(CLEAN_COLUMNS)))
            lines.append("|---|" + "--:|" * (len(CLEAN_COLUMNS) - 1))
            for s in STRATEGIES:
                if s not in cell:
                    continue
                v = cell[s]
                lat = v["clean_latency"]
                lines.append(
                    _row(
                        [
                            s,
                            _f(lat["p50"], ".3f"),
                            _f(lat["p90"], ".3f"),
                            _f(lat["p99"], ".3f"),
                            str(v["clean_failed"]),
                            _f(v["compute"]["clean_per_job"], ".2f"),
                        ]
                    )
                )
        targets = result.targets(K, N)
        if targets:
            lines.append("")
            lines.append("Targets:")
            lines.append("")
            names = {
                "berrut_p50_vs_clean": "Berrut p50 / its own no-straggler p50",
                "berrut_p99_vs_uncoded": "Berrut p99 / uncoded p99",
                "berrut_p99_vs_speculative": "Berrut p99 / speculative p99",
            }
            for key, t in targets.items():
                lines.append(
                    f"- {names[key]} = {_f(t['value'], '.2f')} (target {t['target']}): "
                    f"{'met' if t['met'] else 'NOT met'}"
                )
        errors = {s: v["errors"] for s, v in cell.items() if v["errors"]}
        if errors:
            lines.append("")
            lines.append("Failures:")
            lines.append("")
            for s, errs in errors.items():
                for e in errs[:3]:
                    lines.append(f"- {s}: {e}")
        lines.append("")
    lines.append("Notes:")
    lines.append("")
    for note in result.notes:
        lines.append(f"- {note}")
    lines += [
        "- Latency: from submission to the decoded output in hand on the client. p99 over "
        f"{cfg.jobs} jobs interpolates between the slowest jobs (read it as a near-maximum). "
        "A failed job counts as infinitely slow (inf); a ratio to an infinite baseline is '-'.",
        "- Ratios: '/ uncoded' against dask-bacc's uncoded strategy (N = K pinned tasks, "
        "wait for all) with stragglers in the same run; '/ no-straggler' against the same "
        "strategy's own runs without injected delays. 'plain' is plain Dask (client.map + "
        "gather, scheduler placement).",
        "- rel. error: ||out - f(X)||_F / ||f(X)||_F over the jobs with stragglers; "
        "'approx.' strategies (Berrut, spline) are approximate by design, the others exact "
        "(error 0 or rounding).",
        "- task-s per job: thread-seconds the job's eval tasks occupied, cancelled stragglers "
        "included until their delay was interrupted (encode/decode tasks not counted).",
        "- stragglers per job: tasks whose seeded draw gave a delay >= "
        f"{cfg.stragglers.straggler_threshold(cfg.task.base_duration):g} s "
        "(under 'kills': tasks on a killed worker); tasks: eval tasks launched "
        "(speculative: K plus backups).",
    ]
    return "\n".join(lines) + "\n"


def write_json(result: BenchResult, path: str | Path) -> Path:
    """Write ``result.to_dict()`` as JSON.

    Parameters
    ----------
    result : BenchResult
    path : str or Path

    Returns
    -------
    Path
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        json.dump(result.to_dict(), fh, indent=2, allow_nan=False)
        fh.write("\n")
    return path


def _figure(width: float = 7.0, height: float = 4.5) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _cdf_figure(result: BenchResult, K: int, N: int) -> Any:
    fig = _figure()
    ax = fig.add_subplot()
    for s in result.strategies:
        color = _COLORS.get(s)
        for condition, style in (("stragglers", "-"), ("clean", "--")):
            recs = [
                r
                for r in result.records
                if (r.K, r.N, r.strategy, r.condition) == (K, N, s, condition)
            ]
            if not recs:
                continue
            lat = np.sort([r.latency for r in recs if r.latency is not None])
            if lat.size == 0:
                continue
            y = np.arange(1, lat.size + 1) / len(recs)  # failed jobs never arrive: CDF < 1
            ax.step(
                np.concatenate([[lat[0]], lat]),
                np.concatenate([[0.0], y]),
                where="post",
                linestyle=style,
                color=color,
                alpha=1.0 if condition == "stragglers" else 0.6,
                label=s if condition == "stragglers" else f"{s} (no stragglers)",
            )
    from matplotlib.ticker import FormatStrFormatter

    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.xaxis.set_minor_formatter(FormatStrFormatter("%g"))
    ax.tick_params(axis="x", which="minor", labelsize=7)
    ax.set_xlabel("job latency (s, log scale)")
    ax.set_ylabel("fraction of jobs finished")
    ax.set_ylim(0, 1.02)
    ax.grid(True, which="both", alpha=0.3)
    cfg = result.config
    ax.set_title(
        f"Latency CDF, K={K}, N={N}: {cfg.stragglers.describe(cfg.task.base_duration)}",
        fontsize=9,
    )
    ax.legend(fontsize=7, loc="lower right", ncol=2)
    return fig


def _error_figure(result: BenchResult, K: int, N: int) -> Any:
    fig = _figure()
    ax = fig.add_subplot()
    strategies = result.strategies
    width = 0.6
    for k, s in enumerate(strategies):
        recs = [
            r
            for r in result.records
            if (r.K, r.N, r.strategy) == (K, N, s) and r.rel_error is not None
        ]
        if not recs:
            continue
        offset = (k - (len(strategies) - 1) / 2) * width / max(len(strategies), 1)
        x = np.array([r.stragglers for r in recs], dtype=float)
        y = np.maximum([r.rel_error for r in recs if r.rel_error is not None], ERROR_FLOOR)
        color = _COLORS.get(s)
        ax.scatter(x + offset, y, s=12, alpha=0.5, color=color, label=s)
        xs = sorted(set(x.tolist()))
        med = [float(np.median(y[x == v])) for v in xs]
        ax.plot(np.array(xs) + offset, med, color=color, linewidth=1)
    ax.set_yscale("log")
    ax.axhline(ERROR_FLOOR, color="black", linewidth=0.5, linestyle=":")
    ax.set_ylim(ERROR_FLOOR / 3, None)
    cfg = result.config
    kills = cfg.stragglers.kind == "kills"
    ax.set_xlabel(
        "tasks on a killed worker"
        if kills
        else "stragglers in the job (tasks with an injected delay >= "
        f"{cfg.stragglers.straggler_threshold(cfg.task.base_duration):g} s)"
    )
    ax.set_ylabel(f"relative error (exact = 0 drawn at {ERROR_FLOOR:g})")
    ax.set_title(f"Decoded-output error vs stragglers, K={K}, N={N} (lines: medians)", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return fig


def write_plots(result: BenchResult, out_dir: str | Path) -> list[Path]:
    """Write per cell ``latency_cdf_K{K}_N{N}.png`` and ``error_vs_stragglers_K{K}_N{N}.png``.

    Parameters
    ----------
    result : BenchResult
    out_dir : str or Path
        Created if missing.

    Returns
    -------
    list of Path
        The files written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for K, N in result.cells:
        for name, make in (("latency_cdf", _cdf_figure), ("error_vs_stragglers", _error_figure)):
            path = out / f"{name}_K{K}_N{N}.png"
            make(result, K, N).savefig(path, dpi=110)
            paths.append(path)
    return paths


def write_outputs(result: BenchResult, out_dir: str | Path) -> dict[str, Any]:
    """Write ``bench.json``, ``bench.md`` and the PNG figures into ``out_dir``.

    Parameters
    ----------
    result : BenchResult
    out_dir : str or Path

    Returns
    -------
    dict
        ``{"json": Path, "markdown": Path, "plots": [Path, ...]}``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md = out / "bench.md"
    md.write_text(markdown_report(result))
    return {
        "json": write_json(result, out / "bench.json"),
        "markdown": md,
        "plots": write_plots(result, out),
    }
