"""Dask's and xarray's own test cases, run again through ``coded()``: every difference.

Run it with::

    python benchmarks/upstream_cases.py --baseline            # every suite, ~8 min, 2 cores
    python benchmarks/upstream_cases.py --suite overlap --suite rolling
    python benchmarks/upstream_cases.py --match source --json /tmp/cases.json

(from a checkout whose ``dask_bacc`` is installed in the interpreter, e.g. ``.venv/bin/python``).
No network access is needed: the test files are the ones installed with dask (found from
``dask.__file__``) and xarray (``xarray/tests``; a suite whose files are absent is skipped).

What it does
------------
It runs the selected upstream test files with pytest, in this process (with an empty
``pytest.ini`` of its own, not the checkout's settings), next to one in-process
``LocalCluster(n_workers=4, threads_per_worker=1, processes=False)`` and its client. The
client is the default client only while a case computes (the tests keep their own
schedulers; the driver task's ``get_client()`` on an in-process worker takes it, instead of
making a client of its own that would become the process's default). The assertion helpers
the tests call are wrapped: ``dask.array.utils.assert_eq``, ``dask.dataframe.utils.assert_eq``
and xarray's ``assert_identical``/``assert_equal``/``assert_allclose`` (``xarray.testing``
and ``xarray.tests``), both where they are defined and where the test modules imported
them. Whenever one of their first two arguments is a lazy dask collection (a *case*),
before the original assertion runs, the wrapper

1. computes the collection with the client (``client.compute(x).result(timeout=...)``):
   the plain result;
2. for each code of ``--code`` (default ``repetition`` and ``speculative``; also ``hedged``
   and, below, the approximate codes), builds
   ``dask_bacc.coded(x, code=code)``, compares its lazy metadata with ``x``'s (type;
   arrays: dtype, chunks, meta type; frames: meta, divisions; xarray: per variable dims,
   dtype, shape, chunks and attrs, plus attrs and name), computes it with the client and
   compares the result with the plain one exactly: NumPy: type, dtype, shape, values (NaN
   equal to NaN) and the bytes; masked arrays: the mask, the data under no mask and the
   fill value; pandas: ``assert_frame_equal`` / ``assert_series_equal`` /
   ``assert_index_equal`` with ``check_exact=True`` (flags too) and ``attrs``; xarray:
   ``identical``, then each variable's dims, attrs, data type and values as NumPy above,
   and the index types; tuples, lists, dicts and scalars element by element.

``--code systematic-spline`` (``bspline``, ``spline``, ``berrut``, ``systematic-berrut``):
the codes that mix blocks and decode an estimate, through ``coded()`` (built with the
client as the default one, so that it plans on its workers), compared by the documented
rule for approximate decodes instead of exactly:

- the structure as above: type; arrays: chunks and meta type; frames: meta, divisions,
  index, columns, names, flags and attrs; xarray: dims, shapes, chunks, names, attrs,
  coordinates (exactly: they are labels) and indexes; except that a numeric dtype (bool,
  int, uint, float) may become float64, as ``coded()``'s docstring says (listed as
  "float64 as documented" in the row's ``notes``, not as a difference). Non-numeric values
  (object, string, categorical, datetime columns...) must be equal exactly;
- the numeric values: NaN and inf positions must match (NaN equal to NaN), and the
  relative error ``||coded - plain|| / ||plain||`` (Frobenius, over every numeric value
  of the result, NaN and inf left out) must be at most ``2 x report.error_estimate``
  (``dask_bacc.report_of(z, client)``; a None estimate counts as 0) plus rounding,
  ``64 x`` the machine epsilon of plain's least precise float dtype (float64's for
  integers and booleans: a float32 map decoded in float64 differs by float32 rounding).
  When plain's norm is 0 (all zeros), the absolute error ``||coded||`` is held to the
  same bound, as if ``||f(X)||`` were 1: the decode of an all-zero answer must be zero
  up to the estimate (an estimate relative to a zero norm has nothing else to scale by).

Outcomes under these codes: ``approximate`` (within the rule), ``identical`` (within it
with no difference at all: same dtype, same values), ``warned`` (the job's
``report.warnings`` holds an ``ApproximationWarning`` whose estimate is above
``bacc.warn-error`` or whose ``until(error=...)`` target was not met, or that says the
error could not be estimated, or the ill-conditioned decode's warning: acceptable, whether
or not the values are within the rule; the row's ``within_rule`` says which), ``refused``
(``dask_bacc.RewriteError`` from ``coded()`` or the compute, or a ``ValueError`` /
``TypeError`` raised by a ``raise`` statement of dask_bacc itself, naming a cause: the full
message is kept, and the summary groups them by message with counts per code for review),
``different`` (a structural difference, a non-numeric value, or values beyond the rule
with no such warning: a silent wrong answer), ``crashed`` (any other exception) and
``hung``. Each decoded row also keeps ``error``, ``estimate``, ``bound``,
``rounding``, ``estimate_method``, ``trigger``, ``K``, ``N``, ``used`` and ``warnings``.

``--code coding-repetition`` (or ``coding-speculative``) checks ``dask_bacc.coding()``
instead (issue 30): the collection itself, unchanged, computed with ``dask.compute``
inside ``with dask_bacc.coding(code=..., only="all"):`` in a thread of its own, and
compared with the plain result the same way (no lazy metadata to compare: it is the
same collection).

The wrapper never raises into the test: the test goes on with the original assertion. A
failure of this script itself (a comparison that raised) is listed as a harness error.

Outcomes, per case and code (the exact codes and ``coding-*``): ``identical``;
``different`` (what differs); ``crashed`` (``coded()`` or the compute raised where plain
did not: exception type and message, and where it and its causes were raised; a
``RewriteError`` too); ``hung`` (no result within ``--timeout`` seconds; the compute is
then cancelled). When the plain compute raises too, the case is ``identical`` when the
coded one raises the same exception type and message, else ``different`` (under the
approximate codes a refusal is ``refused`` even then). The summary counts every outcome
per code, then the refusals grouped by message, then every ``different``, ``crashed`` and
``hung`` case. The exit status is 0 when no counted case is ``different``, ``crashed`` or
``hung`` (``approximate``, ``warned`` and ``refused`` are fine) and the script itself did
not fail, else 1. Only the cases of tests that pass count: that pass without the wrappers
with ``--baseline`` (which runs the tests once without them first, and lists the tests
whose outcome the wrappers changed), else that pass in this run. A collection seen twice
in one test is checked once.

Suites (``--suite``; default all): ``array-core`` (``dask/array/tests/test_array_core.py``),
``array-map-blocks`` (``test_map_blocks.py``), ``overlap`` (``test_overlap.py``),
``gufunc`` (``test_gufunc.py``), ``dataframe`` (``dask/dataframe/tests/test_dataframe.py``),
``rolling`` (``test_rolling.py``), ``xarray`` (``xarray/tests/test_dask.py``),
``xarray-apply-ufunc`` (``xarray/tests/test_computation.py``). ``--match name`` (the
default) keeps the tests whose name holds one of ``map_blocks``, ``map_partitions``,
``map_overlap`` (as ``-k "map_blocks or map_partitions or map_overlap"``; ``gufunc`` for
``gufunc``, ``dask`` for ``xarray-apply-ufunc``); ``--match source`` the tests whose source
holds one (more tests, many of them computing other operations on a mapped collection);
``--match all`` every test of the files. ``-k`` narrows further; arguments after ``--`` go
to pytest.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import inspect
import json
import math
import os
import re
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

#: the codes a case can be run with (``--code``), and those it is run with by default
CODES = ("repetition", "speculative", "hedged")
DEFAULT_CODES = ("repetition", "speculative")
#: the codes that mix blocks and decode an estimate (through ``coded()``): compared with
#: the rule for approximate decodes (module docstring), not exactly
APPROX_CODES = ("systematic-spline", "bspline", "spline", "berrut", "systematic-berrut")
#: ``--code coding-<code>``: the collection computed unchanged with ``dask.compute``
#: inside ``with dask_bacc.coding(code=<code>, only="all"):`` (issue 30), not ``coded()``
CODING_CODES = ("coding-repetition", "coding-speculative", "coding-hedged")

#: the words a selected test's name (``--match name``) or source (``source``) holds
WORDS = ("map_blocks", "map_partitions", "map_overlap")

#: suite -> (package, test file inside it, the words its tests are selected by)
SUITES = {
    "array-core": ("dask", "array/tests/test_array_core.py", WORDS),
    "array-map-blocks": ("dask", "array/tests/test_map_blocks.py", WORDS),
    "overlap": ("dask", "array/tests/test_overlap.py", WORDS),
    "gufunc": ("dask", "array/tests/test_gufunc.py", ("gufunc",)),
    "dataframe": ("dask", "dataframe/tests/test_dataframe.py", WORDS),
    "rolling": ("dask", "dataframe/tests/test_rolling.py", WORDS),
    "xarray": ("xarray", "tests/test_dask.py", WORDS),
    "xarray-apply-ufunc": ("xarray", "tests/test_computation.py", ("dask",)),
}

#: (module, name) of the assertion helpers that are wrapped
HELPERS = (
    ("dask.array.utils", "assert_eq"),
    ("dask.dataframe.utils", "assert_eq"),
    ("xarray.testing", "assert_identical"),
    ("xarray.testing", "assert_equal"),
    ("xarray.testing", "assert_allclose"),
    ("xarray.tests", "assert_identical"),
    ("xarray.tests", "assert_equal"),
    ("xarray.tests", "assert_allclose"),
)

OUTCOMES = ("identical", "approximate", "warned", "refused", "different", "crashed", "hung")
#: the outcomes that fail a run (exit status 1)
FAILING = ("different", "crashed", "hung")
#: an approximate decode's relative error may be this many times its job's own
#: ``report.error_estimate`` ...
ESTIMATE_FACTOR = 2.0
#: ... plus rounding: this many machine epsilons of plain's least precise float dtype
#: (float64's for integers and booleans)
ROUNDING_EPS = 64


# -- comparing ------------------------------------------------------------------------------
def _fmt(x: float | None) -> str:
    return "None" if x is None else f"{x:.3g}"


def _short(exc: BaseException, limit: int = 300) -> str:
    text = f"{type(exc).__name__}: {exc}".replace("\n", " | ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _tail(exc: BaseException, lines: int = 6) -> list[str]:
    """Where ``exc`` and its causes were raised: per exception (the innermost cause first),
    its message and its last frame in dask_bacc (else its last frame)."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and seen not in chain and len(chain) < 4:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    out = []
    for e in reversed(chain):
        frames = traceback.extract_tb(e.__traceback__)
        mine = [f for f in frames if "dask_bacc" in f.filename] or frames[-1:]
        where = "".join(
            f" at {f.filename.split('site-packages/')[-1].split('/main/')[-1]}:{f.lineno} {f.name}"
            for f in mine[-1:]
        )
        out.append(f"{_short(e, 200)}{where}")
    return out[-lines:]


