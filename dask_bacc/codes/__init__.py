"""Coding schemes for coded computing: pure NumPy, no dask (see DESIGN.md §2).

Every code maps K data blocks to N coded blocks with an (N, K) encoding matrix and decodes
K output blocks from any decodable subset of coded results with a (K, |F|) decoding matrix.
"""

from ..exceptions import InsufficientResults
from .base import Code
from .berrut import BerrutCode
from .lagrange import LagrangeCode
from .points import chebyshev_first, chebyshev_second, systematic_points
from .registry import code_class, get_code, register_code, registered_codes
from .repetition import RepetitionCode, Uncoded

__all__ = [
    "BerrutCode",
    "Code",
    "InsufficientResults",
    "LagrangeCode",
    "RepetitionCode",
    "Uncoded",
    "chebyshev_first",
    "chebyshev_second",
    "code_class",
    "get_code",
    "register_code",
    "registered_codes",
    "systematic_points",
]
