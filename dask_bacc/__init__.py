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
    ErrorTarget,
    FirstK,
    Fraction,
    JobReport,
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
    "ErrorTarget",
    "FirstK",
    "Fraction",
    "InexactDecode",
    "InsufficientResults",
    "InvalidResult",
    "JobReport",
    "RewriteError",
    "SuspectResultsWarning",
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


def __getattr__(name: str) -> object:
    # UntilError (0.1) was renamed ErrorTarget: a wait policy, not an exception
    if name == "UntilError":
        import warnings

        warnings.warn(
            "dask_bacc.UntilError was renamed dask_bacc.ErrorTarget (a wait policy, not an "
            "exception); the old name will be removed",
            FutureWarning,
            stacklevel=2,
        )
        return ErrorTarget
    raise AttributeError(f"module 'dask_bacc' has no attribute {name!r}")