def _numpy_diff(a: Any, b: Any, where: str) -> list[str]:
    import numpy as np

    out: list[str] = []
    if a.dtype != b.dtype:
        out.append(f"{where}dtype {a.dtype} != {b.dtype}")
    if a.shape != b.shape:
        return [*out, f"{where}shape {a.shape} != {b.shape}"]
    if isinstance(a, np.ma.MaskedArray):
        ma, mb = np.ma.getmaskarray(a), np.ma.getmaskarray(b)
        if not np.array_equal(ma, mb):
            out.append(f"{where}mask differs at {int((ma != mb).sum())} positions")
            return out
        try:
            if a.fill_value != b.fill_value:
                out.append(f"{where}fill_value {a.fill_value!r} != {b.fill_value!r}")
        except (TypeError, ValueError):
            pass
        a, b = np.asarray(a.data)[~ma], np.asarray(b.data)[~mb]
    try:
        np.testing.assert_array_equal(a, b, strict=True)
    except AssertionError as exc:
        msg = " ".join(str(exc).split())
        return [*out, f"{where}values differ: {msg[:300]}"]
    except Exception as exc:  # objects whose == is not elementwise
        if not all(_same_scalar(x, y) for x, y in zip(a.ravel(), b.ravel(), strict=True)):
            return [*out, f"{where}values differ ({_short(exc, 120)})"]
    if a.dtype == b.dtype and a.dtype.kind not in "OV" and not out:
        if np.ascontiguousarray(a).tobytes() != np.ascontiguousarray(b).tobytes():
            out.append(f"{where}equal values but different bytes (e.g. -0.0 / NaN payload)")
    return out


def _same_scalar(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    try:
        if a == b:
            return True
    except Exception:
        return a is b
    try:
        return bool(math.isnan(a) and math.isnan(b))
    except (TypeError, ValueError):
        return a is b or (a != a and b != b)


def value_diff(a: Any, b: Any, where: str = "") -> list[str]:
    """How computed ``b`` (coded) differs from ``a`` (plain): empty when identical."""
    import numpy as np
    import pandas as pd

    if type(a) is not type(b):
        return [f"{where}type {type(a).__qualname__} != {type(b).__qualname__}"]
    if isinstance(a, np.ndarray):
        return _numpy_diff(a, b, where)
    if isinstance(a, (pd.DataFrame, pd.Series, pd.Index)):
        try:
            if isinstance(a, pd.DataFrame):
                pd.testing.assert_frame_equal(a, b, check_exact=True, check_flags=True)
            elif isinstance(a, pd.Series):
                pd.testing.assert_series_equal(a, b, check_exact=True, check_flags=True)
            else:
                pd.testing.assert_index_equal(a, b, exact=True, check_exact=True)
        except AssertionError as exc:
            return [f"{where}{' '.join(str(exc).split())[:400]}"]
        if not isinstance(a, pd.Index) and a.attrs != b.attrs:
            return [f"{where}attrs {a.attrs!r} != {b.attrs!r}"]
        return []
    xr = sys.modules.get("xarray")
    if xr is not None and isinstance(a, (xr.DataArray, xr.Dataset, xr.Variable)):
        return _xarray_diff(a, b, where)
    if isinstance(a, (tuple, list)):
        if len(a) != len(b):
            return [f"{where}length {len(a)} != {len(b)}"]
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in value_diff(x, y, f"{where}[{i}] ")
        ]
    if isinstance(a, dict):
        if list(a) != list(b):
            return [f"{where}keys {list(a)} != {list(b)}"]
        return [d for k in a for d in value_diff(a[k], b[k], f"{where}[{k!r}] ")]
    if isinstance(a, np.generic):
        return _numpy_diff(np.asarray(a), np.asarray(b), where)
    if not _same_scalar(a, b):
        return [f"{where}value {a!r} != {b!r}"]
    return []


