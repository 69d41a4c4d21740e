"""The coded job on Dask distributed: placement, submit, wait policies, cancel, decode, report.

The public names below are imported on first access, so that importing one module of
this package (``dask_bacc.runtime.keys``, say, from the diagnostics) does not import the
whole job machinery.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import attach

if TYPE_CHECKING:
    from .driver import coded, report_of, rewrite_reports
    from .job import CodedJob
    from .redundant import RedundantJob
    from .report import JobReport
    from .submit import map_coded, submit_coded
    from .wait import ErrorTarget, FirstK, Fraction, WaitPolicy, until

__all__ = [
    "CodedJob",
    "ErrorTarget",
    "FirstK",
    "Fraction",
    "JobReport",
    "RedundantJob",
    "WaitPolicy",
    "coded",
    "map_coded",
    "report_of",
    "rewrite_reports",
    "submit_coded",
    "until",
]

__getattr__, __dir__ = attach(
    __name__,
    {
        ".driver": ("coded", "report_of", "rewrite_reports"),
        ".job": ("CodedJob",),
        ".redundant": ("RedundantJob",),
        ".report": ("JobReport",),
        ".submit": ("map_coded", "submit_coded"),
        ".wait": ("ErrorTarget", "FirstK", "Fraction", "WaitPolicy", "until"),
    },
)
