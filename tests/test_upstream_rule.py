"""The rule ``benchmarks/upstream_cases.py`` judges an approximate decode by (issue 41,
item 6): plain Dask's structure (a numeric dtype may become float64), the numeric values
within 2x the job's own estimate, or a warning that excuses them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

ROOT = Path(__file__).resolve().parent.parent


def _load():
    name = "upstream_cases_rule"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks/upstream_cases.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _judge(plain, coded):
    uc = _load()
    acc = uc.Approx()
    uc.approx_diff(plain, coded, acc)
    return acc


def test_a_frame_decoded_in_float64_is_compared_by_its_error_not_its_dtype():
    plain = pd.DataFrame({"a": np.arange(1, 5), "b": np.arange(4.0)}, index=list("wxyz"))
    coded = plain.astype("float64")
    coded.loc["x", "b"] += 0.1
    acc = _judge(plain, coded)
    assert acc.diffs == [] and acc.value_diffs == []
    assert any("float64 as documented" in n for n in acc.notes)  # int64 -> float64
    want = 0.1 / np.linalg.norm(np.r_[np.arange(1, 5), np.arange(4.0)])
    assert np.isclose(acc.error(), want)


def test_structure_and_nan_positions_are_differences_not_errors():
    plain = pd.Series([1.0, 2.0, np.nan], index=[0, 1, 2], name="s")
    assert _judge(plain, plain.set_axis([0, 1, 3])).diffs  # labels: never acceptable
    assert _judge(plain, plain.rename("t")).diffs
    assert _judge(plain, plain.fillna(3.0)).value_diffs  # NaN where plain has none
    a = xr.DataArray(np.arange(3.0), dims="x", coords={"x": [1, 2, 3]})
    assert _judge(a, a.assign_coords(x=[1, 2, 4])).diffs
    assert _judge(a, a + 0.5).diffs == []


def test_only_warnings_about_the_error_excuse_an_answer_beyond_the_rule():
    uc = _load()
    excuse = [
        "ApproximationWarning: ... has an estimated relative error of 0.2 (above "
        "bacc.warn-error=0.1) ...",
        "ApproximationWarning: ... its error could not be estimated (fewer than 2 ...",
    ]
    other = ["SuspectResultsWarning: the results of coded tasks [3] are inconsistent ..."]
    assert uc.warned_by(excuse + other) == excuse