def _xarray_diff(a: Any, b: Any, where: str) -> list[str]:
    import xarray as xr

    out: list[str] = []
    if not a.identical(b):
        out.append(f"{where}not identical (xarray)")
    if isinstance(a, xr.Variable):
        return out + _numpy_diff(a.values, b.values, f"{where}values ")
    if isinstance(a, xr.DataArray) and a.name != b.name:
        out.append(f"{where}name {a.name!r} != {b.name!r}")
    va, vb = _variables(a), _variables(b)
    if list(va) != list(vb):
        return [*out, f"{where}variables {list(va)} != {list(vb)}"]
    for name in va:
        x, y = va[name], vb[name]
        if x.dims != y.dims:
            out.append(f"{where}{name}: dims {x.dims} != {y.dims}")
        if x.attrs != y.attrs:
            out.append(f"{where}{name}: attrs {x.attrs!r} != {y.attrs!r}")
        if type(x._data) is not type(y._data):
            out.append(
                f"{where}{name}: data type {type(x._data).__name__} != {type(y._data).__name__}"
            )
        out += _numpy_diff(x.values, y.values, f"{where}{name}: ")
    if a.attrs != b.attrs:
        out.append(f"{where}attrs {a.attrs!r} != {b.attrs!r}")
    ia = {k: type(v).__name__ for k, v in a.xindexes.items()}
    ib = {k: type(v).__name__ for k, v in b.xindexes.items()}
    if ia != ib:
        out.append(f"{where}indexes {ia} != {ib}")
    return out


def _variables(obj: Any) -> dict[Any, Any]:
    """An xarray object's variables by name (a DataArray's own data as ``"<data>"``)."""
    import xarray as xr

    if isinstance(obj, xr.DataArray):
        return {**obj.coords.variables, "<data>": obj.variable}
    return dict(obj.variables)


def _chunks_equal(a: Any, b: Any) -> bool:
    return repr(a) == repr(b)  # nan chunks compare equal this way


def lazy_diff(x: Any, z: Any, notes: list[str] | None = None) -> list[str]:
    """How the coded collection ``z`` differs from ``x`` before computing. With ``notes``
    (an approximate code), a numeric dtype that became float64 is noted there, not a
    difference, and a frame's meta is compared as :func:`approx_diff` does."""
    import dask.array as da

    if type(x) is not type(z):
        return [f"lazy: type {type(x).__qualname__} != {type(z).__qualname__}"]
    out: list[str] = []
    if isinstance(x, da.Array):
        if notes is not None:
            out += _dtype_diff(x.dtype, z.dtype, "lazy: ", notes)
        elif x.dtype != z.dtype:
            out.append(f"lazy: dtype {x.dtype} != {z.dtype}")
        if not _chunks_equal(x.chunks, z.chunks):
            out.append(f"lazy: chunks {x.chunks} != {z.chunks}")
        if type(x._meta) is not type(z._meta):
            out.append(f"lazy: meta type {type(x._meta).__name__} != {type(z._meta).__name__}")
        return out
    dd = sys.modules.get("dask.dataframe")
    if dd is not None and isinstance(x, (dd.DataFrame, dd.Series, dd.Index, dd.Scalar)):
        if notes is not None:
            meta = Approx()
            approx_diff(x._meta, z._meta, meta)
            out += [f"lazy meta: {d}" for d in meta.diffs]
            notes += [f"lazy meta: {n}" for n in meta.notes]
        else:
            out += [f"lazy meta: {d}" for d in value_diff(x._meta, z._meta)]
        if not isinstance(x, dd.Scalar) and not _chunks_equal(x.divisions, z.divisions):
            out.append(f"lazy: divisions {x.divisions} != {z.divisions}")
        return out
    xr = sys.modules.get("xarray")
    if xr is not None and isinstance(x, (xr.DataArray, xr.Dataset)):
        vx, vz = _variables(x), _variables(z)
        if isinstance(x, xr.DataArray) and x.name != z.name:
            out.append(f"lazy: name {x.name!r} != {z.name!r}")
        if list(vx) != list(vz):
            return [*out, f"lazy: variables {list(vx)} != {list(vz)}"]
        for name in vx:
            a, b = vx[name], vz[name]
            if notes is not None:
                if (a.dims, a.shape) != (b.dims, b.shape):
                    out.append(f"lazy: {name}: {a.dims} {a.shape} != {b.dims} {b.shape}")
                out += _dtype_diff(a.dtype, b.dtype, f"lazy: {name}: ", notes)
            elif (a.dims, a.dtype, a.shape) != (b.dims, b.dtype, b.shape):
                out.append(
                    f"lazy: {name}: {a.dims} {a.dtype} {a.shape} != {b.dims} {b.dtype} {b.shape}"
                )
            if not _chunks_equal(a.chunks, b.chunks):
                out.append(f"lazy: {name}: chunks {a.chunks} != {b.chunks}")
            if a.attrs != b.attrs:
                out.append(f"lazy: {name}: attrs differ")
        if x.attrs != z.attrs:
            out.append(f"lazy: attrs {x.attrs!r} != {z.attrs!r}")
    return out


# -- comparing an approximate decode --------------------------------------------------------
class Approx:
    """What :func:`approx_diff` found: the structural differences and non-numeric values
    that differ (``diffs``: never acceptable), the numeric values whose NaN or inf
    positions differ (``value_diffs``: acceptable only when the job warned), what is so
    as documented (``notes``: a numeric dtype that became float64), and the sums over
    every numeric value for the Frobenius norms (NaN and inf left out: their positions
    must match)."""

    def __init__(self) -> None:
        self.diffs: list[str] = []
        self.value_diffs: list[str] = []
        self.notes: list[str] = []
        self.sq_err = 0.0
        self.sq_plain = 0.0
        self.values = 0
        #: the largest absolute difference and where it is
        self.worst = (0.0, "")
        #: the machine epsilon of plain's least precise float dtype
        self.eps = float(_finfo_eps("float64"))

    def error(self) -> float:
        """The relative error ``||coded - plain|| / ||plain||`` over every numeric value;
        the absolute error ``||coded - plain||`` when plain's norm is 0."""
        if self.sq_plain > 0:
            return math.sqrt(self.sq_err) / math.sqrt(self.sq_plain)
        return math.sqrt(self.sq_err)


def _finfo_eps(dtype: Any) -> float:
    import numpy as np

    return float(np.finfo(dtype).eps)


def _widens(a: Any, b: Any) -> bool:
    """Whether plain's dtype ``a`` becoming ``b`` is the documented float64 of an
    approximate decode: ``b`` float64, ``a`` numeric (bool, int, uint, float)."""
    import numpy as np
    import pandas as pd

    if not (isinstance(b, np.dtype) and b == np.float64):
        return False
    if isinstance(a, np.dtype):
        return a.kind in "biuf"
    return bool(pd.api.types.is_numeric_dtype(a)) and not pd.api.types.is_complex_dtype(a)


