"""The coded job on Dask distributed: placement, submit, wait policies, cancel, decode, report."""

from .driver import coded, report_of, rewrite_reports
from .job import CodedJob
from .report import JobReport
from .submit import map_coded, submit_coded
from .wait import ErrorTarget, FirstK, Fraction, WaitPolicy, until

__all__ = [
    "CodedJob",
    "ErrorTarget",
    "FirstK",
    "Fraction",
    "JobReport",
    "WaitPolicy",
    "coded",
    "map_coded",
    "report_of",
    "rewrite_reports",
    "submit_coded",
    "until",
]
