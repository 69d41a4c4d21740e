"""Benchmarks of dask-bacc against plain Dask, speculation and the other codes.

``dask bacc bench`` (see :mod:`dask_bacc.bench.cli`) and ``benchmarks/bench.py`` run
:func:`run_bench`; :mod:`dask_bacc.bench.report` turns its :class:`BenchResult` into a
markdown table, a JSON file and PNG figures.
"""

from .harness import (
    STRAGGLER_KINDS,
    STRATEGIES,
    TASK_FUNCS,
    BenchConfig,
    BenchResult,
    JobRecord,
    StragglerSpec,
    TaskFunction,
    TaskModel,
    run_bench,
    summarize,
)
from .report import markdown_report, write_json, write_outputs, write_plots

__all__ = [
    "STRAGGLER_KINDS",
    "STRATEGIES",
    "TASK_FUNCS",
    "BenchConfig",
    "BenchResult",
    "JobRecord",
    "StragglerSpec",
    "TaskFunction",
    "TaskModel",
    "markdown_report",
    "run_bench",
    "summarize",
    "write_json",
    "write_outputs",
    "write_plots",
]
