"""Type aliases of the coding layer (static typing only; nothing here runs at decode time)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias

import numpy as np
from numpy.typing import NDArray

__all__ = ["Blocks", "CodeConfig", "FloatArray", "IndexArray", "IntArray", "Returned"]

#: Points, encoding / decoding / interpolation matrices, norms and estimates: float64.
FloatArray: TypeAlias = NDArray[np.float64]
#: Integer positions (into the worker points, or into the returned results).
IntArray: TypeAlias = NDArray[np.integer[Any]]
#: Validated worker indices (:func:`dask_bacc.codes.base.as_returned`).
IndexArray: TypeAlias = NDArray[np.intp]
#: Worker indices as a caller gives them: ``returned[l]`` is the worker of ``results[l]``.
Returned: TypeAlias = Sequence[int] | IntArray
#: Data blocks or f's results, stacked along axis 0 or one array each. Their dtype is the
#: data's or whatever f returned: only known at run time (encode/decode check it).
Blocks: TypeAlias = NDArray[Any] | Sequence[NDArray[Any]]
#: :meth:`Code.get_config`: the registry name and the constructor's keyword arguments,
#: JSON-serialisable. Not a TypedDict: codes registered by users add their own options.
CodeConfig: TypeAlias = dict[str, object]