def _dtype_diff(a: Any, b: Any, where: str, notes: list[str]) -> list[str]:
    """[] when dtype ``b`` (coded) is ``a`` (plain) or its documented float64 (noted)."""
    if a == b:
        return []
    if _widens(a, b):
        notes.append(f"{where}{a} -> float64 as documented")
        return []
    return [f"{where}dtype {a} != {b}"]


def _is_numeric(dtype: Any) -> bool:
    import numpy as np
    import pandas as pd

    if isinstance(dtype, np.dtype):
        return dtype.kind in "biufc"
    return bool(pd.api.types.is_numeric_dtype(dtype))


def _measure(a: Any, b: Any, acc: Approx, where: str) -> None:
    """Add numeric arrays ``a`` (plain) and ``b`` (coded), same shape, to ``acc``'s norms;
    NaN positions must match (NaN equal to NaN), and so must the infinities."""
    import numpy as np

    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind in "fc":
        acc.eps = max(acc.eps, _finfo_eps(a.dtype))
    as_type = np.complex128 if "c" in (a.dtype.kind, b.dtype.kind) else np.float64
    fa, fb = a.astype(as_type), b.astype(as_type)
    na, nb = np.isnan(fa), np.isnan(fb)
    if (na != nb).any():
        acc.value_diffs.append(
            f"{where}NaN positions differ: {int((na & ~nb).sum())} NaN only in plain, "
            f"{int((nb & ~na).sum())} only in coded"
        )
    ia, ib = np.isinf(fa), np.isinf(fb)
    if (ia != ib).any() or (fa[ia & ib] != fb[ia & ib]).any():
        acc.value_diffs.append(f"{where}infinities differ at {int((ia != ib).sum())} positions")
    finite = ~(na | nb | ia | ib)
    d = np.abs(fa[finite] - fb[finite])
    p = np.abs(fa[finite])
    acc.sq_err += float(np.sum(d * d))
    acc.sq_plain += float(np.sum(p * p))
    acc.values += int(finite.sum())
    if d.size and float(d.max()) > acc.worst[0]:
        flat = int(np.flatnonzero(finite)[int(d.argmax())])
        pos = np.unravel_index(flat, fa.shape) if fa.shape else ()
        acc.worst = (
            float(d.max()),
            f"{where}at {tuple(int(i) for i in pos)}: plain {fa[pos]!r}, coded {fb[pos]!r}",
        )


def _approx_numpy(a: Any, b: Any, acc: Approx, where: str) -> None:
    import numpy as np

    if a.shape != b.shape:
        acc.diffs.append(f"{where}shape {a.shape} != {b.shape}")
        return
    if isinstance(a, np.ma.MaskedArray):
        ma, mb = np.ma.getmaskarray(a), np.ma.getmaskarray(b)
        if not np.array_equal(ma, mb):
            acc.diffs.append(f"{where}mask differs at {int((ma != mb).sum())} positions")
            return
        a, b = np.asarray(a.data)[~ma], np.asarray(b.data)[~mb]
    numeric = _is_numeric(a.dtype) and _is_numeric(b.dtype)
    dtype = _dtype_diff(a.dtype, b.dtype, where, acc.notes)
    if dtype or not numeric:  # not numeric: the values exactly
        acc.diffs += _numpy_diff(a, b, where)
        return
    _measure(a, b, acc, where)


def _pandas_exact(check: Any, acc: Approx, where: str) -> bool:
    try:
        check()
    except AssertionError as exc:
        acc.diffs.append(f"{where}{' '.join(str(exc).split())[:400]}")
        return False
    return True


def _approx_pandas(a: Any, b: Any, acc: Approx, where: str) -> None:
    """Frames, series, indexes: the labels, names, flags and attrs exactly; each numeric
    column (dtype or float64) by value, the others exactly."""
    import functools

    import pandas as pd

    eq = functools.partial(pd.testing.assert_index_equal, exact=True, check_exact=True)
    if isinstance(a, pd.Index):  # labels
        _pandas_exact(lambda: eq(a, b), acc, where)
        return
    _pandas_exact(lambda: eq(a.index, b.index), acc, f"{where}index: ")
    if a.flags.allows_duplicate_labels != b.flags.allows_duplicate_labels:
        acc.diffs.append(f"{where}flags {a.flags} != {b.flags}")
    if a.attrs != b.attrs:
        acc.diffs.append(f"{where}attrs {a.attrs!r} != {b.attrs!r}")
    if isinstance(a, pd.DataFrame):
        if not _pandas_exact(lambda: eq(a.columns, b.columns), acc, f"{where}columns: "):
            return
        columns = [
            (f"{where}[{a.columns[i]!r}] ", a.iloc[:, i], b.iloc[:, i]) for i in range(a.shape[1])
        ]
    else:
        if not _same_scalar(a.name, b.name):
            acc.diffs.append(f"{where}name {a.name!r} != {b.name!r}")
        columns = [(where, a, b)]
    for w, sa, sb in columns:
        dtype = _dtype_diff(sa.dtype, sb.dtype, w, acc.notes)
        if dtype or not (_is_numeric(sa.dtype) and _is_numeric(sb.dtype)):
            _pandas_exact(
                lambda sa=sa, sb=sb: pd.testing.assert_series_equal(
                    sa, sb, check_exact=True, check_names=False, check_index=False
                ),
                acc,
                w,
            )
            continue
        _measure(_float_values(sa), _float_values(sb), acc, w)


def _float_values(s: Any) -> Any:
    """A numeric series' values as NumPy (a nullable dtype's NA as NaN)."""
    import numpy as np

    if isinstance(s.dtype, np.dtype):
        return s.to_numpy()
    return s.to_numpy(dtype="float64", na_value=np.nan)


def _approx_xarray(a: Any, b: Any, acc: Approx, where: str) -> None:
    """xarray: dims, names, attrs, coordinates and indexes exactly; the data variables
    (a DataArray's data) by value."""
    import xarray as xr

    if isinstance(a, xr.Variable):
        if a.dims != b.dims:
            acc.diffs.append(f"{where}dims {a.dims} != {b.dims}")
        if a.attrs != b.attrs:
            acc.diffs.append(f"{where}attrs {a.attrs!r} != {b.attrs!r}")
        _approx_numpy(a.values, b.values, acc, f"{where}values ")
        return
    if isinstance(a, xr.DataArray) and a.name != b.name:
        acc.diffs.append(f"{where}name {a.name!r} != {b.name!r}")
    va, vb = _variables(a), _variables(b)
    if list(va) != list(vb):
        acc.diffs.append(f"{where}variables {list(va)} != {list(vb)}")
        return
    for name in va:
        x, y = va[name], vb[name]
        if x.dims != y.dims:
            acc.diffs.append(f"{where}{name}: dims {x.dims} != {y.dims}")
        if x.attrs != y.attrs:
            acc.diffs.append(f"{where}{name}: attrs {x.attrs!r} != {y.attrs!r}")
        if type(x._data) is not type(y._data):
            acc.diffs.append(
                f"{where}{name}: data type {type(x._data).__name__} != {type(y._data).__name__}"
            )
        if name in a.coords:  # labels
            acc.diffs += _numpy_diff(x.values, y.values, f"{where}{name}: ")
        else:
            _approx_numpy(x.values, y.values, acc, f"{where}{name}: ")
    if a.attrs != b.attrs:
        acc.diffs.append(f"{where}attrs {a.attrs!r} != {b.attrs!r}")
    ia = {k: type(v).__name__ for k, v in a.xindexes.items()}
    ib = {k: type(v).__name__ for k, v in b.xindexes.items()}
    if ia != ib:
        acc.diffs.append(f"{where}indexes {ia} != {ib}")


