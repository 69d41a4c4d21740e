"""A fuzz run of map_coded over bad and good functions, every code and every input kind
(issue 13): no case hangs, crashes with an undocumented error or leaves a task behind;
an exact code's answer, when it gives one, is plain NumPy's (issue 24: masked results,
values outside transform="log", integers beyond 2**53).

The chaos and fuzz run that found the leaks ran 284 cases; this one runs every
combination of 15 functions, 8 codes and 4 input kinds (480 cases) on one cluster. After
every case the scheduler must hold no ``bacc-`` task of that job, polled with a deadline
and the garbage collector disabled, so a reference cycle keeping keys alive fails here.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import sys

import cloudpickle
import dask.array as da
import numpy as np
import pandas as pd
import pytest
from cluster_helpers import gen_cluster

import dask_bacc
from dask_bacc.testing import assert_no_bacc_tasks

cloudpickle.register_pickle_by_value(sys.modules[__name__])

EIGHT = [("127.0.0.1", 1)] * 8


def ok(b):
    return b * b + 2 * b  # a quadratic: Lagrange of degree 2 decodes it exactly


def raises(b):
    return b / 0 if isinstance(b, int) else 1 / 0


def nan(b):
    return b * np.nan


def inf(b):
    return b / np.zeros_like(b)


def none(b):
    return None


def mapping(b):
    return {"a": 1}


def text(b):
    return "x"


def complex_(b):
    return b * 1j


def ragged(b):
    return np.asarray(b)[np.asarray(b)[..., 0] > 0] if np.ndim(b) > 1 else b[b > 0]


def scalar(b):
    return float(np.sum(b))


def integer(b):
    return (np.asarray(b) > 0).astype(np.int64)


def slow_raise(b):
    import time

    time.sleep(0.01)
    raise KeyError("late failure")


def masked(b):
    return np.ma.masked_less(np.asarray(b, dtype=float), 0.0)


def negative_log(b):
    """Negative on half the data, run with transform="log" (:data:`TRANSFORMS`)."""
    return np.tanh(b)


def big_integer(b):
    """Integers beyond 2**53: exact only where no float arithmetic touches them."""
    return (np.asarray(b) > 0).astype(np.int64) + 2**60


FUNCS = [
    ok,
    raises,
    nan,
    inf,
    none,
    mapping,
    text,
    complex_,
    ragged,
    scalar,
    integer,
    slow_raise,
    # issue 24: answers that were wrong while labelled exact
    masked,
    negative_log,
    big_integer,
]
#: the transform= a function runs with
TRANSFORMS = {negative_log: "log"}
#: functions whose answer, when an exact code gives one, must equal plain NumPy's
#: (exactly for integers)
CHECKED = {ok, big_integer, integer}
CODES = [
    "systematic-spline",  # the default when this was written; repetition is below
    "spline",
    "berrut",
    "systematic-berrut",
    "bspline",
    "repetition",
    "lagrange",
    "uncoded",
    "speculative",
]
EXACT = {"repetition", "lagrange", "uncoded", "speculative"}
RNG = np.random.default_rng(7)
DATA = RNG.standard_normal((24, 3))


def make_input(kind: str):
    if kind == "numpy-2d":
        return DATA
    if kind == "numpy-1d":
        return DATA[:, 0].copy()
    if kind == "dask":
        return da.from_array(DATA, chunks=(6, 3))
    return pd.DataFrame(DATA, columns=["a", "b", "c"])


KINDS = ["numpy-2d", "numpy-1d", "dask", "frame"]
CASES = list(itertools.product(FUNCS, CODES, KINDS))
#: what a case may raise: the documented errors of bad input or bad results, and the
#: user's own exceptions, raised as plain Dask raises them (bacc.on-error "raise"; the
#: test session turns warnings into errors, so inf's RuntimeWarning is one of them)
ALLOWED = (
    dask_bacc.InsufficientResults,
    dask_bacc.InexactDecode,
    ValueError,
    TypeError,
    ZeroDivisionError,
    KeyError,
    RuntimeWarning,
)


def test_the_fuzz_has_at_least_as_many_cases_as_the_chaos_run():
    assert len(CASES) >= 284


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT, timeout=300)
async def test_fuzzed_jobs_end_cleanly_and_leave_no_task(c, s, *workers):
    outcomes: dict[str, int] = {}
    gc.disable()
    try:
        for func, code, kind in CASES:
            where = f"{func.__name__}, code={code}, {kind}"
            data = make_input(kind)
            options = {"degree": 2} if code == "lagrange" else None
            n_blocks = 2 if code == "lagrange" else 4
            job = token = None
            try:
                job = await dask_bacc.submit_coded(
                    func,
                    data,
                    n_blocks=n_blocks,
                    code=code,
                    code_options=options,
                    transform=TRANSFORMS.get(func),
                    timeout=10,
                    client=c,
                )
                token = job.token
                out = await asyncio.wait_for(job.result(), 40)
            except asyncio.TimeoutError:
                pytest.fail(f"{where}: the job hung")
            except ALLOWED as exc:
                outcome = type(exc).__name__
            else:
                outcome = "ok"
                if code in EXACT and func in CHECKED:
                    want = np.asarray(func(data.compute() if kind == "dask" else data))
                    got = np.asarray(out.compute() if kind == "dask" else out)
                    if want.dtype.kind == "f":
                        np.testing.assert_allclose(got, want, err_msg=where)
                    else:  # integers: no rounding under an exact label
                        np.testing.assert_array_equal(got, want, err_msg=where)
                del out
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            # the job is over: its keys leave by reference counting alone
            await assert_no_bacc_tasks(s, token or "", timeout=10)
            del job
    finally:
        gc.enable()
    print(outcomes)
    # the fuzz exercised both ends: answers and every documented kind of failure
    assert outcomes.get("ok", 0) >= 4 * len(CODES), outcomes
    assert outcomes.get("InsufficientResults", 0) > 0, outcomes
    assert outcomes.get("ValueError", 0) > 0, outcomes
    assert outcomes.get("TypeError", 0) > 0, outcomes
