"""dask-bacc: straggler-resistant map over chunks on Dask with coded computing.

Importing the package is cheap: it registers the ``bacc:`` settings with ``dask.config``
and the ``.bacc`` accessor on xarray objects; the runtime (distributed, the collection
adapters, the diagnostics) is imported on first use of one of its names. Without dask
installed, :mod:`dask_bacc.codes` (pure NumPy) still imports and works.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._lazy import attach, when_imported
from .exceptions import (
    ApproximationWarning,
    ClientClosedError,
    InexactDecode,
    InsufficientResults,
    InvalidResult,
    RewriteError,
    SuspectResultsWarning,
    UnknownCodeError,
)

# the .bacc accessor, registered once xarray is imported (now or later): importing
# dask_bacc must not import xarray and pandas, e.g. in a worker's event loop when the
# scheduler sends it dask-bacc's worker plugin
when_imported("xarray", lambda: importlib.import_module("dask_bacc.accessor"))

try:
    from . import config  # registers the bacc: defaults with dask.config
except ModuleNotFoundError as exc:  # pragma: no cover - exercised in a subprocess test
    if exc.name not in ("dask", "yaml"):
        raise

if TYPE_CHECKING:
    from .collections.select import codeable, where
    from .runtime import (
        CodedJob,
        ErrorTarget,
        FirstK,
        Fraction,
        JobReport,
        RedundantJob,
        WaitPolicy,
        coded,
        map_coded,
        report_of,
        rewrite_reports,
        submit_coded,
        until,
    )
    from .runtime.coded_data import CodedData, encode
    from .runtime.coding import CodingLayer, coding, last_reports
    from .runtime.worker import cancelled

__version__ = "0.1.0"

__all__ = [
    "ApproximationWarning",
    "ClientClosedError",
    "CodedData",
    "CodedJob",
    "CodingLayer",
    "ErrorTarget",
    "FirstK",
    "Fraction",
    "InexactDecode",
    "InsufficientResults",
    "InvalidResult",
    "JobReport",
    "RedundantJob",
    "RewriteError",
    "SuspectResultsWarning",
    "UnknownCodeError",
    "WaitPolicy",
    "__version__",
    "cancelled",
    "codeable",
    "coded",
    "coding",
    "config",
    "encode",
    "last_reports",
    "map_coded",
    "report_of",
    "rewrite_reports",
    "submit_coded",
    "until",
    "where",
]


_lazy_getattr, __dir__ = attach(
    __name__,
    {
        ".runtime": (
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
        ),
        ".collections.select": ("codeable", "where"),
        ".runtime.coded_data": ("CodedData", "encode"),
        ".runtime.coding": ("CodingLayer", "coding", "last_reports"),
        ".runtime.worker": ("cancelled",),
    },
)


def __getattr__(name: str) -> Any:
    # UntilError (0.1) was renamed ErrorTarget: a wait policy, not an exception
    if name == "UntilError":
        import warnings

        warnings.warn(
            "dask_bacc.UntilError was renamed dask_bacc.ErrorTarget (a wait policy, not an "
            "exception); the old name will be removed",
            FutureWarning,
            stacklevel=2,
        )
        name = "ErrorTarget"
    return _lazy_getattr(name)