def approx_diff(a: Any, b: Any, acc: Approx, where: str = "") -> None:
    """Compare computed ``b`` (an approximate decode) with ``a`` (plain) into ``acc``: the
    structure as :func:`value_diff` does, but a numeric dtype may be float64 and the
    numeric values go into the norms."""
    import numbers

    import numpy as np
    import pandas as pd

    scalars = (numbers.Number, np.generic)
    if isinstance(a, scalars) and isinstance(b, scalars) and not isinstance(a, (str, bytes)):
        _approx_numpy(np.asarray(a), np.asarray(b), acc, where)
        return
    if type(a) is not type(b):
        acc.diffs.append(f"{where}type {type(a).__qualname__} != {type(b).__qualname__}")
        return
    if isinstance(a, np.ndarray):
        _approx_numpy(a, b, acc, where)
        return
    if isinstance(a, (pd.DataFrame, pd.Series, pd.Index)):
        _approx_pandas(a, b, acc, where)
        return
    xr = sys.modules.get("xarray")
    if xr is not None and isinstance(a, (xr.DataArray, xr.Dataset, xr.Variable)):
        _approx_xarray(a, b, acc, where)
        return
    if isinstance(a, (tuple, list)):
        if len(a) != len(b):
            acc.diffs.append(f"{where}length {len(a)} != {len(b)}")
            return
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            approx_diff(x, y, acc, f"{where}[{i}] ")
        return
    if isinstance(a, dict):
        if list(a) != list(b):
            acc.diffs.append(f"{where}keys {list(a)} != {list(b)}")
            return
        for k in a:
            approx_diff(a[k], b[k], acc, f"{where}[{k!r}] ")
        return
    acc.diffs += value_diff(a, b, where)


def is_refusal(exc: BaseException) -> bool:
    """Whether ``exc`` is dask-bacc refusing the case on purpose: a ``RewriteError``, or a
    ``ValueError``/``TypeError`` raised by a ``raise`` statement of dask_bacc itself (not
    one raised inside ``f``, NumPy or Dask that went through it)."""
    import dask_bacc

    if isinstance(exc, dask_bacc.RewriteError):
        return True
    if not isinstance(exc, (ValueError, TypeError)):
        return False
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return False
    last = frames[-1]
    return "dask_bacc" in last.filename and (last.line or "").lstrip().startswith("raise")


def warned_by(warns: list[str]) -> list[str]:
    """The warnings of a job's report that excuse an approximate answer: an
    ``ApproximationWarning`` whose estimate is above ``bacc.warn-error`` (or whose
    ``until(error=...)`` target was not met), or that says the error could not be
    estimated; also the ill-conditioned decode's warning (its estimate is None)."""
    out = []
    for w in warns:
        kind, _, text = w.partition(": ")
        if kind == "ApproximationWarning" and (
            "above bacc.warn-error" in text
            or "was not met" in text
            or "could not be estimated" in text
        ):
            out.append(w)
        elif "error_estimate is None" in text:
            out.append(w)
    return out


@contextlib.contextmanager
def _default_client(client: Any) -> Any:
    """``client`` as the default client for the block only, for every thread: the driver
    task's ``get_client()`` on an in-process worker then takes it (else the worker makes a
    client of its own, set as the process's default, and every later ``compute`` of the
    tests would go to the cluster)."""
    from distributed.client import _del_global_client, _set_global_client

    _set_global_client(client)
    try:
        with client.as_current():
            yield
    finally:
        _del_global_client(client)
        client._set_as_default = False


