"""dask-bacc: straggler-resistant map over chunks on Dask with coded computing."""

from . import config  # registers the bacc: defaults with dask.config
from .collections import xarray as _xarray  # noqa: F401  (registers the .bacc accessor)
from .exceptions import (
    ApproximationWarning,
    InexactDecode,
    InsufficientResults,
    InvalidResult,
    RewriteError,
    SuspectResultsWarning,
)
from .runtime import (
    CodedJob,
    FirstK,
    Fraction,
    JobReport,
    UntilError,
    WaitPolicy,
    coded,
    map_coded,
    report_of,
    rewrite_reports,
    submit_coded,
    until,
)
from .runtime.coded_data import CodedData, encode
from .runtime.worker import cancelled

__version__ = "0.1.0"

__all__ = [
    "ApproximationWarning",
    "CodedData",
    "CodedJob",
    "FirstK",
    "Fraction",
    "InexactDecode",
    "InsufficientResults",
    "InvalidResult",
    "JobReport",
    "RewriteError",
    "SuspectResultsWarning",
    "UntilError",
    "WaitPolicy",
    "__version__",
    "cancelled",
    "coded",
    "config",
    "encode",
    "map_coded",
    "report_of",
    "rewrite_reports",
    "submit_coded",
    "until",
]
