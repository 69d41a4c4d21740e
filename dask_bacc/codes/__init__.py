"""Coding schemes for coded computing: pure NumPy, no dask (see docs/design.md, "Layers").

Every code maps K data blocks to N coded blocks with an (N, K) encoding matrix and decodes
K output blocks from any decodable subset F of coded results with a ``(K, |F|)`` decoding
matrix.
"""

from ..exceptions import InsufficientResults
from .base import Code, InterpolatingCode
from .berrut import BerrutCode
from .bspline import BSplineCode
from .estimate import ErrorEstimate, count_sketch, estimate_error
from .lagrange import LagrangeCode
from .points import chebyshev_first, chebyshev_second, systematic_points
from .registry import code_class, get_code, register_code, registered_codes
from .repetition import RepetitionCode, Uncoded
from .robust import Screening, detect_inconsistent, locate_corrupted, robust_decode
from .spline import SplineCode

__all__ = [
    "BSplineCode",
    "BerrutCode",
    "Code",
    "ErrorEstimate",
    "InsufficientResults",
    "InterpolatingCode",
    "LagrangeCode",
    "RepetitionCode",
    "Screening",
    "SplineCode",
    "Uncoded",
    "chebyshev_first",
    "chebyshev_second",
    "code_class",
    "count_sketch",
    "detect_inconsistent",
    "estimate_error",
    "get_code",
    "locate_corrupted",
    "register_code",
    "registered_codes",
    "robust_decode",
    "systematic_points",
]