# -- the pytest plugin ----------------------------------------------------------------------
class UpstreamCases:
    """A pytest plugin: wraps the assertion helpers; records one row per case and code."""

    def __init__(
        self,
        client: Any,
        codes: tuple[str, ...],
        timeout: float,
        match: str,
        words: dict[str, tuple[str, ...]] | None = None,
        check: bool = True,
        verbose: bool = False,
    ):
        self.client = client
        self.codes = codes
        self.timeout = timeout
        self.match = match
        #: test file name -> the words its tests are selected by
        self.words = words or {}
        self.check = check
        self.verbose = verbose
        self.rows: list[dict[str, Any]] = []
        self.internal: list[str] = []
        self.outcomes: dict[str, str] = {}
        self.current: str | None = None
        self._seen: set[Any] = set()
        self._calls = 0
        self._depth = threading.local()
        self._restore: list[tuple[Any, str, Any]] = []
        self._wrapped: dict[int, Any] = {}

    # selection and patching
    def pytest_collection_modifyitems(self, session: Any, config: Any, items: list[Any]) -> None:
        if self.match != "all":
            keep, drop = [], []
            for item in items:
                text = item.name
                if self.match == "source":
                    fn = getattr(item, "function", None)
                    with contextlib.suppress(OSError, TypeError):
                        text += inspect.getsource(fn) if fn is not None else ""
                words = self.words.get(Path(str(item.fspath)).name, WORDS)
                (keep if any(w in text for w in words) else drop).append(item)
            items[:] = keep
            config.hook.pytest_deselected(items=drop)
        if self.check:
            self._patch()

    def _patch(self) -> None:
        import importlib

        originals: dict[int, Any] = {}
        for mod_name, name in HELPERS:
            try:
                mod = importlib.import_module(mod_name)
            except ImportError:
                continue
            orig = getattr(mod, name, None)
            if orig is None or id(orig) in self._wrapped:
                continue
            originals[id(orig)] = orig
            self._wrapped[id(orig)] = self._wrap(orig, f"{mod_name}.{name}")
        # every module holding one of the originals (the test modules imported them)
        for mod in list(sys.modules.values()):
            for attr, value in list(getattr(mod, "__dict__", {}).items()):
                if id(value) in originals and originals[id(value)] is value:
                    self._restore.append((mod, attr, value))
                    setattr(mod, attr, self._wrapped[id(value)])

    def pytest_unconfigure(self, config: Any) -> None:
        for mod, attr, value in reversed(self._restore):
            setattr(mod, attr, value)
        self._restore.clear()

    def _wrap(self, orig: Any, label: str) -> Any:
        import functools

        @functools.wraps(orig)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(self._depth, "n", 0)
            if depth == 0 and threading.current_thread() is threading.main_thread():
                self._depth.n = 1
                try:
                    self._cases(label, args[:2])
                except Exception as exc:  # never into the test
                    self._internal(exc)
                finally:
                    self._depth.n = 0
            self._depth.n = depth + 1
            try:
                return orig(*args, **kwargs)
            finally:
                self._depth.n = depth

        return wrapper

    # test outcomes
    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self.current = nodeid
        self._calls = 0
        self._seen.clear()

    def pytest_runtest_logreport(self, report: Any) -> None:
        old = self.outcomes.get(report.nodeid)
        if hasattr(report, "wasxfail"):
            new = "xfailed" if report.skipped else "xpassed"
        elif report.failed:
            new = "failed"
        elif report.skipped:
            new = "skipped"
        else:
            new = "passed"
        rank = {None: 0, "passed": 1, "xpassed": 2, "skipped": 3, "xfailed": 4, "failed": 5}
        if rank[new] > rank[old]:
            self.outcomes[report.nodeid] = new

    # the cases
    def _cases(self, label: str, args: tuple[Any, ...]) -> None:
        import dask
        from dask.base import tokenize

        self._calls += 1
        for pos, x in enumerate(args):
            if not dask.is_dask_collection(x):
                continue
            try:
                key: Any = tokenize(x)
            except Exception:
                key = id(x)
            if key in self._seen:
                continue
            self._seen.add(key)
            self._case(label, pos, x)

    def _compute(self, x: Any) -> tuple[str, Any]:
        """("ok", value) | ("raised", exc) | ("hung", None), computed by the client."""
        from concurrent.futures import TimeoutError as FutureTimeout

        fut = None
        try:
            with _default_client(self.client), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fut = self.client.compute(x)
                return "ok", fut.result(timeout=self.timeout)
        except (FutureTimeout, TimeoutError):
            if fut is not None:
                with contextlib.suppress(Exception):
                    fut.cancel()
            return "hung", None
        except Exception as exc:
            return "raised", exc
        finally:
            del fut

    def _case(self, label: str, pos: int, x: Any) -> None:
        import dask_bacc

        kind = f"{type(x).__module__.split('.')[0]}.{type(x).__name__}"
        base = {"test": self.current, "call": self._calls, "arg": pos, "helper": label}
        base["kind"] = kind
        t0 = time.perf_counter()
        plain, expected = self._compute(x)
        plain_s = time.perf_counter() - t0
        for code in self.codes:
            row = {**base, "code": code, "plain": plain, "plain_s": round(plain_s, 3)}
            t0 = time.perf_counter()
            if code in CODING_CODES:
                got, value, coded = self._compute_in_block(x, code.removeprefix("coding-"))
                row["coded_s"] = round(time.perf_counter() - t0, 3)
                row["layers_coded"] = coded
                self._add(self._outcome(row, plain, expected, got, value, []))
                continue
            if code in APPROX_CODES:
                self._add(self._approx_case(row, x, code, plain, expected, t0))
                continue
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    z = dask_bacc.coded(x, code=code)
            except Exception as exc:
                row.update(outcome="crashed", stage="coded()", reason=_short(exc), tb=_tail(exc))
                self._add(row)
                continue
            try:
                lazy = lazy_diff(x, z)
            except Exception as exc:
                self._internal(exc)
                lazy = ["lazy comparison raised (see harness errors)"]
            got, value = self._compute(z)
            row["coded_s"] = round(time.perf_counter() - t0, 3)
            self._add(self._outcome(row, plain, expected, got, value, lazy))

    def _outcome(
        self, row: dict[str, Any], plain: str, expected: Any, got: str, value: Any, lazy: list[str]
    ) -> dict[str, Any]:
        """``row`` with the case's outcome: the coded compute (``got``, ``value``) against
        the plain one (``plain``, ``expected``), and the lazy differences found before."""
        if got == "hung":
            row.update(outcome="hung", stage="compute", reason=f"no result in {self.timeout}s")
        elif plain == "hung":
            row.update(outcome="different", stage="compute", reason="plain hung, coded did not")
        elif got == "raised" and plain == "raised":
            same = type(value) is type(expected) and str(value) == str(expected)
            row.update(
                outcome="identical" if same else "different",
                stage="compute",
                reason="" if same else f"plain {_short(expected)}; coded {_short(value)}",
            )
            if not same:
                row["tb"] = _tail(value)
        elif got == "raised":
            row.update(outcome="crashed", stage="compute", reason=_short(value), tb=_tail(value))
        elif plain == "raised":
            row.update(
                outcome="different", stage="compute", reason=f"plain raised {_short(expected)}"
            )
        else:
            try:
                diffs = lazy + value_diff(expected, value)
            except Exception as exc:
                self._internal(exc)
                diffs = [*lazy, "comparison raised (see harness errors)"]
            row.update(
                outcome="different" if diffs else "identical",
                stage="compute",
                reason="; ".join(diffs),
            )
        if lazy and row["outcome"] == "identical":
            row.update(outcome="different", reason="; ".join(lazy))
        return row

    def _approx_case(
        self, row: dict[str, Any], x: Any, code: str, plain: str, expected: Any, t0: float
    ) -> dict[str, Any]:
        """``row`` with the outcome of ``coded(x, code=code)``, an approximate code: built
        with the client as the default one (coded() plans on its workers), compared with
        the plain result by the rule for approximate decodes."""
        import dask_bacc

        try:
            with _default_client(self.client), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                z = dask_bacc.coded(x, code=code)
        except Exception as exc:
            outcome = "refused" if is_refusal(exc) else "crashed"
            reason = f"{type(exc).__name__}: {exc}" if outcome == "refused" else _short(exc)
            row.update(outcome=outcome, stage="coded()", reason=reason, tb=_tail(exc))
            return row
        notes: list[str] = []
        try:
            lazy = lazy_diff(x, z, notes)
        except Exception as exc:
            self._internal(exc)
            lazy = ["lazy comparison raised (see harness errors)"]
        got, value = self._compute(z)
        row["coded_s"] = round(time.perf_counter() - t0, 3)
        if got == "raised" and is_refusal(value):
            row.update(
                outcome="refused",
                stage="compute",
                reason=f"{type(value).__name__}: {value}",
                tb=_tail(value),
            )
            return row
        if got != "ok" or plain != "ok":
            return self._outcome(row, plain, expected, got, value, lazy)
        try:
            report = dask_bacc.report_of(z, self.client)
            estimate = report.error_estimate
            warns = list(report.warnings)
            row.update(
                estimate=estimate,
                estimate_method=report.estimate_method,
                trigger=report.trigger,
                K=report.K,
                N=report.N,
                used=len(report.returned),
                warnings=warns,
            )
        except Exception as exc:
            estimate, warns = None, []
            row["report_error"] = _short(exc)
        acc = Approx()
        try:
            approx_diff(expected, value, acc)
        except Exception as exc:
            self._internal(exc)
            acc.diffs.append("comparison raised (see harness errors)")
        error = acc.error()
        rounding = ROUNDING_EPS * acc.eps
        bound = ESTIMATE_FACTOR * (estimate or 0.0) + rounding
        excuse = warned_by(warns)
        notes = sorted(set(notes + acc.notes))
        row.update(
            error=error,
            relative=acc.sq_plain > 0,
            bound=bound,
            rounding=rounding,
            values=acc.values,
            notes=notes[:8],
        )
        beyond = list(acc.value_diffs)
        if error > bound:
            what = "relative" if acc.sq_plain > 0 else "absolute (plain is all zeros)"
            beyond.append(
                f"{what} error {error:.3g} above {ESTIMATE_FACTOR:g} x estimate "
                f"{_fmt(estimate)} + rounding {rounding:.2g}; largest difference "
                f"{acc.worst[0]:.3g} {acc.worst[1]}"
            )
        row["within_rule"] = not beyond
        diffs = lazy + acc.diffs
        if diffs:
            outcome, reason = "different", "; ".join(diffs + beyond)
        elif excuse:
            outcome = "warned"
            reason = "; ".join([excuse[0], *(f"beyond the rule: {b}" for b in beyond)])
        elif beyond:
            outcome = "different"
            reason = "no warning; " + "; ".join(beyond)
            if "report_error" in row:
                reason += f"; report_of raised {row['report_error']}"
        elif error == 0 and not notes:
            outcome, reason = "identical", ""
        else:
            outcome, reason = "approximate", ""
        row.update(outcome=outcome, stage="compute", reason=reason)
        return row

    def _compute_in_block(self, x: Any, code: str) -> tuple[str, Any, int]:
        """Like :meth:`_compute`, with ``dask.compute(x)`` inside ``dask_bacc.coding``, in
        a thread of its own (a block applies to its thread; the join bounds the wait);
        also how many layers the block coded."""
        import dask

        import dask_bacc

        out: dict[str, tuple[str, Any]] = {}
        block = dask_bacc.coding(code=code, only="all")

        def run() -> None:
            try:
                with _default_client(self.client), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    with block:
                        out["v"] = ("ok", dask.compute(x)[0])
            except Exception as exc:
                out["v"] = ("raised", exc)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        thread.join(self.timeout)
        got, value = out.get("v", ("hung", None))
        return got, value, sum(layer.coded for layer in block.layers)

    def _internal(self, exc: BaseException) -> None:
        """A failure of this script (not of the case): listed in the summary."""
        text = f"{self.current}: {_short(exc)} at {' / '.join(_tail(exc, 3))}"
        self.internal.append(text)
        print(f"\nupstream_cases: harness error {text}", file=sys.__stderr__, flush=True)

    def _add(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        if self.verbose or row["outcome"] not in ("identical", "approximate"):
            print(
                f"\n[{row['outcome']}] {row['code']} {row['test']} "
                f"(call {row['call']}, arg {row['arg']}): {row.get('reason', '')}",
                file=sys.__stderr__,  # past pytest's capture
                flush=True,
            )


# -- running --------------------------------------------------------------------------------
def installed_test_files(suites: list[str]) -> list[tuple[str, Path]]:
    """(suite, path) of the installed test files; a suite whose package is absent is left out."""
    out = []
    for suite in suites:
        package, rel, _ = SUITES[suite]
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None:
            print(f"{suite}: {package} is not installed, skipped", file=sys.stderr)
            continue
        path = Path(spec.origin).parent / rel
        if not path.exists():
            print(f"{suite}: {path} is not installed, skipped", file=sys.stderr)
            continue
        out.append((suite, path))
    return out


def _stray_clients(client: Any) -> list[str]:
    """The clients other than ``client`` that the run left as the process's default (an
    in-process worker's ``get_client()`` makes one when there is no default client)."""
    from distributed.client import _global_clients

    return [repr(c) for c in list(_global_clients.values()) if c is not client]


def counted(
    plugin: UpstreamCases, baseline: dict[str, str] | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(rows of the tests that passed, rows of the others): passed in the baseline run when
    there is one (a test the wrappers made fail still counts), else in this run."""
    ok = {"passed", "xpassed"}
    outcomes = plugin.outcomes if baseline is None else baseline
    rows = [r for r in plugin.rows if outcomes.get(r["test"]) in ok]
    return rows, [r for r in plugin.rows if outcomes.get(r["test"]) not in ok]


def summary(
    plugin: UpstreamCases, codes: tuple[str, ...], baseline: dict[str, str] | None = None
) -> str:
    rows, dropped = counted(plugin, baseline)
    tests = Counter(plugin.outcomes.values())
    lines = ["tests: " + ", ".join(f"{k} {v}" for k, v in sorted(tests.items()))]
    if baseline is not None:
        base = Counter(baseline.values())
        lines.append("tests, baseline: " + ", ".join(f"{k} {v}" for k, v in sorted(base.items())))
        changed = sorted(t for t, o in plugin.outcomes.items() if baseline.get(t) != o)
        lines += [
            f"  outcome changed: {t}: {baseline.get(t)} -> {plugin.outcomes[t]}" for t in changed
        ]
    not_passed = sorted(t for t, o in plugin.outcomes.items() if o not in ("passed", "xpassed"))
    lines += [f"  did not pass: {t} ({plugin.outcomes[t]})" for t in not_passed]
    lines += [
        f"cases not counted (their test did not pass): {len(dropped)} rows",
        "",
        f"{'code':<18} {'cases':>6} " + " ".join(f"{o:>11}" for o in OUTCOMES),
    ]
    for code in codes:
        mine = [r for r in rows if r["code"] == code]
        n = Counter(r["outcome"] for r in mine)
        lines.append(f"{code:<18} {len(mine):>6} " + " ".join(f"{n[o]:>11}" for o in OUTCOMES))
    lines += _approx_lines(rows, codes)
    for code in codes:
        ran = [r for r in rows if r["code"] == code and "layers_coded" in r]
        if ran:
            some = sum(r["layers_coded"] > 0 for r in ran)
            total = sum(r["layers_coded"] for r in ran)
            lines.append(f"{code}: {some} of {len(ran)} cases had a layer coded ({total} layers)")
    if plugin.internal:
        lines += ["", f"harness errors (failures of this script): {len(plugin.internal)}"]
        lines += [f"- {t}" for t in plugin.internal]
    lines += _refusal_lines(rows, codes)
    bad = [r for r in rows if r["outcome"] in FAILING]
    lines += ["", f"failing cases ({', '.join(FAILING)}): {len(bad)}"]
    for r in bad:
        lines.append(
            f"- [{r['outcome']}] {r['code']} {r['test']} (call {r['call']}, arg {r['arg']}, "
            f"{r['kind']}, {r['helper']}, at {r.get('stage', '')}): {r.get('reason', '')}"
        )
        lines += [f"      {ln}" for ln in r.get("tb", [])[-3:]]
    return "\n".join(lines)


def _approx_lines(rows: list[dict[str, Any]], codes: tuple[str, ...]) -> list[str]:
    """Per approximate code: how the true errors compare with the estimates, and the
    warnings that made cases "warned", grouped."""
    lines: list[str] = []
    for code in codes:
        mine = [r for r in rows if r["code"] == code and "error" in r]
        if code not in APPROX_CODES or not mine:
            continue
        rel = [r for r in mine if r.get("relative")]
        known = [r for r in rel if r.get("estimate") is not None]
        above = [r for r in known if r["error"] > r["estimate"] + r["rounding"]]
        ratios = [r["error"] / r["estimate"] for r in known if r["estimate"] > 0]
        none = sum(r.get("estimate") is None for r in mine)
        excused = sum(r["outcome"] == "warned" and not r.get("within_rule") for r in mine)
        floats = sum(any("float64 as documented" in n for n in r.get("notes", [])) for r in mine)
        lines.append(
            f"{code}: {len(mine)} decoded cases compared; estimate None in {none}; true error "
            f"above the estimate (plus rounding) in {len(above)} of {len(known)} with one, "
            f"largest error/estimate {max(ratios, default=0.0):.3g}; largest error "
            f"{max((r['error'] for r in rel), default=0.0):.3g}; float64 as documented in "
            f"{floats}; plain all zeros in {len(mine) - len(rel)}; warned with the values "
            f"beyond the rule in {excused}"
        )
    warned: dict[str, Counter[str]] = {}
    for r in rows:
        if r["outcome"] == "warned":
            warned.setdefault(_group_key(r["reason"]), Counter())[r["code"]] += 1
    if warned:
        lines += ["", "warnings that made cases 'warned' (first 120 characters*; per code):"]
        for text, n in sorted(warned.items(), key=lambda kv: -sum(kv[1].values())):
            lines.append(f"- {sum(n.values())} x {text!r}: {dict(n)}")
    return lines


def _group_key(text: str) -> str:
    """A message's first 120 characters, its tokens (hex), keys and figures (numbers,
    tuples and lists of numbers) replaced (``*`` in the summary), so that one cause is
    one group."""
    text = re.sub(r"\b[0-9a-f]{8,}\b", "<token>", text)
    text = re.sub(r"\([^()]*<token>[^()]*\)", "(...)", text)  # lists of keys
    text = re.sub(r"'[^'\s]*<token>'", "'<key>'", text)  # a key
    text = re.sub(r"\((?:[\d\s,.()]|nan)*\)", "(...)", text)
    text = re.sub(r"\b\d+(\.\d+)?(e-?\d+)?\b", "#", text)
    text = re.sub(r"\[[#,\s]*\]", "[...]", text)  # lists of numbers
    return text[:120]


def _first_raised(tb: list[str]) -> str:
    """The innermost exception of a row's ``tb`` (:func:`_tail`): its type and where."""
    kind = tb[0].split(":", 1)[0]
    return f"{kind} at {tb[0].rsplit(' at ', 1)[-1]}"


def _refusal_lines(rows: list[dict[str, Any]], codes: tuple[str, ...]) -> list[str]:
    """Every refusal, grouped by its message's first 120 characters (tokens and figures
    replaced), with counts per code, the longest full message, where it was raised and
    the tests it came from."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["outcome"] == "refused":
            groups.setdefault(_group_key(r["reason"]), []).append(r)
    if not groups:
        return []
    total = sum(len(g) for g in groups.values())
    lines = [
        "",
        f"refusals: {total}, {len(groups)} messages (first 120 characters*; per code)",
        "  (* hex tokens as <token>, keys as '<key>', lists of keys and tuples of numbers as "
        "(...), other lists of numbers as [...], numbers as #)",
    ]
    for text, group in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        n = Counter(r["code"] for r in group)
        per = ", ".join(f"{c} {n[c]}" for c in codes if n[c])
        lines.append(f"- {len(group)} x [{per}] {text!r}")
        full = sorted({r["reason"] for r in group}, key=len)
        lines.append(f"      full: {full[-1]}")
        if len(full) > 1:
            lines.append(f"      ({len(full)} distinct full messages)")
        stages = Counter(r.get("stage", "") for r in group)
        where = sorted({_first_raised(r.get("tb") or [""]) for r in group})
        lines.append(f"      stage: {dict(stages)}; first raised: {', '.join(where)}")
        tests = sorted({r["test"].split("::")[-1] for r in group})
        more = f" (+{len(tests) - 12} more)" if len(tests) > 12 else ""
        lines.append(f"      tests: {', '.join(tests[:12])}{more}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--suite", action="append", choices=sorted(SUITES), help="repeatable; default: all"
    )
    parser.add_argument(
        "--code",
        action="append",
        choices=CODES + APPROX_CODES + CODING_CODES,
        help="default: repetition and speculative through coded(); coding-<code>: the "
        "unchanged compute inside dask_bacc.coding(code=<code>, only='all'); the "
        "approximate codes through coded(), compared by the rule for approximate decodes",
    )
    parser.add_argument("--match", choices=("name", "source", "all"), default="name")
    parser.add_argument("-k", dest="keyword", default=None, help="pytest -k, to narrow further")
    parser.add_argument("--timeout", type=float, default=60.0, help="per compute, seconds")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument(
        "--no-check", action="store_true", help="run the tests without the wrappers (baseline)"
    )
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="run the tests once without the wrappers first: count the cases of the tests "
        "that pass there, and list the tests whose outcome the wrappers changed",
    )
    parser.add_argument(
        "--test-timeout", type=float, default=900.0, help="per test, seconds (pytest-timeout)"
    )
    parser.add_argument("--json", type=Path, default=None, help="write every row here")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every case")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    parser.epilog = (
        "Exit status: 0 when no counted case is different, crashed or hung (identical, "
        "approximate, warned and refused are fine) and the harness did not fail, else 1."
    )
    args = parser.parse_args()
    codes = tuple(args.code or DEFAULT_CODES)
    files = installed_test_files(args.suite or list(SUITES))
    if not files:
        print("no test file found", file=sys.stderr)
        return 2

    import pytest
    from distributed import Client, LocalCluster

    cluster = LocalCluster(
        n_workers=args.workers,
        threads_per_worker=1,
        processes=False,
        dashboard_address=None,
        memory_limit=0,
    )
    client = Client(cluster, set_as_default=False)
    words = {Path(SUITES[s][1]).name: SUITES[s][2] for s, _ in files}
    plugin = UpstreamCases(
        client,
        codes,
        args.timeout,
        args.match,
        words,
        check=not args.no_check,
        verbose=args.verbose,
    )
    site = os.path.commonpath([str(p.parent) for _, p in files])
    start = time.perf_counter()
    extra = []
    if importlib.util.find_spec("pytest_timeout") is not None:
        extra = ["-o", f"timeout={args.test_timeout:g}"]
    baseline: dict[str, str] | None = None
    with tempfile.TemporaryDirectory() as tmp:
        ini = Path(tmp) / "pytest.ini"
        ini.write_text("[pytest]\n")  # not the checkout's pyproject settings
        pytest_args = [
            "-c",
            str(ini),
            "--rootdir",
            site,
            "-p",
            "no:cacheprovider",
            "-q",
            "-rN",
            *extra,
            *([] if args.keyword is None else ["-k", args.keyword]),
            *args.pytest_args,
            *[str(p) for _, p in files],
        ]
        if args.baseline and not args.no_check:
            plain = UpstreamCases(client, codes, args.timeout, args.match, words, check=False)
            pytest.main(pytest_args, plugins=[plain])
            baseline = plain.outcomes
        code = pytest.main(pytest_args, plugins=[plugin])
    elapsed = time.perf_counter() - start
    stray = _stray_clients(client)
    client.close()
    cluster.close()
    print()
    print(f"files: {', '.join(s for s, _ in files)}; match={args.match}; {elapsed:.0f} s")
    if args.no_check:
        tests = Counter(plugin.outcomes.values())
        print("tests: " + ", ".join(f"{k} {v}" for k, v in sorted(tests.items())))
    else:
        print(summary(plugin, codes, baseline))
    if stray:
        print(f"clients left as the process's default by the run: {stray}")
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {"tests": plugin.outcomes, "baseline": baseline, "rows": plugin.rows},
                indent=1,
                default=str,
            )
        )
    if code not in (0, 1, 5):  # 1: some test failed (counted apart); 5: none selected
        return int(code)
    rows, _ = counted(plugin, baseline)
    return 1 if plugin.internal or any(r["outcome"] in FAILING for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
