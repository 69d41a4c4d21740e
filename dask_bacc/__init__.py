"""dask-bacc: straggler-resistant map over chunks on Dask with coded computing."""

from . import config  # registers the bacc: defaults with dask.config
from .exceptions import InsufficientResults, InvalidResult, RewriteError
from .runtime import (
    CodedJob,
    FirstK,
    Fraction,
    JobReport,
    WaitPolicy,
    coded,
    map_coded,
    submit_coded,
)

__version__ = "0.1.0"

__all__ = [
    "CodedJob",
    "FirstK",
    "Fraction",
    "InsufficientResults",
    "InvalidResult",
    "JobReport",
    "RewriteError",
    "WaitPolicy",
    "__version__",
    "coded",
    "config",
    "map_coded",
    "submit_coded",
]
